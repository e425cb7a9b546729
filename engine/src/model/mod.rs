//! Floor 2, the plain data of a conversation: chats, messages, parts, steps and attempts
//! ([`message`]) and their token [`estimate`]s. No I/O.
pub mod estimate;
pub mod message;
