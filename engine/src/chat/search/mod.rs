//! Full-text search over a store's history: message texts, tool calls (name and arguments),
//! tool results inline and archived (the archive's whole text), summaries and approval
//! prompts, of one chat or all of an owner's chats (FORMAT.md, "The search index").
//!
//! The index is tantivy's (Rust's standard full-text engine), derived from the log like
//! every other index: a document per searchable part of a message version, keyed by
//! (owner, chat, seq, part). Nothing is indexed on an append's path: a search first catches
//! up the chats it covers (each chat's indexed revision and length against its current
//! ones), commits, then asks tantivy. The text itself is not stored in the index: every hit
//! is read back from the log, checked (the chat is the owner's, the message version still
//! holds the terms, it is not hidden unless asked) and located there, so a stale document
//! (an edited or truncated message, a deleted chat) is never answered.
//!
//! Ranking is BM25 (tantivy's). Query words are tokenized as the text was (Unicode
//! alphanumeric runs, lowercased, tokens over 40 bytes dropped) and ANDed: a hit holds every
//! word. When no document holds them all, documents holding any of them are ranked instead
//! (so three words of a fact of which one was misremembered still find it).

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::tokenizer::{LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer};
use tantivy::{DocAddress, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::chat::archive::{self, ArchiveCache, ArchiveText, Unit};
use crate::chat::history::{self, ChatCache, ChatRef};
use crate::model::message::{ChatId, Message, Part, ToolContent};

pub(crate) use crate::kernel::store::SEARCH_DIR;

/// The name the analyzer is registered under in the tantivy index.
const TOKENIZER: &str = "undertext";

/// Version of the documents' layout: an index written with another is dropped and rebuilt.
const LAYOUT: u32 = 1;

/// Memory budget of tantivy's writer (its minimum is 15 MB).
const WRITER_MEMORY: usize = 32 << 20;

/// Which chats a search covers.
///
/// ```
/// use undertext::{ChatId, SearchScope};
/// let all = SearchScope::all();
/// assert_eq!((all.chat, all.include_hidden), (None, false));
/// let one = SearchScope::chat(ChatId(3)).including_hidden();
/// assert_eq!((one.chat, one.include_hidden), (Some(ChatId(3)), true));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SearchScope {
    /// One chat, or (`None`) every chat of the owner.
    pub chat: Option<ChatId>,
    /// Also answer from hidden messages ([`Chat::hide`](crate::Chat::hide)); off by default.
    pub include_hidden: bool,
}

impl SearchScope {
    /// Every chat of the owner, hidden messages left out.
    pub fn all() -> SearchScope {
        SearchScope::default()
    }

    /// One chat, hidden messages left out.
    pub fn chat(id: ChatId) -> SearchScope {
        SearchScope { chat: Some(id), include_hidden: false }
    }

    /// The same scope, hidden messages included.
    pub fn including_hidden(self) -> SearchScope {
        SearchScope { include_hidden: true, ..self }
    }
}

/// Which text of a message part a hit is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HitField {
    /// A text part ([`Part::Text`]).
    Text,
    /// A summary part ([`Part::Summary`]).
    Summary,
    /// A tool call's name.
    ToolName,
    /// A tool call's arguments (JSON text).
    ToolArgs,
    /// An inline tool result's text.
    ToolResult,
    /// An archived tool result: the archive's whole text ([`SearchHit::archive`] names it).
    Archive,
    /// An approval request's prompt.
    Prompt,
}

