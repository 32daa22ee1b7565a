//! Bounding the threads of one encode call.
//!
//! candle 0.11's CPU matmul calls gemm with `Parallelism::Rayon(n)`, `n` read from
//! `RAYON_NUM_THREADS` (else the physical core count) on every call, and gemm runs its `n` parts
//! with rayon on the *current* rayon pool. Running the forward pass inside a rayon pool of
//! `threads` workers therefore caps the matmul (and our row kernels, see [`crate::ops`]) at that
//! many threads; with one worker the parts simply run one after the other. Calls must not share one
//! pool, or concurrent requests would queue behind each other, so each call borrows a private pool
//! from a small free list and returns it afterwards (building a pool costs one thread spawn each).

use std::sync::Mutex;

use cellar_core::{CellarError, Result};

/// Idle pools kept for reuse; more concurrent calls than this build and drop their own.
const MAX_IDLE: usize = 64;

/// A free list of rayon pools of `threads` workers each.
pub(crate) struct Pools {
    /// Workers per pool: the thread budget of one call.
    threads: usize,
    /// Pools not in use.
    idle: Mutex<Vec<rayon::ThreadPool>>,
}

impl Pools {
    /// Pools of `threads` workers (at least one).
    pub fn new(threads: usize) -> Pools {
        Pools { threads: threads.max(1), idle: Mutex::new(Vec::new()) }
    }

    /// Runs `f` on a pool of its own, so rayon work inside it uses at most `threads` threads.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R> {
        let pool = match self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            Some(p) => p,
            None => rayon::ThreadPoolBuilder::new()
                .num_threads(self.threads)
                .thread_name(|i| format!("cellar-encode-{i}"))
                .build()
                .map_err(|e| {
                    CellarError::Unsupported(format!("cannot start {} encoder threads: {e}", self.threads))
                })?,
        };
        let out = pool.install(f);
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(pool);
        }
        Ok(out)
    }
}
