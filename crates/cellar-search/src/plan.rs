//! Check once, then trust: [`Index::plan`] turns a [`SearchRequest`] into a [`Plan`] after
//! every user check (mode, k, alpha, IVF settings, the query's length, the shape and values of
//! supplied vectors, the vectors each mode needs). Execution ([`Index::execute`]) never checks a
//! user value again, so a user error is refused before a server queues the search, never after.

use std::sync::Arc;
use std::time::Instant;

use cellar_core::stats::ms_since;
use cellar_core::{CellarError, DocId, Result};

use crate::bm25::no_metadata_field;
use crate::filter::{Allowed, Filter};
use crate::index::Index;
use crate::mode::Mode;
use crate::params::SearchParams;
use crate::query::{PreparedQuery, QueryEncoding, QueryVectors};
use crate::rank::{ranks_matches_exactly, EarlyReads};
use crate::request::{
    base64_decode, QueryVectorsIn, SearchRequest, VectorDtype, MAX_QUERY_BYTES, MAX_QUERY_VECTORS,
};
use crate::search::SearchResponse;
use crate::vectors::mean_normalized;

/// A search checked against one index, ready to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    params: SearchParams,
    text: String,
    /// The caller's vectors, flattened and checked; `None`: the text is encoded.
    vectors: Option<QueryVectors>,
    include_text: bool,
    filter: Option<Filter>,
    require_terms: Option<String>,
}

impl Plan {
    /// The resolved parameters the search runs with.
    pub fn params(&self) -> &SearchParams {
        &self.params
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn include_text(&self) -> bool {
        self.include_text
    }
}

impl Index {
    /// Every check of a request against this index; the [`Plan`] it returns needs no other.
    pub fn plan(&self, request: SearchRequest) -> Result<Plan> {
        if self.config.grouped {
            return Err(CellarError::invalid(
                "this index is grouped: a search is exact inside one group (name the group)",
            ));
        }
        let params = self.params(&request)?;
        let mode = params.mode;
        let dim = self.config.encoder.model_dim;
        let mut vectors = request
            .query_vectors
            .map(|v| flatten_owned(v, dim, "query_vectors", MAX_QUERY_VECTORS))
            .transpose()?;
        // A pooled vector left out is the normalised mean of the token vectors, as a document's
        // is; computed only for the searches that use one.
        if let Some(v) =
            vectors.as_mut().filter(|v| v.pooled.is_none() && v.n_tokens > 0 && needs_pooled(&params))
        {
            v.pooled = mean_normalized(&v.tokens, dim);
        }
        // The single-vector-first modes need no text when the caller sends the vectors.
        if vectors.is_none() || !(mode.is_single_vector_first() && request.query.is_empty()) {
            check_query(&request.query)?;
        }
        if let Some(vectors) = &vectors {
            check_vectors(vectors, &params)?;
        }
        if let Some(filter) = &request.filter {
            self.check_filter(filter, "filter")?;
        }
        if let Some(terms) = &request.require_terms {
            check_terms(terms)?;
        }
        Ok(Plan {
            params,
            text: request.query,
            vectors,
            include_text: request.include_text.unwrap_or(true),
            filter: request.filter,
            require_terms: request.require_terms,
        })
    }

    /// A filter's checks, and that this index stores metadata to filter on; `at` names it.
    pub(crate) fn check_filter(&self, filter: &Filter, at: &str) -> Result<()> {
        filter.check(at)?;
        if !self.bm25.has_metadata() {
            return Err(no_metadata_field(&self.dir));
        }
        Ok(())
    }

    /// The searchable documents `filter` matches, ascending (deleted ones left out).
    pub fn matching(&self, filter: &Filter) -> Result<Vec<DocId>> {
        self.check_filter(filter, "filter")?;
        let view = self.live_view();
        Ok(self.bm25.matching(filter)?.ids().filter(|id| !view.is_deleted(*id)).collect())
    }

    /// The documents `filter` matches that hold every term of `require_terms`, and how long
    /// finding them took (`None`: neither was given, every document is taken).
    pub(crate) fn evaluate(
        &self,
        filter: Option<&Filter>,
        require_terms: Option<&str>,
    ) -> Result<(Option<Arc<Allowed>>, f64)> {
        if filter.is_none() && require_terms.is_none() {
            return Ok((None, 0.0));
        }
        let start = Instant::now();
        let allowed = self.bm25.matching_all(filter, require_terms)?;
        Ok((Some(Arc::new(allowed)), ms_since(start)))
    }

