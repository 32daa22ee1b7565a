//! `cellar-bench fusion` (issue 18.2): which hybrid fusion is safe without judgments. For each
//! collection (an index and its BEIR folder): BM25, dense and rerank alone, then every fusion
//! method of `cellar_search::fusion::Fusion` at fixed weights (what a user without qrels gets),
//! chosen by k-fold cross-validation on the test judgments (`cellar tune --cv`, an estimate,
//! never a held-out figure), tuned on a development split where the collection has one, and the
//! best weight on test itself (an optimistic ceiling, labelled so). Each fused row is compared
//! with the better of its two inputs (BM25, rerank); the summary gives every fixed setting's
//! worst shortfall over the collections, and the safest one. Also the truncation counts: queries
//! encoded in windows, query tokens cut, documents cut or windowed at build.

use std::fmt::Write as _;
use std::path::PathBuf;

use cellar_core::{CellarError, Result};
use cellar_search::config::LongDocs;
use cellar_search::corpus::BeirPaths;
use cellar_search::eval::{self, RowSpec};
use cellar_search::fusion::Fusion;
use cellar_search::metrics::Metrics;
use cellar_search::mode::Lexical;
use cellar_search::tune::{self, TunePoint};
use cellar_search::{progress, Index, Mode, OpenOptions};
use serde::Serialize;

use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;

#[derive(clap::Args)]
pub struct FusionArgs {
    /// One collection: `NAME=INDEX_DIR,BEIR_DIR` (repeat for each collection).
    #[arg(long = "collection", required = true, value_parser = parse_collection)]
    pub collections: Vec<CollectionArg>,
    /// Split reported on.
    #[arg(long, default_value = "test")]
    pub split: String,
    /// Development split tuned on where the collection has one (rows left out where not).
    #[arg(long, default_value = "train")]
    pub tune_split: String,
    /// Folds of the cross-validated rows.
    #[arg(long, default_value_t = 5)]
    pub cv: usize,
    /// Fixed first-stage weights every method is shown at.
    #[arg(long, value_delimiter = ',', default_value = "0.3,0.4,0.5")]
    pub alphas: Vec<f32>,
    /// Output path prefix: writes PREFIX.json and PREFIX.md.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Clone, Debug)]
pub struct CollectionArg {
    name: String,
    index: PathBuf,
    data: PathBuf,
}

fn parse_collection(text: &str) -> std::result::Result<CollectionArg, String> {
    let (name, paths) = text.split_once('=').ok_or("expected NAME=INDEX_DIR,BEIR_DIR")?;
    let (index, data) = paths.split_once(',').ok_or("expected NAME=INDEX_DIR,BEIR_DIR")?;
    if name.is_empty() || index.is_empty() || data.is_empty() {
        return Err("expected NAME=INDEX_DIR,BEIR_DIR".into());
    }
    Ok(CollectionArg { name: name.into(), index: index.into(), data: data.into() })
}

/// How a fused row's weights were set.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Setting {
    /// A fixed weight: what a user without judgments gets.
    Fixed,
    /// Chosen by k-fold cross-validation on the reported split.
    CrossValidated,
    /// Tuned on the development split.
    Tuned,
    /// The best weight on the reported split itself: a ceiling, not a result.
    TestOptimum,
}

#[derive(Serialize)]
struct Row {
    system: String,
    setting: Option<Setting>,
    fusion: Option<Fusion>,
    alpha: Option<f32>,
    rerank_k: Option<usize>,
    ndcg_at_10: f64,
    recall_at_100: f64,
    /// nDCG@10 less the better of BM25's and rerank's (fused rows).
    vs_better_input: Option<f64>,
}

#[derive(Serialize)]
struct Truncation {
    queries: usize,
    queries_windowed: usize,
    query_tokens_cut: usize,
    longest_query_tokens: usize,
    documents: u64,
    doc_max_tokens: usize,
    doc_overflow: String,
    /// `None`: an index built before long documents were counted.
    long_docs: Option<LongDocs>,
    /// Token vectors stored, and the bytes of the vector store.
    tokens: u64,
    vectors_bytes: u64,
}

#[derive(Serialize)]
struct CollectionReport {
    name: String,
    index: PathBuf,
    rows: Vec<Row>,
    truncation: Truncation,
}

#[derive(Serialize)]
struct Safety {
    fusion: Fusion,
    alpha: f32,
    /// Per collection, nDCG@10 less the better input.
    margins: Vec<(String, f64)>,
    worst: f64,
}

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    provenance: Provenance,
    split: String,
    cv_folds: usize,
    collections: Vec<CollectionReport>,
    safety: Vec<Safety>,
}

