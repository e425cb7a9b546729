//! The way back, for the model: tools a harness offers its model so it can find
//! and read what left its context — `read_messages` (messages of a chat by seq range, the
//! handle every checkpoint message names), `read_context` (a range of an archive or of a
//! previewed inline result, by the id its preview names) — as schemas in OpenAI's and
//! Anthropic's shapes, and one call that takes the model's arguments and returns the
//! tool-result text ([`Store::history_tool_call`](crate::Store::history_tool_call)).
//!
//! Every read goes through the owner's grant, like any other read: a chat or archive of
//! another owner is "not found". Mistakes in the arguments are answered in text the model
//! can act on; only storage failures are errors.

pub mod tools;
