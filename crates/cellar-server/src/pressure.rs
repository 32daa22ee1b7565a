//! Load shedding before the memory cap's OOM killer: under a memory cgroup, a watcher thread
//! follows what the cgroup could not give back (anonymous memory and the kernel's own charge:
//! page cache can always be reclaimed) and the kernel's own reclaim-distress events, and while
//! either says the cap is near, admission answers 429 instead of starting more work. Without a
//! cap nothing is watched and nothing is shed.
//!
//! - Unreclaimable charge: `memory.usage_in_bytes` less the file pages of `memory.stat`
//!   (`total_inactive_file`, `total_active_file`) on cgroup v1; `memory.current` less `file`
//!   on v2. Shedding starts when it passes the limit less [`reserve_for`] (what the page cache
//!   of the index, the model's rows and the binary need to make progress) and ends once it is
//!   back under it by [`HYSTERESIS_BYTES`].
//! - Reclaim distress (v1 only): a `critical` event of `memory.pressure_level` (the kernel
//!   scans pages and can hardly reclaim any: the step before the OOM killer) sheds for
//!   [`CRITICAL_HOLD`] after the last one. v2's PSI triggers are not used: only the charge rule
//!   applies there (tested on a fake tree, never against a v2 kernel).
//! - Entering the shedding state asks glibc to give freed heap pages back (`malloc_trim`): the
//!   allocator's arenas otherwise keep a burst's peak charged to the cgroup.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::cap::{CgroupFiles, Charge};

/// How often the watcher reads the cgroup's charge.
const POLL: Duration = Duration::from_millis(10);
/// How long a reclaim-distress event sheds load after the last one.
const CRITICAL_HOLD: Duration = Duration::from_millis(250);
/// Shedding by charge ends only once the charge is this far back under the line.
pub const HYSTERESIS_BYTES: u64 = 1 << 20;
/// The least page cache kept free of anonymous memory under any cap.
pub const MIN_RESERVE_BYTES: u64 = 2 << 20;

/// Bytes of the limit kept for page cache (the binary's code, the model's rows, BM25's
/// postings): a 32nd of the limit, at least [`MIN_RESERVE_BYTES`], at most half of what the cap
/// left above the unreclaimable charge at start (so a tight cap that serves at all is not shed
/// from its first request). A SciFact text server capped at 86 MiB was OOM-killed with 84 MiB
/// of it unreclaimable and under 1 MiB of page cache left.
pub fn reserve_for(limit: u64, unreclaimable_at_start: u64) -> u64 {
    let room = limit.saturating_sub(unreclaimable_at_start);
    (limit / 32).max(MIN_RESERVE_BYTES).min(room / 2)
}

/// Whether admission should refuse new work now, and why.
#[derive(Default)]
pub struct Guard {
    /// Set while the charge is past the line (cleared with hysteresis by the watcher).
    by_charge: AtomicBool,
    /// Milliseconds since `epoch` of the last reclaim-distress event (0: none).
    critical_at_ms: AtomicU64,
    epoch: OnceLock<Instant>,
    /// Times shedding started, for /metrics.
    episodes: AtomicU64,
    /// Requests refused for memory, for /metrics.
    refused: AtomicU64,
    /// The line the charge is held under (0 before the watcher starts).
    line: AtomicU64,
}

impl Guard {
    fn now_ms(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
    }

