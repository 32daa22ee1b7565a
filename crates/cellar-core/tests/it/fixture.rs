//! Small stores the tests build themselves.

use std::path::Path;
use std::sync::Arc;

use cellar_core::codec::{fit_codec, Codec, CodecKind};
use cellar_core::io::{InjectedLatency, IoEngine, ReaderKind, ReaderOptions};
use cellar_core::store::StoreWriter;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub const DIM: usize = 24;

/// One document's vectors as written.
pub struct Doc {
    pub tokens: Vec<f32>,
    pub pooled: Vec<f32>,
}

/// `n` documents with token counts from 1 up to a few pages' worth (some records span pages).
pub fn docs(n: usize, seed: u64) -> Vec<Doc> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let n_tokens = if i % 7 == 3 { rng.gen_range(100..300) } else { rng.gen_range(1..40) };
            Doc {
                tokens: (0..n_tokens * DIM).map(|_| rng.gen_range(-1.0..1.0)).collect(),
                pooled: (0..DIM).map(|_| rng.gen_range(-1.0..1.0)).collect(),
            }
        })
        .collect()
}

pub fn codec(kind: CodecKind, docs: &[Doc]) -> Arc<dyn Codec> {
    let sample: Vec<f32> = docs.iter().flat_map(|d| d.tokens.iter().copied()).collect();
    fit_codec(kind, DIM, &sample).unwrap()
}

pub fn write(dir: &Path, kind: CodecKind, docs: &[Doc]) {
    let mut writer = StoreWriter::create(dir, codec(kind, docs), true).unwrap();
    for d in docs {
        writer.add(&d.tokens, Some(&d.pooled)).unwrap();
    }
    writer.finish().unwrap();
}

/// Every reader configuration a store can be opened with.
pub fn all_reader_options() -> Vec<ReaderOptions> {
    let mut out: Vec<ReaderOptions> = ReaderKind::ALL.into_iter().map(ReaderOptions::new).collect();
    let mut pread = ReaderOptions::new(ReaderKind::Direct);
    pread.io_engine = IoEngine::Pread;
    out.push(pread);
    let mut faults_only = ReaderOptions::new(ReaderKind::Mmap);
    faults_only.mmap_willneed = false;
    out.push(faults_only);
    let mut shallow = ReaderOptions::new(ReaderKind::Direct);
    shallow.queue_depth = 2;
    out.push(shallow);
    let mut emulated_ssd = ReaderOptions::new(ReaderKind::Direct);
    emulated_ssd.inject_latency =
        Some(InjectedLatency { per_read: std::time::Duration::from_micros(20), max_in_flight: 4 });
    out.push(emulated_ssd);
    out
}
