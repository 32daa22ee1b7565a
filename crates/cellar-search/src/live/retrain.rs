//! Re-training the IVF of a living index, once written documents have moved the distribution
//! its clusters were trained on (`LiveStats::ivf_drift` past [`DRIFT_RETRAIN`]).
//!
//! `Index::retrain_ivf` holds the writer (writes wait; searches go on with the old IVF), flushes
//! the memtable, gathers the pooled vectors of every document alive — the build's and the
//! written ones — into a scratch `pooled.bin`, builds a new IVF over them aside (k-means, 1-bit
//! codes, f16 rows: `ivf::build`) and swaps it in: the directory by rename, the open `Ivf` by
//! replacing the index's handle, so a search that took the old one finishes with it. The new
//! IVF's `covers` is the next internal id: the written documents it holds are its own members
//! (the probe no longer joins them by assignment), and documents written later are assigned to
//! its centroids. Its drift baseline is its own documents' mean distance to their centroids.
//!
//! `Index::retrain_tokens` does the same for the token stage: under the writer, after a flush,
//! a new stage is built over every alive document's token vectors (the base store's and each
//! segment's, read in place: `tokens::build::build_over`), with the old stage's leaf count,
//! seed and search defaults, and swapped in. It covers the ids below the next one, so written
//! documents are in its lists on disk instead of assigned again in RAM after every open
//! (`TokenStage::catch_up`), and its leaves are trained on them too. `needs_tokens_retrain`
//! says when: [`RETRAIN_MIN_WRITTEN`] documents written since, and at least one for every
//! [`TOKENS_RETRAIN_SHARE`] the stage covers. An index without a stage gets its first this way.

use std::sync::{Arc, MutexGuard};

use cellar_core::{CellarError, DocId, IoContext, Result};

use crate::index::Index;
use crate::ivf::build::build_ivf_of;
use crate::ivf::{Ivf, IvfBuildOptions, IvfConfig};
use crate::pooled::PooledWriter;
use crate::tokens::build::{build_over, Source, BUILDING_DIR, OLD_DIR};
use crate::tokens::{TokenStage, TokensBuildOptions, TokensConfig, TOKENS_DIR};
use crate::written::state::{LiveView, Writer, DRIFT_RETRAIN};

/// Scratch directory of a retrain's pooled vectors (removed after, and by the next retrain).
pub const RETRAIN_DIR: &str = "ivf.cellar-retrain";
/// Written documents (since the IVF was trained) the automatic retrain waits for: fewer give a
/// noisy drift, and cost little to probe by assignment anyway.
pub const RETRAIN_MIN_WRITTEN: u64 = 256;
/// The token stage is retrained once the documents written since it was built are at least one
/// for every this many it covers (and [`RETRAIN_MIN_WRITTEN`]): their lists live in RAM until
/// then, rebuilt at every open, and its leaves were trained without them.
pub const TOKENS_RETRAIN_SHARE: u64 = 8;

/// What a retrain cut short left (its scratch rows, its half-built IVF): removed by the next
/// writer, which alone may retrain.
pub(crate) fn remove_leftovers(index_dir: &std::path::Path) -> Result<()> {
    for dir in [RETRAIN_DIR, crate::tokens::build::BUILDING_DIR] {
        let scratch = index_dir.join(dir);
        if scratch.exists() {
            std::fs::remove_dir_all(&scratch).at(&scratch)?;
        }
    }
    crate::ivf::build::remove_build_leftovers(index_dir)
}

impl Index {
    /// Whether the IVF should be retrained: at least [`RETRAIN_MIN_WRITTEN`] documents were
    /// written since it was trained and their drift is past [`DRIFT_RETRAIN`]. The server's
    /// background thread and `cellar add` retrain when it says so.
    pub fn needs_retrain(&self) -> bool {
        let Some(ivf) = self.current_ivf() else { return false };
        let view = self.live_view();
        let since = u64::from(view.next_id.saturating_sub(ivf.covers()));
        since >= RETRAIN_MIN_WRITTEN && self.live_stats().ivf_drift.is_some_and(|d| d > DRIFT_RETRAIN)
    }

