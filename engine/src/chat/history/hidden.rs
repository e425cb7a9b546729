//! The hidden messages of a chat (soft deletion): which seqs a hide record took out of the
//! chat's live messages, and at which revision; and the erased ones (every version of an
//! erased seq written up to the erasure is gone for every reader, at every revision).

use std::ops::Range;

/// The seqs hidden in one state of a chat, each range with the revision that hid it.
/// Ranges are non-empty and kept in the order they were hidden; they may overlap. Lookups go
/// through the merged ranges (a binary search).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Hidden {
    ranges: Vec<(Range<u64>, u64)>,
    merged: Vec<Range<u64>>,
    /// Every erasure of the chat (at any revision, the current one's included), each range
    /// with its revision: the versions of those seqs written at or before it are erased. A
    /// truncation does not forget them (the versions stay erased).
    erased: Vec<(Range<u64>, u64)>,
}

impl Hidden {
    /// True when no message is hidden.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// True when message `seq` is hidden.
    pub(crate) fn contains(&self, seq: u64) -> bool {
        let i = self.merged.partition_point(|r| r.end <= seq);
        self.merged.get(i).is_some_and(|r| r.start <= seq)
    }

    /// True when a message of `range` was hidden after `revision` (a checkpoint or a
    /// compaction record made at `revision` that covers it no longer stands).
    pub(crate) fn hidden_since(&self, range: &Range<u64>, revision: u64) -> bool {
        self.ranges.iter().any(|(r, rev)| *rev > revision && r.start < range.end && range.start < r.end)
    }

    /// True when the version of message `seq` written at `revision` is erased.
    pub(crate) fn erased(&self, seq: u64, revision: u64) -> bool {
        self.erased.iter().any(|(r, at)| r.contains(&seq) && revision <= *at)
    }

    /// True when some message was ever erased (at any revision).
    pub(crate) fn has_erasures(&self) -> bool {
        !self.erased.is_empty()
    }

    /// Records that `ranges` were erased at `revision` (they are hidden by [`Hidden::add`]).
    pub(crate) fn add_erased(&mut self, ranges: impl IntoIterator<Item = Range<u64>>, revision: u64) {
        self.erased.extend(ranges.into_iter().filter(|r| r.start < r.end).map(|r| (r, revision)));
    }

    /// This set in a past state of the chat, `len` messages long, whose message `seq` is the
    /// version of `revision_of(seq)`: the erased versions there are hidden too (an
    /// erasure is later than that state, so no hide of that state covers them).
    pub(crate) fn with_erased_versions(
        mut self,
        len: u64,
        revision_of: impl Fn(u64) -> Option<u64>,
    ) -> Hidden {
        let mut more = Vec::new();
        for (r, at) in &self.erased {
            for seq in r.start..r.end.min(len) {
                if revision_of(seq).is_some_and(|v| v <= *at) && !self.contains(seq) {
                    more.push((seq..seq + 1, *at));
                }
            }
        }
        if !more.is_empty() {
            self.ranges.extend(more);
            self.merged = merge(&self.ranges);
        }
        self
    }

    /// Hides `ranges` at `revision`.
    pub(crate) fn add(&mut self, ranges: impl IntoIterator<Item = Range<u64>>, revision: u64) {
        self.ranges.extend(ranges.into_iter().filter(|r| r.start < r.end).map(|r| (r, revision)));
        self.merged = merge(&self.ranges);
    }

    /// What stays hidden once the chat is truncated to `len` messages: the seqs from `len`
    /// on are gone, and a message appended there later is not hidden.
    pub(crate) fn truncated(&self, len: u64) -> Hidden {
        let ranges = self
            .ranges
            .iter()
            .filter(|(r, _)| r.start < len)
            .map(|(r, rev)| (r.start..r.end.min(len), *rev))
            .collect::<Vec<_>>();
        let merged = merge(&ranges);
        Hidden { ranges, merged, erased: self.erased.clone() }
    }

    /// The hidden seqs as sorted, disjoint, non-adjacent ranges.
    pub(crate) fn merged(&self) -> &[Range<u64>] {
        &self.merged
    }
}

fn merge(ranges: &[(Range<u64>, u64)]) -> Vec<Range<u64>> {
    let mut all: Vec<Range<u64>> = ranges.iter().map(|(r, _)| r.clone()).collect();
    all.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(all.len());
    for r in all {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_truncation_forgets_what_it_drops() {
        let mut h = Hidden::default();
        h.add([2..4, 3..6, 8..9], 1);
        assert!(h.contains(5) && !h.contains(6) && h.contains(8));
        assert_eq!(h.merged(), [2..6, 8..9]);
        assert!(!h.contains(1) && h.contains(2) && !h.contains(7) && !h.contains(9));
        assert!(h.hidden_since(&(0..3), 0) && !h.hidden_since(&(0..3), 1) && !h.hidden_since(&(6..8), 0));
        let t = h.truncated(5);
        assert_eq!((t.merged().len(), &t.merged()[0]), (1, &(2..5)));
        assert!(!t.contains(8));
    }

    #[test]
    fn an_erasure_covers_the_versions_written_up_to_it_and_survives_truncation() {
        let mut h = Hidden::default();
        h.add(std::iter::once(3..5), 4);
        h.add_erased(std::iter::once(3..5), 4);
        assert!(h.erased(3, 0) && h.erased(4, 4) && !h.erased(5, 0));
        assert!(!h.erased(3, 5), "a version written after the erasure (an append after a truncation)");
        let t = h.truncated(3);
        assert!(!t.contains(3) && t.erased(3, 2) && !t.erased(3, 6));
        assert!(t.has_erasures() && !Hidden::default().has_erasures());
    }
}
