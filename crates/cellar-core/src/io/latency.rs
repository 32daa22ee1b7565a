//! An emulated SSD latency for the direct reader: every read call costs a fixed time on a device
//! with a bounded number of reads in flight, shared by every batch of the process.
//!
//! The virtual disk of a benchmark machine is often host-cached (a 4 KiB read in ~18 µs), far
//! faster than a real NVMe SSD (80–100 µs). With this option the reader still does the real read,
//! then holds one of the device's `max_in_flight` slots for `per_read` before it returns, so
//! concurrent batches queue for the device the way they would on real hardware.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// What to inject: the cost of one read and the device's queue depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InjectedLatency {
    pub per_read: Duration,
    pub max_in_flight: usize,
}

/// The shared device: counts the slots in use.
pub(crate) struct EmulatedDevice {
    latency: InjectedLatency,
    in_flight: Mutex<usize>,
    freed: Condvar,
}

impl EmulatedDevice {
    pub(crate) fn new(latency: InjectedLatency) -> Self {
        let latency = InjectedLatency { max_in_flight: latency.max_in_flight.max(1), ..latency };
        EmulatedDevice { latency, in_flight: Mutex::new(0), freed: Condvar::new() }
    }

    /// Charges `reads` read calls: they go to the device in waves of as many slots as are free
    /// (at most `max_in_flight`), each wave taking `per_read`.
    pub(crate) fn charge(&self, reads: usize) {
        fine_timer_slack();
        let mut left = reads;
        while left > 0 {
            let taken = self.acquire(left);
            std::thread::sleep(self.latency.per_read);
            self.release(taken);
            left -= taken;
        }
    }

    /// Waits for at least one free slot and takes up to `wanted` of them.
    fn acquire(&self, wanted: usize) -> usize {
        let mut used = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        while *used >= self.latency.max_in_flight {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        let taken = wanted.min(self.latency.max_in_flight - *used);
        *used += taken;
        taken
    }

    fn release(&self, taken: usize) {
        let mut used = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        *used -= taken;
        self.freed.notify_all();
    }
}

/// Linux rounds sleeps up by the thread's timer slack (50 µs by default), which would swamp an
/// 80 µs emulated read: ask for 1 µs once per thread.
fn fine_timer_slack() {
    thread_local!(static SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    SET.with(|set| {
        if !set.get() {
            // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only affects this thread.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
            set.set(true);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn slots_are_never_oversubscribed_and_all_reads_are_charged() {
        let device = Arc::new(EmulatedDevice::new(InjectedLatency {
            per_read: Duration::from_micros(50),
            max_in_flight: 3,
        }));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let device = device.clone();
                std::thread::spawn(move || {
                    for reads in [1, 5, 7] {
                        let taken = device.acquire(reads);
                        assert!((1..=3).contains(&taken));
                        assert!(*device.in_flight.lock().unwrap() <= 3);
                        device.release(taken);
                        device.charge(reads);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*device.in_flight.lock().unwrap(), 0);
    }

    #[test]
    fn a_batch_waits_at_least_one_latency_per_wave() {
        let per_read = Duration::from_millis(2);
        let device = EmulatedDevice::new(InjectedLatency { per_read, max_in_flight: 2 });
        let start = std::time::Instant::now();
        device.charge(5); // three waves: 2 + 2 + 1
        assert!(start.elapsed() >= per_read * 3);
    }
}
