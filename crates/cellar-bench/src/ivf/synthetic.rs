//! A synthetic collection of pooled vectors for the IVF's scale study: `topics` random unit
//! centres; document `i` is its topic's centre plus Gaussian noise of norm about `noise`,
//! normalised (cosine to its centre ~ 1 / sqrt(1 + noise^2)). Queries are drawn the same way from
//! another stream. Everything is a pure function of the seed, so a worker can regenerate the
//! queries instead of reading them.

use std::path::Path;

use cellar_core::Result;
use cellar_search::pooled::PooledWriter;
use cellar_search::progress;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

pub struct Synthetic {
    pub docs: usize,
    pub dim: usize,
    pub topics: usize,
    pub noise: f32,
    pub seed: u64,
}

impl Synthetic {
    fn centres(&self) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(self.seed);
        (0..self.topics).flat_map(|_| unit(&mut rng, self.dim)).collect()
    }

    /// Vector `i` of stream `stream` (0: documents, 1: queries).
    fn draw(&self, centres: &[f32], stream: u64, i: u64) -> Vec<f32> {
        let mut rng =
            StdRng::seed_from_u64(self.seed ^ (stream << 56) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let topic = rng.gen_range(0..self.topics);
        let centre = &centres[topic * self.dim..(topic + 1) * self.dim];
        let scale = self.noise / (self.dim as f32).sqrt();
        let v: Vec<f32> = centre
            .iter()
            .map(|c| c + scale * <StandardNormal as Distribution<f32>>::sample(&StandardNormal, &mut rng))
            .collect();
        normalise(v)
    }

    /// Writes `dir/pooled.bin` (streamed: one vector in RAM at a time).
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| cellar_core::CellarError::Io { path: dir.to_path_buf(), source: e })?;
        let centres = self.centres();
        let mut writer = PooledWriter::create(dir, self.dim)?;
        let bar = progress::bar(self.docs as u64, "synthesise");
        for i in 0..self.docs {
            writer.add(&self.draw(&centres, 0, i as u64))?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        writer.finish()
    }

    pub fn queries(&self, n: usize) -> Vec<Vec<f32>> {
        let centres = self.centres();
        (0..n).map(|i| self.draw(&centres, 1, i as u64)).collect()
    }
}

fn unit(rng: &mut StdRng, dim: usize) -> Vec<f32> {
    normalise((0..dim).map(|_| <StandardNormal as Distribution<f32>>::sample(&StandardNormal, rng)).collect())
}

fn normalise(v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.into_iter().map(|x| x / norm).collect()
}