    /// Whether new work is refused now; counts the refusal when it is.
    pub fn shedding(&self) -> bool {
        let critical = self.critical_at_ms.load(Ordering::Acquire);
        let recent =
            critical != 0 && self.now_ms().saturating_sub(critical) <= CRITICAL_HOLD.as_millis() as u64;
        let shed = recent || self.by_charge.load(Ordering::Acquire);
        if shed {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        shed
    }

    /// Times shedding started and requests it refused.
    pub fn counts(&self) -> (u64, u64) {
        (self.episodes.load(Ordering::Relaxed), self.refused.load(Ordering::Relaxed))
    }

    /// The unreclaimable charge shedding starts at (`None`: no cap is watched).
    pub fn line(&self) -> Option<u64> {
        Some(self.line.load(Ordering::Relaxed)).filter(|l| *l > 0)
    }

    /// One watcher step on a reading: starts or ends shedding by charge. Returns whether
    /// shedding started with this reading.
    pub fn observe(&self, charge: Charge, line: u64) -> bool {
        let was = self.by_charge.load(Ordering::Acquire);
        let now =
            if was { charge.unreclaimable + HYSTERESIS_BYTES > line } else { charge.unreclaimable > line };
        self.by_charge.store(now, Ordering::Release);
        let started = now && !was;
        if started {
            self.episodes.fetch_add(1, Ordering::Relaxed);
        }
        started
    }

    /// Records a reclaim-distress event. Returns whether it started a shedding episode.
    pub fn critical(&self) -> bool {
        let now = self.now_ms();
        let before = self.critical_at_ms.swap(now, Ordering::AcqRel);
        let started = before == 0 || now.saturating_sub(before) > CRITICAL_HOLD.as_millis() as u64;
        if started && !self.by_charge.load(Ordering::Acquire) {
            self.episodes.fetch_add(1, Ordering::Relaxed);
        }
        started
    }
}

/// Starts watching this process's memory cgroup, when it has a limit; the guard never sheds
/// otherwise. Logs the line it holds.
pub fn watch() -> Arc<Guard> {
    let guard = Arc::new(Guard::default());
    let Ok(cgroups) = std::fs::read_to_string("/proc/self/cgroup") else { return guard };
    let Some(files) = CgroupFiles::find(Path::new("/sys/fs/cgroup"), &cgroups) else { return guard };
    let Some(start) = files.read() else { return guard };
    let line = start.limit - reserve_for(start.limit, start.unreclaimable);
    guard.line.store(line, Ordering::Relaxed);
    log::info!(
        "memory cap {} MiB: requests are refused (429) while more than {} MiB of it cannot be reclaimed ({} MiB now)",
        start.limit >> 20,
        line >> 20,
        start.unreclaimable >> 20
    );
    let events = files.is_v1().then(|| distress_events(files.dir())).flatten();
    let watched = guard.clone();
    let spawned = std::thread::Builder::new()
        .name("cellar-memory".into())
        .spawn(move || watch_loop(&watched, &files, line, events));
    if let Err(e) = spawned {
        log::warn!("no memory watcher (cannot start its thread: {e}): requests are not shed near the cap");
    }
    guard
}

fn watch_loop(guard: &Guard, files: &CgroupFiles, line: u64, events: Option<EventFd>) {
    let mut last_trim = Instant::now() - Duration::from_secs(1);
    loop {
        let mut started = false;
        if let Some(events) = &events {
            if events.wait(POLL) {
                started |= guard.critical();
            }
        } else {
            std::thread::sleep(POLL);
        }
        if let Some(charge) = files.read() {
            started |= guard.observe(charge, line);
        }
        if started && last_trim.elapsed() >= Duration::from_millis(100) {
            trim_heap();
            last_trim = Instant::now();
        }
    }
}

/// Heap arenas of glibc's allocator in a server. By default it makes up to 8 per core, one per
/// thread that allocates at once, each keeping its freed peak: a SciFact text server capped at
/// 86 MiB held 82-84 MiB it could not reclaim under load and was OOM-killed in two rounds of
/// two; with 2 arenas it held 78-80 MiB and ran to saturation in both
/// (`bench/results/memory-pressure.md`). Set in every server, capped or not, so that the
/// footprint measured without a cap is the one a cap meets.
pub const SERVER_HEAP_ARENAS: i32 = 2;

/// Holds the allocator to [`SERVER_HEAP_ARENAS`] arenas, unless the `MALLOC_ARENA_MAX`
/// environment variable already says how many. Call before the threads that serve start:
/// arenas that exist stay.
pub fn limit_heap_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of the allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, SERVER_HEAP_ARENAS);
    }
}

/// Gives the allocator's free pages back to the kernel (glibc's `malloc_trim`).
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// An eventfd registered for a v1 cgroup's `critical` pressure level.
struct EventFd {
    fd: libc::c_int,
    /// Kept open: the registration lasts while the level file is open.
    _level: std::fs::File,
}

impl EventFd {
    /// Waits up to `timeout` for an event; true when one (or more) arrived.
    fn wait(&self, timeout: Duration) -> bool {
        let mut poll = libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut poll, 1, timeout.as_millis() as libc::c_int) };
        if ready <= 0 {
            return false;
        }
        let mut count = 0u64;
        // SAFETY: reads the 8-byte counter of our own eventfd into a u64.
        let read = unsafe { libc::read(self.fd, (&mut count as *mut u64).cast(), 8) };
        read == 8
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this struct owns.
        unsafe { libc::close(self.fd) };
    }
}

