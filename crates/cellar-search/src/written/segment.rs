//! A segment: documents written to an index since its build, in the same files a build writes
//! (a vector store in the base's codec, `pooled.bin`, `texts.bin` and `text_offsets.bin`) plus
//! `ids.bin`, their internal ids (ascending u32), in `live/<name>/`. A flush writes the
//! memtable's documents (consecutive ids); a merge writes the surviving documents of several
//! segments (ids with gaps where deleted ones were dropped). A segment is written under a
//! temporary name and renamed whole, so it is there complete or not at all; the live manifest
//! lists it only after that. A grouped index's segment keeps its records in (group, id) order, so
//! each group is one run of records, and says where in `groups.bin` (`groups`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cellar_core::codec::Codec;
use cellar_core::format::fsio::{read_small_file, sync_dir, write_small_file};
use cellar_core::format::FileKind;
use cellar_core::io::ReaderOptions;
use cellar_core::store::{StoreWriter, VectorStore};
use cellar_core::{CellarError, DocId, IoContext, Result};

use crate::corpus::Document;
use crate::names::VECTORS_DIR;
use crate::pooled::{PooledMatrix, PooledWriter};
use crate::texts::{TextsReader, TextsWriter};
use crate::written::groups::Groups;

/// Suffix of a segment being written.
const WRITING_SUFFIX: &str = ".writing";

/// An open segment.
pub(crate) struct Segment {
    pub name: String,
    /// Internal ids of its records: record `i` is document `ids[i]`. Ascending, but in a
    /// grouped index's segment ascending within each group's run.
    pub ids: Vec<u32>,
    /// A grouped index's segment: its groups' runs, and its record numbers in id order (for
    /// `local`); `None` otherwise.
    pub groups: Option<Groups>,
    by_id: Option<Vec<u32>>,
    /// Its smallest and largest internal id.
    min: u32,
    max: u32,
    pub store: VectorStore,
    pub texts: TextsReader,
    /// Pooled vectors, mapped (the page cache holds them, not the process).
    pub pooled: PooledMatrix,
    /// Each record's nearest IVF centroid (when the index has an IVF).
    pub clusters: Vec<u32>,
}

/// Streams documents into a new segment.
pub(crate) struct SegmentWriter {
    live: PathBuf,
    name: String,
    tmp: PathBuf,
    store: StoreWriter,
    pooled: PooledWriter,
    texts: TextsWriter,
    ids: Vec<u32>,
    /// A grouped index's: the groups' runs so far.
    groups: Option<Groups>,
}

impl SegmentWriter {
    /// A new segment; `grouped`: a grouped index's, its documents added in (group, id) order.
    pub fn create(
        live: &Path,
        name: &str,
        codec: Arc<dyn Codec>,
        model_dim: usize,
        grouped: bool,
    ) -> Result<SegmentWriter> {
        let tmp = live.join(format!("{name}{WRITING_SUFFIX}"));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).at(&tmp)?;
        }
        std::fs::create_dir_all(&tmp).at(&tmp)?;
        let store = StoreWriter::create(&tmp.join(VECTORS_DIR), codec, false)?;
        Ok(SegmentWriter {
            live: live.to_path_buf(),
            name: name.to_string(),
            // A grouped segment is read a group's run at a time: its records are packed.
            store: if grouped { store.packed() } else { store },
            pooled: PooledWriter::create(&tmp, model_dim)?,
            texts: TextsWriter::create(&tmp)?,
            tmp,
            ids: Vec::new(),
            groups: grouped.then(Groups::default),
        })
    }

    /// Appends document `id` (above every id added before; in a grouped segment, in a group
    /// after every group added before, or above every id of its own group): its encoded token
    /// vectors, its pooled vector (f16 little-endian) and its text.
    pub fn add(
        &mut self,
        id: DocId,
        n_tokens: usize,
        tokens: &[u8],
        pooled: &[u8],
        doc: &Document,
    ) -> Result<()> {
        let same_run = match (&mut self.groups, &doc.group) {
            (Some(groups), Some(group)) => {
                let before = groups.len();
                groups
                    .push(group)
                    .map_err(|e| CellarError::internal(format!("segment {}: {e}", self.name)))?;
                groups.len() == before
            }
            (None, None) => true,
            _ => {
                return Err(CellarError::internal(format!(
                    "segment {}: document {} has a group only where the index is grouped",
                    self.name, id.0
                )))
            }
        };
        if same_run && self.ids.last().is_some_and(|last| *last >= id.0) {
            return Err(CellarError::internal(format!(
                "segment {}: ids out of order at {}",
                self.name, id.0
            )));
        }
        self.store.add_encoded(n_tokens, tokens)?;
        self.pooled.add_f16(pooled)?;
        self.texts.add(doc)?;
        self.ids.push(id.0);
        Ok(())
    }

    /// Commits every file, then renames the segment into place; returns its ids.
    pub fn finish(self) -> Result<Vec<u32>> {
        self.store.finish()?;
        self.pooled.finish()?;
        self.texts.finish()?;
        let body: Vec<u8> = self.ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        write_small_file(&self.tmp.join(FileKind::SegmentIds.file_name()), FileKind::SegmentIds, &body)?;
        if let Some(groups) = &self.groups {
            groups.save(&self.tmp)?;
        }
        sync_dir(&self.tmp)?;
        let dir = self.live.join(&self.name);
        std::fs::rename(&self.tmp, &dir).at(&dir)?;
        sync_dir(&self.live)?;
        Ok(self.ids)
    }
}

