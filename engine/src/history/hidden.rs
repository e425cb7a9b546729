//! The hidden messages of a chat (soft deletion): which seqs a hide record took out of the
//! chat's live messages, and at which revision.

use std::ops::Range;

/// The seqs hidden in one state of a chat, each range with the revision that hid it.
/// Ranges are non-empty and kept in the order they were hidden; they may overlap. Lookups go
/// through the merged ranges (a binary search).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Hidden {
    ranges: Vec<(Range<u64>, u64)>,
    merged: Vec<Range<u64>>,
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
        Hidden { ranges, merged }
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
}
