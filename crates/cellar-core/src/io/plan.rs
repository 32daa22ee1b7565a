//! Turns a list of doc ids into page-aligned reads: records sharing a page or lying on adjacent
//! pages are merged into one run (up to `MAX_RUN_BYTES`), each page read once.

use crate::error::Result;
use crate::format::offsets::{OffsetEntry, OffsetsTable};
use crate::format::record::pages_of;
use crate::format::PAGE_BYTES;
use crate::ids::DocId;

const MAX_RUN_BYTES: u64 = 256 * 1024;

/// One contiguous, page-aligned read into the batch buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub file_offset: u64,
    pub len: usize,
    pub buf_offset: usize,
}

/// A record's pages join the previous run when they share a page with it, or when they follow
/// it directly and the merged run stays under `MAX_RUN_BYTES`.
fn joins(run: &Run, start: u64, end: u64) -> bool {
    let run_end = run.file_offset + run.len as u64;
    start < run_end || (start == run_end && end - run.file_offset <= MAX_RUN_BYTES)
}

/// Merges page-aligned `[start, end)` file ranges, given in any order, into runs: a range joins
/// the run before it (in file order) when [`joins`] says so. Returns the runs, the run of each
/// range, and the buffer length they add up to.
pub(crate) fn merge_ranges(ranges: &[(u64, u64)]) -> (Vec<Run>, Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|i| ranges[*i].0);
    let mut runs: Vec<Run> = Vec::new();
    let mut run_of = vec![0usize; ranges.len()];
    let mut buf_len = 0usize;
    for i in order {
        let (start, end) = ranges[i];
        match runs.last_mut() {
            Some(run) if joins(run, start, end) => {
                let grown = end.max(run.file_offset + run.len as u64) - run.file_offset;
                buf_len += grown as usize - run.len;
                run.len = grown as usize;
            }
            _ => {
                runs.push(Run { file_offset: start, len: (end - start) as usize, buf_offset: buf_len });
                buf_len += (end - start) as usize;
            }
        }
        run_of[i] = runs.len() - 1;
    }
    (runs, run_of, buf_len)
}

#[derive(Debug)]
pub struct ReadPlan {
    pub runs: Vec<Run>,
    pub entries: Vec<OffsetEntry>,
    /// Per requested id: (start, len) of its record inside the batch buffer.
    pub spans: Vec<(usize, usize)>,
    pub buf_len: usize,
}

impl ReadPlan {
    pub fn new(offsets: &OffsetsTable, ids: &[DocId]) -> Result<Self> {
        let entries = ids.iter().map(|id| offsets.get(*id)).collect::<Result<Vec<_>>>()?;
        let page = PAGE_BYTES as u64;
        let ranges: Vec<(u64, u64)> = entries
            .iter()
            .map(|e| {
                let (first, last) = pages_of(e.offset, e.len);
                (first * page, (last + 1) * page)
            })
            .collect();
        let (runs, run_of, buf_len) = merge_ranges(&ranges);
        let spans = entries
            .iter()
            .zip(&run_of)
            .map(|(e, r)| {
                let run = runs[*r];
                (run.buf_offset + (e.offset - run.file_offset) as usize, e.len as usize)
            })
            .collect();
        Ok(ReadPlan { runs, entries, spans, buf_len })
    }

    pub fn pages(&self) -> u64 {
        (self.buf_len / PAGE_BYTES) as u64
    }

    /// Spans relative to the file instead of the batch buffer (for ram and mmap readers).
    pub fn file_spans(&self) -> Vec<(usize, usize)> {
        self.entries.iter().map(|e| (e.offset as usize, e.len as usize)).collect()
    }
}
