//! `serve`: a read-only local web page of the store (axum on a tokio runtime, cargo feature
//! `serve`). Server-rendered HTML, no script, everything served from the binary.
//!
//! Routes (all `GET`):
//! - `/` — the owner's chats, newest activity first; `?q=` searches titles and metadata.
//! - `/search?q=WORDS&chat=ID&limit=N&hidden=1` — full-text search of the owner's messages
//!   (`Store::search`; one chat with `chat=`), each hit linking to its message (`#m<seq>`).
//! - `/chat/{id}` — the messages (`?rev=N`: the chat as it was at revision N; `?from=N`: 2,000
//!   messages a page from seq N).
//! - `/chat/{id}/attempts?turn=N` — the recorded attempts of a turn, side by side.
//! - `/chat/{id}/view?window=N&reserve=N` — the model view and the guard's decision.
//! - `/chat/{id}/checkpoints?window=N` — the published checkpoint, and the summary tree a
//!   replay of the chat builds.
//! - `/chat/{id}/chart?window=N` and `/chat/{id}/chart.svg?window=N` — the chart of `plot`.
//! - `/archive/{id}?start=A&end=B&unit=U` — any range of an archive, through `read_context`.
//! - `/style.css`.
//!
//! Safety: the server binds 127.0.0.1 by default and answers only requests whose `Host`
//! names the local machine (`localhost`, `127.0.0.1`, `[::1]`), so a web page on another
//! site cannot read the store through DNS rebinding. Any other bind address needs a token
//! (`--token`, else a random one printed once to stderr): every request carries it
//! (`?token=` once, answered by a redirect that sets a cookie; the cookie; or an
//! `Authorization: Bearer` header), compared in constant time, or gets a 401; with a token
//! the token stands in for the Host check (a rebinding page does not have it). It never writes to the store: pages
//! call only reading methods: the chart's series is computed without a store
//! (`chart::Charting`), and the model view and checkpoints pages replay the chat on a scratch
//! store in the temporary directory. Both are kept (see `chart_series`, `analysis`): a chat
//! grown by appends costs its new steps only. Bad input (an unknown or foreign chat, an absurd range, a path trick) is a
//! 4xx page; a failing page is a 500 page, never a crash of the server.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use undertext::{BlobId, ChatId, Error, Message, Part, Store, ToolContent, Unit};
use undertext::{Budget, Decision};

use super::args::ServeArgs;
use super::chart::{self, Analysis, Prices};
use super::out::num;
use super::{Cli, CliError, CliResult};

/// Inline texts longer than this are shown cut, the rest behind a `<details>`.
const INLINE_CUT: usize = 2_000;
/// At most this many messages on a chat page (`?from=` pages through longer chats).
const PAGE_MESSAGES: u64 = 2_000;
/// At most this many characters of an archive per range page.
const MAX_RANGE_CHARS: u64 = 1_000_000;
/// The chart's default window (as `plot`'s).
const CHART_WINDOW: u64 = 32_000;
/// The view's default window and reserve (as `view`'s).
const VIEW_WINDOW: u64 = 200_000;
const VIEW_RESERVE: u64 = 4_096;
/// Windows accepted on the view, chart and checkpoints pages.
const WINDOWS: std::ops::RangeInclusive<u64> = 1_000..=100_000_000;

/// Opens the store the server reads. The one place that opens it: when
/// `Store::open_read_only` exists, this switches to it, and the server works beside a
/// running agent. Until then it opens the store normally (taking its lock) and never calls a
/// writing method.
fn open_store(cli: &Cli) -> CliResult<Store> {
    // Read-only: no lock, no byte written, beside a running agent; every request refreshes
    // it to what the writer has acknowledged since (see `blocking`).
    Ok(Store::open_read_only(&cli.store)?)
}

/// (chat, window, reserve).
type ReplayKey = (u64, u64, u64);

/// A chart's replay and the analysis of the chat state it covers (revision, messages), for
/// the model view and checkpoints pages; the chart's series alone and its analysis, for the
/// chart.
#[derive(Debug, Default)]
struct Charted {
    replay: Option<chart::Replay>,
    analysis: Option<(u64, u64, Arc<Analysis>)>,
    series: Option<chart::Charting>,
    chart: Option<(u64, u64, Arc<Analysis>)>,
}

/// At most this many replays are kept (each holds a scratch store and its worker thread);
/// the least recently asked for goes first.
const KEPT_REPLAYS: usize = 8;

/// A kept replay with when it was last asked for (a tick of `Charts`' clock).
type Kept = (u64, Arc<Mutex<Charted>>);

/// The kept replays, by key, with when each was last asked for.
#[derive(Default)]
struct Charts {
    map: Mutex<(u64, HashMap<ReplayKey, Kept>)>,
}

impl Charts {
    /// The entry of `key` (made when missing), marked as just used; evicts the least
    /// recently used entries past [`KEPT_REPLAYS`].
    fn entry(&self, key: ReplayKey) -> Arc<Mutex<Charted>> {
        let mut g = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (clock, map) = &mut *g;
        *clock += 1;
        let now = *clock;
        let e = map.entry(key).or_default();
        e.0 = now;
        let found = e.1.clone();
        let mut evicted = Vec::new();
        while map.len() > KEPT_REPLAYS {
            let Some(oldest) = map.iter().min_by_key(|(_, (used, _))| *used).map(|(k, _)| *k) else { break };
            evicted.extend(map.remove(&oldest));
        }
        drop(g);
        // Dropped here (its worker stopped, its scratch store removed), or by the request
        // still holding it, outside the map's lock.
        drop(evicted);
        found
    }
}

/// Shared by the handlers.
#[derive(Clone)]
struct App {
    /// The store this request reads (refreshed when the request started).
    store: Store,
    /// The store the next request starts from: replaced by a fresh read-only open when the
    /// writer's `gc` rewrote the log (see `blocking`).
    current: Arc<Mutex<Store>>,
    /// The store's directory.
    dir: std::path::PathBuf,
    owner: String,
    prices: Prices,
    /// Replays by (chat, window, reserve): the slow part of the chart, checkpoints and model
    /// view pages.
    charts: Arc<Charts>,
    /// The token every request must carry, when there is one (see [`guard`]).
    auth: Option<Arc<Auth>>,
}

/// The environment variable `--token` may come from (a command line shows in `ps`).
const TOKEN_ENV: &str = "UNDERTEXT_SERVE_TOKEN";

/// The server's token: its hash (compared in constant time) and the cookie that carries it.
struct Auth {
    hash: blake3::Hash,
    /// The cookie's name: per port, as cookies do not tell ports apart.
    cookie: String,
}

impl Auth {
    fn new(token: &str, port: u16) -> Auth {
        Auth { hash: blake3::hash(token.as_bytes()), cookie: format!("undertext_token_{port}") }
    }

    /// Whether `given` is the token: `blake3::Hash`'s equality is constant-time, and hashing
    /// first hides the token's length too.
    fn accepts(&self, given: &str) -> bool {
        blake3::hash(given.as_bytes()) == self.hash
    }
}

/// The token of `a`: `--token` (or [`TOKEN_ENV`]) checked, else a random one for a bind
/// beyond loopback (true: generated), else none.
fn token_of(a: &ServeArgs) -> CliResult<Option<(String, bool)>> {
    let given = a.token.clone().or_else(|| std::env::var(TOKEN_ENV).ok()).filter(|t| !t.is_empty());
    match given {
        Some(t) => {
            let ok = (16..=256).contains(&t.len())
                && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'));
            if !ok {
                return Err(CliError(format!(
                    "--token: expected 16 to 256 characters of A-Z a-z 0-9 . _ ~ - (it goes in a URL and a \
                     cookie), found {} characters",
                    t.chars().count()
                )));
            }
            Ok(Some((t, false)))
        }
        None if a.bind.is_loopback() => Ok(None),
        None => Ok(Some((random_token()?, true))),
    }
}

/// 32 random bytes from the system, as 64 hex digits.
fn random_token() -> CliResult<String> {
    use std::io::Read as _;
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).map_err(|e| {
        CliError(format!("cannot make a token from /dev/urandom ({e}): give one with --token"))
    })?;
    Ok(b.iter().fold(String::with_capacity(64), |mut o, x| {
        let _ = write!(o, "{x:02x}");
        o
    }))
}

