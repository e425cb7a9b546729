"""Runs the OpenAI Agents SDK's own tests twice and compares the failure sets.

1. the sdist's ``tests/`` unmodified (the baseline on this machine);
2. the same tests with ``tests/utils/simple_session.py`` replaced by
   ``simple_session.py`` next to this file (``SimpleListSession`` backed by
   ``undertext.agents.UndertextSession``).

Both runs execute the same test files: by default every file that imports
``simple_session`` (directly, or through a helper module of ``tests/`` that does), the
only files the swap can change; ``--all`` runs the whole suite. Prints both failure sets
and exits 1 unless they are equal. Tests whose outcome differs are run once more, alone and
one run after the other (several of the SDK's tests give a step one second, which a loaded
machine running both suites side by side can miss); they must then agree, or the run fails.

Usage: python run_sdk_suite.py SDIST.tar.gz [--all] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sdist import extract  # noqa: E402 (tests/sdist.py, once the path is set)


def files_using_simple_session(root: Path) -> list[str]:
    """Test files importing simple_session, directly or through one helper module."""
    tests = root / "tests"
    users = {p for p in tests.rglob("*.py") if "simple_session" in p.read_text(errors="replace")}
    helpers = {p for p in users if not p.name.startswith("test_")}
    modules = {".".join(p.relative_to(root).with_suffix("").parts) for p in helpers}
    selected = {p for p in users if p.name.startswith("test_")}
    if modules:
        pattern = re.compile("|".join(re.escape(m) for m in sorted(modules)))
        for p in tests.rglob("test_*.py"):
            if pattern.search(p.read_text(errors="replace")):
                selected.add(p)
    return sorted(str(p.relative_to(root)) for p in selected)


def failures(junit: Path) -> set[str]:
    out = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            out.add(f"{case.get('classname')}::{case.get('name')}")
    return out


def start(root: Path, targets: list[str], junit: Path) -> subprocess.Popen[str]:
    cmd = [
        sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider",
        "--continue-on-collection-errors", f"--junitxml={junit}",
    ]
    return subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(root: Path, proc: subprocess.Popen[str], junit: Path) -> set[str]:
    stdout, stderr = proc.communicate()
    tail = stdout.strip().splitlines()[-1:] if stdout.strip() else []
    print(f"  {root.name}: pytest exit {proc.returncode}; {' '.join(tail)}")
    if not junit.exists():
        print(stdout[-4000:], stderr[-4000:])
        raise SystemExit("pytest wrote no report")
    return failures(junit)


def node_id(root: Path, case: str) -> str:
    """The pytest node id of a JUnit ``classname::name`` (classname: the module's dotted path,
    then any test classes)."""
    classname, name = case.split("::", 1)
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (root / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    raise SystemExit(f"no test file for {case}")


def rerun_alone(base: Path, swap: Path, work: Path, cases: list[str]) -> bool:
    """Runs `cases` again in each copy, one run after the other; True when they agree."""
    ids = [node_id(base, c) for c in cases]
    print(f"re-running the {len(ids)} differing test(s) alone, baseline then with UndertextSession:")
    before = finish(base, start(base, ids, work / "baseline-rerun.xml"), work / "baseline-rerun.xml")
    after = finish(swap, start(swap, ids, work / "undertext-rerun.xml"), work / "undertext-rerun.xml")
    for c in cases:
        print(f"  {c}: baseline {'fails' if c in before else 'passes'}, "
              f"with UndertextSession {'fails' if c in after else 'passes'}")
    return before == after


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sdist", type=Path)
    ap.add_argument("--all", action="store_true", help="run the whole suite, not only the files the swap affects")
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="undertext-sdk-"))
    try:
        base = extract(args.sdist, work / "baseline")
        swap = extract(args.sdist, work / "undertext")
        shutil.copy(HERE / "simple_session.py", swap / "tests" / "utils" / "simple_session.py")
        targets = ["tests"] if args.all else files_using_simple_session(base)
        print(f"SDK tests: {len(targets)} target(s): {' '.join(targets) if len(targets) < 40 else '...'}")
        # The two runs are independent (each in its own copy of the sources): side by side.
        runs = [start(base, targets, work / "baseline.xml"), start(swap, targets, work / "undertext.xml")]
        before = finish(base, runs[0], work / "baseline.xml")
        after = finish(swap, runs[1], work / "undertext.xml")
        print(f"baseline failures ({len(before)}):")
        for f in sorted(before):
            print(f"  {f}")
        print(f"with UndertextSession failures ({len(after)}):")
        for f in sorted(after):
            print(f"  {f}")
        if before != after:
            print("DIFFERENT: only with UndertextSession:", sorted(after - before))
            print("           only in the baseline:     ", sorted(before - after))
            if not rerun_alone(base, swap, work, sorted(before ^ after)):
                print("DIFFERENT when re-run alone too")
                return 1
            print("SAME when re-run alone: the side-by-side run's difference was timing")
            return 0
        print("SAME failure set")
        return 0
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
