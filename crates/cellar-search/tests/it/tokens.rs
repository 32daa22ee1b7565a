//! The token-level first stage (`cellar_search::tokens`): its candidates against a brute-force
//! reference of the same rule, the dense mode through it against exact MaxSim, written, deleted
//! and filtered documents, bad requests, and its golden files (`testdata/tokens-v1/`); `tune`:
//! what `cellar tune` sweeps over it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cellar_core::codec::CodecKind;
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::kernels::signs::SignTables;
use cellar_core::kernels::Isa;
use cellar_core::CellarError;
use cellar_search::filter::Filter;
use cellar_search::mode::DenseStage;
use cellar_search::scored::Scored;
use cellar_search::tokens::{
    build_tokens, codes, EarlyGuess, TokenQuery, TokenStage, TokensBuildOptions, TokensBuildReport,
    TokensConfig, TOKENS_CONFIG_FILE, TOKENS_DIR,
};
use cellar_search::{
    BuildOptions, DocIn, EmbeddedDoc, Index, Mode, OpenOptions, QueryVectorsIn, SearchRequest, WriteOp,
    WriteRequest,
};
use half::f16;
use tempfile::TempDir;

use crate::fixture::copy_dir;
use crate::golden_files;

mod tune;

const DIM: usize = 16;
const DOCS: usize = 240;
/// Directions ("words") the tokens gather around.
const WORDS: usize = 40;

/// A value in [-0.5, 0.5) from a counter (integer arithmetic: the same bits everywhere).
fn noise(state: &mut u64) -> f32 {
    *state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
    ((*state >> 40) % 1001) as f32 / 1000.0 - 0.5
}

/// Word `w`'s direction.
fn word(w: usize) -> Vec<f32> {
    let mut state = (w as u64 + 7).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..DIM).map(|_| noise(&mut state)).collect()
}

fn unit(v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

/// Document `i`'s tokens: 3 to 10 words near their directions, unit length.
fn doc_tokens(i: usize) -> Vec<f32> {
    let mut state = (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let n = 3 + i % 8;
    (0..n)
        .flat_map(|t| {
            let w = (i * 7 + t * 13 + (i / 5) * t) % WORDS;
            unit(word(w).into_iter().map(|x| x + 0.3 * noise(&mut state)).collect())
        })
        .collect()
}

fn lang(i: usize) -> &'static str {
    if i.is_multiple_of(3) {
        "de"
    } else {
        "en"
    }
}

fn docs() -> Vec<EmbeddedDoc> {
    (0..DOCS)
        .map(|i| EmbeddedDoc {
            id: format!("d{i}"),
            title: String::new(),
            text: format!("document {i}"),
            metadata: serde_json::from_value(serde_json::json!({"lang": lang(i)})).unwrap(),
            tokens: doc_tokens(i),
            pooled: None,
        })
        .collect()
}

fn stage_options() -> TokensBuildOptions {
    TokensBuildOptions { leaves: 64, ..TokensBuildOptions::default() }
}

/// An f16 index of the synthetic documents with its token stage.
fn build(dir: &Path) -> TokensConfig {
    let mut options = BuildOptions::new("", dir);
    options.codec = CodecKind::F16;
    options.sample_tokens = 256;
    Index::build_from_embeddings(&options, DIM, None, docs().into_iter().map(Ok)).unwrap();
    build_tokens(dir, &stage_options()).unwrap()
}

struct Built {
    _tmp: TempDir,
    dir: PathBuf,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let tmp = TempDir::new().unwrap();
        let dir = tmp.path().join("index");
        build(&dir);
        Built { _tmp: tmp, dir }
    })
}

fn rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| f16::from_f32(*x).to_f32()).collect()
}

/// A query of four tokens near document `i`'s first words.
fn query_of(i: usize) -> Vec<f32> {
    let mut state = 99 + i as u64;
    doc_tokens(i)[..3 * DIM]
        .chunks(DIM)
        .chain(std::iter::once(&word(i % WORDS)[..]))
        .flat_map(|t| unit(t.iter().map(|x| x + 0.1 * noise(&mut state)).collect()))
        .collect()
}

fn maxsim(query: &[f32], doc: &[f32]) -> f32 {
    query
        .chunks(DIM)
        .map(|q| {
            doc.chunks(DIM).map(|d| q.iter().zip(d).map(|(a, b)| a * b).sum::<f32>()).fold(f32::MIN, f32::max)
        })
        .sum()
}

