//! Streams documents into a new store directory with bounded memory: records go straight to
//! `vectors.bin` (under a temp name) and entries to `offsets.bin`; only the current record is
//! buffered. `finish` commits each file atomically and writes the manifest last.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{validate_vector, Codec};
use crate::error::{CellarError, IoContext, Result};
use crate::format::fsio::{write_small_file, BodyWriter, TMP_SUFFIX};
use crate::format::manifest::{Counts, MANIFEST_FILE};
use crate::format::offsets::OffsetEntry;
use crate::format::record;
use crate::format::{FileEntry, FileHeader, FileKind, Manifest, FORMAT_VERSION, PAGE_BYTES};
use crate::ids::DocId;

/// Largest number of tokens one document may have.
pub const MAX_TOKENS_PER_DOC: usize = 1 << 20;

/// Tokens per core below which a costly encoding stays on one thread.
const PARALLEL_MIN_TOKENS: usize = 32;

pub struct StoreWriter {
    dir: PathBuf,
    codec: Arc<dyn Codec>,
    has_pooled: bool,
    vectors: BodyWriter,
    offsets: BodyWriter,
    record: Vec<u8>,
    docs: u64,
    tokens: u64,
    /// Threads a document's tokens are encoded on: the cores for a costly codec, else 1
    /// (decided once: asking the OS for the cores is not free).
    encode_threads: usize,
    /// Whether a store of no documents may be finished ([`StoreWriter::allow_empty`]).
    empty_ok: bool,
    /// Records back to back ([`StoreWriter::packed`]) instead of by the page rule.
    packed: bool,
}

impl StoreWriter {
    /// Starts a store in `dir` (created if missing). Refuses a directory that already holds an
    /// index; removes temp files an interrupted build left behind.
    pub fn create(dir: &Path, codec: Arc<dyn Codec>, has_pooled: bool) -> Result<Self> {
        std::fs::create_dir_all(dir).at(dir)?;
        if dir.join(MANIFEST_FILE).exists() {
            return Err(CellarError::invalid(format!(
                "{} already holds an index; choose an empty directory",
                dir.display()
            )));
        }
        remove_stale_temp_files(dir)?;
        let vectors = BodyWriter::create(
            &dir.join(FileKind::Vectors.file_name()),
            FileKind::Vectors,
            PAGE_BYTES as u64,
        )?;
        let offsets = BodyWriter::create(
            &dir.join(FileKind::Offsets.file_name()),
            FileKind::Offsets,
            crate::format::HEADER_BYTES as u64,
        )?;
        let encode_threads = if codec.costly_encode() {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            1
        };
        Ok(StoreWriter {
            encode_threads,
            dir: dir.to_path_buf(),
            codec,
            has_pooled,
            vectors,
            offsets,
            record: Vec::new(),
            docs: 0,
            tokens: 0,
            empty_ok: false,
            packed: false,
        })
    }

    /// Places records back to back (`record::place_packed`), each one 8-byte aligned, instead of
    /// keeping each small record within one page: for a store whose records are read in long
    /// runs (a grouped index's segment reads a group's records together), where a record that
    /// straddles two pages costs nothing and the page rule's padding is up to half the bytes.
    pub fn packed(mut self) -> Self {
        self.packed = true;
        self
    }

    /// Lets [`StoreWriter::finish`] commit a store of no documents (the base of an index created
    /// empty, whose documents all arrive as writes); otherwise finishing one is refused, as a
    /// build that read nothing is a mistake.
    pub fn allow_empty(mut self) -> Self {
        self.empty_ok = true;
        self
    }

    /// Appends one document: `tokens` is `n * dim` values (n >= 1), token-major; `pooled` must be
    /// given exactly when the store was created with pooled vectors. Returns the document's id.
    /// A rejected document leaves the writer usable and writes nothing.
    pub fn add(&mut self, tokens: &[f32], pooled: Option<&[f32]>) -> Result<DocId> {
        self.add_passages(tokens, pooled, &[])
    }

