//! Retrieval metrics with trec_eval semantics (what ir_measures computes through pytrec_eval):
//! nDCG@10 with linear gains and log2 discount, MRR@10, Recall@100 and Success@5, relevance
//! meaning grade ≥ 1. A judged query that retrieved nothing scores 0 on every metric.

use std::collections::HashMap;

use serde::Serialize;

/// Mean metrics over a set of queries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    pub queries: usize,
    pub ndcg_at_10: f64,
    pub mrr_at_10: f64,
    pub recall_at_100: f64,
    pub success_at_5: f64,
}

/// Metric values of one query.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueryMetrics {
    pub ndcg_at_10: f64,
    pub mrr_at_10: f64,
    pub recall_at_100: f64,
    pub success_at_5: f64,
}

/// Scores one ranking (document ids, best first) against one query's judgments.
pub fn score_query(ranked: &[&str], judged: &HashMap<String, i32>) -> QueryMetrics {
    let grade = |id: &str| judged.get(id).copied().unwrap_or(0).max(0);
    let relevant = judged.values().filter(|g| **g >= 1).count();
    let dcg: f64 = ranked.iter().take(10).enumerate().map(|(i, id)| gain(grade(id), i)).sum();
    let mut ideal: Vec<i32> = judged.values().copied().filter(|g| *g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal.iter().take(10).enumerate().map(|(i, g)| gain(*g, i)).sum();
    let first_hit = ranked.iter().take(10).position(|id| grade(id) >= 1);
    let found_100 = ranked.iter().take(100).filter(|id| grade(id) >= 1).count();
    QueryMetrics {
        ndcg_at_10: if idcg > 0.0 { dcg / idcg } else { 0.0 },
        mrr_at_10: first_hit.map_or(0.0, |i| 1.0 / (i + 1) as f64),
        recall_at_100: if relevant > 0 { found_100 as f64 / relevant as f64 } else { 0.0 },
        success_at_5: if ranked.iter().take(5).any(|id| grade(id) >= 1) { 1.0 } else { 0.0 },
    }
}

fn gain(grade: i32, rank0: usize) -> f64 {
    grade as f64 / ((rank0 + 2) as f64).log2()
}

/// Means of per-query metrics.
pub fn mean(per_query: &[QueryMetrics]) -> Metrics {
    let n = per_query.len().max(1) as f64;
    let sum = |f: fn(&QueryMetrics) -> f64| per_query.iter().map(f).sum::<f64>() / n;
    Metrics {
        queries: per_query.len(),
        ndcg_at_10: sum(|q| q.ndcg_at_10),
        mrr_at_10: sum(|q| q.mrr_at_10),
        recall_at_100: sum(|q| q.recall_at_100),
        success_at_5: sum(|q| q.success_at_5),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(pairs: &[(&str, i32)]) -> HashMap<String, i32> {
        pairs.iter().map(|(d, g)| (d.to_string(), *g)).collect()
    }

    #[test]
    fn perfect_ranking_scores_one() {
        let m = score_query(&["a", "b"], &judged(&[("a", 2), ("b", 1)]));
        assert!((m.ndcg_at_10 - 1.0).abs() < 1e-12);
        assert_eq!((m.mrr_at_10, m.recall_at_100, m.success_at_5), (1.0, 1.0, 1.0));
    }

    #[test]
    fn graded_gains_are_linear_and_discounted_by_log2() {
        let m = score_query(&["x", "b", "a"], &judged(&[("a", 2), ("b", 1), ("x", 0)]));
        let dcg = 1.0 / 3f64.log2() + 2.0 / 4f64.log2();
        let idcg = 2.0 + 1.0 / 3f64.log2();
        assert!((m.ndcg_at_10 - dcg / idcg).abs() < 1e-12);
        assert_eq!(m.mrr_at_10, 0.5);
    }

    #[test]
    fn cut_offs_are_respected() {
        let mut ranked: Vec<String> = (0..120).map(|i| format!("n{i}")).collect();
        ranked[5] = "r1".into();
        ranked[110] = "r2".into();
        let refs: Vec<&str> = ranked.iter().map(String::as_str).collect();
        let m = score_query(&refs, &judged(&[("r1", 1), ("r2", 1)]));
        assert_eq!(m.success_at_5, 0.0, "rank 6 is outside S@5");
        assert_eq!(m.mrr_at_10, 1.0 / 6.0);
        assert_eq!(m.recall_at_100, 0.5, "rank 111 is outside R@100");
    }

    #[test]
    fn empty_ranking_scores_zero() {
        assert_eq!(score_query(&[], &judged(&[("a", 1)])), QueryMetrics::default());
    }
}
