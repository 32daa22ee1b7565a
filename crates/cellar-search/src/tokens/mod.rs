//! The token-level first stage (PLAID's and WARP's candidate generation, on disk): every
//! document token is assigned to one of K leaf centroids (K = 4·√tokens; PLAID's rule is 16), and
//! each leaf keeps its tokens' postings: the document, and the token's residual from the leaf
//! in one bit per dimension and a factor (`codes`).
//!
//! - `quantizer`: the two-level tree (about √K tops in f32, K leaves in f16) trained on a sample
//!   of tokens; it assigns the build's tokens and written documents' tokens, and routes queries;
//! - `lists`: a leaf's document ids, delta-coded and bit-packed in blocks of 128
//!   (docs/format/tokens.md); `codes`: the residuals' sign bits and the estimator over them;
//! - `layout`: `token_centroids.bin` (the tree and the lists' directory, in RAM);
//! - `build`: a streaming pass over the store (sample → train → assign every token → lists),
//!   built aside and swapped in under the index's exclusive lock, `tokens.json` its commit point;
//! - here: [`TokenStage`], the query path. Each query token's `nprobe` best leaves (by inner
//!   product, among its `route` best groups) are gathered, every leaf's list read once through
//!   `cellar-core`'s `FileSlice` (the index's reader kind: ram, mmap or direct), and each
//!   document scored as WARP does: per query token, the best estimate `q·c + q·r` over its
//!   tokens in the probed leaves (the residual's product read from the codes without decoding
//!   them), or, where it has none there, the score of a leaf deeper in the query token's
//!   ranking than its last probed one (WARP's missing-similarity estimate, [`default_impute`]);
//!   summed over the query tokens. The best `depth` go to MaxSim. The lists
//!   are walked together, one window of ids at a time, so the scores being summed stay in cache.
//!
//! Documents written after the build (the living index) are assigned to the same leaves the
//! first time a search sees them (held in RAM, `WrittenLists`); deleted ones and, under a
//! filter, the ones it does not match are skipped while the lists are gathered.

pub mod build;
pub mod codes;
pub mod layout;
pub mod lists;
pub mod quantizer;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cellar_core::format::fsio::{read_small_file, write_atomic};
use cellar_core::format::versioned::VersionRange;
use cellar_core::format::FileKind;
use cellar_core::io::{Extent, FileSlice, ReadStats, ReaderKind, ReaderOptions};
use cellar_core::kernels::signs::{self, SignTables};
use cellar_core::kernels::Isa;
use cellar_core::stats::ms_since;
use cellar_core::{CellarError, DocId, Result};
use serde::{Deserialize, Serialize};

use crate::scored::Scored;
use crate::topk::TopK;

pub use build::{build_tokens, TokensBuildOptions};
use layout::{CentroidsFile, ListEntry};
use quantizer::Quantizer;

/// Version of the `tokens/` layout.
pub const TOKENS_FORMAT_VERSION: u32 = 1;
/// The versions of `tokens/` (its `tokens.json`) this build reads.
pub const TOKENS_READABLE_VERSIONS: VersionRange = VersionRange::only(TOKENS_FORMAT_VERSION);
pub const TOKENS_DIR: &str = "tokens";
pub const TOKENS_CONFIG_FILE: &str = "tokens.json";
/// The stage's binary files, which `tokens.json` commits.
pub const TOKEN_KINDS: [FileKind; 2] = [FileKind::TokenCentroids, FileKind::TokenLists];
/// A lists file of at most this many bytes is read into RAM at open whatever the index's reader
/// (as the IVF's postings).
pub const LISTS_IN_RAM_MAX: u64 = 16 << 20;

/// Query-time settings used when a request does not give them.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct TokenDefaults {
    /// Leaves probed per query token.
    pub nprobe: usize,
    /// Groups of leaves scored per query token (the leaves' routing).
    pub route: usize,
    /// Hybrid mode: token-stage candidates joined to BM25's (0: BM25 only).
    pub hybrid_candidates: usize,
    /// Dense mode: the stage's best documents re-ranked with MaxSim (a request's `candidates`
    /// and `rerank_k` when it gives neither); `None`: [`default_depth`] of the documents it
    /// covers. Absent from `tokens.json` unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<usize>,
    /// The rank, among a query token's routed leaves, of the leaf whose score is imputed to a
    /// document with no token in its probed leaves (the `nprobe`-th where it is lower); `None`:
    /// [`default_impute`] of the leaves. Absent from `tokens.json` unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impute: Option<usize>,
}