/// The address a client on another machine would use for `local` (bound to an unspecified
/// address: this machine's address on its default route, found without sending anything).
fn reachable(local: std::net::SocketAddr) -> String {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
    if !local.ip().is_unspecified() {
        return local.to_string();
    }
    let (any, probe, fallback): (IpAddr, IpAddr, IpAddr) = if local.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED.into(), Ipv4Addr::new(192, 0, 2, 1).into(), Ipv4Addr::LOCALHOST.into())
    } else {
        (
            Ipv6Addr::UNSPECIFIED.into(),
            "2001:db8::1".parse().unwrap_or(Ipv6Addr::LOCALHOST).into(),
            Ipv6Addr::LOCALHOST.into(),
        )
    };
    let ip = UdpSocket::bind(SocketAddr::new(any, 0))
        .and_then(|u| u.connect(SocketAddr::new(probe, 9)).and_then(|()| u.local_addr()))
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_unspecified())
        .unwrap_or(fallback);
    SocketAddr::new(ip, local.port()).to_string()
}

/// `serve`.
pub fn run(cli: &Cli, a: &ServeArgs) -> CliResult {
    let prices = Prices::parse(&a.price)?;
    let token = token_of(a)?;
    let store = open_store(cli)?;
    let charts = Arc::<Charts>::default();
    let current = Arc::new(Mutex::new(store.clone()));
    let app = App {
        store,
        current: current.clone(),
        dir: cli.store.clone(),
        owner: cli.owner.clone(),
        prices,
        charts: charts.clone(),
        auth: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| CliError(format!("starting the server's runtime: {e}")))?;
    let addr = std::net::SocketAddr::new(a.bind, a.port);
    let mut app = app;
    let served = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| CliError(format!("cannot listen on {addr}: {e}")))?;
        let local = listener.local_addr()?;
        let host =
            if local.ip().is_loopback() { format!("localhost:{}", local.port()) } else { local.to_string() };
        if let Some((token, generated)) = &token {
            app.auth = Some(Arc::new(Auth::new(token, local.port())));
            let url = format!(
                "http://{}/?token={}",
                if local.ip().is_loopback() { host.clone() } else { reachable(local) },
                if *generated { token.as_str() } else { "TOKEN" }
            );
            if !local.ip().is_loopback() {
                eprintln!(
                    "undertext serve: {local} is reachable beyond this machine: whoever reaches it with the token \
                     reads every chat of owner {:?} (read-only)",
                    cli.owner
                );
            }
            eprintln!(
                "undertext serve: every request needs the token{}: open {url} once (a cookie keeps it), or send \
                 \"Authorization: Bearer {}\"",
                if *generated { " (generated, printed only here)" } else { " (--token)" },
                if *generated { token.as_str() } else { "TOKEN" }
            );
        }
        println!(
            "serving {} (owner {:?}) on http://{host}/ — read-only{}; Ctrl-C stops",
            cli.store.display(),
            cli.owner,
            if app.auth.is_some() { ", token required" } else { "" }
        );
        use std::io::Write as _;
        std::io::stdout().flush()?;
        axum::serve(listener, router(app))
            .with_graceful_shutdown(stop_signal())
            .await
            .map_err(|e| CliError(format!("server: {e}")))
    });
    // Pages still rendering on the blocking pool finish before the store is closed.
    rt.shutdown_timeout(std::time::Duration::from_secs(10));
    // The kept replays' scratch stores are closed and removed.
    charts.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner).1.clear();
    let store = current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    store.close()?;
    served
}

/// Ctrl-C or SIGTERM: stop taking requests, then close the store as any command does.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn router(app: App) -> Router {
    let guarded = app.clone();
    Router::new()
        .route("/", get(chats_page))
        .route("/search", get(search_page))
        .route("/style.css", get(style))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/chat/{id}", get(chat_page))
        .route("/chat/{id}/attempts", get(attempts_page))
        .route("/chat/{id}/view", get(view_page))
        .route("/chat/{id}/checkpoints", get(checkpoints_page))
        .route("/chat/{id}/chart", get(chart_page))
        .route("/chat/{id}/chart.svg", get(chart_svg))
        .route("/archive/{id}", get(archive_page))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(guarded, guard))
        .with_state(app)
}

/// Whether a `Host` header names this machine.
fn is_local_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((ip, port)) if port.is_empty() || port.strip_prefix(':').is_some_and(all_digits) => ip,
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if all_digits(port) => name,
            Some(_) => return false,
            None => host,
        }
    };
    let name = name.to_ascii_lowercase();
    name == "localhost" || name == "127.0.0.1" || name == "::1" || name.ends_with(".localhost")
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

/// Every request passes here: with a token ([`App::auth`]) it must carry it, otherwise its
/// `Host` must name this machine ([`local_only`]).
async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    let Some(auth) = app.auth.clone() else { return local_only(req, next).await };
    let query = req.uri().query().unwrap_or_default();
    if let Some(given) = query.split('&').find_map(|kv| kv.strip_prefix("token=")) {
        if !auth.accepts(given) {
            return unauthorized("the token in ?token= is not this server's");
        }
        // The token leaves the address bar (and the history) for a cookie: the same page
        // again without it.
        let path = req.uri().path();
        let path = if path.starts_with("//") || path.starts_with("/\\") { "/" } else { path };
        let rest: Vec<&str> =
            query.split('&').filter(|kv| !kv.is_empty() && !kv.starts_with("token=")).collect();
        let location = if rest.is_empty() { path.to_string() } else { format!("{path}?{}", rest.join("&")) };
        let mut resp = StatusCode::SEE_OTHER.into_response();
        let h = resp.headers_mut();
        if let (Ok(loc), Ok(cookie)) = (
            HeaderValue::from_str(&location),
            HeaderValue::from_str(&format!("{}={given}; Path=/; HttpOnly; SameSite=Strict", auth.cookie)),
        ) {
            h.insert(header::LOCATION, loc);
            h.insert(header::SET_COOKIE, cookie);
        }
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return resp;
    }
    let bearer = req
        .headers()
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.trim().split_once(' '))
        .any(|(scheme, t)| scheme.eq_ignore_ascii_case("bearer") && auth.accepts(t.trim()));
    let cookie = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .any(|(k, v)| k == auth.cookie && auth.accepts(v));
    if bearer || cookie {
        next.run(req).await
    } else {
        unauthorized(
            "this server needs its token: open the URL it printed when it started (?token=), or send \
                      \"Authorization: Bearer TOKEN\"",
        )
    }
}

fn unauthorized(why: &str) -> Response {
    let mut resp = Fail(StatusCode::UNAUTHORIZED, why.into()).into_response();
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"undertext serve\""));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn local_only(req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok());
    match host {
        Some(h) if is_local_host(h) => next.run(req).await,
        _ => Fail(
            StatusCode::FORBIDDEN,
            "this server answers only requests for localhost, 127.0.0.1 or [::1] (Host header)".into(),
        )
        .into_response(),
    }
}

/// A page.
enum Page {
    Html(String),
    Svg(String),
}

/// A failed request: its status and what to say.
struct Fail(StatusCode, String);

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        let status = match &e {
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            Error::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Fail(status, e.to_string())
    }
}

impl From<CliError> for Fail {
    fn from(e: CliError) -> Self {
        Fail(StatusCode::INTERNAL_SERVER_ERROR, e.0)
    }
}

fn bad(msg: impl Into<String>) -> Fail {
    Fail(StatusCode::BAD_REQUEST, msg.into())
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        match self {
            Page::Html(s) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], s).into_response(),
            Page::Svg(s) => ([(header::CONTENT_TYPE, "image/svg+xml")], s).into_response(),
        }
    }
}

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        let title = format!("{} {}", self.0.as_u16(), self.0.canonical_reason().unwrap_or("error"));
        let body = format!(
            "<h1>{}</h1><p class=\"error\">{}</p><p><a href=\"/\">all chats</a></p>",
            esc(&title),
            esc(&self.1)
        );
        (self.0, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html(&title, "", &body))
            .into_response()
    }
}