/// Registers for `critical` events of the v1 cgroup at `dir`; `None` (logged) when the
/// kernel refuses.
fn distress_events(dir: &Path) -> Option<EventFd> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let level = std::fs::File::open(dir.join("memory.pressure_level")).ok()?;
    // SAFETY: creates a new descriptor, checked below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let events = EventFd { fd, _level: level };
    let registration = format!("{} {} critical", events.fd, events._level.as_raw_fd());
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.event_control"))
        .and_then(|mut f| f.write_all(registration.as_bytes()));
    match written {
        Ok(()) => Some(events),
        Err(e) => {
            log::warn!("memory pressure events unavailable ({e}): only the charge is watched");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1_tree(limit: u64, usage: u64, inactive: u64, active: u64) -> (tempfile::TempDir, CgroupFiles) {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("memory/bench/server");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.limit_in_bytes"), format!("{limit}\n")).unwrap();
        std::fs::write(dir.join("memory.usage_in_bytes"), format!("{usage}\n")).unwrap();
        let stat = format!("cache 1\nrss 2\ntotal_inactive_file {inactive}\ntotal_active_file {active}\n");
        std::fs::write(dir.join("memory.stat"), stat).unwrap();
        let files = CgroupFiles::find(root.path(), "12:cpu:/\n9:memory:/bench/server\n").unwrap();
        (root, files)
    }

    #[test]
    fn the_unreclaimable_charge_is_usage_less_file_pages_on_both_layouts() {
        let (_root, files) = v1_tree(100 << 20, 90 << 20, 30 << 20, 20 << 20);
        assert_eq!(files.read(), Some(Charge { limit: 100 << 20, unreclaimable: 40 << 20 }));
        let (_root, files) = v1_tree(9223372036854771712, 90 << 20, 30 << 20, 20 << 20);
        assert_eq!(files.read(), None, "v1's unlimited");

        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("user.slice/app");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.max"), "max\n").unwrap();
        std::fs::write(dir.join("memory.current"), "5000\n").unwrap();
        std::fs::write(dir.join("memory.stat"), "anon 3000\nfile 1500\nkernel 500\n").unwrap();
        let files = CgroupFiles::find(root.path(), "0::/user.slice/app\n").unwrap();
        assert_eq!(files.read(), None, "v2's unlimited");
        std::fs::write(dir.join("memory.max"), "8000\n").unwrap();
        assert_eq!(files.read(), Some(Charge { limit: 8000, unreclaimable: 3500 }));
        assert!(CgroupFiles::find(root.path(), "garbage").is_none());
    }

    #[test]
    fn the_reserve_is_a_32nd_within_the_room_the_cap_left() {
        assert_eq!(reserve_for(800 << 20, 100 << 20), 25 << 20);
        assert_eq!(reserve_for(16 << 20, 1 << 20), MIN_RESERVE_BYTES, "at least 2 MiB");
        assert_eq!(reserve_for(64 << 20, 62 << 20), 1 << 20, "half of a tight cap's room");
    }

    #[test]
    fn shedding_by_charge_starts_past_the_line_and_ends_below_it_with_hysteresis() {
        let guard = Guard::default();
        let at = |mib: u64| Charge { limit: 100 << 20, unreclaimable: mib << 20 };
        let line = 80 << 20;
        assert!(!guard.observe(at(70), line) && !guard.shedding());
        assert!(guard.observe(at(81), line), "started");
        assert!(guard.shedding());
        assert!(!guard.observe(at(80), line), "still on: within the hysteresis");
        assert!(guard.shedding());
        assert!(!guard.observe(at(78), line));
        assert!(!guard.shedding(), "back under the line by more than the hysteresis");
        assert_eq!(guard.counts(), (1, 2));
    }

    #[test]
    fn a_distress_event_sheds_for_a_moment() {
        let guard = Guard::default();
        assert!(!guard.shedding());
        assert!(guard.critical(), "the first event starts an episode");
        assert!(!guard.critical(), "a second at once continues it");
        assert!(guard.shedding());
        std::thread::sleep(CRITICAL_HOLD + Duration::from_millis(50));
        assert!(!guard.shedding(), "over after the hold");
        assert_eq!(guard.counts().0, 1);
    }
}
