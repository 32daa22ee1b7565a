//! Turns byte ranges of a file into page-aligned reads: ranges sharing a page or lying on
//! adjacent pages are merged into one run (up to `MAX_RUN_BYTES`), each page read once.

use crate::format::PAGE_BYTES;

const MAX_RUN_BYTES: u64 = 256 * 1024;

/// `len` bytes at offset `offset`: of the file when a plan is made, of the slice it is asked of
/// in [`super::FileSlice::read_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub offset: u64,
    pub len: usize,
}

/// One contiguous, page-aligned read into the batch buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub file_offset: u64,
    pub len: usize,
    pub buf_offset: usize,
}

/// A range's pages join the previous run when they share a page with it, or when they follow
/// it directly and the merged run stays under `MAX_RUN_BYTES`.
fn joins(run: &Run, start: u64, end: u64) -> bool {
    let run_end = run.file_offset + run.len as u64;
    start < run_end || (start == run_end && end - run.file_offset <= MAX_RUN_BYTES)
}

/// Merges page-aligned `[start, end)` file ranges, given in any order, into runs: a range joins
/// the run before it (in file order) when [`joins`] says so. Returns the runs, the run of each
/// range, and the buffer length they add up to.
fn merge_ranges(ranges: &[(u64, u64)]) -> (Vec<Run>, Vec<usize>, usize) {
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

/// Page-aligned runs covering a batch of extents (absolute file offsets): overlapping or
/// touching pages are read once, adjacent ones merged.
pub(crate) struct PagePlan {
    pub runs: Vec<Run>,
    /// Per extent: (start, len) inside the run buffer.
    pub spans: Vec<(usize, usize)>,
    pub buf_len: usize,
    /// Distinct pages the extents cover.
    pub pages: u64,
    /// The extents' bytes, summed.
    pub requested_bytes: u64,
}

impl PagePlan {
    pub fn new(extents: &[Extent]) -> PagePlan {
        let page = PAGE_BYTES as u64;
        let ranges: Vec<(u64, u64)> = extents
            .iter()
            .map(|e| (e.offset / page * page, (e.offset + e.len.max(1) as u64).div_ceil(page) * page))
            .collect();
        let (runs, run_of, buf_len) = merge_ranges(&ranges);
        let spans = extents
            .iter()
            .zip(&run_of)
            .map(|(e, r)| (runs[*r].buf_offset + (e.offset - runs[*r].file_offset) as usize, e.len))
            .collect();
        let requested_bytes = extents.iter().map(|e| e.len as u64).sum();
        PagePlan { runs, spans, buf_len, pages: (buf_len / PAGE_BYTES) as u64, requested_bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_reads_shared_pages_once_and_maps_every_extent() {
        let extents = [
            Extent { offset: 5000, len: 100 },
            Extent { offset: 10, len: 20 },
            Extent { offset: 4090, len: 20 },
            Extent { offset: 100_000, len: 8192 },
        ];
        let plan = PagePlan::new(&extents);
        // Pages 0..2 merge (0, 4090-4110, 5000) into one run; 100_000 is far away.
        assert_eq!(plan.runs.len(), 2);
        assert_eq!(plan.runs[0], Run { file_offset: 0, len: 8192, buf_offset: 0 });
        assert_eq!(plan.spans[1], (10, 20));
        assert_eq!(plan.spans[0], (5000, 100));
        let far = plan.runs[1];
        assert_eq!(far.file_offset, 98_304);
        assert_eq!(plan.spans[3], (8192 + (100_000 - 98_304), 8192));
        assert_eq!(plan.pages as usize, plan.buf_len / PAGE_BYTES);
    }
}
