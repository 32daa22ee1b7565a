//! A segment: documents written to an index since its build, flushed from the memtable into
//! the same files a build writes (a vector store in the base's codec, `pooled.bin`, `texts.bin`
//! and `text_offsets.bin`), in `live/<name>/`. Its documents hold the consecutive internal ids
//! `first..first + docs`; a deleted one stays until a merge drops it (the tombstones say which).
//! A segment is written under a temporary name and renamed whole, so it is there complete or
//! not at all; the live manifest lists it only after that.

use std::path::Path;
use std::sync::Arc;

use cellar_core::codec::Codec;
use cellar_core::format::fsio::sync_dir;
use cellar_core::io::ReaderOptions;
use cellar_core::store::{StoreWriter, VectorStore};
use cellar_core::{CellarError, DocId, IoContext, Result};

use crate::index::VECTORS_DIR;
use crate::live::batch::LiveDoc;
use crate::pooled::{PooledMatrix, PooledWriter};
use crate::texts::{TextsReader, TextsWriter};

/// Suffix of a segment being written.
const WRITING_SUFFIX: &str = ".writing";

/// An open segment.
pub(crate) struct Segment {
    pub name: String,
    pub first: DocId,
    pub store: VectorStore,
    pub texts: TextsReader,
    pub pooled: PooledMatrix,
    /// Each document's nearest IVF centroid (when the index has an IVF).
    pub clusters: Vec<u32>,
}

impl Segment {
    /// Writes `docs` (consecutive ids) as segment `name` of `live`.
    pub fn write(
        live: &Path,
        name: &str,
        codec: Arc<dyn Codec>,
        model_dim: usize,
        docs: &[Arc<LiveDoc>],
    ) -> Result<()> {
        let dir = live.join(name);
        let tmp = live.join(format!("{name}{WRITING_SUFFIX}"));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).at(&tmp)?;
        }
        std::fs::create_dir_all(&tmp).at(&tmp)?;
        let mut store = StoreWriter::create(&tmp.join(VECTORS_DIR), codec, false)?;
        let mut pooled = PooledWriter::create(&tmp, model_dim)?;
        let mut texts = TextsWriter::create(&tmp)?;
        for doc in docs {
            store.add_encoded(doc.n_tokens as usize, &doc.tokens)?;
            let row: Vec<f32> =
                doc.pooled.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
            pooled.add(&row)?;
            texts.add(&doc.doc)?;
        }
        store.finish()?;
        pooled.finish()?;
        texts.finish()?;
        sync_dir(&tmp)?;
        std::fs::rename(&tmp, &dir).at(&dir)?;
        sync_dir(live)
    }

    /// Opens segment `name` of `live`, which must hold `docs` documents from `first` on.
    pub fn open(
        live: &Path,
        name: &str,
        first: DocId,
        docs: usize,
        model_dim: usize,
        reader: &ReaderOptions,
        assign: &dyn Fn(&[f32]) -> Option<u32>,
    ) -> Result<Segment> {
        let dir = live.join(name);
        let store = VectorStore::open(&dir.join(VECTORS_DIR), reader)?;
        let texts = TextsReader::open(&dir)?;
        let pooled = PooledMatrix::load(&dir, model_dim, docs)?;
        if store.len() != docs || texts.len() != docs {
            return Err(CellarError::corrupted(
                &dir,
                0,
                format!(
                    "the live manifest gives segment {name} {docs} documents; it holds {} vectors and {} texts",
                    store.len(),
                    texts.len()
                ),
            ));
        }
        let clusters = (0..docs).filter_map(|i| assign(&pooled.row(i))).collect();
        Ok(Segment { name: name.to_string(), first, store, texts, pooled, clusters })
    }

    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// The segment's own record number of `id`, when it holds it.
    pub fn local(&self, id: DocId) -> Option<DocId> {
        let local = id.0.checked_sub(self.first.0)?;
        ((local as usize) < self.len()).then_some(DocId(local))
    }
}

/// Whether `name` (an entry of `live/`) is a segment left half written by a crash.
pub(crate) fn is_unfinished(name: &str) -> bool {
    name.ends_with(WRITING_SUFFIX)
}