    /// The query-independent half of [`Index::plan`]: the request's settings resolved against
    /// the index's defaults (and its IVF's) and checked. For callers that rank one prepared
    /// query many ways (evaluation, tuning, studies).
    pub fn params(&self, request: &SearchRequest) -> Result<SearchParams> {
        // The IVF's settings borrowed from the handle searches use, not copied per request.
        let ivf = self.current_ivf();
        let ivf = ivf.as_deref().map(crate::ivf::Ivf::config);
        let tokens = self.current_tokens();
        let tokens = tokens.as_deref().map(crate::tokens::TokenStage::config);
        SearchParams::resolve(request, &self.config.search, ivf, tokens, self.splade.is_some())
    }

    /// The plan's query as the kernels take it: its text encoded when the mode needs vectors
    /// and the caller sent none, the caller's vectors projected otherwise. Consumes the plan, so
    /// its text and vectors move into the query uncopied.
    pub fn prepare(&self, plan: Plan) -> Result<PreparedQuery> {
        let (allowed, filter_ms) = self.evaluate(plan.filter.as_ref(), plan.require_terms.as_deref())?;
        let mut query = self.prepare_vectors(plan)?;
        (query.allowed, query.filter_ms) = (allowed, filter_ms);
        Ok(query)
    }

    /// [`Index::prepare`] but for the filter.
    pub(crate) fn prepare_vectors(&self, plan: Plan) -> Result<PreparedQuery> {
        let Plan { params, text, vectors, .. } = plan;
        if let Some(vectors) = vectors {
            let tokens = self.project(vectors.tokens, vectors.n_tokens);
            return Ok(PreparedQuery {
                text,
                tokens: self.store.codec().prepare_query(&tokens),
                store_tokens: tokens,
                n_tokens: vectors.n_tokens,
                pooled: vectors.pooled.unwrap_or_default(),
                encode_ms: 0.0,
                allowed: None,
                filter_ms: 0.0,
                encoding: None,
            });
        }
        if !params.mode.needs_encoder() {
            return Ok(PreparedQuery {
                text,
                tokens: Vec::new(),
                store_tokens: Vec::new(),
                n_tokens: 0,
                pooled: Vec::new(),
                encode_ms: 0.0,
                allowed: None,
                filter_ms: 0.0,
                encoding: None,
            });
        }
        let start = Instant::now();
        let encoded = self.encoder()?.encode_query(&text)?;
        let encoding = Some(QueryEncoding::of(&encoded));
        let tokens = self.project(encoded.tokens, encoded.n_tokens);
        Ok(PreparedQuery {
            text,
            tokens: self.store.codec().prepare_query(&tokens),
            store_tokens: tokens,
            n_tokens: encoded.n_tokens,
            pooled: encoded.pooled,
            encode_ms: ms_since(start),
            allowed: None,
            filter_ms: 0.0,
            encoding,
        })
    }

    /// Runs a plan: prepares its query, ranks, and attaches each hit's id (and text).
    ///
    /// A text query that BM25 ranks first (rerank, hybrid) runs BM25 before it is encoded and
    /// reads the records of BM25's best `rerank_k` candidates on a helper thread while the
    /// encoder runs on this one: ESPN's early prefetch, with the encoder as the stage that hides
    /// the read. `timings.read_hidden_ms` says how much of the read it hid.
    pub fn execute(&self, plan: Plan) -> Result<SearchResponse> {
        let (params, include_text) = (plan.params, plan.include_text);
        let start = Instant::now();
        let (allowed, filter_ms) = self.evaluate(plan.filter.as_ref(), plan.require_terms.as_deref())?;
        let exact = allowed.as_deref().is_some_and(|a| ranks_matches_exactly(&params, a));
        if !reads_before_encoding(&plan) || exact {
            let mut query = self.prepare_vectors(plan)?;
            (query.allowed, query.filter_ms) = (allowed, filter_ms);
            return self.respond(&query, &params, include_text);
        }
        let bm25 = self.lexical_search(&plan.text, params.candidates, allowed.as_ref(), params.lexical)?;
        let bm25_ms = ms_since(start);
        let ids: Vec<DocId> = bm25.iter().take(params.rerank_k).map(|s| s.id).collect();
        let (mut ranking, encoding) = std::thread::scope(|scope| {
            // Nothing can be scored before the query is encoded: several chunks may wait.
            let reads = self.start_reads(scope, &ids, crate::reads::EARLY_AHEAD_BYTES)?;
            let mut query = self.prepare_vectors(plan)?;
            (query.allowed, query.filter_ms) = (allowed, filter_ms);
            let ranking = self.rank_with(&query, &params, Some(EarlyReads { bm25, bm25_ms, reads }))?;
            Ok::<_, CellarError>((ranking, query.encoding))
        })?;
        ranking.timings.total_ms = ms_since(start);
        self.answer(ranking, encoding, &params, include_text)
    }

