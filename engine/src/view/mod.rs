//! The model view (floor 11): [`Chat::view`](crate::Chat::view) and the `Chat` methods
//! around it — the guard's previews, the checkpoint swap at the hard line, the index and
//! the compaction plans, usage calibration. The pure rules it applies live below it
//! (`budget`, `compaction`, `approval`, `estimate`); the state it reads is `history`'s.

mod chat;
