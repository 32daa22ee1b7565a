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
        let entry = Entry(Scored { id, score });
        if self.heap.len() < self.k {
            self.heap.push(entry);
        } else if let Some(mut worst) = self.heap.peek_mut() {
            // Full: one that ranks after the worst kept is dropped without touching the heap
            // (most of a long stream of candidates), a better one takes its place.
            if entry < *worst {
                *worst = entry;
            }
        }
    }

    /// The best `n` kept so far, best first (the selection goes on).
    pub fn best(&self, n: usize) -> Vec<Scored> {
        let mut out: Vec<Scored> = self.heap.iter().map(|e| e.0).collect();
        out.sort_by(better);
        out.truncate(n);
        out
    }

    /// The kept entries, best first.
    pub fn into_sorted(self) -> Vec<Scored> {
        let mut out: Vec<Scored> = self.heap.into_iter().map(|e| e.0).collect();
        out.sort_by(better);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn keeps_the_k_best_of_a_stream_in_ranking_order_ties_by_id() {
        let mut rng = StdRng::seed_from_u64(7);
        for k in [0, 1, 5, 100, 1000] {
            // Few distinct scores, so ties are many and the id decides.
            let all: Vec<Scored> = (0..600u32)
                .map(|i| Scored { id: DocId(i * 7 % 601), score: rng.gen_range(0..20) as f32 })
                .collect();
            let mut top = TopK::new(k);
            all.iter().for_each(|s| top.push(s.id, s.score));
            let mut expected = all.clone();
            expected.sort_by(better);
            expected.truncate(k);
            assert_eq!(top.best(3), expected[..3.min(k)], "k {k}: best 3");
            assert_eq!(top.into_sorted(), expected, "k {k}");
        }
    }
}
