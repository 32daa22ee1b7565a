//! Golden files of the IVF: `testdata/ivf-v1/` holds the synthetic collection's `pooled.bin` and
//! the `ivf/` built over it (IVF layout version 1, binary headers of format version 1). This
//! build must write them byte for byte from the same input, so a layout change cannot slip in
//! without a version bump, and must read them back.
//!
//! `ivf.json` records how long the build took: the golden copy and the fresh one both have those
//! timings set to zero (by the real writer, `IvfConfig::save`); every other byte is compared.
//!
//! After an intended change (with a new `IVF_FORMAT_VERSION` or `FORMAT_VERSION`), keep the old
//! directory for the reading test and write the new one with
//! `CELLAR_BLESS=1 cargo test -p cellar-search --test it golden` (`cellar-core/tests/support/golden.rs`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cellar_core::format::FileKind;
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_search::ivf::{Ivf, IvfBuildReport, IvfConfig, ProbeParams, IVF_CONFIG_FILE, IVF_DIR};
use half::f16;

use crate::golden_files;
use crate::synthetic_ivf::{self, DIM, DOCS};

fn golden_dir() -> &'static Path {
    static GOLDEN: OnceLock<PathBuf> = OnceLock::new();
    golden_files::dir(&GOLDEN, "ivf-v1", write_without_timings)
}

/// Every file of the golden directory, relative to it.
fn files() -> Vec<PathBuf> {
    let ivf = Path::new(IVF_DIR);
    let mut files = vec![PathBuf::from(FileKind::Pooled.file_name()), ivf.join(IVF_CONFIG_FILE)];
    let kinds = [FileKind::IvfCentroids, FileKind::IvfPostings, FileKind::IvfVectors];
    files.extend(kinds.map(|k| ivf.join(k.file_name())));
    files
}

/// Builds the synthetic IVF in `dir` and rewrites its `ivf.json` without the build's timings.
fn write_without_timings(dir: &Path) {
    let built = synthetic_ivf::write(dir);
    let build =
        IvfBuildReport { train_secs: 0.0, assign_secs: 0.0, write_secs: 0.0, total_secs: 0.0, ..built.build };
    IvfConfig { build, ..built }.save(&IvfConfig::dir(dir)).unwrap();
}

#[test]
fn golden_ivf_is_reproduced_byte_for_byte() {
    let fresh = tempfile::tempdir().unwrap();
    write_without_timings(fresh.path());
    golden_files::assert_same_bytes(
        golden_dir(),
        fresh.path(),
        &files(),
        "IVF_FORMAT_VERSION or FORMAT_VERSION",
    );
}

/// The golden vectors as this build reads them: the synthetic input rounded to f16.
fn input_rows() -> Vec<Vec<f32>> {
    (0..DOCS).map(|i| synthetic_ivf::vector(i).iter().map(|v| f16::from_f32(*v).to_f32()).collect()).collect()
}

/// The exact top `k` of `query` over `rows`, by inner product (ties: lower id first).
fn exact_top(rows: &[Vec<f32>], query: &[f32], k: usize) -> Vec<u32> {
    let mut scored: Vec<(u32, f32)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (i as u32, r.iter().zip(query).map(|(a, b)| a * b).sum()))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.into_iter().take(k).map(|(id, _)| id).collect()
}

#[test]
fn golden_ivf_is_read_by_this_build() {
    let golden = golden_dir();
    let rows = input_rows();
    for kind in ReaderKind::ALL {
        let ivf = Ivf::open(golden, DOCS as u64, DIM, &ReaderOptions::new(kind)).unwrap().expect("an ivf/");
        let config = ivf.config();
        assert_eq!((config.dim, config.docs as usize, config.clusters), (DIM, DOCS, ivf.clusters()));
        assert!(ivf.clusters() >= 2, "{} clusters", ivf.clusters());
        for q in [0, 1, 2, 17, 46] {
            let query = &rows[q];
            let params = ProbeParams { nprobe: ivf.clusters(), depth: 10, oversample: 100.0, rescore: true };
            let (hits, stats) = ivf.probe(query, params).finish().unwrap();
            assert_eq!(stats.codes, DOCS, "{kind:?}: every document is in one cluster");
            let ids: Vec<u32> = hits.iter().map(|h| h.id.0).collect();
            assert_eq!(ids, exact_top(&rows, query, 10), "{kind:?} query {q}");
            let best = rows[q].iter().map(|v| v * v).sum::<f32>();
            assert!((hits[0].score - best).abs() < 1e-3, "{kind:?}: a document is its own best match");
        }
    }
}