pub fn run(args: FusionArgs) -> Result<()> {
    if args.alphas.iter().any(|a| !(0.0..=1.0).contains(a)) {
        return Err(CellarError::invalid("--alphas: every weight within [0, 1]"));
    }
    let collections = args.collections.iter().map(|c| measure(c, &args)).collect::<Result<Vec<_>>>()?;
    let safety = safety(&collections, &args.alphas);
    let report = Report {
        provenance: Provenance::now(),
        split: args.split.clone(),
        cv_folds: args.cv,
        collections,
        safety,
    };
    let markdown = markdown(&report);
    write_report(&args.out, &report, &markdown)?;
    print!("{markdown}");
    Ok(())
}

fn measure(c: &CollectionArg, args: &FusionArgs) -> Result<CollectionReport> {
    let index = Index::open(&c.index, OpenOptions::default())?;
    let collection = BeirPaths::locate(&c.data)?;
    let qrels = collection.qrels(&args.split)?;
    let queries = eval::judged_queries(&collection.queries()?, &qrels);
    if queries.is_empty() {
        return Err(CellarError::invalid(format!("{}: no judged query in {}", c.name, c.data.display())));
    }
    let ids = eval::doc_ids(&index)?;
    let bar = progress::bar(queries.len() as u64, &format!("{} encode", c.name));
    let prepared = eval::prepare_all(&index, &queries, &bar)?;
    let mut rows = Vec::new();
    for (label, mode) in [
        ("BM25", Mode::Bm25),
        ("dense (pooled, exact)", Mode::DenseExact),
        ("rerank (MaxSim over BM25's candidates)", Mode::Rerank),
    ] {
        let mut spec = RowSpec::new(label, mode);
        if mode == Mode::Rerank {
            spec.request.rerank_k = Some(cellar_search::request::MAX_CANDIDATES);
        }
        let row = eval::evaluate_row(&index, &queries, &prepared, &qrels, &ids, &spec)?;
        rows.push(input_row(label, &row.metrics));
    }
    let better = rows[0].ndcg_at_10.max(rows[2].ndcg_at_10);
    if index.splade_config().is_some() {
        rows.extend(splade_rows(&index, &queries, &prepared, &qrels, &ids)?);
    }
    let stages = tune::stages(&index, &queries, &prepared)?;
    let depth = index.config().search.candidates;
    let test_points = tune::sweep(&stages, &qrels, &ids, &Fusion::ALL, depth);
    let tuning = match collection.qrels(&args.tune_split) {
        Ok(dev) => {
            let dev_queries = eval::judged_queries(&collection.queries()?, &dev);
            let bar = progress::bar(dev_queries.len() as u64, &format!("{} {}", c.name, args.tune_split));
            let dev_prepared = eval::prepare_all(&index, &dev_queries, &bar)?;
            let dev_stages = tune::stages(&index, &dev_queries, &dev_prepared)?;
            Some(tune::sweep(&dev_stages, &dev, &ids, &Fusion::ALL, depth))
        }
        Err(_) => None,
    };
    let mut fused = |setting: Setting, label: String, point: &TunePoint, metrics: Metrics| {
        rows.push(Row {
            system: label,
            setting: Some(setting),
            fusion: Some(point.fusion),
            alpha: Some(point.alpha),
            rerank_k: Some(point.rerank_k),
            ndcg_at_10: metrics.ndcg_at_10,
            recall_at_100: metrics.recall_at_100,
            vs_better_input: Some(metrics.ndcg_at_10 - better),
        });
    };
    for fusion in Fusion::ALL {
        for &alpha in &args.alphas {
            let point = find(&test_points, fusion, alpha, depth)?;
            fused(Setting::Fixed, format!("{fusion} α={alpha:.2} (fixed)"), point, point.metrics);
        }
    }
    let methods: Vec<(String, Vec<Fusion>)> = Fusion::ALL
        .iter()
        .map(|f| (f.to_string(), vec![*f]))
        .chain([("any method".to_string(), Fusion::ALL.to_vec())])
        .collect();
    for (name, fusions) in &methods {
        let estimate = tune::cross_validate(&stages, &qrels, &ids, fusions, depth, args.cv, 0.0)?;
        let on_all = restricted(&test_points, fusions);
        let (chosen, top) = tune::choose(&on_all, 0.0);
        let label = format!(
            "{name}, {}-fold CV on {} (estimate; the α shown is the choice on every query)",
            args.cv, args.split
        );
        fused(Setting::CrossValidated, label, chosen, estimate.metrics);
        if let Some(dev_points) = &tuning {
            let dev_points = restricted(dev_points, fusions);
            let (dev_choice, _) = tune::choose(&dev_points, 0.0);
            let on_test = find(&test_points, dev_choice.fusion, dev_choice.alpha, dev_choice.rerank_k)?;
            fused(Setting::Tuned, format!("{name}, tuned on {}", args.tune_split), on_test, on_test.metrics);
        }
        fused(
            Setting::TestOptimum,
            format!("{name}, best on {} itself (ceiling, not a result)", args.split),
            top,
            top.metrics,
        );
    }
    let truncation = Truncation {
        queries: stages.len(),
        queries_windowed: stages.iter().filter(|s| s.encoding.is_some_and(|e| e.windows > 1)).count(),
        query_tokens_cut: stages.iter().filter_map(|s| s.encoding).map(|e| e.tokens_cut).sum(),
        longest_query_tokens: stages.iter().filter_map(|s| s.encoding).map(|e| e.tokens).max().unwrap_or(0),
        documents: index.config().build.docs,
        doc_max_tokens: index.config().encoder.doc_max_tokens,
        doc_overflow: index.config().encoder.doc_overflow.to_string(),
        long_docs: index.config().build.long_docs,
        tokens: index.config().build.tokens,
        vectors_bytes: index.config().build.vectors_bytes,
    };
    Ok(CollectionReport { name: c.name.clone(), index: c.index.clone(), rows, truncation })
}