impl HitField {
    /// The lowercase name used by the CLI and the JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            HitField::Text => "text",
            HitField::Summary => "summary",
            HitField::ToolName => "tool_name",
            HitField::ToolArgs => "tool_args",
            HitField::ToolResult => "tool_result",
            HitField::Archive => "archive",
            HitField::Prompt => "prompt",
        }
    }

    /// The field [`HitField::as_str`] names.
    pub fn parse(s: &str) -> Result<HitField> {
        Ok(match s {
            "text" => HitField::Text,
            "summary" => HitField::Summary,
            "tool_name" => HitField::ToolName,
            "tool_args" => HitField::ToolArgs,
            "tool_result" => HitField::ToolResult,
            "archive" => HitField::Archive,
            "prompt" => HitField::Prompt,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "field: expected text, summary, tool_name, tool_args, tool_result, archive or prompt, found {other:?}"
                )));
            }
        })
    }

    /// This field's text in `part`, if `part` has it (for an archived result: `None`, the
    /// text is the archive's).
    pub fn text_of(self, part: &Part) -> Option<&str> {
        match (self, part) {
            (HitField::Text, Part::Text(t)) | (HitField::Summary, Part::Summary(t)) => Some(t),
            (HitField::ToolName, Part::ToolCall { name, .. }) => Some(name),
            (HitField::ToolArgs, Part::ToolCall { args, .. }) => Some(args),
            (HitField::ToolResult, Part::ToolResult { content: ToolContent::Text(t), .. }) => Some(t),
            (HitField::Prompt, Part::ApprovalRequest { prompt, .. }) => Some(prompt),
            _ => None,
        }
    }
}

/// One answer of [`Store::search`](crate::Store::search).
///
/// `start..end` (in `unit`) is the matched words' span: in archive `archive` when it is
/// `Some` (read it with [`Store::read_context`](crate::Store::read_context)), otherwise in
/// [`field`](Self::field) of part [`part`](Self::part) of message `seq` (see
/// [`SearchHit::text_in`]); [`Store::read_hit`](crate::Store::read_hit) reads either.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The chat.
    pub chat: ChatId,
    /// The message.
    pub seq: u64,
    /// The archive the span is in (an archived tool result), or `None`: the message's text.
    pub archive: Option<BlobId>,
    /// The unit `start` and `end` count in (always [`Unit::Chars`] today).
    pub unit: Unit,
    /// Start of the span.
    pub start: u64,
    /// End of the span (exclusive).
    pub end: u64,
    /// The span with some text on either side, on one line (newlines and tabs as spaces).
    pub snippet: String,
    /// BM25 score (higher is better); hits are in decreasing score.
    pub score: f32,
    /// The part of the message (index into [`Message::parts`]).
    pub part: u32,
    /// Which text of that part.
    pub field: HitField,
}

impl SearchHit {
    /// The one JSON shape of a hit every front-end gives (the CLI's `search --json`, the C
    /// ABI's `undertext_search`, Python's `Store.search`): `{"chat": "chat-<16 hex>", "seq",
    /// "archive": hex | null, "unit", "start", "end", "snippet", "score", "part", "field"}`.
    /// [`SearchHit::from_json`] reads it back.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{NewMessage, SearchHit, SearchScope, Store};
    /// let store = Store::open(dir.path(), Default::default())?;
    /// let chat = store.chat("alice", store.create_chat("alice", Default::default())?)?;
    /// chat.append(NewMessage::user("the build fails with exit code 101"))?;
    /// let hit = &store.search("alice", "exit code", SearchScope::all(), 1)?[0];
    /// let v = hit.to_json();
    /// assert_eq!((v["seq"].as_u64(), v["archive"].is_null()), (Some(0), true));
    /// assert_eq!(store.read_hit("alice", &SearchHit::from_json(&v)?)?, "exit code");
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "chat": self.chat.to_string(), "seq": self.seq, "archive": self.archive.map(|id| id.to_string()),
            "unit": self.unit.as_str(), "start": self.start, "end": self.end, "snippet": self.snippet,
            "score": self.score, "part": self.part, "field": self.field.as_str(),
        })
    }

    /// A hit from [`SearchHit::to_json`]'s shape (`score` and `snippet` may be left out: 0 and
    /// empty; `part` and `field` may be left out for an archive hit). What is not that shape
    /// is an [`Error::InvalidArgument`] naming the key.
    pub fn from_json(v: &serde_json::Value) -> Result<SearchHit> {
        use crate::rules::json::{bad, count, obj, opt_string, string};
        let what = "search hit";
        let o = obj(v, what)?;
        let archive = opt_string(o, "archive", what)?.map(|s| s.parse::<BlobId>()).transpose()?;
        let field = match opt_string(o, "field", what)? {
            Some(f) => HitField::parse(&f)?,
            None if archive.is_some() => HitField::Archive,
            None => return Err(bad(&format!("{what}.field"), "a string", &serde_json::Value::Null)),
        };
        let part = match o.get("part") {
            None | Some(serde_json::Value::Null) if archive.is_some() => 0,
            _ => u32::try_from(count(o, "part", what)?)
                .map_err(|_| Error::InvalidArgument(format!("{what}.part: out of range")))?,
        };
        let score = match o.get("score") {
            None | Some(serde_json::Value::Null) => 0.0,
            Some(x) => x.as_f64().ok_or_else(|| bad(&format!("{what}.score"), "a number", x))? as f32,
        };
        Ok(SearchHit {
            chat: string(o, "chat", what)?.parse()?,
            seq: count(o, "seq", what)?,
            archive,
            unit: match opt_string(o, "unit", what)? {
                Some(u) => u.parse()?,
                None => Unit::Chars,
            },
            start: count(o, "start", what)?,
            end: count(o, "end", what)?,
            snippet: opt_string(o, "snippet", what)?.unwrap_or_default(),
            score,
            part,
            field,
        })
    }

    /// A search's answer as one JSON document: `{"hits": [hit, ...]}` (see [`SearchHit::to_json`]).
    pub fn list_json(hits: &[SearchHit]) -> serde_json::Value {
        serde_json::json!({ "hits": hits.iter().map(SearchHit::to_json).collect::<Vec<_>>() })
    }

    /// The text `start..end` counts in, for a hit in a message (`None` for an archive hit,
    /// or a message that is not this hit's).
    pub fn text_in<'a>(&self, message: &'a Message) -> Option<&'a str> {
        if self.archive.is_some() || message.seq != self.seq {
            return None;
        }
        message.parts.get(self.part as usize).and_then(|p| self.field.text_of(p))
    }
}