#[test]
fn candidates_are_the_brute_force_scores_of_the_same_rule_with_every_reader() {
    let b = built();
    let isa = Isa::detected();
    // (nprobe, route, impute): the imputed leaf deeper than the probed ones, or not.
    let query_kinds = [(3, 2, 8), (8, 64, 1), (1, 1, 4)];
    for kind in ReaderKind::ALL {
        let stage = TokenStage::open(&b.dir, DOCS as u64, DIM, &ReaderOptions::new(kind))
            .unwrap()
            .expect("a tokens/");
        let q = stage.quantizer();
        let leaves = q.leaves_f32();
        // Every document token's leaf and residual code, by the build's rule, from its stored (f16) values.
        let postings: Vec<Vec<(u32, Vec<u8>, u16)>> = (0..DOCS)
            .map(|i| {
                let tokens = rounded(&doc_tokens(i));
                let mut assigned = Vec::new();
                q.assign_rows(&tokens, &leaves, &mut assigned);
                tokens
                    .chunks(DIM)
                    .zip(assigned)
                    .map(|(t, j)| {
                        let mut bits = vec![0u8; codes::code_bytes(DIM)];
                        let factor =
                            codes::encode(t, &leaves[j as usize * DIM..(j as usize + 1) * DIM], &mut bits);
                        (j, bits, factor)
                    })
                    .collect()
            })
            .collect();
        for (i, (nprobe, route, impute)) in query_kinds.into_iter().enumerate() {
            let query = query_of(i * 31);
            // A query token's floor: the score of its leaf ranked `impute` (or `nprobe`, the
            // deeper), imputed where a document has no token in its `nprobe` probed leaves.
            let ranked = q.probe(isa, &query, nprobe.max(impute), route);
            let floors: Vec<f32> = ranked.iter().map(|p| p.last().unwrap().1).collect();
            let probed: Vec<&[(u32, f32)]> = ranked.iter().map(|p| &p[..nprobe.min(p.len())]).collect();
            let mut expected: Vec<(u32, f32)> = Vec::new();
            for (d, held) in postings.iter().enumerate() {
                let mut touched = false;
                let score: f32 = probed
                    .iter()
                    .enumerate()
                    .map(|(t, p)| {
                        let floor = floors[t];
                        let table = SignTables::new(&query[t * DIM..(t + 1) * DIM]);
                        let best = held
                            .iter()
                            .filter_map(|(j, bits, factor)| {
                                p.iter().find(|(l, _)| l == j).map(|(_, s)| table.estimate(*s, bits, *factor))
                            })
                            .reduce(f32::max);
                        touched |= best.is_some();
                        best.map_or(floor, |b| b.max(floor))
                    })
                    .sum();
                if touched {
                    expected.push((d as u32, score));
                }
            }
            let (found, stats) = stage
                .candidates(
                    isa,
                    &query,
                    TokenQuery { nprobe, route, impute, depth: DOCS },
                    DOCS as u32,
                    false,
                    &|_| false,
                    None,
                )
                .unwrap();
            assert_eq!(found.len(), expected.len(), "{kind:?} nprobe {nprobe}: documents met");
            assert_eq!(stats.scored, expected.len());
            for s in &found {
                let (_, want) = expected.iter().find(|(d, _)| *d == s.id.0).expect("a met document");
                assert!((s.score - want).abs() < 1e-4, "{kind:?} doc {}: {} against {want}", s.id.0, s.score);
            }
            assert!(found.windows(2).all(|w| w[0].score >= w[1].score), "best first");
            // Ids far beyond the documents met (many windows, most empty): the same answer. And
            // a guess asked for hands over the best so far once, here when the one window that
            // holds documents is done: the final best.
            let mut guesses = Vec::new();
            let mut take = |guess: Vec<Scored>| guesses.push(guess);
            let early = EarlyGuess { step: 0.5, wanted: 5, take: &mut take };
            let (far, _) = stage
                .candidates(
                    isa,
                    &query,
                    TokenQuery { nprobe, route, impute, depth: DOCS },
                    1 << 20,
                    false,
                    &|_| false,
                    Some(early),
                )
                .unwrap();
            assert_eq!(far, found, "{kind:?} nprobe {nprobe}: ids up to 2^20");
            assert_eq!(guesses, [found[..5.min(found.len())].to_vec()]);
            // Skipped documents are left out, the others keep their scores.
            let (kept, _) = stage
                .candidates(
                    isa,
                    &query,
                    TokenQuery { nprobe, route, impute, depth: DOCS },
                    DOCS as u32,
                    true,
                    &|id| id % 2 == 0,
                    None,
                )
                .unwrap();
            assert_eq!(kept.len(), expected.iter().filter(|(d, _)| !d.is_multiple_of(2)).count());
            assert!(kept.iter().all(|s| !s.id.0.is_multiple_of(2)));
        }
    }
}

