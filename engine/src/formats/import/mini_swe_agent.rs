//! mini-swe-agent `.traj.json`: `{info, messages, trajectory_format, instance_id}`.
//!
//! Two shapes of `messages`:
//! * **tool calling** (`mini-swe-agent-1.1` and later): OpenAI chat messages, assistant
//!   `tool_calls` answered by role `tool` ([`openai::messages`]);
//! * **text** (`trajectory_format` `"mini-swe-agent-1"`, or no tool call and no tool message
//!   at all): messages of only `role` and `content`. mini-swe-agent's own rule decides what
//!   is an action: an assistant message whose content holds exactly one ```` ```bash ````
//!   block (the regular expression ```` ```bash\s*\n(.*?)\n``` ````, `.` matching newlines,
//!   non-overlapping) has one, the block's text trimmed. It becomes a tool call (name
//!   `bash`, arguments `{"command": ...}`, id `bash-<message index>`), and the message right
//!   after it, when it is a `user` message, is that call's result, its text unchanged (the
//!   `<returncode>`/`<output>` observation, or a timeout notice). An assistant message with
//!   zero or several blocks is a format error in mini-swe-agent: no call, and the harness's
//!   next user message ("Please always provide EXACTLY ONE action...") stays a user
//!   message. The assistant's text is kept whole either way.
//!
//! A `system` message may come before the task (the first user message); role `exit` (the
//! run's end) is not a message.
//!
//! In both shapes every user message after the first assistant message is the harness's own
//! (a format error, a timeout notice): it is marked as feedback and starts no user turn, so
//! the task (the user message before the model first answers) stays the loop's one turn.

use std::path::Path;

use serde_json::{Value, json};

use super::json::{mark_feedback_after_first_assistant, message, result, shape, str_of, text_of};
use super::{Format, Session, openai};
use crate::base::error::{Error, Result};
use crate::chat::history::{NewMessage, Part, Role};

/// Python's `\s` on `str` (its `str.isspace`): Unicode whitespace and the separators
/// U+001C..U+001F.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The bash blocks of `text`, as `re.findall(r"```bash\s*\n(.*?)\n```", text, re.DOTALL)`
/// finds them (untrimmed). Linear: the backtracking the expression allows is resolved in at
/// most two searches per opening fence.
pub(super) fn bash_blocks(text: &str) -> Vec<&str> {
    const OPEN: &str = "```bash";
    const CLOSE: &str = "\n```";
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(rel) = text[from..].find(OPEN) {
        let start = from + rel;
        let after = start + OPEN.len();
        // `\s*\n`: the greedy whitespace run, backing off to the newlines in it, last first.
        let run_end =
            text[after..].char_indices().find(|&(_, c)| !py_space(c)).map_or(text.len(), |(i, _)| after + i);
        let mut bodies = text[after..run_end].rmatch_indices('\n').map(|(i, _)| after + i + 1);
        let Some(last) = bodies.next() else {
            from = start + 1; // no newline after the fence: no block starts here
            continue;
        };
        if let Some(end) = text[last..].find(CLOSE) {
            out.push(&text[last..last + end]);
            from = last + end + CLOSE.len();
            continue;
        }
        // No closing fence after the run. Backing off to an earlier newline helps only when
        // the run's last newline is itself the start of a closing fence.
        if let Some(body) = bodies.next()
            && text.as_bytes().get(run_end.wrapping_sub(1)) == Some(&b'\n')
            && text[run_end..].starts_with("```")
        {
            out.push(&text[body..run_end - 1]);
            from = run_end - 1 + CLOSE.len();
            continue;
        }
        break; // no closing fence anywhere after: no later block either
    }
    out
}

/// Python's `str.strip()`.
fn py_strip(s: &str) -> &str {
    s.trim_matches(py_space)
}

