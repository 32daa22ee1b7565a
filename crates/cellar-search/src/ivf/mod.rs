//! The dense first stage on disk: an IVF over one pooled vector per document (DiskBBQ-style).
//!
//! - `cellar_core::cluster::hierarchical`: balanced k-means on a sample → leaf centroids (in RAM);
//! - `rabitq` + `rotation`: 1-bit codes of each member's residual with an error-bounded
//!   inner-product estimator;
//! - `layout`: the three files under `ivf/` (centroids + table in RAM; posting blocks and the
//!   full-precision vectors on disk, read through the index's reader kind);
//! - `build`: a streaming build from `pooled.bin` (RAM: the sample, the centroids and 8 bytes per
//!   document), then `ivf/ivf.json` as its commit point;
//! - `probe`: nearest clusters first, codes scored by the estimator, an oversampled shortlist
//!   rescored with the full vectors.

pub mod build;
pub mod layout;
pub mod probe;
pub mod rabitq;
pub mod rotation;

use std::path::{Path, PathBuf};

use cellar_core::format::fsio::write_atomic;
use cellar_core::format::versioned::VersionRange;
use cellar_core::format::FileKind;
use cellar_core::{CellarError, Result};
use serde::{Deserialize, Serialize};

pub use build::{build_ivf, build_ivf_over, IvfBuildOptions};
pub use probe::{Ivf, LiveMembers, Probe, ProbeParams, ProbeStats, POSTINGS_IN_RAM_MAX};

/// Version of the `ivf/` layout.
pub const IVF_FORMAT_VERSION: u32 = 1;
/// The versions of `ivf/` (its `ivf.json`) this build reads.
pub const IVF_READABLE_VERSIONS: VersionRange = VersionRange::only(IVF_FORMAT_VERSION);
pub const IVF_DIR: &str = "ivf";
pub const IVF_CONFIG_FILE: &str = "ivf.json";
/// The IVF's binary files, which `ivf.json` commits.
pub const IVF_KINDS: [FileKind; 3] = [FileKind::IvfCentroids, FileKind::IvfPostings, FileKind::IvfVectors];

/// Query-time settings used when a request does not give them.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct IvfDefaults {
    pub nprobe: usize,
    /// The shortlist kept from the codes is `oversample x` the depth asked for (at least 100
    /// candidates when it is rescored).
    pub oversample: f32,
    /// Mode `ivf`: rescore the shortlist with the full-precision vectors (its final scores).
    pub rescore: bool,
    /// Modes `dense` and `hybrid`: rescore before MaxSim re-ranks the candidates anyway. Off by
    /// default: on SciFact it changes nDCG@10 by less than 0.002, and without it the prefetch's
    /// guess can be exact (a hit rate of 1 when the prefetch starts after the whole probe).
    #[serde(default)]
    pub rescore_before_rerank: bool,
    /// Dense and hybrid modes: start reading the likely candidates' token records while probing.
    /// Off by default: it can only hide reads behind the probe, and where the probe takes well
    /// under a millisecond (SciFact: 24 clusters) it saved nothing and, at small steps, read up to
    /// half as many bytes again (`bench/results/ivf-prefetch-scifact.md`).
    pub prefetch: bool,
    /// Fraction of `nprobe` probed before the prefetch starts, in (0, 1]. 0.5 by default: hit
    /// rates of 0.81 to 0.96 on SciFact with at most a fifth of the prefetched bytes wasted.
    pub prefetch_step: f32,
    /// Hybrid mode: IVF candidates joined to BM25's (0: BM25 only).
    pub hybrid_candidates: usize,
}

impl IvfDefaults {
    /// Checks a prefetch step: a fraction of `nprobe` in (0, 1].
    pub fn check_prefetch_step(step: f32) -> Result<()> {
        if step > 0.0 && step <= 1.0 {
            Ok(())
        } else {
            Err(CellarError::InvalidInput(format!("prefetch_step must be within (0, 1], got {step}")))
        }
    }
}

/// Sizes and times of an IVF build.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct IvfBuildReport {
    pub train_secs: f64,
    pub assign_secs: f64,
    pub write_secs: f64,
    pub total_secs: f64,
    pub centroids_bytes: u64,
    pub postings_bytes: u64,
    pub vectors_bytes: u64,
    pub smallest_cluster: usize,
    pub largest_cluster: usize,
    /// The refinement pass, run when the leaves were trained on a sample smaller than the
    /// collection (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refinement: Option<Refinement>,
}

/// One Lloyd step over every row after the sample's k-means, then every row assigned again.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Refinement {
    pub secs: f64,
    /// Mean squared distance of the rows to their centroid before and after it.
    pub mean_error_before: f64,
    pub mean_error_after: f64,
}

/// `ivf/ivf.json`: the commit point of an IVF build.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct IvfConfig {
    pub format_version: u32,
    pub dim: usize,
    pub docs: u64,
    pub clusters: usize,
    /// Target documents per cluster.
    pub cluster_size: usize,
    pub train_sample: usize,
    pub seed: u64,
    pub search: IvfDefaults,
    pub build: IvfBuildReport,
    /// A retrained IVF (`Index::retrain_ivf`) holds the documents alive when it was trained,
    /// base and written, and none after: every internal id below `covers` it does not hold was
    /// deleted before; written documents from `covers` on join it by assignment. Absent for an
    /// IVF of the build's documents (which covers them: ids below the build's count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covers: Option<u32>,
    /// A retrained IVF's mean squared distance of its documents to their nearest centroid (the
    /// baseline of `LiveStats::ivf_drift`); absent: measured on the build's pooled vectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_baseline: Option<f64>,
}

impl IvfConfig {
    pub fn dir(index_dir: &Path) -> PathBuf {
        index_dir.join(IVF_DIR)
    }

    /// `None` when the index has no IVF: no `ivf.json` and none of the IVF's binary files. One of
    /// them without `ivf.json` is `Corrupted` naming the missing `ivf.json`: a build swaps all of
    /// them in at once, and reading the index as one without an IVF would silently change what
    /// the hybrid mode answers.
    pub fn load(index_dir: &Path) -> Result<Option<IvfConfig>> {
        crate::config::load_committed(
            &Self::dir(index_dir),
            IVF_CONFIG_FILE,
            &IVF_KINDS,
            IVF_READABLE_VERSIONS,
            || rebuild_hint(index_dir),
        )
    }

    /// `Corrupted` naming the first of the IVF's binary files missing from `index_dir/ivf/`: `ivf.json`
    /// says they are all there.
    pub fn check_files(&self, index_dir: &Path) -> Result<()> {
        let dir = Self::dir(index_dir);
        match IVF_KINDS.iter().map(|k| dir.join(k.file_name())).find(|p| !p.exists()) {
            None => Ok(()),
            Some(path) => Err(CellarError::corrupted(
                &path,
                0,
                format!(
                    "missing: {IVF_CONFIG_FILE} commits an IVF of which this file is gone; {}",
                    rebuild_hint(index_dir)
                ),
            )),
        }
    }

    pub fn save(&self, ivf_dir: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| CellarError::internal(format!("ivf.json does not serialise: {e}")))?;
        write_atomic(&ivf_dir.join(IVF_CONFIG_FILE), &json)
    }
}

fn rebuild_hint(index_dir: &Path) -> String {
    format!("rebuild it with `cellar ivf build --index {}`", index_dir.display())
}
