//! The publication guard: the one decision that keeps a stale or older checkpoint out. It
//! runs under the chat's writer lock, the same lock edits take, so an edit and a publication
//! are ordered; the loom model below checks the protocol under every interleaving.

use crate::base::error::Conflict;

/// Whether a checkpoint built on `base` reaching `reach` may replace the published one,
/// given the chat's current `revision` and the published checkpoint's reach.
pub(crate) fn check_publish(
    revision: u64,
    published_reach: Option<u64>,
    base: u64,
    reach: u64,
) -> Result<(), Conflict> {
    if revision != base {
        return Err(Conflict::Edited { base, now: revision });
    }
    if let Some(p) = published_reach
        && p >= reach
    {
        return Err(Conflict::NotNewer { published_reach: p });
    }
    Ok(())
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn stale_and_older_checkpoints_are_refused() {
        assert_eq!(check_publish(3, None, 3, 10), Ok(()));
        assert_eq!(check_publish(4, None, 3, 10), Err(Conflict::Edited { base: 3, now: 4 }));
        assert_eq!(check_publish(3, Some(10), 3, 10), Err(Conflict::NotNewer { published_reach: 10 }));
        assert_eq!(check_publish(3, Some(9), 3, 10), Ok(()));
    }
}

/// Deeper run: `LOOM_MAX_PREEMPTIONS=4 cargo test -p undertext --features loom --release --lib
/// checkpoint::guard`.
#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    use loom::sync::{Arc, Mutex};

    use super::*;

    #[derive(Default)]
    struct Chat {
        revision: u64,
        published: Option<(u64, u64)>,
    }

    /// An edit races a fast job and a slow one that read the revision earlier: a checkpoint
    /// built on an old revision never lands after the edit, and a slow job never overwrites
    /// a newer checkpoint.
    #[test]
    fn an_edit_racing_publications_never_lets_a_stale_or_older_checkpoint_land() {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(3);
        }
        builder.check(|| {
            let chat = Arc::new(Mutex::new(Chat::default()));
            let publisher = |reach: u64| {
                let chat = chat.clone();
                loom::thread::spawn(move || {
                    // Build: read the revision from a snapshot (under the lock, as a snapshot is
                    // consistent), then publish later under the lock.
                    let base = chat.lock().unwrap().revision;
                    loom::thread::yield_now();
                    let mut c = chat.lock().unwrap();
                    let before = c.published;
                    if check_publish(c.revision, c.published.map(|p| p.1), base, reach).is_ok() {
                        assert_eq!(c.revision, base, "a stale checkpoint landed");
                        assert!(
                            before.is_none_or(|(_, r)| r < reach),
                            "an older checkpoint replaced a newer one"
                        );
                        c.published = Some((base, reach));
                    }
                })
            };
            let fast = publisher(10);
            let slow = publisher(5);
            let editor = {
                let chat = chat.clone();
                loom::thread::spawn(move || {
                    chat.lock().unwrap().revision += 1;
                })
            };
            fast.join().unwrap();
            slow.join().unwrap();
            editor.join().unwrap();
            let c = chat.lock().unwrap();
            if let Some((base, _)) = c.published {
                assert!(base <= c.revision);
            }
        });
    }
}
