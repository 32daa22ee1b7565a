//! The CPU pool: `workers` CPU slots shared by `workers + io_waiters` OS threads that run the
//! searches (encoding, scoring, reads), fed by one bounded FIFO queue. A thread holds a slot
//! while it computes and gives it back while it sleeps on the disk (`cellar_core::io::wait`), so
//! a search waiting for its reads does not keep a core idle: another thread starts a search on
//! it. A thread back from I/O computes at once, even when every slot is taken by searches that
//! started while it slept: for that moment more threads compute than there are slots (at most
//! `workers + io_waiters`, the OS sharing the cores among them), and no new search starts until
//! they are back within the slots. A search under way thus never waits behind a whole newer one
//! (a text query's 16 ms of encoding, `bench/results/pool-resume.md`), and searches under way
//! finish first. Admission is all-or-nothing, so a batch request either gets every one of its
//! queries queued or is refused whole; a full queue is the caller's cue to answer 429.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use cellar_core::io::wait::{run_with_slot, CpuSlot};

/// A unit of work.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// The queue had no room for the jobs offered.
#[derive(Debug, PartialEq, Eq)]
pub struct QueueFull;

struct Shared {
    state: Mutex<State>,
    /// Idle threads wait here for a job and a free slot.
    ready: Condvar,
    capacity: usize,
    slots: usize,
}

struct State {
    jobs: VecDeque<Job>,
    closed: bool,
    /// Threads computing: at most `slots` but for threads back from I/O, which never wait.
    computing: usize,
    /// Threads inside a job that sleep on I/O (slot given back).
    waiting_io: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a new job may start: a slot is free.
    fn can_start(&self, state: &State) -> bool {
        state.computing < self.slots
    }
}

impl CpuSlot for Shared {
    fn release(&self) {
        let mut state = self.lock();
        state.computing -= 1;
        state.waiting_io += 1;
        if self.can_start(&state) && !state.jobs.is_empty() {
            self.ready.notify_one();
        }
    }

    /// Never waits: see the module's note.
    fn acquire(&self) {
        let mut state = self.lock();
        state.waiting_io -= 1;
        state.computing += 1;
    }
}

pub struct CpuPool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl CpuPool {
    /// Starts `workers` slots (at least one) on `workers + io_waiters` threads, over a queue
    /// holding at most `capacity` jobs. With `io_waiters` 0 a thread waiting on I/O keeps its
    /// core idle (the pool of one thread per core).
    pub fn new(workers: usize, io_waiters: usize, capacity: usize) -> Self {
        let slots = workers.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State { jobs: VecDeque::new(), closed: false, computing: 0, waiting_io: 0 }),
            ready: Condvar::new(),
            capacity,
            slots,
        });
        let threads = (0..slots + io_waiters)
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("cellar-cpu-{i}"))
                    .spawn(move || work(shared))
                    .expect("spawning a CPU pool thread")
            })
            .collect();
        CpuPool { shared, threads }
    }

    /// Queues every job of `jobs`, or none of them when they do not all fit.
    pub fn try_submit_all(&self, jobs: Vec<Job>) -> Result<(), QueueFull> {
        let mut state = self.shared.lock();
        if state.closed || state.jobs.len() + jobs.len() > self.shared.capacity {
            return Err(QueueFull);
        }
        state.jobs.extend(jobs);
        drop(state);
        self.shared.ready.notify_all();
        Ok(())
    }

    /// Jobs waiting for a thread.
    pub fn queue_depth(&self) -> usize {
        self.shared.lock().jobs.len()
    }

    /// Searches computing right now (above `workers` for a moment when searches back from I/O
    /// found every slot taken).
    pub fn busy(&self) -> usize {
        self.shared.lock().computing
    }

    /// Searches under way that sleep on I/O right now, their slot given back.
    pub fn waiting_io(&self) -> usize {
        self.shared.lock().waiting_io
    }

    /// CPU slots: searches that may compute at once.
    pub fn workers(&self) -> usize {
        self.shared.slots
    }

    /// Threads: searches that may be under way at once.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

