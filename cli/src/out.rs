//! Shared helpers of the commands: opening the store, parsing ids, formatting numbers, and
//! the JSON of messages.

use serde_json::Value;
use undertext::{ChatId, Durability, Error, Options, Part, Store, ToolContent};

use super::{Cli, CliError, CliResult};

/// Opens the store of `--store`; with `create`, makes it if absent; otherwise a missing store
/// is an error that says how to make one.
pub fn open(cli: &Cli, create: bool, durability: Durability) -> CliResult<Store> {
    if cli.read_only {
        return Err(CliError(
            "this command writes to the store, and --read-only was given: run it without --read-only".into(),
        ));
    }
    let opts = Options::default().create_if_missing(create).durability(durability);
    opened(cli, Store::open(&cli.store, opts))
}

/// The store an open gave, its warnings printed to stderr; or its error, said for the CLI.
fn opened(cli: &Cli, r: undertext::Result<Store>) -> CliResult<Store> {
    let store = r.map_err(|e| match e {
        Error::NotFound { .. } => CliError(format!(
            "no store at {} (run `undertext demo` or `undertext import PATH` to create one, or pass --store DIR)",
            cli.store.display()
        )),
        other => CliError(format!("cannot open the store at {}: {other}", cli.store.display())),
    })?;
    // What open repaired (a torn tail cut, ...) is news to the user: stderr, one line each.
    for w in store.open_warnings() {
        eprintln!("warning: {}: {w}", cli.store.display());
    }
    Ok(store)
}

/// Opens an existing store for reading.
/// With `--read-only`, opens it read-only (a write through it then fails, saying so).
pub fn open_existing(cli: &Cli) -> CliResult<Store> {
    if cli.read_only {
        return open_read_only(cli);
    }
    open(cli, false, Durability::Group)
}

/// Opens an existing store for a command that only reads: read-only with `--read-only`;
/// otherwise for writing as usual, falling back to a read-only open (with a note on stderr)
/// when another process holds the store.
pub fn open_for_reading(cli: &Cli) -> CliResult<Store> {
    if !cli.read_only {
        let opts = Options::default().create_if_missing(false).durability(Durability::Group);
        match Store::open(&cli.store, opts) {
            Err(Error::Locked { pid }) if pid != std::process::id() => {
                eprintln!(
                    "note: {} is locked by a running process (pid {pid}); reading it read-only (what it had written \
                     when this command started)",
                    cli.store.display()
                );
            }
            Err(e) if e.is_unwritable() => unwritable_note(cli, &e),
            other => return opened(cli, other),
        }
    }
    open_read_only(cli)
}

/// Says on stderr (once: the command then reads read-only) that the store cannot be opened
/// for writing here, and why.
pub fn unwritable_note(cli: &Cli, e: &Error) {
    let why = match e {
        Error::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    let why = why.split(": the store").next().unwrap_or(&why).to_string();
    eprintln!(
        "note: {} cannot be opened for writing ({why}: its file system is read-only or it is not writable by \
         this user); reading it read-only, as --read-only does",
        cli.store.display()
    );
}

/// Opens the store of `--store` read-only, printing what was damaged to stderr.
pub fn open_read_only(cli: &Cli) -> CliResult<Store> {
    opened(cli, Store::open_read_only(&cli.store))
}

/// How a chat is named on the command line: its id (`chat-<hex>` as listed, `0x<hex>`, or
/// the 16 hex digits alone), or the transcript session it was imported from.
enum ChatName {
    Id(ChatId),
    Session(String),
}

/// Reads a chat argument. Chat ids are hexadecimal (`chat-000000000000002a`, `0x2a`, or the
/// 16 digits as listed); a shorter bare number is refused as ambiguous (`42` is not silently
/// chat 0x42), naming both readings. Anything else names an imported session.
fn chat_name(s: &str) -> CliResult<ChatName> {
    let hex = |h: &str, shown: &str| -> CliResult<ChatName> {
        if h.is_empty() || h.len() > 16 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CliError(format!(
                "chat id: expected {shown} followed by 1 to 16 hex digits, found {s:?} (list chats with `undertext chats`)"
            )));
        }
        u64::from_str_radix(h, 16)
            .map(|n| ChatName::Id(ChatId(n)))
            .map_err(|e| CliError(format!("chat id {s:?}: {e}")))
    };
    if let Some(h) = s.strip_prefix("chat-") {
        return hex(h, "chat-");
    }
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return hex(h, "0x");
    }
    if s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return hex(s, "");
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        let dec = s.parse::<u64>().map(|n| format!("chat-{n:016x} (decimal) or ")).unwrap_or_default();
        return Err(CliError(format!(
            "chat id {s:?} is ambiguous: chat ids are hexadecimal; write {dec}chat-{:0>16} (hex), or 0x{s}",
            s
        )));
    }
    Ok(ChatName::Session(s.to_string()))
}

