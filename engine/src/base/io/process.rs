//! Which process opened a store.
//!
//! A `fork` copies the whole address space into the child — every handle of every open store,
//! the log writer's position, the index's cached pages — but not the threads: the child has
//! no indexer, no group-commit leader, no worker, and locks that a parent thread held at the
//! fork stay held forever. Writing through those copies appends at offsets the parent also
//! writes, commits index pages the parent also commits, and cuts the active segment at close:
//! acknowledged writes of either side are lost. So a store belongs to the process that opened
//! it; in any other process (a fork child) every call fails with `Error::Forked` and dropping
//! the last handle writes nothing.

/// The process that opened a store (a pid taken at open), compared with the caller's.
///
/// ```ignore
/// let opener = Opener::here();
/// assert_eq!(opener.forked(), None); // same process
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opener {
    pid: u32,
}

impl Opener {
    /// The calling process.
    pub(crate) fn here() -> Opener {
        Opener { pid: std::process::id() }
    }

    /// The pid of the process that opened the store.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// `Some(caller's pid)` when the caller is not the process that opened the store (a fork
    /// of it); `None` in the opener itself. One `getpid` call.
    pub(crate) fn forked(&self) -> Option<u32> {
        let now = std::process::id();
        (now != self.pid).then_some(now)
    }

    /// An I/O error for a file operation refused in a fork child (the seam's answer; the
    /// layers above turn a fork into `Error::Forked` before they reach a file).
    pub(crate) fn refuse_io(&self) -> std::io::Result<()> {
        match self.forked() {
            None => Ok(()),
            Some(now) => Err(std::io::Error::other(format!(
                "process {now} is a fork of process {}, which opened this store: a fork child never writes to it",
                self.pid
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opening_process_is_not_a_fork() {
        let o = Opener::here();
        assert_eq!(o.forked(), None);
        assert!(o.refuse_io().is_ok());
        assert_eq!(o.pid(), std::process::id());
    }

    #[test]
    fn another_pid_is_a_fork_and_its_file_operations_are_refused() {
        let o = Opener { pid: std::process::id().wrapping_add(1) };
        assert_eq!(o.forked(), Some(std::process::id()));
        let e = o.refuse_io().unwrap_err().to_string();
        assert!(e.contains("is a fork of process"), "{e}");
    }
}