fn dense(query: &[f32], k: usize) -> SearchRequest {
    SearchRequest {
        k: Some(k),
        mode: Some(Mode::Dense),
        query_vectors: Some(QueryVectorsIn {
            tokens: query.chunks(DIM).map(<[f32]>::to_vec).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ids(index: &Index, request: SearchRequest) -> Vec<String> {
    index.search(request).unwrap().hits.into_iter().map(|h| h.id).collect()
}

/// The add of written document `w{i}`, made of the generator's document `i`'s tokens.
fn written(i: usize) -> WriteOp {
    WriteOp::Add(DocIn {
        id: format!("w{i}"),
        text: format!("written {i}"),
        vectors: Some(QueryVectorsIn {
            tokens: doc_tokens(i).chunks(DIM).map(<[f32]>::to_vec).collect(),
            ..Default::default()
        }),
        ..DocIn::default()
    })
}

#[test]
fn dense_mode_runs_the_token_stage_and_probing_everything_is_exact_maxsim() {
    let index = Index::open(&built().dir, OpenOptions::default()).unwrap();
    let stored: Vec<Vec<f32>> = (0..DOCS).map(|i| rounded(&doc_tokens(i))).collect();
    for i in [0, 17, 101] {
        let query = query_of(i);
        let mut exact: Vec<(usize, f32)> = stored.iter().map(|d| maxsim(&query, d)).enumerate().collect();
        exact.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let want: Vec<String> = exact[..10].iter().map(|(d, _)| format!("d{d}")).collect();
        let everything = SearchRequest {
            nprobe: Some(64),
            candidates: Some(DOCS),
            rerank_k: Some(DOCS),
            ..dense(&query, 10)
        };
        let response = index.search(everything).unwrap();
        assert!(response.params.tokens.is_some() && response.params.ivf.is_none());
        let stats = response.tokens.expect("the token stage's report");
        assert!(stats.lists > 0 && stats.scored > 0);
        assert_eq!(response.hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>(), want, "query {i}");
        // The default settings find the exact best document of a query near it.
        assert_eq!(ids(&index, dense(&query, 10))[0], want[0], "query {i} at the defaults");
    }
    // The pooled IVF stays an option (this index has none: a clear error).
    let pooled = SearchRequest { dense_stage: Some(DenseStage::Pooled), ..dense(&query_of(0), 10) };
    let err = index.search(pooled).unwrap_err();
    assert!(
        matches!(err, CellarError::InvalidInput(_)) && err.to_string().contains("cellar ivf build"),
        "{err}"
    );
}

#[test]
fn dense_depth_is_half_a_percent_of_the_documents_from_200_to_1000_unless_set() {
    use cellar_search::tokens::default_depth;
    let rule: Vec<usize> = [0, 5_183, 100_000, 200_000, 2_000_000].into_iter().map(default_depth).collect();
    assert_eq!(rule, [200, 200, 500, 1000, 1000]);
    let set = cellar_search::tokens::TokenDefaults { depth: Some(300), ..Default::default() };
    let rebuilt = rebuilt_with(set);
    assert_eq!(rebuilt.config.depth(), 300);
    assert!(rebuilt.saved.contains("\"depth\": 300"), "{}", rebuilt.saved);
    assert_eq!((rebuilt.params.candidates, rebuilt.params.rerank_k), (300, 300));
}

/// A copy of the built index whose token stage was built again with `defaults`: its config, its
/// `tokens.json` as saved, and the settings a dense search then runs with.
struct Rebuilt {
    _tmp: TempDir,
    dir: std::path::PathBuf,
    config: cellar_search::tokens::TokensConfig,
    saved: String,
    params: cellar_search::SearchParams,
}

fn rebuilt_with(defaults: cellar_search::tokens::TokenDefaults) -> Rebuilt {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    copy_dir(&built().dir, &dir);
    let config = build_tokens(&dir, &TokensBuildOptions { defaults, ..stage_options() }).unwrap();
    let saved = std::fs::read_to_string(dir.join("tokens/tokens.json")).unwrap();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    let params = index.search(dense(&query_of(3), 10)).unwrap().params;
    Rebuilt { _tmp: tmp, dir, config, saved, params }
}

#[test]
fn the_imputed_leaf_is_one_in_128_of_the_leaves_unless_set() {
    use cellar_search::tokens::default_impute;
    let rule: Vec<usize> = [0, 64, 1_024, 4_096, 32_781].into_iter().map(default_impute).collect();
    assert_eq!(rule, [1, 1, 8, 32, 256]);
    // The built stage's default: not written to tokens.json, the rule of its leaves served.
    let index = Index::open(&built().dir, OpenOptions::default()).unwrap();
    let leaves = cellar_search::tokens::TokensConfig::load(&built().dir).unwrap().expect("tokens/").leaves;
    let saved = std::fs::read_to_string(built().dir.join("tokens/tokens.json")).unwrap();
    assert!(!saved.contains("impute"), "{saved}");
    let params = index.search(dense(&query_of(3), 10)).unwrap().params;
    assert_eq!(params.tokens.expect("the token stage's settings").impute, default_impute(leaves));
    drop(index);
    // One set at build is saved and served.
    let set = cellar_search::tokens::TokenDefaults { impute: Some(12), ..Default::default() };
    let rebuilt = rebuilt_with(set);
    assert_eq!(rebuilt.config.impute(), 12);
    assert!(rebuilt.saved.contains("\"impute\": 12"), "{}", rebuilt.saved);
    assert_eq!(rebuilt.params.tokens.expect("the token stage's settings").impute, 12);
    let zero = cellar_search::tokens::TokenDefaults { impute: Some(0), ..Default::default() };
    let err =
        build_tokens(&rebuilt.dir, &TokensBuildOptions { defaults: zero, ..stage_options() }).unwrap_err();
    assert!(matches!(err, CellarError::InvalidInput(_)) && err.to_string().contains("impute"), "{err}");
}

#[test]
fn dense_mode_prefetches_through_the_token_stage_and_ranks_the_same() {
    for kind in ReaderKind::ALL {
        let options = OpenOptions { reader: kind, ..OpenOptions::default() };
        let index = Index::open(&built().dir, options).unwrap();
        let plain = index.search(dense(&query_of(7), 10)).unwrap();
        assert!(plain.prefetch.is_none(), "off by default");
        let asked =
            SearchRequest { prefetch: Some(true), prefetch_step: Some(0.3), ..dense(&query_of(7), 10) };
        let prefetched = index.search(asked).unwrap();
        let ids = |r: &cellar_search::SearchResponse| r.hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&prefetched), ids(&plain), "{kind:?}");
        let stats = prefetched.prefetch.expect("prefetch stats");
        assert!(stats.needed > 0 && stats.needed <= prefetched.params.rerank_k, "{stats:?}");
        assert!(stats.prefetched > 0 && stats.hits > 0, "{kind:?}: {stats:?}");
        assert_eq!(stats.hits + stats.misses_read, stats.needed, "{kind:?}: {stats:?}");
        let bad = SearchRequest { prefetch_step: Some(0.0), ..dense(&query_of(7), 10) };
        assert!(index.search(bad).unwrap_err().to_string().contains("prefetch_step"));
    }
}

#[test]
fn a_leaf_may_hold_more_postings_than_the_index_has_documents() {
    // Few documents of many tokens, few leaves: a leaf's list repeats documents (one posting a
    // token). Cranfield (1,400 documents, 1,024 leaves) was refused at open as damaged.
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    let mut options = BuildOptions::new("", &dir);
    options.codec = CodecKind::F16;
    Index::build_from_embeddings(&options, DIM, None, docs().into_iter().take(12).map(Ok)).unwrap();
    let config = build_tokens(&dir, &TokensBuildOptions { leaves: 2, ..stage_options() }).unwrap();
    assert!(config.tokens > 2 * config.docs, "{} tokens of {} documents", config.tokens, config.docs);
    let stage =
        TokenStage::open(&dir, config.docs, DIM, &ReaderOptions::new(ReaderKind::Ram)).unwrap().unwrap();
    assert_eq!(stage.verify().unwrap(), config.tokens);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert!(!index.search(dense(&query_of(3), 5)).unwrap().hits.is_empty());
}

#[test]
fn dense_takes_the_token_stage_and_hybrid_the_ivf_where_there_is_one() {
    let hybrid = |index: &Index, stage: Option<DenseStage>| {
        let request = SearchRequest {
            query: "document 3".into(),
            mode: Some(Mode::Hybrid),
            dense_stage: stage,
            query_vectors: Some(QueryVectorsIn {
                tokens: query_of(3).chunks(DIM).map(<[f32]>::to_vec).collect(),
                pooled: Some(query_of(3)[..DIM].to_vec()),
                ..Default::default()
            }),
            ..dense(&query_of(3), 10)
        };
        let params = index.search(request).unwrap().params;
        (params.tokens.is_some(), params.ivf.is_some())
    };
    let index = Index::open(&built().dir, OpenOptions::default()).unwrap();
    assert_eq!(hybrid(&index, None), (true, false), "no IVF: hybrid joins the token stage");
    drop(index);
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    copy_dir(&built().dir, &dir);
    cellar_search::ivf::build_ivf(
        &dir,
        &cellar_search::ivf::IvfBuildOptions { cluster_size: 16, ..Default::default() },
    )
    .unwrap();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert_eq!(hybrid(&index, None), (false, true), "hybrid keeps the IVF by default");
    assert_eq!(hybrid(&index, Some(DenseStage::Tokens)), (true, false));
    let params = index.search(dense(&query_of(3), 10)).unwrap().params;
    assert_eq!((params.tokens.is_some(), params.ivf.is_some()), (true, false), "dense takes the tokens");
    // Over the token stage, dense re-ranks the stage's depth unless the request says otherwise;
    // over the IVF, the index's defaults.
    let depth = index.tokens_config().unwrap().depth();
    assert_eq!(depth, 200, "a small collection's stage re-ranks 200");
    assert_eq!((params.candidates, params.rerank_k), (depth, depth));
    let told =
        index.search(SearchRequest { candidates: Some(50), ..dense(&query_of(3), 10) }).unwrap().params;
    assert_eq!((told.candidates, told.rerank_k), (50, 50));
    let told = index.search(SearchRequest { rerank_k: Some(20), ..dense(&query_of(3), 10) }).unwrap().params;
    assert_eq!((told.candidates, told.rerank_k), (depth, 20));
    let pooled = SearchRequest { dense_stage: Some(DenseStage::Pooled), ..dense(&query_of(3), 10) };
    let pooled = index.search(pooled).unwrap().params;
    let defaults = cellar_search::config::SearchDefaults::default();
    assert_eq!((pooled.candidates, pooled.rerank_k), (defaults.candidates, defaults.rerank_k));
}

#[test]
fn bad_token_stage_requests_are_refused_with_the_reason() {
    let index = Index::open(&built().dir, OpenOptions::default()).unwrap();
    let err = index.search(SearchRequest { nprobe: Some(65), ..dense(&query_of(0), 10) }).unwrap_err();
    assert!(matches!(err, CellarError::InvalidInput(_)) && err.to_string().contains("64 leaves"), "{err}");
    let tmp = TempDir::new().unwrap();
    let bare = tmp.path().join("index");
    let mut options = BuildOptions::new("", &bare);
    options.codec = CodecKind::F16;
    Index::build_from_embeddings(&options, DIM, None, docs().into_iter().take(20).map(Ok)).unwrap();
    let index = Index::open(&bare, OpenOptions::default()).unwrap();
    let err = index
        .search(SearchRequest { dense_stage: Some(DenseStage::Tokens), ..dense(&query_of(0), 5) })
        .unwrap_err();
    assert!(err.to_string().contains("cellar tokens build"), "{err}");
    drop(index);
    let err = build_tokens(
        &bare,
        &TokensBuildOptions {
            defaults: cellar_search::tokens::TokenDefaults { nprobe: 0, ..Default::default() },
            ..stage_options()
        },
    )
    .unwrap_err();
    assert!(matches!(err, CellarError::InvalidInput(_)), "{err}");
    let err = build_tokens(
        &bare,
        &TokensBuildOptions {
            defaults: cellar_search::tokens::TokenDefaults { depth: Some(0), ..Default::default() },
            ..stage_options()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("depth must be between 1 and"), "{err}");
}

#[test]
fn written_documents_join_deleted_ones_leave_and_filters_hold_in_the_token_stage() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    copy_dir(&built().dir, &dir);
    let index = Index::open(&dir, OpenOptions { flush_bytes: 1 << 30, ..OpenOptions::default() }).unwrap();
    // A new document made of words no document holds together, queried by its own tokens.
    let fresh: Vec<f32> = [3usize, 29, 11]
        .iter()
        .flat_map(|w| unit(word(*w).iter().map(|x| x * 1.0 + 0.01).collect()))
        .collect();
    let doc = DocIn {
        id: "new".into(),
        text: "a written document".into(),
        metadata: serde_json::from_value(serde_json::json!({"lang": "de"})).unwrap(),
        vectors: Some(QueryVectorsIn {
            tokens: fresh.chunks(DIM).map(<[f32]>::to_vec).collect(),
            ..Default::default()
        }),
        ..DocIn::default()
    };
    index.write(WriteRequest { ops: vec![WriteOp::Add(doc)] }).unwrap();
    assert_eq!(ids(&index, dense(&fresh, 3))[0], "new", "from the memtable");
    index.flush().unwrap();
    let reopened = Index::open(&dir, OpenOptions::default()).unwrap();
    assert_eq!(ids(&reopened, dense(&fresh, 3))[0], "new", "from a segment, after an open");
    drop(reopened);
    // Deleting the best document of a query removes it; it never comes back.
    let query = query_of(17);
    let best = ids(&index, dense(&query, 5))[0].clone();
    index.write(WriteRequest { ops: vec![WriteOp::Delete(best.clone())] }).unwrap();
    for _ in 0..2 {
        let after = ids(&index, dense(&query, 20));
        assert!(!after.contains(&best), "{best} deleted but found: {after:?}");
    }
    assert!(!ids(&index, dense(&fresh, 20)).contains(&best));
    // Under a filter the stage itself skips what does not match (no exact switch).
    let filter: Filter =
        serde_json::from_value(serde_json::json!({"eq": {"field": "lang", "value": "de"}})).unwrap();
    let filtered = SearchRequest { filter: Some(filter), filter_exact_max: Some(0), ..dense(&query, 10) };
    let hits = index.search(filtered).unwrap().hits;
    assert_eq!(hits.len(), 10);
    for h in &hits {
        let n: usize = h.id.strip_prefix('d').map_or(usize::MAX, |n| n.parse().unwrap());
        assert!(h.id == "new" || lang(n) == "de", "{} does not match the filter", h.id);
    }
}

/// A retrain of an index nothing was written to rebuilds the stage its build made, byte for
/// byte: the same documents, sample, leaves and seed, read through the retrain's sources.
#[test]
fn a_retrain_without_writes_rebuilds_the_same_stage() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    copy_dir(&built().dir, &dir);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert!(!index.needs_tokens_retrain(), "nothing written");
    let config = index.retrain_tokens().unwrap();
    assert_eq!((config.docs, config.leaves), (DOCS as u64, 64));
    for name in golden_names().into_iter().skip(1) {
        let (a, b) = (built().dir.join(TOKENS_DIR).join(name), dir.join(TOKENS_DIR).join(name));
        assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "{name} differs after a retrain");
    }
}