type Q = Result<Query<BTreeMap<String, String>>, QueryRejection>;
type P = Result<Path<String>, PathRejection>;

/// The store brought up to what the writer acknowledged since the last request. When the
/// writer's `gc` replaced the log (the refresh says to open the store again), the store is
/// opened read-only again, and later requests read that one.
fn fresh_store(app: &App) -> Result<Store, Fail> {
    let store = app.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    match store.refresh() {
        Ok(_) => Ok(store),
        Err(Error::ReadOnly(m)) if m.contains("open the store again") => {
            let fresh = Store::open_read_only(&app.dir).map_err(|e| {
                Fail(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the store's log was replaced (gc); reopening it: {e}"),
                )
            })?;
            *app.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh.clone();
            Ok(fresh)
        }
        Err(e) => Err(Fail(StatusCode::SERVICE_UNAVAILABLE, format!("the store moved on: {e}"))),
    }
}

/// Runs `f` on the blocking pool (store reads block), times it into `Server-Timing`.
async fn blocking(app: App, f: impl FnOnce(&App) -> Result<Page, Fail> + Send + 'static) -> Response {
    let t = Instant::now();
    let r = tokio::task::spawn_blocking(move || {
        let mut app = app;
        app.store = fresh_store(&app)?;
        f(&app)
    })
    .await;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let mut resp = match r {
        Ok(Ok(p)) => p.into_response(),
        Ok(Err(f)) => f.into_response(),
        Err(_) => Fail(StatusCode::INTERNAL_SERVER_ERROR, "the page failed to render".into()).into_response(),
    };
    if let Ok(v) = HeaderValue::from_str(&format!("render;dur={ms:.3}")) {
        resp.headers_mut().insert("server-timing", v);
    }
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    resp
}

fn query(q: Q) -> Result<BTreeMap<String, String>, Fail> {
    q.map(|Query(m)| m)
        .map_err(|e| bad(format!("bad query string: expected name=value pairs, percent-encoded UTF-8 ({e})")))
}

fn path(p: P) -> Result<String, Fail> {
    p.map(|Path(s)| s).map_err(|e| bad(format!("bad path: {e}")))
}

/// A whole number parameter, `default` when absent, within `range`.
fn param(
    q: &BTreeMap<String, String>,
    key: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, Fail> {
    let Some(v) = q.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) else { return Ok(default) };
    let n: u64 = v
        .replace([',', '_'], "")
        .parse()
        .map_err(|_| bad(format!("{key}: expected a whole number, found {v:?}")))?;
    if !range.contains(&n) {
        return Err(bad(format!("{key}: expected {} to {}, found {n}", range.start(), range.end())));
    }
    Ok(n)
}

fn chat_of(app: &App, id: &str) -> Result<undertext::Chat, Fail> {
    let cid: ChatId = id.parse().map_err(|_| {
        Fail(StatusCode::NOT_FOUND, format!("no chat {id:?}: chat ids are chat-<16 hex digits>"))
    })?;
    app.store.chat(&app.owner, cid).map_err(|e| match e {
        Error::NotFound { .. } => {
            Fail(StatusCode::NOT_FOUND, format!("no chat {cid} for owner {:?}", app.owner))
        }
        other => other.into(),
    })
}

async fn not_found(req: Request) -> Response {
    Fail(StatusCode::NOT_FOUND, format!("no page at {}", req.uri().path())).into_response()
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

async fn chats_page(State(app): State<App>, q: Q) -> Response {
    blocking(app, move |app| chats(app, &query(q)?)).await
}

async fn search_page(State(app): State<App>, q: Q) -> Response {
    blocking(app, move |app| search(app, &query(q)?)).await
}

async fn chat_page(State(app): State<App>, id: P, q: Q) -> Response {
    blocking(app, move |app| chat(app, &path(id)?, &query(q)?)).await
}

async fn attempts_page(State(app): State<App>, id: P, q: Q) -> Response {
    blocking(app, move |app| attempts(app, &path(id)?, &query(q)?)).await
}

async fn view_page(State(app): State<App>, id: P, q: Q) -> Response {
    blocking(app, move |app| view(app, &path(id)?, &query(q)?)).await
}

async fn checkpoints_page(State(app): State<App>, id: P, q: Q) -> Response {
    blocking(app, move |app| checkpoints(app, &path(id)?, &query(q)?)).await
}

async fn chart_page(State(app): State<App>, id: P, q: Q) -> Response {
    blocking(app, move |app| chart_html(app, &path(id)?, &query(q)?)).await
}

async fn chart_svg(State(app): State<App>, id: P, q: Q) -> Response {
    blocking(app, move |app| {
        let (_, a) = chart_series(app, &path(id)?, &query(q)?)?;
        Ok(Page::Svg(chart::svg(&a)?))
    })
    .await
}

async fn archive_page(State(app): State<App>, id: P, q: Q) -> Response {
    blocking(app, move |app| archive(app, &path(id)?, &query(q)?)).await
}

// ---- HTML helpers ----

/// HTML-escapes text (for element content and quoted attributes).
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 16);
    esc_into(&mut o, s);
    o
}

/// Appends `s` HTML-escaped: runs without a special character are copied whole.
fn esc_into(o: &mut String, s: &str) {
    let mut last = 0;
    for (i, b) in s.bytes().enumerate() {
        let r = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&#39;",
            _ => continue,
        };
        o.push_str(&s[last..i]);
        o.push_str(r);
        last = i + 1;
    }
    o.push_str(&s[last..]);
}

fn html(title: &str, nav: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} — undertext</title>\
         <link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"/style.css\"></head>\
         <body><header><a class=\"brand\" href=\"/\">undertext</a>{nav}</header><main>{body}</main></body></html>\n",
        esc(title)
    )
}

/// The chat's tabs; each keeps the page's `?window=` (when it is a number), so switching tabs
/// keeps the budget the reader chose.
fn chat_nav(id: ChatId, here: &str, q: &BTreeMap<String, String>) -> String {
    let window = q
        .get("window")
        .and_then(|w| w.parse::<u64>().ok())
        .map_or_else(String::new, |w| format!("?window={w}"));
    let mut s = String::from("<nav>");
    for (name, href) in [
        ("messages", format!("/chat/{id}")),
        ("model view", format!("/chat/{id}/view{window}")),
        ("checkpoints", format!("/chat/{id}/checkpoints{window}")),
        ("chart", format!("/chat/{id}/chart{window}")),
    ] {
        let cls = if name == here { " class=\"here\"" } else { "" };
        let _ = write!(s, "<a{cls} href=\"{href}\">{name}</a>");
    }
    s.push_str("</nav>");
    s
}

