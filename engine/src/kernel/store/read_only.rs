//! Read-only opens ([`Store::open_read_only`](crate::Store::open_read_only)): a store read beside a live writer, or salvaged
//! from damage, without writing a byte.
//!
//! The log is the only thing read. The writer's `index.redb` is not opened (redb is not safe
//! against a commit from another process); the index is built in memory (redb's in-memory
//! backend) by replaying every segment, and [`Store::refresh`](crate::Store::refresh) replays what was appended
//! since. Every segment file is opened once and read through that handle afterwards, so a
//! `gc` that replaces the files under their names leaves the bytes already indexed readable;
//! the next refresh sees the replacement and says to open the store again.
//!
//! A frame that does not decode at the end of the last segment is a batch the writer has not
//! finished (or a torn tail a crash left): it is not seen yet, and nothing is cut. Any other
//! damaged frame is skipped to the next valid batch and reported ([`Store::open_warnings`](crate::Store::open_warnings),
//! [`Refreshed::warnings`]): everything that verifies is readable.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Kernel, core};
use crate::base::error::{Error, Result};
use crate::disk::index::{self, Applied, BatchEntries, Index};
use crate::disk::log::format::{self, SEGMENT_HEADER_LEN};
use crate::disk::log::reader::LogReader;
use crate::disk::log::scan::{ScanEnd, next_valid_batch, walk_batches};
use crate::disk::log::writer::{LogWriter, WriterConfig};
use crate::disk::log::{
    Durability, Layout, Location, Position, fill_listing_gaps, list_segments, log_dir, segment_path,
};
use crate::disk::record::{self, Kind, MsgRec};
use crate::kernel::options::Options;

/// What a [`Store::refresh`](crate::Store::refresh) brought in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// Batches replayed since the last open or refresh.
    pub batches: u64,
    /// Damage met and skipped, one line each (as [`Store::open_warnings`](crate::Store::open_warnings) at open).
    pub warnings: Vec<String>,
}

/// How far a read-only store has replayed the log.
#[derive(Debug)]
pub(crate) struct Follower {
    logd: PathBuf,
    /// The (device, inode) of the log directory at open: a `gc` swaps in a new directory, so
    /// a different one means the log was replaced (one `statx`, however many segments).
    dir_id: (u64, u64),
    state: Mutex<FollowState>,
}

#[derive(Debug)]
struct FollowState {
    /// Where the next batch is expected.
    tail: Position,
    /// The transaction id the next batch should carry (`None` before the first).
    next_txid: Option<u64>,
    /// Offset of the last batch replayed in the tail's segment.
    last_batch: u64,
    /// The (device, inode) of every segment file read, by number.
    ids: HashMap<u64, (u64, u64)>,
    /// The last scan replayed nothing: the next one lists the log directory (see
    /// [`Follower::segments`]).
    idle: bool,
}

/// What a refresh brought in, for the store above: the report, the next chat id, and how
/// the new batches changed each chat they name (the only ones whose state in memory changed).
pub(crate) struct Caught {
    pub(crate) refreshed: Refreshed,
    pub(crate) next_chat: u64,
    pub(crate) chats: Vec<(u64, ChatChange)>,
}

/// How the batches a refresh replayed changed one chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChatChange {
    /// Messages `seqs` appended at `revision`, and nothing else but steps recorded (which
    /// are read from the index at each query): a chat held in memory at that revision and
    /// `seqs.start` messages long is extended with them, not loaded again.
    Appended { revision: u64, seqs: Range<u64> },
    /// Anything else (created, edited, truncated, hidden, deleted, its metadata, pins,
    /// compactions, checkpoint or calibration changed): a chat in memory loads again.
    Changed,
}

