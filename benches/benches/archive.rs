//! `read_context` of 4,000 chars at a random offset of a 10 MB mostly-multibyte archive,
//! against the naive `text.chars().skip(n).take(m)` and against copying the range's bytes
//! (the floor), in the same run. Also prints the offset index's size relative to the text.

#![expect(clippy::unwrap_used, reason = "bench harness: failure should abort the bench")]

use criterion::{Criterion, criterion_group, criterion_main};
use undertext::ArchiveText;
use undertext::{Options, Store, Unit};
use undertext_benches::{Rng, bench_tempdir, multibyte_text};

/// About 10 MB of text, mostly multibyte: CJK, Cyrillic, emoji, some ASCII and newlines.
fn text_10mb() -> String {
    multibyte_text(10 << 20, 1)
}

fn read_context(c: &mut Criterion) {
    let text = text_10mb();
    let chars = text.chars().count() as u64;
    let at = ArchiveText::new(text.clone());
    println!(
        "archive: {} bytes, {chars} chars; offset index {} bytes = {:.3}% of the text",
        text.len(),
        at.index_bytes(),
        at.index_bytes() as f64 * 100.0 / text.len() as f64
    );
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let a = store.archive("b", &text).unwrap();
    let mut rng = Rng::new(2);
    let mut g = c.benchmark_group("read_context_4000_chars_of_10MB");
    g.bench_function("undertext_store_read_context", |b| {
        b.iter(|| {
            let n = rng.next_u64() % (chars - 4000);
            store.read_context("b", &a.id, n..n + 4000, Unit::Chars).unwrap()
        })
    });
    g.bench_function("undertext_archive_text_read", |b| {
        b.iter(|| {
            let n = rng.next_u64() % (chars - 4000);
            at.read(n..n + 4000, Unit::Chars).unwrap().to_string()
        })
    });
    g.bench_function("naive_chars_skip_take", |b| {
        b.iter(|| {
            let n = rng.next_u64() % (chars - 4000);
            text.chars().skip(n as usize).take(4000).collect::<String>()
        })
    });
    // The floor: copying the bytes of a 4,000-char range whose byte bounds are known.
    let mut bounds = Vec::new();
    for _ in 0..1024 {
        let n = rng.next_u64() % (chars - 4000);
        let s = at.read(0..n, Unit::Chars).unwrap().len();
        let e = s + at.read(n..n + 4000, Unit::Chars).unwrap().len();
        bounds.push((s, e));
    }
    let mut k = 0;
    g.bench_function("copy_range_bytes", |b| {
        b.iter(|| {
            k = (k + 1) % bounds.len();
            let (s, e) = bounds[k];
            text[s..e].to_string()
        })
    });
    g.finish();

    // Ratios on a shared machine: the four measured in turn, round after round, and each
    // ratio taken within a round (same load), then the median over rounds.
    let per = |n: u32, f: &mut dyn FnMut()| {
        let t = std::time::Instant::now();
        for _ in 0..n {
            f();
        }
        t.elapsed().as_secs_f64() * 1e9 / f64::from(n)
    };
    let (mut store_ns, mut text_ns, mut naive_ns, mut copy_ns) = (vec![], vec![], vec![], vec![]);
    for _ in 0..31 {
        store_ns.push(per(2000, &mut || {
            let n = rng.next_u64() % (chars - 4000);
            std::hint::black_box(store.read_context("b", &a.id, n..n + 4000, Unit::Chars).unwrap());
        }));
        text_ns.push(per(2000, &mut || {
            let n = rng.next_u64() % (chars - 4000);
            std::hint::black_box(at.read(n..n + 4000, Unit::Chars).unwrap().to_string());
        }));
        naive_ns.push(per(8, &mut || {
            let n = rng.next_u64() % (chars - 4000);
            std::hint::black_box(text.chars().skip(n as usize).take(4000).collect::<String>());
        }));
        copy_ns.push(per(2000, &mut || {
            k = (k + 1) % bounds.len();
            let (s, e) = bounds[k];
            std::hint::black_box(text[s..e].to_string());
        }));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratio = |a: &[f64], b: &[f64]| median(a.iter().zip(b).map(|(x, y)| x / y).collect());
    println!(
        "same run, 31 interleaved rounds (medians): read_context {:.0} ns, ArchiveText::read {:.0} ns, naive {:.0} ns, \
         copy {:.0} ns; read_context is {:.0}x faster than naive and {:.2}x the copy; ArchiveText::read is {:.2}x the copy",
        median(store_ns.clone()),
        median(text_ns.clone()),
        median(naive_ns.clone()),
        median(copy_ns.clone()),
        ratio(&naive_ns, &store_ns),
        ratio(&store_ns, &copy_ns),
        ratio(&text_ns, &copy_ns),
    );
}

criterion_group!(benches, read_context);
criterion_main!(benches);
