//! `Index.evaluate`: the real search pipeline over judged queries, scored against qrels with
//! the same code (and trec_eval semantics) as `cellar eval`.

use std::collections::HashSet;

use cellar_core::{CellarError, Result};
use cellar_search::corpus::{Qrels, Query};
use cellar_search::eval::{evaluate_row, judged_queries, prepare, with_query, RowResult, RowSpec};
use cellar_search::query::PreparedQuery;
use cellar_search::{Index, SearchRequest};

/// Scores `options` over the queries of `queries` that have judgments in `qrels`. `ids` maps
/// internal document ids to collection ids.
pub fn evaluate(
    index: &Index,
    queries: &[Query],
    qrels: &Qrels,
    ids: &[String],
    request: SearchRequest,
) -> Result<RowResult> {
    check_unique(queries)?;
    let judged = judged_queries(queries, qrels);
    if judged.is_empty() {
        return Err(CellarError::InvalidInput(format!(
            "none of the {} queries has judgments in qrels (query ids must match qrels keys)",
            queries.len()
        )));
    }
    // Resolve first, so bad parameters fail before any query is encoded.
    let params = index.params(&request)?;
    let prepared = judged
        .iter()
        .map(|q| prepare(index, &q.text, params.mode).map_err(|e| with_query(e, &q.id)))
        .collect::<Result<Vec<PreparedQuery>>>()?;
    let spec = RowSpec { label: params.mode.name().to_string(), request };
    evaluate_row(index, &judged, &prepared, qrels, ids, &spec)
}

fn check_unique(queries: &[Query]) -> Result<()> {
    let mut seen = HashSet::new();
    match queries.iter().find(|q| !seen.insert(q.id.as_str())) {
        Some(q) => Err(CellarError::InvalidInput(format!("query id {:?} appears more than once", q.id))),
        None => Ok(()),
    }
}
