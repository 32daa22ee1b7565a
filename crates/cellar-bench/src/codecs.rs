//! `cellar-bench codecs`: bytes per token against quality for every codec, with and without
//! PCA, on one collection. Each variant is recoded from one f16 index (`cellar_search::recode`:
//! same BM25, texts, IVF and tuned defaults; only the token vectors differ), then its judged
//! queries are encoded and searched in rerank and hybrid modes.
//!
//! With `--centroids-from-tokens` every residual fit is given the tree of a token stage
//! (`cellar tokens build`) trained with the fit's seed on the same f16 vectors, built in a
//! scratch copy of the source under `--work`: whether the codec could share the token stage's
//! centroids, one id per token for both as in PLAID (issue 44.1).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cellar_core::codec::{CentroidTree, CodecKind, FitOptions, ResidualCodec};
use cellar_core::format::fsio::{read_small_file, LOCK_FILE};
use cellar_core::format::{FileKind, Manifest};
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::store::VectorStore;
use cellar_core::{CellarError, DocId, IoContext, Result};
use cellar_search::eval::{evaluate_row, RowSpec, EVAL_DEPTH};
use cellar_search::index::VECTORS_DIR;
use cellar_search::lock::is_index_dir;
use cellar_search::lock::BUILDING_MARKER;
use cellar_search::recode::{recode, RecodeOptions};
use cellar_search::tokens::layout::CentroidsFile;
use cellar_search::tokens::{build_tokens, TokensBuildOptions, TOKENS_DIR};
use cellar_search::{IndexConfig, Mode, SearchRequest};
use clap::Args;
use serde::Serialize;

use crate::ivf::common::{write_outputs, QueryArgs};

#[derive(Args)]
pub struct CodecsArgs {
    /// The f16 index (and its collection's judged queries) every variant is recoded from.
    #[command(flatten)]
    pub queries: QueryArgs,
    /// Folder for the recoded indexes (one per variant, replaced on every run).
    #[arg(long)]
    pub work: PathBuf,
    /// Variants: a codec name, optionally after `pcaN-` (e.g. `pca128-residual2`).
    #[arg(
        long,
        default_value = "f16,int8,residual1,residual2,residual4,pca128-f16,pca128-int8,pca128-residual1,pca128-residual2,pca128-residual4"
    )]
    pub variants: String,
    /// Token vectors the PCA and the codecs are fitted on.
    #[arg(long, default_value_t = 100_000)]
    pub sample_tokens: usize,
    /// Fit every residual variant once per seed (its k-means), a row each: how much one fit's
    /// luck moves nDCG@10. Default: the codec's own seed, one row.
    #[arg(long, value_delimiter = ',')]
    pub fit_seeds: Vec<u64>,
    /// Share of the residual energy uncoded dimensions may hold (0 codes every dimension;
    /// default: the codec's bound).
    #[arg(long)]
    pub uncoded_energy: Option<f64>,
    /// Leaf centroids of every residual fit (default: the codec's count for its sample).
    #[arg(long)]
    pub centroids: Option<usize>,
    /// Most points a residual tree's top level is placed on (default: the codec's).
    #[arg(long)]
    pub top_fit_points: Option<usize>,
    /// Most Lloyd passes of each top cluster's split into leaves (default: the codec's).
    #[arg(long)]
    pub leaf_iterations: Option<usize>,
    /// Fit every residual variant on the centroid tree of a token stage trained with the fit's
    /// seed (default: the stage's seed) on the source's vectors instead of the codec's own
    /// k-means. The stage is built in a scratch copy of the source (`WORK/token-stage-source`);
    /// the source is not written.
    #[arg(long, conflicts_with_all = ["centroids", "top_fit_points", "leaf_iterations"])]
    pub centroids_from_tokens: bool,
    /// With --centroids-from-tokens: the token stage's leaves (default: its own count,
    /// 4·√tokens rounded down to a power of two).
    #[arg(long, requires = "centroids_from_tokens")]
    pub token_leaves: Option<usize>,
}

