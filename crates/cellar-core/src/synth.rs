//! Clustered synthetic token vectors, for scale tests and benchmarks without a model.
//!
//! `clusters` random unit centroids; each document draws 1–4 topic centroids and each of its
//! tokens is a unit vector near one of them. Token counts follow a log-normal spread around
//! `mean_tokens` (σ = 0.5, clamped to 4..=4·mean), like passage lengths after tokenisation.
//! Document `i` depends only on (seed, i), so a corpus is reproducible and can be regenerated
//! (e.g. to fit an int8 codec on a sample and then stream).

use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, StandardNormal};

use crate::codec::{fit_codec, Codec, CodecKind};
use crate::error::{CellarError, Result};
use crate::format::Manifest;
use crate::store::StoreWriter;

#[derive(Clone, Debug)]
pub struct SynthConfig {
    pub docs: u64,
    pub mean_tokens: usize,
    pub dim: usize,
    pub clusters: usize,
    pub seed: u64,
}

pub struct SynthCorpus {
    config: SynthConfig,
    centroids: Vec<f32>,
    lengths: LogNormal<f64>,
}

const NOISE: f32 = 0.35;
const FIT_DOCS: u64 = 512;

fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

fn gaussian(rng: &mut StdRng, out: &mut [f32]) {
    out.iter_mut().for_each(|x| *x = rng.sample::<f32, _>(StandardNormal));
}

impl SynthCorpus {
    pub fn new(config: SynthConfig) -> Result<Self> {
        if config.docs == 0 || config.mean_tokens == 0 || config.dim == 0 || config.clusters == 0 {
            return Err(CellarError::invalid(format!(
                "synthetic corpus needs docs, tokens, dim and clusters >= 1 (got {config:?})"
            )));
        }
        let mut rng = StdRng::seed_from_u64(config.seed);
        let mut centroids = vec![0f32; config.clusters * config.dim];
        for c in centroids.chunks_exact_mut(config.dim) {
            gaussian(&mut rng, c);
            normalize(c);
        }
        let mu = (config.mean_tokens as f64).ln() - 0.125;
        let lengths = LogNormal::new(mu, 0.5).expect("valid log-normal");
        Ok(SynthCorpus { config, centroids, lengths })
    }

    pub fn config(&self) -> &SynthConfig {
        &self.config
    }

    fn near_centroid(&self, rng: &mut StdRng, cluster: usize, out: &mut [f32]) {
        let dim = self.config.dim;
        gaussian(rng, out);
        let scale = NOISE / (dim as f32).sqrt();
        let centroid = &self.centroids[cluster * dim..(cluster + 1) * dim];
        out.iter_mut().zip(centroid).for_each(|(x, c)| *x = c + *x * scale);
        normalize(out);
    }

    /// Document `i`: token vectors (n·dim, token-major) into `tokens`, the normalised mean into
    /// `pooled`. Both are cleared first.
    pub fn doc(&self, i: u64, tokens: &mut Vec<f32>, pooled: &mut Vec<f32>) {
        let dim = self.config.dim;
        let mut rng =
            StdRng::seed_from_u64(self.config.seed ^ (i.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let max = 4 * self.config.mean_tokens;
        let n = (self.lengths.sample(&mut rng).round() as usize).clamp(4.min(max), max);
        let topics: Vec<usize> =
            (0..rng.gen_range(1..=4)).map(|_| rng.gen_range(0..self.config.clusters)).collect();
        tokens.clear();
        tokens.resize(n * dim, 0.0);
        for t in tokens.chunks_exact_mut(dim) {
            let topic = topics[rng.gen_range(0..topics.len())];
            self.near_centroid(&mut rng, topic, t);
        }
        pooled.clear();
        pooled.resize(dim, 0.0);
        for t in tokens.chunks_exact(dim) {
            pooled.iter_mut().zip(t).for_each(|(p, x)| *p += x);
        }
        normalize(pooled);
    }

    /// A query of `n_tokens` tokens drawn around one random topic (reproducible from `seed`).
    pub fn query(&self, seed: u64, n_tokens: usize) -> Vec<f32> {
        let dim = self.config.dim;
        let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let topic = rng.gen_range(0..self.config.clusters);
        let mut out = vec![0f32; n_tokens * dim];
        for t in out.chunks_exact_mut(dim) {
            self.near_centroid(&mut rng, topic, t);
        }
        out
    }

    /// The codec for this corpus, fitted (where it learns anything) on the first documents'
    /// tokens.
    pub fn codec(&self, kind: CodecKind) -> Result<Arc<dyn Codec>> {
        let (mut tokens, mut pooled, mut sample) = (Vec::new(), Vec::new(), Vec::new());
        if kind.needs_sample() {
            for i in 0..self.config.docs.min(FIT_DOCS) {
                self.doc(i, &mut tokens, &mut pooled);
                sample.extend_from_slice(&tokens);
                sample.extend_from_slice(&pooled);
            }
        }
        fit_codec(kind, self.config.dim, &sample)
    }

    /// Streams the whole corpus into a new store at `dir`; `progress` is called with docs done.
    pub fn write_store(
        &self,
        dir: &Path,
        codec: CodecKind,
        mut progress: impl FnMut(u64),
    ) -> Result<Manifest> {
        let mut writer = StoreWriter::create(dir, self.codec(codec)?, true)?;
        let (mut tokens, mut pooled) = (Vec::new(), Vec::new());
        for i in 0..self.config.docs {
            self.doc(i, &mut tokens, &mut pooled);
            writer.add(&tokens, Some(&pooled))?;
            if i % 1024 == 1023 {
                progress(i + 1);
            }
        }
        progress(self.config.docs);
        writer.finish()
    }
}
