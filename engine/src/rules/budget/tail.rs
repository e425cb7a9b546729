//! The protected tail and the cut points of a chat: the one rule the guard, the compaction
//! linter and the checkpoint cut share.
//!
//! * A **step** is an assistant message and the tool results answering its calls. A cut
//!   point is a message that holds no tool result: cutting there never separates a tool
//!   call from its result, nor a batch of parallel calls from their results (provider APIs
//!   require every result to follow its call directly).
//! * The **protected tail** is the last two user turns, but at most `max` tokens: when they
//!   are larger, it is the last whole steps that fit — at least the last step, whatever
//!   its size. Everything before is settled: the guard may preview it, a checkpoint may
//!   cover it, inside the current user turn too. A long autonomous loop (one user message,
//!   hundreds of tool calls) is the main case this bound exists for.
//!
//! The walk goes backwards from the end and stops at the token bound or the start of the
//! last two turns, so its cost is bounded by the tail, not by the length of the turn.

use crate::model::message::{Message, Part, Role};

/// True when a cut may fall just before `m`: it answers no tool call.
pub(crate) fn is_cut_point(m: &Message) -> bool {
    m.role != Role::Tool && !m.parts.iter().any(|p| matches!(p, Part::ToolResult { .. }))
}

/// The last cut point at or before `i` (index into `msgs`); 0 when there is none.
pub fn cut_at_or_before(msgs: &[Message], i: usize) -> usize {
    let mut i = i.min(msgs.len());
    while i > 0 && i < msgs.len() && !is_cut_point(&msgs[i]) {
        i -= 1;
    }
    i
}

/// The first index of the protected tail of `msgs` (their order is the chat's): the last
/// two user turns, bounded by `max` tokens as the module says. `tokens(i)` is the estimate
/// of `msgs[i]`. `msgs.len()` when `msgs` is empty.
pub fn protected_from(msgs: &[Message], tokens: impl Fn(usize) -> u64, max: u64) -> usize {
    let Some(last) = msgs.last() else { return 0 };
    let last_turn = last.turn;
    let mut best: Option<usize> = None;
    let mut acc = 0u64;
    for i in (0..msgs.len()).rev() {
        if msgs[i].turn + 1 < last_turn {
            break;
        }
        acc = acc.saturating_add(tokens(i));
        if is_cut_point(&msgs[i]) {
            if acc <= max || best.is_none() {
                best = Some(i);
            }
            if acc > max {
                break;
            }
        }
    }
    // No cut point at all in the last two turns (results without their calls): all of them.
    best.unwrap_or_else(|| msgs.iter().position(|m| m.turn + 1 >= last_turn).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::message::ToolContent;

    fn msg(seq: u64, turn: u64, role: Role, parts: Vec<Part>) -> Message {
        Message { seq, revision: 0, role, turn, parts, step: None, at_ms: 0, feedback: false }
    }

    /// user · (assistant call · tool result) × n, one turn.
    fn loop_of(n: u64) -> Vec<Message> {
        let mut v = vec![msg(0, 1, Role::User, vec![Part::Text("task".into())])];
        for k in 0..n {
            let id = format!("c{k}");
            v.push(msg(
                v.len() as u64,
                1,
                Role::Assistant,
                vec![Part::ToolCall { id: id.clone(), name: "run".into(), args: "{}".into() }],
            ));
            v.push(msg(
                v.len() as u64,
                1,
                Role::Tool,
                vec![Part::ToolResult {
                    call_id: id,
                    content: ToolContent::Text("out".into()),
                    is_error: false,
                }],
            ));
        }
        v
    }

    #[test]
    fn a_long_single_turn_keeps_only_the_steps_that_fit() {
        let msgs = loop_of(100);
        // 10 tokens a message, 45 allowed: two whole steps (40 tokens), starting at a call.
        let from = protected_from(&msgs, |_| 10, 45);
        assert_eq!(from, msgs.len() - 4);
        assert!(is_cut_point(&msgs[from]));
    }

    #[test]
    fn the_last_step_is_kept_even_when_it_is_over_the_bound() {
        let msgs = loop_of(5);
        assert_eq!(protected_from(&msgs, |_| 1_000, 10), msgs.len() - 2);
    }

    #[test]
    fn short_turns_are_protected_whole() {
        let msgs = loop_of(3);
        assert_eq!(protected_from(&msgs, |_| 1, 1_000), 0);
    }

    #[test]
    fn a_cut_never_lands_on_a_result_of_a_parallel_batch() {
        let mut msgs = loop_of(2);
        // One assistant message with two calls, then both results.
        let calls = (0..2)
            .map(|k| Part::ToolCall { id: format!("p{k}"), name: "r".into(), args: "{}".into() })
            .collect();
        msgs.push(msg(msgs.len() as u64, 1, Role::Assistant, calls));
        for k in 0..2 {
            msgs.push(msg(
                msgs.len() as u64,
                1,
                Role::Tool,
                vec![Part::ToolResult {
                    call_id: format!("p{k}"),
                    content: ToolContent::Text("x".into()),
                    is_error: false,
                }],
            ));
        }
        for max in 0..100 {
            let from = protected_from(&msgs, |_| 7, max);
            assert!(is_cut_point(&msgs[from]), "max {max}: cut at {from}");
        }
        assert_eq!(cut_at_or_before(&msgs, msgs.len() - 1), msgs.len() - 3);
    }
}
