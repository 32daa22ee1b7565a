//! The percentile rule of every benchmark (`cellar_core::stats`, nearest rank), means, and the
//! latency summary of a set of measurements. Over no values every figure is `None`: a report shows it as `-`, or
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

pub use cellar_core::stats::{percentile, percentile_of, sorted};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_and_summaries_of_nothing_are_none() {
        assert_eq!(mean(&[1.0, 2.0]), Some(1.5));
        assert_eq!(mean(&[]), None);
        let s = summarize(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.n, s.p50_ms, s.max_ms, s.mean_ms), (4, 2.0, 10.0, 4.0));
        assert!(summarize(&[]).is_none());
    }
}
