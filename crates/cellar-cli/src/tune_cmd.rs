//! `cellar tune`: sweeps alpha and rerank_k on a development split and saves the cheapest pair
//! within `--epsilon` of the best as the index's search defaults (with `--p95-ms X`, the best
//! whose measured P95 is within X); where hybrid joins a token stage, its first-stage depths
//! too (BM25's candidates and the stage's joined); the token stage's nprobe and depth, where the
//! index has one. The test split is refused. With `--query-vectors` the queries' own vectors are
//! ranked (an index without a model tunes too).

use std::path::PathBuf;

use cellar_core::{CellarError, Result};
use cellar_search::progress;
use cellar_search::{tune, Index, OpenOptions};
use clap::Args;

use crate::eval_cmd::JudgedQueries;

#[derive(Args)]
pub struct TuneArgs {
    #[arg(long)]
    pub index: PathBuf,
    /// BEIR folder with queries.jsonl and qrels/<split>.tsv.
    #[arg(long)]
    pub data: PathBuf,
    /// Development split to tune on ("test" only with --cv).
    #[arg(long, default_value = "train")]
    pub split: String,
    /// K-fold cross-validation, for collections whose only judgments are the test split: each
    /// fold is ranked with the choice made on the others and the estimate is printed (and kept
    /// in index.json) as a cross-validated figure, never a held-out one. The saved defaults are
    /// the choice on every query.
    #[arg(long, value_name = "K")]
    pub cv: Option<usize>,
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Print the sweep without saving the result.
    #[arg(long)]
    pub dry_run: bool,
    /// nDCG@10 the choice may give up against the sweep's best to read fewer records: the
    /// smallest rerank_k within it is kept (0: the best point, whatever it costs).
    #[arg(long, default_value_t = tune::DEFAULT_EPSILON)]
    pub epsilon: f64,
    /// Keep the best quality whose P95 stays within this many milliseconds: each setting's P95
    /// over the split's queries, encoding included, one query at a time on this machine (run it
    /// where you serve). Without it, the cheapest setting within --epsilon of the best is kept.
    #[arg(long, value_name = "MS")]
    pub p95_ms: Option<f64>,
    #[command(flatten)]
    pub judged: JudgedQueries,
}