    /// [`StoreWriter::add`] of a document split into passages ending at `ends` (increasing
    /// token counts, the last the document's; none or one: a single passage, no table).
    pub fn add_passages(&mut self, tokens: &[f32], pooled: Option<&[f32]>, ends: &[u32]) -> Result<DocId> {
        self.validate(self.docs, tokens, pooled)?;
        let dim = self.codec.dim();
        let n_tokens = tokens.len() / dim;
        let table = record::check_passages(ends, n_tokens)
            .map_err(|detail| CellarError::invalid(format!("document {}: {detail}", self.docs)))?;
        self.record.clear();
        record::encode_header(n_tokens as u32, self.has_pooled, table.is_some(), &mut self.record);
        if let Some(p) = pooled {
            self.codec.encode(p, &mut self.record);
        }
        if let Some(ends) = table {
            record::encode_passages(ends, &mut self.record);
        }
        self.encode_tokens(tokens, n_tokens);
        self.write_record(n_tokens)
    }

    /// [`StoreWriter::add_passages`] of several documents without pooled vectors (`(tokens,
    /// passage ends)` each): the same records, byte for byte. A costly codec encodes them on the
    /// cores together, whole documents per thread, so a call starts at most one thread per core
    /// instead of `add_passages`' threads per document (a build's batch is ~30 documents of a few
    /// hundred tokens, too short to pay for starting threads each). Every document is checked
    /// first: a rejected one, named as `add_passages` names it, writes nothing of the call.
    pub fn add_many(&mut self, docs: &[(&[f32], &[u32])]) -> Result<Vec<DocId>> {
        if let [(tokens, ends)] = docs {
            return Ok(vec![self.add_passages(tokens, None, ends)?]);
        }
        let dim = self.codec.dim();
        let mut tables = Vec::with_capacity(docs.len());
        for (i, (tokens, ends)) in docs.iter().enumerate() {
            let doc = self.docs + i as u64;
            self.validate(doc, tokens, None)?;
            let table = record::check_passages(ends, tokens.len() / dim)
                .map_err(|detail| CellarError::invalid(format!("document {doc}: {detail}")))?;
            tables.push(table);
        }
        let tokens: Vec<&[f32]> = docs.iter().map(|(t, _)| *t).collect();
        let encoded = self.encode_documents(&tokens);
        let mut ids = Vec::with_capacity(docs.len());
        for (((tokens, _), table), bytes) in docs.iter().zip(tables).zip(encoded) {
            let n_tokens = tokens.len() / dim;
            self.record.clear();
            record::encode_header(n_tokens as u32, false, table.is_some(), &mut self.record);
            if let Some(ends) = table {
                record::encode_passages(ends, &mut self.record);
            }
            self.record.extend_from_slice(&bytes);
            ids.push(self.write_record(n_tokens)?);
        }
        Ok(ids)
    }

    /// Each of `docs` (whole vectors: documents, or runs of one document's tokens) encoded
    /// (`Codec::encode_many`), on up to `encode_threads` threads that take runs of whole
    /// entries of about equal token counts.
    fn encode_documents(&self, docs: &[&[f32]]) -> Vec<Vec<u8>> {
        let codec = &self.codec;
        let encode = |tokens: &[f32]| {
            let mut bytes = Vec::with_capacity(tokens.len() / codec.dim() * codec.bytes_per_vector());
            codec.encode_many(tokens, &mut bytes);
            bytes
        };
        let total: usize = docs.iter().map(|t| t.len()).sum();
        let parts = self.encode_threads.min(total / codec.dim() / PARALLEL_MIN_TOKENS).min(docs.len());
        if parts <= 1 {
            return docs.iter().map(|tokens| encode(tokens)).collect();
        }
        // Cut the documents into `parts` runs of about total / parts values each.
        let mut runs: Vec<&[&[f32]]> = Vec::with_capacity(parts);
        let (mut start, mut sum) = (0, 0);
        for (i, tokens) in docs.iter().enumerate() {
            sum += tokens.len();
            if sum * parts >= total * (runs.len() + 1) && runs.len() + 1 < parts {
                runs.push(&docs[start..=i]);
                start = i + 1;
            }
        }
        runs.push(&docs[start..]);
        let encode_run = |run: &[&[f32]]| run.iter().map(|t| encode(t)).collect::<Vec<_>>();
        std::thread::scope(|scope| {
            let (first, rest) = runs.split_first().expect("at least one run");
            let handles: Vec<_> = rest.iter().map(|run| scope.spawn(move || encode_run(run))).collect();
            let mut out = encode_run(first);
            for handle in handles {
                out.extend(handle.join().expect("an encoding thread panicked"));
            }
            out
        })
    }

