//! `cellar-bench filter`: recall@10 of filtered searches against exact filtered MaxSim, per
//! selectivity. An index is built from an embeddings folder (`cellar-bench embeddings encode`)
//! with one metadata value per document, `bucket` (a hash of its id, 0 to 999), so the filter
//! `bucket < 1000 s` keeps a pseudo-random fraction s of the collection. The truth of a query is
//! the exact filtered ranking (the dense mode's exact path with its limit at `MAX_CANDIDATES`:
//! MaxSim of every matching document). Each variant runs the collection's queries (encoded here by the default model and
//! sent as vectors, with their text for BM25) at 50%, 10%, 1% and 0.1%: the IVF then MaxSim and
//! BM25 then MaxSim with the filter in their first stage (`filter_exact_max` 0), the same with the
//! default switch to the exact scan, and a post-filter baseline (the unfiltered dense top 100,
//! filtered afterwards).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use cellar_core::codec::CodecKind;
use cellar_core::stats::ms_since;
use cellar_core::{CellarError, IoContext, Result};
use cellar_encode::Encoder;
use cellar_search::corpus::BeirPaths;
use cellar_search::embeddings::EmbeddingsDir;
use cellar_search::filter::{Range, Scalar, DEFAULT_FILTER_EXACT_MAX};
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::request::MAX_CANDIDATES;
use cellar_search::{
    BuildOptions, Filter, Index, MetaValue, Metadata, Mode, OpenOptions, QueryVectorsIn, SearchRequest,
    SearchResponse,
};
use clap::Args;
use serde::Serialize;

use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;
use crate::harness::stats::{mean, percentile_of};

#[derive(Args)]
pub struct FilterArgs {
    /// An embeddings folder (`cellar-bench embeddings encode --data DATA`): the documents.
    #[arg(long)]
    pub vectors: PathBuf,
    /// The collection's BEIR folder: its queries (the `test` split's, when it has qrels).
    #[arg(long)]
    pub data: PathBuf,
    /// Where the index with metadata is built (kept and reused).
    #[arg(long, default_value = "bench/work/filter")]
    pub work: PathBuf,
    /// Prefix of the report (`.json`, `.md`).
    #[arg(long, default_value = "bench/results/filter-recall")]
    pub out: PathBuf,
    #[arg(long, default_value = "residual2")]
    pub codec: CodecKind,
    /// Queries run per selectivity and variant.
    #[arg(long, default_value_t = 300)]
    pub queries: usize,
}

const SELECTIVITIES: [f64; 4] = [0.5, 0.1, 0.01, 0.001];
const K: usize = 10;
/// Depth of the post-filter baseline's unfiltered search.
const POST_FILTER_DEPTH: usize = 100;

/// A document's bucket: FNV-1a of its id, modulo 1000.
fn bucket(id: &str) -> i64 {
    let hash = id.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3));
    (hash % 1000) as i64
}

fn below(limit: i64) -> Filter {
    Filter::Range(Range {
        field: "bucket".into(),
        gt: None,
        gte: None,
        lt: Some(Scalar::Int(limit)),
        lte: None,
    })
}

#[derive(Clone, Copy)]
enum Variant {
    /// The filter in the first stage of `mode`, and the exact switch at `exact_max`.
    Filtered { mode: Mode, exact_max: usize },
    /// The unfiltered dense top `POST_FILTER_DEPTH`, then the filter.
    PostFilter,
}

impl Variant {
    fn label(self) -> String {
        match self {
            Variant::Filtered { mode, exact_max: 0 } => format!("{mode}, filter in the first stage"),
            Variant::Filtered { mode, exact_max } => format!("{mode}, exact scan at <= {exact_max} matches"),
            Variant::PostFilter => format!("dense top {POST_FILTER_DEPTH}, filtered after"),
        }
    }
}

#[derive(Serialize)]
struct Row {
    selectivity: f64,
    matched: usize,
    variant: String,
    recall_at_10: f64,
    /// Queries ranked by the exact path.
    exact_share: f64,
    mean_ms: f64,
    p95_ms: f64,
    mean_bytes_read: f64,
}

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    provenance: Provenance,
    docs: usize,
    queries: usize,
    codec: String,
    nprobe: Option<usize>,
    rows: Vec<Row>,
}