/// Dense mode's depth over a token stage of `docs` documents when none was set: 0.5% of them,
/// at least 200 (the index's `candidates`) and at most 1,000. The more documents, the more
/// compete for the last places of the stage's estimate, so the more must be re-ranked to keep
/// what exact MaxSim ranks first: on the 2M synthetic collection 1,000 find 0.628 of the exact
/// top 10 against 0.464 for 200 (3 ms more; bench/results/tokens-windows-2m.md), at 200k 0.726
/// against 0.612 (tokens-quality-200k-depth1000.md); on SciFact (5,183) 200 already find all
/// of it (plaid-side-by-side.md), where 1,000 would re-rank a fifth of the collection.
pub fn default_depth(docs: u64) -> usize {
    (docs / 200).clamp(200, 1000) as usize
}

/// The leaf rank a query token's imputed score comes from when none was set: one leaf in 128
/// (32 of SciFact's 4,096, 256 of the 2M collection's 32,781). A document without a token in a
/// query token's probed leaves most likely has its best one well outside them, so the score of
/// the last probed leaf (PLAID's and WARP's bound at `nprobe`) flatters it against documents
/// that were met; imputing a deeper leaf's score ranks the met ones first. On SciFact's vectors
/// at nprobe 2 this finds 0.980 of the exact top 10 against 0.901 (top 100: 0.789 against
/// 0.552), at 2M and nprobe 32 0.620 against 0.593; past about a third of the routed leaves it
/// loses again (bench/results/tokens-impute.md).
pub fn default_impute(leaves: usize) -> usize {
    (leaves / 128).max(1)
}

impl TokensConfig {
    /// Dense mode's depth over this stage: the one set, or [`default_depth`] of its documents.
    pub fn depth(&self) -> usize {
        self.search.depth.unwrap_or_else(|| default_depth(self.docs))
    }

    /// The leaf rank of a query token's imputed score: the one set, or [`default_impute`].
    pub fn impute(&self) -> usize {
        self.search.impute.unwrap_or_else(|| default_impute(self.leaves))
    }
}

impl Default for TokenDefaults {
    fn default() -> Self {
        TokenDefaults { nprobe: 32, route: 8, hybrid_candidates: 100, depth: None, impute: None }
    }
}

/// Sizes and times of a token-stage build.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TokensBuildReport {
    /// Tokens the tree was trained on.
    pub sample_tokens: usize,
    pub train_secs: f64,
    pub assign_secs: f64,
    pub write_secs: f64,
    pub total_secs: f64,
    /// (leaf, document) pairs in the lists.
    pub postings: u64,
    pub centroids_bytes: u64,
    pub lists_bytes: u64,
    /// Lists' bytes on disk per document.
    pub disk_bytes_per_doc: f64,
    /// RAM per leaf: its f16 centroid, its directory entry and its share of the tops.
    pub ram_bytes_per_leaf: f64,
    /// Mean squared distance of a token to its leaf (the quantizer's error).
    pub mean_error: f64,
}

/// `tokens/tokens.json`: the commit point of a token-stage build.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TokensConfig {
    pub format_version: u32,
    pub dim: usize,
    /// Documents covered: every internal id below it is in the lists (written ones from it on
    /// join by assignment at search time).
    pub docs: u64,
    pub tokens: u64,
    pub groups: usize,
    pub leaves: usize,
    pub seed: u64,
    pub search: TokenDefaults,
    pub build: TokensBuildReport,
}

impl TokensConfig {
    pub fn dir(index_dir: &Path) -> PathBuf {
        index_dir.join(TOKENS_DIR)
    }

    /// `None` when the index has no token stage; `Corrupted` when some of its files are there
    /// without `tokens.json` (see `config::load_committed`).
    pub fn load(index_dir: &Path) -> Result<Option<TokensConfig>> {
        crate::config::load_committed(
            &Self::dir(index_dir),
            TOKENS_CONFIG_FILE,
            &TOKEN_KINDS,
            TOKENS_READABLE_VERSIONS,
            || rebuild_hint(index_dir),
        )
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| CellarError::internal(format!("tokens.json does not serialise: {e}")))?;
        write_atomic(&dir.join(TOKENS_CONFIG_FILE), &json)
    }
}

