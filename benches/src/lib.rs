//! Shared helpers for the Undertext benchmarks.
//!
//! The criterion benches in `benches/` and the `compression_survey` binary use these to
//! set up the baselines Undertext is compared against, in the same process and on the same
//! disk:
//!
//! * [`FloorWriter`]: the fsync floor, a loop of `write` + `fdatasync` on one file (appending,
//!   or overwriting a file written up front). No durable store can commit one record faster
//!   than this on a given disk.
//! * [`SqliteBlobs`]: SQLite (WAL, `synchronous=FULL`), one `INSERT` per transaction.
//! * [`RedbBlobs`]: redb on its own, one insert per write transaction, `Durability::Immediate`.
//! * [`Rng`], [`random_bytes`], [`transcript_files`], [`text_bytes`], [`chunk_records`]: data
//!   generators, both incompressible and text taken from the real agent transcripts in
//!   `shared/data/transcripts`.
//! * [`bench_tempdir`]: a temporary directory on the same disk as the repository (never a
//!   tmpfs), so that fsync costs are real.
//!
//! Every setup here returns `Result`s with boxed errors; the bench harnesses abort on failure.

use std::error::Error as StdError;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

/// Boxed error used by the helpers.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;
/// Result alias used by the helpers.
pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// Size of the blobs written by the durable-put benches.
pub const PUT_BLOB_SIZE: usize = 2 * 1024;

// ---------------------------------------------------------------------------------------------
// Data generators
// ---------------------------------------------------------------------------------------------

/// A small, fast, deterministic PRNG (SplitMix64). Good enough to make incompressible,
/// distinct blob contents; not for anything cryptographic.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`; equal seeds give equal streams.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Overwrites `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next_u64().to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&last[..n]);
    }
}

/// `len` random (incompressible) bytes from a generator seeded with `seed`.
#[must_use]
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// `count` distinct random blobs of `len` bytes each. Distinct contents matter: Undertext is
/// content-addressed and does not write a blob it already has.
#[must_use]
pub fn distinct_blobs(count: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let mut v = vec![0u8; len];
            rng.fill(&mut v);
            v
        })
        .collect()
}

/// The directory of real agent transcripts.
///
/// `UNDERTEXT_TRANSCRIPTS` if set; otherwise `shared/data/transcripts` beside the workspace
/// (`<workspace>/../shared/data/transcripts`, as laid out for developers and CI); otherwise
/// `/work/shared/data/transcripts`.
#[must_use]
pub fn transcripts_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("UNDERTEXT_TRANSCRIPTS") {
        return PathBuf::from(p);
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts");
    if beside.is_dir() {
        return beside;
    }
    PathBuf::from("/work/shared/data/transcripts")
}

/// All transcript files under `dir`, recursively, sorted by path, skipping the corpus's own
/// `MANIFEST*` and `README*` files.
pub fn transcript_files(dir: &Path) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let ty = entry.file_type()?;
            if ty.is_dir() {
                walk(&path, out)?;
            } else if ty.is_file() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with("MANIFEST") || name.starts_with("README") {
                    continue;
                }
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    out.sort();
    if out.is_empty() {
        return Err(format!("no transcript files under {}", dir.display()).into());
    }
    Ok(out)
}

/// `len` bytes of real transcript text: taken from the largest transcript file under
/// [`transcripts_dir`], starting at `offset` (wrapping around the file if needed).
pub fn text_bytes(len: usize, offset: usize) -> Result<Vec<u8>> {
    let dir = transcripts_dir();
    let mut best: Option<(u64, PathBuf)> = None;
    for f in transcript_files(&dir)? {
        let size = std::fs::metadata(&f)?.len();
        if best.as_ref().is_none_or(|(s, _)| size > *s) {
            best = Some((size, f));
        }
    }
    let (_, path) = best.ok_or("no transcript files")?;
    let data = std::fs::read(&path)?;
    if data.is_empty() {
        return Err(format!("{} is empty", path.display()).into());
    }
    Ok(data.iter().cycle().skip(offset % data.len()).take(len).copied().collect())
}

