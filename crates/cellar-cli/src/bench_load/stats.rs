//! Latency percentiles (nearest rank) over one level's measured requests.

use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
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

/// Summary of latencies in milliseconds; `None` when there are none.
pub fn summarize(latencies_ms: &[f64]) -> Option<LatencySummary> {
    let mut sorted = latencies_ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(LatencySummary {
        n: sorted.len(),
        p50_ms: percentile(&sorted, 50.0)?,
        p95_ms: percentile(&sorted, 95.0)?,
        p99_ms: percentile(&sorted, 99.0)?,
        max_ms: *sorted.last()?,
        mean_ms: sorted.iter().sum::<f64>() / sorted.len() as f64,
    })
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
    }

    #[test]
    fn summary_sorts_its_input() {
        let s = summarize(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.n, s.p50_ms, s.max_ms, s.mean_ms), (4, 2.0, 10.0, 4.0));
        assert!(summarize(&[]).is_none());
    }
}
