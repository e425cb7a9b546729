//! The JSON handed to C: the engine's one encoding (`undertext::json`), so C sees the same
//! shapes as the CLI's `--json` output and Python's dicts.

use serde_json::Value;
use undertext::Message;
use undertext::ViewMessage;
pub(crate) use undertext::json::{
    attempts_json as attempts, chat_page_json as chat_page, message_json as message, meta_json as meta,
};

/// Messages as a JSON array.
pub(crate) fn messages(ms: &[Message]) -> Value {
    Value::Array(ms.iter().map(message).collect())
}

/// View messages (the neutral format): `[{"seqs": [start, end], "role", "parts", "tokens"}]`.
pub(crate) fn view_messages(ms: &[ViewMessage]) -> Value {
    Value::Array(ms.iter().map(undertext::json::view_message_json).collect())
}