/// The fields of the tantivy schema.
#[derive(Debug, Clone, Copy)]
struct Fields {
    owner: Field,
    chat: Field,
    seq: Field,
    /// `part << 3 | field code`.
    part: Field,
    body: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let owner = b.add_text_field("owner", STRING);
    let chat = b.add_u64_field("chat", INDEXED | STORED);
    let seq = b.add_u64_field("seq", STORED);
    let part = b.add_u64_field("part", STORED);
    let indexing =
        TextFieldIndexing::default().set_tokenizer(TOKENIZER).set_index_option(IndexRecordOption::WithFreqs);
    let body = b.add_text_field("body", TextOptions::default().set_indexing_options(indexing));
    (b.build(), Fields { owner, chat, seq, part, body })
}

fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .build()
}

fn field_code(f: HitField) -> u64 {
    match f {
        HitField::Text => 0,
        HitField::Summary => 1,
        HitField::ToolName => 2,
        HitField::ToolArgs => 3,
        HitField::ToolResult => 4,
        HitField::Archive => 5,
        HitField::Prompt => 6,
    }
}

fn search_err(e: impl std::fmt::Display) -> Error {
    Error::index_msg(format!("search index: {e}"))
}

/// What the commit payload records: how far each chat is indexed.
#[derive(Debug, Default)]
struct Marks {
    /// chat → (revision, len) indexed.
    chats: HashMap<u64, (u64, u64)>,
}

impl Marks {
    fn encode(&self) -> String {
        let chats: serde_json::Map<String, serde_json::Value> =
            self.chats.iter().map(|(c, (r, l))| (c.to_string(), serde_json::json!([r, l]))).collect();
        serde_json::json!({ "layout": LAYOUT, "chats": chats }).to_string()
    }

    /// `None` for a payload of another layout (or none): the index starts over.
    fn decode(s: &str) -> Option<Marks> {
        let v: serde_json::Value = serde_json::from_str(s).ok()?;
        if v.get("layout")?.as_u64()? != u64::from(LAYOUT) {
            return None;
        }
        let mut chats = HashMap::new();
        for (k, x) in v.get("chats")?.as_object()? {
            let a = x.as_array()?;
            chats.insert(k.parse().ok()?, (a.first()?.as_u64()?, a.get(1)?.as_u64()?));
        }
        Some(Marks { chats })
    }
}

/// The open tantivy index.
struct Engine {
    writer: IndexWriter,
    reader: IndexReader,
    fields: Fields,
    analyzer: TextAnalyzer,
    marks: Marks,
}

