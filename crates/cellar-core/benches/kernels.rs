//! MaxSim kernel timings: every instruction-set level this CPU runs against the scalar reference,
//! per codec (f16, int8, residual 1/2/4-bit: decoded, then scored as f32) and dimension, on
//! synthetic documents (`cellar_core::synth`) and a 32-token query (`KERNELS_QUERY_TOKENS` sets
//! another: below 9 tokens on AVX-512 and 7 on AVX2 the kernels take their rows strategy, not the
//! panel one). Each level's scores must agree with scalar first (relative difference at most
//! `TOLERANCE`, else exit 1); then it is timed, best of `ROUNDS`, and printed as a markdown table
//! with the CPU model and the speed-up over scalar. A level the CPU lacks is named as skipped.
//!
//! `cargo bench -p cellar-core --bench kernels` (cargo passes `--bench`): timings.
//! Without `--bench` (`cargo test --benches`): the agreement check alone, on small shapes.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use cellar_core::codec::{Codec, CodecKind};
use cellar_core::kernels::{cpu_model, Isa};
use cellar_core::synth::{SynthConfig, SynthCorpus};

/// Query tokens unless `KERNELS_QUERY_TOKENS` says otherwise.
const QUERY_TOKENS: usize = 32;
/// Largest |level - scalar| / max(1, |scalar|) over the documents: far above f32 rounding in a
/// different order, far below one missing term or a wrong maximum.
const TOLERANCE: f64 = 1e-3;
const ROUNDS: usize = 3;
const SECONDS_PER_ROUND: f64 = 0.4;

/// One workload: a codec, a dimension and its documents, encoded.
struct Workload {
    kind: CodecKind,
    dim: usize,
    codec: std::sync::Arc<dyn Codec>,
    docs: Vec<Vec<u8>>,
    query: Vec<f32>,
    /// Query-token x document-token pairs in one pass over the documents.
    pairs: usize,
}

impl Workload {
    fn new(kind: CodecKind, dim: usize, docs: u64, mean_tokens: usize, query_tokens: usize) -> Workload {
        let config = SynthConfig { docs, mean_tokens, dim, clusters: 64, seed: 3 };
        let corpus = SynthCorpus::new(config).expect("a valid synthetic corpus");
        let codec = corpus.codec(kind).expect("a codec for the corpus");
        let (mut tokens, mut pooled) = (Vec::new(), Vec::new());
        let docs: Vec<Vec<u8>> = (0..docs)
            .map(|i| {
                corpus.doc(i, &mut tokens, &mut pooled);
                let mut bytes = Vec::new();
                tokens.chunks_exact(dim).for_each(|t| codec.encode(t, &mut bytes));
                bytes
            })
            .collect();
        let doc_tokens: usize = docs.iter().map(|d| d.len() / codec.bytes_per_vector()).sum();
        let query = codec.prepare_query(&corpus.query(1, query_tokens));
        Workload { kind, dim, codec, docs, query, pairs: doc_tokens * query_tokens }
    }

    fn scores(&self, isa: Isa) -> Vec<f32> {
        self.docs.iter().map(|d| self.codec.maxsim(isa, &self.query, d)).collect()
    }

    /// Largest relative difference of `isa`'s scores from scalar's.
    fn disagreement(&self, isa: Isa) -> f64 {
        let reference = self.scores(Isa::Scalar);
        let got = self.scores(isa);
        reference
            .iter()
            .zip(&got)
            .map(|(&r, &g)| (g as f64 - r as f64).abs() / (r as f64).abs().max(1.0))
            .fold(0.0, f64::max)
    }

    /// Pairs per second, best of `ROUNDS` rounds of at least `SECONDS_PER_ROUND` each.
    fn pairs_per_second(&self, isa: Isa) -> f64 {
        let mut best = 0f64;
        for _ in 0..ROUNDS {
            let (mut passes, started) = (0usize, Instant::now());
            while started.elapsed().as_secs_f64() < SECONDS_PER_ROUND {
                let sum: f32 =
                    self.docs.iter().map(|d| self.codec.maxsim(isa, black_box(&self.query), d)).sum();
                black_box(sum);
                passes += 1;
            }
            best = best.max((passes * self.pairs) as f64 / started.elapsed().as_secs_f64());
        }
        best
    }
}