fn when(ms: u64) -> String {
    let (date, secs) = super::out::utc_date(ms);
    format!("{date} {:02}:{:02}:{:02} UTC", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// A text, whole if short, otherwise its head and the rest behind a `<details>`.
fn text_block(t: &str, class: &str) -> String {
    let mut o = String::with_capacity(t.len() + 64);
    let cut = if t.len() <= INLINE_CUT {
        t.len()
    } else {
        t.char_indices().nth(INLINE_CUT).map_or(t.len(), |(i, _)| i)
    };
    let (head, rest) = t.split_at(cut);
    let _ = write!(o, "<pre class=\"{class}\">");
    esc_into(&mut o, head);
    o.push_str("</pre>");
    if !rest.is_empty() {
        let _ = write!(
            o,
            "<details><summary>{} more characters</summary><pre class=\"{class}\">",
            num(rest.chars().count() as u64)
        );
        esc_into(&mut o, rest);
        o.push_str("</pre></details>");
    }
    o
}

/// The form that fetches a range of an archive (no script: a GET form).
fn range_form(a: &undertext::ArchiveRef, start: u64, end: u64, unit: Unit) -> String {
    let mut units = String::new();
    for (u, n) in
        [(Unit::Chars, a.chars), (Unit::Lines, a.lines), (Unit::Bytes, a.bytes), (Unit::Utf16, a.utf16_units)]
    {
        let sel = if u == unit { " selected" } else { "" };
        let _ = write!(units, "<option value=\"{0}\"{sel}>{0} (0..{n})</option>", u.as_str());
    }
    format!(
        "<form class=\"range\" method=\"get\" action=\"/archive/{}\">read range \
         <input name=\"start\" type=\"number\" min=\"0\" value=\"{start}\" aria-label=\"start\"> .. \
         <input name=\"end\" type=\"number\" min=\"0\" value=\"{end}\" aria-label=\"end\"> \
         <select name=\"unit\" aria-label=\"unit\">{units}</select> <button>read_context</button></form>",
        a.id
    )
}

fn part_html(p: &Part) -> String {
    match p {
        Part::Text(t) if t.trim().is_empty() => String::new(),
        Part::Text(t) => text_block(t, "text"),
        Part::Summary(t) => {
            format!("<div class=\"summary\"><b>checkpoint summary</b>{}</div>", text_block(t, "text"))
        }
        Part::ToolCall { id, name, args } => format!(
            "<div class=\"call\"><b>tool call</b> <code>{}</code> <span class=\"dim\">id {}</span>{}</div>",
            esc(name),
            esc(id),
            text_block(args, "args")
        ),
        Part::ToolResult { call_id, content, is_error } => {
            let err = if *is_error { " <span class=\"err\">error</span>" } else { "" };
            match content {
                ToolContent::Text(t) => format!(
                    "<div class=\"result\"><b>tool result</b>{err} <span class=\"dim\">for {} · {} chars inline</span>{}</div>",
                    esc(call_id),
                    num(t.chars().count() as u64),
                    text_block(t, "out")
                ),
                ToolContent::Archived { archive, preview } => format!(
                    "<div class=\"result archived\"><b>tool result</b>{err} <span class=\"dim\">for {} · archived \
                     <a href=\"/archive/{}\">{}</a>: {} chars, {} lines, {} bytes — preview:</span>{}{}</div>",
                    esc(call_id),
                    archive.id,
                    short(&archive.id),
                    num(archive.chars),
                    num(archive.lines),
                    num(archive.bytes),
                    text_block(preview, "out preview"),
                    range_form(archive, 0, archive.chars.min(4_000), Unit::Chars)
                ),
            }
        }
        Part::ApprovalRequest { id, call_id, prompt } => format!(
            "<div class=\"approval\"><b>approval request</b> <span class=\"dim\">{}{}</span>{}</div>",
            esc(id),
            call_id.as_deref().map(|c| format!(" for call {}", esc(c))).unwrap_or_default(),
            text_block(prompt, "text")
        ),
        Part::ApprovalResponse { id, approved, reason } => format!(
            "<div class=\"approval\"><b>approval {}</b> <span class=\"dim\">{}</span> {}</div>",
            if *approved { "granted" } else { "denied" },
            esc(id),
            esc(reason.as_deref().unwrap_or_default())
        ),
        Part::Attachment { mime, blob } => {
            format!("<div class=\"dim\">attachment {} <code>{}</code></div>", esc(mime), short(blob))
        }
    }
}

fn short(id: &BlobId) -> String {
    id.to_string().chars().take(12).collect()
}

fn message_html(o: &mut String, m: &Message, turn_link: Option<String>) {
    let step = m
        .step
        .as_ref()
        .map(|s| format!(" · step {} of stream <code>{}</code>", s.step, esc(&s.stream_id)))
        .unwrap_or_default();
    let _ = write!(
        o,
        "<article class=\"msg {role}\" id=\"m{seq}\" data-seq=\"{seq}\"><div class=\"head\"><span class=\"seq\">#{seq}</span> \
         <span class=\"role\">{role}</span> <span class=\"dim\">turn {turn}{step} · revision {rev} · {at}</span>{link}</div>",
        role = m.role.as_str(),
        seq = m.seq,
        turn = m.turn,
        rev = m.revision,
        at = when(m.at_ms),
        link = turn_link.unwrap_or_default(),
    );
    for p in &m.parts {
        o.push_str(&part_html(p));
    }
    o.push_str("</article>\n");
}

/// The full-text search form: the owner's messages, or one chat's (`chat`).
fn search_form(chat: Option<ChatId>, value: &str) -> String {
    let (hidden, place) = match chat {
        Some(id) => {
            (format!("<input type=\"hidden\" name=\"chat\" value=\"{id}\">"), "search this chat's messages")
        }
        None => (String::new(), "search the messages of every chat"),
    };
    format!(
        "<form class=\"search fulltext\" method=\"get\" action=\"/search\">{hidden}<input name=\"q\" value=\"{}\" \
         placeholder=\"{place}\" aria-label=\"full-text search\"> <button>find</button></form>",
        esc(value)
    )
}

/// The chat page (and page of it) that shows message `seq`, with its anchor.
fn message_link(chat: ChatId, seq: u64) -> String {
    let from = seq / PAGE_MESSAGES * PAGE_MESSAGES;
    if from == 0 { format!("/chat/{chat}#m{seq}") } else { format!("/chat/{chat}?from={from}#m{seq}") }
}

/// The "Left out" section of the model view: the ranges sent as summaries, the results sent
/// as previews with the archive ids `read_context` reads them by, the tokens left out.
fn left_out(b: &mut String, chat: ChatId, o: &undertext::Omitted) {
    b.push_str("<section class=\"left-out\" id=\"left-out\"><h2>Left out</h2>");
    if o.is_empty() {
        b.push_str("<p>Nothing: the view sends every message whole.</p></section>");
        return;
    }
    let _ = write!(
        b,
        "<p>About <span id=\"left-out-tokens\">{}</span> tokens of the chat are not in the view; the model reads \
         them back with the handles below.</p><ul>",
        num(o.tokens)
    );
    for r in &o.ranges {
        let _ = write!(
            b,
            "<li class=\"range\" data-range=\"{0}..{1}\">messages <a href=\"{2}\">{0}..{1}</a> sent as a summary \
             (<code>read_messages start={0} end={1}</code>)</li>",
            r.start,
            r.end,
            message_link(chat, r.start)
        );
    }
    for (seq, id) in &o.results {
        let _ = write!(
            b,
            "<li class=\"result\" data-seq=\"{seq}\">the tool result of <a href=\"{}\">message {seq}</a> sent as a \
             preview: archive <a href=\"/archive/{id}\"><code>{id}</code></a> (<code>read_context archive={id}</code>)</li>",
            message_link(chat, *seq)
        );
    }
    let _ = write!(
        b,
        "</ul><p class=\"dim\">The note the model is given: <code>{}</code></p></section>",
        esc(&o.note())
    );
}

// ---- pages ----

/// `/search`: full-text search of the owner's messages (`Store::search`), or one chat's.
fn search(app: &App, q: &BTreeMap<String, String>) -> Result<Page, Fail> {
    let words = q.get("q").map(|s| s.trim()).unwrap_or_default();
    let chat = match q.get("chat").map(|s| s.trim()).filter(|s| !s.is_empty()) {
        Some(id) => Some(chat_of(app, id)?.id()),
        None => None,
    };
    let limit = param(q, "limit", 50, 1..=1000)?;
    let hidden = match q.get("hidden").map(|s| s.trim()) {
        None | Some("" | "0" | "off" | "false" | "no") => false,
        Some("1" | "on" | "true" | "yes") => true,
        Some(other) => return Err(bad(format!("hidden: expected 1 or 0, found {other:?}"))),
    };
    let nav = chat.map(|id| chat_nav(id, "", q)).unwrap_or_default();
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>Search {}</h1>{}",
        match chat {
            Some(id) => format!("chat <a href=\"/chat/{id}\"><code>{id}</code></a>"),
            None => format!("the chats of {}", esc(&app.owner)),
        },
        search_form(chat, words)
    );
    if words.is_empty() {
        b.push_str(
            "<p class=\"empty\">Type the words to find: every word must be in a message (its text, a tool call, a tool \
             result, an archived output, a summary); when none holds them all, those holding any are listed.</p>",
        );
        return Ok(Page::Html(html("search", &nav, &b)));
    }
    let mut scope = match chat {
        Some(id) => undertext::SearchScope::chat(id),
        None => undertext::SearchScope::all(),
    };
    scope.include_hidden = hidden;
    let limit = usize::try_from(limit).unwrap_or(1000);
    let hits = app.store.search(&app.owner, words, scope, limit)?;
    if hits.is_empty() {
        let why = if words.chars().any(char::is_alphanumeric) {
            format!("No message holds {}.", esc(words))
        } else {
            format!("{} has no words to search for (letters or digits).", esc(words))
        };
        let _ = write!(b, "<p class=\"empty\">{why}</p>");
        return Ok(Page::Html(html("search", &nav, &b)));
    }
    let _ = write!(
        b,
        "<p class=\"dim\"><span id=\"hits\">{}</span> hit(s) for <b>{}</b>, best first{}</p>",
        hits.len(),
        esc(words),
        if hidden { ", hidden messages included" } else { "" }
    );
    let mut titles: HashMap<ChatId, String> = HashMap::new();
    b.push_str(
        "<table class=\"hits\"><thead><tr><th>chat</th><th class=\"n\">seq</th><th>where</th><th>snippet</th></tr></thead><tbody>\n",
    );
    for h in &hits {
        let title = titles
            .entry(h.chat)
            .or_insert_with(|| app.store.chat(&app.owner, h.chat).map(|c| c.meta().title).unwrap_or_default())
            .clone();
        let place = match &h.archive {
            Some(id) => format!(
                "archive <a href=\"/archive/{id}?start={0}&amp;end={1}&amp;unit={2}\"><code>{3}</code></a> {0}..{1} {2}",
                h.start,
                h.end,
                h.unit.as_str(),
                short(id),
            ),
            None => {
                format!("part {} {} {}..{} {}", h.part, h.field.as_str(), h.start, h.end, h.unit.as_str())
            }
        };
        let link = message_link(h.chat, h.seq);
        let _ = writeln!(
            b,
            "<tr class=\"hit\" data-chat=\"{chat}\" data-seq=\"{seq}\"{arch}><td><a href=\"/chat/{chat}\"><code>{chat}</code></a> {}</td>\
             <td class=\"n\"><a class=\"jump\" href=\"{link}\">#{seq}</a></td><td>{place}</td><td><a href=\"{link}\">{}</a></td></tr>",
            esc(&title),
            esc(&h.snippet),
            chat = h.chat,
            seq = h.seq,
            arch = h.archive.map(|id| format!(" data-archive=\"{id}\"")).unwrap_or_default(),
        );
    }
    b.push_str("</tbody></table>");
    Ok(Page::Html(html("search", &nav, &b)))
}

fn chats(app: &App, q: &BTreeMap<String, String>) -> Result<Page, Fail> {
    let needle = q.get("q").map(|s| s.trim().to_lowercase()).unwrap_or_default();
    let mut page = undertext::Page { limit: 1000, after: None };
    let mut all = Vec::new();
    loop {
        let p = app.store.chats(&app.owner, page.clone())?;
        all.extend(p.chats);
        match p.next {
            Some(n) => page.after = Some(n),
            None => break,
        }
    }
    let total = all.len();
    if !needle.is_empty() {
        all.retain(|c| {
            c.id.to_string().contains(&needle)
                || c.meta.title.to_lowercase().contains(&needle)
                || c.meta.model.to_lowercase().contains(&needle)
                || c.meta
                    .extra
                    .iter()
                    .any(|(k, v)| k.to_lowercase().contains(&needle) || v.to_lowercase().contains(&needle))
        });
    }
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>Chats of {}</h1><form class=\"search\" method=\"get\" action=\"/\"><input name=\"q\" value=\"{}\" \
         placeholder=\"search titles and metadata\" aria-label=\"search\"> <button>search</button></form>{}\
         <p class=\"dim\">{} of {} chats, newest activity first</p>",
        esc(&app.owner),
        esc(&needle),
        search_form(None, ""),
        all.len(),
        total
    );
    b.push_str("<table class=\"chats\"><thead><tr><th>chat</th><th>title</th><th class=\"n\">messages</th><th class=\"n\">revision</th><th>format</th><th>model</th><th>last activity</th></tr></thead><tbody>\n");
    for c in &all {
        let format = c.meta.extra.get(undertext::import::FORMAT).map_or("", String::as_str);
        let parent = c
            .meta
            .extra
            .get(undertext::import::PARENT_CHAT)
            .map(|p| {
                format!(" <span class=\"dim\">(side chain of <a href=\"/chat/{0}\">{0}</a>)</span>", esc(p))
            })
            .unwrap_or_default();
        let _ = writeln!(
            b,
            "<tr data-chat=\"{id}\"><td><a href=\"/chat/{id}\"><code>{id}</code></a></td><td>{}{parent}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.meta.title),
            num(c.len),
            c.revision,
            esc(format),
            esc(&c.meta.model),
            when(c.last_activity_ms),
            id = c.id
        );
    }
    b.push_str("</tbody></table>");
    Ok(Page::Html(html("chats", "", &b)))
}

