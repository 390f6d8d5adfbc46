//! The process's allocator: mimalloc, entered where its fast paths are.
//!
//! The twin allocates and frees small objects (names, compact pods and claims) at every event; mimalloc's size-class
//! free lists measured 25–30% faster than glibc's allocator on ref-1k when chosen, and still 5–8% once the twin
//! allocated far less (d2f3b02; glibc's peak memory is a third lower: docs/performance.md). The `mimalloc` crate's
//! allocator hands every request to `mi_malloc_aligned`, whose fast path is longer than `mi_malloc`'s and which, for
//! any block above 1 KiB (B-tree nodes, growing vectors), over-allocates and aligns by hand. Every block of 16 bytes
//! or more that `mi_malloc` returns is 16-byte aligned (and a smaller one is aligned to its size class, a multiple of
//! 8), so a request whose alignment is at most 16 and at most its size takes `mi_malloc`, as the standard library's
//! own `System` allocator does with `malloc`; anything else still takes the aligned entry points.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every `mi_malloc` block of at least this size has (mimalloc's `MI_MAX_ALIGN_SIZE`).
const PLAIN_ALIGN: usize = 16;

pub struct MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the position of `mi_option_purge_delay` in `mi_option_e`, mimalloc 3's
/// `mimalloc.h`; `libmimalloc-sys` names the options around it but not this one).
const OPTION_PURGE_DELAY: mi::mi_option_t = 15;

/// Keeps the memory the process frees for its own later use instead of returning it to the system after mimalloc's
/// one-second delay. For the batch commands (a run, a suite, a study), whose memory ends with them: a run frees and
/// allocates at every event, and returned pages came back through a page fault and the kernel's zeroing of a fresh
/// huge page (ref-1k: up to ~2,400 faults and 0.25 s of system time; ~340 faults when nothing is given back). Not for
/// the live controller, which runs for weeks and should give back what a burst took. An operator's
/// `MIMALLOC_PURGE_DELAY` still decides.
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: a plain FFI call setting an option by its index.
        unsafe { mi::mi_option_set(OPTION_PURGE_DELAY, -1) }
    }
}

fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` takes blocks of either entry point); a block
// taken through `mi_malloc`/`mi_zalloc`/`mi_realloc` meets the layout's alignment by the rule above.
unsafe impl GlobalAlloc for MiMalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls with a size and a power-of-two alignment.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_malloc(layout.size()) as *mut u8
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_zalloc(layout.size()) as *mut u8
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator, hence by mimalloc.
        unsafe { mi::mi_free(ptr as *mut c_void) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by this allocator with `layout`; the new block keeps its alignment.
        unsafe {
            if plain(layout.align(), new_size) {
                mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
            } else {
                mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option set is mimalloc's purge delay: it starts at that option's default of 1,000 ms (`options.c`; no
    /// other option defaults to 1,000), and setting it reads back.
    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: plain FFI calls reading and setting an option by its index.
        unsafe {
            assert_eq!(mi::mi_option_get(OPTION_PURGE_DELAY), 1_000, "mimalloc's default purge delay");
            keep_freed_memory();
            assert_eq!(mi::mi_option_get(OPTION_PURGE_DELAY), -1);
            mi::mi_option_set(OPTION_PURGE_DELAY, 1_000);
        }
    }

    /// Blocks of every size and alignment up to a page come back aligned as asked, and survive a move by `realloc`.
    #[test]
    fn blocks_meet_their_layouts() {
        let allocator = MiMalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1usize, 3, 8, 12, 16, 24, 40, 48, 100, 1000, 1024, 1040, 3000, 70_000] {
                if size % align != 0 && size > align {
                    continue;
                }
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero layout; the block is written within its size and freed with its layout.
                unsafe {
                    let block = allocator.alloc(layout);
                    assert!(!block.is_null());
                    assert_eq!(block as usize % align, 0, "size {size}, align {align}");
                    block.write_bytes(0xab, size);
                    let zeroed = allocator.alloc_zeroed(layout);
                    assert_eq!(zeroed as usize % align, 0, "zeroed: size {size}, align {align}");
                    assert!(std::slice::from_raw_parts(zeroed, size).iter().all(|b| *b == 0));
                    let grown = allocator.realloc(block, layout, size * 3);
                    assert_eq!(grown as usize % align, 0, "grown: size {size}, align {align}");
                    assert!(std::slice::from_raw_parts(grown, size).iter().all(|b| *b == 0xab));
                    allocator.dealloc(grown, Layout::from_size_align(size * 3, align).unwrap());
                    allocator.dealloc(zeroed, layout);
                }
            }
        }
    }
}