fn main() -> ExitCode {
    let timing = std::env::args().any(|a| a == "--bench");
    let available = Isa::available();
    let skipped: Vec<&str> = Isa::ALL.iter().filter(|i| !available.contains(i)).map(|i| i.name()).collect();
    let (docs, mean_tokens, dims): (u64, usize, Vec<usize>) =
        if timing { (256, 128, vec![64, 128, 384]) } else { (16, 12, vec![7, 64, 129, 136]) };
    // The shapes of another study (bench/kernels_vs_peers.py): KERNELS_DOCS, KERNELS_TOKENS
    // (mean tokens per document) and KERNELS_DIMS (comma-separated) replace the defaults.
    let env_num = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    let docs = env_num("KERNELS_DOCS").map_or(docs, |d| d as u64);
    let mean_tokens = env_num("KERNELS_TOKENS").unwrap_or(mean_tokens);
    let query_tokens = env_num("KERNELS_QUERY_TOKENS").filter(|n| *n > 0).unwrap_or(QUERY_TOKENS);
    let dims: Vec<usize> = std::env::var("KERNELS_DIMS")
        .ok()
        .map(|v| v.split(',').filter_map(|d| d.trim().parse().ok()).collect())
        .filter(|d: &Vec<usize>| !d.is_empty())
        .unwrap_or(dims);
    println!("# MaxSim kernels\n");
    println!(
        "CPU: {} ({} cores). Levels run: {}{}.\n",
        cpu_model(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        available.iter().map(|i| i.name()).collect::<Vec<_>>().join(", "),
        if skipped.is_empty() {
            String::new()
        } else {
            format!("; skipped, this CPU lacks them: {}", skipped.join(", "))
        }
    );
    println!(
        "{query_tokens} query tokens against {docs} synthetic documents of ~{mean_tokens} tokens, one thread; \
         every level's scores checked against scalar first (relative difference <= {TOLERANCE:e}){}.\n",
        if timing {
            format!("; timings the best of {ROUNDS} rounds of {SECONDS_PER_ROUND} s")
        } else {
            String::new()
        }
    );
    if timing {
        println!("| codec | dim | level | q-token x d-token pairs/s | GFLOP/s | vs scalar | max rel. diff from scalar |");
        println!("|---|---|---|---|---|---|---|");
    }
    let mut failed = false;
    for kind in CodecKind::ALL {
        for &dim in &dims {
            if kind.residual_bits().is_some() && !dim.is_multiple_of(8) {
                continue; // residual codecs take dimensions in groups of 8
            }
            let w = Workload::new(kind, dim, docs, mean_tokens, query_tokens);
            let scalar = if timing { w.pairs_per_second(Isa::Scalar) } else { f64::NAN };
            for &isa in &available {
                let diff = w.disagreement(isa);
                if diff > TOLERANCE {
                    eprintln!(
                        "kernels: {} {} dim {}: scores differ from scalar by {diff:e} > {TOLERANCE:e}",
                        isa.name(),
                        w.kind.name(),
                        w.dim
                    );
                    failed = true;
                    continue;
                }
                if !timing {
                    continue;
                }
                let rate = if isa == Isa::Scalar { scalar } else { w.pairs_per_second(isa) };
                println!(
                    "| {} | {} | {} | {:.3e} | {:.1} | {:.1}x | {:.1e} |",
                    w.kind.name(),
                    w.dim,
                    isa.name(),
                    rate,
                    rate * 2.0 * w.dim as f64 / 1e9,
                    rate / scalar,
                    diff
                );
            }
        }
    }
    if failed {
        return ExitCode::FAILURE;
    }
    if !timing {
        println!("Every level agrees with scalar. Timings: cargo bench -p cellar-core --bench kernels");
    }
    ExitCode::SUCCESS
}