fn chat(app: &App, id: &str, q: &BTreeMap<String, String>) -> Result<Page, Fail> {
    let chat = chat_of(app, id)?;
    let current = chat.revision();
    let rev = param(q, "rev", current, 0..=current)?;
    let snap = chat.snapshot_at(rev)?;
    let meta = snap.meta();
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>{}</h1><p class=\"dim\"><code>{}</code> · {} messages · revision {}{} · model {}</p>",
        esc(&meta.title),
        chat.id(),
        num(snap.len()),
        rev,
        if rev == current { " (current)".to_string() } else { format!(" of {current}") },
        esc(if meta.model.is_empty() { "unknown" } else { &meta.model })
    );
    b.push_str(&search_form(Some(chat.id()), ""));
    let _ = write!(
        b,
        "<form class=\"rev\" method=\"get\" action=\"/chat/{}\">view the chat at revision \
         <input name=\"rev\" type=\"number\" min=\"0\" max=\"{current}\" value=\"{rev}\" aria-label=\"revision\"> \
         <button>show</button></form>",
        chat.id()
    );
    if !meta.extra.is_empty() {
        b.push_str("<details class=\"meta\"><summary>metadata</summary><table>");
        for (k, v) in &meta.extra {
            let _ = write!(b, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
        }
        b.push_str("</table></details>");
    }
    // A page of at most PAGE_MESSAGES messages from `from` (all of a chat up to that size).
    let len = snap.len();
    let from = param(q, "from", 0, 0..=len.saturating_sub(1))?;
    let end = len.min(from + PAGE_MESSAGES);
    let pager = if len > PAGE_MESSAGES {
        let link = |f: u64, label: &str| {
            format!("<a href=\"/chat/{}?rev={rev}&amp;from={f}\">{label}</a>", chat.id())
        };
        let mut p = format!("<p class=\"pager\">messages {from}..{end} of {} · ", num(len));
        if from > 0 {
            p.push_str(&link(from.saturating_sub(PAGE_MESSAGES), "earlier"));
            p.push(' ');
        }
        if end < len {
            p.push_str(&link(end, "later"));
        }
        p.push_str("</p>");
        p
    } else {
        String::new()
    };
    b.push_str(&pager);
    let mut turn = None;
    for m in snap.range(from..end)? {
        let link = if turn != Some(m.turn) && m.step.is_some() {
            turn = Some(m.turn);
            Some(format!(
                " <a class=\"attempts\" href=\"/chat/{}/attempts?turn={}\">attempts of turn {}</a>",
                chat.id(),
                m.turn,
                m.turn
            ))
        } else {
            turn = Some(m.turn);
            None
        };
        message_html(&mut b, &m, link);
    }
    b.push_str(&pager);
    Ok(Page::Html(html(&meta.title, &chat_nav(chat.id(), "messages", q), &b)))
}

