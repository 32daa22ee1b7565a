//! The whole vectors body in RAM: the control every other reader is compared with.

use std::sync::Arc;

use super::{BatchBytes, ReadPlan, ReadStats, ReaderKind, ReaderSource, RecordBatch, RecordReader};
use crate::error::{IoContext, Result};

pub struct RamReader {
    source: ReaderSource,
    bytes: Arc<Vec<u8>>,
}

impl RamReader {
    pub fn open(source: ReaderSource) -> Result<Self> {
        let bytes = std::fs::read(&source.path).at(&source.path)?;
        let body = &bytes[source.header.body_offset as usize..];
        source.header.check_body_crc(&source.path, crc32c::crc32c(body))?;
        Ok(RamReader { source, bytes: Arc::new(bytes) })
    }
}

impl RecordReader for RamReader {
    fn kind(&self) -> ReaderKind {
        ReaderKind::Ram
    }

    fn engine(&self) -> &'static str {
        "memory"
    }

    fn read_batch(&self, ids: &[crate::DocId]) -> Result<RecordBatch> {
        let plan = ReadPlan::new(&self.source.offsets, ids)?;
        let stats = ReadStats {
            read_calls: 0,
            pages: plan.pages(),
            bytes: plan.entries.iter().map(|e| e.len as u64).sum(),
            cached: 0,
        };
        // The whole body was checked against its CRC at open and has been in RAM since.
        let context = self.source.context(ids, false);
        RecordBatch::verified(
            BatchBytes::Shared(self.bytes.clone()),
            plan.file_spans(),
            &context,
            &plan.entries,
            stats,
        )
    }
}