impl Engine {
    /// Commits what was added, recording how far each chat reaches, and makes it visible.
    fn commit(&mut self) -> Result<()> {
        let payload = self.marks.encode();
        let mut prepared = self.writer.prepare_commit().map_err(search_err)?;
        prepared.set_payload(&payload);
        prepared.commit().map_err(search_err)?;
        self.reader.reload().map_err(search_err)
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("chats", &self.marks.chats.len()).finish()
    }
}

/// A store's search index: opened at the first search (in `dir`, or in memory for a
/// read-only or fleet store), caught up by each search for the chats it covers.
#[derive(Debug)]
pub(crate) struct SearchIndex {
    dir: Option<PathBuf>,
    engine: Mutex<Option<Engine>>,
}

impl SearchIndex {
    /// An index kept in `dir` (created when missing), or in memory with `None`.
    pub(crate) fn new(dir: Option<PathBuf>) -> SearchIndex {
        SearchIndex { dir, engine: Mutex::new(None) }
    }

    /// Drops the index (files included): the next search rebuilds it from the log.
    pub(crate) fn reset(&self) -> Result<()> {
        let mut g = self.engine.lock();
        if let Some(e) = g.take() {
            drop(e.reader);
            let _ = e.writer.wait_merging_threads();
        }
        if let Some(dir) = &self.dir {
            remove_dir(dir)?;
        }
        Ok(())
    }