/// The scratch copy of the source that `--centroids-from-tokens` builds token stages in.
const TOKEN_STAGE_SOURCE: &str = "token-stage-source";

#[derive(Serialize)]
struct Row {
    /// As `--variants` names it (several rows share it with `--fit-seeds`).
    variant: String,
    /// The fit's seed, where `--fit-seeds` gave one.
    seed: Option<u64>,
    codec: String,
    dim: usize,
    bytes_per_token: usize,
    vectors_mib: f64,
    /// Seconds to fit and write the variant's vectors from the f16 ones (0 for the source).
    recode_secs: f64,
    /// A residual codec's centroids: `own` (its k-means) or `token stage` (the tree of a token
    /// stage trained with the fit's seed); none for the other codecs.
    centroids: Option<String>,
    /// A residual codec's leaf centroids.
    leaves: Option<usize>,
    /// With token-stage centroids: seconds to train the stage's quantizer (of its whole build,
    /// which also assigns and writes every token, `token_stage_secs`).
    token_train_secs: Option<f64>,
    token_stage_secs: Option<f64>,
    /// What the codec loses of the tokens, `sum |x - decoded(x)|^2 / sum |x|^2` over every
    /// [`ERROR_EVERY`]-th document (x: the source's f16 vectors); none for the source and for
    /// a PCA, whose tokens have other dimensions. The objective a residual fit works for, with
    /// far less noise between fits than nDCG@10.
    token_error: Option<f64>,
    ndcg_rerank: f64,
    ndcg_hybrid: f64,
    kib_read_rerank: f64,
    search_ms_rerank: f64,
}

/// Documents between two whose tokens [`token_error`] compares.
const ERROR_EVERY: usize = 7;

/// [`Row::token_error`] of the index at `recoded` against the f16 one at `source`.
fn token_error(source: &Path, recoded: &Path) -> Result<f64> {
    let options = ReaderOptions::new(ReaderKind::Mmap);
    let source = VectorStore::open(&source.join(VECTORS_DIR), &options)?;
    let recoded = VectorStore::open(&recoded.join(VECTORS_DIR), &options)?;
    let ids: Vec<DocId> =
        (ERROR_EVERY as u32 / 2..source.len() as u32).step_by(ERROR_EVERY).map(DocId).collect();
    let (mut lost, mut held) = (0f64, 0f64);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for chunk in ids.chunks(64) {
        let (a, b) = (source.read_batch(chunk)?, recoded.read_batch(chunk)?);
        for (i, id) in chunk.iter().enumerate() {
            x.clear();
            y.clear();
            source.codec().decode(a.record(i).tokens, &mut x);
            recoded.codec().decode(b.record(i).tokens, &mut y);
            if x.len() != y.len() {
                return Err(CellarError::internal(format!("document {}: recoded to another shape", id.0)));
            }
            lost += x.iter().zip(&y).map(|(x, y)| f64::from((x - y) * (x - y))).sum::<f64>();
            held += x.iter().map(|x| f64::from(x * x)).sum::<f64>();
        }
    }
    Ok(lost / held.max(f64::MIN_POSITIVE))
}

/// A copy of the index at `from` in `to` (replaced if it is an index) that a token stage may be
/// built in without writing `from`: every file hard-linked (copied across file systems), but
/// `index.json` copied, and no lock, build marker or token stage of the source.
fn scratch_copy(from: &Path, to: &Path) -> Result<()> {
    if to.exists() {
        if !is_index_dir(to) {
            return Err(CellarError::invalid(format!("{}: exists and is not an index", to.display())));
        }
        std::fs::remove_dir_all(to).at(to)?;
    }
    fn walk(from: &Path, to: &Path, top: bool) -> Result<()> {
        std::fs::create_dir_all(to).at(to)?;
        for entry in from.read_dir().at(from)? {
            let entry = entry.at(from)?;
            let name = entry.file_name();
            let text = name.to_string_lossy();
            if top && (name == LOCK_FILE || name == BUILDING_MARKER || text.starts_with(TOKENS_DIR)) {
                continue;
            }
            let (src, dst) = (entry.path(), to.join(&name));
            if entry.file_type().at(&src)?.is_dir() {
                walk(&src, &dst, false)?;
            } else if (top && name == cellar_search::config::CONFIG_FILE)
                || std::fs::hard_link(&src, &dst).is_err()
            {
                std::fs::copy(&src, &dst).at(&dst)?;
            }
        }
        Ok(())
    }
    walk(from, to, true)
}

