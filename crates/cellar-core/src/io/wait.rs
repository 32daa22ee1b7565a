//! Where a thread about to sleep on I/O lets its core go.
//!
//! A server bounds the searches that compute at once by the cores it has, not by the threads
//! it runs: each of its threads holds a [`CpuSlot`] while it computes (installed here with
//! [`run_with_slot`]), and every place that sleeps on the disk — a direct or mapped read of
//! records or extents, a wait for the read pipeline's next chunk or for a prefetch — goes
//! through [`waiting_on_io`], which gives the slot back for the wait and takes it again after.
//! Another search then computes on that core while this one's reads are in flight, so a pool
//! with as many slots as cores keeps both the cores and the disk busy. A thread with no slot
//! installed (the CLI, the bindings, an I/O thread) waits as before.

use std::cell::RefCell;
use std::sync::Arc;

/// A CPU slot that a thread holds while it computes.
pub trait CpuSlot: Send + Sync {
    /// Gives the slot back while this thread waits on I/O.
    fn release(&self);
    /// Takes a slot again before this thread computes (may wait for one).
    fn acquire(&self);
}

thread_local! {
    static SLOT: RefCell<Option<Arc<dyn CpuSlot>>> = const { RefCell::new(None) };
}

/// Runs `work` on this thread with `slot` installed: every [`waiting_on_io`] inside it releases
/// the slot for its wait. The caller holds the slot when it calls this and still holds it after.
pub fn run_with_slot<T>(slot: Arc<dyn CpuSlot>, work: impl FnOnce() -> T) -> T {
    let previous = SLOT.with(|s| s.replace(Some(slot)));
    let _restore = Restore(previous);
    work()
}

/// Runs `wait` (a blocking read or a wait for one) without this thread's CPU slot, if it has one.
/// Nested calls release the slot once.
pub fn waiting_on_io<T>(wait: impl FnOnce() -> T) -> T {
    let Some(slot) = SLOT.with(|s| s.borrow_mut().take()) else { return wait() };
    slot.release();
    // Re-acquired and re-installed even if `wait` panics, so the caller's accounting holds.
    let _back = Reacquire(Some(slot));
    wait()
}

struct Restore(Option<Arc<dyn CpuSlot>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        SLOT.with(|s| *s.borrow_mut() = previous);
    }
}

struct Reacquire(Option<Arc<dyn CpuSlot>>);

impl Drop for Reacquire {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            slot.acquire();
            SLOT.with(|s| *s.borrow_mut() = Some(slot));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Log(Mutex<Vec<&'static str>>);

    impl CpuSlot for Log {
        fn release(&self) {
            self.0.lock().unwrap().push("release");
        }
        fn acquire(&self) {
            self.0.lock().unwrap().push("acquire");
        }
    }

    #[test]
    fn a_wait_releases_the_slot_once_and_takes_it_back() {
        let log = Arc::new(Log::default());
        let got = run_with_slot(log.clone(), || waiting_on_io(|| waiting_on_io(|| 7)) + waiting_on_io(|| 1));
        assert_eq!(got, 8);
        assert_eq!(*log.0.lock().unwrap(), ["release", "acquire", "release", "acquire"]);
        // Outside `run_with_slot` nothing is installed any more.
        waiting_on_io(|| ());
        assert_eq!(log.0.lock().unwrap().len(), 4);
    }

    #[test]
    fn a_thread_without_a_slot_just_waits() {
        assert_eq!(waiting_on_io(|| 3), 3);
    }

    #[test]
    fn a_panicking_wait_still_takes_the_slot_back() {
        let log = Arc::new(Log::default());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_with_slot(log.clone(), || waiting_on_io(|| panic!("a read panicked")))
        }));
        assert!(caught.is_err());
        assert_eq!(*log.0.lock().unwrap(), ["release", "acquire"]);
        waiting_on_io(|| ());
        assert_eq!(log.0.lock().unwrap().len(), 2, "the slot was uninstalled after the panic");
    }
}