/// Finds the chat of `owner` imported from session `name`: its import key exactly
/// (`claude-code:<session id>`), or a key of a format that ends with it (`<format>:<name>`:
/// the session id of Claude Code, Codex, OpenHands SDK; `mini-swe-agent:<instance id>:…`), or
/// an OpenHands evaluation log's instance id (the folder under `llm_completions/` it was read
/// from, kept in the chat's `import.source`).
fn chat_of_session(store: &Store, owner: &str, name: &str) -> CliResult<ChatId> {
    if let Some((id, _)) = undertext::import::imported_chat(store, owner, name)? {
        return Ok(id);
    }
    let mut found: Vec<(ChatId, String)> = Vec::new();
    for f in undertext::import::Format::NAMES.iter().skip(1) {
        let key = format!("{f}:{name}");
        if let Some((id, _)) = undertext::import::imported_chat(store, owner, &key)? {
            found.push((id, key));
        }
    }
    if found.is_empty() {
        // An instance id (mini-swe-agent keys add the file's hash): a scan of the owner's chats.
        let all = undertext::import::imported_chats(store, owner)?;
        let mut keys: Vec<(&String, &(ChatId, u64))> =
            all.iter().filter(|(k, _)| k.split(':').nth(1) == Some(name)).collect();
        keys.sort();
        found = keys.into_iter().map(|(k, (id, _))| (*id, k.clone())).collect();
        if found.is_empty() {
            found = openhands_instance(store, owner, name, &all)?;
        }
    }
    match found.as_slice() {
        [(id, _)] => Ok(*id),
        [] => Err(CliError(format!(
            "no chat {name:?} for owner {owner:?}: expected a chat id (chat-<hex>, 0x<hex>) or the session id \
             or import key of an imported chat, found neither (list chats with `undertext chats`)"
        ))),
        many => Err(CliError(format!(
            "session {name:?} names {} chats: {} (give one of these chat ids)",
            many.len(),
            many.iter().map(|(id, k)| format!("{id} ({k})")).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The OpenHands evaluation chats of `owner` read from `llm_completions/<instance>/…` (their
/// keys hash the file: the instance id is only in the source path).
fn openhands_instance(
    store: &Store,
    owner: &str,
    instance: &str,
    imported: &std::collections::HashMap<String, (ChatId, u64)>,
) -> CliResult<Vec<(ChatId, String)>> {
    let mut found = Vec::new();
    for (key, (id, _)) in imported.iter().filter(|(k, _)| k.starts_with("openhands:")) {
        let meta = store.chat(owner, *id)?.meta();
        let Some(source) = meta.extra.get(undertext::import::SOURCE) else { continue };
        let parts: Vec<&str> = source.split(['/', '\\']).collect();
        if parts.windows(2).any(|w| w[0] == "llm_completions" && w[1] == instance) {
            found.push((*id, key.clone()));
        }
    }
    found.sort();
    Ok(found)
}

/// Opens chat `s` of the owner: a chat id, or the session id / import key it was imported
/// from ([`chat_name`]).
pub fn chat(cli: &Cli, store: &Store, s: &str) -> CliResult<undertext::Chat> {
    let id = match chat_name(s)? {
        ChatName::Id(id) => id,
        ChatName::Session(name) => chat_of_session(store, &cli.owner, &name)?,
    };
    store.chat(&cli.owner, id).map_err(|e| match e {
        Error::NotFound { .. } => {
            CliError(format!("no chat {id} for owner {:?} (list chats with `undertext chats`)", cli.owner))
        }
        other => other.into(),
    })
}

/// Unix ms as `YYYY-MM-DD HH:MM` (UTC).
pub fn utc_minute(ms: u64) -> String {
    let (date, secs) = utc_date(ms);
    format!("{date} {:02}:{:02}", secs / 3600, secs % 3600 / 60)
}

/// Unix ms as its UTC date `YYYY-MM-DD` and the seconds since that midnight.
pub fn utc_date(ms: u64) -> (String, u64) {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    // Civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (format!("{y:04}-{mo:02}-{d:02}"), secs % 86_400)
}

/// `1234567` as `1,234,567`.
pub fn num(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes as `12.3 MB` / `45.6 KB` / `789 B`.
pub fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Prints a JSON value, pretty, to stdout.
pub fn print_json(v: &Value) -> CliResult {
    let s = serde_json::to_string_pretty(v).map_err(|e| CliError(format!("JSON output: {e}")))?;
    println!("{s}");
    Ok(())
}

/// One part as text, cut to `max` characters (0: whole).
pub fn part_text(p: &Part, max: usize) -> String {
    let cut = |t: &str| -> String {
        if max == 0 || t.chars().count() <= max {
            t.to_string()
        } else {
            let head: String = t.chars().take(max).collect();
            format!("{head}… [{} more chars]", t.chars().count() - max)
        }
    };
    match p {
        Part::Text(t) => cut(t),
        Part::Summary(t) => format!("[summary] {}", cut(t)),
        Part::ToolCall { id, name, args } => format!("[call {id}] {name} {}", cut(args)),
        Part::ToolResult { call_id, content: ToolContent::Text(t), is_error } => {
            format!("[result {call_id}{}] {}", if *is_error { " error" } else { "" }, cut(t))
        }
        Part::ToolResult { call_id, content: ToolContent::Archived { archive, preview }, .. } => format!(
            "[result {call_id}, archived {} ({} bytes, {} lines)] {}",
            archive.id,
            archive.bytes,
            archive.lines,
            cut(preview)
        ),
        Part::ApprovalRequest { id, prompt, .. } => format!("[approval request {id}] {}", cut(prompt)),
        Part::ApprovalResponse { id, approved, reason } => format!(
            "[approval {id}: {}] {}",
            if *approved { "granted" } else { "denied" },
            reason.as_deref().unwrap_or_default()
        ),
        Part::Attachment { mime, blob } => format!("[attachment {mime} {blob}]"),
    }
}
