//! The model view: the work of [`Chat::view`](crate::Chat::view) and the `Chat`
//! methods around it ([`ChatView`]), one file per concern — the view's entry and what it
//! omits (`chat`), building it (`build`), the checkpoint swap at the hard line (`wall`), usage
//! and calibration (`usage`), the index, compaction plans and approvals (`compaction`), the
//! checkpoint's handles line (`handles`). The pure rules it applies live below it (`budget`,
//! `compaction`, `approval`, `estimate`); the state it reads is `history`'s.

mod build;
mod chat;
mod compaction;
pub(crate) mod handles;
mod usage;
mod wall;

pub(crate) use chat::ChatView;
