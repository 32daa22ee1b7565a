//! The fixed CPU pool: `threads` OS threads run the searches (encoding, scoring, reads), fed by
//! one bounded FIFO queue. Admission is all-or-nothing, so a batch request either gets every one
//! of its queries queued or is refused whole; a full queue is the caller's cue to answer 429.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// A unit of work.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// The queue had no room for the jobs offered.
#[derive(Debug, PartialEq, Eq)]
pub struct QueueFull;

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    capacity: usize,
    busy: AtomicUsize,
}

struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

pub struct CpuPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl CpuPool {
    /// Starts `threads` workers (at least one) over a queue holding at most `capacity` jobs.
    pub fn new(threads: usize, capacity: usize) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { jobs: VecDeque::new(), closed: false }),
            ready: Condvar::new(),
            capacity,
            busy: AtomicUsize::new(0),
        });
        let workers = (0..threads.max(1))
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("cellar-cpu-{i}"))
                    .spawn(move || work(&shared))
                    .expect("spawning a CPU pool thread")
            })
            .collect();
        CpuPool { shared, workers }
    }

    /// Queues every job of `jobs`, or none of them when they do not all fit.
    pub fn try_submit_all(&self, jobs: Vec<Job>) -> Result<(), QueueFull> {
        let mut queue = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if queue.closed || queue.jobs.len() + jobs.len() > self.shared.capacity {
            return Err(QueueFull);
        }
        queue.jobs.extend(jobs);
        drop(queue);
        self.shared.ready.notify_all();
        Ok(())
    }

    /// Jobs waiting for a worker.
    pub fn queue_depth(&self) -> usize {
        self.shared.queue.lock().unwrap_or_else(|p| p.into_inner()).jobs.len()
    }

    /// Workers running a job right now.
    pub fn busy(&self) -> usize {
        self.shared.busy.load(Ordering::Relaxed)
    }

    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

fn work(shared: &Shared) {
    loop {
        let job = {
            let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(job) = queue.jobs.pop_front() {
                    break job;
                }
                if queue.closed {
                    return;
                }
                queue = shared.ready.wait(queue).unwrap_or_else(|p| p.into_inner());
            }
        };
        shared.busy.fetch_add(1, Ordering::Relaxed);
        // A panicking search must not take a worker down with it; its caller sees a dropped reply.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        shared.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for CpuPool {
    /// Lets the workers finish what is queued, then joins them.
    fn drop(&mut self) {
        self.shared.queue.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        self.shared.ready.notify_all();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A job that reports when it starts and then waits until released.
    fn gate() -> (Job, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let job: Job = Box::new(move || {
            started_tx.send(()).unwrap();
            let _ = release_rx.recv();
        });
        (job, started_rx, release_tx)
    }

    #[test]
    fn admission_is_all_or_nothing_and_bounded() {
        let pool = CpuPool::new(1, 2);
        let (job, started, release) = gate();
        pool.try_submit_all(vec![job]).unwrap();
        started.recv().unwrap();
        assert_eq!(pool.busy(), 1);
        let noop = || -> Job { Box::new(|| {}) };
        assert_eq!(pool.try_submit_all(vec![noop(), noop(), noop()]), Err(QueueFull));
        assert_eq!(pool.queue_depth(), 0, "a refused batch leaves nothing queued");
        pool.try_submit_all(vec![noop(), noop()]).unwrap();
        assert_eq!(pool.try_submit_all(vec![noop()]), Err(QueueFull));
        release.send(()).unwrap();
    }

    #[test]
    fn every_queued_job_runs_and_a_panic_does_not_kill_a_worker() {
        let (done_tx, done_rx) = mpsc::channel();
        {
            let pool = CpuPool::new(2, 100);
            pool.try_submit_all(vec![Box::new(|| panic!("a search panicked"))]).unwrap();
            let jobs: Vec<Job> = (0..50)
                .map(|i| {
                    let done = done_tx.clone();
                    Box::new(move || done.send(i).unwrap()) as Job
                })
                .collect();
            pool.try_submit_all(jobs).unwrap();
        }
        let mut seen: Vec<i32> = done_rx.try_iter().collect();
        seen.sort();
        assert_eq!(seen, (0..50).collect::<Vec<_>>());
    }
}
