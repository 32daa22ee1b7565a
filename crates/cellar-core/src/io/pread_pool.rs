//! The fallback when io_uring is refused: at most `threads` scoped threads, each taking the next
//! run from a shared list and reading it with pread.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use super::aligned::AlignedBuf;
use super::plan::Run;
use crate::error::{IoContext, Result};

pub struct PreadPool {
    threads: usize,
}

impl PreadPool {
    pub fn new(threads: usize) -> Self {
        PreadPool { threads: threads.max(1) }
    }

    pub fn read_runs(&self, file: &File, path: &Path, runs: &[Run], buf: &mut AlignedBuf) -> Result<()> {
        let mut jobs = split_by_run(runs, buf.as_mut_slice());
        let read = |(run, dst): (Run, &mut [u8])| file.read_exact_at(dst, run.file_offset).at(path);
        let workers = self.threads.min(jobs.len());
        if workers <= 1 {
            return jobs.drain(..).try_for_each(read);
        }
        let queue = Mutex::new(jobs);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| loop {
                        let job = queue.lock().expect("pread queue").pop();
                        match job {
                            Some(job) => read(job)?,
                            None => return Ok(()),
                        }
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| h.join().expect("pread worker panicked"))
        })
    }
}

/// Disjoint destination slices, one per run (runs are laid out in buffer order).
fn split_by_run<'a>(runs: &[Run], mut rest: &'a mut [u8]) -> Vec<(Run, &'a mut [u8])> {
    let mut consumed = 0usize;
    let mut jobs = Vec::with_capacity(runs.len());
    for run in runs {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(run.buf_offset - consumed);
        let (dst, tail) = tail.split_at_mut(run.len);
        consumed = run.buf_offset + run.len;
        rest = tail;
        jobs.push((*run, dst));
    }
    jobs
}
