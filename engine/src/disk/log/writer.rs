//! Appends batch frames to the active segment and makes them durable (group commit).

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex, RwLock};

use super::Durability;
use super::format::{self, Frame};
use super::{Layout, Position, prealloc, segment_path};
use crate::base::error::{Error, Result};
use crate::base::io;

/// The single log writer. Appends are serialized by `state`; durability waits use `sync`.
#[derive(Debug)]
pub(crate) struct LogWriter {
    dir: PathBuf,
    layout: Layout,
    durability: Durability,
    state: Mutex<WriterState>,
    sync: Mutex<SyncState>,
    synced_cv: Condvar,
    /// The active segment number; every segment below it is sealed and immutable.
    active_segment: AtomicU64,
    /// The active segment's file, for readers (`pread`).
    active_file: RwLock<(u64, Arc<File>)>,
    /// Number of `fdatasync` calls issued on the log (for tests and stats).
    syncs: AtomicU64,
    /// Background preparations of the next segment, joined at close.
    preparers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The process that opened the store: a fork child's copy of the writer writes nothing.
    opener: io::Opener,
}

#[derive(Debug)]
struct WriterState {
    segment: u64,
    file: Arc<File>,
    offset: u64,
    next_txid: u64,
    poisoned: Option<String>,
    /// The size to preallocate the active segment to before the next write (0: none; see
    /// `Recovered::prealloc_to`).
    prealloc_to: u64,
}

#[derive(Debug)]
struct SyncState {
    synced: Position,
    in_progress: bool,
    poisoned: Option<String>,
}

/// How the writer lays out and syncs segments.
#[derive(Debug, Clone)]
pub(crate) struct WriterConfig {
    pub dir: PathBuf,
    pub layout: Layout,
    pub durability: Durability,
}

impl LogWriter {
    /// Starts writing at `end` of segment `segment` (already open, header present).
    /// Everything before `end` is taken as durable (recovery synced it). Before its first
    /// write the segment is preallocated to `prealloc_to` bytes (0: not).
    pub(crate) fn new(
        cfg: WriterConfig,
        segment: u64,
        file: File,
        end: u64,
        next_txid: u64,
        prealloc_to: u64,
    ) -> Self {
        let WriterConfig { dir, layout, durability } = cfg;
        let file = Arc::new(file);
        LogWriter {
            dir,
            layout,
            durability,
            state: Mutex::new(WriterState {
                segment,
                file: file.clone(),
                offset: end,
                next_txid,
                poisoned: None,
                prealloc_to,
            }),
            sync: Mutex::new(SyncState {
                synced: Position::new(segment, end),
                in_progress: false,
                poisoned: None,
            }),
            synced_cv: Condvar::new(),
            active_segment: AtomicU64::new(segment),
            active_file: RwLock::new((segment, file)),
            syncs: AtomicU64::new(0),
            preparers: Mutex::new(Vec::new()),
            opener: io::Opener::here(),
        }
    }

    /// Appends one batch frame. `on_written(start, end, next_txid)` runs under the writer
    /// lock right after the bytes reach the file, so callers can publish index entries in
    /// log order.
    /// Returns the end position, to pass to [`LogWriter::wait_durable`].
    pub(crate) fn append(
        &self,
        mut frame: Frame,
        on_written: impl FnOnce(Position, Position, u64),
    ) -> Result<Position> {
        self.same_process()?;
        let mut st = self.state.lock();
        if let Some(why) = &st.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        let len = frame.len() as u64;
        if st.offset > format::SEGMENT_HEADER_LEN as u64 && st.offset + len > self.layout.capacity(st.segment)
        {
            self.roll_over(&mut st)?;
        }
        if st.prealloc_to > 0 {
            self.preallocate(&mut st);
        }
        let txid = st.next_txid;
        let bytes = frame.seal(txid);
        let start = Position::new(st.segment, st.offset);
        if let Err(e) = io::write_all_at(&st.file, bytes, st.offset, &self.dir) {
            let path = segment_path(&self.dir, st.segment);
            // Cut whatever part of the frame reached the file; if even that fails, the
            // file's tail is unknown and the writer must stop.
            if let Err(e2) = io::set_len(&st.file, st.offset, &self.dir) {
                let why = format!("write failed ({e}) and the partial frame could not be cut ({e2})");
                st.poisoned = Some(why);
            }
            return Err(Error::io("write", path, no_space_said(e)));
        }
        st.offset += len;
        st.next_txid += 1;
        let end = Position::new(st.segment, st.offset);
        on_written(start, end, st.next_txid);
        if self.durability == Durability::Immediate {
            let r = io::sync_data(&st.file, &self.dir);
            self.syncs.fetch_add(1, Ordering::Relaxed);
            let mut s = self.sync.lock();
            match r {
                Ok(()) => s.synced = s.synced.max(end),
                Err(e) => {
                    let why = format!("fdatasync failed: {e}");
                    st.poisoned = Some(why.clone());
                    s.poisoned = Some(why);
                    return Err(Error::io("fdatasync", segment_path(&self.dir, st.segment), e));
                }
            }
        }
        Ok(end)
    }

