//! A random orthogonal rotation, applied to residuals before 1-bit quantisation so that every
//! coordinate carries about the same share of the vector (RaBitQ's Johnson–Lindenstrauss step).

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

pub use cellar_core::cluster::dot;

/// A `dim x dim` orthogonal matrix, row-major: `rotate(v)[i] = <row_i, v>`.
pub struct Rotation {
    dim: usize,
    rows: Vec<f32>,
}

impl Rotation {
    /// Gram–Schmidt (in f64, twice per row) over Gaussian rows drawn from `seed`.
    pub fn random(dim: usize, seed: u64) -> Rotation {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut rows: Vec<Vec<f64>> = Vec::with_capacity(dim);
        while rows.len() < dim {
            let mut row: Vec<f64> = (0..dim).map(|_| StandardNormal.sample(&mut rng)).collect();
            for _ in 0..2 {
                for done in &rows {
                    let proj: f64 = row.iter().zip(done).map(|(a, b)| a * b).sum();
                    row.iter_mut().zip(done).for_each(|(a, b)| *a -= proj * b);
                }
            }
            let norm = row.iter().map(|a| a * a).sum::<f64>().sqrt();
            if norm > 1e-6 {
                rows.push(row.into_iter().map(|a| a / norm).collect());
            }
        }
        Rotation { dim, rows: rows.into_iter().flatten().map(|a| a as f32).collect() }
    }

    /// A rotation read back from disk (`rows.len() == dim * dim`).
    pub fn from_rows(dim: usize, rows: Vec<f32>) -> Rotation {
        assert_eq!(rows.len(), dim * dim);
        Rotation { dim, rows }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn rows(&self) -> &[f32] {
        &self.rows
    }

    /// `out = R v`.
    pub fn rotate(&self, v: &[f32], out: &mut [f32]) {
        for (o, row) in out.iter_mut().zip(self.rows.chunks_exact(self.dim)) {
            *o = dot(row, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_orthonormal_and_rotation_keeps_inner_products() {
        let dim = 37;
        let r = Rotation::random(dim, 7);
        for i in 0..dim {
            for j in 0..dim {
                let d = dot(&r.rows[i * dim..(i + 1) * dim], &r.rows[j * dim..(j + 1) * dim]);
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((d - want).abs() < 1e-4, "rows {i},{j}: {d}");
            }
        }
        let a: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.11).cos()).collect();
        let (mut ra, mut rb) = (vec![0.0; dim], vec![0.0; dim]);
        r.rotate(&a, &mut ra);
        r.rotate(&b, &mut rb);
        assert!((dot(&a, &b) - dot(&ra, &rb)).abs() < 1e-4);
        assert_eq!(Rotation::random(dim, 7).rows, r.rows, "seeded: the same matrix every time");
    }
}
