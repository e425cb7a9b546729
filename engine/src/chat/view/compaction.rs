//! Compaction and approvals: the chat's index for a model choosing what to compact, the
//! linter and the compaction tool, plans applied as records, and the first pending approval.

use std::sync::Arc;

use super::ChatView;
use crate::base::error::LintProblem;
use crate::base::error::{Error, Result};
use crate::chat::archive;
use crate::chat::history::now_ms;
use crate::disk::record::{self, CompactionRec, Kind};
use crate::kernel::store::core::{RecordOut, Txn};
use crate::model::message::{IndexLine, Message, Part, ToolContent};
use crate::rules::budget::Budget;
use crate::rules::budget::tail;
use crate::rules::budget::view::{message_tokens, preview60};
use crate::rules::compaction::{Plan, lint};

impl ChatView<'_> {
    /// Every message with its seq, role, token estimate and a 60-character preview, for a
    /// model to choose what to compact.
    pub(crate) fn index(&self) -> Result<Vec<IndexLine>> {
        let e = self.chat.core().opts.estimator.clone();
        Ok(self
            .chat
            .messages()?
            .iter()
            .map(|m| IndexLine {
                seq: m.seq,
                role: m.role,
                tokens: message_tokens(&*e, &m.parts),
                preview: preview60(m),
            })
            .collect())
    }

    /// Checks a plan without applying it: every problem, each naming its rule. The
    /// protected tail is the last two user turns whole (see [`Chat::compaction_tool_call`](crate::Chat::compaction_tool_call)
    /// for the bound a budget sets).
    pub(crate) fn lint(&self, plan: &Plan) -> Result<Vec<LintProblem>> {
        let core = self.chat.core();
        // A plan names messages by seq: the linter indexes the whole chat, hidden ones
        // included (a trim or squish of a hidden message changes nothing in the view).
        let msgs = self.chat.snapshot().messages_with_hidden()?;
        Ok(lint(
            plan,
            &msgs,
            self.protected_seq(&msgs, None),
            core.opts.squish_max_tokens,
            &*core.opts.estimator,
        ))
    }

    /// The first seq of the protected tail of `msgs` (the whole chat), bounded by
    /// `protect_max` tokens when given.
    pub(super) fn protected_seq(&self, msgs: &[Message], protect_max: Option<u64>) -> u64 {
        let e = self.chat.core().opts.estimator.clone();
        let max = protect_max.unwrap_or(u64::MAX);
        tail::protected_from(msgs, |i| message_tokens(&*e, &msgs[i].parts), max) as u64
    }

    /// The work of `Chat::compaction_tool_call` (documented there).
    pub(crate) fn compaction_tool_call(
        &self,
        args_json: &str,
        expected_revision: u64,
        budget: &Budget,
    ) -> Result<String> {
        let plan = match crate::rules::compaction::tool::parse_args(args_json) {
            Ok(p) => p,
            Err(why) => return Ok(crate::rules::compaction::tool::invalid_args_text(&why)),
        };
        match self.compact_within(&plan, expected_revision, Some(budget.protect_limit())) {
            Ok(n) => Ok(crate::rules::compaction::tool::applied_text(&plan, n)),
            Err(Error::Lint { problems }) => Ok(crate::rules::compaction::tool::problems_text(&problems)),
            Err(Error::StaleRevision { expected, found }) => {
                Ok(crate::rules::compaction::tool::stale_text(expected, found))
            }
            Err(e) => Err(e),
        }
    }

    /// The work of `Chat::compact` (documented there).
    pub(crate) fn compact(&self, plan: &Plan, expected_revision: u64) -> Result<usize> {
        self.compact_within(plan, expected_revision, None)
    }

    pub(super) fn compact_within(
        &self,
        plan: &Plan,
        expected_revision: u64,
        protect_max: Option<u64>,
    ) -> Result<usize> {
        let core = self.chat.core().clone();
        let snap = self.chat.snapshot();
        if snap.revision() != expected_revision {
            return Err(Error::StaleRevision { expected: expected_revision, found: snap.revision() });
        }
        let msgs = snap.messages_with_hidden()?;
        let prot = self.protected_seq(&msgs, protect_max);
        let problems = lint(plan, &msgs, prot, core.opts.squish_max_tokens, &*core.opts.estimator);
        if !problems.is_empty() {
            return Err(Error::Lint { problems });
        }
        let mut txn = Txn::default();
        let mut wait = None;
        let mut trims = Vec::new();
        for &t in &plan.trims {
            for p in &msgs[t as usize].parts {
                if let Part::ToolResult { content, .. } = p {
                    let id = match content {
                        ToolContent::Text(text) => {
                            let (r, w) = archive::archive_into(&core, &mut txn, self.chat.owner(), text)?;
                            wait = wait.max(w);
                            r.id
                        }
                        ToolContent::Archived { archive, .. } => archive.id,
                    };
                    trims.push((t, id.0));
                    break;
                }
            }
        }
        let squishes = plan.squishes.iter().map(|s| (s.from, s.to, s.rewrite.clone())).collect();
        let (mut w, _fleet) = self.chat.state.lock_write()?;
        if w.revision != expected_revision {
            return Err(Error::StaleRevision { expected: expected_revision, found: w.revision });
        }
        let rec =
            CompactionRec { chat: self.chat.id().0, revision: w.revision, trims, squishes, at_ms: now_ms() };
        txn.push(RecordOut::of_chat(Kind::Compaction, rec.chat, record::encode(&rec)?.into_vec()));
        let c = core.append(txn)?;
        let mut list = (*w.compactions).clone();
        list.push(rec);
        w.compactions = Arc::new(list);
        w.last_end = c.end;
        self.chat.state.publish(&w);
        drop(w);
        core.wait_durable(wait.map_or(c.end, |x| x.max(c.end)))?;
        Ok(plan.trims.len() + plan.squishes.len())
    }

    /// The first message of the current revision holding a pending approval (archived tool
    /// results are scanned whole), with the default patterns or `patterns`.
    pub(crate) fn first_pending_approval(
        &self,
        patterns: Option<&crate::rules::approval::ApprovalPatterns>,
    ) -> Result<Option<(u64, crate::rules::approval::Pending)>> {
        let default = crate::rules::approval::ApprovalPatterns::default();
        let p = patterns.unwrap_or(&default);
        let msgs = self.chat.messages()?;
        let chat = self.chat;
        let full = |a: &crate::model::message::ArchiveRef| chat.archive_text(a);
        Ok(crate::rules::approval::first_pending(&msgs, p, &full))
    }
}
