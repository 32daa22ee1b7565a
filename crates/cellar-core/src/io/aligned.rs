//! A zeroed buffer aligned to the page size, as O_DIRECT requires.
//!
//! Buffers of `OWN_MAPPING_BYTES` or more get an anonymous mapping of their own, unmapped when
//! dropped: a batch buffer of several MiB per search then goes back to the OS at once. Through
//! the allocator (glibc raises its mmap threshold after such a block is freed) every worker kept
//! its largest batch buffer resident, and a server under a memory cap was killed for it.

use std::alloc::{alloc_zeroed, dealloc, Layout};

use super::budget::Grant;
use crate::format::PAGE_BYTES;

/// Smallest buffer given a mapping of its own.
const OWN_MAPPING_BYTES: usize = 256 * 1024;

enum Backing {
    Empty,
    Heap(Layout),
    Mapping,
}

pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: a shared reference only reads its bytes, as a `&Vec<u8>` does.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> Self {
        if len == 0 {
            return AlignedBuf {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
                backing: Backing::Empty,
            };
        }
        if len >= OWN_MAPPING_BYTES {
            return Self::mapped(len);
        }
        let layout = Layout::from_size_align(len, PAGE_BYTES).expect("aligned layout");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len, backing: Backing::Heap(layout) }
    }

    /// A private anonymous mapping: page-aligned and zero-filled by the kernel.
    fn mapped(len: usize) -> Self {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
        if ptr == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(Layout::from_size_align(len, PAGE_BYTES).expect("aligned layout"));
        }
        AlignedBuf { ptr: ptr.cast(), len, backing: Backing::Mapping }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        match self.backing {
            Backing::Empty => {}
            // SAFETY: allocated with this layout in `zeroed`.
            Backing::Heap(layout) => unsafe { dealloc(self.ptr, layout) },
            // SAFETY: mapped with this length in `mapped`, and no slice of it outlives self.
            Backing::Mapping => unsafe {
                libc::munmap(self.ptr.cast(), self.len);
            },
        }
    }
}

/// Page-aligned buffers of one size, reused across batches: a direct read into a pooled buffer
/// maps nothing, unmaps nothing and faults no page in (its pages were touched by an earlier
/// batch), where a fresh buffer per batch cost a mapping, a page fault per 4 KiB and an unmap.
/// At most `max_free` idle buffers are kept; a batch larger than one buffer gets a buffer of
/// its own, returned to the OS when it is dropped.
pub struct BufferPool {
    buf_bytes: usize,
    max_free: usize,
    free: std::sync::Mutex<Vec<AlignedBuf>>,
}

impl BufferPool {
    pub fn new(buf_bytes: usize, max_free: usize) -> std::sync::Arc<BufferPool> {
        std::sync::Arc::new(BufferPool { buf_bytes, max_free, free: std::sync::Mutex::new(Vec::new()) })
    }

    /// A buffer of at least `len` bytes (its first `len` are what the batch uses; their content
    /// is whatever an earlier batch left: every byte of it is read over before it is used).
    /// Waits while the process's read-buffer budget (`budget`) has no room for it.
    pub fn take(self: &std::sync::Arc<Self>, len: usize) -> PooledBuf {
        if len > self.buf_bytes {
            let grant = Grant::take(len);
            return PooledBuf { buf: AlignedBuf::zeroed(len), len, pool: None, _grant: grant };
        }
        let grant = Grant::take(self.buf_bytes);
        let reused = self.free.lock().expect("buffer pool lock").pop();
        let buf = reused.unwrap_or_else(|| AlignedBuf::zeroed(self.buf_bytes));
        PooledBuf { buf, len, pool: Some(self.clone()), _grant: grant }
    }

    fn give(&self, buf: AlignedBuf) {
        if buf.len != self.buf_bytes {
            return; // abandoned after a failed read (replaced by an empty buffer), or oversized
        }
        let mut free = self.free.lock().expect("buffer pool lock");
        if free.len() < self.max_free {
            free.push(buf);
        }
    }
}

/// A batch's buffer, back to its pool when dropped.
pub struct PooledBuf {
    buf: AlignedBuf,
    len: usize,
    pool: Option<std::sync::Arc<BufferPool>>,
    /// Its share of the read-buffer budget, given back when dropped.
    _grant: Grant,
}

impl PooledBuf {
    pub fn as_slice(&self) -> &[u8] {
        &self.buf.as_slice()[..self.len]
    }

    /// The whole underlying buffer (at least `len` bytes), for the reads to fill.
    pub fn inner_mut(&mut self) -> &mut AlignedBuf {
        &mut self.buf
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give(std::mem::replace(&mut self.buf, AlignedBuf::zeroed(0)));
        }
    }
}
