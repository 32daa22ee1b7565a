//! What the libFuzzer targets of `fuzz_targets/` share: a scratch directory for the parsers
//! that read a path, an allocation cap, and a mutator that recomputes checksums.
//!
//! Coverage guidance steers libFuzzer's mutations towards new branches, but a checksum stops
//! most mutated inputs before the decoding behind it; for the targets with a fix-up (the same
//! ones `cellar-bench fuzz` has), half the mutations are followed by it so that both sides of
//! the checksum are explored. A length field asking for more than [`ALLOC_CAP`] bytes makes the
//! allocation fail, which aborts: libFuzzer reports the abort as a crash and saves its input
//! (without a sanitizer, its own `-malloc_limit_mb` sees no allocation).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Allocations above this fail: no parser of an input of at most 1 MiB needs 1 GiB.
pub const ALLOC_CAP: usize = 1 << 30;

/// The system allocator, failing requests above [`ALLOC_CAP`].
pub struct CappedAlloc;

// SAFETY: every call is System's, or a null return that GlobalAlloc allows for a failure.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on (GlobalAlloc's contract).
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on (GlobalAlloc's contract).
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every allocation here is System's).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from `System` with this layout (every allocation here is System's).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CappedAlloc = CappedAlloc;

/// A directory of this process for the parsers that read a file: under `$CELLAR_FUZZ_SCRATCH`
/// if set, else a tmpfs where there is one.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = match std::env::var_os("CELLAR_FUZZ_SCRATCH") {
            Some(dir) => PathBuf::from(dir),
            None if shm.is_dir() => shm.to_path_buf(),
            None => std::env::temp_dir(),
        };
        let dir = base.join(format!("cellar-libfuzzer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    })
}

/// libFuzzer's own mutation of `data[..size]`, then `fixup` when `seed` is odd; returns the
/// new size (at most `max_size`).
pub fn mutate_then_fix(
    data: &mut [u8],
    size: usize,
    max_size: usize,
    seed: u32,
    fixup: fn(&mut Vec<u8>),
) -> usize {
    let size = libfuzzer_sys::fuzzer_mutate(data, size, max_size);
    if seed % 2 == 0 {
        return size;
    }
    let mut bytes = data[..size].to_vec();
    fixup(&mut bytes);
    let size = bytes.len().min(max_size);
    data[..size].copy_from_slice(&bytes[..size]);
    size
}