/// The text-format messages as chat messages (see the module documentation).
fn text_messages(list: &[Value]) -> (Vec<NewMessage>, Vec<Option<u64>>) {
    let mut out = Vec::new();
    let mut times = Vec::new();
    let mut pending: Option<String> = None;
    for (i, m) in list.iter().enumerate() {
        let content = text_of(m.get("content"));
        let answered = pending.take();
        match str_of(m, "role") {
            Some("system" | "developer") => out.push(NewMessage::system(content)),
            Some("user") => match answered {
                Some(id) => out.push(NewMessage {
                    role: Role::Tool,
                    parts: vec![result(&id, content, false)],
                    feedback: false,
                }),
                None => out.push(NewMessage::user(content)),
            },
            Some("assistant") => {
                let blocks = bash_blocks(&content);
                let call = match blocks.as_slice() {
                    [one] => Some(py_strip(one).to_string()),
                    _ => None,
                };
                let mut parts = Vec::new();
                if !content.is_empty() {
                    parts.push(Part::Text(content.clone()));
                }
                if let Some(command) = call {
                    let id = format!("bash-{i}");
                    parts.push(Part::ToolCall {
                        id: id.clone(),
                        name: "bash".into(),
                        args: json!({ "command": command }).to_string(),
                    });
                    pending = Some(id);
                }
                out.extend(message(Role::Assistant, parts));
            }
            _ => {} // `exit`
        }
        times.resize(out.len(), super::json::time_of(m));
    }
    (out, times)
}

/// Whether `v` is the text format: `trajectory_format` `"mini-swe-agent-1"`, or messages
/// with no tool call and no tool message.
fn is_text_format(v: &Value, list: &[Value]) -> bool {
    if str_of(v, "trajectory_format") == Some("mini-swe-agent-1") {
        return true;
    }
    !list.iter().any(|m| {
        str_of(m, "role") == Some("tool")
            || m.get("tool_calls").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
    })
}

pub(super) fn parse(path: &Path, v: &Value, file_key: &str) -> Result<Vec<Session>> {
    let list = v.get("messages").and_then(Value::as_array).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{}: not mini-swe-agent JSON: expected an object with `messages` (a list of {{role, content}}), found {}",
            path.display(),
            shape(v)
        ))
    })?;
    let key = match str_of(v, "instance_id") {
        Some(i) => format!("mini-swe-agent:{i}:{file_key}"),
        None => format!("mini-swe-agent:{file_key}"),
    };
    let (mut msgs, times) =
        if is_text_format(v, list) { text_messages(list) } else { openai::messages_timed(list) };
    mark_feedback_after_first_assistant(&mut msgs);
    let mut s = Session::new(Format::MiniSweAgent, path, key, msgs);
    s.set_times(&times);
    if let Some(i) = str_of(v, "instance_id") {
        s.title = i.to_string();
    }
    s.model =
        v.pointer("/info/config/model/model_name").and_then(Value::as_str).unwrap_or_default().to_string();
    Ok(vec![s])
}

#[cfg(test)]
mod tests {
    use super::bash_blocks;

    #[test]
    fn bash_blocks_follow_mini_swe_agents_regular_expression() {
        assert_eq!(bash_blocks("THOUGHT\n```bash\nls -la\n```\n"), ["ls -la"]);
        assert_eq!(bash_blocks("```bash\nls\n```\n```bash\npwd\n```"), ["ls", "pwd"]);
        assert_eq!(bash_blocks("no block"), Vec::<&str>::new());
        // The opening fence must end its line (after optional whitespace).
        assert_eq!(bash_blocks("```bash ls\n```"), Vec::<&str>::new());
        assert_eq!(bash_blocks("```bash  \t\n  echo hi\n```"), ["  echo hi"]);
        // Greedy whitespace backs off to an earlier newline when that finds a close.
        assert_eq!(bash_blocks("```bash\n\n```"), [""]);
        assert_eq!(bash_blocks("```bash\n\n\necho\n```"), ["echo"]);
        // Multi-line body, lazily up to the first closing fence.
        assert_eq!(bash_blocks("```bash\na\nb\n```\nx\n```"), ["a\nb"]);
        // A fence that never closes is no block; a later one still counts.
        assert_eq!(bash_blocks("```bash\nunclosed"), Vec::<&str>::new());
        assert_eq!(bash_blocks("```bash```bash\nok\n```"), ["ok"]);
        assert_eq!(bash_blocks("```bashé\n```bash\né\n```"), ["é"]);
        // A run ending in a multi-byte space, no closing fence: nothing, and no panic.
        assert_eq!(bash_blocks("```bash\n\n\u{2003}x"), Vec::<&str>::new());
        assert_eq!(bash_blocks("```bash\n\u{2003}\n```"), ["\u{2003}"]);
    }

    /// Random strings over fences, newlines and multi-byte whitespace: no panic, and every
    /// block is a slice that the text holds after an opening fence.
    #[test]
    fn bash_blocks_never_panics_on_random_fences_and_unicode_whitespace() {
        let alphabet = ["```bash", "```", "\n", " ", "\u{2003}", "\u{85}", "\u{1c}", "é", "x", "`"];
        let mut state = 0x17u64;
        for _ in 0..20_000 {
            let mut text = String::new();
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            for _ in 0..(state >> 60) + 2 {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                text.push_str(alphabet[(state >> 33) as usize % alphabet.len()]);
            }
            for b in bash_blocks(&text) {
                assert!(text.contains(&format!("{b}\n```")), "{text:?} gave {b:?}");
            }
        }
    }

