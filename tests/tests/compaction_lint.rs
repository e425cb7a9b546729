//! Claims of compaction: the linter reports every problem of a plan at once, one rule at a
//! time shown passing and failing; an accepted plan changes the view, never the messages;
//! every replaced part leaves a pointer that leads back to the original.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::Budget;
use undertext::compaction::{Plan, Squish};
use undertext::{Chat, ChatMeta, Error, NewMessage, Options, Part, Role, Store, ToolContent, Unit};

fn call(id: &str) -> NewMessage {
    NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall {
            id: id.into(),
            name: "read".into(),
            args: r#"{"path":"src/lib.rs"}"#.into(),
        }],
        feedback: false,
    }
}

/// 0 system · 1 user · 2 call · 3 result · 4 assistant · 5 user · 6 call · 7 result ·
/// 8 assistant · 9 user · 10 assistant · 11 user · 12 assistant. The last two user turns
/// start at 9.
fn chat(store: &Store) -> Chat {
    let c = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    let long = "the file holds a parser with many functions and tests; ".repeat(20);
    c.append_batch(vec![
        NewMessage::system("be careful"),
        NewMessage::user("look at the parser"),
        call("c1"),
        NewMessage::tool_result("c1", long.clone()),
        NewMessage::assistant("The parser is recursive descent."),
        NewMessage::user("and the lexer?"),
        call("c2"),
        NewMessage::tool_result("c2", "fn lex() {}"),
        NewMessage::assistant("The lexer is table driven."),
        NewMessage::user("thanks"),
        NewMessage::assistant("welcome"),
        NewMessage::user("bye"),
        NewMessage::assistant("bye"),
    ])
    .unwrap();
    c
}

fn squish(from: u64, to: u64, rewrite: &str) -> Squish {
    Squish { from, to, rewrite: rewrite.into() }
}

fn rules(c: &Chat, plan: Plan) -> Vec<&'static str> {
    c.lint(&plan).unwrap().into_iter().map(|p| p.rule).collect()
}

#[test]
fn each_rule_passes_a_good_plan_and_fails_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default().squish_max_tokens(100)).unwrap();
    let c = chat(&store);
    let ok = |p: Plan| assert_eq!(rules(&c, p.clone()), Vec::<&str>::new(), "{p:?}");
    // overlap
    ok(Plan { trims: vec![], squishes: vec![squish(1, 2, "asked"), squish(4, 5, "answered")] });
    assert_eq!(
        rules(&c, Plan { trims: vec![], squishes: vec![squish(4, 6, "x"), squish(5, 6, "y")] }),
        ["overlap"]
    );
    assert_eq!(rules(&c, Plan { trims: vec![3], squishes: vec![squish(2, 4, "x")] }), ["overlap"]);
    // protected
    ok(Plan { trims: vec![7], squishes: vec![] });
    assert_eq!(rules(&c, Plan { trims: vec![], squishes: vec![squish(8, 10, "x")] }), ["protected"]);
    // boundary: never start on a result, never end on a call
    ok(Plan { trims: vec![], squishes: vec![squish(4, 6, "answered; asked about the lexer")] });
    assert_eq!(rules(&c, Plan { trims: vec![], squishes: vec![squish(7, 9, "x")] }), ["boundary"]);
    assert_eq!(rules(&c, Plan { trims: vec![], squishes: vec![squish(5, 7, "x")] }), ["boundary"]);
    // longer: the rewrite must be shorter than what it replaces
    assert_eq!(
        rules(&c, Plan { trims: vec![], squishes: vec![squish(4, 5, &"long ".repeat(200))] }),
        ["longer"]
    );
    // too_large: at most 100 tokens here, unless it is one call with its result
    ok(Plan { trims: vec![], squishes: vec![squish(2, 4, "read src/lib.rs: a parser")] });
    assert_eq!(
        rules(&c, Plan { trims: vec![], squishes: vec![squish(1, 5, "the parser, read")] }),
        ["too_large"]
    );
    // trim: an existing tool result outside the recent part, once
    assert_eq!(rules(&c, Plan { trims: vec![4], squishes: vec![] }), ["trim"]);
    assert_eq!(rules(&c, Plan { trims: vec![3, 3], squishes: vec![] }), ["trim"]);
    assert_eq!(rules(&c, Plan { trims: vec![99], squishes: vec![] }), ["trim"]);
    // range
    assert_eq!(rules(&c, Plan { trims: vec![], squishes: vec![squish(4, 4, "x")] }), ["range"]);
}