/// Builds a token stage in `scratch` with `options` and returns its tree (leaves f16 → f32) for
/// a residual fit, with the stage's seconds to train its quantizer and to build as a whole.
fn token_stage_tree(scratch: &Path, options: &TokensBuildOptions) -> Result<(CentroidTree, f64, f64)> {
    let started = Instant::now();
    let config = build_tokens(scratch, options)?;
    let total = started.elapsed().as_secs_f64();
    let path = scratch.join(TOKENS_DIR).join(FileKind::TokenCentroids.file_name());
    let (header, body) = read_small_file(&path, FileKind::TokenCentroids)?;
    let q = CentroidsFile::decode(&body, &path, header.body_offset)?.quantizer;
    let tree =
        CentroidTree { dim: q.dim, top: q.tops.clone(), ranges: q.starts.clone(), leaves: q.leaves_f32() };
    Ok((tree, config.build.train_secs, total))
}

/// `pcaN-codec` → (codec, N).
fn parse_variant(v: &str) -> Result<(CodecKind, Option<usize>)> {
    match v.strip_prefix("pca").and_then(|rest| rest.split_once('-')) {
        Some((dim, codec)) => {
            let dim =
                dim.parse().map_err(|_| CellarError::invalid(format!("variant {v:?}: bad PCA dimension")))?;
            Ok((codec.parse()?, Some(dim)))
        }
        None => Ok((v.parse()?, None)),
    }
}