/// A retrain takes the written documents into the lists on disk (a stage opened afresh finds
/// them with nothing assigned in RAM), leaves the deleted ones out, answers exactly as before
/// when every leaf is probed, and is what the next open reads.
#[test]
fn a_retrain_takes_written_documents_into_its_lists_and_drops_deleted_ones() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    copy_dir(&built().dir, &dir);
    let index = Index::open(&dir, OpenOptions { flush_bytes: 1 << 30, ..OpenOptions::default() }).unwrap();
    let n_written = 40;
    let ops = (DOCS..DOCS + n_written)
        .map(written)
        .chain((0..5).map(|i| WriteOp::Delete(format!("d{}", i * 7))))
        .collect();
    index.write(WriteRequest { ops }).unwrap();
    let everything = |query: &[f32]| SearchRequest {
        nprobe: Some(64),
        candidates: Some(DOCS + n_written),
        rerank_k: Some(DOCS + n_written),
        ..dense(query, 10)
    };
    let queries: Vec<Vec<f32>> = [3, 17, DOCS + 5, DOCS + 31].into_iter().map(query_of).collect();
    let before: Vec<Vec<String>> = queries.iter().map(|q| ids(&index, everything(q))).collect();
    assert!(before[2].contains(&format!("w{}", DOCS + 5)), "{:?}", before[2]);
    let stats = index.live_stats();
    assert!(stats.tokens_written_bytes > 0, "the written documents' lists are in RAM: {stats:?}");
    assert!(!stats.tokens_retrain_advised, "40 written is below the rule's 256");
    let config = index.retrain_tokens().unwrap();
    assert_eq!(config.docs, (DOCS + n_written) as u64, "it covers every id written");
    assert_eq!(index.live_stats().tokens_written_bytes, 0, "and none are left in RAM");
    assert_eq!(TokensConfig::load(&dir).unwrap().unwrap(), config);
    let after: Vec<Vec<String>> = queries.iter().map(|q| ids(&index, everything(q))).collect();
    assert_eq!(after, before, "probing every leaf is exact MaxSim before and after");
    for hits in &after {
        assert!(!hits.iter().any(|id| ["d0", "d7", "d14", "d21", "d28"].contains(&id.as_str())), "{hits:?}");
    }
    // A stage opened afresh, with nothing caught up in RAM, finds the written documents in its
    // lists, and holds no posting of a deleted one.
    let stage =
        TokenStage::open(&dir, DOCS as u64, DIM, &ReaderOptions::new(ReaderKind::Mmap)).unwrap().unwrap();
    let query = TokenQuery { nprobe: 64, route: stage.config().groups, impute: 64, depth: DOCS + n_written };
    let end = (DOCS + n_written) as u32;
    let (found, _) =
        stage.candidates(Isa::detected(), &queries[2], query, end, false, &|_| false, None).unwrap();
    assert!(found.iter().any(|s| s.id.0 == (DOCS + 5) as u32), "the written document is in the lists");
    assert!(found.iter().all(|s| ![0, 7, 14, 21, 28].contains(&s.id.0)), "no deleted document is");
    drop(index);
    let reopened = Index::open(&dir, OpenOptions::default()).unwrap();
    let again: Vec<Vec<String>> = queries.iter().map(|q| ids(&reopened, everything(q))).collect();
    assert_eq!(again, before, "after an open");
    assert_eq!(ids(&reopened, dense(&queries[3], 3))[0], format!("w{}", DOCS + 31), "at the defaults");
}

