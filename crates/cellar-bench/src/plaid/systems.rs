//! The two systems behind one trait: Cellar's `dense` mode through `Index::search` with the
//! queries' vectors, and next-plaid's `MmapIndex::search` (only with the `next-plaid` feature),
//! plus next-plaid's build from the Cellar store's decoded documents.

use std::path::Path;

use cellar_core::Result;
use cellar_search::{Index, Mode, OpenOptions, QueryVectorsIn, SearchRequest};
use serde_json::Value;

use cellar_search::request::VectorDtype;

/// A search engine over the same documents (internal ids `0..n`, the Cellar store's order).
pub trait System: Sync {
    /// The top `k` internal ids of query `q` (an index into the loaded queries).
    fn search(&self, q: usize, k: usize) -> Result<Vec<u32>>;
    /// The parameters it searches with, for the report.
    fn params(&self) -> Value;
}

/// Cellar's `dense` mode at the index's stored defaults (the token stage when the index has
/// one, else the pooled IVF), the caller's vectors, no texts in the answer.
pub struct Cellar {
    index: Index,
    texts: Vec<String>,
    /// Each query's token vectors and pooled vector, put in a request's compact form when it
    /// is sent (as a client would), not held twice.
    vectors: Vec<(Vec<f32>, Vec<f32>)>,
}

impl Cellar {
    pub fn open(
        dir: &Path,
        options: OpenOptions,
        texts: Vec<String>,
        vectors: Vec<(Vec<f32>, Vec<f32>)>,
    ) -> Result<Cellar> {
        let index = Index::open(dir, options)?;
        Ok(Cellar { index, texts, vectors })
    }

    fn request(&self, q: usize, k: usize) -> SearchRequest {
        let mut request = SearchRequest::new(self.texts[q].clone(), Mode::Dense);
        request.k = Some(k);
        request.include_text = Some(false);
        let (tokens, pooled) = &self.vectors[q];
        request.query_vectors = Some(QueryVectorsIn::compact(tokens, Some(pooled), VectorDtype::F32));
        request
    }
}

impl System for Cellar {
    fn search(&self, q: usize, k: usize) -> Result<Vec<u32>> {
        Ok(self.index.search(self.request(q, k))?.hits.iter().map(|h| h.internal_id).collect())
    }

    fn params(&self) -> Value {
        let first_stage = if self.index.dir().join("tokens").join("tokens.json").exists() {
            "token stage (tokens/)"
        } else if self.index.dir().join("ivf").exists() {
            "pooled IVF (ivf/)"
        } else {
            "none"
        };
        let resolved = self.index.params(&self.request(0, 100)).ok();
        serde_json::json!({
            "mode": "dense",
            "reader": self.index.reader_kind().name(),
            "first_stage": first_stage,
            "resolved": resolved.and_then(|p| serde_json::to_value(p).ok()),
        })
    }
}

#[cfg(not(feature = "next-plaid"))]
pub fn open_plaid(_dir: &Path, _given: &[(Vec<f32>, Vec<f32>)], _dim: usize) -> Result<Box<dyn System>> {
    Err(not_built())
}

#[cfg(not(feature = "next-plaid"))]
pub fn build_plaid(_index: &Path, _plaid: &Path, _nbits: usize, _out: &Path) -> Result<()> {
    Err(not_built())
}

#[cfg(not(feature = "next-plaid"))]
fn not_built() -> cellar_core::CellarError {
    cellar_core::CellarError::invalid(
        "this cellar-bench was built without next-plaid: cargo build --release -p cellar-bench --features next-plaid",
    )
}

#[cfg(feature = "next-plaid")]
pub use plaid::{build_plaid, open_plaid};

#[cfg(feature = "next-plaid")]
mod plaid {
    use std::path::Path;
    use std::time::Instant;

    use cellar_core::io::{ReaderKind, ReaderOptions};
    use cellar_core::store::VectorStore;
    use cellar_core::{CellarError, DocId, IoContext, Result};
    use cellar_search::names::VECTORS_DIR;
    use ndarray::Array2;
    use next_plaid::{IndexConfig, MmapIndex, SearchParameters};
    use serde_json::Value;

    use super::System;
    use crate::plaid::{cpu_secs, dir_bytes, peak_rss_bytes};

    fn plaid_error(e: next_plaid::Error) -> CellarError {
        CellarError::internal(format!("next-plaid: {e}"))
    }

    /// next-plaid's index and the queries as it takes them (`[tokens, dim]` f32 matrices).
    pub struct Plaid {
        index: MmapIndex,
        queries: Vec<Array2<f32>>,
        params: SearchParameters,
    }

