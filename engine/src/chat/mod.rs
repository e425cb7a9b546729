//! Floor 6, a chat's life on top of the kernel: [`archive`]s and `read_context`, the
//! [`history`] of messages and revisions, [`checkpoint`]s, full-text [`search`], the
//! background [`worker`], the model [`view`] and the model's way back ([`recall`]). Their
//! imports among themselves form no cycle (`scripts/check-layers`): archive, then history,
//! then checkpoints and search, the worker, the view, recall.
pub mod archive;
pub mod checkpoint;
pub mod history;
pub mod recall;
pub mod search;
pub mod view;
pub mod worker;