pub fn run(args: CodecsArgs) -> Result<()> {
    let parsed: Vec<(String, CodecKind, Option<usize>)> = args
        .variants
        .split(',')
        .map(|v| parse_variant(v.trim()).map(|(c, p)| (v.trim().to_string(), c, p)))
        .collect::<Result<_>>()?;
    if args.centroids_from_tokens {
        if let Some((name, _, _)) = parsed.iter().find(|(_, c, p)| c.residual_bits().is_some() && p.is_some())
        {
            return Err(CellarError::invalid(format!(
                "--centroids-from-tokens: variant {name} fits after a PCA, and the token stage is of the source's dimensions"
            )));
        }
    }
    // A residual variant once per seed asked for; every other variant once.
    let mut variants = Vec::new();
    for (name, codec, pca_dim) in parsed {
        if codec.residual_bits().is_some() && !args.fit_seeds.is_empty() {
            for &seed in &args.fit_seeds {
                variants.push((name.clone(), codec, pca_dim, Some(seed)));
            }
        } else {
            variants.push((name, codec, pca_dim, None));
        }
    }
    let source = IndexConfig::load(&args.queries.index)?;
    std::fs::create_dir_all(&args.work).at(&args.work)?;
    let scratch = args.work.join(TOKEN_STAGE_SOURCE);
    if args.centroids_from_tokens {
        scratch_copy(&args.queries.index, &scratch)?;
    }
    let mut rows = Vec::new();
    for (name, codec, pca_dim, seed) in variants {
        let is_source = codec == CodecKind::F16 && pca_dim.is_none();
        let residual = codec.residual_bits().is_some();
        let (mut tree, mut token_train_secs, mut token_stage_secs) = (None, None, None);
        if residual && args.centroids_from_tokens {
            let options = TokensBuildOptions {
                leaves: args.token_leaves.unwrap_or(0),
                seed: seed.unwrap_or(TokensBuildOptions::default().seed),
                ..TokensBuildOptions::default()
            };
            eprintln!("building a token stage (seed {}) in {}", options.seed, scratch.display());
            let (t, train, total) = token_stage_tree(&scratch, &options)?;
            (tree, token_train_secs, token_stage_secs) = (Some(Arc::new(t)), Some(train), Some(total));
        }
        let (index_dir, recode_secs) = if is_source {
            (args.queries.index.clone(), 0.0)
        } else {
            let out = args.work.join(label(&name, seed));
            if out.exists() {
                if !is_index_dir(&out) {
                    return Err(CellarError::invalid(format!(
                        "{}: exists and is not an index",
                        out.display()
                    )));
                }
                std::fs::remove_dir_all(&out).at(&out)?;
            }
            eprintln!("recoding {} into {}", label(&name, seed), out.display());
            let started = Instant::now();
            let options = RecodeOptions {
                from: args.queries.index.clone(),
                out: out.clone(),
                codec,
                pca_dim,
                sample_tokens: args.sample_tokens,
                fit: FitOptions {
                    // A given tree has no k-means to seed: the seed went to its token stage.
                    seed: seed.filter(|_| tree.is_none()),
                    uncoded_energy_max: args.uncoded_energy,
                    centroids: args.centroids,
                    top_fit_points: args.top_fit_points,
                    leaf_iterations: args.leaf_iterations,
                    tree: tree.clone(),
                },
            };
            recode(&options)?;
            (out, started.elapsed().as_secs_f64())
        };
        let queries = QueryArgs { index: index_dir.clone(), ..args.queries.clone() };
        let w = queries.load()?;
        let mut ndcg = [0.0; 2];
        let (mut kib, mut ms) = (0.0, 0.0);
        for (slot, mode) in [Mode::Rerank, Mode::Hybrid].into_iter().enumerate() {
            let request = SearchRequest { k: Some(EVAL_DEPTH), mode: Some(mode), ..SearchRequest::default() };
            let spec = RowSpec { label: format!("{name} {mode}"), request };
            let r = evaluate_row(&w.index, &w.queries, &w.prepared, &w.qrels, &w.ids, &spec)?;
            ndcg[slot] = r.metrics.ndcg_at_10;
            if mode == Mode::Rerank {
                (kib, ms) = (r.mean_bytes_read / 1024.0, r.mean_search_ms);
            }
        }
        let config = IndexConfig::load(&index_dir)?;
        let dim = config.token_dim();
        let token_error = if is_source || pca_dim.is_some() {
            None
        } else {
            Some(token_error(&args.queries.index, &index_dir)?)
        };
        let leaves = if residual { Some(leaf_count(&index_dir)?) } else { None };
        let centroids = residual.then(|| if tree.is_some() { "token stage" } else { "own" }.to_string());
        rows.push(Row {
            variant: name,
            seed,
            codec: codec.name().to_string(),
            dim,
            // The store's own: a residual fit may leave dimensions uncoded.
            bytes_per_token: Manifest::read(&index_dir.join(VECTORS_DIR))?.bytes_per_token,
            vectors_mib: config.build.vectors_bytes as f64 / (1 << 20) as f64,
            recode_secs,
            centroids,
            leaves,
            token_train_secs,
            token_stage_secs,
            token_error,
            ndcg_rerank: ndcg[0],
            ndcg_hybrid: ndcg[1],
            kib_read_rerank: kib,
            search_ms_rerank: ms,
        });
    }
    let b = &source.build;
    let setup = format!(
        "Source: `{}` ({} docs, {} tokens; its build without encoding: {:.1} s of writing + {:.1} s of BM25). Every variant uses the source's search defaults (mode settings, rerank_k {}, alpha {}); nDCG@10 over {} split `{}`, reader {}. Recode time = fitting the PCA and codec on {} sample tokens plus re-encoding every token from f16.",
        args.queries.index.display(),
        b.docs,
        b.tokens,
        b.write_secs,
        b.bm25_secs,
        source.search.rerank_k,
        source.search.alpha,
        args.queries.data.display(),
        args.queries.split,
        args.queries.reader.name(),
        args.sample_tokens,
    );
    let mut setup = setup;
    if let Some(share) = args.uncoded_energy {
        let _ = write!(setup, " Residual fits leave uncoded at most {share} of the residual energy.");
    }
    if let Some(k) = args.centroids {
        let _ = write!(setup, " Residual fits have {k} leaf centroids.");
    }
    if let Some(n) = args.top_fit_points {
        let _ = write!(setup, " Residual trees place their top level on at most {n} points.");
    }
    if let Some(n) = args.leaf_iterations {
        let _ = write!(setup, " Residual trees split each top cluster in at most {n} Lloyd passes.");
    }
    if args.centroids_from_tokens {
        let leaves = args.token_leaves.map_or("its default count of".to_string(), |n| n.to_string());
        let _ = write!(
            setup,
            " Residual fits take their centroid tree from a token stage ({leaves} leaves) trained with the fit's seed on the source's vectors, not from their own k-means; the recode time does not include the stage's build."
        );
    }
    let _ = write!(
        setup,
        " Token error = sum |x - decoded(x)|^2 / sum |x|^2 over every {ERROR_EVERY}th document, x the source's vectors."
    );
    let mut md = table(&rows);
    md.push_str(&seed_summary(&rows));
    write_outputs(&args.queries.out, &setup, &rows, &md)
}

