//! What a session costs under a provider's prompt cache: a pure model, no store.
//!
//! The model (issue 32): every major provider caches the longest unchanged prefix of a
//! request and bills it at about a tenth of the input price; the rest is billed as input
//! (Anthropic bills the part written to the cache at 1.25× input). Here the cache is the
//! **longest common prefix of whole messages** with the previous request of the same chat:
//!
//! * a request is the list of messages sent, each a [`Sent`]: a content identity
//!   ([`message_id`]: a hash of role and parts) and its estimated tokens;
//! * per call ([`PrefixCache::call`]): the stable prefix is the longest run of leading
//!   messages equal (by identity) to the previous request's; *cached* = its tokens,
//!   *uncached* = the rest; the call is a *break* when that prefix is shorter than the
//!   previous request (something already sent was changed or removed), the first call of a
//!   chat never is;
//! * cost = uncached × `cache_write` + cached × `cached` ([`Price`], US dollars per million
//!   tokens; `cache_write` defaults to `input`).
//!
//! The cache never expires here (Anthropic's lifetime is 5 minutes, refreshed on each hit;
//! an agent loop calls the model far more often than that), and a message is the unit: a
//! provider caches up to a token inside a message too, which this model ignores (a changed
//! message is billed whole).
//!
//! Two baselines a replay prices on the same session ([`super::replay`]):
//!
//! * *resend everything*: every earlier message whole at every call. Append-only, so every
//!   call after the first reads the previous request from the cache and has no break.
//! * *naive* ([`Naive`]): resend everything until a call would cross the hard line, then
//!   replace all but the newest messages that fit in the target with one summary of
//!   [`NAIVE_SUMMARY_TOKENS`]; after that keep appending to that compacted request until the
//!   next crossing.

use std::hash::{DefaultHasher, Hash, Hasher};

use undertext::{Error, Result};
use undertext::{Part, Role, ToolContent};

/// Prices in US dollars per million input tokens.
///
/// ```
/// use undertext_cli::replay::cost::Price;
/// let p: Price = "input=3,cached=0.3".parse()?;
/// assert_eq!((p.input, p.cached, p.cache_write), (3.0, 0.3, 3.0));
/// let a: Price = "input=3,cached=0.3,cache_write=3.75".parse()?;
/// assert!((a.cost(1_000_000, 1_000_000) - 4.05).abs() < 1e-9);
/// # Ok::<(), undertext::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Input tokens without a cache (what a request would cost with no caching at all).
    pub input: f64,
    /// Input tokens read from the cache.
    pub cached: f64,
    /// Uncached input tokens, which the provider writes to its cache (Anthropic: 1.25×
    /// input; OpenAI: input). Defaults to `input`.
    pub cache_write: f64,
}

impl Default for Price {
    /// `input=1,cached=0.1,cache_write=1`: costs read as multiples of the input price.
    fn default() -> Self {
        Price { input: 1.0, cached: 0.1, cache_write: 1.0 }
    }
}

impl Price {
    /// Parses `input=N,cached=N,cache_write=N` (any subset, the rest from `base`; unknown
    /// keys are refused unless listed in `also`, which are returned with their values).
    /// `cache_write` not given is `input` when `input` is given, else `base`'s.
    pub fn parse_with<'a>(s: &str, base: Price, also: &[&'a str]) -> Result<(Price, Vec<(&'a str, f64)>)> {
        let mut p = base;
        let mut write = None;
        let mut input = None;
        let mut extra = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = || {
                Error::InvalidArgument(format!(
                    "--price: expected input=N,cached=N,cache_write=N (US dollars per million tokens), \
                     found {item:?}"
                ))
            };
            let (k, v) = item.split_once('=').ok_or_else(bad)?;
            let v: f64 = v.trim().parse().map_err(|_| bad())?;
            if !v.is_finite() || v < 0.0 {
                return Err(bad());
            }
            match k.trim() {
                "input" => input = Some(v),
                "cached" => p.cached = v,
                "cache_write" => write = Some(v),
                k => match also.iter().find(|a| **a == k) {
                    Some(a) => extra.push((*a, v)),
                    None => return Err(bad()),
                },
            }
        }
        if let Some(i) = input {
            p.input = i;
            p.cache_write = i;
        }
        if let Some(w) = write {
            p.cache_write = w;
        }
        Ok((p, extra))
    }

    /// Cost in US dollars of `cached` tokens read from the cache and `uncached` written to it.
    pub fn cost(&self, cached: u64, uncached: u64) -> f64 {
        (cached as f64 * self.cached + uncached as f64 * self.cache_write) / 1e6
    }
}

