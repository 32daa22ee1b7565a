//! `cellar search`: answers one query and prints the hits, stage timings and bytes read.

use std::path::PathBuf;

use cellar_core::io::ReaderKind;
use cellar_core::{CellarError, Result};
use cellar_search::{Index, OpenOptions, SearchRequest, SearchResponse};
use clap::Args;

#[derive(Args)]
pub struct SearchArgs {
    /// The search: its flags are the fields of `SearchRequest`, the body of `POST /v1/search`.
    #[command(flatten)]
    pub request: SearchRequest,
    #[arg(long)]
    pub index: PathBuf,
    /// Token-vector reader: ram, mmap or direct.
    #[arg(long, default_value = "mmap")]
    pub reader: ReaderKind,
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Print the whole response as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SearchArgs) -> Result<()> {
    let options = OpenOptions { reader: args.reader, model_dir: args.model.clone(), ..Default::default() };
    let index = Index::open(&args.index, options)?;
    let response = index.search(args.request)?;
    if args.json {
        let json =
            serde_json::to_string_pretty(&response).map_err(|e| CellarError::InvalidInput(e.to_string()))?;
        println!("{json}");
    } else {
        print_text(&response);
    }
    Ok(())
}

fn print_text(response: &SearchResponse) {
    for (rank, hit) in response.hits.iter().enumerate() {
        let title = if hit.title.is_empty() { &hit.text } else { &hit.title };
        let title: String = title.chars().take(90).collect();
        println!("{:>3}. {:>8.4}  {:<12} {}", rank + 1, hit.score, hit.id, title);
    }
    let t = &response.timings;
    let p = &response.params;
    println!(
        "mode {} (alpha {:.2}, {} candidates, {} re-ranked) | encode {:.1} ms, first stage {:.1} ms, read {:.1} ms ({:.1} under the encoding), maxsim {:.1} ms, fuse {:.2} ms, text {:.1} ms, total {:.1} ms | {} reads, {} KiB",
        p.mode,
        p.alpha,
        response.candidates,
        response.reranked,
        t.encode_ms,
        t.first_stage_ms,
        t.read_ms,
        t.read_hidden_ms,
        t.maxsim_ms,
        t.fuse_ms,
        t.text_ms,
        t.total_ms,
        response.io.read_calls,
        response.io.bytes_read / 1024
    );
    if let Some(ivf) = &response.ivf {
        println!(
            "ivf: {} clusters, {} codes, {} rescored, probe {:.2} ms, rescore {:.2} ms, {} KiB read",
            ivf.clusters,
            ivf.codes,
            ivf.rescored,
            ivf.probe_ms,
            ivf.rescore_ms,
            ivf.bytes_read / 1024
        );
    }
    if let Some(p) = &response.prefetch {
        println!(
            "prefetch after {} clusters: {} records, hit rate {:.2} ({} of {}), {} KiB prefetched, {} KiB wasted, {} misses read, waited {:.2} ms",
            p.after_clusters,
            p.prefetched,
            p.hit_rate,
            p.hits,
            p.needed,
            p.bytes_prefetched / 1024,
            p.bytes_wasted / 1024,
            p.misses_read,
            p.wait_ms
        );
    }
}
