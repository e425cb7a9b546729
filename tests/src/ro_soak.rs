//! Shared by the read-only soak (a writer process and reader processes on one store, see
//! `tests/tests/read_only_soak.rs` and `scripts/ro-soak`): the text of every message, which a
//! reader can recompute from the chat id and seq alone, and the *acknowledgement table*, a
//! small file outside the store where the writer publishes, after every append returned,
//! how many messages of each chat are acknowledged.
//!
//! A reader reads the table, then refreshes: everything the table counted was acknowledged
//! before the refresh, so the refresh must show it, byte for byte.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use undertext::{NewMessage, Role};

/// The owner of every soak chat.
pub const OWNER: &str = "soak";

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of (chat, seq) the text carries.
pub fn hash_of(chat: u64, seq: u64) -> u64 {
    mix(mix(chat) ^ seq.wrapping_mul(0x1000_0000_01b3))
}

/// The letters of a message's text after its header, drawn from the hash (`x` = hash | 1):
/// a xorshift sequence, each 64-bit step giving 8 bytes, each byte's low 5 bits picking one
/// of `a`–`z` and 6 spaces (so checking a text costs a few instructions a byte).
struct Letters {
    x: u64,
    word: u64,
    left: u32,
}

const LETTERS: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz      ";

impl Letters {
    fn new(x: u64) -> Letters {
        Letters { x, word: 0, left: 0 }
    }

    /// The next eight letters (from a fresh step: only at the start or after eight).
    fn next_eight(&mut self) -> [u8; 8] {
        debug_assert_eq!(self.left, 0);
        let mut x = self.x;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.x = x;
        x.to_le_bytes().map(|b| LETTERS[(b & 31) as usize])
    }
}

impl Iterator for Letters {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        if self.left == 0 {
            self.word = u64::from_le_bytes(self.next_eight());
            self.left = 8;
        }
        let b = self.word as u8;
        self.word >>= 8;
        self.left -= 1;
        Some(b)
    }
}

/// The start of the text of message `seq` of `chat` (which carries its hash `h`), and the
/// text's whole length.
fn header_and_len(chat: u64, seq: u64, h: u64) -> (String, usize) {
    (format!("chat {chat} seq {seq} hash {h:016x}: "), 100 + (h % 2000) as usize)
}

/// The role of message `seq`: user and assistant in turns.
fn role_of(seq: u64) -> Role {
    if seq.is_multiple_of(2) { Role::User } else { Role::Assistant }
}

/// The message at `seq` of chat `chat`: its chat id, seq and hash in front, then 100 to 2,100
/// bytes of text drawn from the hash (so every byte depends on the chat and the seq); the
/// role alternates user / assistant.
pub fn soak_message(chat: u64, seq: u64) -> NewMessage {
    let h = hash_of(chat, seq);
    let (mut s, len) = header_and_len(chat, seq, h);
    let rest = len.saturating_sub(s.len());
    s.extend(Letters::new(h | 1).take(rest).map(char::from));
    NewMessage::text(role_of(seq), s)
}

/// Checks a message read back against [`soak_message`], byte for byte, without building the
/// expected text (the letters are compared as they are drawn: a reader checks every message
/// the writer acknowledged, and building each text again cost more than reading it); says
/// what differs.
pub fn check_message(chat: u64, seq: u64, got: &undertext::Message) -> Result<(), String> {
    let h = hash_of(chat, seq);
    let (header, len) = header_and_len(chat, seq, h);
    let differs = |why: String| {
        let text = match &got.parts[..] {
            [undertext::Part::Text(t)] => t.chars().take(60).collect::<String>(),
            other => format!("{other:?}").chars().take(60).collect(),
        };
        Err(format!(
            "chat {chat} seq {seq}: {why}; expected {:?} {header:?}…, read {:?} {text:?}…",
            role_of(seq),
            got.role
        ))
    };
    if got.role != role_of(seq) {
        return differs("another role".into());
    }
    let [undertext::Part::Text(t)] = &got.parts[..] else {
        return differs(format!("expected one text part, found {} parts", got.parts.len()));
    };
    let t = t.as_bytes();
    if t.len() != len.max(header.len()) {
        return differs(format!("expected {} bytes, read {}", len.max(header.len()), t.len()));
    }
    if !t.starts_with(header.as_bytes()) {
        return differs("another header".into());
    }
    // Eight bytes at a time: one xorshift step gives the next eight letters.
    let mut letters = Letters::new(h | 1);
    for (i, got8) in t[header.len()..].chunks(8).enumerate() {
        let want8 = letters.next_eight();
        if got8 != &want8[..got8.len()] {
            let at = got8.iter().zip(want8).position(|(a, b)| *a != b).unwrap_or(0);
            return differs(format!("byte {} differs", header.len() + 8 * i + at));
        }
    }
    Ok(())
}

/// One chat of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The chat's id.
    pub chat: u64,
    /// Messages acknowledged (seqs `0..count`).
    pub count: u64,
    /// The writer is deleting (or has deleted) this chat: a reader may find it gone.
    pub deleting: bool,
}

