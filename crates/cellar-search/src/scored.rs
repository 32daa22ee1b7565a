//! `Scored`: one candidate and its score, the currency of every first stage (BM25, the pooled
//! scan, the IVF) and of fusion; `better` is the one ranking order.

use std::cmp::Ordering;

use cellar_core::DocId;

/// One first-stage candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    pub id: DocId,
    pub score: f32,
}

/// Ranking order: higher score first, lower id first on ties (deterministic).
pub fn better(a: &Scored, b: &Scored) -> Ordering {
    b.score.total_cmp(&a.score).then(a.id.0.cmp(&b.id.0))
}
