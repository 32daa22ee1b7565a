//! `cellar-bench tokens-retrain`: what documents written after a token stage was built cost, and
//! what `Index::retrain_tokens` gives back. An f16 index of synthetic documents
//! (`cellar_core::synth`) gets its token stage, then more documents of the same generator are
//! written. Before and after the retrain, on an index opened afresh each time: the first dense
//! query (which, before, assigns every written document to the stage's leaves in RAM:
//! `TokenStage::catch_up`), the following queries' latency, the RAM those written lists hold
//! (`LiveStats::tokens_written_bytes`), and the recall@10 of the dense mode at its defaults
//! against exact MaxSim (every leaf probed, every document re-ranked), for queries near written
//! documents and for the generator's queries. Plus the retrain's own time.

use std::path::{Path, PathBuf};
use std::time::Instant;

use cellar_core::codec::CodecKind;
use cellar_core::stats::ms_since;
use cellar_core::synth::{SynthConfig, SynthCorpus};
use cellar_core::{IoContext, Result};
use cellar_search::tokens::{build_tokens, TokensBuildOptions};
use cellar_search::{
    BuildOptions, DocIn, EmbeddedDoc, Index, Mode, OpenOptions, QueryVectorsIn, SearchRequest, WriteOp,
    WriteRequest,
};
use clap::Args;
use serde::Serialize;

use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;
use crate::harness::stats::{summarize, LatencySummary};

#[derive(Args)]
pub struct TokensRetrainArgs {
    /// Documents of the build.
    #[arg(long, default_value_t = 20_000)]
    pub docs: u64,
    /// Documents written after the token stage was built.
    #[arg(long, default_value_t = 5_000)]
    pub written: u64,
    #[arg(long, default_value_t = 64)]
    pub dim: usize,
    /// Mean tokens per document.
    #[arg(long, default_value_t = 24)]
    pub tokens: usize,
    /// Queries of each kind.
    #[arg(long, default_value_t = 100)]
    pub queries: usize,
    #[arg(long, default_value = "bench/work/tokens-retrain")]
    pub work: PathBuf,
    #[arg(long, default_value = "bench/results/tokens-retrain")]
    pub out: PathBuf,
}

/// One state of the index, measured on a fresh open.
#[derive(Serialize)]
struct Phase {
    when: String,
    /// Ids the token stage covers (its lists); documents from there on are assigned in RAM.
    stage_covers: u64,
    first_query_ms: f64,
    following: Option<LatencySummary>,
    tokens_written_bytes: u64,
    recall_written: f64,
    recall_generator: f64,
}

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    provenance: Provenance,
    docs: u64,
    written: u64,
    dim: usize,
    mean_tokens: usize,
    leaves: usize,
    retrain_secs: f64,
    phases: Vec<Phase>,
}

fn rows(tokens: &[f32], dim: usize) -> Vec<Vec<f32>> {
    tokens.chunks(dim).map(<[f32]>::to_vec).collect()
}

fn dense(query: &[f32], dim: usize) -> SearchRequest {
    SearchRequest {
        k: Some(10),
        mode: Some(Mode::Dense),
        query_vectors: Some(QueryVectorsIn { tokens: rows(query, dim), ..Default::default() }),
        ..Default::default()
    }
}

fn ids(index: &Index, request: SearchRequest) -> Result<Vec<String>> {
    Ok(index.search(request)?.hits.into_iter().map(|h| h.id).collect())
}

/// Mean share of the exact top-10 (every leaf probed, every document re-ranked) that the dense
/// mode's defaults find.
fn recall(index: &Index, queries: &[Vec<f32>], dim: usize, leaves: usize, all: usize) -> Result<f64> {
    let mut total = 0.0;
    for q in queries {
        let exact = SearchRequest {
            nprobe: Some(leaves),
            candidates: Some(all),
            rerank_k: Some(all),
            ..dense(q, dim)
        };
        let want = ids(index, exact)?;
        let got = ids(index, dense(q, dim))?;
        total += want.iter().filter(|id| got.contains(id)).count() as f64 / want.len().max(1) as f64;
    }
    Ok(total / queries.len().max(1) as f64)
}

fn phase(
    dir: &Path,
    when: &str,
    queries: &[Vec<Vec<f32>>; 2],
    args: &TokensRetrainArgs,
    leaves: usize,
) -> Result<Phase> {
    let index = Index::open(dir, OpenOptions::default())?;
    let start = Instant::now();
    ids(&index, dense(&queries[1][0], args.dim))?;
    let first_query_ms = ms_since(start);
    let mut following = Vec::new();
    for q in queries[1].iter().chain(&queries[0]) {
        let start = Instant::now();
        ids(&index, dense(q, args.dim))?;
        following.push(ms_since(start));
    }
    let all = (args.docs + args.written) as usize;
    let stats = index.live_stats();
    let stage = cellar_search::tokens::TokensConfig::load(dir)?.map_or(0, |c| c.docs);
    let phase = Phase {
        when: when.into(),
        stage_covers: stage,
        first_query_ms,
        following: summarize(&following),
        tokens_written_bytes: stats.tokens_written_bytes,
        recall_written: recall(&index, &queries[0], args.dim, leaves, all)?,
        recall_generator: recall(&index, &queries[1], args.dim, leaves, all)?,
    };
    println!(
        "{when}: first query {:.1} ms, then P50 {:.2} ms; written lists in RAM {} bytes; recall@10 {:.3} (written) {:.3} (generator)",
        phase.first_query_ms,
        phase.following.as_ref().map_or(0.0, |s| s.p50_ms),
        phase.tokens_written_bytes,
        phase.recall_written,
        phase.recall_generator
    );
    Ok(phase)
}

