//! The process's budget for read buffers in use: direct reads of records and extents take
//! their page-aligned buffer under it, and a read that would go past it waits (its CPU slot
//! given back, `wait`) until earlier buffers are dropped. Concurrent searches then cannot grow
//! the process's memory past its cap however many are in flight; they queue for buffers
//! instead. Unbounded unless set ([`set_read_buffer_budget`]: the server sets it from its
//! memory cap); a buffer larger than the whole budget is granted when no other is in use.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

pub(crate) struct Budget {
    /// Bytes of read buffers that may be in use at once; 0: unbounded.
    limit: AtomicUsize,
    in_use: Mutex<usize>,
    freed: Condvar,
}

static PROCESS: Budget = Budget::new();

/// Sets the process's budget in bytes (0: unbounded) for the reads that follow.
pub fn set_read_buffer_budget(bytes: usize) {
    PROCESS.limit.store(bytes, Ordering::Relaxed);
    PROCESS.freed.notify_all();
}

/// The process's budget in bytes; 0: unbounded.
pub fn read_buffer_budget() -> usize {
    PROCESS.limit.load(Ordering::Relaxed)
}

/// Bytes of read buffers in use right now.
pub fn read_buffers_in_use() -> usize {
    *PROCESS.lock()
}

impl Budget {
    const fn new() -> Budget {
        Budget { limit: AtomicUsize::new(0), in_use: Mutex::new(0), freed: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.in_use.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fits(&self, in_use: usize, bytes: usize) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        limit == 0 || in_use == 0 || in_use + bytes <= limit
    }

    /// Waits (giving the thread's CPU slot back) until `bytes` fit, and takes them.
    fn take(&'static self, bytes: usize) -> Grant {
        let mut in_use = self.lock();
        if self.fits(*in_use, bytes) {
            *in_use += bytes;
        } else {
            drop(in_use);
            // The lock is not held while the slot is taken back after the wait.
            super::wait::waiting_on_io(|| {
                let mut in_use = self.lock();
                while !self.fits(*in_use, bytes) {
                    in_use = self.freed.wait(in_use).unwrap_or_else(|p| p.into_inner());
                }
                *in_use += bytes;
            });
        }
        Grant { budget: self, bytes }
    }
}

/// `bytes` of the budget, given back when dropped.
pub(crate) struct Grant {
    budget: &'static Budget,
    bytes: usize,
}

impl Grant {
    /// `bytes` of the process's budget (waits while they do not fit).
    pub(crate) fn take(bytes: usize) -> Grant {
        PROCESS.take(bytes)
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        *self.budget.lock() -= self.bytes;
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn budget(limit: usize) -> &'static Budget {
        let budget: &'static Budget = Box::leak(Box::new(Budget::new()));
        budget.limit.store(limit, Ordering::Relaxed);
        budget
    }

    #[test]
    fn a_take_past_the_budget_waits_for_a_drop() {
        let budget = budget(10);
        let first = budget.take(6);
        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let grant = budget.take(6);
            tx.send(()).unwrap();
            drop(grant);
        });
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "6 + 6 > 10 waits");
        assert_eq!(*budget.lock(), 6);
        drop(first);
        rx.recv_timeout(Duration::from_secs(10)).expect("the drop let the waiter in");
        waiter.join().unwrap();
        assert_eq!(*budget.lock(), 0);
    }

    #[test]
    fn a_buffer_larger_than_the_budget_is_granted_alone_and_unbounded_never_waits() {
        let budget = budget(4);
        let big = budget.take(9);
        assert_eq!(*budget.lock(), 9);
        drop(big);
        let unbounded = self::budget(0);
        let grants: Vec<Grant> = (0..5).map(|_| unbounded.take(1 << 30)).collect();
        assert_eq!(*unbounded.lock(), 5 << 30);
        drop(grants);
        assert_eq!(*unbounded.lock(), 0);
    }
}