/// How `entries` change each chat they name, by chat id. A message's (chat, seq, revision)
/// comes from what the replay listed for the index (no record is decoded again); other
/// records are decoded for their chat.
fn changes_of(entries: &[BatchEntries]) -> Vec<(u64, ChatChange)> {
    let mut out: BTreeMap<u64, ChatChange> = BTreeMap::new();
    for r in entries.iter().flat_map(|b| &b.records) {
        if let Some(index::Listing { key: (chat, seq, rev), .. }) = &r.texts {
            let c = out.entry(*chat).or_insert(ChatChange::Appended { revision: *rev, seqs: *seq..*seq });
            match c {
                ChatChange::Appended { revision, seqs } if *revision == *rev && seqs.end == *seq => {
                    seqs.end += 1;
                }
                _ => *c = ChatChange::Changed,
            }
        } else if r.kind != Kind::Step
            && let Ok(Some(chat)) = index::chat_of(r.kind, &r.payload)
        {
            out.insert(chat, ChatChange::Changed);
        }
    }
    out.into_iter().collect()
}

/// One replay: the index entries of the new batches, where they end, and what was skipped.
struct Scan {
    entries: Vec<BatchEntries>,
    /// The compact message records listing the entries decoded, by location (see
    /// `store::listed`).
    decoded: Vec<(Location, MsgRec)>,
    applied: Applied,
    warnings: Vec<String>,
    tail_file: Arc<File>,
}

/// Why a store is read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadOnly {
    /// Opened with [`Store::open_read_only`](crate::Store::open_read_only).
    Asked,
    /// [`Store::open`](crate::Store::open) met a full disk where it had to write (the index's catch-up with the
    /// log after a crash) and gave a read-only store instead.
    DiskFull,
}

impl ReadOnly {
    /// The error of a write through a store read-only for this reason.
    pub(crate) fn refusal(self) -> Error {
        Error::ReadOnly(
            match self {
                ReadOnly::Asked => {
                    "writes are refused; open the store with `Store::open` (it takes the writer's lock) to write"
                }
                ReadOnly::DiskFull => {
                    "the disk is full: open could not bring the index up to date with the log, so the \
                     store was opened read-only and writes are refused; free space, then open the store \
                     again to write"
                }
            }
            .into(),
        )
    }
}

/// `kernel` if it can write; a store [`Store::open`](crate::Store::open) gave read-only (a full disk) is refused,
/// saying why: for the maintenance that opens a store to write to it (`gc`, a rebuild).
pub(crate) fn writable((kernel, next_chat): (Kernel, u64)) -> Result<(Kernel, u64)> {
    match kernel.core.read_only {
        Some(why) => Err(why.refusal()),
        None => Ok((kernel, next_chat)),
    }
}

/// The store [`Store::open`](crate::Store::open) gives when it ran out of space where it had to write: the same
/// store opened read-only (nothing written), with a warning saying why first.
pub(crate) fn after_disk_full(dir: &Path, opts: Options, e: &Error) -> Result<(Kernel, u64)> {
    tracing::warn!(store = %dir.display(), error = %e, "disk full at open: opening read-only");
    let e = match e {
        Error::Index { message, .. } => message.clone(),
        other => other.to_string(),
    };
    let why = format!(
        "the disk is full: the index could not catch up with the log ({e}); the store is open \
         read-only (every batch of the log is readable, writes are refused) and its files are left as \
         they were; free space and open it again to write"
    );
    open_log_only(dir.to_path_buf(), opts, ReadOnly::DiskFull, vec![why])
}

