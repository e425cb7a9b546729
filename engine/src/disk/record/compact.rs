//! The compact encoding of a message record (kind 17, FORMAT.md "Compact message records"):
//! varints instead of rkyv's fixed-width, aligned fields, each part only as long as its own
//! fields, the whole compressed when that pays. A LangGraph saver record (a ~340-byte JSON
//! text and an attachment) takes ~400 bytes this way against ~770 as an rkyv `MsgRec`.
//!
//! Layout: a version byte (1), a codec byte (as a record header's: 0 none, 1 zstd, 2 LZ4),
//! for a compressed body the varint length of the raw body, then the body:
//!
//! ```text
//! chat seq revision (varints) role (u8) turn at_ms (varints)
//! step: 0 | 1 turn (varint) stream_id (str) step (varint)
//! body: 0 count (varint) part* | 1 blob id (32 bytes)
//! part: tag (u8) then its fields in declaration order: str = varint length + UTF-8 bytes,
//!       bool = u8 0/1, option = u8 0/1 then the value, ids 32 bytes, numbers varints
//! ```
//!
//! Decoding checks every length against what is left and every byte it interprets (a tag, a
//! bool, UTF-8); it never panics on any input.

use super::{ArchiveRefRec, BodyRec, MsgRec, PartRec, StepTagRec};
use crate::base::blob::Compression;
use crate::base::blob::{codec_flag_none, compress, decompress};

/// The version byte of the encoding written now.
const VERSION: u8 = 1;

/// Encodes `rec`, compressed with `compression` when that saves at least an eighth.
pub(crate) fn encode(rec: &MsgRec, compression: Compression) -> Vec<u8> {
    let mut body = Vec::with_capacity(64);
    put_message(&mut body, rec);
    let (codec, stored) = compress(compression, &body);
    let mut out = Vec::with_capacity(body.len() + 8);
    out.push(VERSION);
    out.push(codec);
    match stored {
        Some(z) => {
            varint(&mut out, body.len() as u64);
            out.extend_from_slice(&z);
        }
        None => out.extend_from_slice(&body),
    }
    out
}

/// Decodes a compact message record.
pub(crate) fn decode(payload: &[u8]) -> Result<MsgRec, String> {
    let bad = |why: &str| format!("compact message record does not decode: {why}");
    let (&version, rest) = payload.split_first().ok_or_else(|| bad("empty"))?;
    if version != VERSION {
        return Err(bad(&format!("encoding version {version}, expected {VERSION}")));
    }
    let (&codec, rest) = rest.split_first().ok_or_else(|| bad("no codec byte"))?;
    let raw;
    let body = if codec == codec_flag_none() {
        rest
    } else {
        let mut r = Reader(rest);
        let len = r.varint().map_err(|e| bad(&e))?;
        if len > crate::disk::log::format::MAX_RECORD_LEN as u64 {
            return Err(bad(&format!("raw length {len} exceeds a record's limit")));
        }
        raw = decompress(codec, r.0, len as usize).map_err(|e| bad(&e))?;
        &raw[..]
    };
    let mut r = Reader(body);
    let rec = get_message(&mut r).map_err(|e| bad(&e))?;
    if !r.0.is_empty() {
        return Err(bad(&format!("{} bytes after the message", r.0.len())));
    }
    Ok(rec)
}

/// Appends `v` as a LEB128 varint (7 bits a byte, low first); read by [`Reader::varint`].
/// Also the index's encoding of its variable rows (`index::blob_row`, `messages`).
pub(crate) fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_opt_str(out: &mut Vec<u8>, s: &Option<String>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            put_str(out, s);
        }
    }
}

