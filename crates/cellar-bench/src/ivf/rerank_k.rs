//! Quality against rerank_k: nDCG@10 and Recall@100 of each mode as only the best `rerank_k` of
//! its first-stage candidates are re-ranked, divided by the same with every candidate re-ranked
//! (ESPN's figure 5).

use std::fmt::Write as _;

use cellar_core::Result;
use cellar_search::eval::{evaluate_row, RowSpec, EVAL_DEPTH};
use cellar_search::{Mode, SearchRequest};
use clap::Args;
use serde::Serialize;

use super::common::{parse_list, write_outputs, QueryArgs};

#[derive(Args)]
pub struct RerankKArgs {
    #[command(flatten)]
    pub queries: QueryArgs,
    #[arg(long, default_value = "dense,rerank,hybrid")]
    pub modes: String,
    /// rerank_k values; the largest is the "full re-ranking" the others are divided by.
    #[arg(long, default_value = "8,16,32,64,128,256,512,1000")]
    pub rerank_k: String,
    /// First-stage depth of every mode.
    #[arg(long, default_value_t = 1000)]
    pub candidates: usize,
    /// IVF modes: clusters probed (default: the IVF's).
    #[arg(long)]
    pub nprobe: Option<usize>,
    /// IVF modes: rescore the shortlist with full vectors (default: the IVF's), true or false.
    #[arg(long)]
    pub rescore: Option<bool>,
    /// Hybrid: IVF candidates joined to BM25's (default: the IVF's).
    #[arg(long)]
    pub hybrid_candidates: Option<usize>,
}

#[derive(Serialize)]
struct Row {
    mode: Mode,
    rerank_k: usize,
    ndcg_at_10: f64,
    recall_at_100: f64,
    ndcg_vs_full: f64,
    recall_vs_full: f64,
    mean_search_ms: f64,
    kib_read_per_query: f64,
}

pub fn run(args: RerankKArgs) -> Result<()> {
    let w = args.queries.load()?;
    let modes: Vec<Mode> = args.modes.split(',').map(|m| m.trim().parse()).collect::<Result<_>>()?;
    let mut ks = parse_list::<usize>(&args.rerank_k, "rerank-k", |k| k >= 1)?;
    ks.sort_unstable();
    let full = *ks.last().expect("parse_list returns a non-empty list");
    let mut rows = Vec::new();
    for mode in modes {
        let first = rows.len();
        for &k in &ks {
            let request = SearchRequest {
                k: Some(EVAL_DEPTH),
                mode: Some(mode),
                candidates: Some(args.candidates),
                rerank_k: Some(k),
                nprobe: args.nprobe,
                rescore: args.rescore,
                hybrid_candidates: args.hybrid_candidates,
                ..SearchRequest::default()
            };
            let spec = RowSpec { label: format!("{mode} rerank_k={k}"), request };
            let r = evaluate_row(&w.index, &w.queries, &w.prepared, &w.qrels, &w.ids, &spec)?;
            rows.push(Row {
                mode,
                rerank_k: k,
                ndcg_at_10: r.metrics.ndcg_at_10,
                recall_at_100: r.metrics.recall_at_100,
                ndcg_vs_full: 0.0,
                recall_vs_full: 0.0,
                mean_search_ms: r.mean_search_ms,
                kib_read_per_query: r.mean_bytes_read / 1024.0,
            });
        }
        let (ndcg_full, recall_full) =
            rows.last().map(|r| (r.ndcg_at_10, r.recall_at_100)).unwrap_or((1.0, 1.0));
        for row in &mut rows[first..] {
            row.ndcg_vs_full = row.ndcg_at_10 / ndcg_full.max(1e-9);
            row.recall_vs_full = row.recall_at_100 / recall_full.max(1e-9);
        }
    }
    let setup = format!(
        "{}; first-stage depth {} in every mode; IVF: nprobe {}, rescore {}, hybrid IVF candidates {}; \"vs full\" divides by the same mode at rerank_k={full}; search time leaves out query encoding.",
        args.queries.describe(&w),
        args.candidates,
        args.nprobe.map_or("default".into(), |n| n.to_string()),
        args.rescore.map_or("default".into(), |r| r.to_string()),
        args.hybrid_candidates.map_or("default".into(), |n| n.to_string()),
    );
    write_outputs(&args.queries.out, &setup, &rows, &table(&rows))
}

fn table(rows: &[Row]) -> String {
    let mut md = String::from(
        "| mode | rerank_k | nDCG@10 | nDCG@10 vs full | R@100 | R@100 vs full | search ms | KiB read/query |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {:.4} | {:.3} | {:.4} | {:.3} | {:.2} | {:.0} |",
            r.mode,
            r.rerank_k,
            r.ndcg_at_10,
            r.ndcg_vs_full,
            r.recall_at_100,
            r.recall_vs_full,
            r.mean_search_ms,
            r.kib_read_per_query
        );
    }
    md
}
