//! Shared by the read-only tests and their writer child.

/// The text of message `i`: long enough that a few fill a 4 KiB segment, and each byte
/// depends on `i`, so a torn or misplaced read cannot pass for it.
pub fn message_text(i: u64) -> String {
    let mut s = format!("message {i}: ");
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while s.len() < 600 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push(char::from(b'a' + (x % 26) as u8));
    }
    s
}