fn attempts(app: &App, id: &str, q: &BTreeMap<String, String>) -> Result<Page, Fail> {
    let chat = chat_of(app, id)?;
    let turn = param(q, "turn", 0, 0..=u64::from(u32::MAX))?;
    let list = chat.attempts(turn)?;
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>Attempts of turn {turn}</h1><p class=\"dim\"><a href=\"/chat/{0}\"><code>{0}</code></a> · {1} recorded attempt(s), side by side</p>",
        chat.id(),
        list.len()
    );
    if list.is_empty() {
        b.push_str(
            "<p>No recorded steps for this turn (steps are recorded by <code>record_step</code>).</p>",
        );
    }
    b.push_str("<div class=\"attempts\">");
    for a in &list {
        let _ = write!(b, "<section class=\"attempt\"><h2>stream <code>{}</code></h2>", esc(&a.stream_id));
        for s in &a.steps {
            let _ = write!(
                b,
                "<h3>step {} — {}</h3>",
                s.step,
                match s.status {
                    undertext::StepStatus::Complete => "complete",
                    undertext::StepStatus::Interrupted => "interrupted",
                }
            );
            for m in &s.messages {
                message_html(&mut b, m, None);
            }
        }
        b.push_str("</section>");
    }
    b.push_str("</div>");
    Ok(Page::Html(html(&format!("attempts of turn {turn}"), &chat_nav(chat.id(), "", q), &b)))
}

/// The seq where the protected tail starts: the second-to-last turn-opening user message.
fn tail_start(chat: &undertext::Chat) -> Result<u64, Fail> {
    let snap = chat.snapshot();
    let mut starts = Vec::new();
    for seq in 0..snap.len() {
        let h = snap.header(seq)?;
        if h.starts_turn {
            starts.push(seq);
        }
    }
    Ok(match starts.len() {
        0 => 0,
        1 => starts[0],
        n => starts[n - 2],
    })
}

