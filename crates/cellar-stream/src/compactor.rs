//! The one background compaction thread of the process, shared by every collection.
//!
//! A collection whose flush leaves more than `compact_after` segments, or whose write started a
//! background flush, queues itself here (once: a second request while it waits is dropped); the
//! thread commits the flush's segment once written and merges, one collection at a time. A
//! thread per collection made 1,000 written streams cost 1,000 threads (issue 21.5). The queue
//! holds `Weak` handles, so a collection closed while it waits is skipped, and a closed one is
//! never written by a compaction that started after its close (see `Inner::compact_queued`).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock, Weak};

/// What the thread runs for a queued collection (`collection::Inner`; a trait, so this module
/// needs nothing of the collection's).
pub(crate) trait Compact: Send + Sync {
    fn compact_queued(&self);
}

struct Queue {
    waiting: Mutex<VecDeque<Weak<dyn Compact>>>,
    wake: Condvar,
}

static QUEUE: OnceLock<&'static Queue> = OnceLock::new();

/// Name of the thread, as `/proc/self/task/*/comm` shows it.
pub const THREAD_NAME: &str = "cellar-compact";

fn queue() -> &'static Queue {
    QUEUE.get_or_init(|| {
        let queue: &'static Queue =
            Box::leak(Box::new(Queue { waiting: Mutex::new(VecDeque::new()), wake: Condvar::new() }));
        std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || run(queue))
            .expect("spawning the compaction thread");
        queue
    })
}

/// Queues `inner` for a background compaction.
pub(crate) fn request(inner: Weak<dyn Compact>) {
    let queue = queue();
    queue.waiting.lock().unwrap_or_else(|p| p.into_inner()).push_back(inner);
    queue.wake.notify_one();
}

fn run(queue: &'static Queue) {
    loop {
        let next = {
            let mut waiting = queue.waiting.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(next) = waiting.pop_front() {
                    break next;
                }
                waiting = queue.wake.wait(waiting).unwrap_or_else(|p| p.into_inner());
            }
        };
        if let Some(inner) = next.upgrade() {
            inner.compact_queued();
        }
    }
}