/// Leaf centroids of the residual codec of the index at `dir`.
fn leaf_count(dir: &Path) -> Result<usize> {
    let store = VectorStore::open(&dir.join(VECTORS_DIR), &ReaderOptions::new(ReaderKind::Mmap))?;
    let codec = store.codec();
    let path = dir.join(VECTORS_DIR).join(FileKind::CodecParams.file_name());
    Ok(ResidualCodec::from_params(codec.kind(), codec.dim(), &codec.params(), &path)?.centroid_count())
}

/// Which centroids a residual row's codec has and how many, e.g. `own 2048`, `token stage 4096`.
fn centroids_label(r: &Row) -> Option<String> {
    Some(format!("{} {}", r.centroids.as_deref()?, r.leaves?))
}

/// A row's name: its variant, and its seed where `--fit-seeds` gave one.
fn label(variant: &str, seed: Option<u64>) -> String {
    seed.map_or_else(|| variant.to_string(), |s| format!("{variant}-seed{s}"))
}

/// With `--fit-seeds`: each residual variant's nDCG@10 over its fits (mean, lowest, highest),
/// with their leaf counts, recode and token-stage training times.
fn seed_summary(rows: &[Row]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.seed.is_some()) {
        if !names.contains(&r.variant.as_str()) {
            names.push(&r.variant);
        }
    }
    if names.is_empty() {
        return String::new();
    }
    let base = rows.iter().find(|r| r.variant == "f16");
    let mut md = String::from(
        "\nOver the fits (`--fit-seeds`), mean [lowest, highest] (the mean's Δ vs f16); times lowest–highest:\n\n| variant | centroids | leaves | fits | token error | nDCG@10 rerank | nDCG@10 hybrid | recode s | token stage train s |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for name in names {
        let fits: Vec<&Row> = rows.iter().filter(|r| r.seed.is_some() && r.variant == name).collect();
        let values = |f: fn(&Row) -> Option<f64>| -> Vec<f64> { fits.iter().filter_map(|r| f(r)).collect() };
        let bounds = |v: &[f64]| v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        // The mean's difference from f16's where the run has its row.
        let spread = |f: fn(&Row) -> Option<f64>, places: usize, base: Option<f64>| {
            let v = values(f);
            if v.is_empty() {
                return "–".to_string();
            }
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let (lo, hi) = bounds(&v);
            let delta = base.map_or(String::new(), |b| format!(" ({:+.places$})", mean - b));
            format!("{mean:.places$} [{lo:.places$}, {hi:.places$}]{delta}")
        };
        let range = |f: fn(&Row) -> Option<f64>, places: usize| {
            let v = values(f);
            match bounds(&v) {
                _ if v.is_empty() => "–".to_string(),
                (lo, hi) if lo == hi => format!("{lo:.places$}"),
                (lo, hi) => format!("{lo:.places$}–{hi:.places$}"),
            }
        };
        let kinds: Vec<&str> = fits.iter().filter_map(|r| r.centroids.as_deref()).collect();
        let kind = match kinds.first() {
            Some(first) if kinds.iter().all(|k| k == first) => first,
            Some(_) => "mixed",
            None => "–",
        };
        let _ = writeln!(
            md,
            "| {name} | {kind} | {} | {} | {} | {} | {} | {} | {} |",
            range(|r| r.leaves.map(|l| l as f64), 0),
            fits.len(),
            spread(|r| r.token_error, 5, None),
            spread(|r| Some(r.ndcg_rerank), 4, base.map(|b| b.ndcg_rerank)),
            spread(|r| Some(r.ndcg_hybrid), 4, base.map(|b| b.ndcg_hybrid)),
            range(|r| Some(r.recode_secs), 2),
            range(|r| r.token_train_secs, 2),
        );
    }
    md
}