    /// Bytes of the index's files (0 in memory or before the first search).
    pub(crate) fn size_bytes(&self) -> u64 {
        let Some(dir) = &self.dir else { return 0 };
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
            })
            .unwrap_or(0)
    }

    fn open_engine(&self) -> Result<Engine> {
        let (schema, fields) = schema();
        let index = match &self.dir {
            None => tantivy::Index::create_in_ram(schema.clone()),
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| Error::io("create_dir", dir, e))?;
                let opened =
                    tantivy::Index::open_in_dir(dir).ok().filter(|i| i.schema() == schema).filter(|i| {
                        i.load_metas().ok().and_then(|m| m.payload).and_then(|p| Marks::decode(&p)).is_some()
                    });
                match opened {
                    Some(i) => i,
                    None => {
                        // Absent, of another layout, or damaged: start over (it is derived).
                        remove_dir(dir)?;
                        std::fs::create_dir_all(dir).map_err(|e| Error::io("create_dir", dir, e))?;
                        tantivy::Index::create_in_dir(dir, schema.clone()).map_err(search_err)?
                    }
                }
            }
        };
        index.tokenizers().register(TOKENIZER, analyzer());
        let marks = index
            .load_metas()
            .ok()
            .and_then(|m| m.payload)
            .and_then(|p| Marks::decode(&p))
            .unwrap_or_default();
        let writer = index.writer_with_num_threads(1, WRITER_MEMORY).map_err(search_err)?;
        let reader =
            index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().map_err(search_err)?;
        Ok(Engine { writer, reader, fields, analyzer: analyzer(), marks })
    }

    /// Brings the chats `chats` (owner, id) up to date in the index and commits when any
    /// changed. A chat that cannot be opened (deleted) is skipped.
    pub(crate) fn catch_up(
        &self,
        cache: &ChatCache,
        archives: &ArchiveCache,
        chats: &[(String, ChatId)],
    ) -> Result<()> {
        let mut g = self.engine.lock();
        if g.is_none() {
            *g = Some(self.open_engine()?);
        }
        let Some(e) = g.as_mut() else { return Ok(()) };
        let mut changed = false;
        for (owner, id) in chats {
            changed |= index_chat(e, cache, archives, owner, *id, None)?;
        }
        if changed {
            e.commit()?;
        }
        Ok(())
    }

    /// One pass of the background indexer: the chats of every owner whose length or
    /// revision in `index.redb` differs from what the search index covers, caught up a few
    /// at a time (each batch one commit, the lock released between batches so that searches
    /// go on). Stops early when `stop` is set.
    fn background_pass(&self, cache: &ChatCache, archives: &ArchiveCache, stop: &AtomicBool) -> Result<()> {
        let tx = cache.core().index.read()?;
        let rows = crate::disk::index::all_chats(&tx)?;
        drop(tx);
        if rows.is_empty() {
            return Ok(());
        }
        let stale: Vec<(String, ChatId)> = {
            let mut g = self.engine.lock();
            if g.is_none() {
                *g = Some(self.open_engine()?);
            }
            let Some(e) = g.as_ref() else { return Ok(()) };
            rows.into_iter()
                .filter(|(chat, _, len, rev)| e.marks.chats.get(chat) != Some(&(*rev, *len)))
                .map(|(chat, owner, _, _)| (owner, ChatId(chat)))
                .collect()
        };
        for batch in stale.chunks(16) {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let mut g = self.engine.lock();
            let Some(e) = g.as_mut() else { return Ok(()) };
            let mut changed = false;
            for (owner, id) in batch {
                changed |= index_chat(e, cache, archives, owner, *id, Some(stop))?;
            }
            if changed {
                e.commit()?;
            }
        }
        Ok(())
    }

    /// Searches: see [`Store::search`](crate::Store::search).
    pub(crate) fn search(
        &self,
        cache: &ChatCache,
        archives: &ArchiveCache,
        owner: &str,
        query: &str,
        scope: SearchScope,
        limit: usize,
    ) -> Result<Vec<SearchHit>> {
        if owner.is_empty() {
            return Err(Error::InvalidArgument("owner: expected a non-empty string".into()));
        }
        let chats: Vec<(String, ChatId)> = match scope.chat {
            Some(id) => {
                // Another owner's chat, or none: the same NotFound.
                history::open_chat(cache, owner, id, true)?;
                vec![(owner.to_string(), id)]
            }
            None => {
                let marks = history::chat_marks(cache, owner)?;
                let g = self.engine.lock();
                // Only the chats that moved since they were indexed are opened.
                marks
                    .into_iter()
                    .filter(|(id, rev, len)| {
                        g.as_ref().is_none_or(|e| e.marks.chats.get(&id.0) != Some(&(*rev, *len)))
                    })
                    .map(|(id, _, _)| (owner.to_string(), id))
                    .collect()
            }
        };
        self.catch_up(cache, archives, &chats)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut g = self.engine.lock();
        let Some(e) = g.as_mut() else { return Ok(Vec::new()) };
        let terms = tokens(&mut e.analyzer, query);
        let terms: Vec<String> = {
            let mut seen = HashSet::new();
            terms.into_iter().map(|t| t.2).filter(|t| seen.insert(t.clone())).collect()
        };
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let searcher = e.reader.searcher();
        let f = e.fields;
        let mut out = Vec::new();
        for occur in [Occur::Must, Occur::Should] {
            if occur == Occur::Should && (terms.len() == 1 || !out.is_empty()) {
                break;
            }
            let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(
                Occur::Must,
                Box::new(TermQuery::new(Term::from_field_text(f.owner, owner), IndexRecordOption::Basic)),
            )];
            if let Some(id) = scope.chat {
                clauses.push((
                    Occur::Must,
                    Box::new(TermQuery::new(Term::from_field_u64(f.chat, id.0), IndexRecordOption::Basic)),
                ));
            }
            let words: Vec<(Occur, Box<dyn Query>)> = terms
                .iter()
                .map(|t| {
                    let q: Box<dyn Query> = Box::new(TermQuery::new(
                        Term::from_field_text(f.body, t),
                        IndexRecordOption::WithFreqs,
                    ));
                    (occur, q)
                })
                .collect();
            if occur == Occur::Must {
                clauses.extend(words);
            } else {
                clauses.push((Occur::Must, Box::new(BooleanQuery::new(words))));
            }
            let query = BooleanQuery::new(clauses);
            // Some documents may be stale (an edit, a truncation, a deleted chat) or hidden:
            // ask for more until `limit` hits are found or tantivy has no more.
            let mut want = limit.saturating_mul(2).saturating_add(8);
            let mut seen = HashSet::new();
            loop {
                let top = searcher
                    .search(&query, &TopDocs::with_limit(want).order_by_score())
                    .map_err(search_err)?;
                let exhausted = top.len() < want;
                out.clear();
                seen.clear();
                let mut states = HashMap::new();
                for (score, addr) in top {
                    if out.len() >= limit {
                        break;
                    }
                    let Some(key) = doc_key(&searcher, f, addr)? else { continue };
                    if !seen.insert(key) {
                        continue;
                    }
                    if let Some(hit) = verify(
                        cache,
                        archives,
                        owner,
                        key,
                        score,
                        &terms,
                        scope,
                        &mut e.analyzer,
                        &mut states,
                    )? {
                        out.push(hit);
                    }
                }
                if out.len() >= limit || exhausted || want >= 1 << 16 {
                    break;
                }
                want = want.saturating_mul(4);
            }
        }
        Ok(out)
    }
}

