//! The model view: the work of [`Chat::view`](crate::Chat::view) and the `Chat`
//! methods around it ([`ChatView`]) — the guard's previews, the checkpoint swap at the hard
//! line, the index and the compaction plans, usage calibration. The pure rules it applies live below it
//! (`budget`, `compaction`, `approval`, `estimate`); the state it reads is `history`'s.

mod chat;
pub(crate) mod handles;

pub(crate) use chat::ChatView;