fn put_message(out: &mut Vec<u8>, rec: &MsgRec) {
    varint(out, rec.chat);
    varint(out, rec.seq);
    varint(out, rec.revision);
    out.push(rec.role);
    varint(out, rec.turn);
    varint(out, rec.at_ms);
    match &rec.step {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            varint(out, s.turn);
            put_str(out, &s.stream_id);
            varint(out, u64::from(s.step));
        }
    }
    match &rec.body {
        BodyRec::Inline(parts) => {
            out.push(0);
            varint(out, parts.len() as u64);
            for p in parts {
                put_part(out, p);
            }
        }
        BodyRec::Blob(id) => {
            out.push(1);
            out.extend_from_slice(id);
        }
    }
}

fn put_part(out: &mut Vec<u8>, p: &PartRec) {
    match p {
        PartRec::Text(t) => {
            out.push(0);
            put_str(out, t);
        }
        PartRec::ToolCall { id, name, args } => {
            out.push(1);
            put_str(out, id);
            put_str(out, name);
            put_str(out, args);
        }
        PartRec::ToolResultText { call_id, text, is_error } => {
            out.push(2);
            put_str(out, call_id);
            put_str(out, text);
            out.push(u8::from(*is_error));
        }
        PartRec::ToolResultArchived { call_id, archive, preview, is_error } => {
            out.push(3);
            put_str(out, call_id);
            out.extend_from_slice(&archive.id);
            varint(out, archive.bytes);
            varint(out, archive.chars);
            varint(out, archive.utf16_units);
            varint(out, archive.lines);
            put_str(out, preview);
            out.push(u8::from(*is_error));
        }
        PartRec::ApprovalRequest { id, call_id, prompt } => {
            out.push(4);
            put_str(out, id);
            put_opt_str(out, call_id);
            put_str(out, prompt);
        }
        PartRec::ApprovalResponse { id, approved, reason } => {
            out.push(5);
            put_str(out, id);
            out.push(u8::from(*approved));
            put_opt_str(out, reason);
        }
        PartRec::Attachment { mime, blob } => {
            out.push(6);
            put_str(out, mime);
            out.extend_from_slice(blob);
        }
        PartRec::Summary(t) => {
            out.push(7);
            put_str(out, t);
        }
    }
}

/// Writes a location in the log as three varints: segment, offset, length (how the index's
/// rows hold one; [`Reader::loc`] reads it).
pub(crate) fn varint_loc(out: &mut Vec<u8>, (segment, offset, len): (u64, u64, u32)) {
    varint(out, segment);
    varint(out, offset);
    varint(out, u64::from(len));
}

/// Reads from the front of a byte slice, checking every length.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        let (&b, rest) = self.0.split_first().ok_or("ends early")?;
        self.0 = rest;
        Ok(b)
    }

    pub(crate) fn bytes(&mut self, n: u64) -> Result<&'a [u8], String> {
        if n > self.0.len() as u64 {
            return Err(format!("a field of {n} bytes, {} left", self.0.len()));
        }
        let (a, b) = self.0.split_at(n as usize);
        self.0 = b;
        Ok(a)
    }

    /// A location [`varint_loc`] wrote: (segment, offset, length).
    pub(crate) fn loc(&mut self) -> Result<(u64, u64, u32), String> {
        let (segment, offset, len) = (self.varint()?, self.varint()?, self.varint()?);
        let len = u32::try_from(len).map_err(|_| format!("a length of {len} bytes, above u32"))?;
        Ok((segment, offset, len))
    }

    pub(crate) fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let low = u64::from(b & 0x7f);
            if shift == 63 && low > 1 {
                return Err("a varint overflows 64 bits".into());
            }
            v |= low << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn bool(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("a flag byte {b}, expected 0 or 1")),
        }
    }

    fn id(&mut self) -> Result<[u8; 32], String> {
        let b = self.bytes(32)?;
        let mut id = [0u8; 32];
        id.copy_from_slice(b);
        Ok(id)
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.varint()?;
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec()).map_err(|e| format!("a text that is not UTF-8: {e}"))
    }

    fn opt_string(&mut self) -> Result<Option<String>, String> {
        Ok(if self.bool()? { Some(self.string()?) } else { None })
    }
}

