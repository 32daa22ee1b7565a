//! Stage-score fusion: `alpha * z(BM25) + (1 - alpha) * z(MaxSim)`, z-normalised over the
//! re-ranked candidates of one query (population standard deviation), and partial re-ranking:
//! candidates beyond `rerank_k` keep their first-stage order below the re-ranked ones.

use cellar_core::DocId;

use crate::scored::Scored;

/// Where a ranked document's final position came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
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

/// z-scores of `values` (population std); all zeros when the spread is zero or there is one value.
pub fn z_scores(values: &[f32]) -> Vec<f32> {
    let n = values.len() as f64;
    if values.is_empty() {
        return Vec::new();
    }
    let mean = values.iter().map(|v| *v as f64).sum::<f64>() / n;
    let var = values.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / n;
    let std = var.sqrt();
    if std <= f64::EPSILON {
        return vec![0.0; values.len()];
    }
    values.iter().map(|v| ((*v as f64 - mean) / std) as f32).collect()
}

/// Fuses the first `maxsim.len()` candidates (best first-stage first) with their MaxSim scores
/// and appends the rest in first-stage order.
pub fn fuse(candidates: &[Scored], maxsim: &[f32], alpha: f32) -> Vec<Fused> {
    let k = maxsim.len().min(candidates.len());
    let (head, tail) = candidates.split_at(k);
    let first: Vec<f32> = head.iter().map(|c| c.score).collect();
    let (z_first, z_maxsim) = (z_scores(&first), z_scores(&maxsim[..k]));
    let mut fused: Vec<Fused> = head
        .iter()
        .enumerate()
        .map(|(i, c)| Fused {
            id: c.id,
            score: alpha * z_first[i] + (1.0 - alpha) * z_maxsim[i],
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