/// Removes what a flush that failed left of segment `name` (written or half written), best
/// effort: the manifest does not name it.
pub(crate) fn discard(live: &Path, name: &str) {
    for dir in [live.join(format!("{name}{WRITING_SUFFIX}")), live.join(name)] {
        if dir.exists() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                log::warn!(
                    "{}: not removed after a failed flush ({e}); the next open removes it",
                    dir.display()
                );
            }
        }
    }
}

impl Segment {
    /// Opens segment `name` of `live`, which must hold `docs` documents, the first (smallest)
    /// `first`; `grouped`: a grouped index's.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        live: &Path,
        name: &str,
        first: DocId,
        docs: usize,
        model_dim: usize,
        reader: &ReaderOptions,
        grouped: bool,
        assign: &dyn Fn(&[u8]) -> Option<u32>,
    ) -> Result<Segment> {
        let dir = live.join(name);
        let store = VectorStore::open(&dir.join(VECTORS_DIR), reader)?;
        let texts = TextsReader::open(&dir)?;
        let pooled = PooledMatrix::map(&dir, model_dim, docs)?;
        let ids_path = dir.join(FileKind::SegmentIds.file_name());
        let (_, body) = read_small_file(&ids_path, FileKind::SegmentIds)?;
        let ids: Vec<u32> =
            body.chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
        let groups = grouped.then(|| Groups::load(&dir, ids.len() as u32)).transpose()?;
        let by_id = groups.as_ref().map(|_| {
            let mut order: Vec<u32> = (0..ids.len() as u32).collect();
            order.sort_unstable_by_key(|r| ids[*r as usize]);
            order
        });
        // The i-th smallest id.
        let id_at = |i: usize| by_id.as_ref().map_or(ids[i], |order| ids[order[i] as usize]);
        let ascending = (1..ids.len()).all(|i| id_at(i - 1) < id_at(i));
        if store.len() != docs
            || texts.len() != docs
            || ids.len() != docs
            || ids.is_empty()
            || id_at(0) != first.0
            || !ascending
        {
            return Err(CellarError::corrupted(
                &dir,
                0,
                format!(
                    "the live manifest gives segment {name} {docs} documents from {}; it holds {} vectors, {} texts and {} ids{}",
                    first.0,
                    store.len(),
                    texts.len(),
                    ids.len(),
                    if ascending { "" } else { " out of order" }
                ),
            ));
        }
        let clusters = (0..docs).filter_map(|i| assign(pooled.row_bytes(i))).collect();
        let (min, max) = (id_at(0), id_at(ids.len() - 1));
        Ok(Segment { name: name.to_string(), ids, groups, by_id, min, max, store, texts, pooled, clusters })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Its smallest internal id.
    pub fn first(&self) -> DocId {
        DocId(self.min)
    }

    /// Its largest internal id.
    pub fn last(&self) -> DocId {
        DocId(self.max)
    }

    /// The record number of `id` in this segment, when it holds it.
    pub fn local(&self, id: DocId) -> Option<DocId> {
        match &self.by_id {
            Some(order) => {
                let at = order.binary_search_by_key(&id.0, |r| self.ids[*r as usize]).ok()?;
                Some(DocId(order[at]))
            }
            None => self.ids.binary_search(&id.0).ok().map(|i| DocId(i as u32)),
        }
    }
}

/// Whether `name` (an entry of `live/`) is a segment left half written by a crash.
pub(crate) fn is_unfinished(name: &str) -> bool {
    name.ends_with(WRITING_SUFFIX)
}
