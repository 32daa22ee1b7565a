//! Helpers shared by the collection tests: deterministic documents whose vectors are a pure
//! function of their text, so any test can check a stored document is intact.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use cellar_search::{DocIn, MetaValue, Metadata, QueryVectorsIn, SearchRequest};
use cellar_stream::{Collection, Durability, Options};

pub const DIM: usize = 8;

/// A small, fast-flushing, fsync-free collection (durability is the crash test's business).
pub fn options(memtable_bytes: usize) -> Options {
    Options {
        durability: Durability::None,
        memtable_bytes,
        compact_after: 3,
        background_compaction: false,
        background_flush: false,
        codec_from: None,
    }
}

pub fn open(dir: &Path, options: Options) -> Collection {
    Collection::open(dir, Some(DIM), options).unwrap()
}

fn hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// Token vectors derived from `text`: 1 to 4 rows of values in [-1, 1], exact in f16.
pub fn vectors_of(text: &str) -> (Vec<f32>, usize) {
    let mut state = hash(text);
    let n = 1 + (state % 4) as usize;
    let tokens = (0..n * DIM)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % 257) as f32 / 128.0 - 1.0
        })
        .collect();
    (tokens, n)
}

/// A test's document, its vectors flat (`n_tokens * DIM` values) as the reference model
/// scores them; [`Doc::doc_in`] is what a collection takes.
#[derive(Clone, Debug, PartialEq)]
pub struct Doc {
    pub group: String,
    pub id: String,
    pub text: String,
    pub tokens: Vec<f32>,
    pub n_tokens: usize,
    pub pooled: Option<Vec<f32>>,
    pub metadata: BTreeMap<String, MetaValue>,
}

impl Doc {
    /// The document as a stream takes it (`n_tokens` rows of `tokens`; a row count that does
    /// not divide them is written as it is, for the tests of bad input).
    pub fn doc_in(&self) -> DocIn {
        let width = if self.n_tokens == 0 { DIM } else { self.tokens.len().div_ceil(self.n_tokens) };
        let tokens = if self.n_tokens == 0 {
            Vec::new()
        } else {
            self.tokens.chunks(width).map(<[f32]>::to_vec).collect()
        };
        DocIn {
            group: Some(self.group.clone()),
            id: self.id.clone(),
            text: self.text.clone(),
            metadata: Metadata(self.metadata.clone()),
            vectors: Some(QueryVectorsIn {
                tokens,
                pooled: self.pooled.clone(),
                ..QueryVectorsIn::default()
            }),
            ..DocIn::default()
        }
    }
}

/// Every document of `docs` as a stream takes it.
pub fn doc_ins(docs: &[Doc]) -> Vec<DocIn> {
    docs.iter().map(Doc::doc_in).collect()
}

/// A document whose text names its group, id and version, and whose vectors follow from it.
pub fn doc(group: &str, id: &str, version: u64) -> Doc {
    let text = format!("doc {group} {id} v{version} word{}", version % 5);
    let (tokens, n_tokens) = vectors_of(&text);
    let mut metadata = BTreeMap::new();
    metadata.insert("group".to_string(), MetaValue::Str(group.to_string()));
    metadata.insert("parity".to_string(), MetaValue::Int((version % 2) as i64));
    Doc { group: group.into(), id: id.into(), text, tokens, n_tokens, pooled: None, metadata }
}

/// A search for the `k` best of query token vectors `tokens` (`n * DIM` values).
pub fn search(tokens: Vec<f32>, k: usize) -> SearchRequest {
    SearchRequest {
        k: Some(k),
        query_vectors: Some(QueryVectorsIn::from_flat(&tokens, DIM, None)),
        ..SearchRequest::default()
    }
}

/// A query vector from `seed`.
pub fn query(seed: u64, rows: usize) -> Vec<f32> {
    vectors_of(&format!("query {seed}")).0.into_iter().cycle().take(rows * DIM).collect()
}