/// The retrain rule: at least 256 documents written since the stage was built, and one for
/// every 8 it covers.
#[test]
fn a_retrain_is_advised_once_enough_documents_were_written() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    copy_dir(&built().dir, &dir);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    let add = |from: usize, n: usize| {
        index.write(WriteRequest { ops: (from..from + n).map(written).collect() }).unwrap();
    };
    add(0, 255);
    assert!(!index.needs_tokens_retrain() && !index.live_stats().tokens_retrain_advised, "255 written");
    add(255, 1);
    assert!(index.needs_tokens_retrain() && index.live_stats().tokens_retrain_advised, "256 written");
    index.retrain_tokens().unwrap();
    assert!(!index.needs_tokens_retrain(), "none written since the retrain");
}

/// What a crash leaves of a retrain: the stage moved aside between the swap's two renames is put
/// back, never lost; a half-built one is removed by the next writer.
#[test]
fn what_a_crash_leaves_of_a_token_retrain_is_recovered_or_removed() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    copy_dir(&built().dir, &dir);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    let config = index.retrain_tokens().unwrap();
    drop(index);
    std::fs::rename(dir.join(TOKENS_DIR), dir.join("tokens.cellar-old")).unwrap();
    std::fs::create_dir_all(dir.join("tokens.cellar-building")).unwrap();
    std::fs::write(dir.join("tokens.cellar-building").join("run-0.tmp"), b"half").unwrap();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert_eq!(TokensConfig::load(&dir).unwrap(), Some(config), "the stage is put back");
    index.write(WriteRequest { ops: vec![WriteOp::Delete("d1".into())] }).unwrap();
    for leftover in ["tokens.cellar-building", "tokens.cellar-old"] {
        assert!(!dir.join(leftover).exists(), "{leftover} is removed");
    }
    assert_eq!(ids(&index, dense(&query_of(17), 3)).len(), 3, "the dense mode runs on it");
}