fn work(shared: Arc<Shared>) {
    let slot: Arc<dyn CpuSlot> = shared.clone();
    loop {
        let job = {
            let mut state = shared.lock();
            loop {
                if shared.can_start(&state) {
                    if let Some(job) = state.jobs.pop_front() {
                        state.computing += 1;
                        break job;
                    }
                }
                if state.closed && state.jobs.is_empty() {
                    // The others may be waiting for a job that will never come: let them see it.
                    shared.ready.notify_all();
                    return;
                }
                state = shared.ready.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        };
        // A panicking search must not take a thread down with it; its caller sees a dropped reply.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_with_slot(slot.clone(), job)));
        // This thread looks at the queue itself next.
        shared.lock().computing -= 1;
    }
}

impl Drop for CpuPool {
    /// Lets the threads finish what is queued, then joins them.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
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
        let pool = CpuPool::new(1, 0, 2);
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

    /// What `rx` gets within 10 s (a broken pool fails the test instead of hanging it).
    fn soon<T>(rx: &mpsc::Receiver<T>) -> T {
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("nothing arrived within 10 s")
    }

    /// Job A sleeps on "I/O" (through `waiting_on_io`) and job B takes its core meanwhile; A, back
    /// from I/O, computes at once beside B (two computing on one slot for a moment) instead of
    /// waiting for B to finish, and a queued job C starts only once they are back within the slot.
    #[test]
    fn a_search_waiting_on_io_lends_its_core_and_resumes_at_once_before_new_work() {
        use cellar_core::io::wait::waiting_on_io;
        let pool = CpuPool::new(1, 1, 10);
        let (events_tx, events) = mpsc::channel::<&'static str>();
        let (io_done, io_wait) = mpsc::channel::<()>();
        let (a_go, a_hold) = mpsc::channel::<()>();
        let a_events = events_tx.clone();
        let a: Job = Box::new(move || {
            a_events.send("A waits on io").unwrap();
            waiting_on_io(|| io_wait.recv().unwrap());
            a_events.send("A resumed").unwrap();
            let _ = a_hold.recv();
        });
        pool.try_submit_all(vec![a]).unwrap();
        assert_eq!(soon(&events), "A waits on io");
        let (b, b_started, b_release) = gate();
        pool.try_submit_all(vec![b]).unwrap();
        soon(&b_started);
        assert_eq!((pool.busy(), pool.waiting_io()), (1, 1), "B computes on A's core while A waits");
        let c_events = events_tx.clone();
        pool.try_submit_all(vec![Box::new(move || c_events.send("C started").unwrap())]).unwrap();
        io_done.send(()).unwrap();
        assert_eq!(soon(&events), "A resumed", "A does not wait for B's slot");
        assert_eq!((pool.busy(), pool.waiting_io()), (2, 0), "A and B compute on the one slot");
        a_go.send(()).unwrap();
        assert!(
            events.recv_timeout(std::time::Duration::from_millis(100)).is_err(),
            "C does not start while B holds the only slot"
        );
        b_release.send(()).unwrap();
        assert_eq!(soon(&events), "C started");
    }

    /// Without io waiters a job sleeping on I/O keeps its thread, and the next job waits.
    #[test]
    fn without_io_waiters_a_waiting_search_holds_its_thread() {
        use cellar_core::io::wait::waiting_on_io;
        let pool = CpuPool::new(1, 0, 10);
        let (io_done, io_wait) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel::<&'static str>();
        let a_started = started_tx.clone();
        let a: Job = Box::new(move || {
            a_started.send("A").unwrap();
            waiting_on_io(|| io_wait.recv().unwrap());
        });
        pool.try_submit_all(vec![a, Box::new(move || started_tx.send("B").unwrap())]).unwrap();
        assert_eq!(soon(&started), "A");
        assert!(
            started.recv_timeout(std::time::Duration::from_millis(100)).is_err(),
            "B waits for the thread"
        );
        assert_eq!(pool.waiting_io(), 1);
        io_done.send(()).unwrap();
        assert_eq!(soon(&started), "B");
    }

    #[test]
    fn every_queued_job_runs_and_a_panic_does_not_kill_a_worker() {
        let (done_tx, done_rx) = mpsc::channel();
        {
            let pool = CpuPool::new(2, 1, 100);
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
