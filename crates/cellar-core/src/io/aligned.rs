//! A zeroed heap buffer aligned to the page size, as O_DIRECT requires.

use std::alloc::{alloc_zeroed, dealloc, Layout};

use crate::format::PAGE_BYTES;

pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
    layout: Option<Layout>,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> Self {
        if len == 0 {
            return AlignedBuf { ptr: std::ptr::NonNull::dangling().as_ptr(), len: 0, layout: None };
        }
        let layout = Layout::from_size_align(len, PAGE_BYTES).expect("aligned layout");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len, layout: Some(layout) }
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
        if let Some(layout) = self.layout {
            // SAFETY: allocated with this layout in `zeroed`.
            unsafe { dealloc(self.ptr, layout) }
        }
    }
}
