//! The engines of the direct kind (`O_DIRECT`: the page cache is bypassed, so RAM holds only the
//! batch buffers): page-aligned runs read through io_uring, or, if the kernel refuses io_uring and
//! the engine is `Auto`, through a bounded pool of `pread` threads (a warning printed once per
//! process); and the size of a store's read chunks and pooled buffers. [`super::FileSlice`] reads
//! through them.

use std::fs::File;
use std::sync::Once;

use super::aligned::AlignedBuf;
use super::plan::Run;
use super::pread_pool::PreadPool;
use super::uring::RingPool;
use super::ReaderOptions;
use crate::error::{CellarError, Result};
use crate::format::offsets::OffsetsTable;

/// How the direct reader issues its reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoEngine {
    /// io_uring, falling back (loudly, once) to the pread pool if the kernel refuses it.
    Auto,
    /// io_uring or an error.
    Uring,
    /// A bounded pool of threads calling pread.
    Pread,
}

pub(crate) enum Engine {
    Uring(RingPool),
    Pread(PreadPool),
}

impl Engine {
    /// The engine `options` ask for (io_uring, the pread pool, or io_uring with a loud fallback).
    pub(crate) fn open(options: &ReaderOptions) -> Result<Engine> {
        let depth = options.queue_depth.clamp(1, 4096) as u32;
        Ok(match options.io_engine {
            IoEngine::Pread => Engine::Pread(PreadPool::new(PREAD_THREADS)),
            IoEngine::Uring => Engine::Uring(RingPool::new(depth).map_err(|e| {
                CellarError::Unsupported(format!("io_uring was requested but the kernel refuses it: {e}"))
            })?),
            IoEngine::Auto => match RingPool::new(depth) {
                Ok(pool) => Engine::Uring(pool),
                Err(e) => {
                    FALLBACK_WARNING.call_once(|| {
                        log::warn!("io_uring unavailable ({e}); direct reader falls back to {PREAD_THREADS} pread threads");
                        eprintln!(
                            "WARNING: cellar: the kernel refuses io_uring ({e}); the direct reader falls back to a pool of {PREAD_THREADS} pread threads, expect lower IOPS"
                        );
                    });
                    Engine::Pread(PreadPool::new(PREAD_THREADS))
                }
            },
        })
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Engine::Uring(_) => "io_uring",
            Engine::Pread(_) => "pread-pool",
        }
    }

    pub(crate) fn read_runs(
        &self,
        file: &File,
        path: &std::path::Path,
        runs: &[Run],
        buf: &mut AlignedBuf,
    ) -> Result<()> {
        match self {
            Engine::Uring(pool) => pool.read_runs(file, path, runs, buf),
            Engine::Pread(pool) => pool.read_runs(file, path, runs, buf),
        }
    }
}

/// Threads of the fallback pool: enough to keep a few reads in flight per core.
const PREAD_THREADS: usize = 16;
/// Most bytes of a pooled batch buffer: the reads of one chunk of a query's candidates
/// (`cellar-search` chunks them to [`chunk_bytes`]), or of a whole small batch.
pub const POOLED_BUFFER_BYTES: usize = 2 << 20;
/// Fewest bytes of a chunk of a query's reads (and of a pooled buffer).
pub const MIN_CHUNK_BYTES: usize = 256 << 10;
/// Records a chunk holds on average.
const CHUNK_RECORDS: u64 = 8;

/// The chunk a store's query reads are split into, and the size of its direct reader's pooled
/// buffers: [`CHUNK_RECORDS`] of its mean record's pages, rounded up to a power of two within
/// [`MIN_CHUNK_BYTES`]..=[`POOLED_BUFFER_BYTES`]. A query's first chunk is scored while the next
/// ones are read, so a chunk much larger than a query's reads leaves nothing to overlap: a
/// residual2 query of ~1.6 MB was one 2 MiB chunk, read whole before any MaxSim
/// (`bench/results/read-chunks.md`); f16 stores keep 2 MiB.
pub fn chunk_bytes(offsets: &OffsetsTable) -> usize {
    chunk_bytes_for(offsets.mean_record_page_bytes())
}

fn chunk_bytes_for(mean_record_page_bytes: u64) -> usize {
    let wanted = mean_record_page_bytes.saturating_mul(CHUNK_RECORDS);
    let wanted = usize::try_from(wanted).unwrap_or(usize::MAX).min(POOLED_BUFFER_BYTES);
    wanted.next_power_of_two().clamp(MIN_CHUNK_BYTES, POOLED_BUFFER_BYTES)
}

/// Idle pooled buffers of [`POOLED_BUFFER_BYTES`] kept: a few per concurrent query (one being
/// scored, one being read, one waiting), for a handful of workers; smaller buffers keep as many
/// bytes.
pub(crate) const POOLED_BUFFERS: usize = 8;

static FALLBACK_WARNING: Once = Once::new();

#[cfg(test)]
mod chunk_tests {
    use super::*;

    #[test]
    fn a_chunk_holds_about_eight_mean_records_within_its_bounds() {
        // SciFact's mean record pages: residual2 ~24 KiB, int8 ~80 KiB, f16 ~156 KiB.
        assert_eq!(chunk_bytes_for(24 << 10), 256 << 10);
        assert_eq!(chunk_bytes_for(80 << 10), 1 << 20);
        assert_eq!(chunk_bytes_for(156 << 10), 2 << 20);
        assert_eq!(chunk_bytes_for(4 << 10), MIN_CHUNK_BYTES, "never below the smallest chunk");
        assert_eq!(chunk_bytes_for(0), MIN_CHUNK_BYTES, "an empty store");
        assert_eq!(chunk_bytes_for(10 << 20), POOLED_BUFFER_BYTES, "never above a pooled buffer");
        assert_eq!(chunk_bytes_for(u64::MAX), POOLED_BUFFER_BYTES);
    }
}
