//! Functions on a document's or a query's token vectors as rows (`n * dim` values, row after
//! row) that the document model (`doc`), the request's plan (`plan`), the build and the writes
//! share: the default pooled vector and the PCA projection. A leaf module: it imports nothing of
//! the crate, so those that use it never import each other for it.

use cellar_encode::Pca;

/// The L2-normalised mean of `tokens` (`n * dim` values, row after row), `None` when it is
/// zero: the pooled vector of a document (or a query) that gives none, in every front end and
/// in streams.
pub fn mean_normalized(tokens: &[f32], dim: usize) -> Option<Vec<f32>> {
    let mut mean = vec![0f64; dim];
    for row in tokens.chunks_exact(dim) {
        mean.iter_mut().zip(row).for_each(|(m, v)| *m += f64::from(*v));
    }
    let norm = mean.iter().map(|m| m * m).sum::<f64>().sqrt();
    (norm > 0.0 && norm.is_finite()).then(|| mean.iter().map(|m| (m / norm) as f32).collect())
}

/// Projects `n` token vectors with `pca` and L2-normalises each.
pub fn project_tokens(pca: &Pca, tokens: &[f32], n: usize) -> Vec<f32> {
    pca.project_normalized(&tokens[..(n * pca.in_dim()).min(tokens.len())])
}
