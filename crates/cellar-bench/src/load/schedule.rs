//! When requests leave: a Poisson process (exponential gaps, seeded), conditioned on its count.
//!
//! A level offers `qps` for `window` seconds. Plain exponential gaps give a random number of
//! requests (mean `qps × window`, standard deviation its square root), so a level would
//! sometimes exceed its bound and runs would differ in load. Instead the count is fixed at
//! `round(qps × window)` (at least 1) and the send times are drawn as a Poisson process
//! conditioned on that count: `n + 1` exponential gaps, scaled so that they span the window.
//! The times are then the order statistics of `n` uniform draws on the window, which is exactly
//! what a Poisson process with `n` arrivals in it looks like; the gaps stay (nearly) exponential
//! with mean `window / (n + 1)`, and the request count never exceeds `qps × window + 1`.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Exponential gaps of mean `1 / qps` seconds from a seeded generator.
pub struct ExpGaps {
    rng: StdRng,
    rate: f64,
}

impl ExpGaps {
    pub fn new(qps: f64, seed: u64) -> Self {
        assert!(qps > 0.0 && qps.is_finite(), "rate must be positive");
        ExpGaps { rng: StdRng::seed_from_u64(seed), rate: qps }
    }

    /// One gap in seconds: `-ln(1 - U) / rate`, U uniform on [0, 1).
    pub fn next_gap(&mut self) -> f64 {
        let u: f64 = self.rng.gen();
        -(1.0 - u).ln() / self.rate
    }
}

/// Requests one level sends: `round(qps × window)` (at least 1).
pub fn request_count(qps: f64, window: Duration) -> usize {
    ((qps * window.as_secs_f64()).round() as usize).max(1)
}

/// Send offsets from the start of a level, ascending, all inside `[0, window)`.
pub fn send_offsets(qps: f64, window: Duration, seed: u64) -> Vec<Duration> {
    let n = request_count(qps, window);
    let mut gaps = ExpGaps::new(qps, seed);
    let mut sums = Vec::with_capacity(n + 1);
    let mut total = 0.0;
    for _ in 0..=n {
        total += gaps.next_gap();
        sums.push(total);
    }
    let span = window.as_secs_f64();
    sums.truncate(n);
    sums.into_iter().map(|s| Duration::from_secs_f64(span * s / total)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_gaps_have_mean_one_over_qps() {
        for qps in [5.0, 80.0, 1000.0] {
            let mut gaps = ExpGaps::new(qps, 11);
            let draws: Vec<f64> = (0..10_000).map(|_| gaps.next_gap()).collect();
            let mean = draws.iter().sum::<f64>() / draws.len() as f64;
            // Standard error of the mean is 1/qps/100: allow 4 of them.
            assert!((mean * qps - 1.0).abs() < 0.04, "qps {qps}: mean gap {mean}");
            // Exponential: the standard deviation equals the mean.
            let var = draws.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / draws.len() as f64;
            assert!((var.sqrt() / mean - 1.0).abs() < 0.06, "qps {qps}: sd/mean {}", var.sqrt() / mean);
            assert!(draws.iter().all(|g| g.is_finite() && *g >= 0.0));
        }
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        let w = Duration::from_secs(10);
        assert_eq!(send_offsets(20.0, w, 3), send_offsets(20.0, w, 3));
        assert_ne!(send_offsets(20.0, w, 3), send_offsets(20.0, w, 4));
    }

    #[test]
    fn offsets_are_bounded_sorted_and_span_the_window() {
        for (qps, secs) in [(0.05, 2.0), (5.0, 12.0), (33.3, 3.0), (2000.0, 12.0)] {
            let window = Duration::from_secs_f64(secs);
            let offsets = send_offsets(qps, window, 7);
            assert!(offsets.len() as f64 <= qps * secs + 1.0, "{} offsets at {qps} qps", offsets.len());
            assert!(!offsets.is_empty());
            assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
            assert!(offsets.iter().all(|o| *o < window));
        }
        let window = Duration::from_secs(100);
        let offsets = send_offsets(100.0, window, 9);
        assert_eq!(offsets.len(), 10_000);
        // Uniform order statistics: a tenth of the requests in each tenth of the window.
        for decile in 0..10 {
            let lo = Duration::from_secs(decile * 10);
            let hi = lo + Duration::from_secs(10);
            let n = offsets.iter().filter(|o| **o >= lo && **o < hi).count();
            assert!((850..=1150).contains(&n), "decile {decile}: {n}");
        }
        let gaps: Vec<f64> = offsets.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        assert!((mean * 100.0 - 1.0).abs() < 0.02, "mean gap {mean}");
    }
}
