//! Fault injection for tests (cargo feature `fault-injection`; never in a normal build).
//!
//! A [`Controller`] is registered for one store directory with [`install`]; every seam
//! operation on a path under that directory asks it first. It can
//!
//! * fail the *N*-th operation (counting every [`Op`]) with `EIO` or `ENOSPC`, once or from
//!   then on ([`Controller::fail_at`], [`Controller::fail_from`]);
//! * cut the power right after the *N*-th successful sync ([`Controller::cut_power_at_sync`]):
//!   every later operation fails with `EIO` (the machine is off), and
//!   [`Controller::restore_power_cut`] then puts every file back to what was durable, the way
//!   the disk would look after the reboot.
//!
//! The durability model behind the power cut is the one POSIX promises and no more: a file's
//! bytes and length are durable once an `fdatasync`/`fsync` of that file returns; a name
//! created or renamed in a directory is durable once an `fsync` of the directory returns (a
//! name that never was is removed, a rename that never was is undone). Removals are taken as
//! durable at once, and directories themselves (the store directory, `log/`) are assumed to
//! survive. Everything written after the last sync of a file is dropped whole — the harshest
//! outcome a power cut can have short of tearing a sector.
//!
//! Controllers are keyed by directory, so tests running in parallel in one process do not
//! interfere.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Error, Result};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

