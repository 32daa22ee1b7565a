//! Batched reads through io_uring. Rings are pooled: a batch borrows one, submits up to
//! `depth` reads at a time and waits for all of them before returning the ring, so no read is
//! ever in flight into a buffer that has been freed — also on error.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Mutex;

use io_uring::{opcode, types, IoUring};

use super::aligned::AlignedBuf;
use super::plan::Run;
use crate::error::{CellarError, IoContext, Result};

pub const DISABLE_VAR: &str = "CELLAR_IO_URING";

pub struct RingPool {
    rings: Mutex<Vec<IoUring>>,
    depth: u32,
}

impl RingPool {
    /// Creates one ring now, so a kernel that refuses io_uring is found at open time.
    /// `CELLAR_IO_URING=off` in the environment refuses it too (for kernels whose io_uring
    /// misbehaves, and to exercise the fallback).
    pub fn new(depth: u32) -> std::io::Result<Self> {
        if std::env::var_os(DISABLE_VAR).is_some_and(|v| v == "off") {
            return Err(std::io::Error::other(format!("disabled by {DISABLE_VAR}=off")));
        }
        let ring = IoUring::new(depth)?;
        Ok(RingPool { rings: Mutex::new(vec![ring]), depth })
    }

    fn take(&self, path: &Path) -> Result<IoUring> {
        let pooled = self.rings.lock().expect("ring pool lock").pop();
        match pooled {
            Some(ring) => Ok(ring),
            None => IoUring::new(self.depth).at(path),
        }
    }

    pub fn read_runs(&self, file: &File, path: &Path, runs: &[Run], buf: &mut AlignedBuf) -> Result<()> {
        let mut ring = self.take(path)?;
        let result = runs
            .chunks(self.depth as usize)
            .try_for_each(|chunk| read_chunk(&mut ring, file, path, chunk, buf));
        self.rings.lock().expect("ring pool lock").push(ring);
        result
    }
}

/// Submits one read per run and reaps every completion; short reads are finished with pread.
fn read_chunk(
    ring: &mut IoUring,
    file: &File,
    path: &Path,
    runs: &[Run],
    buf: &mut AlignedBuf,
) -> Result<()> {
    let base = buf.as_mut_ptr();
    {
        let mut sq = ring.submission();
        for (i, run) in runs.iter().enumerate() {
            // SAFETY: run.buf_offset + run.len <= buf.len (the plan sized the buffer).
            let dst = unsafe { base.add(run.buf_offset) };
            let entry = opcode::Read::new(types::Fd(file.as_raw_fd()), dst, run.len as u32)
                .offset(run.file_offset)
                .build()
                .user_data(i as u64);
            // SAFETY: the buffer outlives the reads: we reap every completion below.
            unsafe { sq.push(&entry) }.expect("chunk no larger than the ring");
        }
    }
    let mut outstanding = runs.len();
    let mut first_error: Option<CellarError> = None;
    let mut short: Vec<(usize, usize)> = Vec::new();
    while outstanding > 0 {
        if let Err(e) = ring.submit_and_wait(1) {
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // Cannot tell which reads are still in flight: wait for them before erroring out.
            first_error.get_or_insert(CellarError::io(path, e));
            continue;
        }
        for cqe in ring.completion() {
            outstanding -= 1;
            let i = cqe.user_data() as usize;
            let res = cqe.result();
            if res < 0 {
                first_error.get_or_insert(CellarError::io(path, std::io::Error::from_raw_os_error(-res)));
            } else if (res as usize) < runs[i].len {
                short.push((i, res as usize));
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    for (i, done) in short {
        let run = runs[i];
        let dst = &mut buf.as_mut_slice()[run.buf_offset + done..run.buf_offset + run.len];
        file.read_exact_at(dst, run.file_offset + done as u64).map_err(|e| {
            CellarError::corrupted(path, run.file_offset + done as u64, format!("short read: {e}"))
        })?;
    }
    Ok(())
}