fn table(rows: &[Row]) -> String {
    let base = rows.iter().find(|r| r.variant == "f16");
    let int8 = rows.iter().find(|r| r.variant == "int8");
    let mut md = String::from(
        "| variant | dim | bytes/token | vs int8-full | vectors MiB | recode s | token error | nDCG@10 rerank | Δ vs f16 | nDCG@10 hybrid | Δ vs f16 | KiB read/query (rerank) | search ms (rerank) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let delta = |v: f64, b: Option<f64>| b.map_or("–".to_string(), |b| format!("{:+.4}", v - b));
    for r in rows {
        let ratio = int8.map_or("–".to_string(), |i| {
            format!("{:.1}x fewer", i.bytes_per_token as f64 / r.bytes_per_token as f64)
        });
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} | {:.1} | {} | {:.4} | {} | {:.4} | {} | {:.0} | {:.2} |",
            centroids_label(r).map_or_else(
                || label(&r.variant, r.seed),
                |c| format!("{} ({c} centroids)", label(&r.variant, r.seed))
            ),
            r.dim,
            r.bytes_per_token,
            ratio,
            r.vectors_mib,
            r.recode_secs,
            r.token_error.map_or("–".to_string(), |e| format!("{e:.5}")),
            r.ndcg_rerank,
            delta(r.ndcg_rerank, base.map(|b| b.ndcg_rerank)),
            r.ndcg_hybrid,
            delta(r.ndcg_hybrid, base.map(|b| b.ndcg_hybrid)),
            r.kib_read_rerank,
            r.search_ms_rerank,
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_name_a_codec_and_an_optional_pca() {
        assert_eq!(parse_variant("int8").unwrap(), (CodecKind::Int8, None));
        assert_eq!(parse_variant("pca128-residual2").unwrap(), (CodecKind::Residual2, Some(128)));
        assert!(parse_variant("pcaX-int8").is_err());
        assert!(parse_variant("residual3").is_err());
    }

    #[test]
    fn token_error_is_zero_for_the_same_vectors_and_the_codes_share_otherwise() {
        use cellar_core::codec::fit_codec;
        use cellar_core::store::StoreWriter;
        use rand::{Rng, SeedableRng};
        let dim = 16;
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        // 20 documents of 30 tokens, values in [-1, 1).
        let docs: Vec<Vec<f32>> =
            (0..20).map(|_| (0..30 * dim).map(|_| rng.gen_range(-1.0..1.0)).collect()).collect();
        let tmp = tempfile::tempdir().unwrap();
        let write = |name: &str, kind: CodecKind| {
            let dir = tmp.path().join(name);
            let codec = fit_codec(kind, dim, &docs.concat()).unwrap();
            let mut writer = StoreWriter::create(&dir.join(VECTORS_DIR), codec, false).unwrap();
            for doc in &docs {
                writer.add(doc, None).unwrap();
            }
            writer.finish().unwrap();
            dir
        };
        let (f16, residual) = (write("f16", CodecKind::F16), write("r1", CodecKind::Residual1));
        assert_eq!(token_error(&f16, &f16).unwrap(), 0.0);
        let lost = token_error(&f16, &residual).unwrap();
        // One bit a value keeps much of a token but not all of it.
        assert!(lost > 0.01 && lost < 0.5, "{lost}");
    }

    #[test]
    fn a_scratch_copy_leaves_out_the_sources_lock_and_token_stage_and_owns_its_config() {
        let tmp = tempfile::tempdir().unwrap();
        let (from, to) = (tmp.path().join("src"), tmp.path().join("scratch"));
        for dir in ["vectors", "tokens", "tokens.cellar-old"] {
            std::fs::create_dir_all(from.join(dir)).unwrap();
        }
        for (file, text) in [
            ("index.json", "{}"),
            (LOCK_FILE, ""),
            ("vectors/vectors.bin", "v"),
            ("tokens/tokens.json", "t"),
            ("bm25.bin", "b"),
        ] {
            std::fs::write(from.join(file), text).unwrap();
        }
        scratch_copy(&from, &to).unwrap();
        assert!(to.join("vectors/vectors.bin").exists() && to.join("bm25.bin").exists());
        assert!(
            !to.join(LOCK_FILE).exists()
                && !to.join("tokens").exists()
                && !to.join("tokens.cellar-old").exists()
        );
        // The config is the copy's own: writing it leaves the source's as it was.
        std::fs::write(to.join("index.json"), "{\"changed\": 1}").unwrap();
        assert_eq!(std::fs::read_to_string(from.join("index.json")).unwrap(), "{}");
        // Run again over the last run's copy; a folder that is not an index is refused.
        scratch_copy(&from, &to).unwrap();
        let other = tmp.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        assert!(scratch_copy(&from, &other).is_err());
    }

    #[test]
    fn fits_of_one_variant_are_summarised_together() {
        let row = |variant: &str, seed: Option<u64>, rerank: f64| Row {
            variant: variant.into(),
            seed,
            codec: "residual2".into(),
            dim: 384,
            bytes_per_token: 96,
            vectors_mib: 1.0,
            recode_secs: 1.0 + seed.unwrap_or(0) as f64,
            centroids: Some("own".into()),
            leaves: Some(2048),
            token_train_secs: None,
            token_stage_secs: None,
            token_error: seed.map(|s| 0.05 + 0.01 * s as f64),
            ndcg_rerank: rerank,
            ndcg_hybrid: 0.5,
            kib_read_rerank: 1.0,
            search_ms_rerank: 1.0,
        };
        assert_eq!(seed_summary(&[row("residual2", None, 0.7)]), "");
        let rows = [
            row("f16", None, 0.9),
            row("residual2", Some(1), 0.70),
            row("residual2", Some(2), 0.72),
            row("pca128-residual2", Some(1), 0.60),
        ];
        let md = seed_summary(&rows);
        assert!(
            md.contains("| residual2 | own | 2048 | 2 | 0.06500 [0.06000, 0.07000] | 0.7100 [0.7000, 0.7200] (-0.1900) | 0.5000 [0.5000, 0.5000] (+0.0000) | 2.00–3.00 | – |"),
            "{md}"
        );
        assert!(
            md.contains("| pca128-residual2 | own | 2048 | 1 | 0.06000 [0.06000, 0.06000] | 0.6000 [0.6000, 0.6000] (-0.3000) |"),
            "{md}"
        );
        assert!(!md.contains("| f16 "), "{md}");
        // Token-stage fits say so, with their leaves and the stage's training time.
        let mut shared = row("residual2", Some(1), 0.71);
        (shared.centroids, shared.leaves, shared.token_train_secs) =
            (Some("token stage".into()), Some(4096), Some(1.5));
        assert_eq!(centroids_label(&shared).unwrap(), "token stage 4096");
        let md = seed_summary(&[shared]);
        assert!(
            md.contains("| residual2 | token stage | 4096 | 1 |") && md.ends_with("| 2.00 | 1.50 |\n"),
            "{md}"
        );
    }
}
