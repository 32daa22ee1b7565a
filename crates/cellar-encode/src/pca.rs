//! PCA to shrink token vectors (e.g. 384 -> 128 dimensions) before they are stored.
//!
//! [`Pca::project`] centres on the sample mean and rotates onto the top principal axes; it does
//! *not* re-normalise, so callers that score with cosine/MaxSim L2-normalise the result themselves
//! or call [`Pca::project_normalized`].
//!
//! File format (little-endian), written by [`Pca::save`]:
//!
//! | bytes | holds |
//! |---|---|
//! | 8 | magic `CELLPCA\0` |
//! | u32 | format version, 1 |
//! | u32, u32 | `in_dim`, `out_dim` |
//! | f32 x `in_dim` | the mean |
//! | f32 x `out_dim * in_dim` | the components, one row of `in_dim` each, largest variance first |
//! | f32 x `out_dim` | the variance along each component |
//! | u32 | CRC-32C of every byte before it |

use std::path::Path;

use candle_core::{Device, Tensor};
use cellar_core::format::VersionRange;
use cellar_core::{CellarError, IoContext, Result};

use crate::eigen::sym_eigen;
use crate::errors::invalid;

/// File magic.
const MAGIC: &[u8; 8] = b"CELLPCA\0";
/// Rows per chunk when accumulating the covariance (f32 products, f64 running sum) and when
/// projecting.
const CHUNK_ROWS: usize = 4096;

/// A fitted PCA: mean and principal axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Pca {
    /// Input width.
    in_dim: usize,
    /// Output width (number of components kept).
    out_dim: usize,
    /// Sample mean, `in_dim` values.
    mean: Vec<f32>,
    /// Principal axes, `out_dim` rows of `in_dim`, unit length, largest variance first.
    components: Vec<f32>,
    /// Variance of the sample along each kept axis.
    variances: Vec<f32>,
}

impl Pca {
    /// The file format version written by [`Pca::save`].
    pub const VERSION: u32 = 1;
    /// The file format versions [`Pca::load`] reads.
    pub const READABLE_VERSIONS: VersionRange = VersionRange::only(Pca::VERSION);

    /// Fits on `sample`, rows of `dim` values (at least two rows, all finite), keeping the top
    /// `out_dim` axes (`1..=dim`).
    pub fn fit(sample: &[f32], dim: usize, out_dim: usize) -> Result<Pca> {
        if dim == 0 || out_dim == 0 || out_dim > dim {
            return Err(invalid(format!("PCA needs 1 <= out_dim <= dim, got dim {dim}, out_dim {out_dim}")));
        }
        if !sample.len().is_multiple_of(dim) || sample.len() / dim < 2 {
            return Err(invalid(format!(
                "PCA sample of {} values is not two or more rows of {dim}",
                sample.len()
            )));
        }
        if sample.iter().any(|v| !v.is_finite()) {
            return Err(invalid("PCA sample holds NaN or infinite values"));
        }
        let rows = sample.len() / dim;
        let mean = column_mean(sample, dim);
        let mut cov = covariance(sample, dim, &mean).map_err(|e| invalid(format!("PCA covariance: {e}")))?;
        cov.iter_mut().for_each(|c| *c /= (rows - 1) as f64);
        let eig = sym_eigen(&cov, dim).ok_or_else(|| invalid("PCA eigen-decomposition did not converge"))?;
        let components = eig.vectors[..out_dim * dim].iter().map(|&v| v as f32).collect();
        let variances = eig.values[..out_dim].iter().map(|&v| v.max(0.0) as f32).collect();
        Ok(Pca {
            in_dim: dim,
            out_dim,
            mean: mean.iter().map(|&m| m as f32).collect(),
            components,
            variances,
        })
    }

    /// Input width.
    pub fn in_dim(&self) -> usize {
        self.in_dim
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// Variance of the fitting sample along each kept axis, largest first.
    pub fn variances(&self) -> &[f32] {
        &self.variances
    }

    /// Projects `v`, one or more rows of `in_dim` values, to as many rows of `out_dim` (centred,
    /// not re-normalised). A trailing partial row is ignored. One matrix product (gemm, on the
    /// calling thread) per chunk of rows: a build projects every token of the collection.
    pub fn project(&self, v: &[f32]) -> Vec<f32> {
        debug_assert!(v.len().is_multiple_of(self.in_dim), "PCA input is not whole rows of {}", self.in_dim);
        let (d, o) = (self.in_dim, self.out_dim);
        let rows = v.len() / d;
        let mut out = vec![0f32; rows * o];
        let mut centred = Vec::with_capacity(rows.min(CHUNK_ROWS) * d);
        for (chunk, dst) in v[..rows * d].chunks(CHUNK_ROWS * d).zip(out.chunks_mut(CHUNK_ROWS * o)) {
            centred.clear();
            for row in chunk.chunks_exact(d) {
                centred.extend(row.iter().zip(&self.mean).map(|(x, m)| x - m));
            }
            // dst (n x o) = centred (n x d) * components^T (d x o).
            crate::dense::product_transposed(&centred, &self.components, d, dst, o);
        }
        out
    }

    /// [`Pca::project`], then each output row scaled to unit L2 norm.
    pub fn project_normalized(&self, v: &[f32]) -> Vec<f32> {
        let mut out = self.project(v);
        for row in out.chunks_exact_mut(self.out_dim) {
            let norm = dot(row, row).sqrt();
            if norm > 0.0 {
                row.iter_mut().for_each(|x| *x /= norm);
            }
        }
        out
    }

    /// Writes the file format described in the module docs (via a temporary file and a rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut buf = Vec::with_capacity(24 + 4 * (self.mean.len() + self.components.len() + self.out_dim));
        buf.extend_from_slice(MAGIC);
        for n in [Pca::VERSION, self.in_dim as u32, self.out_dim as u32] {
            buf.extend_from_slice(&n.to_le_bytes());
        }
        for v in self.mean.iter().chain(&self.components).chain(&self.variances) {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        buf.extend_from_slice(&crc32c::crc32c(&buf).to_le_bytes());
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &buf).at(&tmp)?;
        std::fs::rename(&tmp, path).at(path)
    }