impl Follower {
    /// Replays every batch from the tail on into entries, pinning each segment file in
    /// `reader`; with `keep`, also keeps the compact message records listing decoded. Never
    /// writes.
    fn scan(&self, reader: &LogReader, keep: bool) -> Result<(Scan, u64)> {
        let mut st = self.state.lock();
        crate::base::io::step(&self.logd, "scan:start");
        self.check_not_replaced(&st)?;
        let segs = self.segments(&st)?;
        crate::base::io::step(&self.logd, "scan:listed");
        let Some(&last) = segs.last() else {
            return Err(Error::corrupt(1, 0, format!("{NO_SEGMENTS}{}, found none", self.logd.display())));
        };
        let mut warnings = Vec::new();
        let mut entries = Vec::new();
        let mut decoded = Vec::new();
        let mut batches = 0u64;
        let mut expect = st.tail.segment;
        let from = st.tail.segment;
        for &n in segs.iter().filter(|&&n| n >= from) {
            if n > expect {
                let which = if n - 1 == expect {
                    format!("log segment {expect} is")
                } else {
                    format!("log segments {expect} to {} are", n - 1)
                };
                warnings.push(format!("{which} missing; its batches are not read"));
            }
            expect = n + 1;
            let file = match reader.pinned(n) {
                Some(f) => f,
                None => {
                    let path = segment_path(&self.logd, n);
                    // A segment listed but gone by the time it is opened: a `gc` swapped the
                    // log in meanwhile, which is the error to give (open again), not the file's.
                    let f = match crate::base::io::open_read(&path) {
                        Ok(f) => Arc::new(f),
                        Err(e) => {
                            self.check_dir()?;
                            return Err(Error::io("open", &path, e));
                        }
                    };
                    let m = f.metadata().map_err(|e| Error::io("stat", &path, e))?;
                    if !m.is_file() {
                        return Err(Error::corrupt(
                            n,
                            0,
                            format!("{} is not a regular file", path.display()),
                        ));
                    }
                    st.ids.insert(n, (m.dev(), m.ino()));
                    reader.pin(n, f.clone());
                    f
                }
            };
            crate::base::io::step(&self.logd, "scan:opened");
            let is_last = n == last;
            // The tail's segment is read from where the last scan stopped (what is before it
            // stays zeros, never touched), a new segment whole.
            let resume = st.tail.segment == n && st.tail.offset >= SEGMENT_HEADER_LEN as u64;
            let from = if resume { st.tail.offset } else { 0 };
            let mut bytes = read_all(&file, &segment_path(&self.logd, n), from)?;
            crate::base::io::step(&self.logd, "scan:read");
            let mut off = if resume {
                st.tail.offset as usize
            } else {
                if bytes.len() < SEGMENT_HEADER_LEN && is_last {
                    // Being created by the writer: nothing in it yet.
                    st.tail = Position::new(n, 0);
                    st.last_batch = 0;
                    st.idle = batches == 0;
                    self.check_dir()?;
                    return Ok((
                        Scan { entries, decoded, applied: applied(&st), warnings, tail_file: file },
                        batches,
                    ));
                }
                if let Err(e) = format::decode_segment_header(&bytes, n) {
                    warnings.push(format!(
                        "log segment {n}: its header is damaged ({e}); its batches are read all the same"
                    ));
                }
                SEGMENT_HEADER_LEN
            };
            if st.tail.segment != n {
                st.last_batch = 0;
            }
            let mut reread = false;
            loop {
                let (end, how) = walk_batches(&bytes, off, |b| {
                    // A log starts at transaction 0 (1 after a collection, which renumbers).
                    if st.next_txid.is_none() && b.txid > 1 {
                        warnings.push(format!(
                            "log segment {n} at offset {}: the log's first batch has transaction id {}, \
                             not 0 or 1: the batches before it are missing",
                            b.offset, b.txid
                        ));
                    }
                    if let Some(t) = st.next_txid
                        && b.txid != t
                    {
                        warnings.push(format!(
                            "log segment {n} at offset {}: expected transaction id {t}, found {}: batches \
                             between are missing",
                            b.offset, b.txid
                        ));
                    }
                    st.next_txid = Some(b.txid + 1);
                    st.last_batch = b.offset;
                    entries.push(index::entries_keeping(n, b, keep.then_some(&mut decoded))?);
                    batches += 1;
                    Ok::<(), Error>(())
                })?;
                match how {
                    ScanEnd::Clean => {
                        off = end as usize;
                        break;
                    }
                    ScanEnd::Damaged { offset, valid_after: false, .. } if is_last => {
                        // A batch the writer has not finished writing (or a torn tail): not
                        // seen yet, and nothing is cut.
                        off = offset as usize;
                        break;
                    }
                    ScanEnd::Damaged { offset, reason, .. } => {
                        if is_last && !reread {
                            // The writer may have written a later batch while this read was
                            // copying the file: read it again, it then holds the earlier one whole.
                            reread = true;
                            bytes = read_all(&file, &segment_path(&self.logd, n), from)?;
                            off = offset as usize;
                            continue;
                        }
                        match next_valid_batch(&bytes, offset as usize + format::ALIGN) {
                            Some(next) => {
                                warnings.push(format!(
                                    "log segment {n} at offset {offset}: {reason}; skipped {} bytes to the \
                                     next valid batch",
                                    next as u64 - offset
                                ));
                                off = next;
                            }
                            None => {
                                warnings.push(format!(
                                    "log segment {n} at offset {offset}: {reason}; the rest of the segment \
                                     ({} bytes) is not read",
                                    bytes.len() as u64 - offset
                                ));
                                off = bytes.len();
                                break;
                            }
                        }
                    }
                }
            }
            st.tail = Position::new(n, off as u64);
            if is_last {
                crate::base::io::step(&self.logd, "scan:done");
                // A `gc` that swapped the log in while this scan listed and opened segments
                // may have mixed the two logs' files: nothing of this scan is applied.
                self.check_dir()?;
                // Reached the newest segment: its file is what reads of the tail use.
                st.idle = batches == 0;
                let a = applied(&st);
                return Ok((Scan { entries, decoded, applied: a, warnings, tail_file: file }, batches));
            }
        }
        // The listing changed under this scan: a `gc` swapped the log in meanwhile.
        self.check_dir()?;
        Err(Error::corrupt(last, 0, NOT_REACHED.to_string()))
    }