// Golden files: `testdata/tokens-v1/tokens/` is the stage built over the synthetic documents
// (layout version 1, binary headers of format version 1), timings zeroed in `tokens.json`.
// After an intended change (with a new TOKENS_FORMAT_VERSION or FORMAT_VERSION), bless with
// `CELLAR_BLESS=1 cargo test -p cellar-search --test it tokens::golden`.

fn golden_dir() -> &'static Path {
    static GOLDEN: OnceLock<PathBuf> = OnceLock::new();
    golden_files::dir(&GOLDEN, "tokens-v1", write_golden)
}

fn write_golden(dir: &Path) {
    let tmp = TempDir::new().unwrap();
    let index = tmp.path().join("index");
    let built = build(&index);
    std::fs::create_dir_all(dir.join(TOKENS_DIR)).unwrap();
    for name in golden_names() {
        std::fs::copy(index.join(TOKENS_DIR).join(name), dir.join(TOKENS_DIR).join(name)).unwrap();
    }
    let build = TokensBuildReport {
        train_secs: 0.0,
        assign_secs: 0.0,
        write_secs: 0.0,
        total_secs: 0.0,
        ..built.build
    };
    TokensConfig { build, ..built }.save(&dir.join(TOKENS_DIR)).unwrap();
}

fn golden_names() -> [&'static str; 3] {
    use cellar_core::format::FileKind;
    [TOKENS_CONFIG_FILE, FileKind::TokenCentroids.file_name(), FileKind::TokenLists.file_name()]
}

