//! MaxSim throughput per codec and instruction set, on in-memory synthetic documents.

use std::time::Instant;

use cellar_core::codec::CodecKind;
use cellar_core::kernels::Isa;
use cellar_core::synth::{SynthConfig, SynthCorpus};
use cellar_core::Result;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct KernelResult {
    pub codec: String,
    pub isa: String,
    pub pairs_per_s: f64,
    pub gflop_per_s: f64,
    pub speedup_vs_scalar: f64,
}

const QUERY_TOKENS: usize = 32;
const DOCS: u64 = 256;
const MIN_SECONDS: f64 = 0.5;

pub fn measure(dim: usize) -> Result<Vec<KernelResult>> {
    let corpus = SynthCorpus::new(SynthConfig { docs: DOCS, mean_tokens: 128, dim, clusters: 64, seed: 3 })?;
    let mut out = Vec::new();
    for kind in [CodecKind::F16, CodecKind::Int8] {
        let codec = corpus.codec(kind)?;
        let (mut tokens, mut pooled) = (Vec::new(), Vec::new());
        let docs: Vec<Vec<u8>> = (0..DOCS)
            .map(|i| {
                corpus.doc(i, &mut tokens, &mut pooled);
                let mut bytes = Vec::new();
                tokens.chunks_exact(dim).for_each(|t| codec.encode(t, &mut bytes));
                bytes
            })
            .collect();
        let doc_tokens: usize = docs.iter().map(|d| d.len() / codec.bytes_per_vector()).sum();
        let query = codec.prepare_query(&corpus.query(1, QUERY_TOKENS));
        let mut scalar_rate = f64::NAN;
        for isa in Isa::available() {
            let (mut passes, started) = (0u64, Instant::now());
            let mut checksum = 0f32;
            while started.elapsed().as_secs_f64() < MIN_SECONDS {
                checksum += docs.iter().map(|d| codec.maxsim(isa, &query, d)).sum::<f32>();
                passes += 1;
            }
            std::hint::black_box(checksum);
            let pairs_per_s =
                (passes as usize * doc_tokens * QUERY_TOKENS) as f64 / started.elapsed().as_secs_f64();
            if isa == Isa::Scalar {
                scalar_rate = pairs_per_s;
            }
            out.push(KernelResult {
                codec: kind.name().into(),
                isa: isa.name().into(),
                pairs_per_s,
                gflop_per_s: pairs_per_s * 2.0 * dim as f64 / 1e9,
                speedup_vs_scalar: pairs_per_s / scalar_rate,
            });
        }
    }
    Ok(out)
}