    /// The segments to read from the tail's on. A refresh that follows a busy writer probes
    /// the segments after the tail's by name (one `statx` each, up to the first absent), not
    /// listing the directory: a listing reads every entry of the log (thousands of segments
    /// after a while), at every refresh. Segments are made in order, each once the one before
    /// is sealed, so the probe finds what a listing would — but a segment lost behind a later
    /// one, where the probe stops: the first scan, and one after a scan that replayed nothing,
    /// list the directory (and report such a gap).
    fn segments(&self, st: &FollowState) -> Result<Vec<u64>> {
        if st.next_txid.is_some() && !st.idle && st.ids.contains_key(&st.tail.segment) {
            let mut segs = vec![st.tail.segment];
            let mut n = st.tail.segment + 1;
            while std::fs::symlink_metadata(segment_path(&self.logd, n)).is_ok() {
                segs.push(n);
                n += 1;
            }
            return Ok(segs);
        }
        match list_segments(&self.logd) {
            Ok(s) => Ok(fill_listing_gaps(&self.logd, s, st.tail.segment)),
            Err(e) => {
                self.check_dir()?;
                Err(e)
            }
        }
    }

    /// Refuses when the log was replaced since the open (a `gc` ran): the log directory is
    /// another one, or the segment the tail is in is another file. Two `statx`, whatever the
    /// number of segments read (a `gc` swaps the whole directory in).
    fn check_not_replaced(&self, st: &FollowState) -> Result<()> {
        self.check_dir()?;
        let n = st.tail.segment;
        match st.ids.get(&n) {
            Some(&(dev, ino)) => {
                let path = segment_path(&self.logd, n);
                let same = std::fs::symlink_metadata(&path).is_ok_and(|m| m.dev() == dev && m.ino() == ino);
                if same { Ok(()) } else { Err(replaced(&format!("log segment {n} ({})", path.display()))) }
            }
            None => Ok(()),
        }
    }