/// The acknowledgement table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acks {
    /// The writer finished: no more appends.
    pub done: bool,
    /// Garbage collections the writer ran so far.
    pub gcs: u64,
    /// When the writer started appending (Unix time, milliseconds; 0 before): the origin of
    /// the phases of an alternating run.
    pub start_ms: u64,
    /// The chats.
    pub slots: Vec<Slot>,
}

const MAGIC: u64 = 0x554e_4454_5841_434b; // "UNDTXACK"

impl Acks {
    fn words(&self) -> Vec<u64> {
        let mut w = vec![MAGIC, u64::from(self.done), self.gcs, self.start_ms, self.slots.len() as u64];
        for s in &self.slots {
            w.extend([s.chat, s.count, u64::from(s.deleting)]);
        }
        let sum = w.iter().fold(0u64, |a, &x| mix(a ^ x));
        w.push(sum);
        w
    }

    /// Writes the table at the start of `file` in one `pwrite` (a few hundred bytes).
    pub fn publish(&self, file: &File) -> std::io::Result<()> {
        let bytes: Vec<u8> = self.words().iter().flat_map(|w| w.to_le_bytes()).collect();
        file.write_all_at(&bytes, 0)
    }

    /// Reads the table; retries a read that caught a write half done (its checksum fails).
    pub fn read(path: &Path) -> Result<Acks, String> {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for _ in 0..10_000 {
            let mut buf = vec![0u8; 4096];
            let n = file.read_at(&mut buf, 0).map_err(|e| format!("{}: {e}", path.display()))?;
            let w: Vec<u64> = buf[..n - n % 8]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect();
            if let Some(a) = Acks::decode(&w) {
                return Ok(a);
            }
            std::thread::yield_now();
        }
        Err(format!("{}: no consistent acknowledgement table after 10,000 reads", path.display()))
    }

    fn decode(w: &[u64]) -> Option<Acks> {
        if w.len() < 6 || w[0] != MAGIC {
            return None;
        }
        let k = usize::try_from(w[4]).ok()?;
        let end = 5 + 3 * k;
        if w.len() <= end || w[..end].iter().fold(0u64, |a, &x| mix(a ^ x)) != w[end] {
            return None;
        }
        let slots = w[5..end]
            .chunks_exact(3)
            .map(|s| Slot { chat: s[0], count: s[1], deleting: s[2] != 0 })
            .collect();
        Some(Acks { done: w[1] != 0, gcs: w[2], start_ms: w[3], slots })
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// In an alternating run (phases of `phase_ms` > 0 from `start_ms`): true in the phases where
/// the readers rest (the even ones: 0, 2, …; and before the start), when the writer runs as
/// if alone.
pub fn resting(start_ms: u64, phase_ms: u64, now_ms: u64) -> bool {
    start_ms == 0 || (now_ms.saturating_sub(start_ms) / phase_ms.max(1)).is_multiple_of(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_takes_each_message_as_written_and_refuses_any_byte_changed() {
        let read = |m: NewMessage, seq: u64| undertext::Message {
            seq,
            revision: 0,
            role: m.role,
            turn: 0,
            parts: m.parts,
            step: None,
            at_ms: 0,
            feedback: m.feedback,
        };
        for (chat, seq) in [(1, 0), (1, 1), (7, 12345), (u64::MAX, 3)] {
            let good = read(soak_message(chat, seq), seq);
            check_message(chat, seq, &good).unwrap();
            assert!(check_message(chat, seq + 1, &good).is_err(), "another seq");
            assert!(check_message(chat.wrapping_add(1), seq, &good).is_err(), "another chat");
            let [undertext::Part::Text(t)] = &good.parts[..] else { panic!("one text part") };
            for at in 0..t.len() {
                let mut bytes = t.clone().into_bytes();
                bytes[at] = if bytes[at] == b'q' { b'r' } else { b'q' };
                let bad = undertext::Message {
                    parts: vec![undertext::Part::Text(String::from_utf8(bytes).unwrap())],
                    ..good.clone()
                };
                assert!(check_message(chat, seq, &bad).is_err(), "byte {at} of {chat}/{seq} changed");
            }
            let mut short = good.clone();
            short.parts = vec![undertext::Part::Text(t[..t.len() - 1].to_string())];
            assert!(check_message(chat, seq, &short).is_err(), "one byte short");
            let mut long = good.clone();
            long.parts = vec![undertext::Part::Text(format!("{t}a"))];
            assert!(check_message(chat, seq, &long).is_err(), "one byte more");
            let mut role = good.clone();
            role.role = if role.role == Role::User { Role::Assistant } else { Role::User };
            assert!(check_message(chat, seq, &role).is_err(), "another role");
        }
    }

    #[test]
    fn messages_differ_per_chat_and_seq_and_the_table_round_trips() {
        assert_ne!(soak_message(1, 2), soak_message(2, 1));
        let a = Acks {
            done: true,
            gcs: 3,
            start_ms: 5,
            slots: vec![
                Slot { chat: 7, count: 9, deleting: false },
                Slot { chat: 8, count: 0, deleting: true },
            ],
        };
        assert_eq!(Acks::decode(&a.words()), Some(a.clone()));
        let mut torn = a.words();
        torn[6] ^= 1;
        assert_eq!(Acks::decode(&torn), None);
    }
}
