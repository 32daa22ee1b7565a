//! `cellar-bench synth`: a store of clustered synthetic token vectors.

use std::path::PathBuf;
use std::time::Instant;

use cellar_core::codec::CodecKind;
use cellar_core::synth::{SynthConfig, SynthCorpus};
use cellar_core::Result;

#[derive(clap::Args)]
pub struct SynthArgs {
    /// Number of documents.
    #[arg(long)]
    pub docs: u64,
    /// Mean tokens per document (counts spread log-normally around it).
    #[arg(long, default_value_t = 100)]
    pub tokens: usize,
    /// Vector dimension.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    /// Output directory (must not hold an index).
    #[arg(long)]
    pub out: PathBuf,
    /// Codec: f16 or int8.
    #[arg(long, default_value = "f16")]
    pub codec: CodecKind,
    /// Number of topic clusters.
    #[arg(long, default_value_t = 1024)]
    pub clusters: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

pub fn run(args: SynthArgs) -> Result<()> {
    let config = SynthConfig {
        docs: args.docs,
        mean_tokens: args.tokens,
        dim: args.dim,
        clusters: args.clusters,
        seed: args.seed,
    };
    let manifest = write(config, &args.out, args.codec)?;
    let bytes: u64 = manifest.files.iter().map(|f| f.bytes).sum();
    println!(
        "wrote {} docs, {} tokens, {:.1} MiB ({} bytes/token, codec {}) to {}",
        manifest.counts.docs,
        manifest.counts.tokens,
        bytes as f64 / (1 << 20) as f64,
        manifest.bytes_per_token,
        manifest.codec.name(),
        args.out.display()
    );
    Ok(())
}

/// Writes a synthetic store with a progress bar (what `synth` runs, in the store benchmark's child
/// too).
pub fn write(
    config: SynthConfig,
    out: &std::path::Path,
    codec: CodecKind,
) -> Result<cellar_core::format::Manifest> {
    let corpus = SynthCorpus::new(config)?;
    let bar = cellar_search::progress::bar(corpus.config().docs, "synth");
    let started = Instant::now();
    let manifest = corpus.write_store(out, codec, |done| bar.set_position(done))?;
    bar.finish_and_clear();
    eprintln!(
        "synth: {} docs in {:.1}s ({:.0} docs/s)",
        manifest.counts.docs,
        started.elapsed().as_secs_f64(),
        manifest.counts.docs as f64 / started.elapsed().as_secs_f64()
    );
    Ok(manifest)
}
