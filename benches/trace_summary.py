"""Summarizes `strace -f -T` output of `publish_trace`: system calls per publication and per
floor write (between the markers), by thread, with their mean time. Usage:
strace -f -T -e trace=newfstatat,statx,pwrite64,write,fdatasync,futex -o t target/release/publish_trace
python3 benches/trace_summary.py t"""
import collections
import re
import sys

regions, cur, main = [], None, None
for line in open(sys.argv[1]):
    if 'undertext-trace-mark-begin' in line:
        main, cur = line.split()[0], []
        continue
    if 'undertext-trace-mark-end' in line:
        if cur is not None:
            regions.append(cur)
        cur = None
        continue
    # Complete calls only (a call interrupted by another thread's is counted on resume).
    m = re.match(r'(\d+)\s+(?:<\.\.\. )?(\w+)(?:\(| resumed>)(.*?)\s+=\s+(-?\w+).*<([\d.]+)>', line)
    if not m:
        continue
    pid, call, args, _, t = m.groups()
    if cur is not None:
        cur.append(('main' if pid == main else 'other', call, float(t)))
for name, rs in (('publish', regions[:200]), ('floor', regions[200:])):
    times = collections.defaultdict(list)
    for r in rs:
        for who, call, t in r:
            times[(who, call)].append(t)
    print(f'{name}: {len(rs)} operations')
    for k in sorted(times):
        v = sorted(times[k])
        print(f'  {k[0]:5} {k[1]:10} {len(v) / len(rs):5.2f} per op, median {v[len(v) // 2] * 1e6:7.1f} us')
