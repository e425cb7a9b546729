//! [`AppendVec`]: a vector that one writer appends to while readers index the prefix they
//! were handed, without locks and without ever moving an element.
//!
//! Elements live in pages of [`PAGE`] elements, allocated when their first element is set;
//! the pointers to the pages live in chunks of doubling size (32, 64, 128, … pages). Neither
//! is ever reallocated, so appending never copies the history and a snapshot that holds
//! `(Arc<AppendVec>, len)` stays valid and unchanged while the writer goes on. Elements may be
//! set in any order, each once: a chat loaded lazily sets the page a reader asks for, and
//! only that page is allocated (element 99,999 alone costs one page, not the 100,000
//! elements before it).

use std::sync::OnceLock;

const BASE_BITS: u32 = 5;
const BASE: usize = 1 << BASE_BITS;
/// Enough chunks for 2^53 pages.
const CHUNKS: usize = 48;
const PAGE_BITS: u32 = 5;
/// Elements per page.
pub(crate) const PAGE: usize = 1 << PAGE_BITS;

type Page<T> = Box<[OnceLock<T>]>;
/// A chunk of page slots.
type Chunk<T> = Box<[OnceLock<Page<T>>]>;

/// An append-only vector with lock-free reads of every element already set.
#[derive(Debug)]
pub struct AppendVec<T> {
    chunks: [OnceLock<Chunk<T>>; CHUNKS],
}

impl<T> Default for AppendVec<T> {
    fn default() -> Self {
        AppendVec { chunks: std::array::from_fn(|_| OnceLock::new()) }
    }
}

/// (chunk, index in chunk) of page slot `i`.
fn locate(i: usize) -> (usize, usize) {
    let j = i / BASE + 1;
    let k = (usize::BITS - 1 - j.leading_zeros()) as usize;
    let start = BASE * ((1 << k) - 1);
    (k, i - start)
}

impl<T> AppendVec<T> {
    /// An empty vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets element `i`. Each index is set once; setting it again returns the value back.
    pub fn set(&self, i: usize, value: T) -> Result<(), T> {
        let (k, slot) = locate(i >> PAGE_BITS);
        if k >= CHUNKS {
            return Err(value);
        }
        let chunk = self.chunks[k].get_or_init(|| (0..BASE << k).map(|_| OnceLock::new()).collect());
        let page = chunk[slot].get_or_init(|| (0..PAGE).map(|_| OnceLock::new()).collect());
        page[i & (PAGE - 1)].set(value)
    }

    /// Whether the page holding element `i` exists (some element of it was set).
    pub fn has_page(&self, i: usize) -> bool {
        let (k, slot) = locate(i >> PAGE_BITS);
        self.chunks.get(k).and_then(|c| c.get()).and_then(|c| c.get(slot)).is_some_and(|p| p.get().is_some())
    }

    /// Element `i`, if it was set.
    pub fn get(&self, i: usize) -> Option<&T> {
        let (k, slot) = locate(i >> PAGE_BITS);
        self.chunks.get(k)?.get()?.get(slot)?.get()?.get(i & (PAGE - 1))?.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_covers_indexes_without_gaps() {
        let mut expect = (0, 0);
        for i in 0..10_000 {
            assert_eq!(locate(i), expect, "index {i}");
            expect.1 += 1;
            if expect.1 == BASE << expect.0 {
                expect = (expect.0 + 1, 0);
            }
        }
    }

    #[test]
    fn set_once_and_read_back() {
        let v = AppendVec::new();
        for i in 0..1000 {
            assert!(v.set(i, i * 3).is_ok());
        }
        assert_eq!(v.set(5, 0), Err(0));
        assert!((0..1000).all(|i| v.get(i) == Some(&(i * 3))));
        assert_eq!(v.get(1000), None);
    }

    #[test]
    fn elements_set_out_of_order_read_back_and_leave_the_others_unset() {
        let v = AppendVec::new();
        for i in [99_999usize, 0, 31, 32, 65_536, 12_345] {
            assert!(v.set(i, i).is_ok());
        }
        assert!([99_999usize, 0, 31, 32, 65_536, 12_345].iter().all(|&i| v.get(i) == Some(&i)));
        assert!(
            [1usize, 30, 33, 99_998, 100_000, 65_535, usize::MAX >> 8].iter().all(|&i| v.get(i).is_none())
        );
    }
}
