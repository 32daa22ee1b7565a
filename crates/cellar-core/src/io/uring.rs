//! Batched reads through io_uring. Rings are pooled: a batch borrows one, submits up to
//! `depth` reads at a time and waits for all of them before returning the ring, so no read is
//! ever in flight into a buffer that has been freed — also on error: if the ring stops answering
//! (a non-transient error, or transient ones past a bound), the buffer is leaked on purpose.

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

    /// Reads every run into `buf`. If the ring fails in a way that leaves reads possibly in flight,
    /// the buffer is abandoned (leaked, replaced by an empty one) and the ring dropped rather than
    /// reused, so the kernel can never write into freed memory.
    pub fn read_runs(&self, file: &File, path: &Path, runs: &[Run], buf: &mut AlignedBuf) -> Result<()> {
        let mut ring = self.take(path)?;
        for chunk in runs.chunks(self.depth as usize) {
            match read_chunk(&mut ring, file, path, chunk, buf) {
                Ok(()) => {}
                Err(ChunkError::Settled(e)) => {
                    self.rings.lock().expect("ring pool lock").push(ring);
                    return Err(e);
                }
                Err(ChunkError::Abandoned(e)) => {
                    std::mem::forget(std::mem::replace(buf, AlignedBuf::zeroed(0)));
                    return Err(e);
                }
            }
        }
        self.rings.lock().expect("ring pool lock").push(ring);
        Ok(())
    }
}

enum ChunkError {
    /// Every completion was reaped: buffer and ring are safe to reuse.
    Settled(CellarError),
    /// The ring stopped answering with reads possibly still in flight.
    Abandoned(CellarError),
}

/// Waits on a ring that keeps failing transiently give up after this many tries.
const MAX_TRANSIENT_RETRIES: u32 = 10_000;

fn is_transient(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY))
}

/// Submits one read per run and reaps every completion; short reads are finished with pread.
fn read_chunk(
    ring: &mut IoUring,
    file: &File,
    path: &Path,
    runs: &[Run],
    buf: &mut AlignedBuf,
) -> std::result::Result<(), ChunkError> {
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
    let mut retries = 0;
    while outstanding > 0 {
        if let Err(e) = ring.submit_and_wait(1) {
            retries += 1;
            if !is_transient(&e) || retries > MAX_TRANSIENT_RETRIES {
                return Err(ChunkError::Abandoned(CellarError::io(path, e)));
            }
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
        return Err(ChunkError::Settled(e));
    }
    for (i, done) in short {
        let run = runs[i];
        let dst = &mut buf.as_mut_slice()[run.buf_offset + done..run.buf_offset + run.len];
        file.read_exact_at(dst, run.file_offset + done as u64).map_err(|e| {
            let at = run.file_offset + done as u64;
            ChunkError::Settled(CellarError::corrupted(path, at, format!("short read: {e}")))
        })?;
    }
    Ok(())
}