    /// Refuses when the log directory is no longer the one opened.
    fn check_dir(&self) -> Result<()> {
        match dir_id(&self.logd) {
            Some(id) if id == self.dir_id => Ok(()),
            _ => Err(replaced(&format!("the log directory {}", self.logd.display()))),
        }
    }
}

/// The error of a refresh that found the log replaced (`what` was replaced or removed).
fn replaced(what: &str) -> Error {
    Error::ReadOnly(format!(
        "{what} {REPLACED} (a `gc` of the store rewrote its \
         log); what was read stays readable through this handle, but to see more, open the store again"
    ))
}

/// The (device, inode) of directory `d`.
fn dir_id(d: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(d).ok().map(|m| (m.dev(), m.ino()))
}

fn applied(st: &FollowState) -> Applied {
    Applied { position: st.tail, next_txid: st.next_txid.unwrap_or(0), batch_start: st.last_batch }
}

/// The file as it is now (the writer may be appending), its bytes from `from` on read (those
/// before are zeros: a zeroed allocation, so pages never touched cost no memory).
fn read_all(file: &File, path: &Path, from: u64) -> Result<Vec<u8>> {
    let len = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
    let mut buf = vec![0u8; len as usize];
    let mut at = (from as usize).min(buf.len());
    while at < buf.len() {
        match file.read_at(&mut buf[at..], at as u64) {
            Ok(0) => {
                // Cut shorter meanwhile (the writer trimmed its preallocated zeros).
                buf.truncate(at);
                break;
            }
            Ok(k) => at += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read", path, e)),
        }
    }
    Ok(buf)
}

/// Applies replayed entries to the in-memory index; a batch the index cannot take (its chat
/// was in a damaged batch) is skipped and reported. Returns the skipped batches' indexes.
fn apply(
    index: &Index,
    entries: &[BatchEntries],
    applied: Applied,
    warnings: &mut Vec<String>,
) -> Result<Vec<usize>> {
    if index.apply_replayed(entries, applied).is_ok() {
        return Ok(Vec::new());
    }
    let mut skipped = Vec::new();
    for (i, b) in entries.iter().enumerate() {
        if let Err(e) = index.apply_replayed(std::slice::from_ref(b), applied) {
            skipped.push(i);
            let at = b.records.first().map(|r| r.loc).or_else(|| b.blobs.first().map(|x| x.1));
            let at =
                at.map(|l| format!("log segment {} at offset {}", l.segment, l.offset)).unwrap_or_default();
            warnings.push(format!("a batch ({at}) does not apply to what was read before it: {e}; skipped"));
        }
    }
    index.apply_replayed(&[], applied)?;
    Ok(skipped)
}

/// Lists the inline texts a read-only refresh deferred (see `index/aside_texts.rs`), reading
/// each record again: for a lookup of a text by its content address.
pub(crate) fn list_deferred_texts(core: &core::Core) {
    if !core.index.has_deferred_texts() {
        return;
    }
    core.index.list_deferred_texts(&|loc| {
        let raw = core.read(loc, crate::base::blob::Verify::Checksum)?;
        match record::message_kind(raw.kind).and_then(|k| record::message_texts(k, &raw.payload)) {
            Ok(record::MessageTexts::Listed(texts)) => Ok(texts),
            Ok(_) => Ok(Vec::new()),
            Err(why) => Err(Error::corrupt(loc.segment, loc.offset, why)),
        }
    });
}

/// How many times a read-only open tries again a store that a live writer is creating or
/// collecting (its log not there yet, or changing while it is read) before [`Error::Busy`].
const OPEN_TRIES: u32 = 25;