/// Cuts `data` into records of about `target` bytes each: a record ends after the last newline
/// in `[target / 2, target]` bytes, or at exactly `target` bytes when there is none (so JSONL
/// lines stay whole where they are short enough). The last record may be shorter.
#[must_use]
pub fn chunk_records(data: &[u8], target: usize) -> Vec<&[u8]> {
    assert!(target >= 2, "record target must be at least 2 bytes");
    let mut out = Vec::with_capacity(data.len() / target + 1);
    let mut rest = data;
    while !rest.is_empty() {
        if rest.len() <= target {
            out.push(rest);
            break;
        }
        let window = &rest[target / 2..target];
        let cut = window.iter().rposition(|&b| b == b'\n').map_or(target, |i| target / 2 + i + 1);
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out
}

/// The texts inside a transcript's JSON lines (`data`): every JSON string of 32 bytes or more,
/// unescaped, each followed by a newline — what a message body holds (tool output, code,
/// prose), where the lines themselves are what a saver keeps.
#[must_use]
pub fn json_texts(data: &[u8]) -> Vec<u8> {
    fn strings(v: &serde_json::Value, out: &mut Vec<u8>) {
        match v {
            serde_json::Value::String(s) if s.len() >= 32 => {
                out.extend_from_slice(s.as_bytes());
                out.push(b'\n');
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            serde_json::Value::Object(o) => o.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) {
            strings(&v, &mut out);
        }
    }
    out
}

/// Real message texts of about 2 KB: the shared transcripts' [`json_texts`], cut with
/// [`chunk_records`] (a piece cut inside a character is made valid UTF-8 lossily).
pub fn transcript_texts_2k() -> Result<Vec<String>> {
    let mut texts = Vec::new();
    for file in transcript_files(&transcripts_dir())? {
        let strings = json_texts(&std::fs::read(file)?);
        texts.extend(
            chunk_records(&strings, 2048).into_iter().map(|r| String::from_utf8_lossy(r).into_owned()),
        );
    }
    Ok(texts)
}

// ---------------------------------------------------------------------------------------------
// Temporary directories on a real disk
// ---------------------------------------------------------------------------------------------

/// The file-system type of the mount that holds `path` (from `/proc/self/mounts`), if known.
#[must_use]
pub fn fs_type_of(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (_dev, mnt, ty) = (f.next()?, f.next()?, f.next()?);
        let mnt = mnt.replace("\\040", " ");
        if path.starts_with(&mnt) && best.as_ref().is_none_or(|(l, _)| mnt.len() >= *l) {
            best = Some((mnt.len(), ty.to_owned()));
        }
    }
    best.map(|(_, t)| t)
}

/// About `len` bytes of mostly multibyte text (CJK, Cyrillic, emoji, some ASCII and
/// newlines), the same for equal seeds: the archive of the `read_context` bench and of the
/// `read_context_counts` binary.
///
/// ```
/// let t = undertext_benches::multibyte_text(1000, 1);
/// assert!(t.len() >= 1000 && t.chars().count() < t.len());
/// ```
#[must_use]
pub fn multibyte_text(len: usize, seed: u64) -> String {
    let pieces = ["日本語のテキスト", "Привет мир ", "😀👩‍👩‍👧", "ascii words ", "\n", "中文文本处理", "éèêë"];
    let mut rng = Rng::new(seed);
    let mut s = String::with_capacity(len + 32);
    while s.len() < len {
        s.push_str(pieces[(rng.next_u64() % pieces.len() as u64) as usize]);
    }
    s
}

/// A fresh temporary directory for a bench's stores, on the same disk as the repository.
///
/// Placed under `UNDERTEXT_BENCH_TMPDIR` if set, otherwise under `<workspace>/target/bench-tmp`
/// (never `/tmp`, which may be a tmpfs where fsync is free). Fails if the chosen place is a
/// tmpfs/ramfs, since fsync-bound figures measured there would be meaningless.
pub fn bench_tempdir() -> Result<tempfile::TempDir> {
    let base = std::env::var_os("UNDERTEXT_BENCH_TMPDIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-tmp"), PathBuf::from);
    std::fs::create_dir_all(&base)?;
    if let Some(ty) = fs_type_of(&base)
        && (ty == "tmpfs" || ty == "ramfs")
    {
        return Err(format!(
            "{} is on {ty}: fsync is free there; set UNDERTEXT_BENCH_TMPDIR to a real disk",
            base.display()
        )
        .into());
    }
    Ok(tempfile::Builder::new().prefix("undertext-bench-").tempdir_in(&base)?)
}

// ---------------------------------------------------------------------------------------------
// Baselines
// ---------------------------------------------------------------------------------------------

/// The fsync floor: writes each record to one file with `write`, then `fdatasync`s it.
///
/// One durable commit of one record can't cost less than this on the same disk; a group
/// commit amortises it over many records. Two flavours:
/// * [`FloorWriter::create`] appends, so every `fdatasync` also commits the file's new size
///   (a file-system journal commit on ext4): the floor for a log that grows its files.
/// * [`FloorWriter::create_overwrite`] overwrites a file that was filled and synced up front,
///   so `fdatasync` flushes data only: the floor for a log that preallocates (by writing) its
///   segments, and what SQLite's reused WAL file gets.
#[derive(Debug)]
pub struct FloorWriter {
    file: File,
    /// `Some(size)`: overwrite in place, wrapping at `size`; `None`: append.
    wrap: Option<u64>,
    pos: u64,
}

impl FloorWriter {
    /// Creates (truncating) `path`; records are appended.
    pub fn create(path: &Path) -> Result<Self> {
        let file = OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
        file.sync_all()?;
        if let Some(parent) = path.parent() {
            File::open(parent)?.sync_all()?;
        }
        Ok(Self { file, wrap: None, pos: 0 })
    }

