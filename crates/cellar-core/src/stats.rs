//! The one percentile rule (nearest rank) of every latency Cellar reports: the benchmarks'
//! summaries (`cellar-bench`) and the P95 `cellar tune --p95-ms` holds a setting to; and the one
//! unit they are reported in, milliseconds as f64 ([`ms_since`], [`as_ms`]).

use std::time::{Duration, Instant};

/// Milliseconds elapsed since `start`: every `*_ms` timing of a response, a report or a benchmark.
pub fn ms_since(start: Instant) -> f64 {
    as_ms(start.elapsed())
}

/// `d` in milliseconds (fractions kept).
pub fn as_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
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

/// `values` in ascending order (NaN last).
pub fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_keep_their_fractions() {
        assert_eq!(as_ms(Duration::from_micros(1500)), 1.5);
        assert_eq!(as_ms(Duration::from_secs(2)), 2000.0);
        let start = Instant::now() - Duration::from_millis(3);
        assert!(ms_since(start) >= 3.0);
    }

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
}