pub fn run(args: TokensRetrainArgs) -> Result<()> {
    let provenance = Provenance::now();
    let corpus = SynthCorpus::new(SynthConfig {
        docs: args.docs + args.written,
        mean_tokens: args.tokens,
        dim: args.dim,
        clusters: 256,
        seed: 46,
    })?;
    let dir = args.work.join("index");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).at(&dir)?;
    }
    std::fs::create_dir_all(&args.work).at(&args.work)?;
    let (mut tokens, mut pooled) = (Vec::new(), Vec::new());
    let mut options = BuildOptions::new("", &dir);
    options.codec = CodecKind::F16;
    options.progress = true;
    let base = (0..args.docs).map(|i| {
        corpus.doc(i, &mut tokens, &mut pooled);
        Ok(EmbeddedDoc { id: format!("d{i}"), tokens: tokens.clone(), ..EmbeddedDoc::default() })
    });
    Index::build_from_embeddings(&options, args.dim, Some(args.docs), base)?;
    let stage = build_tokens(&dir, &TokensBuildOptions { progress: true, ..TokensBuildOptions::default() })?;
    let leaves = stage.leaves;
    println!("built {} documents, a token stage of {leaves} leaves", args.docs);

    let index = Index::open(&dir, OpenOptions::default())?;
    let mut written_queries = Vec::new();
    let ids_written: Vec<u64> = (args.docs..args.docs + args.written).collect();
    for batch in ids_written.chunks(256) {
        let ops = batch
            .iter()
            .map(|&i| {
                corpus.doc(i, &mut tokens, &mut pooled);
                if written_queries.len() < args.queries
                    && i % (args.written / args.queries as u64).max(1) == 0
                {
                    written_queries.push(tokens[..tokens.len().min(8 * args.dim)].to_vec());
                }
                WriteOp::Add(DocIn {
                    id: format!("w{i}"),
                    vectors: Some(QueryVectorsIn { tokens: rows(&tokens, args.dim), ..Default::default() }),
                    ..DocIn::default()
                })
            })
            .collect();
        index.write(WriteRequest { ops })?;
    }
    index.flush()?;
    drop(index);
    println!("wrote {} documents", args.written);
    let generator: Vec<Vec<f32>> = (0..args.queries as u64).map(|s| corpus.query(s, 8)).collect();
    let queries = [written_queries, generator];

    let before = phase(&dir, "before the retrain", &queries, &args, leaves)?;
    let index = Index::open(&dir, OpenOptions::default())?;
    let start = Instant::now();
    index.retrain_tokens()?;
    let retrain_secs = start.elapsed().as_secs_f64();
    drop(index);
    println!("retrained in {retrain_secs:.2} s");
    let after = phase(&dir, "after the retrain", &queries, &args, leaves)?;

    let report = Report {
        provenance,
        docs: args.docs,
        written: args.written,
        dim: args.dim,
        mean_tokens: args.tokens,
        leaves,
        retrain_secs,
        phases: vec![before, after],
    };
    let markdown = markdown(&report);
    let (json, md) = write_report(&args.out, &report, &markdown)?;
    println!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

fn markdown(r: &Report) -> String {
    let mut out = format!(
        "# Token stage: written documents before and after a retrain\n\n{}\n\
         An f16 index of {} synthetic documents ({} dimensions, {} tokens on average) with a token \
         stage of {} leaves, then {} more documents of the same generator written. Each row is \
         measured on the index opened afresh; the retrain took {:.2} s. Recall@10 of the dense \
         mode at its defaults against exact MaxSim (every leaf probed, every document re-ranked), \
         for queries made of written documents' first tokens and for the generator's queries.\n\n\
         | when | ids in the lists | first query after open (ms) | then P50 (ms) | then P95 (ms) | written lists in RAM (bytes) | recall@10, written | recall@10, generator |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
        r.provenance.markdown(),
        r.docs,
        r.dim,
        r.mean_tokens,
        r.leaves,
        r.written,
        r.retrain_secs
    );
    for p in &r.phases {
        let (p50, p95) = p.following.as_ref().map_or((0.0, 0.0), |s| (s.p50_ms, s.p95_ms));
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.2} | {:.2} | {} | {:.3} | {:.3} |\n",
            p.when,
            p.stage_covers,
            p.first_query_ms,
            p50,
            p95,
            p.tokens_written_bytes,
            p.recall_written,
            p.recall_generator
        ));
    }
    out
}
