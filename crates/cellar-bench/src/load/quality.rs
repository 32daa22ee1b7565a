//! Retrieval quality of what the server actually answered under load: the hit ids of each
//! query's first 200 answer over a configuration's whole sweep (warm-ups included), scored against
//! the qrels with `cellar_search::metrics` (trec_eval semantics): nDCG@10 and Recall@10 over the
//! judged queries that got an answer, and how many those are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use cellar_search::corpus::{Qrels, Query};
use cellar_search::metrics::{mean, score_query, QueryMetrics};
use serde::{Deserialize, Serialize};

/// Depth both metrics are cut at.
const DEPTH: usize = 10;

/// The first 200 answer of each query (by its index in the query list), shared by the request
/// tasks of a configuration's sweep. A body is parsed only while its query has no answer yet.
pub struct ServedAnswers {
    ranked: Mutex<Vec<Option<Vec<String>>>>,
    unreadable: AtomicU64,
}

impl ServedAnswers {
    pub fn new(n_queries: usize) -> Self {
        ServedAnswers { ranked: Mutex::new(vec![None; n_queries]), unreadable: AtomicU64::new(0) }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Option<Vec<String>>>> {
        self.ranked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answered(&self, query: usize) -> bool {
        self.slots()[query].is_some()
    }

    /// Takes the body of a 200 answer to `query`: keeps its hit ids unless the query already has
    /// an answer (then the body is not even parsed). A body without a readable `hits[].id` list
    /// is counted, not kept.
    pub fn offer(&self, query: usize, body: &[u8]) {
        if self.answered(query) {
            return;
        }
        match hit_ids(body) {
            Some(ids) => {
                self.slots()[query].get_or_insert(ids);
            }
            None => {
                self.unreadable.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[derive(Deserialize)]
struct Body {
    hits: Vec<HitId>,
}

#[derive(Deserialize)]
struct HitId {
    id: String,
}

/// `hits[].id` of a search response, best first (every other field is skipped).
fn hit_ids(body: &[u8]) -> Option<Vec<String>> {
    let body: Body = serde_json::from_slice(body).ok()?;
    Some(body.hits.into_iter().map(|h| h.id).collect())
}

/// One configuration's served quality.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServedQuality {
    /// Mean over `queries_answered` (`None` when no judged query got an answer).
    pub ndcg_at_10: Option<f64>,
    pub recall_at_10: Option<f64>,
    /// Judged queries with at least one 200 answer during the sweep.
    pub queries_answered: usize,
    /// Judged queries the bench sends.
    pub queries_judged: usize,
    /// 200 answers whose body had no readable `hits[].id` (not counted as answers).
    pub unreadable_answers: u64,
}

/// Scores the kept answers; `queries` is the list the answers are indexed by.
pub fn score(answers: &ServedAnswers, queries: &[Query], qrels: &Qrels) -> ServedQuality {
    let slots = answers.slots();
    let mut per_query = Vec::new();
    let mut judged = 0;
    for (q, ranked) in queries.iter().zip(slots.iter()) {
        let Some(judgments) = qrels.get(&q.id) else { continue };
        judged += 1;
        if let Some(ranked) = ranked {
            per_query.push(score_at_10(ranked, judgments));
        }
    }
    let m = mean(&per_query);
    let any = !per_query.is_empty();
    ServedQuality {
        ndcg_at_10: any.then_some(m.ndcg_at_10),
        // Recall@100 of a ranking cut at 10 is its Recall@10.
        recall_at_10: any.then_some(m.recall_at_100),
        queries_answered: per_query.len(),
        queries_judged: judged,
        unreadable_answers: answers.unreadable.load(Ordering::Relaxed),
    }
}

/// trec_eval metrics of the ranking's first ten ids.
fn score_at_10(ranked: &[String], judgments: &std::collections::HashMap<String, i32>) -> QueryMetrics {
    let top: Vec<&str> = ranked.iter().take(DEPTH).map(String::as_str).collect();
    score_query(&top, judgments)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(id: &str) -> Query {
        Query { id: id.into(), text: format!("text of {id}") }
    }

    fn body(ids: &[&str]) -> Vec<u8> {
        let hits: Vec<_> = ids.iter().map(|id| serde_json::json!({ "id": id, "score": 1.0 })).collect();
        serde_json::to_vec(&serde_json::json!({ "hits": hits, "candidates": 3 })).unwrap()
    }

    fn qrels(rows: &[(&str, &str, i32)]) -> Qrels {
        let mut q = Qrels::new();
        for (query, doc, grade) in rows {
            q.entry(query.to_string()).or_default().insert(doc.to_string(), *grade);
        }
        q
    }

    #[test]
    fn scores_the_first_answer_of_each_judged_query() {
        let queries = [query("a"), query("b"), query("c"), query("d")];
        let qrels = qrels(&[("a", "a1", 1), ("b", "b1", 2), ("b", "b2", 1), ("c", "c1", 1), ("d", "d1", 1)]);
        let answers = ServedAnswers::new(queries.len());
        // a: its relevant document first: nDCG 1, recall 1. The later answer is ignored.
        answers.offer(0, &body(&["a1", "x"]));
        answers.offer(0, &body(&["x", "y"]));
        // b: the grade-1 document at rank 2, the grade-2 one past rank 10.
        let mut b: Vec<String> = (0..12).map(|i| format!("n{i}")).collect();
        b[1] = "b2".into();
        b[11] = "b1".into();
        answers.offer(1, &body(&b.iter().map(String::as_str).collect::<Vec<_>>()));
        // c: an unreadable 200 body (counted, not kept), then no answer at all.
        answers.offer(2, b"{\"error\": 1}");
        // d: answered with nothing relevant.
        answers.offer(3, &body(&[]));
        let q = score(&answers, &queries, &qrels);
        // b: DCG = 1/log2(3); ideal DCG = 2 + 1/log2(3).
        let ndcg_b = (1.0 / 3f64.log2()) / (2.0 + 1.0 / 3f64.log2());
        let expected_ndcg = (1.0 + ndcg_b + 0.0) / 3.0;
        assert!((q.ndcg_at_10.unwrap() - expected_ndcg).abs() < 1e-12, "{q:?}");
        // b found one of its two relevant documents in the top 10.
        assert!((q.recall_at_10.unwrap() - (1.0 + 0.5 + 0.0) / 3.0).abs() < 1e-12, "{q:?}");
        assert_eq!((q.queries_answered, q.queries_judged, q.unreadable_answers), (3, 4, 1));
    }

    #[test]
    fn unjudged_queries_and_no_answers() {
        let queries = [query("a"), query("free")];
        let qrels = qrels(&[("a", "a1", 1)]);
        let answers = ServedAnswers::new(2);
        answers.offer(1, &body(&["a1"]));
        let q = score(&answers, &queries, &qrels);
        assert_eq!((q.ndcg_at_10, q.recall_at_10), (None, None));
        assert_eq!((q.queries_answered, q.queries_judged), (0, 1));
    }

    #[test]
    fn hit_ids_skip_every_other_field() {
        let ids = hit_ids(br#"{"hits":[{"id":"d1","score":2.5,"title":"t"},{"id":"d0"}],"params":{}}"#);
        assert_eq!(ids.unwrap(), vec!["d1", "d0"]);
        assert!(hit_ids(b"{\"hits\":[{\"score\":1}]}").is_none());
        assert!(hit_ids(b"not json").is_none());
    }
}