    impl System for Plaid {
        fn search(&self, q: usize, k: usize) -> Result<Vec<u32>> {
            let params = SearchParameters { top_k: k, ..self.params.clone() };
            let result = self.index.search(&self.queries[q], &params, None).map_err(plaid_error)?;
            Ok(result.passage_ids.iter().map(|&id| id as u32).collect())
        }

        fn params(&self) -> Value {
            serde_json::json!({
                "search": serde_json::to_value(&self.params).ok(),
                "index": serde_json::to_value(&self.index.metadata).ok(),
            })
        }
    }

    /// next-plaid's index at `dir`, searched at its defaults (`SearchParameters::default()`,
    /// the values its README recommends) but for `top_k`, which each call sets.
    pub fn open_plaid(dir: &Path, given: &[(Vec<f32>, Vec<f32>)], dim: usize) -> Result<Box<dyn System>> {
        let index = MmapIndex::load(&dir.to_string_lossy()).map_err(plaid_error)?;
        let queries = given
            .iter()
            .map(|(tokens, _)| {
                Array2::from_shape_vec((tokens.len() / dim, dim), tokens.clone())
                    .map_err(|e| CellarError::invalid(format!("query vectors: {e}")))
            })
            .collect::<Result<_>>()?;
        Ok(Box::new(Plaid { index, queries, params: SearchParameters::default() }))
    }

    /// Decodes every document of the Cellar store at `index` (in internal-id order: next-plaid's
    /// ids are the same), builds next-plaid's index at `plaid` with `IndexConfig { nbits,
    /// ..Default::default() }` (k-means centroids by its own heuristic, its default seed), and
    /// writes the figures to `out`. The build's CPU is measured around next-plaid's call alone;
    /// the peak RSS is the whole process's, decoded input included (next-plaid takes the
    /// collection as f32 matrices in RAM).
    pub fn build_plaid(index: &Path, plaid: &Path, nbits: usize, out: &Path) -> Result<()> {
        if plaid.exists() {
            return Err(CellarError::invalid(format!("{} exists: give a new folder", plaid.display())));
        }
        let started = Instant::now();
        let store = VectorStore::open(&index.join(VECTORS_DIR), &ReaderOptions::new(ReaderKind::Mmap))?;
        let dim = store.dim();
        let mut docs = Vec::with_capacity(store.len());
        let mut tokens = 0usize;
        for first in (0..store.len()).step_by(4096) {
            let ids: Vec<DocId> = (first..(first + 4096).min(store.len())).map(|i| DocId(i as u32)).collect();
            let batch = store.read_batch(&ids)?;
            for i in 0..ids.len() {
                let mut values = Vec::new();
                store.codec().decode(batch.record(i).tokens, &mut values);
                let rows = values.len() / dim;
                tokens += rows;
                docs.push(
                    Array2::from_shape_vec((rows, dim), values)
                        .map_err(|e| CellarError::internal(e.to_string()))?,
                );
            }
        }
        let decode_secs = started.elapsed().as_secs_f64();
        eprintln!("decoded {} documents ({tokens} tokens of {dim} dims) in {decode_secs:.1} s", docs.len());
        let config = IndexConfig { nbits, ..Default::default() };
        let (user0, sys0) = cpu_secs();
        let built = Instant::now();
        let created =
            MmapIndex::create_with_kmeans(&docs, &plaid.to_string_lossy(), &config).map_err(plaid_error)?;
        let build_secs = built.elapsed().as_secs_f64();
        let (user1, sys1) = cpu_secs();
        let report = serde_json::json!({
            "system": "next-plaid",
            "version": "1.8.5",
            "documents": docs.len(),
            "tokens": tokens,
            "dim": dim,
            "decode_secs": decode_secs,
            "decoded_input_bytes": tokens * dim * 4,
            "build_wall_secs": build_secs,
            "build_cpu_user_secs": user1 - user0,
            "build_cpu_sys_secs": sys1 - sys0,
            "peak_rss_bytes": peak_rss_bytes(),
            "index_bytes": dir_bytes(plaid)?,
            "config": serde_json::to_value(&config).ok(),
            "metadata": serde_json::to_value(&created.metadata).ok(),
        });
        std::fs::write(out, serde_json::to_vec_pretty(&report).expect("plain values")).at(out)?;
        println!("{}", serde_json::to_string_pretty(&report).expect("plain values"));
        Ok(())
    }
}
