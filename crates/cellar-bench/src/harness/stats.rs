//! The one percentile rule of every benchmark (nearest rank), means, and the latency summary of
//! a set of measurements. Over no values every figure is `None`: a report shows it as `-`, or
//! NaN (`null` in JSON) in a table of numbers, never as 0.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub n: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

/// Nearest-rank percentile of ascending `sorted` (`p` in 0..=100): the smallest value with at
/// least `p`% of the values at or below it. `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// [`percentile`] of values in any order.
pub fn percentile_of(values: &[f64], p: f64) -> Option<f64> {
    percentile(&sorted(values), p)
}

/// The arithmetic mean; `None` when empty.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Summary of latencies in milliseconds (in any order); `None` when there are none.
pub fn summarize(latencies_ms: &[f64]) -> Option<LatencySummary> {
    let sorted = sorted(latencies_ms);
    Some(LatencySummary {
        n: sorted.len(),
        p50_ms: percentile(&sorted, 50.0)?,
        p95_ms: percentile(&sorted, 95.0)?,
        p99_ms: percentile(&sorted, 99.0)?,
        max_ms: *sorted.last()?,
        mean_ms: mean(&sorted)?,
    })
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 95.0), Some(95.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        // 10 values: P95 and P99 are the largest (no interpolation below the tail).
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&ten, 95.0), Some(10.0));
        assert_eq!(percentile(&ten, 50.0), Some(5.0));
        // Unsorted input: the same answers; an even count's median is the lower middle value.
        assert_eq!(percentile_of(&[4.0, 1.0, 3.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile_of(&[], 50.0), None);
    }

    #[test]
    fn means_and_summaries_of_nothing_are_none() {
        assert_eq!(mean(&[1.0, 2.0]), Some(1.5));
        assert_eq!(mean(&[]), None);
        let s = summarize(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.n, s.p50_ms, s.max_ms, s.mean_ms), (4, 2.0, 10.0, 4.0));
        assert!(summarize(&[]).is_none());
    }
}