#[test]
fn every_problem_is_reported_at_once_and_nothing_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    let before = c.view(&Budget::new(100_000, 0)).unwrap().to_openai_json();
    let bad = Plan { trims: vec![4, 9], squishes: vec![squish(3, 10, "x"), squish(2, 3, "y")] };
    match c.compact(&bad, c.revision()) {
        Err(Error::Lint { problems }) => {
            let mut r: Vec<_> = problems.iter().map(|p| p.rule).collect();
            r.sort_unstable();
            r.dedup();
            assert_eq!(r, ["boundary", "overlap", "protected", "trim"], "{problems:?}");
        }
        other => panic!("expected Lint, got {other:?}"),
    }
    assert_eq!(c.view(&Budget::new(100_000, 0)).unwrap().to_openai_json(), before);
}

#[test]
fn an_accepted_plan_changes_the_view_not_the_messages_and_leaves_pointers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    let original_result = c.get(7).unwrap();
    let plan = Plan {
        trims: vec![7],
        squishes: vec![squish(1, 5, "The user asked about the parser; it is recursive descent.")],
    };
    assert!(matches!(c.compact(&plan, c.revision() + 1), Err(Error::StaleRevision { .. })));
    assert_eq!(c.compact(&plan, c.revision()).unwrap(), 2);
    let v = c.view(&Budget::new(100_000, 0)).unwrap();
    let squished = v.messages().iter().find(|m| m.seqs == (1..5)).expect("the squish stands for 1..5");
    assert!(
        matches!(&squished.parts[0], Part::Summary(t) if t.contains("messages 1..5") && t.contains("recursive descent"))
    );
    let trimmed = v.messages().iter().find(|m| m.seqs == (7..8)).unwrap();
    let Part::ToolResult { content: ToolContent::Archived { archive, preview }, .. } = &trimmed.parts[0]
    else {
        panic!("{:?}", trimmed.parts)
    };
    assert!(preview.contains(&archive.id.to_string()));
    let Part::ToolResult { content: ToolContent::Text(full), .. } = &original_result.parts[0] else {
        panic!()
    };
    assert_eq!(&store.read_context("o", &archive.id, 0..archive.chars, Unit::Chars).unwrap(), full);
    // Originals untouched.
    assert_eq!(c.get(7).unwrap(), original_result);
    assert_eq!(c.len(), 13);
    // An edit inside the squished range makes the record stale: the view shows messages again.
    let rev = c.edit(4, NewMessage::assistant("The parser is a Pratt parser."), c.revision()).unwrap();
    let v2 = c.view(&Budget::new(100_000, 0)).unwrap();
    assert!(v2.messages().iter().all(|m| m.seqs != (1..5)), "a stale squish was applied at revision {rev}");
    // The index lists every message with a short preview.
    let idx = c.index().unwrap();
    assert_eq!(idx.len(), 13);
    assert!(idx.iter().all(|l| l.preview.chars().count() <= 60));
    assert_eq!(idx[4].preview, "The parser is a Pratt parser.");
}

/// A long autonomous loop: the task, then `pairs` steps of a call and its ~120-token result.
fn long_loop(store: &Store, pairs: usize) -> Chat {
    let c = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    let mut batch = vec![NewMessage::user("make the test suite pass")];
    for k in 0..pairs {
        let id = format!("c{k}");
        batch.push(call(&id));
        batch
            .push(NewMessage::tool_result(&id, format!("line {k}: {}", "output of the command ".repeat(25))));
    }
    c.append_batch(batch).unwrap();
    c
}

