//! A small IVF over synthetic pooled vectors, built without a model: what the IVF's golden files
//! and version tests are made from. Every value follows from the document's number.

use std::path::Path;

use cellar_core::format::FileKind;
use cellar_search::ivf::{build_ivf_over, IvfBuildOptions, IvfConfig};
use cellar_search::pooled::PooledWriter;

pub const DIM: usize = 16;
pub const DOCS: usize = 48;
/// Directions the documents gather around, so the clusters mean something.
const TOPICS: usize = 3;

/// Document `i`'s pooled vector: near topic `i % 3`'s direction, unit length (integer arithmetic
/// and one square root, so the same bits on every machine).
pub fn vector(i: usize) -> Vec<f32> {
    let topic = i % TOPICS;
    let mut state = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let v: Vec<f32> = (0..DIM)
        .map(|d| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let noise = ((state >> 40) % 1001) as f32 / 1000.0 - 0.5;
            let centre = if d % TOPICS == topic { 1.0 } else { 0.0 };
            centre + 0.4 * noise
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

/// Clusters of about 16 of the 48 documents (the whole collection is the training sample).
pub fn options() -> IvfBuildOptions {
    IvfBuildOptions { cluster_size: 16, ..IvfBuildOptions::default() }
}

/// Writes `dir/pooled.bin` and builds `dir/ivf/` over it.
pub fn write(dir: &Path) -> IvfConfig {
    let mut pooled = PooledWriter::create(dir, DIM).unwrap();
    for i in 0..DOCS {
        pooled.add(&vector(i)).unwrap();
    }
    pooled.finish().unwrap();
    build_ivf_over(dir, &dir.join(FileKind::Pooled.file_name()), DIM, DOCS, &options()).unwrap()
}