    /// Places the record in `self.record` on its page(s) and writes its offsets entry.
    fn write_record(&mut self, n_tokens: usize) -> Result<DocId> {
        let offset = match self.packed {
            true => record::place_packed(self.vectors.position()),
            false => record::place(self.vectors.position(), self.record.len() as u64),
        };
        let padding = (offset - self.vectors.position()) as usize;
        self.vectors.write(&[0u8; PAGE_BYTES][..padding])?;
        self.vectors.write(&self.record)?;
        let entry =
            OffsetEntry { offset, len: self.record.len() as u32, crc32c: crc32c::crc32c(&self.record) };
        self.offsets.write(&entry.encode())?;
        let id = DocId(self.docs as u32);
        self.docs += 1;
        self.tokens += n_tokens as u64;
        Ok(id)
    }

    /// Appends one document whose tokens the store's codec has already encoded (`n_tokens`
    /// vectors of `codec.bytes_per_vector()` bytes each, as `Codec::encode_many` writes them):
    /// the record is byte for byte the one `add` writes for the same vectors, without encoding
    /// them again (a write-ahead log keeps documents encoded). Stores with pooled vectors
    /// take documents through `add` only.
    pub fn add_encoded(&mut self, n_tokens: usize, encoded: &[u8]) -> Result<DocId> {
        let doc = self.docs;
        if self.has_pooled {
            return Err(CellarError::invalid(format!(
                "document {doc}: a store with pooled vectors takes documents through add"
            )));
        }
        if n_tokens == 0 || n_tokens > MAX_TOKENS_PER_DOC {
            return Err(CellarError::invalid(format!(
                "document {doc}: {n_tokens} tokens (1 to {MAX_TOKENS_PER_DOC} allowed)"
            )));
        }
        if encoded.len() != n_tokens * self.codec.bytes_per_vector() {
            return Err(CellarError::invalid(format!(
                "document {doc}: {} encoded bytes for {n_tokens} tokens of {} bytes",
                encoded.len(),
                self.codec.bytes_per_vector()
            )));
        }
        if self.docs >= u32::MAX as u64 {
            return Err(CellarError::invalid("a store holds at most 2^32 - 1 documents"));
        }
        self.record.clear();
        record::encode_header(n_tokens as u32, false, false, &mut self.record);
        self.record.extend_from_slice(encoded);
        self.write_record(n_tokens)
    }

    /// Appends the encoding of every token to the record: spread over the cores (in token
    /// order) when the codec's encoding is costly and the document long enough to pay for it.
    fn encode_tokens(&mut self, tokens: &[f32], n_tokens: usize) {
        let dim = self.codec.dim();
        let parts = self.encode_threads.min(n_tokens / PARALLEL_MIN_TOKENS);
        if parts <= 1 {
            self.codec.encode_many(tokens, &mut self.record);
            return;
        }
        // Token runs encode to the bytes of the whole (each token's code is its own).
        let pieces: Vec<&[f32]> = tokens.chunks(n_tokens.div_ceil(parts) * dim).collect();
        for bytes in self.encode_documents(&pieces) {
            self.record.extend_from_slice(&bytes);
        }
    }

