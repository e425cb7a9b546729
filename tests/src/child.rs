//! A child process for crash tests: started, its stdout lines collected on a thread, and
//! waited for until it says `ready`; then killed at a moment of the test's choosing.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A running child whose stdout lines arrive in order.
#[derive(Debug)]
pub struct Ready {
    child: Child,
    lines: mpsc::Receiver<String>,
    reader: Option<JoinHandle<()>>,
}

/// Starts `cmd` (stdout piped) and waits up to `timeout` for its first line, which must be
/// `ready`. A child that never says it is killed, and the panic names how it ended and
/// `what` (the test's kill number and seed).
pub fn spawn_until_ready(cmd: &mut Command, timeout: Duration, what: &str) -> Ready {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("{what}: spawn: {e}"));
    let Some(stdout) = child.stdout.take() else { panic!("{what}: the child has no stdout") };
    let (tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    match lines.recv_timeout(timeout) {
        Ok(line) if line == "ready" => Ready { child, lines, reader: Some(reader) },
        got => {
            // Say how the child ended (a signal shows as such), for the record.
            let _ = child.kill();
            let status = child.wait().map(|s| format!("{s:?}")).unwrap_or_else(|e| e.to_string());
            panic!("{what}: the child did not say ready (got {got:?}); it ended with {status}")
        }
    }
}

impl Ready {
    /// Waits for the child to end on its own; returns how it ended.
    pub fn wait(mut self) -> ExitStatus {
        let status = self.child.wait().unwrap_or_else(|e| panic!("waiting for the child: {e}"));
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        status
    }

    /// The next line the child prints (waits for it); `None` once its stdout is closed.
    pub fn next_line(&self) -> Option<String> {
        self.lines.recv().ok()
    }

    /// SIGKILLs the child (nothing if it already ended), waits for it, and returns how it
    /// ended with every line it printed after `ready` (the last may be cut by the kill).
    pub fn kill(mut self) -> (ExitStatus, Vec<String>) {
        let _ = self.child.kill();
        let status = self.child.wait().unwrap_or_else(|e| panic!("waiting for the child: {e}"));
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status, self.lines.try_iter().collect())
    }
}

/// In a crash-test child: opens the store in `dir` in `Group` durability with a quick
/// indexer (so kills land during index flushes too), or exits with status 1 saying why.
pub fn open_or_exit(dir: &str, segment_size: u64) -> undertext::Store {
    let opts = undertext::Options::default()
        .durability(undertext::Durability::Group)
        .segment_size(segment_size)
        .index_flush_interval(Duration::from_millis(5))
        .index_durable_interval(Duration::from_millis(30));
    match undertext::Store::open(dir, opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("open failed: {e}");
            std::process::exit(1);
        }
    }
}

/// Forks; the child runs `child` and exits with its code (100 if it panicked), never
/// returning into the test harness. Returns the child's exit status. The caller's test
/// binary must have no other thread inside a store at the fork (one forking test per binary).
pub fn fork_and_run(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child calls only into the store's code and `child`, then `_exit`s without
    // running the harness's destructors; the caller guarantees no other thread of its test
    // binary is inside a store at the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(100);
        // SAFETY: `_exit` ends the child at once; nothing of the parent's is flushed or closed.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked; `status` is a valid out pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(libc::WIFEXITED(status), "the child did not exit normally (status {status})");
    libc::WEXITSTATUS(status)
}