    /// Creates `path` filled with `size` zero bytes, made durable; records then overwrite it in
    /// place from the start, wrapping around at `size`.
    pub fn create_overwrite(path: &Path, size: u64) -> Result<Self> {
        let mut w = Self::create(path)?;
        let zeros = vec![0u8; 1 << 20];
        let mut left = size;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            w.file.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        w.file.sync_all()?;
        w.wrap = Some(size);
        Ok(w)
    }

    /// Writes `record` and makes it durable (`fdatasync`).
    pub fn put(&mut self, record: &[u8]) -> Result<()> {
        match self.wrap {
            None => self.file.write_all(record)?,
            Some(size) => {
                let len = record.len() as u64;
                if len > size {
                    return Err("record larger than the overwrite floor file".into());
                }
                if self.pos + len > size {
                    self.pos = 0;
                }
                std::os::unix::fs::FileExt::write_all_at(&self.file, record, self.pos)?;
                self.pos += len;
            }
        }
        self.file.sync_data()?;
        Ok(())
    }
}

/// SQLite baseline: table `blobs(id BLOB PRIMARY KEY, body BLOB)`, WAL journal,
/// `synchronous=FULL`, one `INSERT` per transaction (autocommit).
///
/// One connection is shared behind a mutex: SQLite serialises writers anyway, and a shared
/// connection avoids its sleeping busy handler, which makes this SQLite's best case for
/// several writer threads in one process.
#[derive(Debug)]
pub struct SqliteBlobs {
    conn: Mutex<rusqlite::Connection>,
}

impl SqliteBlobs {
    /// Creates the database file at `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let conn = rusqlite::Connection::open(path)?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("SQLite refused WAL mode (got {mode})").into());
        }
        conn.execute_batch(
            "PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS blobs (id BLOB PRIMARY KEY, body BLOB) WITHOUT ROWID;",
        )?;
        Ok(Self { conn: Mutex::new(conn) })
    }

    /// Inserts one blob, keyed by its BLAKE3 hash, in its own durable transaction.
    pub fn put(&self, body: &[u8]) -> Result<()> {
        let id = blake3::hash(body);
        let conn = self.conn.lock();
        let mut stmt = conn.prepare_cached("INSERT INTO blobs (id, body) VALUES (?1, ?2)")?;
        stmt.execute(rusqlite::params![id.as_bytes().as_slice(), body])?;
        Ok(())
    }
}

/// The redb table used by [`RedbBlobs`]: BLAKE3 id to body.
pub const REDB_BLOBS: redb::TableDefinition<'static, &[u8; 32], &[u8]> = redb::TableDefinition::new("blobs");

/// redb baseline: one insert per write transaction, committed with `Durability::Immediate`.
///
/// A redb database has one writer at a time; several threads contend on `begin_write`.
#[derive(Debug)]
pub struct RedbBlobs {
    db: redb::Database,
}

impl RedbBlobs {
    /// Creates the database file at `path` with the blobs table in it.
    pub fn create(path: &Path) -> Result<Self> {
        let db = redb::Database::create(path)?;
        let tx = db.begin_write()?;
        tx.open_table(REDB_BLOBS)?;
        tx.commit()?;
        Ok(Self { db })
    }

    /// Inserts one blob, keyed by its BLAKE3 hash, in its own durable transaction.
    pub fn put(&self, body: &[u8]) -> Result<()> {
        let id = blake3::hash(body);
        let mut tx = self.db.begin_write()?;
        tx.set_durability(redb::Durability::Immediate)?;
        {
            let mut table = tx.open_table(REDB_BLOBS)?;
            table.insert(id.as_bytes(), body)?;
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_input_and_respect_target() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| format!("line {i} {}\n", "x".repeat((i % 97) as usize)).into_bytes())
            .collect();
        let chunks = chunk_records(&data, 2048);
        assert_eq!(chunks.concat(), data);
        assert!(chunks.iter().all(|c| c.len() <= 2048));
        assert!(chunks[..chunks.len() - 1].iter().all(|c| c.len() >= 1024));
    }

    #[test]
    fn rng_fills_odd_lengths() {
        let a = random_bytes(13, 7);
        let b = random_bytes(13, 7);
        assert_eq!(a, b);
        assert_ne!(a, random_bytes(13, 8));
    }

    #[test]
    fn baselines_write() {
        let dir = bench_tempdir().unwrap();
        let blob = random_bytes(PUT_BLOB_SIZE, 1);
        FloorWriter::create(&dir.path().join("floor")).unwrap().put(&blob).unwrap();
        let mut w = FloorWriter::create_overwrite(&dir.path().join("floor2"), 4096).unwrap();
        for _ in 0..3 {
            w.put(&blob).unwrap();
        }
        assert_eq!(std::fs::metadata(dir.path().join("floor2")).unwrap().len(), 4096);
        SqliteBlobs::create(&dir.path().join("s.sqlite")).unwrap().put(&blob).unwrap();
        RedbBlobs::create(&dir.path().join("r.redb")).unwrap().put(&blob).unwrap();
    }
}