    /// Checks document number `doc` (`self.docs` for the next one) as `add_passages` takes it.
    fn validate(&self, doc: u64, tokens: &[f32], pooled: Option<&[f32]>) -> Result<()> {
        let dim = self.codec.dim();
        if doc >= u32::MAX as u64 {
            return Err(CellarError::invalid("a store holds at most 2^32 - 1 documents"));
        }
        if tokens.is_empty() {
            return Err(CellarError::invalid(format!("document {doc} is empty: it has no token vectors")));
        }
        if !tokens.len().is_multiple_of(dim) {
            return Err(CellarError::invalid(format!(
                "document {doc}: {} values is not a whole number of {dim}-dimensional token vectors",
                tokens.len()
            )));
        }
        let n_tokens = tokens.len() / dim;
        if n_tokens > MAX_TOKENS_PER_DOC {
            return Err(CellarError::invalid(format!(
                "document {doc} has {n_tokens} tokens, more than the limit of {MAX_TOKENS_PER_DOC}"
            )));
        }
        for (t, v) in tokens.chunks_exact(dim).enumerate() {
            validate_vector(v, dim, || format!("document {doc}, token {t}"))?;
        }
        match (pooled, self.has_pooled) {
            (Some(p), true) => validate_vector(p, dim, || format!("document {doc}, pooled vector")),
            (None, false) => Ok(()),
            (Some(_), false) => Err(CellarError::invalid(format!(
                "document {doc} has a pooled vector but the store was created without pooled vectors"
            ))),
            (None, true) => Err(CellarError::invalid(format!(
                "document {doc} lacks the pooled vector this store was created with"
            ))),
        }
    }

    pub fn docs(&self) -> u64 {
        self.docs
    }

    /// Pads the last page, commits every file and writes the manifest (the commit point). A
    /// store of no documents is refused unless [`StoreWriter::allow_empty`] said otherwise.
    pub fn finish(mut self) -> Result<Manifest> {
        if self.docs == 0 && !self.empty_ok {
            return Err(CellarError::invalid("a store needs at least one document"));
        }
        let page = PAGE_BYTES as u64;
        let tail = (self.vectors.position().next_multiple_of(page) - self.vectors.position()) as usize;
        self.vectors.write(&vec![0u8; tail])?;
        let pages = (self.vectors.position() - page) / page;
        let codec_path = self.dir.join(FileKind::CodecParams.file_name());
        let files = [
            (FileKind::Vectors, self.vectors.finish()?),
            (FileKind::Offsets, self.offsets.finish()?),
            (
                FileKind::CodecParams,
                write_small_file(&codec_path, FileKind::CodecParams, &self.codec.params())?,
            ),
        ];
        let manifest = Manifest {
            format_version: FORMAT_VERSION,
            dim: self.codec.dim(),
            codec: self.codec.kind(),
            bytes_per_token: self.codec.bytes_per_vector(),
            has_pooled: self.has_pooled,
            page_bytes: PAGE_BYTES,
            counts: Counts { docs: self.docs, tokens: self.tokens, pages },
            files: files.iter().map(|(kind, header)| file_entry(*kind, header)).collect(),
            created_by: concat!("cellar ", env!("CARGO_PKG_VERSION")).to_string(),
        };
        manifest.write(&self.dir)?;
        Ok(manifest)
    }
}

fn file_entry(kind: FileKind, header: &FileHeader) -> FileEntry {
    FileEntry {
        name: kind.file_name().to_string(),
        kind: kind.name().to_string(),
        bytes: header.body_offset + header.body_len,
        body_crc32c: header.body_crc32c,
    }
}

fn remove_stale_temp_files(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).at(dir)? {
        let path = entry.at(dir)?.path();
        if path.to_string_lossy().ends_with(TMP_SUFFIX) {
            std::fs::remove_file(&path).at(&path)?;
        }
    }
    Ok(())
}