fn rebuild_hint(index_dir: &Path) -> String {
    format!("rebuild it with `cellar tokens build --index {}`", index_dir.display())
}

/// What one search's token stage did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenStats {
    /// Distinct leaves whose lists were read.
    pub lists: usize,
    /// Documents met in those lists (with repeats across query tokens).
    pub postings: u64,
    /// Documents scored.
    pub scored: usize,
    pub bytes_read: u64,
    pub read_calls: u64,
    pub ms: f64,
}

/// Written documents' postings, in RAM: every token of the ids in `base..end` not deleted when
/// they were assigned.
#[derive(Clone, Default)]
struct WrittenLists {
    end: u32,
    lists: HashMap<u32, WrittenList>,
}

#[derive(Clone, Default)]
struct WrittenList {
    ids: Vec<u32>,
    codes: Vec<u8>,
    /// Little-endian f16, as on disk.
    factors: Vec<u8>,
}

/// The open token stage of an index.
pub struct TokenStage {
    config: TokensConfig,
    quantizer: Quantizer,
    entries: Vec<ListEntry>,
    lists: FileSlice,
    written: Mutex<Arc<WrittenLists>>,
    /// One bit per leaf: its list matched its checksum when a search first read it. The file
    /// never changes once committed (a rebuild swaps the whole stage), so a list is checked
    /// once per open, not at every search (at 2M documents a search at the default nprobe reads
    /// 11–18 MB of lists, and checking them took a tenth of the stage's time); `verify` checks
    /// every one.
    checked: Vec<AtomicU64>,
}

/// A search's settings of the stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenQuery {
    pub nprobe: usize,
    pub route: usize,
    /// The rank of the leaf whose score is imputed (at least `nprobe`: see [`default_impute`]).
    pub impute: usize,
    pub depth: usize,
}

/// Documents whose accumulators a search holds at once: postings are taken window by window of
/// ids (every list is sorted by id), so the accumulators stay in the core's cache, not one
/// cache miss per posting over a table as large as the index (at 12 bytes, 768 KiB).
const WINDOW_DOCS: u32 = 1 << 16;

/// Dense mode's prefetch over the token stage when a request does not say (`prefetch`), and
/// the share of the postings scored before it starts (`prefetch_step`).
pub const PREFETCH: bool = false;
pub const PREFETCH_STEP: f32 = 0.5;

/// What a search asks of the stage while it runs: once the windows taken hold `step` of the
/// postings, the best documents so far go to `take`, so their records can be read while the
/// rest of the lists is scored (ESPN's prefetch). Every document of those windows has its final
/// score; so many of the final best `wanted` are expected among them as the share of the
/// postings taken, and that many of the best so far are handed over.
pub struct EarlyGuess<'a> {
    pub step: f32,
    pub wanted: usize,
    pub take: &'a mut dyn FnMut(Vec<Scored>),
}

/// Per-thread accumulators of one window, reused by every search of the thread.
#[derive(Default)]
struct Scratch {
    acc: Vec<Acc>,
    /// Documents of the window met, in the order first met: the first `met` entries (written
    /// at every posting, kept only for a document's first).
    touched: Vec<u32>,
}

/// A document's running score: `gain` summed over the query tokens settled so far, `best` its
/// best estimate for the query token `token - 1` (0: not met yet), settled (its excess over
/// that token's imputed floor added to `gain`) when a later token meets it or at the end.
/// `floors[t]` is query token `t - 1`'s floor, `floors[0]` = 0: a document not met settles to
/// 0, so a posting updates its accumulator without a branch on what it held.
#[derive(Clone, Copy, Default)]
struct Acc {
    gain: f32,
    best: f32,
    token: u16,
}

impl Acc {
    #[inline]
    fn settled(&self, floors: &[f32]) -> f32 {
        self.gain + (self.best - floors[self.token as usize]).max(0.0)
    }
}