fn view(app: &App, id: &str, q: &BTreeMap<String, String>) -> Result<Page, Fail> {
    let (window, reserve) = view_budget(q)?;
    let (chat, a) = analysis(app, id, window, reserve)?;
    let budget = a.budget.clone();
    let Some(v) = &a.view else {
        return Err(Fail(StatusCode::INTERNAL_SERVER_ERROR, "the replay kept no model view".into()));
    };
    let tail = tail_start(&chat)?;
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>Model view</h1><form class=\"budget\" method=\"get\" action=\"/chat/{}/view\">window \
         <input name=\"window\" type=\"number\" min=\"{}\" value=\"{window}\" aria-label=\"window\"> reserve \
         <input name=\"reserve\" type=\"number\" min=\"0\" value=\"{reserve}\" aria-label=\"reserve\"> <button>show</button></form>\
         <p class=\"dim\">What the next model call would be sent: the chat replayed through the guard and the \
         checkpoint worker at this window on a scratch store (the worker prepares the checkpoints a harness's \
         worker would; the store itself is only read), then viewed after its last message. {} checkpoint swap(s) in the replay.</p>",
        chat.id(),
        WINDOWS.start(),
        a.swaps
    );
    let (kind, detail) = match v.decision() {
        Decision::Fits => ("fits", "at or under the soft line: sent as is".to_string()),
        Decision::Compacted { previewed, tokens_saved } if previewed.is_empty() => (
            "compacted",
            format!(
                "past the soft line, and everything older is protected ({} tokens saved)",
                num(*tokens_saved)
            ),
        ),
        Decision::Compacted { previewed, tokens_saved } => (
            "compacted",
            format!(
                "{} older tool results shown as previews ({} tokens saved): seqs {}",
                previewed.len(),
                num(*tokens_saved),
                previewed
                    .iter()
                    .collect::<std::collections::BTreeSet<_>>()
                    .iter()
                    .map(|s| format!("<a href=\"#v{s}\">{s}</a>"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Decision::Refused { estimate, limit, over_by } => (
            "refused",
            format!(
                "estimate {} over the hard line {} by {}: do not send",
                num(*estimate),
                num(*limit),
                num(*over_by)
            ),
        ),
    };
    let previewed: &[u64] = match v.decision() {
        Decision::Compacted { previewed, .. } => previewed,
        _ => &[],
    };
    let _ = write!(
        b,
        "<table class=\"facts\"><tr><th>decision</th><td><b class=\"decision {kind}\" id=\"decision\">{kind}</b> — {detail}</td></tr>\
         <tr><th>estimate</th><td><span id=\"estimate\">{}</span> tokens (raw {}, calibration ×{:.3}) of {} usable</td></tr>\
         <tr><th>lines</th><td>target {} · soft {} · hard {}</td></tr>\
         <tr><th>published checkpoint</th><td>{}</td></tr>\
         <tr><th>protected tail</th><td>from seq {tail} (the last two user turns)</td></tr>\
         <tr><th>messages</th><td>{} in the view</td></tr></table>",
        num(v.estimate()),
        num(v.raw_estimate()),
        v.calibration(),
        num(budget.usable()),
        num(budget.target_limit()),
        num(budget.soft_limit()),
        num(budget.hard_limit()),
        chat.published_checkpoint().map_or("none in the store".to_string(), |(base, reach)| format!(
            "in the store: covers seqs 0..{reach} (built at revision {base}); the replay makes its own"
        )),
        v.messages().len()
    );
    left_out(&mut b, chat.id(), v.omitted());
    b.push_str("<table class=\"view\"><thead><tr><th>seqs</th><th>role</th><th class=\"n\">tokens</th><th>content</th></tr></thead><tbody>\n");
    for m in v.messages() {
        let seqs = if m.seqs.is_empty() {
            "pinned".to_string()
        } else if m.seqs.end == m.seqs.start + 1 {
            m.seqs.start.to_string()
        } else {
            format!("{}..{}", m.seqs.start, m.seqs.end)
        };
        let mut tags = Vec::new();
        if m.parts.iter().any(|p| matches!(p, Part::Summary(_))) {
            tags.push("<span class=\"tag summary\">checkpoint summary</span>");
        }
        if previewed.iter().any(|s| m.seqs.contains(s)) {
            tags.push("<span class=\"tag preview\">previewed</span>");
        }
        if !m.seqs.is_empty() && m.seqs.start >= tail {
            tags.push("<span class=\"tag tail\">protected tail</span>");
        }
        let mut parts = String::new();
        for p in &m.parts {
            parts.push_str(&part_html(p));
        }
        let _ = writeln!(
            b,
            "<tr id=\"v{}\" class=\"{}\" data-tokens=\"{}\"><td>{seqs}</td><td>{}</td><td class=\"n\">{}</td><td>{}{parts}</td></tr>",
            m.seqs.start,
            m.role.as_str(),
            m.tokens,
            m.role.as_str(),
            num(m.tokens),
            tags.join(" ")
        );
    }
    b.push_str("</tbody></table>");
    Ok(Page::Html(html("model view", &chat_nav(chat.id(), "model view", q), &b)))
}

/// The window and reserve of the model view page: `?reserve=` at most half the window; without
/// it, the default reserve, which the window must exceed (the guard's budget needs room for
/// input beside the answer).
fn view_budget(q: &BTreeMap<String, String>) -> Result<(u64, u64), Fail> {
    let window = param(q, "window", VIEW_WINDOW, WINDOWS)?;
    if q.get("reserve").is_some_and(|v| !v.trim().is_empty()) {
        return Ok((window, param(q, "reserve", VIEW_RESERVE, 0..=window / 2)?));
    }
    if window <= VIEW_RESERVE {
        return Err(bad(format!(
            "window {window}: expected more than the reserve for the answer, {} tokens (or a smaller \
             reserve=, at most half the window)",
            num(VIEW_RESERVE)
        )));
    }
    Ok((window, VIEW_RESERVE))
}

/// The chat's replay at `window` and `reserve`. Kept by (chat, window, reserve) with the
/// analysis of the state it covers: the same revision and length answer from the cache; a
/// chat grown by appends since is replayed from where the replay stopped (its new steps
/// only); an edit or truncation replays it again. One request at a time replays a given
/// chart (others wait for it and take its result).
fn analysis(
    app: &App,
    id: &str,
    window: u64,
    reserve: u64,
) -> Result<(undertext::Chat, Arc<Analysis>), Fail> {
    let chat = chat_of(app, id)?;
    let snap = chat.snapshot();
    let entry = app.charts.entry((chat.id().0, window, reserve));
    let mut e = entry.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((rev, len, a)) = &e.analysis
        && *rev == snap.revision()
        && *len == snap.len()
    {
        return Ok((chat, a.clone()));
    }
    let mut replay = match e.replay.take() {
        Some(r) if r.extends_to(&snap) => r,
        _ => chart::Replay::new(window, reserve)?,
    };
    replay.advance(&app.store, &app.owner, &snap)?;
    if replay.steps() == 0 {
        e.replay = Some(replay);
        return Err(Fail(
            StatusCode::NOT_FOUND,
            format!("{}: no model steps (assistant messages) to replay", chat.id()),
        ));
    }
    let a = Arc::new(replay.analysis(chat.id(), snap.meta(), app.prices)?);
    e.replay = Some(replay);
    e.analysis = Some((snap.revision(), snap.len(), a.clone()));
    Ok((chat, a))
}

/// The window of `?window=` (as `plot`'s default) and the replay's reserve.
fn chart_budget(q: &BTreeMap<String, String>) -> Result<(u64, u64), Fail> {
    let window = param(q, "window", CHART_WINDOW, WINDOWS)?;
    Ok((window, crate::replay::ReplayOptions::default().reserve_output.min(window / 2)))
}

/// The chat's replay at the chart's budget (`?window=`), for the checkpoints page.
fn chart_analysis(
    app: &App,
    id: &str,
    q: &BTreeMap<String, String>,
) -> Result<(undertext::Chat, Arc<Analysis>), Fail> {
    let (window, reserve) = chart_budget(q)?;
    analysis(app, id, window, reserve)
}

/// The chart's series at `?window=` ([`chart::Charting`], no replay on a scratch store).
/// Kept like the replays: the same revision and length answer from the cache, a chat grown
/// by appends takes its new messages only, an edit or truncation starts again.
fn chart_series(
    app: &App,
    id: &str,
    q: &BTreeMap<String, String>,
) -> Result<(undertext::Chat, Arc<Analysis>), Fail> {
    let (window, reserve) = chart_budget(q)?;
    let chat = chat_of(app, id)?;
    let snap = chat.snapshot();
    let entry = app.charts.entry((chat.id().0, window, reserve));
    let mut e = entry.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((rev, len, a)) = &e.chart
        && *rev == snap.revision()
        && *len == snap.len()
    {
        return Ok((chat, a.clone()));
    }
    let mut series = match e.series.take() {
        Some(s) if s.extends_to(&snap) => s,
        _ => chart::Charting::new(window, reserve),
    };
    series.advance(&app.store, &app.owner, &snap)?;
    if series.steps() == 0 {
        e.series = Some(series);
        return Err(Fail(
            StatusCode::NOT_FOUND,
            format!("{}: no model steps (assistant messages) to replay", chat.id()),
        ));
    }
    let a = Arc::new(series.analysis(chat.id(), snap.meta(), app.prices));
    e.series = Some(series);
    e.chart = Some((snap.revision(), snap.len(), a.clone()));
    Ok((chat, a))
}

fn window_form(id: ChatId, page: &str, window: u64) -> String {
    format!(
        "<form class=\"budget\" method=\"get\" action=\"/chat/{id}/{page}\">window \
         <input name=\"window\" type=\"number\" min=\"{}\" value=\"{window}\" aria-label=\"window\"> <button>show</button></form>",
        WINDOWS.start()
    )
}

fn chart_html(app: &App, id: &str, q: &BTreeMap<String, String>) -> Result<Page, Fail> {
    let (chat, a) = chart_series(app, id, q)?;
    let svg = chart::svg(&a)?;
    let svg = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
    let mut b = String::new();
    let total = a.steps.last().map_or(0.0, |s| s.cost);
    let price = a.prices.price();
    let _ = write!(
        b,
        "<h1>Context and cost per model step</h1>{}<div class=\"chart\">{svg}</div>\
         <p><span id=\"steps\">{}</span> model steps · {} checkpoint swaps · total <span id=\"cost\">${total:.2}</span> \
         (<span id=\"breaks\">{}</span> prefix breaks) · resending everything <span id=\"resend-cost\">${:.2}</span> \
         ({} breaks{}) · naive policy <span id=\"naive-cost\">${:.2}</span> ({} breaks) · \
         <span id=\"cost-source\">{}</span> · <a href=\"/chat/{}/chart.svg?window={}\">SVG</a></p>",
        window_form(chat.id(), "chart", a.budget.window),
        a.steps.len(),
        a.swaps,
        a.views.breaks,
        a.resend.cost(&price),
        a.resend.breaks,
        if a.resend_over == 0 { String::new() } else { format!(", {} steps where it fits", a.resend.calls) },
        a.naive.cost(&price),
        a.naive.breaks,
        esc(&a.source.describe()),
        chat.id(),
        a.budget.window
    );
    b.push_str("<details><summary>the series</summary><table class=\"view\"><thead><tr><th class=\"n\">step</th><th class=\"n\">seq</th><th class=\"n\">context sent</th><th class=\"n\">everything</th><th class=\"n\">input</th><th class=\"n\">cached</th><th class=\"n\">output</th><th class=\"n\">cumulative $ (views, cache model)</th><th class=\"n\">harness's own bill $</th></tr></thead><tbody>");
    for (i, s) in a.steps.iter().enumerate() {
        let _ = write!(
            b,
            "<tr{}><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.4}</td><td class=\"n\">{}</td></tr>",
            if s.swapped { " class=\"swap\"" } else { "" },
            i + 1,
            s.seq,
            num(s.sent),
            num(s.everything),
            num(s.input),
            num(s.cached),
            num(s.output),
            s.cost,
            s.harness_cost.map_or_else(|| "-".to_string(), |c| format!("{c:.4}"))
        );
    }
    b.push_str("</tbody></table></details>");
    Ok(Page::Html(html("chart", &chat_nav(chat.id(), "chart", q), &b)))
}

fn checkpoints(app: &App, id: &str, q: &BTreeMap<String, String>) -> Result<Page, Fail> {
    let (chat, a) = chart_analysis(app, id, q)?;
    let mut b = String::new();
    let _ = write!(b, "<h1>Checkpoints</h1>{}", window_form(chat.id(), "checkpoints", a.budget.window));
    b.push_str("<h2>In the store</h2>");
    match chat.published_checkpoint() {
        Some((base, reach)) => {
            let v = chat.view(&Budget::new(100_000_000, 0))?;
            let summary = v.messages().iter().flat_map(|m| &m.parts).find_map(|p| match p {
                Part::Summary(t) => Some(t.clone()),
                _ => None,
            });
            let _ = write!(
                b,
                "<p>Published checkpoint: covers seqs 0..{reach}, built at revision {base}.</p>{}",
                summary.map(|s| part_html(&Part::Summary(s))).unwrap_or_default()
            );
        }
        None => b.push_str("<p>No checkpoint published for this chat.</p>"),
    }
    let _ = write!(
        b,
        "<h2>The summary tree of a replay</h2><p class=\"dim\">The chat replayed through the guard and the worker \
         (extractive summarizer) at a window of {} tokens, on a scratch store: {} checkpoint swap(s). The last \
         checkpoint the worker prepared:</p>",
        num(a.budget.window),
        a.swaps
    );
    let Some(cp) = &a.checkpoint else {
        b.push_str("<p>None: the chat never came near the soft line at this window.</p>");
        return Ok(Page::Html(html("checkpoints", &chat_nav(chat.id(), "checkpoints", q), &b)));
    };
    let _ = write!(
        b,
        "<table class=\"facts\"><tr><th>covers</th><td>seqs 0..{}</td></tr><tr><th>built at revision</th><td>{}</td></tr>\
         <tr><th>summarizer</th><td>{}</td></tr><tr><th>root</th><td><code>{}</code></td></tr>\
         <tr><th>this build</th><td>{} segment(s) summarized, {} merge(s) made, <b>{} summaries reused from the cache</b>, {} level(s) of merging</td></tr></table>",
        cp.reach,
        cp.base_revision,
        esc(&cp.summarizer),
        short(&cp.root),
        cp.stats.summarized,
        cp.stats.merged,
        cp.stats.cached,
        cp.stats.depth
    );
    // The tree: segments, then merges of FAN_IN at a time (the default checkpoint options),
    // a lone last child carried up unmerged.
    let fan_in = undertext::CheckpointOptions::default().fan_in.max(2);
    let mut level: Vec<String> = cp
        .segments
        .iter()
        .map(|s| format!("segment seqs {}..{} <code>{}</code>", s.range.start, s.range.end, short(&s.id)))
        .collect();
    let mut ranges: Vec<(u64, u64)> = cp.segments.iter().map(|s| (s.range.start, s.range.end)).collect();
    let mut tree: Vec<String> = level.iter().map(|l| format!("<li>{l}</li>")).collect();
    let mut depth = 0;
    while tree.len() > 1 {
        depth += 1;
        let mut next = Vec::new();
        let mut next_ranges = Vec::new();
        for (group, rg) in tree.chunks(fan_in).zip(ranges.chunks(fan_in)) {
            let (start, end) = (rg.first().map_or(0, |r| r.0), rg.last().map_or(0, |r| r.1));
            if group.len() == 1 {
                next.push(group[0].clone());
            } else {
                next.push(format!(
                    "<li><details open><summary>merge (level {depth}) of seqs {start}..{end}</summary><ul>{}</ul></details></li>",
                    group.concat()
                ));
            }
            next_ranges.push((start, end));
        }
        tree = next;
        ranges = next_ranges;
    }
    level.clear();
    let _ = write!(b, "<ul class=\"tree\">{}</ul>", tree.concat());
    b.push_str(&part_html(&Part::Summary(cp.summary.clone())));
    Ok(Page::Html(html("checkpoints", &chat_nav(chat.id(), "checkpoints", q), &b)))
}

fn archive(app: &App, id: &str, q: &BTreeMap<String, String>) -> Result<Page, Fail> {
    let aid: BlobId = id.parse().map_err(|_| {
        Fail(StatusCode::NOT_FOUND, format!("no archive {id:?}: archive ids are 64 hex digits"))
    })?;
    let r = app.store.archive_ref(&app.owner, &aid).map_err(|e| match e {
        Error::NotFound { .. } => {
            Fail(StatusCode::NOT_FOUND, format!("no archive {aid} for owner {:?}", app.owner))
        }
        other => other.into(),
    })?;
    let unit = match q.get("unit").map_or("char", String::as_str) {
        "char" | "chars" => Unit::Chars,
        "utf16" => Unit::Utf16,
        "byte" | "bytes" => Unit::Bytes,
        "line" | "lines" => Unit::Lines,
        other => return Err(bad(format!("unit: expected char, utf16, byte or line, found {other:?}"))),
    };
    let len = match unit {
        Unit::Chars => r.chars,
        Unit::Utf16 => r.utf16_units,
        Unit::Bytes => r.bytes,
        Unit::Lines => r.lines,
    };
    let start = param(q, "start", 0, 0..=len)?;
    let end = param(q, "end", len.min(start.saturating_add(4_000)), start..=len)?;
    if unit != Unit::Lines && end - start > MAX_RANGE_CHARS {
        return Err(bad(format!(
            "range {start}..{end}: at most {} {} a page",
            num(MAX_RANGE_CHARS),
            unit.as_str()
        )));
    }
    let text = app.store.read_context(&app.owner, &aid, start..end, unit)?;
    if text.len() as u64 > 4 * MAX_RANGE_CHARS {
        return Err(bad(format!(
            "range {start}..{end}: more than {} bytes; ask for fewer lines",
            num(4 * MAX_RANGE_CHARS)
        )));
    }
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>Archive <code>{}</code></h1><p class=\"dim\">{} chars · {} lines · {} bytes · {} UTF-16 units</p>{}\
         <p class=\"dim\">{} {}..{} — exactly what <code>read_context</code> returns:</p><pre class=\"out\" id=\"range\">{}</pre>",
        short(&aid),
        num(r.chars),
        num(r.lines),
        num(r.bytes),
        num(r.utf16_units),
        range_form(&r, start, end, unit),
        unit.as_str(),
        start,
        end,
        esc(&text)
    );
    Ok(Page::Html(html("archive", "", &b)))
}

const STYLE: &str = r#"
:root { --fg: #1d2330; --dim: #667085; --line: #e4e7ec; --bg: #ffffff; --accent: #1f77b4; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: #f6f7f9; }
header { display: flex; gap: 1.5em; align-items: center; padding: .6em 1.2em; background: #1d2330; }
header a { color: #d0d5dd; text-decoration: none; }
header a.brand { color: #fff; font-weight: 700; }
header nav { display: flex; gap: 1em; }
header nav a.here { color: #fff; border-bottom: 2px solid #7cb8ff; }
main { max-width: 1200px; margin: 0 auto; padding: 1em 1.2em 3em; }
h1 { font-size: 1.4em; margin: .4em 0; }
h2 { font-size: 1.15em; margin: 1.2em 0 .4em; }
h3 { font-size: 1em; margin: .8em 0 .3em; }
a { color: var(--accent); }
code { font: 12px ui-monospace, "DejaVu Sans Mono", monospace; }
.dim { color: var(--dim); }
.err, .error { color: #b42318; }
table { border-collapse: collapse; background: var(--bg); }
th, td { text-align: left; padding: .3em .6em; border-bottom: 1px solid var(--line); vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
table.chats, table.view, table.hits { width: 100%; }
.left-out { background: #fffaeb; border: 1px solid #fedf89; padding: .3em .9em; margin: .8em 0; }
form { margin: .6em 0; }
input[type=number] { width: 8em; }
input[name=q] { width: 24em; }
article.msg { background: var(--bg); border: 1px solid var(--line); border-left: 4px solid #98a2b3; border-radius: 4px; margin: .6em 0; padding: .5em .8em; }
article.user { border-left-color: #2ca02c; }
article.assistant { border-left-color: #1f77b4; }
article.tool { border-left-color: #ff7f0e; }
article.system { border-left-color: #7f56d9; }
.head { margin-bottom: .3em; }
.seq { font-weight: 700; }
.role { text-transform: uppercase; font-size: 11px; letter-spacing: .05em; font-weight: 700; }
pre { white-space: pre-wrap; word-break: break-word; margin: .3em 0; font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; background: #f9fafb; padding: .4em .6em; border-radius: 3px; max-height: 30em; overflow: auto; }
.call, .result, .approval { margin: .3em 0; }
.summary { background: #f4f3ff; border: 1px dashed #7f56d9; padding: .3em .6em; margin: .3em 0; }
.tag { display: inline-block; font-size: 11px; padding: 0 .4em; border-radius: 3px; margin-right: .3em; }
.tag.summary { background: #ebe9fe; color: #5925dc; border: 0; margin: 0; }
.tag.preview { background: #fef0c7; color: #93370d; }
.tag.tail { background: #d1fadf; color: #05603a; }
.decision.fits { color: #05603a; } .decision.compacted { color: #93370d; } .decision.refused { color: #b42318; }
.attempts { display: flex; gap: 1em; align-items: flex-start; }
.attempt { flex: 1; min-width: 0; }
a.attempts { margin-left: .6em; font-size: 12px; }
.chart { background: #fff; border: 1px solid var(--line); overflow-x: auto; }
.chart svg { display: block; max-width: 100%; height: auto; }
ul.tree { background: var(--bg); padding: .6em 1.6em; border: 1px solid var(--line); }
tr.swap td { background: #fee4e2; }
"#;

#[cfg(test)]
mod tests {
    use super::is_local_host;

    #[test]
    fn only_local_host_names_are_local() {
        for h in [
            "localhost",
            "localhost:7878",
            "127.0.0.1:80",
            "[::1]:8080",
            "[::1]",
            "LOCALHOST",
            "app.localhost:1",
        ] {
            assert!(is_local_host(h), "{h}");
        }
        for h in [
            "evil.com",
            "evil.com:7878",
            "127.0.0.1.evil.com",
            "localhost.evil.com",
            "[::1]x",
            "localhost:abc",
            "10.0.0.1:7878",
            "",
        ] {
            assert!(!is_local_host(h), "{h}");
        }
    }
}