    /// Re-trains the IVF on every document alive now (see the module's notes), with the old
    /// IVF's cluster size, sample and seed, and its search defaults but `nprobe`, which follows
    /// the new cluster count. An index without an IVF (one created empty and filled by writes)
    /// gets its first, with the default settings. Returns the new IVF's settings.
    pub fn retrain_ivf(&self) -> Result<IvfConfig> {
        let old = self.current_ivf();
        let (slot, view) = self.hold_flushed()?;
        let dim = self.config.encoder.model_dim;
        let scratch = self.dir.join(RETRAIN_DIR);
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).at(&scratch)?;
        let mut rows = PooledWriter::create(&scratch, dim)?;
        let mut ids = Vec::new();
        let base = self.pooled()?;
        for id in (0..view.base_docs).filter(|id| !view.is_deleted(DocId(*id))) {
            rows.add_f16(base.row_bytes(id as usize))?;
            ids.push(id);
        }
        for segment in &view.segments {
            for (i, id) in segment.ids.iter().enumerate().filter(|(_, id)| !view.is_deleted(DocId(**id))) {
                rows.add_f16(segment.pooled.row_bytes(i))?;
                ids.push(*id);
            }
        }
        rows.finish()?;
        let options = match &old {
            Some(old) => {
                let was = old.config();
                let mut defaults = was.search;
                defaults.nprobe = 0;
                IvfBuildOptions {
                    cluster_size: was.cluster_size,
                    train_sample: was.train_sample,
                    seed: was.seed,
                    defaults,
                    progress: false,
                }
            }
            None => IvfBuildOptions { progress: false, ..IvfBuildOptions::default() },
        };
        let pooled = scratch.join(cellar_core::format::FileKind::Pooled.file_name());
        let built = build_ivf_of(&self.dir, &pooled, dim, ids, view.next_id, &options);
        let _ = std::fs::remove_dir_all(&scratch);
        let config = built?;
        let ivf = Ivf::open(&self.dir, self.base_len() as u64, dim, &self.reader_options)?
            .ok_or_else(|| CellarError::internal("the retrained IVF is missing after its swap"))?;
        *self.ivf.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(ivf));
        // Drift and the other costly stats are measured again against the new IVF.
        *self.live.measured.lock().unwrap_or_else(|p| p.into_inner()) = None;
        drop(slot);
        log::info!(
            "retrained the IVF: {} documents in {} clusters, covering ids below {}",
            config.docs,
            config.clusters,
            view.next_id
        );
        Ok(config)
    }

    /// What a retrain starts with: the writer held (writes wait until it is dropped; searches go
    /// on), the memtable flushed, and the view that now holds every document in the base or a
    /// segment.
    fn hold_flushed(&self) -> Result<(MutexGuard<'_, Option<Writer>>, Arc<LiveView>)> {
        if self.config.grouped {
            return Err(CellarError::invalid(
                "this index is grouped: its searches are exact inside one group, with no first stage to train",
            ));
        }
        let mut slot = self.writer()?;
        let writer = slot.as_mut().ok_or_else(|| CellarError::internal("the writer was not loaded"))?;
        self.flush_locked(writer)?;
        let view = self.live_view();
        Ok((slot, view))
    }

    /// Whether the token stage should be retrained (see the module's notes).
    pub fn needs_tokens_retrain(&self) -> bool {
        let Some(stage) = self.current_tokens() else { return false };
        let covers = stage.config().docs;
        let since = u64::from(self.live_view().next_id).saturating_sub(covers);
        since >= RETRAIN_MIN_WRITTEN && since.saturating_mul(TOKENS_RETRAIN_SHARE) >= covers
    }

    /// Re-trains the token stage over every document alive now, written ones included (see the
    /// module's notes); returns the new stage's settings. An index without one (such as one
    /// created empty and filled by writes, which `cellar tokens build` cannot quantize: it reads
    /// the build's documents only) gets its first, with the default settings.
    pub fn retrain_tokens(&self) -> Result<TokensConfig> {
        let old = self.current_tokens();
        let (slot, view) = self.hold_flushed()?;
        let alive = |id: u32| !view.is_deleted(DocId(id));
        let mut sources = vec![Source {
            store: &self.store,
            docs: (0..view.base_docs).filter(|id| alive(*id)).map(|id| (DocId(id), id)).collect(),
        }];
        let mut tokens_total = self.store.manifest().counts.tokens;
        for segment in &view.segments {
            let docs = segment.ids.iter().enumerate().filter(|(_, id)| alive(**id));
            sources.push(Source {
                store: &segment.store,
                docs: docs.map(|(i, id)| (DocId(i as u32), *id)).collect(),
            });
            tokens_total += segment.store.manifest().counts.tokens;
        }
        let options = match &old {
            Some(old) => {
                let was = old.config();
                TokensBuildOptions {
                    leaves: was.leaves,
                    seed: was.seed,
                    defaults: was.search,
                    ..TokensBuildOptions::default()
                }
            }
            None => TokensBuildOptions::default(),
        };
        let built = build_over(&self.dir, &sources, tokens_total, view.next_id, &options);
        let building = self.dir.join(BUILDING_DIR);
        let config = match built {
            Ok(config) => config,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&building);
                return Err(e);
            }
        };
        crate::ivf::build::swap_dir_in(&self.dir, TOKENS_DIR, OLD_DIR, &building)?;
        let stage =
            TokenStage::open(&self.dir, self.base_len() as u64, self.store.dim(), &self.reader_options)?
                .ok_or_else(|| {
                    CellarError::internal("the retrained token stage is missing after its swap")
                })?;
        *self.tokens.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(stage));
        drop(slot);
        log::info!(
            "retrained the token stage: {} postings in {} leaves, covering ids below {}",
            config.build.postings,
            config.leaves,
            view.next_id
        );
        Ok(config)
    }
}