impl std::str::FromStr for Price {
    type Err = Error;
    fn from_str(s: &str) -> Result<Price> {
        Price::parse_with(s, Price::default(), &[]).map(|(p, _)| p)
    }
}

impl std::fmt::Display for Price {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "input={},cached={},cache_write={}", self.input, self.cached, self.cache_write)
    }
}

/// One message of a request: its content identity and estimated tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sent {
    /// Equal for equal content ([`message_id`]).
    pub id: u64,
    /// Estimated tokens.
    pub tokens: u64,
}

/// The content identity of a message: a hash of its role and parts, exactly as sent.
pub fn message_id(role: Role, parts: &[Part]) -> u64 {
    let mut h = DefaultHasher::new();
    role.hash(&mut h);
    parts.len().hash(&mut h);
    for p in parts {
        match p {
            Part::Text(t) => (0u8, t).hash(&mut h),
            Part::ToolCall { id, name, args } => (1u8, id, name, args).hash(&mut h),
            Part::ToolResult { call_id, content, is_error } => {
                (2u8, call_id, is_error).hash(&mut h);
                match content {
                    ToolContent::Text(t) => (0u8, t).hash(&mut h),
                    ToolContent::Archived { archive, preview } => (1u8, archive, preview).hash(&mut h),
                }
            }
            Part::ApprovalRequest { id, call_id, prompt } => (3u8, id, call_id, prompt).hash(&mut h),
            Part::ApprovalResponse { id, approved, reason } => (4u8, id, approved, reason).hash(&mut h),
            Part::Attachment { mime, blob } => (5u8, mime, blob).hash(&mut h),
            Part::Summary(t) => (6u8, t).hash(&mut h),
        }
    }
    h.finish()
}

/// What the cache model makes of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Call {
    /// Messages of the request that are an exact prefix of the previous request.
    pub prefix_messages: u64,
    /// Their tokens: read from the cache.
    pub cached: u64,
    /// The rest of the request's tokens: billed as input (cache writes).
    pub uncached: u64,
    /// The prefix is shorter than the previous request: something sent before was changed
    /// or removed.
    pub broke: bool,
}

impl Call {
    /// Tokens sent.
    pub fn tokens(&self) -> u64 {
        self.cached + self.uncached
    }
}

/// The provider's prompt cache for one chat: the previous request.
#[derive(Debug, Clone, Default)]
pub struct PrefixCache {
    prev: Option<Vec<Sent>>,
}

impl PrefixCache {
    /// A chat with no request yet.
    pub fn new() -> PrefixCache {
        PrefixCache::default()
    }

    /// Prices `request` against the previous request, then keeps it as the previous one.
    ///
    /// ```
    /// use undertext_cli::replay::cost::{PrefixCache, Sent};
    /// let m = |id, tokens| Sent { id, tokens };
    /// let mut c = PrefixCache::new();
    /// assert_eq!(c.call(vec![m(1, 10), m(2, 5)]).uncached, 15);
    /// let next = c.call(vec![m(1, 10), m(2, 5), m(3, 7)]);
    /// assert_eq!((next.cached, next.uncached, next.broke), (15, 7, false));
    /// let changed = c.call(vec![m(1, 10), m(9, 2), m(3, 7)]);
    /// assert_eq!((changed.prefix_messages, changed.cached, changed.broke), (1, 10, true));
    /// ```
    pub fn call(&mut self, request: Vec<Sent>) -> Call {
        let call = self.price(&request);
        self.prev = Some(request);
        call
    }

