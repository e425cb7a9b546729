//! The append-key record (kind 128, FORMAT.md "Append keys"): an append made with an
//! idempotency key (`Chat::append_idempotent`) writes, in its batch after its messages, which
//! chat, which key and which seqs it took, so that the same key given again returns those
//! seqs instead of appending a second time.
//!
//! Layout: `chat`, `first` (the first seq), `count` (varints), then the key (a varint byte
//! length, then UTF-8). Nothing follows the key.

use super::compact::{Reader, varint};

/// The longest key, in bytes.
pub(crate) const MAX_KEY: usize = 256;

/// An append-key record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AppendKeyRec {
    pub chat: u64,
    pub first: u64,
    pub count: u64,
    pub key: String,
}

impl AppendKeyRec {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.key.len());
        varint(&mut out, self.chat);
        varint(&mut out, self.first);
        varint(&mut out, self.count);
        varint(&mut out, self.key.len() as u64);
        out.extend_from_slice(self.key.as_bytes());
        out
    }

    pub(crate) fn decode(payload: &[u8]) -> Result<AppendKeyRec, String> {
        let bad = |why: String| format!("append-key record does not decode: {why}");
        let mut r = Reader(payload);
        let (chat, first, count) =
            (r.varint().map_err(bad)?, r.varint().map_err(bad)?, r.varint().map_err(bad)?);
        let len = r.varint().map_err(bad)?;
        if len as usize > MAX_KEY {
            return Err(bad(format!("a key of {len} bytes, above {MAX_KEY}")));
        }
        let key = std::str::from_utf8(r.bytes(len).map_err(bad)?)
            .map_err(|_| bad("a key that is not UTF-8".into()))?
            .to_string();
        if !r.0.is_empty() {
            return Err(bad(format!("{} bytes after the key", r.0.len())));
        }
        Ok(AppendKeyRec { chat, first, count, key })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed step fails the test")]

    use super::*;

    #[test]
    fn a_record_reads_back_and_damage_is_refused() {
        let r = AppendKeyRec { chat: 7, first: 300, count: 2, key: "run-1/turn-4 ✓".into() };
        let b = r.encode();
        assert_eq!(AppendKeyRec::decode(&b), Ok(r));
        assert!(AppendKeyRec::decode(&b[..b.len() - 1]).is_err());
        let mut longer = b.clone();
        longer.push(0);
        assert!(AppendKeyRec::decode(&longer).is_err());
        let mut not_utf8 = b[..b.len() - 3].to_vec();
        not_utf8.extend_from_slice(&[0xff, 0xfe, 0xfd]);
        assert!(AppendKeyRec::decode(&not_utf8).is_err());
    }
}