/// The SPLADE stage alone, feeding rerank, joined with BM25, and feeding the default hybrid
/// (BM25 candidates only, as the fused rows: the IVF's joined ones are not the question here).
fn splade_rows(
    index: &Index,
    queries: &[cellar_search::corpus::Query],
    prepared: &[cellar_search::query::PreparedQuery],
    qrels: &cellar_search::corpus::Qrels,
    ids: &[String],
) -> Result<Vec<Row>> {
    let d = &index.config().search;
    let hybrid = format!("hybrid {} α={:.2} over BM25 + SPLADE candidates", d.fusion, d.alpha);
    let specs = [
        ("SPLADE", Mode::Bm25, Lexical::Splade),
        ("BM25 + SPLADE (joined)", Mode::Bm25, Lexical::Both),
        ("rerank over SPLADE's candidates", Mode::Rerank, Lexical::Splade),
        ("rerank over BM25 + SPLADE candidates", Mode::Rerank, Lexical::Both),
        (hybrid.as_str(), Mode::Hybrid, Lexical::Both),
    ];
    specs
        .into_iter()
        .map(|(label, mode, lexical)| {
            let mut spec = RowSpec::new(label, mode);
            spec.request.lexical = Some(lexical);
            spec.request.hybrid_candidates = Some(0);
            if mode == Mode::Rerank {
                spec.request.rerank_k = Some(cellar_search::request::MAX_CANDIDATES);
            }
            let row = eval::evaluate_row(index, queries, prepared, qrels, ids, &spec)?;
            Ok(input_row(label, &row.metrics))
        })
        .collect()
}

fn input_row(label: &str, m: &Metrics) -> Row {
    Row {
        system: label.to_string(),
        setting: None,
        fusion: None,
        alpha: None,
        rerank_k: None,
        ndcg_at_10: m.ndcg_at_10,
        recall_at_100: m.recall_at_100,
        vs_better_input: None,
    }
}

/// The sweep's point of `fusion` at `alpha` (to the grid's 0.05) and `rerank_k`: fixed rows
/// re-rank every default candidate, so the index's `candidates` must be a point of the grid.
fn find(points: &[TunePoint], fusion: Fusion, alpha: f32, rerank_k: usize) -> Result<&TunePoint> {
    points
        .iter()
        .filter(|p| p.fusion == fusion && p.rerank_k == rerank_k)
        .min_by(|a, b| (a.alpha - alpha).abs().total_cmp(&(b.alpha - alpha).abs()))
        .ok_or_else(|| {
            CellarError::invalid(format!(
                "rerank_k {rerank_k} is not on the tuning grid {:?}: study an index whose default candidates are",
                tune::RERANK_K_GRID
            ))
        })
}

fn restricted(points: &[TunePoint], fusions: &[Fusion]) -> Vec<TunePoint> {
    points.iter().filter(|p| fusions.contains(&p.fusion)).cloned().collect()
}