/// Opens the store in `path` read-only (see `Store::open_read_only_with`); returns the kernel
/// and the next chat id.
///
/// A store being created (no log directory or no segment yet) or collected (a `gc` swapping
/// its log in while it is read) is not damage: while a live process holds the store's `LOCK`,
/// such an open is tried again, up to [`OPEN_TRIES`] times over about a second, and then
/// fails with [`Error::Busy`] naming that process. Without a live holder the error is the
/// open's own (a store without segments and no writer is damage: `Corrupt`).
pub(crate) fn open(path: &Path, opts: Options) -> Result<(Kernel, u64)> {
    opts.check_previews()?;
    let started = std::time::Instant::now();
    let mut wait = std::time::Duration::from_millis(1);
    let mut tries = 0u32;
    loop {
        let e = match open_log_only(path.to_path_buf(), opts.clone(), ReadOnly::Asked, Vec::new()) {
            Ok(k) => return Ok(k),
            Err(e) => e,
        };
        let Some(state) = in_flux(&e) else { return Err(e) };
        let pid = live_writer(path);
        tries += 1;
        match pid {
            // No writer: what was found is what there is.
            None => return Err(e),
            // A writer that has not recorded its pid yet (it is opening the store now): try
            // again, but never call a store busy without a process to name.
            Some(0) if tries >= OPEN_TRIES => return Err(e),
            Some(pid) if tries >= OPEN_TRIES => {
                return Err(Error::Busy {
                    pid,
                    reason: format!(
                        "the store at {} {state} by process {pid} (tried {tries} times over {} ms; last: {e})",
                        path.display(),
                        started.elapsed().as_millis()
                    ),
                });
            }
            Some(_) => {}
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(std::time::Duration::from_millis(50));
    }
}

/// What `e`, from a read-only open, says the store is in the middle of, when it is a state a
/// live writer passes through (see [`open`]): `None` for any other error.
fn in_flux(e: &Error) -> Option<&'static str> {
    match e {
        Error::Corrupt { reason, .. } if reason.starts_with(NO_SEGMENTS) => {
            Some("is being created (its log has no segment yet)")
        }
        Error::Corrupt { reason, .. } if reason == NOT_REACHED => {
            Some("is being collected (its log changed while it was read)")
        }
        Error::ReadOnly(why) if why.contains(REPLACED) => {
            Some("is being collected (`gc` swapped its log in while it was read)")
        }
        Error::NotFound { what } if what.starts_with("store at ") => {
            Some("is being created or collected (its log directory is not there yet)")
        }
        _ => None,
    }
}

/// The pid in the store's `LOCK` when a live process holds it: `Some(0)` when the file is
/// there without a pid (a writer is opening the store at this moment); `None` when there is
/// no `LOCK` or the process it names is gone. Read only: the lock is never taken (that could
/// refuse the writer's own open).
fn live_writer(dir: &Path) -> Option<u32> {
    use std::io::Read;
    let mut text = String::new();
    crate::base::io::open_read(&dir.join(super::lock::LOCK_FILE)).ok()?.read_to_string(&mut text).ok()?;
    let Ok(pid) = text.trim().parse::<u32>() else { return Some(0) };
    let Ok(raw) = libc::pid_t::try_from(pid) else { return None };
    // SAFETY: `kill` with signal 0 sends nothing; it only says whether the process exists.
    let r = unsafe { libc::kill(raw, 0) };
    let alive = r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    alive.then_some(pid)
}

/// The start of the reason of a read-only open that found no segment.
const NO_SEGMENTS: &str = "expected log segments in ";
/// The reason of a read-only scan that listed segments but did not reach the last one.
const NOT_REACHED: &str = "the log's last segment was not reached";
/// What the error of a log replaced under a read-only store says.
const REPLACED: &str = "was replaced or removed since this read-only open";