    /// Random strings over the characters that matter (fences, newlines, Unicode
    /// whitespace), with what Python's `re.findall` returned for each (generated once).
    #[test]
    fn bash_blocks_agree_with_pythons_findall_on_generated_cases() {
        let cases: &[(&str, &[&str])] = &[
            ("é```bash  \n```bashé\t\t\n```bash ```\u{2003}bash", &["```bashé\t\t"]),
            ("\ta\u{1c}```bash\n```\n```bash ```bash `\t", &["```"]),
            ("\t\n\n\t\u{2003}é```bash\n\n\nbash\n```", &["bash"]),
            ("` ```bash\n\u{1c}\u{2003}\n```\t\u{2003}\u{2003}\u{2003}é\u{1c}a", &["\u{1c}\u{2003}"]),
            ("```bash\n\u{1c}`\n````", &["\u{1c}`"]),
            ("\nbash```bash\n  `\n```\n", &["  `"]),
            ("\u{2003}\u{2003}\na\n```bash\nbashbash``\n\n```bash\u{2003}", &["bashbash``\n"]),
            ("```bash\t\nabash \n\u{2003}```bash\n```bash\n \u{1c}", &["abash \n\u{2003}```bash"]),
            ("é```bash\n é`bash\n``````\n", &[" é`bash"]),
            ("```\n```bash\né````bash\u{2003}```bash \n```basha\n`", &["é````bash\u{2003}```bash "]),
            ("```basha\n```bash\n\n`\n``` ```", &["`"]),
            ("```bash\n\n\n```bash\t\n\n\n`\n\n ```\n`", &[""]),
            ("```bash \n\u{2003}\u{2003}a\u{1c}```a\n```\u{1c}`", &["\u{2003}\u{2003}a\u{1c}```a"]),
            ("\u{2003}```bash\n ``````bash`\n```a ```bash\n```basha", &[" ``````bash`"]),
            ("```bash\u{1c}\n\n```bash\n`\nébash\u{1c}\t", &[""]),
            ("``````bash```bash\n\n```bash ", &[""]),
            ("`\u{2003}`\u{2003}\n```bash\n \n```bash\u{2003}a```\t", &[" "]),
            ("bash\nbash\n ```bash\n\n```\n```a````````", &["```"]),
            ("\u{1c}bash```bash \n\t\u{1c}`\t\n```bash", &["\t\u{1c}`\t"]),
            ("```bash```bash\n\t\n\n```\u{2003}é`\u{1c}\n\nbash", &[""]),
            ("\u{1c}\n```bash\n\u{1c}basha\n``````\n", &["\u{1c}basha"]),
            ("a\u{1c}a\n\u{2003} ```bash\n```bashé\n```", &["```bashé"]),
            ("```bash\na`\n```basha\u{1c}\n\t", &["a`"]),
            ("```bash\n\u{1c}éé   bash```\n```bash", &["\u{1c}éé   bash```"]),
            ("``````bash\n\u{2003}\n```\u{2003}`\n\t ```bash ", &["\u{2003}"]),
            ("`\t```bash\nbash\u{2003}```\n```", &["bash\u{2003}```"]),
            ("é```bash\nbash\n```\n```", &["bash"]),
            (" \u{1c}\n```bash\n\n``````bashbash\n````bash", &["``````bashbash"]),
            ("bashé\n```bash\naéa```bash`\n```bashbasha`", &["aéa```bash`"]),
            ("\n\u{1c}```bash\n\n```bash\u{2003} ``````", &[""]),
            ("```bash\n````é\n```bash```bash\n\n```\u{2003}", &["````é", ""]),
            ("a \t \n``\u{2003}bash ``````bash\na`a", &[]),
            ("\u{2003}````bash``` a```\u{2003}é", &[]),
            ("\t\u{1c}```bash`\t```bashé\t\u{1c}```basha\n```", &[]),
            ("\n\u{2003}\t```bash ```", &[]),
            ("` ébash```bash`\n  `````é```bash", &[]),
            ("bash\naé`\u{1c}a\n\n \nbash```\n```bash\u{2003}", &[]),
            ("\t\t```bash\na````  ", &[]),
            ("```bash`é\u{1c}aé\n\u{2003}a", &[]),
            ("bashé```é\n\né\t\n\t\u{1c}```bash`\u{1c}\u{1c}\u{2003}", &[]),
            ("```bash\t\u{1c}\n\u{2003}\n\u{1c}\t\t\n\n a", &[]),
            ("é\u{1c}```\u{2003}```\u{2003}```bash\n\u{1c}`\u{2003}", &[]),
            ("``````bashé\u{2003}\nbash", &[]),
            ("```a```bash`\u{2003}```bash\n\u{2003}  \t\t", &[]),
            ("a```bash\u{2003}\t```````bashbash` \t\t```", &[]),
            ("\n\t```bashbash```\té```a```\u{2003}a\n\n``` ", &[]),
            ("\u{2003}\u{1c}\n`é```bash\n x\n```bash", &[" x"]),
            ("\n ````bash\n\n```\u{2003}\n```bash", &["```\u{2003}"]),
            ("```bash\n\u{1c}\n```bash\n", &["\u{1c}"]),
            ("x```bash\n\n```\n", &[""]),
            ("```\u{1c} \u{2003}```bash \n\u{1c}```\n```\n", &["\u{1c}```"]),
            ("```bash\n`\u{1c}```\n\u{1c}\u{1c}x\n```", &["`\u{1c}```\n\u{1c}\u{1c}x"]),
            ("\u{1c}\u{85}\u{2003}```bash\u{2003} \n\n```x", &[""]),
            ("```bash\n```bash\u{2003}`\n \n```bash\u{1c}", &["```bash\u{2003}`\n "]),
            ("\u{2003}```bash\n```bash`é\n```bash", &["```bash`é"]),
            ("``````bash\u{85}\n`\n```bash", &["`"]),
            ("x\n```bash\n\u{1c}x\u{2003}\n```bash ", &["\u{1c}x\u{2003}"]),
            ("```\n\u{85}```bash\n```\u{2003}\n`````bash\u{1c}", &["```\u{2003}"]),
            ("```xx````bash\n\n```bash\n\u{2003}", &[""]),
            ("``````bash\n\n```bash\n\u{2003}\u{85}\u{85}\u{2003}é", &[""]),
            ("```\u{1c}```bash\nx```bash\n\n```bash\n\n```bash", &["x```bash\n"]),
            ("\u{1c}```bash\n\n`\n\n\n```bash``` ", &["`\n\n"]),
            ("\u{2003}\u{2003}```bash\n\u{1c}\n\n```é\u{1c}", &[""]),
            ("```bash\n\n``````\n\u{1c}\u{1c}", &[""]),
            ("\u{2003}```bash\n`\n```bashé\u{1c}", &["`"]),
            ("```bash```bash \u{2003}\u{85}\n\n\n```x", &[""]),
            ("`\u{1c}```\n``````bash\n\u{85} \n```bash", &["\u{85} "]),
            ("```bash\n\n```x", &[""]),
            ("x```bash\n```bash\u{1c}\u{1c}```\n```bash", &["```bash\u{1c}\u{1c}```"]),
            ("```bash \n\u{2003}\n```bashé\u{2003}", &["\u{2003}"]),
            ("x```bash\né\n```\nx```bash\n\u{2003}", &["é"]),
            ("\u{1c}`````````bash\n```\n ", &[]),
            ("\u{2003}````é```bash```bash` \né\n\u{1c}", &[]),
            ("\u{85}\u{85}x\u{2003}x\u{1c}xé```bash\u{85}\n", &[]),
            ("\n```bash`x```x```bash", &[]),
            ("  \u{2003}x ````\u{1c}\u{1c}```````bash", &[]),
            ("\u{1c}x```bash```bash", &[]),
            ("\u{85}```bash\u{1c}", &[]),
            ("\u{85}\u{2003}é\u{1c}\u{2003}\u{2003}```bash", &[]),
            ("````x``````bash\u{85}\u{1c}é\u{85}` ", &[]),
            ("\u{85}````\u{1c}x```bashé\n", &[]),
            ("x\néx\n``````bash\n\u{2003}é", &[]),
            ("\u{85}```bashx\n", &[]),
            ("`\u{2003}\u{85}é\né\n```bash\u{1c}", &[]),
            ("é```bash`éé ```", &[]),
            ("\u{85}é```bash`\u{85}```bash ", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(&bash_blocks(text), want, "{text:?}");
        }
    }
}