    /// Writes the zeros an open left for the first write (see `Recovered::prealloc_to`).
    /// Preallocation only speeds appends up: on a full disk (or any failure) whatever part
    /// of the zeros landed is cut off again and the write goes on, extending the file.
    fn preallocate(&self, st: &mut WriterState) {
        let (want, path) = (std::mem::take(&mut st.prealloc_to), segment_path(&self.dir, st.segment));
        let len = match st.file.metadata() {
            Ok(m) => m.len(),
            Err(e) => {
                tracing::warn!(segment = st.segment, error = %e, "stat before preallocating failed; appends extend the log");
                return;
            }
        };
        if len >= want {
            return;
        }
        if let Err(e) = prealloc::zero_fill(&st.file, len, want, &path) {
            tracing::warn!(segment = st.segment, error = %e, "preallocating the log failed; appends extend it");
            if let Err(e) = io::set_len(&st.file, len, &path) {
                tracing::warn!(segment = st.segment, error = %e, "cutting a partial preallocation failed");
            }
        }
    }

    /// Seals the active segment (durably) and opens the next one.
    fn roll_over(&self, st: &mut WriterState) -> Result<()> {
        let path = segment_path(&self.dir, st.segment);
        // A sealed segment keeps no preallocated tail: its size is its data.
        if let Err(e) =
            io::set_len(&st.file, st.offset, &self.dir).and_then(|()| io::sync_data(&st.file, &self.dir))
        {
            let why = format!("fdatasync while sealing failed: {e}");
            st.poisoned = Some(why.clone());
            self.sync.lock().poisoned = Some(why);
            return Err(Error::io("fdatasync", path, e));
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        {
            let mut s = self.sync.lock();
            s.synced = s.synced.max(Position::new(st.segment, st.offset));
        }
        let next = st.segment + 1;
        let file = Arc::new(prealloc::activate(&self.dir, next, self.layout.prealloc(next)).map_err(
            |e| match e {
                Error::Io { op, path, source } => Error::Io { op, path, source: no_space_said(source) },
                e => e,
            },
        )?);
        if self.layout.preallocate {
            // Prepare the one after in the background, off every writer's path.
            let (dir, size) = (self.dir.clone(), self.layout.prealloc(next + 1));
            let spawned = std::thread::Builder::new().name("undertext-prealloc".into()).spawn(move || {
                if let Err(e) = prealloc::prepare(&dir, next + 1, size) {
                    tracing::warn!(error = %e, segment = next + 1, "preparing the next segment failed; it will be made when needed");
                }
            });
            match spawned {
                Ok(h) => {
                    let mut hs = self.preparers.lock();
                    hs.retain(|h| !h.is_finished());
                    hs.push(h);
                }
                Err(e) => tracing::warn!(error = %e, "could not start the segment preparer"),
            }
        }
        st.segment = next;
        st.file = file.clone();
        st.offset = format::SEGMENT_HEADER_LEN as u64;
        *self.active_file.write() = (next, file);
        self.active_segment.store(next, Ordering::Release);
        Ok(())
    }

    /// `Ok` in the process that opened the store, [`Error::Forked`] in a fork child: every
    /// write, sync and read of the log asks first.
    pub(crate) fn same_process(&self) -> Result<()> {
        super::same_process(&self.opener)
    }

    /// Whether the caller is a fork child of the process that opened the store.
    pub(crate) fn is_forked(&self) -> bool {
        self.opener.forked().is_some()
    }

    /// Cuts the active segment's preallocated zeros and syncs it, and removes a prepared
    /// next segment, as the store closes: a closed store's files hold its data only. The next open preallocates
    /// again (see `recovery`). A later append (a handle that outlived the store) extends
    /// the file as without preallocation.
    pub(crate) fn trim_active(&self) -> Result<()> {
        self.same_process()?;
        // A prepared next segment is zeros too: wait for its preparer, then remove it.
        for h in std::mem::take(&mut *self.preparers.lock()) {
            let _ = h.join();
        }
        prealloc::remove_leftovers(&self.dir)?;
        let st = self.state.lock();
        if st.poisoned.is_some() {
            return Ok(());
        }
        let path = segment_path(&self.dir, st.segment);
        let len = st.file.metadata().map_err(|e| Error::io("stat", &path, e))?.len();
        if len <= st.offset {
            return Ok(());
        }
        io::set_len(&st.file, st.offset, &self.dir).map_err(|e| Error::io("set_len", &path, e))?;
        io::sync_data(&st.file, &self.dir).map_err(|e| Error::io("fdatasync", &path, e))?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Waits until everything up to `end` is durable, according to the store's durability.
    pub(crate) fn wait_durable(&self, end: Position) -> Result<()> {
        self.same_process()?;
        match self.durability {
            Durability::None | Durability::Immediate => Ok(()),
            Durability::Group => self.sync_to(end),
        }
    }

    /// Makes everything up to `end` durable, whatever the durability setting.
    ///
    /// Group commit: if an `fdatasync` is in flight, wait for it; if it did not cover `end`,
    /// the first waiter to wake becomes the leader of the next one, which covers every write
    /// made before it started.
    pub(crate) fn sync_to(&self, end: Position) -> Result<()> {
        self.same_process()?;
        let mut s = self.sync.lock();
        loop {
            if s.synced >= end {
                return Ok(());
            }
            if let Some(why) = &s.poisoned {
                return Err(Error::Poisoned(why.clone()));
            }
            if s.in_progress {
                self.synced_cv.wait(&mut s);
                continue;
            }
            s.in_progress = true;
            drop(s);
            let (file, target) = {
                let st = self.state.lock();
                (st.file.clone(), Position::new(st.segment, st.offset))
            };
            let r = io::sync_data(&file, &self.dir);
            self.syncs.fetch_add(1, Ordering::Relaxed);
            s = self.sync.lock();
            s.in_progress = false;
            match r {
                Ok(()) => s.synced = s.synced.max(target),
                Err(e) => {
                    let why = format!("fdatasync failed: {e}");
                    s.poisoned = Some(why.clone());
                    self.synced_cv.notify_all();
                    // Lock order is state -> sync: release sync before taking state.
                    drop(s);
                    self.state.lock().poisoned = Some(why);
                    return Err(Error::io("fdatasync", segment_path(&self.dir, target.segment), e));
                }
            }
            self.synced_cv.notify_all();
        }
    }

    /// Makes everything written so far durable.
    pub(crate) fn sync_all(&self) -> Result<()> {
        self.same_process()?;
        let end = self.written();
        self.sync_to(end)
    }

    /// For a read-only open, which never appends: takes `segment` (read through `file`) as
    /// the active segment, with data up to `end`, so that reads of it go through `file` and
    /// every segment below it is read as sealed.
    pub(crate) fn follow(&self, segment: u64, file: Arc<File>, end: u64, next_txid: u64) {
        let mut st = self.state.lock();
        *self.active_file.write() = (segment, file.clone());
        self.active_segment.store(segment, Ordering::Release);
        st.segment = segment;
        st.file = file;
        st.offset = end;
        st.next_txid = next_txid;
        self.sync.lock().synced = Position::new(segment, end);
    }

    /// The end of the last batch written (durable or not).
    pub(crate) fn written(&self) -> Position {
        let st = self.state.lock();
        Position::new(st.segment, st.offset)
    }

    /// Number of `fdatasync` calls issued on log segments since open.
    pub(crate) fn sync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// The active segment number (segments below it are sealed).
    pub(crate) fn active_segment(&self) -> u64 {
        self.active_segment.load(Ordering::Acquire)
    }

    /// The active segment's file if `segment` is still the active one.
    pub(crate) fn active_file_for(&self, segment: u64) -> Option<Arc<File>> {
        let g = self.active_file.read();
        (g.0 == segment).then(|| g.1.clone())
    }

    /// Blocks appends while `f` runs (used by index rebuild). Everything written is made
    /// durable first; `f` gets the written end.
    pub(crate) fn with_appends_paused<T>(&self, f: impl FnOnce(Position) -> Result<T>) -> Result<T> {
        let mut st = self.state.lock();
        if let Some(why) = &st.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        let end = Position::new(st.segment, st.offset);
        if let Err(e) = io::sync_data(&st.file, &self.dir) {
            let why = format!("fdatasync failed: {e}");
            st.poisoned = Some(why.clone());
            self.sync.lock().poisoned = Some(why);
            return Err(Error::io("fdatasync", segment_path(&self.dir, st.segment), e));
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        {
            let mut s = self.sync.lock();
            s.synced = s.synced.max(end);
        }
        f(end)
    }
}

/// A full disk, said plainly: what it means for the store.
fn no_space_said(e: std::io::Error) -> std::io::Error {
    if e.kind() != std::io::ErrorKind::StorageFull && e.kind() != std::io::ErrorKind::QuotaExceeded {
        return e;
    }
    std::io::Error::new(
        e.kind(),
        format!(
            "{e}: the disk is full. This write was not made; the store stays readable, and writes work \
             again once space is freed"
        ),
    )
}