/// Replays what was appended since the last scan (see `Store::refresh`); returns what it
/// did, the next chat id and the chats the new batches name (those in memory are to be
/// forgotten; the others did not change).
pub(crate) fn refresh(kernel: &Kernel) -> Result<Caught> {
    let Some(f) = &kernel.follower else {
        return Err(Error::InvalidArgument(
            "refresh: expected a store opened with `Store::open_read_only`, found one opened for writing \
             (it always sees its own writes)"
                .into(),
        ));
    };
    let core = &*kernel.core;
    let (scan, batches) = f.scan(&core.reader, true)?;
    let Scan { entries, decoded, applied, mut warnings, tail_file } = scan;
    let chats = changes_of(&entries);
    let skipped = apply(&core.index, &entries, applied, &mut warnings)?;
    if skipped.is_empty() {
        core.index.defer_texts(&entries);
    } else {
        let kept: Vec<_> =
            entries.into_iter().enumerate().filter(|(i, _)| !skipped.contains(i)).map(|(_, b)| b).collect();
        core.index.defer_texts(&kept);
    }
    core.listed.put(decoded);
    core.index.mem.write().set_applied(applied);
    core.log.follow(applied.position.segment, tail_file, applied.position.offset, applied.next_txid);
    Ok(Caught { refreshed: Refreshed { batches, warnings }, next_chat: core.index.next_chat()?, chats })
}

/// A store read from its log alone (see [`Store::open_read_only_with`](crate::Store::open_read_only_with)), read-only for `why`;
/// `warnings` come before what the replay reports.
fn open_log_only(
    dir: PathBuf,
    opts: Options,
    why: ReadOnly,
    mut warnings: Vec<String>,
) -> Result<(Kernel, u64)> {
    let logd = log_dir(&dir);
    match std::fs::symlink_metadata(&logd) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::InvalidArgument(format!(
                "{}: expected the store's log directory, found another kind of entry",
                logd.display()
            )));
        }
        Err(_) => return Err(Error::NotFound { what: format!("store at {}", dir.display()) }),
    }
    let follower = Follower {
        dir_id: dir_id(&logd)
            .ok_or_else(|| Error::NotFound { what: format!("store at {}", dir.display()) })?,
        logd: logd.clone(),
        state: Mutex::new(FollowState {
            tail: Position::new(1, 0),
            next_txid: None,
            last_batch: 0,
            ids: HashMap::new(),
            idle: false,
        }),
    };
    let reader = LogReader::new(logd.clone(), opts.max_mapped_segments);
    let (scan, _) = follower.scan(&reader, false)?;
    let Scan { entries, applied, warnings: found, tail_file, .. } = scan;
    warnings.extend(found);
    let index = Index::in_memory(&dir, opts.index_cache_bytes)?;
    apply(&index, &entries, applied, &mut warnings)?;
    drop(entries);
    index.mem.write().set_applied(applied);
    let next_chat = index.next_chat()?;
    let cfg = WriterConfig {
        dir: logd.clone(),
        layout: Layout { segment_size: opts.segment_size, preallocate: false },
        durability: Durability::None,
    };
    let first = tail_file.try_clone().map_err(|e| Error::io("dup", &logd, e))?;
    let log = Arc::new(LogWriter::new(
        cfg,
        applied.position.segment,
        first,
        applied.position.offset,
        applied.next_txid,
        0,
    ));
    log.follow(applied.position.segment, tail_file, applied.position.offset, applied.next_txid);
    for w in &warnings {
        tracing::warn!(store = %dir.display(), "read-only open: {w}");
    }
    let opts_cache = opts.chunk_cache_bytes;
    let core = Arc::new(core::Core {
        dir,
        opts,
        log,
        reader,
        index: Arc::new(index),
        blob_bodies_read: Default::default(),
        recent_manifests: Default::default(),
        chunk_cache: crate::base::blob::cache::ChunkCache::new(opts_cache),
        grants: Default::default(),
        listed: Default::default(),
        read_only: Some(why),
        remote: Default::default(),
    });
    let kernel = Kernel {
        core,
        indexer: Mutex::new(None),
        lock: Mutex::new(None),
        open_warnings: warnings,
        follower: Some(follower),
    };
    Ok((kernel, next_chat))
}
