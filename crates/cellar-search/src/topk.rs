//! A bounded best-`k` selection over scored documents.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use cellar_core::DocId;

pub use crate::scored::better;
use crate::scored::Scored;

/// Heap entry ordered so the heap's top is the worst kept entry (lowest score, then highest id).
struct Entry(Scored);

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        better(&self.0, &other.0)
    }
}

/// Keeps the `k` best of everything pushed.
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Entry>,
}

impl TopK {
    pub fn new(k: usize) -> TopK {
        TopK { k, heap: BinaryHeap::with_capacity(k + 1) }
    }

    pub fn push(&mut self, id: DocId, score: f32) {
        if self.k == 0 {
            return;
        }
        self.heap.push(Entry(Scored { id, score }));
        if self.heap.len() > self.k {
            self.heap.pop();
        }
    }

    /// The kept entries, best first.
    pub fn into_sorted(self) -> Vec<Scored> {
        let mut out: Vec<Scored> = self.heap.into_iter().map(|e| e.0).collect();
        out.sort_by(better);
        out
    }
}
