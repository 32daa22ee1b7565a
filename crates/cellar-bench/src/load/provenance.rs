//! The report's header: the provenance record (command line, when, where), the client, and the
//! settings every configuration shared.

use super::report::{ConfigResult, Report, Settings};
use super::LoadArgs;
use crate::harness::provenance::Provenance;

/// The report of a finished run over `n_queries` queries.
pub fn new_report(args: &LoadArgs, n_queries: usize, configurations: Vec<ConfigResult>) -> Report {
    let baseline = args.baseline.clone().unwrap_or_else(|| configurations[0].spec.name.clone());
    Report {
        provenance: Provenance::now(),
        client: "this process: a tokio runtime with 1 worker thread, one TCP connection per request \
                 (Connection: close); it shares the machine's cores with the server"
            .into(),
        settings: settings(args, n_queries),
        baseline,
        configurations,
    }
}

fn settings(args: &LoadArgs, n_queries: usize) -> Settings {
    Settings {
        queries: args.queries.clone(),
        qrels: args.qrels.clone(),
        n_queries,
        qps: args.qps.clone(),
        warmup_s: args.warmup,
        duration_s: args.duration,
        drain_s: args.drain,
        timeout_s: args.timeout,
        max_in_flight: args.max_in_flight,
        stop_at_saturation: args.stop_at_saturation,
        mode: args.mode.clone(),
        k: args.k,
        rerank_k: args.rerank_k,
        alpha: args.alpha,
        seed: args.seed,
        evict_cache: args.evict_cache,
    }
}