    /// Plans and executes `request`.
    pub fn search(&self, request: SearchRequest) -> Result<SearchResponse> {
        self.execute(self.plan(request)?)
    }

    /// Token vectors of the model's space into the store's (PCA, when the index has one;
    /// otherwise they are returned as they came, uncopied).
    pub(crate) fn project(&self, tokens: Vec<f32>, n_tokens: usize) -> Vec<f32> {
        match &self.pca {
            Some(pca) => crate::vectors::project_tokens(pca, &tokens, n_tokens),
            None => tokens,
        }
    }
}

/// Whether `execute` runs BM25 first and reads its candidates while the text is encoded: a text
/// query (no caller vectors) of a mode that both ranks with BM25 and re-ranks with MaxSim.
fn reads_before_encoding(plan: &Plan) -> bool {
    let p = &plan.params;
    p.early_read && plan.vectors.is_none() && matches!(p.mode, Mode::Rerank | Mode::Hybrid) && p.rerank_k > 0
}

/// Checks a query's text: not empty, not over-long (an index's search and a group's).
pub fn check_query(text: &str) -> Result<()> {
    if text.trim().is_empty() {
        return Err(CellarError::InvalidInput("the query is empty".into()));
    }
    if text.len() > MAX_QUERY_BYTES {
        return Err(CellarError::InvalidInput(format!(
            "the query is {} bytes long; the limit is {MAX_QUERY_BYTES}",
            text.len()
        )));
    }
    Ok(())
}

/// `require_terms` is not empty and no longer than a query (an index's search and a group's).
pub(crate) fn check_terms(terms: &str) -> Result<()> {
    if terms.trim().is_empty() || terms.len() > MAX_QUERY_BYTES {
        return Err(CellarError::invalid(format!(
            "require_terms must hold 1 to {MAX_QUERY_BYTES} bytes of terms, got {}",
            terms.len()
        )));
    }
    Ok(())
}

/// Rows into one flat buffer, after checking their count (at most `max_rows`) and that each has
/// the model's dimension; `field` (`query_vectors`, `ops[3].add.vectors`) is what errors name.
/// The vectors are borrowed: a JSON pooled vector is copied ([`flatten_owned`] moves it).
pub fn flatten(vectors: &QueryVectorsIn, dim: usize, field: &str, max_rows: usize) -> Result<QueryVectors> {
    flatten_with(vectors, vectors.pooled.clone(), dim, field, max_rows)
}

/// [`flatten`] of vectors the caller gives up (an index's search, a write's document): the JSON
/// pooled vector moves into the result instead of being copied.
pub fn flatten_owned(
    mut vectors: QueryVectorsIn,
    dim: usize,
    field: &str,
    max_rows: usize,
) -> Result<QueryVectors> {
    let pooled = vectors.pooled.take();
    flatten_with(&vectors, pooled, dim, field, max_rows)
}

/// [`flatten`] with the JSON pooled vector (`vectors.pooled`) given apart, owned.
fn flatten_with(
    vectors: &QueryVectorsIn,
    pooled: Option<Vec<f32>>,
    dim: usize,
    field: &str,
    max_rows: usize,
) -> Result<QueryVectors> {
    let dtype = vectors.dtype.unwrap_or_default();
    let (tokens, n_tokens) = match &vectors.tokens_b64 {
        Some(_) if !vectors.tokens.is_empty() => {
            return Err(CellarError::invalid(format!("{field}: give tokens or tokens_b64, not both")))
        }
        Some(text) => {
            let values = decode_b64_values(text, dtype, &format!("{field}.tokens_b64"))?;
            // The same mistake as a JSON row of the wrong width, and the same answer (422
            // `wrong_dimension`); with no rows to measure, `received` is the values decoded.
            if !values.len().is_multiple_of(dim) {
                return Err(CellarError::WrongDimension { expected: dim, received: values.len() });
            }
            let n = values.len() / dim;
            (values, n)
        }
        None => {
            if let Some(row) = vectors.tokens.iter().find(|row| row.len() != dim) {
                return Err(CellarError::WrongDimension { expected: dim, received: row.len() });
            }
            let n = vectors.tokens.len();
            let mut flat = Vec::with_capacity(n * dim);
            vectors.tokens.iter().for_each(|row| flat.extend_from_slice(row));
            (flat, n)
        }
    };
    if n_tokens > max_rows {
        return Err(CellarError::InvalidInput(format!(
            "{field}.tokens must hold at most {max_rows} vectors, got {n_tokens}"
        )));
    }
    let pooled = match (pooled, &vectors.pooled_b64) {
        (Some(_), Some(_)) => {
            return Err(CellarError::invalid(format!("{field}: give pooled or pooled_b64, not both")))
        }
        (_, Some(text)) => Some(decode_b64_values(text, dtype, &format!("{field}.pooled_b64"))?),
        (pooled, None) => pooled,
    };
    if let Some(pooled) = pooled.as_ref().filter(|p| p.len() != dim) {
        return Err(CellarError::WrongDimension { expected: dim, received: pooled.len() });
    }
    Ok(QueryVectors { tokens, n_tokens, pooled })
}

/// The values of a base64 field of `dtype` (`field` names it in errors).
fn decode_b64_values(text: &str, dtype: VectorDtype, field: &str) -> Result<Vec<f32>> {
    let bytes = base64_decode(text).map_err(|detail| CellarError::invalid(format!("{field}: {detail}")))?;
    if !bytes.len().is_multiple_of(dtype.bytes()) {
        return Err(CellarError::invalid(format!(
            "{field}: {} bytes are not whole {}-byte values",
            bytes.len(),
            dtype.bytes()
        )));
    }
    Ok(dtype.values(&bytes))
}

/// Whether a vector's squared norm (its dot product with itself, as scoring sums it) is finite
/// in f32 when summed in order: then every score it takes part in is (`|q . d| <= |q| |d|`).
/// Summed first in 16 independent lanes, which the compiler vectorises (the sum in order is a
/// chain of dependent adds, most of a microsecond for a short query's rows): a lane total under
/// half of `f32::MAX` means the in-order sum is finite too (the same terms, within rounding), so
/// only a vector near the edge, or one holding a value that is not finite, is summed again in order.
fn squared_norm_is_finite(v: &[f32]) -> bool {
    let mut lanes = [0f32; 16];
    let mut chunks = v.chunks_exact(16);
    for chunk in &mut chunks {
        lanes.iter_mut().zip(chunk).for_each(|(l, x)| *l += x * x);
    }
    let rest: f32 = chunks.remainder().iter().map(|x| x * x).sum();
    let total = lanes.iter().sum::<f32>() + rest;
    (total.is_finite() && total < f32::MAX / 2.0) || v.iter().map(|x| x * x).sum::<f32>().is_finite()
}

fn too_large(field: &str) -> CellarError {
    CellarError::InvalidInput(format!(
        "{field} is too large: its squared norm overflows f32 (about 3.4e38), so its scores would not be \
         finite numbers; scale the vector down"
    ))
}

/// Whether the search uses the query's pooled vector: the pooled scan and the IVF do, the token
/// stage routes the token vectors.
fn needs_pooled(params: &SearchParams) -> bool {
    matches!(params.mode, Mode::DenseExact | Mode::Ivf)
        || (matches!(params.mode, Mode::Dense | Mode::Hybrid) && params.ivf.is_some())
}

/// Checks flattened caller vectors against what the resolved search needs: token vectors for
/// MaxSim, the pooled vector for every search that probes the IVF or scans the pooled vectors
/// (not the token stage's), and their values ([`check_query_values`]).
fn check_vectors(vectors: &QueryVectors, params: &SearchParams) -> Result<()> {
    let mode = params.mode;
    if vectors.n_tokens == 0 && mode.needs_tokens() {
        return Err(CellarError::InvalidInput(format!(
            "mode {mode} scores MaxSim: query_vectors.tokens must hold 1 to {MAX_QUERY_VECTORS} vectors, got 0"
        )));
    }
    check_query_values(vectors)?;
    if vectors.pooled.is_none() && needs_pooled(params) {
        let hint = if mode == Mode::Hybrid {
            ": it joins IVF candidates (send query_vectors.pooled, or hybrid_candidates 0)"
        } else {
            " (query_vectors.pooled)"
        };
        return Err(CellarError::InvalidInput(format!("mode {mode} needs the query's pooled vector{hint}")));
    }
    Ok(())
}

/// The one rule for a caller's query values (an index's search and a group's): finite values
/// throughout, and each vector's squared norm finite in f32 (values near 1e38 are finite but
/// their dot products are not, and a score must never be infinite or NaN). One pass over the
/// values when they pass: a finite squared norm implies finite values (a NaN or an infinity
/// makes the sum so); only a vector that fails is looked at again to name what failed.
pub(crate) fn check_query_values(vectors: &QueryVectors) -> Result<()> {
    let dim = vectors.tokens.len().checked_div(vectors.n_tokens).unwrap_or(0);
    let rows = || (0..vectors.n_tokens).map(|i| &vectors.tokens[i * dim..][..dim]);
    if !rows().all(squared_norm_is_finite) {
        if let Some(i) = vectors.tokens.iter().position(|v| !v.is_finite()) {
            return Err(CellarError::InvalidInput(format!(
                "query_vectors.tokens[{}][{}] is not a finite number",
                i / dim,
                i % dim
            )));
        }
        let i = rows().position(|row| !squared_norm_is_finite(row)).expect("a row failed");
        return Err(too_large(&format!("query_vectors.tokens[{i}]")));
    }
    match vectors.pooled.as_deref() {
        Some(pooled) if squared_norm_is_finite(pooled) => Ok(()),
        Some(pooled) if pooled.iter().any(|v| !v.is_finite()) => {
            Err(CellarError::InvalidInput("query_vectors.pooled holds a value that is not finite".into()))
        }
        Some(_) => Err(too_large("query_vectors.pooled")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::squared_norm_is_finite;

    /// The lanes' shortcut answers what the in-order sum answers: on vectors of every length up
    /// to 40, from small values to values whose squares sum right at the edge of f32, with an
    /// infinity or a NaN in some. (Trusting the lanes alone fails it.)
    #[test]
    fn the_lanes_shortcut_agrees_with_the_sum_in_order() {
        let in_order = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().is_finite();
        let mut rng = rand::rngs::StdRng::seed_from_u64(46);
        let (mut finite, mut not) = (0, 0);
        for _ in 0..20_000 {
            let len = rng.gen_range(0..=40usize);
            // Small values; squares about f32::MAX / len times 0 to 4 (sums on both sides of the
            // edge); values near 1e18; or every square within a few millionths of f32::MAX / len
            // (sums within rounding of the edge, where the order of the adds decides).
            let edge = (f32::MAX / len.max(1) as f32).sqrt();
            let mut v: Vec<f32> = match rng.gen_range(0..4) {
                0 => (0..len).map(|_| rng.gen_range(-2.0f32..2.0)).collect(),
                1 => (0..len).map(|_| rng.gen_range(-2.0f32..2.0) * edge).collect(),
                2 => (0..len).map(|_| rng.gen_range(-2.0f32..2.0) * 1e18).collect(),
                _ => (0..len).map(|_| edge * (1.0 + rng.gen_range(-4e-6f32..4e-6))).collect(),
            };
            if len > 0 && rng.gen_ratio(1, 20) {
                let at = rng.gen_range(0..len);
                v[at] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][rng.gen_range(0..3)];
            }
            let want = in_order(&v);
            assert_eq!(squared_norm_is_finite(&v), want, "{v:?}");
            if want {
                finite += 1
            } else {
                not += 1
            }
        }
        assert!(finite > 1000 && not > 1000, "both answers met: {finite} finite, {not} not");
    }
}
