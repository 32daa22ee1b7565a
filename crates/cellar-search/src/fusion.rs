//! Stage-score fusion ([`Fusion`]: by default `alpha * z(first stage) + (1 - alpha) *
//! z(MaxSim)`, z-normalised over the re-ranked candidates of one query, population standard
//! deviation; reciprocal ranks; or z with a per-query weight), and partial re-ranking:
//! candidates beyond `rerank_k` keep their first-stage order below the re-ranked ones.

use cellar_core::{CellarError, DocId, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::scored::Scored;

/// Where a ranked document's final position came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Re-scored with MaxSim (and fused); `score` is the fused score.
    Reranked,
    /// Beyond `rerank_k`: first-stage order kept; `score` is the first-stage score.
    FirstStage,
}

/// One document of a fused ranking.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fused {
    pub id: DocId,
    pub score: f32,
    pub first_stage: f32,
    pub maxsim: Option<f32>,
    pub stage: Stage,
}

/// z-scores of `values` (population std); all zeros when the spread is zero (to the rounding of
/// the values' size) or there is one value. Always finite, whatever the values: an infinite one
/// counts as the largest finite f32 of its sign, NaN as the lowest, and the sums run in f64,
/// where no f32 overflows.
pub fn z_scores(values: &[f32]) -> Vec<f32> {
    let n = values.len() as f64;
    if values.is_empty() {
        return Vec::new();
    }
    let finite = |v: &f32| if v.is_nan() { f32::MIN as f64 } else { v.clamp(f32::MIN, f32::MAX) as f64 };
    let mean = values.iter().map(finite).sum::<f64>() / n;
    let var = values.iter().map(|v| (finite(v) - mean).powi(2)).sum::<f64>() / n;
    let std = var.sqrt();
    let size = values.iter().map(|v| finite(v).abs()).fold(1.0, f64::max);
    if std <= 4.0 * f64::EPSILON * size {
        return vec![0.0; values.len()];
    }
    values.iter().map(|v| ((finite(v) - mean) / std) as f32).collect()
}

/// How hybrid turns a re-ranked candidate's two scores into one. `alpha` is the first stage's
/// weight in each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Fusion {
    /// `alpha * z(first stage) + (1 - alpha) * z(MaxSim)`, z over the re-ranked candidates.
    #[default]
    Z,
    /// Reciprocal-rank fusion: `alpha / (60 + rank) + (1 - alpha) / (60 + rank)` of the
    /// candidate's rank in each list (scores ignored).
    Rrf,
    /// z fusion with a per-query weight: each list's `alpha` scaled by how far its best
    /// candidate stands above the rest (its top z-score), so a flat list counts less.
    ZPeak,
}

/// The `k` of reciprocal-rank fusion (Cormack et al.'s 60).
pub const RRF_K: f32 = 60.0;

impl Fusion {
    pub const ALL: [Fusion; 3] = [Fusion::Z, Fusion::Rrf, Fusion::ZPeak];

    pub fn name(self) -> &'static str {
        match self {
            Fusion::Z => "z",
            Fusion::Rrf => "rrf",
            Fusion::ZPeak => "z_peak",
        }
    }

    /// The fused scores of candidates whose first-stage scores are `first` (best first) and
    /// MaxSim scores `maxsim`.
    pub fn scores(self, first: &[f32], maxsim: &[f32], alpha: f32) -> Vec<f32> {
        match self {
            Fusion::Z | Fusion::ZPeak => {
                let (z_first, z_maxsim) = (z_scores(first), z_scores(maxsim));
                let alpha = match self {
                    Fusion::ZPeak => peak_weight(&z_first, &z_maxsim, alpha),
                    _ => alpha,
                };
                z_first.iter().zip(&z_maxsim).map(|(f, m)| alpha * f + (1.0 - alpha) * m).collect()
            }
            Fusion::Rrf => {
                let (r_first, r_maxsim) = (ranks(first), ranks(maxsim));
                let rrf = |rank: usize| 1.0 / (RRF_K + 1.0 + rank as f32);
                r_first
                    .iter()
                    .zip(&r_maxsim)
                    .map(|(f, m)| alpha * rrf(*f) + (1.0 - alpha) * rrf(*m))
                    .collect()
            }
        }
    }
}

impl std::fmt::Display for Fusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Fusion {
    type Err = CellarError;

    fn from_str(s: &str) -> Result<Fusion> {
        Fusion::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            CellarError::InvalidInput(format!("unknown fusion {s:?}: expected one of z, rrf, z_peak"))
        })
    }
}