pub use super::Op;

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`: the device failed.
    Eio,
    /// `ENOSPC`: the device is full.
    Enospc,
}

impl FaultKind {
    fn error(self) -> Error {
        match self {
            FaultKind::Eio => Error::from_raw_os_error(5),
            FaultKind::Enospc => Error::from_raw_os_error(28),
        }
    }
}

/// What a power cut put back, from [`Controller::restore_power_cut`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Files whose unsynced writes or resizes were undone.
    pub files_reverted: u64,
    /// Bytes written back to their pre-cut content (or cut away).
    pub bytes_reverted: u64,
    /// Files removed because their name was never made durable.
    pub names_removed: u64,
    /// Files renamed back because their rename was never made durable.
    pub renames_undone: u64,
}

type FileId = (u64, u64);

/// One step back: set the length to `len`, then write `old` at `at`.
#[derive(Debug)]
struct Undo {
    len: u64,
    at: u64,
    old: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    ops: u64,
    by_op: HashMap<Op, u64>,
    syncs: u64,
    injected: u64,
    fail: Option<(u64, FaultKind, bool)>,
    cut_at_sync: Option<u64>,
    off: bool,
    /// Whether writes record what a power cut undoes.
    track: bool,
    undo: HashMap<FileId, Vec<Undo>>,
    /// Durable names of each directory (regular files only).
    names: HashMap<PathBuf, HashMap<OsString, FileId>>,
    /// Bookkeeping failures (a power cut could not be modelled exactly).
    errors: Vec<String>,
    /// Every operation, when tracing.
    trace: Option<Vec<String>>,
    /// The disk is full: writes that would grow a file fail with `ENOSPC`.
    full: bool,
    /// Writes refused because the disk is full.
    full_refusals: u64,
}

/// What runs at a named step (see [`Controller::on_step`]).
type StepHook = Box<dyn FnMut(&str) + Send>;

/// The fault controller of one store directory. Unregistered when dropped.
pub struct Controller {
    dir: PathBuf,
    canonical: PathBuf,
    state: Mutex<State>,
    /// Runs at each named step of the engine's work on this directory (see
    /// [`Controller::on_step`]); taken out while it runs, so steps it causes do not call it.
    step: Mutex<Option<StepHook>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").field("dir", &self.dir).finish_non_exhaustive()
    }
}

static REGISTRY: Mutex<Vec<Arc<Controller>>> = Mutex::new(Vec::new());

/// A registered controller; dropping it unregisters it.
#[derive(Debug)]
pub struct Installed(Arc<Controller>);

impl std::ops::Deref for Installed {
    type Target = Controller;
    fn deref(&self) -> &Controller {
        &self.0
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        REGISTRY.lock().retain(|c| !Arc::ptr_eq(c, &self.0));
    }
}

/// Registers a controller for the store directory `dir` (which must exist). Until it is
/// dropped, every seam operation on a path under `dir` goes through it. It starts passive:
/// counting, failing nothing.
pub fn install(dir: &Path) -> Result<Installed> {
    let canonical = dir.canonicalize()?;
    let c = Arc::new(Controller {
        dir: dir.to_path_buf(),
        canonical,
        state: Mutex::new(State::default()),
        step: Mutex::new(None),
    });
    {
        let mut s = c.state.lock();
        c.snapshot_names(&mut s)?;
    }
    REGISTRY.lock().push(c.clone());
    Ok(Installed(c))
}

fn lookup(at: &Path) -> Option<Arc<Controller>> {
    let reg = REGISTRY.lock();
    if reg.is_empty() {
        return None;
    }
    reg.iter().find(|c| at.starts_with(&c.dir) || at.starts_with(&c.canonical)).cloned()
}

fn file_id(m: &std::fs::Metadata) -> FileId {
    (m.dev(), m.ino())
}

/// Reads `len` bytes at `at` from `file`, reopening it for reading if it is write-only.
fn read_old(file: &File, at: u64, len: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    if file.read_exact_at(&mut buf, at).is_ok() {
        return Ok(buf);
    }
    let again = File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    again.read_exact_at(&mut buf, at)?;
    Ok(buf)
}

/// Runs the step hook of the controller of the directory `at` is under, if it has one, with
/// `name`: a point in the engine's work where a test may act (e.g. run a `gc` between two
/// reads of a read-only refresh) deterministically, instead of hoping a thread lands there.
pub(crate) fn step(at: &Path, name: &str) {
    let Some(c) = lookup(at) else { return };
    let hook = c.step.lock().take();
    if let Some(mut f) = hook {
        f(name);
        let mut slot = c.step.lock();
        if slot.is_none() {
            *slot = Some(f);
        }
    }
}

impl Controller {
    /// Calls `f` with the step's name at each named step of the engine's work on this
    /// directory (today: the steps of a read-only open's scan of the log, `"scan:listed"`,
    /// `"scan:opened"`, `"scan:read"`, `"scan:done"`). Steps that `f` itself causes do not
    /// call it again.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let store = undertext::Store::open(dir.path(), undertext::Options::default())?;
    /// let faults = undertext::fault::install(dir.path())?;
    /// let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    /// let s = seen.clone();
    /// faults.on_step(move |name| s.lock().unwrap().push(name.to_string()));
    /// let reader = undertext::Store::open_read_only(dir.path())?;
    /// reader.refresh()?;
    /// assert!(seen.lock().unwrap().iter().any(|n| n == "scan:done"));
    /// # drop(store);
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_step(&self, f: impl FnMut(&str) + Send + 'static) {
        *self.step.lock() = Some(Box::new(f));
    }

    /// Fails operation number `n` (1-based, counting from install) with `kind`, once.
    pub fn fail_at(&self, n: u64, kind: FaultKind) {
        self.state.lock().fail = Some((n, kind, false));
    }

    /// Fails operation number `n` and every one after it with `kind`.
    pub fn fail_from(&self, n: u64, kind: FaultKind) {
        self.state.lock().fail = Some((n, kind, true));
    }

    /// Cuts the power right after the `n`-th successful sync (file or directory, 1-based,
    /// counting from install): every later operation fails with `EIO`. Also starts recording
    /// what the cut will undo.
    pub fn cut_power_at_sync(&self, n: u64) {
        let mut s = self.state.lock();
        s.cut_at_sync = Some(n);
        s.track = true;
    }

    /// Records what a power cut would undo, without planning one (to cut at a moment the
    /// test chooses with [`Controller::cut_power_now`]).
    pub fn track_durability(&self) {
        self.state.lock().track = true;
    }

    /// Cuts the power now: every later operation fails with `EIO`.
    pub fn cut_power_now(&self) {
        self.state.lock().off = true;
    }

    /// Starts recording every operation (see [`Controller::trace`]).
    pub fn start_trace(&self) {
        self.state.lock().trace = Some(Vec::new());
    }

    /// The operations recorded since [`Controller::start_trace`]: number, kind, path, outcome.
    pub fn trace(&self) -> Vec<String> {
        self.state.lock().trace.clone().unwrap_or_default()
    }

    /// Models a full disk (or not): while on, every write through the seam that would grow
    /// its file, or reach past the blocks a sparse file has, fails with `ENOSPC`; writes over
    /// blocks the file already has, and every other operation, go on (as on a real file system,
    /// where overwriting allocated blocks, growing a file with `set_len` and cutting files need
    /// no space). A write into a hole in the middle of a file is not caught.
    pub fn set_disk_full(&self, full: bool) {
        self.state.lock().full = full;
    }

    /// Writes refused so far because the disk was full.
    pub fn full_refusals(&self) -> u64 {
        self.state.lock().full_refusals
    }

    /// Stops failing operations (the power stays as it is).
    pub fn clear_faults(&self) {
        self.state.lock().fail = None;
    }

    /// Operations counted so far.
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Operations of one kind counted so far.
    pub fn ops_of(&self, op: Op) -> u64 {
        self.state.lock().by_op.get(&op).copied().unwrap_or(0)
    }

    /// Successful syncs (file and directory) so far.
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Faults returned so far (injected failures and operations refused while off).
    pub fn injected(&self) -> u64 {
        self.state.lock().injected
    }

    /// Whether the power was cut.
    pub fn is_off(&self) -> bool {
        self.state.lock().off
    }

    /// Puts every file under the directory back to its durable state (see the module
    /// documentation), then turns the power back on with no fault planned. Call it with the
    /// store closed.
    pub fn restore_power_cut(&self) -> Result<CutReport> {
        let mut s = self.state.lock();
        if let Some(e) = s.errors.first() {
            return Err(Error::other(format!("the power cut cannot be modelled: {e}")));
        }
        let mut report = CutReport::default();
        let mut files = HashMap::new();
        let mut dirs = Vec::new();
        walk(&self.dir, &mut files, &mut dirs)?;
        let by_id: HashMap<FileId, PathBuf> = files.iter().map(|(p, id)| (*id, p.clone())).collect();
        for (id, undos) in s.undo.drain() {
            let Some(path) = by_id.get(&id) else { continue };
            let f = OpenOptions::new().read(true).write(true).open(path)?;
            for u in undos.iter().rev() {
                f.set_len(u.len)?;
                f.write_all_at(&u.old, u.at)?;
                report.bytes_reverted += u.old.len() as u64;
            }
            f.sync_all()?;
            report.files_reverted += 1;
        }
        for dir in dirs {
            let durable = s.names.get(&dir).cloned().unwrap_or_default();
            let mut now = Vec::new();
            for e in std::fs::read_dir(&dir)? {
                let e = e?;
                let m = e.metadata()?;
                if m.is_file() {
                    now.push((e.file_name(), file_id(&m)));
                }
            }
            let want: HashMap<FileId, &OsString> = durable.iter().map(|(n, id)| (*id, n)).collect();
            let mut moves = Vec::new();
            for (name, id) in now {
                if durable.get(&name) == Some(&id) {
                    continue;
                }
                match want.get(&id) {
                    Some(&target) => moves.push((name, target.clone())),
                    None => {
                        std::fs::remove_file(dir.join(&name))?;
                        report.names_removed += 1;
                    }
                }
            }
            // Through temporary names, so that renames which swapped names undo cleanly.
            for (i, (from, _)) in moves.iter().enumerate() {
                std::fs::rename(dir.join(from), dir.join(format!(".undertext-cut-{i}")))?;
            }
            for (i, (_, to)) in moves.iter().enumerate() {
                std::fs::rename(dir.join(format!(".undertext-cut-{i}")), dir.join(to))?;
                report.renames_undone += 1;
            }
            File::open(&dir)?.sync_all()?;
        }
        s.off = false;
        s.fail = None;
        s.cut_at_sync = None;
        self.snapshot_names(&mut s)?;
        Ok(report)
    }

    /// Takes the names now in every directory as durable.
    fn snapshot_names(&self, s: &mut State) -> Result<()> {
        let mut files = HashMap::new();
        let mut dirs = Vec::new();
        walk(&self.dir, &mut files, &mut dirs)?;
        s.names.clear();
        for d in dirs {
            s.names.insert(d, HashMap::new());
        }
        for (p, id) in files {
            if let (Some(parent), Some(name)) = (p.parent(), p.file_name()) {
                s.names.entry(parent.to_path_buf()).or_default().insert(name.to_os_string(), id);
            }
        }
        Ok(())
    }
}

/// Every regular file (with its id) and directory under `dir`, `dir` included.
fn walk(dir: &Path, files: &mut HashMap<PathBuf, FileId>, dirs: &mut Vec<PathBuf>) -> Result<()> {
    dirs.push(dir.to_path_buf());
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        if m.is_dir() {
            walk(&e.path(), files, dirs)?;
        } else if m.is_file() {
            files.insert(e.path(), file_id(&m));
        }
    }
    Ok(())
}

/// Called by the seam before every operation: counts it and fails it if planned.
pub(super) fn before(op: Op, at: &Path, _file: Option<&File>) -> Result<()> {
    let Some(c) = lookup(at) else { return Ok(()) };
    let mut s = c.state.lock();
    s.ops += 1;
    *s.by_op.entry(op).or_default() += 1;
    if s.off {
        s.injected += 1;
        // The machine is off: the device answers nothing.
        return Err(FaultKind::Eio.error());
    }
    let n = s.ops;
    if let Some((at_n, kind, sticky)) = s.fail
        && (n == at_n || (sticky && n > at_n))
    {
        s.injected += 1;
        if let Some(t) = s.trace.as_mut() {
            t.push(format!("{n} {op:?} {} -> {kind:?}", at.display()));
        }
        return Err(kind.error());
    }
    let syncs = s.syncs;
    if let Some(t) = s.trace.as_mut() {
        t.push(format!("{n} {op:?} {} (syncs so far {syncs})", at.display()));
    }
    if op == Op::Remove
        && s.track
        && let Ok(m) = std::fs::metadata(at)
    {
        // Removals are durable at once: forget the file.
        let id = file_id(&m);
        s.undo.remove(&id);
        for names in s.names.values_mut() {
            names.retain(|_, v| *v != id);
        }
    }
    Ok(())
}

fn record(at: &Path, file: &File, undo: impl FnOnce(u64) -> Result<Undo>) {
    let Some(c) = lookup(at) else { return };
    let mut s = c.state.lock();
    if !s.track {
        return;
    }
    let r = file.metadata().and_then(|m| Ok((file_id(&m), undo(m.len())?)));
    match r {
        Ok((id, u)) => s.undo.entry(id).or_default().push(u),
        Err(e) => s.errors.push(format!("{}: {e}", at.display())),
    }
}

/// Called before a write of `len` bytes at `offset`: on a full disk, a write that needs blocks
/// the file does not have fails with `ENOSPC`: one that would grow the file, and one that
/// reaches past the blocks of a sparse file (a file grown by `set_len`, as redb grows its
/// file, has a length but no blocks behind it).
pub(crate) fn check_space(at: &Path, file: &File, offset: u64, len: u64) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Some(c) = lookup(at) else { return Ok(()) };
    let mut s = c.state.lock();
    if !s.full {
        return Ok(());
    }
    let m = file.metadata()?;
    let (cur, allocated) = (m.len(), m.blocks().saturating_mul(512));
    let end = offset.saturating_add(len);
    if end > cur || (cur > allocated && end > allocated) {
        s.full_refusals += 1;
        s.injected += 1;
        if let Some(t) = s.trace.as_mut() {
            t.push(format!("write {} at {offset}+{len} past {cur} -> disk full", at.display()));
        }
        return Err(FaultKind::Enospc.error());
    }
    Ok(())
}

/// Records the bytes a write at `offset` of `len` bytes is about to overwrite.
pub(crate) fn record_write(at: &Path, file: &File, offset: u64, len: u64) {
    record(at, file, |cur| {
        let end = (offset + len).min(cur);
        let old = if end > offset { read_old(file, offset, end - offset)? } else { Vec::new() };
        Ok(Undo { len: cur, at: offset, old })
    });
}

/// Records the bytes a resize to `len` is about to cut away.
pub(crate) fn record_set_len(at: &Path, file: &File, len: u64) {
    record(at, file, |cur| {
        let old = if len < cur { read_old(file, len, cur - len)? } else { Vec::new() };
        Ok(Undo { len: cur, at: len.min(cur), old })
    });
}

fn count_sync(s: &mut State) {
    s.syncs += 1;
    if s.cut_at_sync == Some(s.syncs) {
        s.off = true;
    }
}

/// Called after a file sync returned: what was written to it is durable. If the power went
/// off while the sync ran (another thread's sync was the last one), it fails instead: the
/// caller never learns of a success the disk did not have.
pub(crate) fn synced(at: &Path, file: &File) -> Result<()> {
    let Some(c) = lookup(at) else { return Ok(()) };
    let mut s = c.state.lock();
    if s.off {
        s.injected += 1;
        return Err(FaultKind::Eio.error());
    }
    if s.track {
        match file.metadata() {
            Ok(m) => {
                s.undo.remove(&file_id(&m));
            }
            Err(e) => s.errors.push(format!("{}: {e}", at.display())),
        }
    }
    count_sync(&mut s);
    Ok(())
}

/// Called after a directory sync returned: the names in it are durable (or, as for
/// [`synced`], the power went off first and the sync fails).
pub(super) fn dir_synced(dir: &Path) -> Result<()> {
    let Some(c) = lookup(dir) else { return Ok(()) };
    let mut s = c.state.lock();
    if s.off {
        s.injected += 1;
        return Err(FaultKind::Eio.error());
    }
    if s.track {
        let mut names = HashMap::new();
        let r = std::fs::read_dir(dir).and_then(|rd| {
            for e in rd {
                let e = e?;
                let m = e.metadata()?;
                if m.is_file() {
                    names.insert(e.file_name(), file_id(&m));
                }
            }
            Ok(())
        });
        match r {
            Ok(()) => {
                s.names.insert(dir.to_path_buf(), names);
            }
            Err(e) => s.errors.push(format!("{}: {e}", dir.display())),
        }
    }
    count_sync(&mut s);
    Ok(())
}