/// Every fixed setting's margin over the better input on each collection, safest first.
fn safety(collections: &[CollectionReport], alphas: &[f32]) -> Vec<Safety> {
    let mut out: Vec<Safety> = Fusion::ALL
        .iter()
        .flat_map(|&fusion| alphas.iter().map(move |&alpha| (fusion, alpha)))
        .map(|(fusion, alpha)| {
            let margins: Vec<(String, f64)> = collections
                .iter()
                .filter_map(|c| {
                    let row = c.rows.iter().find(|r| {
                        r.setting == Some(Setting::Fixed)
                            && r.fusion == Some(fusion)
                            && r.alpha.is_some_and(|a| (a - alpha).abs() < 0.026)
                    })?;
                    Some((c.name.clone(), row.vs_better_input?))
                })
                .collect();
            let worst = margins.iter().map(|m| m.1).fold(f64::INFINITY, f64::min);
            Safety { fusion, alpha, margins, worst }
        })
        .collect();
    out.sort_by(|a, b| b.worst.total_cmp(&a.worst));
    out
}

fn markdown(r: &Report) -> String {
    let mut s = String::from("# Hybrid fusion without judgments: every method against its inputs\n\n");
    s.push_str(&r.provenance.markdown());
    let _ = writeln!(
        s,
        "\nReported on the `{}` split. Fused rows re-rank the index's default candidates (BM25's, joined by the \
         IVF's where the index says so) at its default rerank_k; \"vs better input\" is nDCG@10 less the better \
         of BM25 and rerank. Cross-validated rows are {}-fold estimates on the reported split (query i in fold \
         i mod {}), never held-out figures.\n",
        r.split, r.cv_folds, r.cv_folds
    );
    for c in &r.collections {
        let t = &c.truncation;
        let _ = writeln!(s, "## {}\n", c.name);
        let _ = writeln!(
            s,
            "Queries: {} judged, {} longer than the query window and encoded whole in windows (longest {} tokens), \
             {} query tokens cut. Documents: {}, limit {} tokens, `{}`: {}; {} token vectors stored, {:.1} MiB of \
             vectors.\n",
            t.queries,
            t.queries_windowed,
            t.longest_query_tokens,
            t.query_tokens_cut,
            t.documents,
            t.doc_max_tokens,
            t.doc_overflow,
            t.long_docs.map_or("long documents not counted (an index built before they were)".into(), |l| format!(
                "{} cut ({} tokens cut), {} windowed ({} windows)",
                l.cut, l.tokens_cut, l.windowed, l.windows
            )),
            t.tokens,
            t.vectors_bytes as f64 / (1 << 20) as f64
        );
        s.push_str("| system | fusion | α | rerank_k | nDCG@10 | R@100 | vs better input |\n|---|---|---|---|---|---|---|\n");
        for row in &c.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.3} | {:.3} | {} |",
                row.system,
                row.fusion.map_or("-".into(), |f| f.to_string()),
                row.alpha.map_or("-".into(), |a| format!("{a:.2}")),
                row.rerank_k.map_or("-".into(), |k| k.to_string()),
                row.ndcg_at_10,
                row.recall_at_100,
                row.vs_better_input.map_or("-".into(), |d| format!("{d:+.3}"))
            );
        }
        s.push('\n');
    }
    s.push_str("## Safety of each fixed setting (no judgments used)\n\n| fusion | α |");
    let names: Vec<&str> = r.collections.iter().map(|c| c.name.as_str()).collect();
    for n in &names {
        let _ = write!(s, " {n} |");
    }
    s.push_str(" worst |\n|---|---|");
    s.push_str(&"---|".repeat(names.len() + 1));
    s.push('\n');
    for row in &r.safety {
        let _ = write!(s, "| {} | {:.2} |", row.fusion, row.alpha);
        for (_, m) in &row.margins {
            let _ = write!(s, " {m:+.3} |");
        }
        let _ = writeln!(s, " {:+.3} |", row.worst);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collections_parse_and_bad_ones_are_refused() {
        let c = parse_collection("cisi=/i/cisi,/d/cisi").unwrap();
        assert_eq!(
            (c.name.as_str(), c.index.to_str(), c.data.to_str()),
            ("cisi", Some("/i/cisi"), Some("/d/cisi"))
        );
        for bad in ["cisi", "cisi=/i", "=/i,/d", "cisi=,/d"] {
            assert!(parse_collection(bad).is_err(), "{bad}");
        }
    }
}