/// A query as the benchmarks send it: its text (for BM25) and its vectors, encoded here.
pub(crate) struct BenchQuery {
    pub text: String,
    pub vectors: QueryVectorsIn,
}

fn request(
    query: &BenchQuery,
    mode: Mode,
    k: usize,
    filter: Option<Filter>,
    exact_max: usize,
) -> SearchRequest {
    SearchRequest {
        query: query.text.clone(),
        k: Some(k),
        mode: Some(mode),
        query_vectors: Some(query.vectors.clone()),
        include_text: Some(false),
        filter,
        filter_exact_max: Some(exact_max),
        ..SearchRequest::default()
    }
}

pub fn run(args: FilterArgs) -> Result<()> {
    let provenance = Provenance::now();
    let dir = args.work.join(format!("index-{}", args.codec.name()));
    if !dir.join("index.json").is_file() {
        build(&args, &dir)?;
    }
    let index = Index::open(&dir, OpenOptions::default())?;
    let queries = encode_queries(&args.data, &args.work, args.queries)?;
    println!("{} queries encoded; index of {} documents at {}", queries.len(), index.len(), dir.display());
    let variants = [
        Variant::Filtered { mode: Mode::Dense, exact_max: 0 },
        Variant::Filtered { mode: Mode::Dense, exact_max: DEFAULT_FILTER_EXACT_MAX },
        Variant::Filtered { mode: Mode::Rerank, exact_max: 0 },
        Variant::Filtered { mode: Mode::Rerank, exact_max: DEFAULT_FILTER_EXACT_MAX },
        Variant::PostFilter,
    ];
    let mut rows = Vec::new();
    for s in SELECTIVITIES {
        let limit = (1000.0 * s).round() as i64;
        let filter = below(limit);
        let matched = index.matching(&filter)?.len();
        let truth: Vec<Vec<String>> = queries
            .iter()
            .map(|q| {
                Ok(ids(&index.search(request(q, Mode::Dense, K, Some(filter.clone()), MAX_CANDIDATES))?))
            })
            .collect::<Result<_>>()?;
        for variant in variants {
            let (mut recall, mut ms, mut bytes, mut exact) = (Vec::new(), Vec::new(), Vec::new(), 0usize);
            for (q, want) in queries.iter().zip(&truth) {
                let start = Instant::now();
                let got: Vec<String> = match variant {
                    Variant::Filtered { mode, exact_max } => {
                        let answer = index.search(request(q, mode, K, Some(filter.clone()), exact_max))?;
                        bytes.push(answer.io.bytes_read as f64);
                        exact += usize::from(answer.filter.is_some_and(|f| f.exact));
                        ids(&answer)
                    }
                    Variant::PostFilter => {
                        let answer = index.search(request(q, Mode::Dense, POST_FILTER_DEPTH, None, 0))?;
                        bytes.push(answer.io.bytes_read as f64);
                        let keep = |h: &&cellar_search::search::Hit| bucket(&h.id) < limit;
                        answer.hits.iter().filter(keep).take(K).map(|h| h.id.clone()).collect()
                    }
                };
                ms.push(ms_since(start));
                if !want.is_empty() {
                    let want: HashSet<&String> = want.iter().collect();
                    recall.push(got.iter().filter(|id| want.contains(id)).count() as f64 / want.len() as f64);
                }
            }
            let row = Row {
                selectivity: s,
                matched,
                variant: variant.label(),
                recall_at_10: mean(&recall).unwrap_or(0.0),
                exact_share: exact as f64 / queries.len() as f64,
                mean_ms: mean(&ms).unwrap_or(0.0),
                p95_ms: percentile_of(&ms, 95.0).unwrap_or(0.0),
                mean_bytes_read: mean(&bytes).unwrap_or(0.0),
            };
            println!(
                "{:>5.1}% ({matched:>4} docs)  {:<44} recall@10 {:.3}  mean {:.1} ms  p95 {:.1} ms",
                100.0 * s,
                row.variant,
                row.recall_at_10,
                row.mean_ms,
                row.p95_ms
            );
            rows.push(row);
        }
    }
    let nprobe = index.search(request(&queries[0], Mode::Dense, K, None, 0))?.params.ivf.map(|p| p.nprobe);
    let report = Report {
        provenance,
        docs: index.len(),
        queries: queries.len(),
        codec: args.codec.name().to_string(),
        nprobe,
        rows,
    };
    let (json, md) = write_report(&args.out, &report, &markdown(&report))?;
    println!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

fn ids(answer: &SearchResponse) -> Vec<String> {
    answer.hits.iter().map(|h| h.id.clone()).collect()
}

/// The index of the embeddings folder, each document given its `bucket`.
fn build(args: &FilterArgs, dir: &std::path::Path) -> Result<()> {
    let start = Instant::now();
    std::fs::create_dir_all(&args.work).at(&args.work)?;
    let vectors = EmbeddingsDir::open(&args.vectors)?;
    let mut options = BuildOptions::new(&args.vectors, dir);
    options.codec = args.codec;
    options.ivf = Some(IvfBuildOptions::default());
    let docs = vectors.docs()?.map(|doc| {
        doc.map(|mut d| {
            d.metadata =
                Metadata([("bucket".to_string(), MetaValue::Int(bucket(&d.id)))].into_iter().collect());
            d
        })
    });
    Index::build_from_embeddings(&options, vectors.dim(), None, docs)?;
    println!("built {} in {:.1} s", dir.display(), start.elapsed().as_secs_f64());
    Ok(())
}

/// The first `n` queries of the collection in `data` (its test split's when it has one), encoded
/// by the default model as the build would (`work`: where a build would write, unused).
pub(crate) fn encode_queries(
    data: &std::path::Path,
    work: &std::path::Path,
    n: usize,
) -> Result<Vec<BenchQuery>> {
    let collection = BeirPaths::locate(data)?;
    let mut queries = collection.queries()?;
    if let Ok(qrels) = collection.qrels("test") {
        queries.retain(|q| qrels.contains_key(&q.id));
    }
    queries.truncate(n);
    if queries.is_empty() {
        return Err(CellarError::invalid(format!("{}: no queries", data.display())));
    }
    let encoder = Encoder::load(BuildOptions::new(data, work).encoder_config()?)?;
    let dim = encoder.dim();
    queries
        .into_iter()
        .map(|q| {
            let encoded = encoder.encode_query(&q.text)?;
            let tokens = encoded.tokens.chunks(dim).map(<[f32]>::to_vec).collect();
            Ok(BenchQuery {
                text: q.text,
                vectors: QueryVectorsIn { tokens, pooled: Some(encoded.pooled), ..QueryVectorsIn::default() },
            })
        })
        .collect()
}

fn markdown(report: &Report) -> String {
    let mut md = format!(
        "# Filtered search: recall@10 against exact filtered MaxSim, per selectivity\n\n{}\n\
         {} documents ({} codec, IVF nprobe {}), {} queries per cell. Each document has metadata \
         `bucket` = FNV-1a(id) mod 1000, and the filter `{{\"range\": {{\"field\": \"bucket\", \"lt\": 1000 s}}}}` \
         keeps the fraction s of them. Truth: the exact filtered ranking (MaxSim of every matching \
         document, the dense mode's exact path with its limit at 100000), top 10. Recall@10: the share of the \
         truth's top 10 a variant returns. Times: wall time of `Index::search` in this process (no \
         HTTP), mean and P95 over the queries; bytes: the reads a search made (IVF blocks and records).\n\n\
         | selectivity | matched docs | variant | recall@10 | exact path | mean ms | P95 ms | mean KiB read |\n\
         |---|---|---|---|---|---|---|---|\n",
        report.provenance.markdown(),
        report.docs,
        report.codec,
        report.nprobe.map_or("-".to_string(), |n| n.to_string()),
        report.queries
    );
    for r in &report.rows {
        md.push_str(&format!(
            "| {}% | {} | {} | {:.3} | {:.0}% | {:.1} | {:.1} | {:.0} |\n",
            100.0 * r.selectivity,
            r.matched,
            r.variant,
            r.recall_at_10,
            100.0 * r.exact_share,
            r.mean_ms,
            r.p95_ms,
            r.mean_bytes_read / 1024.0
        ));
    }
    md
}