/// The first stage's weight of one query under [`Fusion::ZPeak`]: `alpha` and `1 - alpha`
/// scaled by each list's top z-score (a list with no spread weighs nothing; both: `alpha`).
fn peak_weight(z_first: &[f32], z_maxsim: &[f32], alpha: f32) -> f32 {
    let peak = |z: &[f32]| z.iter().copied().fold(0.0f32, f32::max);
    let (first, maxsim) = (alpha * peak(z_first), (1.0 - alpha) * peak(z_maxsim));
    if first + maxsim > 0.0 {
        first / (first + maxsim)
    } else {
        alpha
    }
}

/// Each value's rank, 0 for the highest (ties: the earlier first).
fn ranks(values: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    let mut rank = vec![0; values.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r;
    }
    rank
}

/// Fuses the first `maxsim.len()` candidates (best first-stage first) with their MaxSim scores
/// by `fusion` and appends the rest in first-stage order.
pub fn fuse(candidates: &[Scored], maxsim: &[f32], alpha: f32, fusion: Fusion) -> Vec<Fused> {
    let k = maxsim.len().min(candidates.len());
    let (head, tail) = candidates.split_at(k);
    let first: Vec<f32> = head.iter().map(|c| c.score).collect();
    let scores = fusion.scores(&first, &maxsim[..k], alpha);
    let mut fused: Vec<Fused> = head
        .iter()
        .enumerate()
        .map(|(i, c)| Fused {
            id: c.id,
            score: scores[i],
            first_stage: c.score,
            maxsim: Some(maxsim[i]),
            stage: Stage::Reranked,
        })
        .collect();
    fused.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.0.cmp(&b.id.0)));
    fused.extend(tail.iter().map(|c| Fused {
        id: c.id,
        score: c.score,
        first_stage: c.score,
        maxsim: None,
        stage: Stage::FirstStage,
    }));
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_fusion_is_the_weighted_sum_of_z_scores() {
        let s = Fusion::Z.scores(&[3.0, 2.0, 1.0], &[0.0, 1.0, 2.0], 0.5);
        assert_eq!(s, vec![0.0, 0.0, 0.0], "opposite orders cancel at alpha 0.5");
        let s = Fusion::Z.scores(&[3.0, 2.0, 1.0], &[0.0, 1.0, 2.0], 1.0);
        assert!(s[0] > s[1] && s[1] > s[2]);
    }

    #[test]
    fn fusion_of_huge_equal_or_infinite_scores_is_finite() {
        let huge = [3.0e38f32, 3.0e38, 3.0e38];
        assert_eq!(z_scores(&huge), vec![0.0; 3], "equal huge scores have no spread");
        let lists: [&[f32]; 5] = [
            &huge,
            &[f32::MAX, -f32::MAX, 0.0],
            &[f32::INFINITY, 1.0, f32::NEG_INFINITY],
            &[f32::NAN, 1.0, 2.0],
            &[1e-30, 2e-30, 3e-30],
        ];
        for first in lists {
            for maxsim in lists {
                for fusion in Fusion::ALL {
                    let s = fusion.scores(first, maxsim, 0.3);
                    assert!(s.iter().all(|v| v.is_finite()), "{fusion} {first:?} {maxsim:?}: {s:?}");
                }
            }
        }
    }

    #[test]
    fn rrf_uses_ranks_only() {
        let a = Fusion::Rrf.scores(&[30.0, 2.0, 1.0], &[0.1, 0.3, 0.2], 0.5);
        let b = Fusion::Rrf.scores(&[3.0, 2.9, 2.8], &[0.0, 100.0, 50.0], 0.5);
        assert_eq!(a, b, "the same ranks, the same fused scores");
        // First: ranks 0 and 2; second: 1 and 0; third: 2 and 1.
        let rrf = |r: f32| 1.0 / (RRF_K + 1.0 + r);
        assert_eq!(a[0], 0.5 * rrf(0.0) + 0.5 * rrf(2.0));
        assert_eq!(ranks(&[1.0, 1.0, 2.0]), vec![1, 2, 0], "ties: the earlier first");
    }

    #[test]
    fn z_peak_moves_weight_to_the_list_whose_best_stands_out() {
        // The first stage is flat but for noise; MaxSim has one clear winner.
        let first = [1.01, 1.0, 0.99, 1.0];
        let maxsim = [0.1, 0.1, 0.9, 0.1];
        let w = peak_weight(&z_scores(&first), &z_scores(&maxsim), 0.5);
        assert!(w < 0.5, "{w}");
        assert_eq!(peak_weight(&[0.0; 3], &[0.0; 3], 0.3), 0.3, "no spread anywhere: alpha");
        assert_eq!(
            peak_weight(&[0.0; 3], &z_scores(&maxsim[..3]), 0.3),
            0.0,
            "a list without spread weighs nothing"
        );
        let fused = Fusion::ZPeak.scores(&first, &maxsim, 0.5);
        let best = (0..4).max_by(|&a, &b| fused[a].total_cmp(&fused[b])).unwrap();
        assert_eq!(best, 2);
    }
}
