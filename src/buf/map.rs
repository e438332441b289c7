//! Memory from the kernel: the sizes every buffer is built from (the
//! block, the huge page) and the private anonymous mappings buffers and
//! slabs are cut from, zeroed and faulted in ahead of use.
//!
//! Invariants: every mapping made here is aligned to [`BLOCK_SIZE`] (to
//! [`HUGE_PAGE_BYTES`] when its length is a multiple of it) and reads as
//! zeros; its caller owns it and unmaps it.

use std::ptr::NonNull;

use crate::base::sys;

/// The unit of uptodate/dirty tracking and of I/O alignment: every buffer
/// here is aligned to it, as O_DIRECT needs.
pub const BLOCK_SIZE: usize = 4096;

/// Buffers at least this large get their own populated anonymous mapping:
/// the kernel hands them over zeroed and faulted in, about 40% cheaper here
/// than `calloc` (which zeroes recycled heap memory and then takes one page
/// fault per 4 KiB on first touch). Smaller ones share slabs: one mapping
/// each would exhaust `vm.max_map_count`. Both are backed by transparent
/// huge pages where the kernel has them (see [`HUGE_PAGE_BYTES`]), which is
/// why 1 MiB buffers are slab slots: a 1 MiB mapping of its own could never
/// be a huge page.
pub const MAPPED_BUF_MIN_BYTES: usize = HUGE_PAGE_BYTES;

/// Mappings made in multiples of this size are aligned to it and asked for
/// transparent huge pages (`MADV_HUGEPAGE`). A buffer on one huge page is
/// physically contiguous, so an O_DIRECT I/O on it is one segment instead
/// of one per 4 KiB page, and the device handles fewer, larger pieces: on
/// this project's virtio disk, 1 MiB O_DIRECT reads at queue depth 4 ran at
/// 1.6-1.7 GB/s from 4 KiB pages and 3.0 GB/s from huge pages, and writes
/// at 1.7-1.9 against 2.1 GB/s. Where the kernel has no huge page to give
/// (THP disabled, memory fragmented) the mapping is plain 4 KiB pages, as
/// before.
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

// What the buffers and slabs cut from mappings assume, checked when the
// crate builds: blocks and huge pages are powers of two, and a huge page
// (the smallest buffer with a mapping of its own) is whole blocks.
const _: () = {
    assert!(BLOCK_SIZE.is_power_of_two() && HUGE_PAGE_BYTES.is_power_of_two());
    assert!(HUGE_PAGE_BYTES % BLOCK_SIZE == 0);
};

/// A private anonymous mapping of `len` bytes, zeroed and faulted in: on
/// huge pages when `len` is a multiple of [`HUGE_PAGE_BYTES`] (see
/// [`map_huge_aligned`]), else small pages.
///
/// The trade-off: on this project's virtual machines the first touch of
/// fresh huge pages is slow and varies (256 MiB in 0.03-0.63 s, against
/// 0.06-0.09 s for small pages: the host backs each fresh huge page then),
/// which a cache filling for the first time pays; every I/O on the buffer
/// afterwards is faster (one segment, not one per 4 KiB page), and pooled
/// buffers are reused without another first touch. Measured over the
/// bench's streaming rows, huge pages won (+17-24%).
pub(super) fn map_populated(len: usize, how: Populate) -> Option<NonNull<u8>> {
    if len % HUGE_PAGE_BYTES == 0 {
        if let Some(ptr) = map_huge_aligned(len) {
            return Some(ptr);
        }
    }
    let flags = match how {
        Populate::Bulk => libc::MAP_POPULATE,
        Populate::PageByPage => 0,
    };
    // MAP_POPULATE only pre-faults the mapping.
    let ptr = sys::map_anonymous(len, flags)?.cast::<u8>();
    debug_assert_eq!(ptr.as_ptr() as usize % BLOCK_SIZE, 0, "mappings are page aligned");
    if how == Populate::PageByPage {
        for page in (0..len).step_by(BLOCK_SIZE) {
            // SAFETY: `page` lies inside the mapping just made, which
            // nobody else knows of yet; writing the zero it already reads
            // as only faults the page in.
            unsafe { std::ptr::write_volatile(ptr.as_ptr().add(page), 0) };
        }
    }
    Some(ptr)
}

/// A private anonymous mapping of `len` bytes (a multiple of
/// [`HUGE_PAGE_BYTES`]) aligned to a huge page, advised to use huge pages,
/// zeroed and faulted in. Populated by touching it page by page (so each
/// fault takes only the mapping's lock, as [`Populate::PageByPage`]): with
/// huge pages the first touch of each 2 MiB faults it all in and the rest
/// are cheap; without, it is the 4 KiB path. `MAP_POPULATE` would fault the
/// pages in before the advice could apply.
fn map_huge_aligned(len: usize) -> Option<NonNull<u8>> {
    debug_assert_eq!(len % HUGE_PAGE_BYTES, 0);
    let span = len.checked_add(HUGE_PAGE_BYTES)?;
    let raw = sys::map_anonymous(span, 0)?.as_ptr();
    let start = raw as usize;
    let aligned = start.next_multiple_of(HUGE_PAGE_BYTES);
    let head = aligned - start;
    let tail = span - head - len;
    // SAFETY: [start, aligned) and [aligned + len, start + span) are the
    // parts of the mapping just made that lie outside the aligned buffer;
    // nothing refers to them. Unmapping page-aligned parts of a mapping is
    // allowed and leaves the rest mapped.
    unsafe {
        if head > 0 {
            let _ = sys::unmap(raw, head);
        }
        if tail > 0 {
            let _ = sys::unmap((aligned + len) as *mut libc::c_void, tail);
        }
        // Advice only: EINVAL where THP is compiled out, and the mapping
        // is then plain pages.
        let _ = sys::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    for page in (aligned..aligned + len).step_by(BLOCK_SIZE) {
        // SAFETY: `page` lies inside the aligned mapping just made, which
        // nobody else knows of yet; writing the zero it already reads as
        // only faults the page in.
        unsafe { std::ptr::write_volatile(page as *mut u8, 0) };
    }
    NonNull::new(aligned as *mut u8)
}

/// How [`map_populated`] faults a new mapping in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Populate {
    /// `MAP_POPULATE`: cheapest per page, but the process's `mmap_lock`
    /// is held throughout, and a writer's `malloc` growing its arena
    /// (`mprotect`) waits for all of it.
    Bulk,
    /// One write per page: each fault takes only its mapping's own lock,
    /// so the refill thread never holds up the threads it works for.
    PageByPage,
}