#[test]
fn a_build_that_spills_its_postings_to_runs_writes_the_same_bytes() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    copy_dir(&built().dir, &dir);
    // About 60 postings per run: the merge of some forty runs.
    let spilled = build_tokens(&dir, &TokensBuildOptions { run_bytes: 2000, ..stage_options() }).unwrap();
    assert_eq!(spilled.build.postings, built_config().build.postings);
    for name in golden_names().into_iter().skip(1) {
        let (a, b) = (built().dir.join(TOKENS_DIR).join(name), dir.join(TOKENS_DIR).join(name));
        assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "{name} differs when spilled");
    }
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!leftovers.iter().any(|n| n.to_string_lossy().contains("building")), "{leftovers:?}");
}

#[test]
fn verify_reads_every_list_and_names_a_damaged_one() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    copy_dir(&built().dir, &dir);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    let mut seen = Vec::new();
    index.verify(|c| seen.push(c.file.display().to_string())).unwrap();
    assert!(seen.iter().any(|f| f.ends_with("token_lists.bin")), "{seen:?}");
    drop(index);
    // One byte of a list flipped: verify names the file, a search reading the list refuses it.
    let lists = dir.join(TOKENS_DIR).join(cellar_core::format::FileKind::TokenLists.file_name());
    let mut bytes = std::fs::read(&lists).unwrap();
    bytes[4096 + 10] ^= 0x40;
    std::fs::write(&lists, &bytes).unwrap();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    let err = index.verify(|_| {}).unwrap_err();
    assert!(
        matches!(err, CellarError::Corrupted { .. }) && err.to_string().contains("token_lists.bin"),
        "{err}"
    );
    let err = index.search(SearchRequest { nprobe: Some(64), ..dense(&query_of(0), 10) }).unwrap_err();
    assert!(matches!(err, CellarError::Corrupted { .. }) && err.to_string().contains("checksum"), "{err}");
}

fn built_config() -> TokensConfig {
    TokensConfig::load(&built().dir).unwrap().expect("tokens.json")
}

#[test]
fn golden_token_stage_is_reproduced_byte_for_byte_and_read() {
    let fresh = TempDir::new().unwrap();
    write_golden(fresh.path());
    let files: Vec<PathBuf> = golden_names().iter().map(|n| Path::new(TOKENS_DIR).join(n)).collect();
    golden_files::assert_same_bytes(
        golden_dir(),
        fresh.path(),
        &files,
        "TOKENS_FORMAT_VERSION or FORMAT_VERSION",
    );
    for kind in ReaderKind::ALL {
        let stage = TokenStage::open(golden_dir(), DOCS as u64, DIM, &ReaderOptions::new(kind))
            .unwrap()
            .expect("tokens/");
        assert_eq!(stage.config().leaves, 64);
        let (found, _) = stage
            .candidates(
                Isa::detected(),
                &query_of(5),
                TokenQuery { nprobe: 4, route: 8, impute: 4, depth: 10 },
                DOCS as u32,
                false,
                &|_| false,
                None,
            )
            .unwrap();
        assert!(found.iter().any(|s| s.id.0 == 5), "{kind:?}: a query near document 5 finds it: {found:?}");
    }
}