fn get_message(r: &mut Reader<'_>) -> Result<MsgRec, String> {
    let chat = r.varint()?;
    let seq = r.varint()?;
    let revision = r.varint()?;
    let role = r.u8()?;
    let turn = r.varint()?;
    let at_ms = r.varint()?;
    let step = if r.bool()? {
        let turn = r.varint()?;
        let stream_id = r.string()?;
        let step = u32::try_from(r.varint()?).map_err(|_| "a step number above u32")?;
        Some(StepTagRec { turn, stream_id, step })
    } else {
        None
    };
    let body = match r.u8()? {
        0 => {
            let n = r.varint()?;
            // Each part takes at least two bytes: a count beyond that is damage, not a size to
            // allocate for.
            if n > r.0.len() as u64 / 2 {
                return Err(format!("{n} parts in {} bytes", r.0.len()));
            }
            let mut parts = Vec::with_capacity(n as usize);
            for _ in 0..n {
                parts.push(get_part(r)?);
            }
            BodyRec::Inline(parts)
        }
        1 => BodyRec::Blob(r.id()?),
        t => return Err(format!("body tag {t}, expected 0 or 1")),
    };
    Ok(MsgRec { chat, seq, revision, role, turn, at_ms, step, body })
}

fn get_part(r: &mut Reader<'_>) -> Result<PartRec, String> {
    Ok(match r.u8()? {
        0 => PartRec::Text(r.string()?),
        1 => PartRec::ToolCall { id: r.string()?, name: r.string()?, args: r.string()? },
        2 => PartRec::ToolResultText { call_id: r.string()?, text: r.string()?, is_error: r.bool()? },
        3 => {
            let call_id = r.string()?;
            let archive = ArchiveRefRec {
                id: r.id()?,
                bytes: r.varint()?,
                chars: r.varint()?,
                utf16_units: r.varint()?,
                lines: r.varint()?,
            };
            PartRec::ToolResultArchived { call_id, archive, preview: r.string()?, is_error: r.bool()? }
        }
        4 => PartRec::ApprovalRequest { id: r.string()?, call_id: r.opt_string()?, prompt: r.string()? },
        5 => PartRec::ApprovalResponse { id: r.string()?, approved: r.bool()?, reason: r.opt_string()? },
        6 => PartRec::Attachment { mime: r.string()?, blob: r.id()? },
        7 => PartRec::Summary(r.string()?),
        t => return Err(format!("part tag {t}, expected 0 to 7")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::record::Kind;
    use crate::model::message::Role;

    fn every_part() -> MsgRec {
        MsgRec {
            chat: 7,
            seq: 300,
            revision: 2,
            role: 2,
            turn: 5,
            at_ms: 1_764_000_000_000,
            step: Some(StepTagRec { turn: 5, stream_id: "s-1".into(), step: 9 }),
            body: BodyRec::Inline(vec![
                PartRec::Text("héllo 👋".into()),
                PartRec::ToolCall { id: "c1".into(), name: "read".into(), args: "{\"path\":\"a\"}".into() },
                PartRec::ToolResultText { call_id: "c1".into(), text: "ok ".repeat(100), is_error: false },
                PartRec::ToolResultArchived {
                    call_id: "c2".into(),
                    archive: ArchiveRefRec {
                        id: [3; 32],
                        bytes: 1 << 40,
                        chars: 5,
                        utf16_units: 6,
                        lines: 7,
                    },
                    preview: "pre".into(),
                    is_error: true,
                },
                PartRec::ApprovalRequest { id: "a1".into(), call_id: None, prompt: "run rm?".into() },
                PartRec::ApprovalResponse { id: "a1".into(), approved: false, reason: Some("no".into()) },
                PartRec::Attachment { mime: "lg".into(), blob: [9; 32] },
                PartRec::Summary(String::new()),
            ]),
        }
    }

    #[test]
    fn the_listing_a_writer_gives_equals_the_one_read_back_from_the_record() {
        // The kernel indexes a message by the listing its writer gives (`RecordOut::message`),
        // a replayed one by decoding: both must be the same, for every role and body shape.
        let mut recs = Vec::new();
        let roles = [(Role::User, false), (Role::User, true), (Role::Assistant, false), (Role::Tool, false)];
        for (role, feedback) in roles.into_iter().chain([(Role::System, false)]) {
            {
                let role = super::super::role_byte(role, feedback);
                recs.push(MsgRec { role, ..every_part() });
                recs.push(MsgRec { role, body: BodyRec::Blob([4; 32]), step: None, ..every_part() });
                recs.push(MsgRec { role, body: BodyRec::Inline(Vec::new()), ..every_part() });
            }
        }
        for rec in recs {
            let given = super::super::message_listing(&rec).unwrap();
            let bytes = encode(&rec, Compression::Zstd(1));
            let (head, texts, _) =
                super::super::message_key_texts(Kind::MessageCompact, &bytes, false).unwrap();
            assert_eq!(given, (head, texts), "{rec:?}");
        }
    }

    #[test]
    fn a_compact_message_round_trips_with_every_part_and_codec() {
        let blob_body = MsgRec { body: BodyRec::Blob([4; 32]), step: None, ..every_part() };
        for rec in [every_part(), blob_body] {
            for c in [Compression::None, Compression::Zstd(1), Compression::Lz4] {
                let bytes = encode(&rec, c);
                assert_eq!(decode(&bytes).unwrap(), rec, "{c:?}");
            }
        }
    }

    #[test]
    fn harness_feedback_is_bit_7_of_the_role_byte_and_only_a_user_message_carries_it() {
        use crate::model::message::Role;
        let rec = MsgRec { role: super::super::role_byte(Role::User, true), step: None, ..every_part() };
        assert_eq!(rec.role, 0x81);
        let back = decode(&encode(&rec, Compression::None)).unwrap();
        assert!(super::super::is_feedback(back.role));
        assert_eq!(super::super::role_of(back.role).unwrap(), Role::User);
        let fields = super::super::message_fields(
            super::super::Kind::MessageCompact,
            &encode(&rec, Compression::None),
        );
        assert_eq!(fields.unwrap().role, Role::User);
        // A plain message's byte is as before.
        assert_eq!(super::super::role_byte(Role::User, false), Role::User.code());
        // The bit on another role is damage.
        assert!(super::super::role_of(0x82).is_err());
    }

    #[test]
    fn a_saver_record_is_half_its_rkyv_size() {
        let json = format!(
            "{{\"k\":\"C\",\"id\":\"{}\",\"ch\":{{\"messages\":{{\"b\":12,\"i\":[0]}}}}}}",
            "1f0c".repeat(70)
        );
        let rec = MsgRec {
            chat: 1,
            seq: 1200,
            revision: 0,
            role: 0,
            turn: 0,
            at_ms: 1_764_000_000_000,
            step: None,
            body: BodyRec::Inline(vec![
                PartRec::Text(json),
                PartRec::Attachment { mime: "lg".into(), blob: [1; 32] },
            ]),
        };
        let compact = encode(&rec, Compression::None).len();
        let rkyv = super::super::encode(&rec).unwrap().len();
        assert!(compact * 2 <= rkyv + 340, "compact {compact} bytes, rkyv {rkyv}");
    }

    #[test]
    fn damaged_compact_records_are_errors_not_panics() {
        let good = encode(&every_part(), Compression::None);
        assert!(decode(&[]).is_err());
        assert!(decode(&[2, 0]).is_err(), "an unknown version");
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0xff;
            let _ = decode(&b);
        }
        let mut long = good.clone();
        long.push(0);
        assert!(decode(&long).is_err(), "a trailing byte");
        // A compressed record claiming a huge raw length.
        let mut huge = vec![VERSION, 1]; // zstd
        varint(&mut huge, u64::MAX >> 1);
        assert!(decode(&huge).is_err());
    }
}