#[test]
fn the_nudge_of_a_700_message_chat_stays_under_its_bound_and_says_what_it_left_out() {
    use undertext::compaction::tool;
    use undertext::{Estimator, Heuristic};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = long_loop(&store, 350);
    assert_eq!(c.len(), 701);
    let mut budget = Budget::new(200_000, 0);
    budget.nudge = Some(0.15);
    let line = budget.nudge_limit().unwrap();
    let nudge = c.view(&budget).unwrap().nudge().expect("the chat is over the nudge line").to_string();
    let bound = tool::nudge_index_bound(line);
    let header = Heuristic.text_tokens(nudge.lines().next().unwrap());
    let tokens = Heuristic.text_tokens(&nudge);
    assert!(
        tokens <= header + bound,
        "the nudge is {tokens} tokens, the bound {bound} (+{header} of header)"
    );
    assert!(bound * 10 < line, "the bound is a small share of the line: {bound} of {line}");
    let listed =
        nudge.lines().filter(|l| l.split(' ').next().is_some_and(|w| w.parse::<u64>().is_ok())).count();
    assert!(listed > 10 && listed < 701, "{listed} lines listed");
    let last = nudge.lines().last().unwrap();
    assert!(last.contains(&format!("{} smaller or already compacted messages", 701 - listed)), "{last}");
    // A chat whose index fits is listed whole.
    let small = long_loop(&store, 5);
    let whole = tool::nudge_text(5_000, 4_000, &small.index().unwrap());
    assert_eq!(whole.lines().count(), 1 + 11);
}

#[test]
fn a_second_trim_of_a_trimmed_result_is_a_no_op_that_saves_nothing_and_the_index_marks_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = long_loop(&store, 10);
    // A quarter of 4,000 tokens protects the last few steps only.
    let budget = Budget::new(4_000, 0);
    let first = c.compaction_tool_call(r#"{"trims": [2]}"#, c.revision(), &budget).unwrap();
    assert!(first.starts_with("compaction applied"), "{first}");
    let index = c.index().unwrap();
    assert!(index[2].preview.starts_with(undertext::compaction::tool::TRIMMED_MARK), "{:?}", index[2]);
    assert!(!index[4].preview.starts_with(undertext::compaction::tool::TRIMMED_MARK), "{:?}", index[4]);
    let view = c.view(&budget).unwrap().to_openai_json();
    let again = c.compaction_tool_call(r#"{"trims": [2]}"#, c.revision(), &budget).unwrap();
    assert!(!again.contains("applied"), "{again}");
    assert!(again.contains("0 tokens saved"), "{again}");
    assert_eq!(c.view(&budget).unwrap().to_openai_json(), view, "nothing changed");
    // With a new trim beside it, the new one is applied and the old one reported as a no-op.
    let mixed = c.compaction_tool_call(r#"{"trims": [2, 4]}"#, c.revision(), &budget).unwrap();
    assert!(mixed.contains("compaction applied: 1 trim(s)"), "{mixed}");
    assert!(mixed.contains("message(s) 2: already trimmed"), "{mixed}");
}

#[test]
fn a_squish_over_a_message_hidden_after_it_is_dropped_alike_by_the_view_and_the_index() {
    // The view and the index apply one rule for the compactions in force: a squish whose
    // messages were hidden (or changed) since it was made no longer holds, in either.
    use undertext::compaction::tool::SQUISHED_MARK;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = long_loop(&store, 10);
    // Two later user turns: the protected tail starts after the loop.
    c.append_batch(vec![
        NewMessage::user("now the docs"),
        NewMessage::assistant("done"),
        NewMessage::user("thanks"),
        NewMessage::assistant("welcome"),
    ])
    .unwrap();
    let budget = Budget::new(100_000, 0);
    let plan = Plan { trims: vec![], squishes: vec![squish(1, 5, "two reads of the tests")] };
    assert_eq!(c.compact(&plan, c.revision()).unwrap(), 1);
    let squished = |c: &Chat| c.view(&budget).unwrap().to_openai_json().contains("condensed");
    let marked =
        |c: &Chat| c.index().unwrap().iter().filter(|l| l.preview.starts_with(SQUISHED_MARK)).count();
    assert!(squished(&c));
    assert_eq!(marked(&c), 4, "{:?}", c.index().unwrap());
    // Hiding a pair inside the range: the squish no longer holds.
    c.hide(std::slice::from_ref(&(3..5)), c.revision()).unwrap();
    assert!(!squished(&c), "the view drops the squish");
    assert_eq!(marked(&c), 0, "the index drops it too: {:?}", c.index().unwrap());
}