fn remove_dir(dir: &std::path::Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove_dir", dir, e)),
    }
}

/// (chat, seq, part code) of a document.
fn doc_key(searcher: &tantivy::Searcher, f: Fields, addr: DocAddress) -> Result<Option<(u64, u64, u64)>> {
    let doc: TantivyDocument = searcher.doc(addr).map_err(search_err)?;
    let get = |field| doc.get_first(field).and_then(|v| v.as_u64());
    Ok(match (get(f.chat), get(f.seq), get(f.part)) {
        (Some(c), Some(s), Some(p)) => Some((c, s, p)),
        _ => None,
    })
}

/// Indexes what chat `id` gained since it was last indexed (all of it again after an edit,
/// a truncation or a hide). True when anything was written.
fn index_chat(
    e: &mut Engine,
    cache: &ChatCache,
    archives: &ArchiveCache,
    owner: &str,
    id: ChatId,
    stop: Option<&AtomicBool>,
) -> Result<bool> {
    let state = match history::open_chat(cache, owner, id, true) {
        Ok(s) => s,
        Err(Error::NotFound { .. }) => return Ok(false),
        Err(err) => return Err(err),
    };
    let chat = ChatRef { state: &state, archives };
    let snap = chat.snapshot();
    let (rev, len) = (snap.revision(), snap.len());
    let from = match e.marks.chats.get(&id.0) {
        Some(&(r, l)) if r == rev && l == len => return Ok(false),
        Some(&(r, l)) if r == rev && l < len => l,
        Some(_) => {
            e.writer.delete_term(Term::from_field_u64(e.fields.chat, id.0));
            0
        }
        None => 0,
    };
    let f = e.fields;
    let mut seq = from;
    while seq < len {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            // Stopped half-way: what is added so far is recorded as covered.
            break;
        }
        let end = (seq + 256).min(len);
        for m in snap.range_with_hidden(seq..end)? {
            for (i, part) in m.parts.iter().enumerate() {
                let add = |field: HitField, text: &str| -> Result<()> {
                    if text.is_empty() {
                        return Ok(());
                    }
                    let mut doc = TantivyDocument::default();
                    doc.add_text(f.owner, owner);
                    doc.add_u64(f.chat, id.0);
                    doc.add_u64(f.seq, m.seq);
                    doc.add_u64(f.part, (i as u64) << 3 | field_code(field));
                    doc.add_text(f.body, text);
                    e.writer.add_document(doc).map_err(search_err)?;
                    Ok(())
                };
                match part {
                    Part::Text(t) => add(HitField::Text, t)?,
                    Part::Summary(t) => add(HitField::Summary, t)?,
                    Part::ToolCall { name, args, .. } => {
                        add(HitField::ToolName, name)?;
                        add(HitField::ToolArgs, args)?;
                    }
                    Part::ToolResult { content: ToolContent::Text(t), .. } => add(HitField::ToolResult, t)?,
                    Part::ToolResult { content: ToolContent::Archived { archive: a, .. }, .. } => {
                        match archive::load(cache.core(), archives, owner, &a.id) {
                            Ok(t) => add(HitField::Archive, t.as_str())?,
                            // An archive that does not read is left out (reported, not fatal).
                            Err(err) => {
                                tracing::warn!(error = %err, chat = id.0, seq = m.seq, "search: archive not indexed")
                            }
                        }
                    }
                    Part::ApprovalRequest { prompt, .. } => add(HitField::Prompt, prompt)?,
                    Part::ApprovalResponse { .. } | Part::Attachment { .. } => {}
                }
            }
        }
        seq = end;
    }
    e.marks.chats.insert(id.0, (rev, seq));
    Ok(true)
}

/// The background search indexer of a writable store: a thread that, every `interval`,
/// catches up the chats that moved ([`SearchIndex::background_pass`]), so that a search
/// rarely has much to catch up itself. Appends never wait for it. Dropping it stops the
/// thread and waits for it (at most the chat being indexed).
#[derive(Debug)]
pub(crate) struct Background {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    /// The process that started the thread: a fork child has no such thread to wait for.
    pid: u32,
}