    /// [`PrefixCache::call`] without keeping `request`.
    pub fn price(&self, request: &[Sent]) -> Call {
        let total: u64 = request.iter().map(|m| m.tokens).sum();
        let Some(prev) = &self.prev else {
            return Call { prefix_messages: 0, cached: 0, uncached: total, broke: false };
        };
        let n = request.iter().zip(prev).take_while(|(a, b)| a.id == b.id).count();
        let cached: u64 = request[..n].iter().map(|m| m.tokens).sum();
        Call { prefix_messages: n as u64, cached, uncached: total - cached, broke: n < prev.len() }
    }

    /// The previous request, if any.
    pub fn previous(&self) -> Option<&[Sent]> {
        self.prev.as_deref()
    }
}

/// Calls priced by the model, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Calls.
    pub calls: u64,
    /// Tokens read from the cache.
    pub cached: u64,
    /// Tokens billed as input (cache writes).
    pub uncached: u64,
    /// Calls that broke the cache.
    pub breaks: u64,
}

impl Tally {
    /// Adds one call.
    pub fn add(&mut self, c: &Call) {
        self.calls += 1;
        self.cached += c.cached;
        self.uncached += c.uncached;
        self.breaks += u64::from(c.broke);
    }

    /// Adds another tally.
    pub fn merge(&mut self, o: &Tally) {
        self.calls += o.calls;
        self.cached += o.cached;
        self.uncached += o.uncached;
        self.breaks += o.breaks;
    }

    /// Tokens sent.
    pub fn tokens(&self) -> u64 {
        self.cached + self.uncached
    }

    /// Cost with caching, US dollars.
    pub fn cost(&self, p: &Price) -> f64 {
        p.cost(self.cached, self.uncached)
    }

    /// Cost without any caching (every token at `input`), US dollars.
    pub fn cost_uncached(&self, p: &Price) -> f64 {
        self.tokens() as f64 * p.input / 1e6
    }
}

/// Tokens of the naive policy's summary.
pub const NAIVE_SUMMARY_TOKENS: u64 = 1_000;

/// The naive harness of issue 32: resend everything until a call would cross the hard line,
/// then replace all but the newest messages that fit in the target with one summary of
/// [`NAIVE_SUMMARY_TOKENS`]; after that keep appending to that compacted request until the
/// next crossing. The newest message is always kept (even when it alone is over the
/// target); a request still over the hard line after compaction is counted
/// ([`Naive::over_hard_line`]) and priced as sent.
///
/// ```
/// use undertext_cli::replay::cost::{Naive, Sent};
/// let mut n = Naive::new(1_900, 1_500);
/// let msgs: Vec<Sent> = (0..10).map(|i| Sent { id: i, tokens: 300 }).collect();
/// assert_eq!(n.request(&msgs[..6]).len(), 6); // 1,800: under the hard line
/// let r = n.request(&msgs[..7]); // 2,100: over; the summary and the newest message (1,300)
/// assert_eq!(r.len(), 2);
/// assert_eq!(r[1], msgs[6]);
/// assert_eq!(n.request(&msgs[..8]).len(), 3); // appended to the compacted request
/// ```
#[derive(Debug, Clone)]
pub struct Naive {
    hard: u64,
    target: u64,
    request: Vec<Sent>,
    taken: usize,
    summaries: u64,
    over: u64,
}

impl Naive {
    /// A naive harness with these lines (tokens).
    pub fn new(hard: u64, target: u64) -> Naive {
        Naive { hard, target, request: Vec::new(), taken: 0, summaries: 0, over: 0 }
    }

