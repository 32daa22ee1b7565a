//! The queries the bench sends (with their qrels, when given) and the requests built from them:
//! one JSON body per query, per kind of configuration (query text only, or with the query
//! vectors of one index's model, encoded once here).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cellar_core::Result;
use cellar_search::corpus::{read_qrels, read_queries, Qrels, Query};
use cellar_search::embeddings::read_in_order;
use cellar_search::request::VectorDtype;
use cellar_search::{Index, Mode, OpenOptions, QueryVectorsIn};

use super::args::invalid;
use super::client::{self, Target};
use super::config::{ConfigSpec, Vectors};
use super::LoadArgs;

/// The queries in file order; with `--qrels`, only the judged ones, and the judgments.
pub struct QuerySet {
    pub queries: Vec<Query>,
    pub qrels: Option<Qrels>,
}

impl QuerySet {
    pub fn load(args: &LoadArgs) -> Result<Self> {
        let mut queries = read_queries(&args.queries)?;
        let qrels = args.qrels.as_deref().map(read_qrels).transpose()?;
        if let Some(judged) = &qrels {
            queries.retain(|q| judged.contains_key(&q.id));
        }
        if queries.is_empty() {
            return Err(invalid(format!("no queries to send from {}", args.queries.display())));
        }
        Ok(QuerySet { queries, qrels })
    }
}

/// Query vectors as the server takes them: one row per token, and the pooled vector.
type QueryVectors = (Vec<Vec<f32>>, Vec<f32>);

/// Encodes every query once with the index's model (vectors=client).
fn encode_queries(index_dir: &Path, queries: &[Query]) -> Result<Vec<QueryVectors>> {
    eprintln!(
        "cellar-bench load: encoding {} queries with the model of {}",
        queries.len(),
        index_dir.display()
    );
    let index = Index::open(index_dir, OpenOptions::default())?;
    let encoder = index.encoder()?;
    queries
        .iter()
        .map(|q| {
            let e = encoder.encode_query(&q.text)?;
            let dim = e.tokens.len() / e.n_tokens.max(1);
            Ok((e.tokens.chunks(dim.max(1)).map(<[f32]>::to_vec).collect(), e.pooled))
        })
        .collect()
}

/// Every query's vectors from an embeddings folder of queries (`--query-vectors`), in query
/// order; a query missing there is an error naming it.
fn read_query_vectors(folder: &Path, queries: &[Query]) -> Result<Vec<QueryVectors>> {
    let (dim, given) = read_in_order(folder, queries.iter().map(|q| q.id.as_str()))?;
    Ok(given
        .into_iter()
        .map(|(tokens, pooled)| (tokens.chunks(dim).map(<[f32]>::to_vec).collect(), pooled))
        .collect())
}

/// The JSON body of one search request.
fn search_body(
    args: &LoadArgs,
    text: &str,
    vectors: Option<&QueryVectors>,
    form: Vectors,
    extra: &[(String, String)],
) -> Vec<u8> {
    let mut body = serde_json::json!({
        "query": text,
        "k": args.k,
        "mode": args.mode,
        "include_text": false,
    });
    if let Some(r) = args.rerank_k {
        body["rerank_k"] = r.into();
    }
    if let Some(a) = args.alpha {
        body["alpha"] = f64::from(a).into();
    }
    for (key, literal) in extra {
        body[key.as_str()] =
            serde_json::from_str(literal).expect("checked when the configuration was parsed");
    }
    if let Some((tokens, pooled)) = vectors {
        body["query_vectors"] = if form == Vectors::Compact {
            let compact = QueryVectorsIn::compact(&tokens.concat(), Some(pooled), VectorDtype::F32);
            serde_json::to_value(compact).expect("vectors serialise")
        } else {
            serde_json::json!({ "tokens": tokens, "pooled": pooled })
        };
    }
    serde_json::to_vec(&body).expect("a JSON value serialises")
}

/// Which bodies a configuration sends: the index whose model encodes the queries (vectors=client)
/// or none (the server encodes, or bm25 needs no vectors).
type BodyKey = (Option<PathBuf>, Vectors, Vec<(String, String)>);

/// Request bodies per kind of configuration, in query order: encoded once, shared by the
/// configurations of the same kind.
pub struct RequestBodies {
    by_key: HashMap<BodyKey, Vec<Vec<u8>>>,
    needs_vectors: bool,
}

impl RequestBodies {
    pub fn build(args: &LoadArgs, configs: &[ConfigSpec], queries: &[Query]) -> Result<Self> {
        let mut bodies =
            RequestBodies { by_key: HashMap::new(), needs_vectors: args.mode != Mode::Bm25.name() };
        for c in configs {
            let key = bodies.key(c);
            if bodies.by_key.contains_key(&key) {
                continue;
            }
            let encoded = match (&args.query_vectors, key.0.as_deref()) {
                (Some(folder), Some(_)) => Some(read_query_vectors(folder, queries)?),
                (None, Some(dir)) => Some(encode_queries(dir, queries)?),
                (_, None) => None,
            };
            let list = queries
                .iter()
                .enumerate()
                .map(|(i, q)| search_body(args, &q.text, encoded.as_ref().map(|e| &e[i]), key.1, &key.2))
                .collect();
            bodies.by_key.insert(key, list);
        }
        Ok(bodies)
    }

    fn key(&self, spec: &ConfigSpec) -> BodyKey {
        let vectors = if self.needs_vectors { spec.vectors } else { Vectors::Server };
        (if vectors.by_client() { spec.index.clone() } else { None }, vectors, spec.request.clone())
    }

    /// The bodies of a configuration given to `build`.
    pub fn for_config(&self, spec: &ConfigSpec) -> &[Vec<u8>] {
        &self.by_key[&self.key(spec)]
    }
}

/// Complete HTTP requests for one server, in query order.
pub fn http_requests(bodies: &[Vec<u8>], target: &Target) -> Vec<Arc<[u8]>> {
    bodies
        .iter()
        .map(|b| Arc::from(client::build_request("POST", "/v1/search", &target.host_header, Some(b))))
        .collect()
}