impl Background {
    /// Starts the thread.
    pub(crate) fn start(
        index: Arc<SearchIndex>,
        cache: Arc<ChatCache>,
        archives: Arc<ArchiveCache>,
        interval: Duration,
    ) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name("undertext-search".into())
            .spawn(move || {
                let step = Duration::from_millis(20).min(interval);
                let mut waited = Duration::ZERO;
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(step);
                    waited += step;
                    if waited < interval {
                        continue;
                    }
                    waited = Duration::ZERO;
                    if let Err(e) = index.background_pass(&cache, &archives, &s) {
                        tracing::warn!(error = %e, "search: background indexing failed; searches catch up themselves");
                    }
                }
            })
            .ok();
        Background { stop, handle, pid: std::process::id() }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            if self.pid == std::process::id() {
                let _ = h.join();
            } else {
                // In a fork child the thread does not exist: leave its handle (as the
                // kernel leaves its own threads there).
                std::mem::forget(h);
            }
        }
    }
}

/// The tokens of `text`: (byte start, byte end, lowercased term).
fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut ts = analyzer.token_stream(text);
    while ts.advance() {
        let t = ts.token();
        out.push((t.offset_from, t.offset_to, t.text.clone()));
    }
    out
}

/// Reads document `key` back from the log and makes it a hit, or `None` when it is stale
/// (the chat gone or not `owner`'s, the message changed, no query word in it) or hidden.
#[allow(clippy::too_many_arguments)]
fn verify(
    cache: &ChatCache,
    archives: &ArchiveCache,
    owner: &str,
    (chat, seq, code): (u64, u64, u64),
    score: f32,
    terms: &[String],
    scope: SearchScope,
    analyzer: &mut TextAnalyzer,
    states: &mut HashMap<u64, Option<crate::chat::history::Snapshot>>,
) -> Result<Option<SearchHit>> {
    let snap = match states.entry(chat) {
        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            let s = match history::open_chat(cache, owner, ChatId(chat), true) {
                Ok(state) => Some(ChatRef { state: &state, archives }.snapshot()),
                Err(Error::NotFound { .. }) => None,
                Err(err) => return Err(err),
            };
            v.insert(s)
        }
    };
    let Some(snap) = snap.as_ref() else { return Ok(None) };
    if seq >= snap.len() || snap.is_erased(seq) || (!scope.include_hidden && snap.is_hidden(seq)) {
        return Ok(None);
    }
    let m = snap.get(seq)?;
    let part = (code >> 3) as u32;
    let field = match code & 7 {
        0 => HitField::Text,
        1 => HitField::Summary,
        2 => HitField::ToolName,
        3 => HitField::ToolArgs,
        4 => HitField::ToolResult,
        5 => HitField::Archive,
        _ => HitField::Prompt,
    };
    let Some(p) = m.parts.get(part as usize) else { return Ok(None) };
    let loaded: Arc<ArchiveText>;
    let (archive, text): (Option<BlobId>, &str) = if field == HitField::Archive {
        let Part::ToolResult { content: ToolContent::Archived { archive: a, .. }, .. } = p else {
            return Ok(None);
        };
        loaded = archive::load(cache.core(), archives, owner, &a.id)?;
        (Some(a.id), loaded.as_str())
    } else {
        let Some(t) = field.text_of(p) else { return Ok(None) };
        (None, t)
    };
    let Some((span, snippet)) = locate(analyzer, text, terms) else { return Ok(None) };
    let start = text[..span.start].chars().count() as u64;
    let end = start + text[span.clone()].chars().count() as u64;
    Ok(Some(SearchHit {
        chat: ChatId(chat),
        seq,
        archive,
        unit: Unit::Chars,
        start,
        end,
        snippet,
        score,
        part,
        field,
    }))
}

/// How far apart (bytes) the words of one span may be.
const SPAN_WINDOW: usize = 240;
/// Context on each side of a span in a snippet (chars).
const SNIPPET_CONTEXT: usize = 60;