    /// The request of the next call, given every message of the chat so far (a prefix of
    /// what the previous call was given, extended).
    pub fn request(&mut self, messages: &[Sent]) -> &[Sent] {
        self.request.extend_from_slice(&messages[self.taken.min(messages.len())..]);
        self.taken = messages.len();
        let total: u64 = self.request.iter().map(|m| m.tokens).sum();
        if total > self.hard {
            let mut kept = 0usize;
            let mut sum = NAIVE_SUMMARY_TOKENS;
            for m in self.request.iter().rev() {
                if kept > 0 && sum + m.tokens > self.target {
                    break;
                }
                sum += m.tokens;
                kept += 1;
            }
            self.summaries += 1;
            let mut h = DefaultHasher::new();
            ("naive summary", self.summaries).hash(&mut h);
            let summary = Sent { id: h.finish(), tokens: NAIVE_SUMMARY_TOKENS };
            let tail = self.request.split_off(self.request.len() - kept);
            self.request = std::iter::once(summary).chain(tail).collect();
            if sum > self.hard {
                self.over += 1;
            }
        }
        &self.request
    }

    /// Summaries made (crossings of the hard line).
    pub fn summaries(&self) -> u64 {
        self.summaries
    }

    /// Requests still over the hard line after compaction (the newest message alone too big).
    pub fn over_hard_line(&self) -> u64 {
        self.over
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: u64, tokens: u64) -> Sent {
        Sent { id, tokens }
    }

    /// Prices requests in order.
    fn run(requests: &[Vec<Sent>]) -> (Vec<Call>, Tally) {
        let mut c = PrefixCache::new();
        let mut t = Tally::default();
        let calls: Vec<Call> = requests.iter().map(|r| c.call(r.clone())).collect();
        for call in &calls {
            t.add(call);
        }
        (calls, t)
    }

    #[test]
    fn an_append_only_session_has_no_break_and_costs_the_first_call_and_the_increments() {
        let msgs: Vec<Sent> = (0..20).map(|i| m(i, 100 + i)).collect();
        let requests: Vec<Vec<Sent>> = (1..=20).map(|n| msgs[..n].to_vec()).collect();
        let (calls, t) = run(&requests);
        assert_eq!(t.breaks, 0);
        assert_eq!(t.calls, 20);
        // Every token is written once (the first call and each increment), and read back
        // from the cache at every later call.
        let written: u64 = msgs.iter().map(|s| s.tokens).sum();
        assert_eq!(t.uncached, written);
        assert_eq!(calls[0].uncached, 100);
        assert_eq!(
            calls[5],
            Call { prefix_messages: 5, cached: 100 + 101 + 102 + 103 + 104, uncached: 105, broke: false }
        );
        let p = Price::default();
        let sent: u64 = requests.iter().flatten().map(|s| s.tokens).sum();
        assert_eq!(t.tokens(), sent);
        let want = (written as f64 * 1.0 + (sent - written) as f64 * 0.1) / 1e6;
        assert!((t.cost(&p) - want).abs() < 1e-12);
    }

    #[test]
    fn rewriting_message_2_breaks_once_and_bills_everything_after_it() {
        let a: Vec<Sent> = (0..5).map(|i| m(i, 10)).collect();
        let mut b = a.clone();
        b[2] = m(99, 4); // message 2 previewed
        b.push(m(5, 10));
        let mut c = b.clone();
        c.push(m(6, 10));
        let (calls, t) = run(&[a, b, c]);
        assert_eq!(t.breaks, 1);
        assert_eq!(calls[1], Call { prefix_messages: 2, cached: 20, uncached: 4 + 30, broke: true });
        assert_eq!(calls[2], Call { prefix_messages: 6, cached: 54, uncached: 10, broke: false });
    }

    #[test]
    fn a_removed_message_breaks_and_a_shorter_request_that_is_a_prefix_breaks_too() {
        let a = vec![m(1, 10), m(2, 10), m(3, 10)];
        let b = vec![m(1, 10), m(3, 10)];
        let (calls, t) = run(&[a.clone(), b]);
        assert_eq!((t.breaks, calls[1].cached), (1, 10));
        let (calls, t) = run(&[a.clone(), a[..2].to_vec()]);
        assert_eq!((t.breaks, calls[1].cached, calls[1].uncached), (1, 20, 0));
        let (_, t) = run(&[a.clone(), a]);
        assert_eq!(t.breaks, 0, "the same request again");
    }