    /// Reads a file written by [`Pca::save`]; any damage is `CellarError::Corrupted`, another
    /// format version `Incompatible` (checked right after the magic, before anything it may change).
    pub fn load(path: &Path) -> Result<Pca> {
        let buf = std::fs::read(path).at(path)?;
        let bad = |offset: usize, detail: &str| CellarError::corrupted(path, offset as u64, detail);
        if buf.len() < 24 || &buf[..8] != MAGIC {
            return Err(bad(0, "not a Cellar PCA file (bad magic or too short)"));
        }
        let word = |i: usize| u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        Pca::READABLE_VERSIONS.check(path, word(8))?;
        let (body, crc) = buf.split_at(buf.len() - 4);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return Err(bad(body.len(), "checksum mismatch"));
        }
        let (in_dim, out_dim) = (word(12) as usize, word(16) as usize);
        if in_dim == 0 || out_dim == 0 || out_dim > in_dim {
            return Err(bad(12, "dimensions out of range"));
        }
        let floats = in_dim + out_dim * in_dim + out_dim;
        if body.len() != 20 + 4 * floats {
            return Err(bad(20, "length does not match the dimensions"));
        }
        let vals: Vec<f32> =
            body[20..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        if let Some(i) = vals.iter().position(|v| !v.is_finite()) {
            return Err(bad(20 + 4 * i, "non-finite value"));
        }
        let (mean, rest) = vals.split_at(in_dim);
        let (components, variances) = rest.split_at(out_dim * in_dim);
        Ok(Pca {
            in_dim,
            out_dim,
            mean: mean.to_vec(),
            components: components.to_vec(),
            variances: variances.to_vec(),
        })
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Column means of row-major `rows x dim` data, in f64.
fn column_mean(sample: &[f32], dim: usize) -> Vec<f64> {
    let mut mean = vec![0f64; dim];
    for row in sample.chunks_exact(dim) {
        mean.iter_mut().zip(row).for_each(|(m, &v)| *m += v as f64);
    }
    let rows = (sample.len() / dim) as f64;
    mean.iter_mut().for_each(|m| *m /= rows);
    mean
}

/// `sum_r (x_r - mean)^T (x_r - mean)`, `dim x dim`: f32 matrix products per chunk of rows
/// (gemm), summed in f64.
fn covariance(sample: &[f32], dim: usize, mean: &[f64]) -> candle_core::Result<Vec<f64>> {
    let mut cov = vec![0f64; dim * dim];
    for chunk in sample.chunks(CHUNK_ROWS * dim) {
        let centred: Vec<f32> = chunk
            .chunks_exact(dim)
            .flat_map(|r| r.iter().zip(mean).map(|(&x, &m)| (x as f64 - m) as f32))
            .collect();
        let x = Tensor::from_vec(centred, (chunk.len() / dim, dim), &Device::Cpu)?;
        let part = x.t()?.matmul(&x)?.flatten_all()?.to_vec1::<f32>()?;
        cov.iter_mut().zip(part).for_each(|(c, p)| *c += p as f64);
    }
    Ok(cov)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The projection (one gemm per chunk of rows) against one dot product per row and axis, on
    /// row counts around the chunk size and a dimension that is no multiple of a SIMD width.
    #[test]
    fn projection_matches_the_dot_products_of_each_row() {
        let (dim, out_dim) = (13, 6);
        let mut s = 7u64;
        let sample: Vec<f32> = (0..5000 * dim)
            .map(|i| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * (1 + i % dim) as f32 + 0.5
            })
            .collect();
        let pca = Pca::fit(&sample, dim, out_dim).expect("fit");
        for rows in [1, CHUNK_ROWS - 1, CHUNK_ROWS, CHUNK_ROWS + 1, 5000] {
            let got = pca.project(&sample[..rows * dim]);
            assert_eq!(got.len(), rows * out_dim);
            for (r, row) in sample[..rows * dim].chunks(dim).enumerate() {
                let centred: Vec<f32> = row.iter().zip(&pca.mean).map(|(x, m)| x - m).collect();
                for (j, axis) in pca.components.chunks(dim).enumerate() {
                    let want = dot(axis, &centred);
                    let have = got[r * out_dim + j];
                    assert!(
                        (have - want).abs() < 1e-4 * (1.0 + want.abs()),
                        "rows {rows}, row {r}, axis {j}: {have} vs {want}"
                    );
                }
            }
        }
    }
}