/// One probed leaf's postings for one query token (the base's or the written ones), with a
/// cursor: the next posting not yet taken.
struct Run<'a> {
    /// The query token plus one.
    mark: u16,
    /// The leaf's score for that token.
    score: f32,
    ids: &'a [u32],
    codes: &'a [u8],
    /// Little-endian f16.
    factors: &'a [u8],
    at: usize,
    /// The estimates of the block of postings `block · BLOCK..` (`usize::MAX`: none yet),
    /// computed together when the cursor enters the block.
    block: usize,
    estimates: [f32; signs::BLOCK],
}

impl Run<'_> {
    /// The estimate of posting `k` (the block holding it computed first where it is not).
    #[inline]
    fn estimate(&mut self, isa: Isa, tables: &SignTables, k: usize) -> f32 {
        let block = k / signs::BLOCK;
        if block != self.block {
            let code_bytes = tables.code_bytes();
            let first = block * signs::BLOCK;
            let n = (self.ids.len() - first).min(signs::BLOCK);
            cellar_core::kernels::estimate_signs(
                isa,
                tables,
                self.score,
                &self.codes[first * code_bytes..(first + n) * code_bytes],
                &self.factors[2 * first..2 * (first + n)],
                &mut self.estimates[..n],
            );
            self.block = block;
        }
        self.estimates[k % signs::BLOCK]
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

impl TokenStage {
    /// Opens `index_dir/tokens/` when there is one, checking it covers at least the `docs`
    /// documents of the build (a retrain covers written ones too) and has `dim` dimensions.
    pub fn open(
        index_dir: &Path,
        docs: u64,
        dim: usize,
        options: &ReaderOptions,
    ) -> Result<Option<TokenStage>> {
        crate::ivf::build::recover_swap(index_dir, TOKENS_DIR, build::OLD_DIR, TOKENS_CONFIG_FILE)?;
        let Some(config) = TokensConfig::load(index_dir)? else { return Ok(None) };
        let dir = TokensConfig::dir(index_dir);
        let config_path = dir.join(TOKENS_CONFIG_FILE);
        if config.docs < docs || config.dim != dim {
            return Err(CellarError::corrupted(
                &config_path,
                0,
                format!(
                    "the token stage covers {} documents of {} dimensions, the index holds {docs} of {dim}; {}",
                    config.docs,
                    config.dim,
                    rebuild_hint(index_dir)
                ),
            ));
        }
        let centroids_path = dir.join(FileKind::TokenCentroids.file_name());
        if !centroids_path.exists() {
            return Err(missing(&centroids_path, index_dir));
        }
        let (header, body) = read_small_file(&centroids_path, FileKind::TokenCentroids)?;
        let file = CentroidsFile::decode(&body, &centroids_path, header.body_offset)?;
        if file.quantizer.dim != dim
            || u64::from(file.docs) != config.docs
            || file.quantizer.leaves() != config.leaves
        {
            return Err(CellarError::corrupted(
                &centroids_path,
                0,
                format!("the centroids disagree with {TOKENS_CONFIG_FILE}; {}", rebuild_hint(index_dir)),
            ));
        }
        let lists_path = dir.join(FileKind::TokenLists.file_name());
        if !lists_path.exists() {
            return Err(missing(&lists_path, index_dir));
        }
        cellar_core::format::fsio::open_checked(&lists_path, FileKind::TokenLists)?;
        let len = std::fs::metadata(&lists_path).map_or(u64::MAX, |m| m.len());
        let kind = if len <= LISTS_IN_RAM_MAX { ReaderKind::Ram } else { options.kind };
        let lists = FileSlice::open(&lists_path, &ReaderOptions { kind, ..options.clone() })?;
        for (j, e) in file.lists.iter().enumerate() {
            // A list holds one posting per token (a document with several tokens in a leaf is
            // in its list several times): bounded by the tokens, not the documents.
            if e.offset + u64::from(e.bytes) > lists.len() || u64::from(e.count) > config.tokens {
                return Err(CellarError::corrupted(
                    &centroids_path,
                    0,
                    format!(
                        "leaf {j}'s list lies outside {} or holds more than the {} postings of the stage",
                        lists_path.display(),
                        config.tokens
                    ),
                ));
            }
        }
        let checked = (0..file.lists.len().div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        Ok(Some(TokenStage {
            config,
            quantizer: file.quantizer,
            entries: file.lists,
            lists,
            written: Mutex::new(Arc::new(WrittenLists { end: file.docs, lists: HashMap::new() })),
            checked,
        }))
    }

    pub fn config(&self) -> &TokensConfig {
        &self.config
    }

    pub fn quantizer(&self) -> &Quantizer {
        &self.quantizer
    }

    /// Bytes this stage holds in RAM: the tree, the directory, the lists file when read into
    /// RAM, and the written documents' lists.
    pub fn ram_bytes(&self) -> u64 {
        let q = &self.quantizer;
        (q.tops.len() * 4 + q.starts.len() * 4 + q.leaves.len() + self.entries.len() * layout::ENTRY_BYTES)
            as u64
            + self.lists.ram_bytes()
            + self.written_ram_bytes()
    }

    /// Bytes of the lists of documents written past the ids it covers, assigned in RAM
    /// (`catch_up`) until a retrain takes them into the lists on disk.
    pub fn written_ram_bytes(&self) -> u64 {
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written.lists.values().map(|l| (l.ids.len() * 6 + l.codes.len() + 64) as u64).sum()
    }

    /// Every byte of the lists file against its body checksum, then every list against its own
    /// (`cellar inspect --verify`); the postings count.
    pub fn verify(&self) -> Result<u64> {
        let path = self.lists.path().to_path_buf();
        let (file, header) = cellar_core::format::fsio::open_checked(&path, FileKind::TokenLists)?;
        cellar_core::format::fsio::verify_body(&file, &path, &header)?;
        let mut postings = 0u64;
        for (first, chunk) in self.entries.chunks(1024).enumerate() {
            let extents: Vec<Extent> =
                chunk.iter().map(|e| Extent { offset: e.offset, len: e.bytes as usize }).collect();
            let batch = self.lists.read_batch(&extents)?;
            for (i, e) in chunk.iter().enumerate() {
                if crc32c::crc32c(batch.get(i)) != e.crc {
                    let leaf = first * 1024 + i;
                    return Err(CellarError::corrupted(
                        &path,
                        e.offset,
                        format!("leaf {leaf}'s list fails its checksum"),
                    ));
                }
                postings += u64::from(e.count);
            }
        }
        Ok(postings)
    }

    /// Assigns the written documents `from..end` not yet assigned: `tokens(id)` gives a
    /// document's token vectors in the store's space, or `None` for one deleted (never assigned,
    /// never searched again).
    pub fn catch_up(
        &self,
        isa: Isa,
        end: u32,
        tokens: &dyn Fn(DocId) -> Result<Option<Vec<f32>>>,
    ) -> Result<()> {
        let mut guard = self
            .written
            .lock()
            .map_err(|_| CellarError::internal("the token stage's written lists were poisoned"))?;
        if guard.end >= end {
            return Ok(());
        }
        let mut next = (**guard).clone();
        let dim = self.quantizer.dim;
        let mut code = vec![0u8; codes::code_bytes(dim)];
        for id in next.end..end {
            let Some(vectors) = tokens(DocId(id))? else { continue };
            for v in vectors.chunks_exact(dim) {
                let leaf = self.quantizer.assign(isa, v);
                let factor = codes::encode(v, &self.quantizer.leaf_values(leaf as usize), &mut code);
                let list = next.lists.entry(leaf).or_default();
                list.ids.push(id);
                list.codes.extend_from_slice(&code);
                list.factors.extend_from_slice(&factor.to_le_bytes());
            }
        }
        next.end = end;
        *guard = Arc::new(next);
        Ok(())
    }

    /// The `depth` best documents for the query `tokens` (store space, row after row) by the
    /// stage's approximate score; `skip(id)` leaves out deleted or filtered documents (called
    /// only when `restricted`). Written documents must have been caught up to `end`. `early`,
    /// when given, is handed the best so far once its step of the postings is scored.
    #[allow(clippy::too_many_arguments)]
    pub fn candidates(
        &self,
        isa: Isa,
        tokens: &[f32],
        query: TokenQuery,
        end: u32,
        restricted: bool,
        skip: &dyn Fn(u32) -> bool,
        mut early: Option<EarlyGuess<'_>>,
    ) -> Result<(Vec<Scored>, TokenStats)> {
        let start = Instant::now();
        let mut stats = TokenStats::default();
        // Each query token's leaves down to the imputed one, whose score is its floor: imputed to
        // a document without a token in the probed leaves (the first `nprobe`).
        let mut probed = self.quantizer.probe(isa, tokens, query.nprobe.max(query.impute), query.route);
        let floors: Vec<f32> =
            std::iter::once(0.0).chain(probed.iter().map(|p| p.last().map_or(0.0, |l| l.1))).collect();
        probed.iter_mut().for_each(|p| p.truncate(query.nprobe));
        // Every distinct leaf's list, read once in one batch.
        let mut leaves: Vec<u32> = probed.iter().flatten().map(|(j, _)| *j).collect();
        leaves.sort_unstable();
        leaves.dedup();
        let extents: Vec<Extent> = leaves
            .iter()
            .map(|&j| Extent {
                offset: self.entries[j as usize].offset,
                len: self.entries[j as usize].bytes as usize,
            })
            .collect();
        let batch = self.lists.read_batch(&extents)?;
        let io: ReadStats = batch.stats();
        (stats.lists, stats.bytes_read, stats.read_calls) = (leaves.len(), io.bytes, io.read_calls);
        let written = self
            .written
            .lock()
            .map_err(|_| CellarError::internal("the token stage's written lists were poisoned"))?
            .clone();
        let dim = self.quantizer.dim;
        let code_bytes = codes::code_bytes(dim);
        let mut read = Vec::with_capacity(leaves.len());
        let mut ids: Vec<u32> = Vec::new();
        for (i, &j) in leaves.iter().enumerate() {
            let entry = self.entries[j as usize];
            let bytes = batch.get(i);
            let path = self.lists.path();
            let (word, bit) = (&self.checked[j as usize / 64], 1u64 << (j % 64));
            if word.load(Ordering::Relaxed) & bit == 0 {
                if crc32c::crc32c(bytes) != entry.crc {
                    return Err(CellarError::corrupted(
                        path,
                        entry.offset,
                        format!("leaf {j}'s list fails its checksum"),
                    ));
                }
                word.fetch_or(bit, Ordering::Relaxed);
            }
            let n = entry.count as usize;
            let first = ids.len();
            let used = lists::decode_at(bytes, n, &mut ids, path, entry.offset)?;
            if bytes.len() != used + n * (code_bytes + 2) {
                return Err(CellarError::corrupted(
                    path,
                    entry.offset,
                    format!("leaf {j}'s list holds {} bytes, not those of {n} postings", bytes.len()),
                ));
            }
            let (codes, factors) = bytes[used..].split_at(n * code_bytes);
            read.push((first..ids.len(), codes, factors));
        }
        let imputed: f32 = floors.iter().sum();
        let tables: Vec<SignTables> =
            tokens.chunks_exact(dim).take(probed.len()).map(SignTables::new).collect();
        // Every (query token, probed leaf) pair's postings, token after token.
        let mut runs: Vec<Run> = Vec::new();
        for (t, leaves_of_t) in probed.iter().enumerate() {
            let mark = (t + 1) as u16;
            for &(j, score) in leaves_of_t {
                let (range, codes, factors) = &read[leaves.binary_search(&j).expect("probed leaf read")];
                stats.postings += range.len() as u64;
                let ids = &ids[range.clone()];
                runs.push(Run {
                    mark,
                    score,
                    ids,
                    codes,
                    factors,
                    at: 0,
                    block: usize::MAX,
                    estimates: [0.0; signs::BLOCK],
                });
                if let Some(w) = written.lists.get(&j) {
                    let ids = &w.ids[..w.ids.partition_point(|&id| id < end)];
                    runs.push(Run {
                        mark,
                        score,
                        ids,
                        codes: &w.codes,
                        factors: &w.factors,
                        at: 0,
                        block: usize::MAX,
                        estimates: [0.0; signs::BLOCK],
                    });
                }
            }
        }
        let best = SCRATCH.with(|cell| {
            let mut s = cell.borrow_mut();
            let Scratch { acc, touched } = &mut *s;
            acc.resize(WINDOW_DOCS as usize, Acc::default());
            // One more than a window's documents: a posting writes its id before it is known
            // whether the document is new.
            touched.resize(WINDOW_DOCS as usize + 1, 0);
            let mut met = 0usize;
            let mut top = TopK::new(query.depth);
            let (total, mut taken) = (runs.iter().map(|r| r.ids.len() as u64).sum::<u64>().max(1), 0u64);
            // Window after window of ids, skipping those no list reaches.
            while let Some(first) = runs.iter().filter_map(|r| r.ids.get(r.at)).min() {
                let low = first - first % WINDOW_DOCS;
                let high = low.saturating_add(WINDOW_DOCS);
                for run in runs.iter_mut() {
                    let table = &tables[run.mark as usize - 1];
                    while let Some(&id) = run.ids.get(run.at) {
                        if id >= high {
                            break;
                        }
                        let k = run.at;
                        run.at += 1;
                        taken += 1;
                        if restricted && skip(id) {
                            continue;
                        }
                        let estimate = run.estimate(isa, table, k);
                        // Without a branch on what the accumulator held (whether this query
                        // token met the document already is a coin toss for the predictor):
                        // the same token keeps its best, another one is settled first.
                        let a = &mut acc[(id - low) as usize];
                        let same = a.token == run.mark;
                        touched[met] = id;
                        met += usize::from(a.token == 0);
                        let settled = a.settled(&floors);
                        a.gain = if same { a.gain } else { settled };
                        a.best = if same { a.best.max(estimate) } else { estimate };
                        a.token = run.mark;
                    }
                }
                stats.scored += met;
                for &id in &touched[..met] {
                    let a = &mut acc[(id - low) as usize];
                    top.push(DocId(id), imputed + a.settled(&floors));
                    *a = Acc::default();
                }
                met = 0;
                let share = taken as f64 / total as f64;
                if let Some(guess) = early.take_if(|g| share >= f64::from(g.step)) {
                    (guess.take)(top.best((share * guess.wanted as f64).ceil() as usize));
                }
            }
            top.into_sorted()
        });
        stats.ms = ms_since(start);
        Ok((best, stats))
    }
}

fn missing(path: &Path, index_dir: &Path) -> CellarError {
    CellarError::corrupted(
        path,
        0,
        format!(
            "missing: {TOKENS_CONFIG_FILE} commits a token stage of which this file is gone; {}",
            rebuild_hint(index_dir)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// A run's estimates come block by block of 32 postings (the SIMD kernel where a block is
    /// full and the codes 16 bytes long): every posting, a partial last block included, gets
    /// what the scalar reference gives it, on every level this CPU has.
    #[test]
    fn a_run_estimates_every_posting_as_the_reference_does_across_blocks() {
        let mut rng = StdRng::seed_from_u64(9);
        let dim = 128;
        let cb = codes::code_bytes(dim);
        let n = 3 * signs::BLOCK + 4;
        let codes: Vec<u8> = (0..n * cb).map(|_| rng.gen()).collect();
        let factors: Vec<u8> = (0..n)
            .flat_map(|_| half::f16::from_f32(rng.gen_range(0.0f32..0.3)).to_bits().to_le_bytes())
            .collect();
        let ids: Vec<u32> = (0..n as u32).collect();
        let query: Vec<f32> = (0..dim).map(|_| rng.gen_range(-0.2f32..0.2)).collect();
        let tables = SignTables::new(&query);
        for isa in Isa::available() {
            let mut run = Run {
                mark: 1,
                score: 0.5,
                ids: &ids,
                codes: &codes,
                factors: &factors,
                at: 0,
                block: usize::MAX,
                estimates: [0.0; signs::BLOCK],
            };
            for k in 0..n {
                let mut want = [0f32];
                signs::estimate_scalar(
                    &tables,
                    0.5,
                    &codes[k * cb..(k + 1) * cb],
                    &factors[2 * k..2 * k + 2],
                    &mut want,
                );
                let got = run.estimate(isa, &tables, k);
                assert_eq!(
                    got.to_bits(),
                    want[0].to_bits(),
                    "{} posting {k}: {got} vs {}",
                    isa.name(),
                    want[0]
                );
            }
        }
    }
}