pub fn run(args: TuneArgs) -> Result<()> {
    if args.split == "test" && args.cv.is_none() {
        return Err(CellarError::InvalidInput(
            "refusing to tune on the test split: tune on a development split (e.g. train) and report on test, or cross-validate on it with --cv 5"
                .into(),
        ));
    }
    let mut index = Index::open(&args.index, OpenOptions { model_dir: args.model, ..Default::default() })?;
    let (qrels, queries, vectors) = args.judged.load(&args.data, &args.split)?;
    let bar = progress::bar(queries.len() as u64, "queries");
    let report = tune::tune(
        &index,
        &queries,
        &qrels,
        &format!("{}/qrels/{}.tsv", args.data.display(), args.split),
        tune::TuneOptions {
            epsilon: args.epsilon,
            cv: args.cv,
            p95_limit_ms: args.p95_ms,
            query_vectors: vectors.as_deref(),
        },
        &bar,
    )?;
    print_sweep(&report, &args.split);
    let (best, top) = (&report.best, &report.top);
    println!(
        "best on {} ({} queries): fusion {}, alpha {:.2}, rerank_k {}{} -> nDCG@10 {:.4}",
        args.split,
        queries.len(),
        top.fusion,
        top.alpha,
        top.rerank_k,
        depths(&report, top),
        top.metrics.ndcg_at_10
    );
    if report.p95_limit_ms.is_none() {
        println!(
            "chosen (smallest rerank_k within epsilon {} of the best): fusion {}, alpha {:.2}, rerank_k {}{} -> nDCG@10 {:.4}",
            report.epsilon,
            best.fusion,
            best.alpha,
            best.rerank_k,
            depths(&report, best),
            best.metrics.ndcg_at_10
        );
    }
    if let Some(cv) = &report.cv {
        println!(
            "{}-fold cross-validated nDCG@10 of this choice on {} (each fold ranked with the choice made on the others; not a held-out figure): {:.4}",
            cv.folds, args.split, cv.metrics.ndcg_at_10
        );
    }
    if let Some(limit) = report.p95_limit_ms {
        print_timed("rerank_k (hybrid)", &report.latency, args.split.as_str());
        println!(
            "chosen (best nDCG@10 with P95 within {limit} ms): fusion {}, alpha {:.2}, rerank_k {}{} -> nDCG@10 {:.4}",
            best.fusion,
            best.alpha,
            best.rerank_k,
            depths(&report, best),
            best.metrics.ndcg_at_10
        );
    }
    if let Some(tokens) = &report.tokens {
        print_timed("nprobe (dense, token stage)", &tokens.points, args.split.as_str());
        let rule = match report.p95_limit_ms {
            Some(limit) => format!("best nDCG@10 with P95 within {limit} ms"),
            None => format!("smallest nprobe within epsilon {} of the best", report.epsilon),
        };
        match &tokens.chosen {
            Some(chosen) => println!(
                "token stage chosen ({rule}): nprobe {} -> nDCG@10 {:.4}, P95 {:.1} ms",
                chosen.value, chosen.metrics.ndcg_at_10, chosen.p95_ms
            ),
            None => {
                println!("token stage: no nprobe keeps P95 within the bound; its default is left as it is")
            }
        }
    }
    if let Some(depth) = &report.token_depth {
        print_timed("depth (dense, token stage)", &depth.points, args.split.as_str());
        match &depth.chosen {
            Some(chosen) => println!(
                "token stage depth chosen: {} re-ranked -> nDCG@10 {:.4}, P95 {:.1} ms",
                chosen.value, chosen.metrics.ndcg_at_10, chosen.p95_ms
            ),
            None => {
                println!("token stage: no depth keeps P95 within the bound; its default is left as it is")
            }
        }
    }
    if !args.dry_run {
        let chosen = |t: &Option<cellar_search::tune::TokenTune>| {
            t.as_ref().and_then(|t| t.chosen.as_ref()).map(|c| c.value)
        };
        let (nprobe, depth) = (chosen(&report.tokens), chosen(&report.token_depth));
        if nprobe.is_some() || depth.is_some() || report.hybrid_candidates.is_some() {
            index.save_token_defaults(nprobe, depth, report.hybrid_candidates)?;
        }
        index.save_defaults(report.defaults)?;
        println!("saved as the defaults of {}", args.index.display());
    }
    Ok(())
}

/// The hybrid sweep as a table: the best fusion and alpha of each rerank_k (at each pair of
/// first-stage depths, where the sweep varied them).
fn print_sweep(report: &tune::TuneReport, split: &str) {
    let swept = report.hybrid_candidates.is_some();
    match swept {
        true => println!(
            "| BM25 candidates | token stage joined | rerank_k | best fusion | best alpha | nDCG@10 on {split} |\n|---|---|---|---|---|---|"
        ),
        false => println!("| rerank_k | best fusion | best alpha | nDCG@10 on {split} |\n|---|---|---|---|"),
    }
    for best in tune::best_of_each_setting(&report.points) {
        let row = format!(
            "{} | {} | {:.2} | {:.4} |",
            best.rerank_k, best.fusion, best.alpha, best.metrics.ndcg_at_10
        );
        match swept {
            true => println!("| {} | {} | {row}", best.depth.candidates, best.depth.joined),
            false => println!("| {row}"),
        }
    }
}

/// `point`'s first-stage depths where the sweep varied them.
fn depths(report: &tune::TuneReport, point: &tune::TunePoint) -> String {
    match report.hybrid_candidates {
        Some(_) => format!(
            " over BM25's {} candidates joined by the token stage's {}",
            point.depth.candidates, point.depth.joined
        ),
        None => String::new(),
    }
}

/// A timed sweep as a table: the value, nDCG@10, P50 and P95 (and a hybrid setting's
/// first-stage depths).
fn print_timed(what: &str, points: &[tune::TimedPoint], split: &str) {
    println!("| {what} | nDCG@10 on {split} | P50 ms | P95 ms |\n|---|---|---|---|");
    for p in points {
        let depths =
            p.hybrid.map_or(String::new(), |d| format!(" (BM25 {}, joined {})", d.candidates, d.joined));
        println!("| {}{depths} | {:.4} | {:.1} | {:.1} |", p.value, p.metrics.ndcg_at_10, p.p50_ms, p.p95_ms);
    }
}
