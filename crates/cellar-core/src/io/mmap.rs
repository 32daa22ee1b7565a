//! Memory-mapped reader with `MADV_RANDOM` (no read-ahead): the kernel's page cache holds what
//! fits, and a memory cap decides how much that is. `read_batch` checks every record's CRC, which
//! reads every page the batch needs, so the page faults (the I/O) happen and are counted there. With `willneed`, each run
//! of the batch is first announced with `MADV_WILLNEED`, which starts reading all of them at
//! once; without it, every missing page is one synchronous fault (queue depth 1).

use std::fs::File;
use std::sync::Arc;

use memmap2::{Advice, Mmap};

use super::{BatchBytes, ReadPlan, ReadStats, ReaderKind, ReaderSource, RecordBatch, RecordReader};
use crate::error::{IoContext, Result};

pub struct MmapReader {
    source: ReaderSource,
    map: Arc<Mmap>,
    willneed: bool,
}

impl MmapReader {
    pub fn open(source: ReaderSource, willneed: bool) -> Result<Self> {
        let file = File::open(&source.path).at(&source.path)?;
        // SAFETY: index files are immutable once committed; nothing writes them while mapped.
        let map = unsafe { Mmap::map(&file) }.at(&source.path)?;
        map.advise(Advice::Random).at(&source.path)?;
        Ok(MmapReader { source, map: Arc::new(map), willneed })
    }
}

impl RecordReader for MmapReader {
    fn kind(&self) -> ReaderKind {
        ReaderKind::Mmap
    }

    fn engine(&self) -> &'static str {
        if self.willneed {
            "willneed+faults"
        } else {
            "page-faults"
        }
    }

    fn read_batch(&self, ids: &[crate::DocId]) -> Result<RecordBatch> {
        let plan = ReadPlan::new(&self.source.offsets, ids)?;
        let mut read_calls = 0;
        if self.willneed {
            for run in &plan.runs {
                // A hint: if the kernel declines, the faults below still read the pages.
                let _ = self.map.advise_range(Advice::WillNeed, run.file_offset as usize, run.len);
            }
            read_calls = plan.runs.len() as u64;
        }
        let stats = ReadStats { read_calls, pages: plan.pages(), bytes: plan.buf_len as u64, cached: 0 };
        // Checking every record's CRC reads all its bytes, so this is where the pages fault in.
        let context = self.source.context(ids, true);
        RecordBatch::verified(
            BatchBytes::Shared(self.map.clone()),
            plan.file_spans(),
            &context,
            &plan.entries,
            stats,
        )
    }
}