/// The byte span in `text` that holds the most distinct query words within
/// [`SPAN_WINDOW`] bytes (the first such), and its snippet. `None` when no word is there.
fn locate(analyzer: &mut TextAnalyzer, text: &str, terms: &[String]) -> Option<(Range<usize>, String)> {
    let hits = if terms.iter().all(|t| t.is_ascii()) {
        ascii_hits(text, terms)
    } else {
        tokens(analyzer, text)
            .into_iter()
            .filter_map(|(a, b, t)| terms.iter().position(|q| *q == t).map(|i| (a, b, i)))
            .collect()
    };
    if hits.is_empty() {
        return None;
    }
    let present = hits.iter().map(|h| h.2).collect::<HashSet<_>>().len();
    // The shortest span holding the most distinct words within the window (the first of
    // equals).
    let mut best: Option<(usize, usize, Range<usize>)> = None;
    for (i, &(a, _, _)) in hits.iter().enumerate() {
        let mut distinct = HashSet::new();
        for &(_, y, t) in &hits[i..] {
            if y - a > SPAN_WINDOW {
                break;
            }
            if !distinct.insert(t) {
                continue;
            }
            let better = best
                .as_ref()
                .is_none_or(|(n, len, _)| distinct.len() > *n || (distinct.len() == *n && y - a < *len));
            if better {
                best = Some((distinct.len(), y - a, a..y));
            }
            if distinct.len() == present {
                break;
            }
        }
    }
    let (_, _, span) = best?;
    let before: usize =
        text[..span.start].char_indices().rev().nth(SNIPPET_CONTEXT - 1).map_or(0, |(i, _)| i);
    let after: usize =
        text[span.end..].char_indices().nth(SNIPPET_CONTEXT).map_or(text.len(), |(i, _)| span.end + i);
    let mut snippet = String::new();
    if before > 0 {
        snippet.push('…');
    }
    snippet.extend(text[before..after].chars().map(|c| if c.is_whitespace() { ' ' } else { c }));
    if after < text.len() {
        snippet.push('…');
    }
    Some((span, snippet))
}

/// Where ASCII `terms` occur in `text` as whole tokens, as the analyzer cuts them (an
/// alphanumeric run, compared in ASCII lowercase; runs over 40 bytes are not tokens): (byte
/// start, byte end, term index), in text order. A substring search instead of tokenizing
/// the whole text (an archive can be megabytes).
fn ascii_hits(text: &str, terms: &[String]) -> Vec<(usize, usize, usize)> {
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let alnum_at = |i: usize| text[i..].chars().next().is_some_and(char::is_alphanumeric);
    let alnum_before = |i: usize| text[..i].chars().next_back().is_some_and(char::is_alphanumeric);
    let mut out = Vec::new();
    for (ti, t) in terms.iter().enumerate() {
        let mut from = 0;
        let mut found = 0;
        while let Some(p) = lower[from..].find(t.as_str()) {
            let (a, b) = (from + p, from + p + t.len());
            from = a + 1;
            // `a` and `b` are char boundaries: `t` is ASCII and starts and ends there.
            if (a == 0 || !alnum_before(a)) && (b == bytes.len() || !alnum_at(b)) {
                out.push((a, b, ti));
                found += 1;
                if found >= 1000 {
                    break;
                }
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed step fails the test")]

    use super::*;

    #[test]
    fn a_span_holds_the_most_query_words_close_together() {
        let mut a = analyzer();
        let text = "error here\n... lots of text ...\nThe Error: exit code 42 in build";
        let terms = vec!["error".to_string(), "42".to_string()];
        let (span, snippet) = locate(&mut a, text, &terms).unwrap();
        assert_eq!(&text[span], "Error: exit code 42");
        assert!(snippet.contains("Error: exit code 42"), "{snippet}");
        assert!(locate(&mut a, text, &["absent".to_string()]).is_none());
        // Whole tokens only, as the analyzer cuts them.
        assert_eq!(ascii_hits("xerror error_1 Error", &["error".to_string()]), vec![(7, 12, 0), (15, 20, 0)]);
    }

    #[test]
    fn marks_round_trip_and_another_layout_starts_over() {
        let mut m = Marks::default();
        m.chats.insert(7, (2, 30));
        assert_eq!(Marks::decode(&m.encode()).unwrap().chats, m.chats);
        assert!(Marks::decode("{\"layout\":0,\"chats\":{}}").is_none());
    }
}