    #[test]
    fn the_first_call_is_never_a_break_and_is_all_written() {
        let (calls, t) = run(&[vec![m(1, 7), m(2, 8)]]);
        assert_eq!((t.breaks, calls[0].cached, calls[0].uncached), (0, 0, 15));
    }

    #[test]
    fn prices_parse_any_subset_and_cache_write_defaults_to_input() {
        let p: Price = "".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p, Price::default());
        let p: Price = "input=3".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.input, p.cached, p.cache_write), (3.0, 0.1, 3.0));
        let p: Price = " cache_write=3.75 , input=3,cached=0.3".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.input, p.cached, p.cache_write), (3.0, 0.3, 3.75));
        assert!((p.cost(2_000_000, 1_000_000) - (0.6 + 3.75)).abs() < 1e-9);
        for bad in ["input", "input=x", "input=-1", "input=inf", "output=15", "input=3;cached=1"] {
            assert!(bad.parse::<Price>().is_err(), "{bad}");
        }
        let (p, extra) = Price::parse_with("output=15,input=2", Price::default(), &["output"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.input, p.cache_write, extra), (2.0, 2.0, vec![("output", 15.0)]));
        let base = Price { input: 3.0, cached: 0.3, cache_write: 3.75 };
        let (p, _) = Price::parse_with("cached=0.2", base, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.input, p.cached, p.cache_write), (3.0, 0.2, 3.75));
    }

    #[test]
    fn identities_follow_content() {
        let a = message_id(Role::User, &[Part::Text("a".into())]);
        assert_eq!(a, message_id(Role::User, &[Part::Text("a".into())]));
        assert_ne!(a, message_id(Role::Assistant, &[Part::Text("a".into())]));
        assert_ne!(a, message_id(Role::User, &[Part::Summary("a".into())]));
        assert_ne!(a, message_id(Role::User, &[Part::Text("b".into())]));
        let r = |t: &str| Part::ToolResult {
            call_id: "c".into(),
            content: ToolContent::Text(t.into()),
            is_error: false,
        };
        assert_ne!(message_id(Role::Tool, &[r("x")]), message_id(Role::Tool, &[r("y")]));
    }

    #[test]
    fn the_naive_policy_compacts_at_the_hard_line_then_appends() {
        // Hard line 1,900, target 1,500, messages of 300: the 7th crosses.
        let mut n = Naive::new(1_900, 1_500);
        let msgs: Vec<Sent> = (0..20).map(|i| m(i, 300)).collect();
        let mut c = PrefixCache::new();
        let mut t = Tally::default();
        let mut sizes = Vec::new();
        for k in 1..=20 {
            let r = n.request(&msgs[..k]).to_vec();
            sizes.push(r.iter().map(|s| s.tokens).sum::<u64>());
            t.add(&c.call(r));
        }
        // 300..1,800 append-only; the 7th (2,100) becomes the summary + 1 message (1,300:
        // two would be 1,600 > 1,500); then appends to 1,900; the next crossing again.
        assert_eq!(&sizes[..9], &[300, 600, 900, 1_200, 1_500, 1_800, 1_300, 1_600, 1_900]);
        assert_eq!(sizes[9], 1_300);
        assert_eq!(n.summaries(), t.breaks, "one break per crossing");
        assert_eq!(n.over_hard_line(), 0);
        assert!(sizes.iter().all(|&s| s <= 1_900));
    }

    #[test]
    fn the_naive_policy_keeps_the_newest_message_even_when_it_alone_is_too_big() {
        let mut n = Naive::new(1_000, 500);
        let r = n.request(&[m(1, 100), m(2, 2_000)]).to_vec();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1], m(2, 2_000));
        assert_eq!(n.over_hard_line(), 1);
    }
}
