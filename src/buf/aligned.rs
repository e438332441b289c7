//! [`AlignedBuf`]: one zeroed, block-aligned buffer, as O_DIRECT needs,
//! from a slab slot, a mapping of its own, the heap or a cache's guarded
//! memory, and given back there when dropped.
//!
//! Invariants: a buffer is a whole number of blocks, aligned to
//! [`BLOCK_SIZE`]; a fresh one reads as zeros (a guarded one, as a pooled
//! one, may hold stale bytes, which folio code never exposes); a guarded
//! buffer's record in the crash table follows its bytes (a copy takes it
//! over, a drop frees the slot).

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::base::sys;
use crate::buf::map::{map_populated, Populate, BLOCK_SIZE, MAPPED_BUF_MIN_BYTES};
use crate::buf::slab::{slab_alloc, slab_class, slab_free, stashed_slab, SLAB_BYTES};
use crate::guardian::arena::{Arena, BlockState, Slot};

/// A zero-initialised, 4 KiB-aligned buffer, as O_DIRECT needs: the buffer
/// every folio holds, and public for programs (such as `wbcache bench`)
/// that do their own O_DIRECT I/O next to the cache. Buffers of 2 MiB and
/// more are anonymous mappings of their own (those a multiple of 2 MiB long
/// are aligned to 2 MiB and asked for transparent huge pages, so an I/O on
/// them is few physically contiguous segments where the kernel has huge
/// pages to give); smaller ones are slots of shared 2 MiB slabs. It derefs
/// to `[u8]` and frees its memory on drop.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    origin: Origin,
    /// A slot of a cache's guarded memory (see [`crate::guardian`]): the
    /// arena it goes back to, and the slot its record is kept under.
    guarded: Option<(Arc<Arena>, Slot)>,
}

/// Where a buffer's memory came from, so drop gives it back there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// The global allocator (zero-length buffers too).
    Heap,
    /// Its own mapping ([`MAPPED_BUF_MIN_BYTES`] and more).
    Mapped,
    /// A slot of a slab (smaller power-of-two sizes).
    Slab,
    /// A slot of a cache's guarded memory (shared memory that outlives
    /// the process).
    Guarded,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`; mutation needs `&mut self`.
unsafe impl Sync for AlignedBuf {}

/// Fresh buffers [`AlignedBuf::try_zeroed`] still refuses (the test hook
/// `AlignedBuf::fail_next_allocations`); `u64::MAX` refuses until reset.
static REFUSE_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Takes one refusal off [`REFUSE_ALLOCATIONS`], if any is left.
fn allocation_refused() -> bool {
    // Relaxed: the counter orders nothing else; a test arms it before the
    // operations it wants refused and reads their results afterwards.
    REFUSE_ALLOCATIONS
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
            0 => None,
            u64::MAX => Some(u64::MAX),
            n => Some(n - 1),
        })
        .is_ok()
}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes (a multiple of `BLOCK_SIZE`, or 0).
    /// Aborts the process if no memory can be had at all, as `Vec` does;
    /// [`AlignedBuf::try_zeroed`] reports `ENOMEM` instead.
    pub fn zeroed(len: usize) -> AlignedBuf {
        Self::allocate(len).unwrap_or_else(|| {
            alloc::handle_alloc_error(Layout::from_size_align(len, BLOCK_SIZE).expect("valid layout"))
        })
    }

    /// As [`AlignedBuf::zeroed`], but when neither a mapping nor the heap
    /// has `len` bytes to give (`RLIMIT_AS`, `vm.max_map_count`, memory
    /// exhausted), an `ENOMEM` error instead of an abort: the cache takes
    /// every new folio's buffer this way, so a write that needs one fails
    /// with `ENOMEM` and nothing already cached is touched.
    pub fn try_zeroed(len: usize) -> std::io::Result<AlignedBuf> {
        if len > 0 && allocation_refused() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        }
        Self::allocate(len).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))
    }

    /// As [`AlignedBuf::try_zeroed`], for written data: from `arena`'s
    /// guarded memory when it has room (contents stale, as a pooled
    /// buffer's), else the process's own memory, zeroed.
    pub(crate) fn try_written(arena: Option<&Arc<Arena>>, len: usize) -> std::io::Result<AlignedBuf> {
        if len > 0 && allocation_refused() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        }
        if let Some(buf) = arena.and_then(|arena| AlignedBuf::guarded_stale(arena, len)) {
            return Ok(buf);
        }
        Self::allocate(len).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))
    }

    /// Test hook (the `sim` feature): the next `count` fresh buffers that
    /// [`AlignedBuf::try_zeroed`] is asked for, anywhere in the process,
    /// fail with `ENOMEM` as if `mmap` and the heap had both refused;
    /// `u64::MAX` refuses until the next call, 0 ends the refusals. Buffers
    /// reused from a cache's pool are not fresh and still succeed. Process
    /// wide: a test that arms it should run alone in its process.
    #[cfg(any(test, feature = "sim"))]
    #[doc(hidden)]
    pub fn fail_next_allocations(count: u64) {
        REFUSE_ALLOCATIONS.store(count, Ordering::Relaxed);
    }

    /// `len` zeroed bytes from a slab, a mapping or the heap; `None` when
    /// all of them refuse.
    fn allocate(len: usize) -> Option<AlignedBuf> {
        assert_eq!(len % BLOCK_SIZE, 0, "folio buffers are whole blocks");
        if len == 0 {
            return Some(AlignedBuf { ptr: NonNull::dangling(), len: 0, origin: Origin::Heap, guarded: None });
        }
        if let Some(class) = slab_class(len) {
            if let Some(ptr) = slab_alloc(class) {
                return Some(AlignedBuf { ptr, len, origin: Origin::Slab, guarded: None });
            }
        } else if len == SLAB_BYTES {
            // A slab from the stash is this buffer exactly: populated ahead
            // of demand by the refill thread, off the reader's path.
            if let Some(ptr) = stashed_slab().or_else(|| map_populated(len, Populate::Bulk)) {
                return Some(AlignedBuf { ptr, len, origin: Origin::Mapped, guarded: None });
            }
        } else if len >= MAPPED_BUF_MIN_BYTES {
            if let Some(ptr) = map_populated(len, Populate::Bulk) {
                return Some(AlignedBuf { ptr, len, origin: Origin::Mapped, guarded: None });
            }
        }
        // Out of mappings or memory: the heap may still have room.
        let layout = Layout::from_size_align(len, BLOCK_SIZE).ok()?;
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        Some(AlignedBuf { ptr: NonNull::new(raw)?, len, origin: Origin::Heap, guarded: None })
    }

    /// A buffer of `len` bytes in `arena`'s guarded memory, its contents
    /// stale (as a pooled buffer's: folio code fills or zeroes what it
    /// exposes); `None` when the arena is full.
    pub(crate) fn guarded_stale(arena: &Arc<Arena>, len: usize) -> Option<AlignedBuf> {
        let (slot, ptr) = arena.allocate(len)?;
        debug_assert_eq!(slot.blocks as usize * BLOCK_SIZE, len);
        Some(AlignedBuf { ptr, len, origin: Origin::Guarded, guarded: Some((arena.clone(), slot)) })
    }

    /// The guarded memory slot this buffer is, if it is one.
    pub(crate) fn guard_slot(&self) -> Option<(&Arena, Slot)> {
        self.guarded.as_ref().map(|(arena, slot)| (&**arena, *slot))
    }

    pub(crate) fn is_guarded(&self) -> bool {
        self.guarded.is_some()
    }

    /// Records in the crash table that this (guarded) buffer holds the
    /// folio at `offset` of file `file`; nothing for another buffer.
    /// Returns whether the record is new (its dirty blocks are then still
    /// to be recorded).
    pub(crate) fn record_owner(&self, file: (u32, u32), offset: u64) -> bool {
        self.guard_slot().is_some_and(|(arena, slot)| arena.record_owner(slot, file, offset))
    }

    /// Records blocks `[first, last)` as dirty (held only here) or clean
    /// (on the store, or discarded).
    pub(crate) fn record_blocks(&self, blocks: (usize, usize), state: BlockState) {
        if let Some((arena, slot)) = self.guard_slot() {
            arena.mark(slot, blocks, state);
        }
    }

    /// Forgets this buffer's record: it left its folio.
    pub(crate) fn forget_record(&self) {
        if let Some((arena, slot)) = self.guard_slot() {
            arena.forget(slot);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` to `[at, at + src.len())` with non-temporal stores where
    /// the CPU has them (x86-64, 16-byte aligned whole lines): the bytes go
    /// to memory without the destination's lines being read into the cache
    /// first. For new data that goes to the device next and that no reader
    /// has asked for. A plain copy into a buffer that is not cached reads
    /// every line before writing it: a 4 KiB copy to a random place in
    /// 256 MiB took 0.52 µs that way and 0.37 µs streamed on this project's
    /// machine. The copy is complete and ordered before this returns.
    pub fn copy_in_streaming(&mut self, at: usize, src: &[u8]) {
        let dst = &mut self[at..at + src.len()];
        #[cfg(target_arch = "x86_64")]
        if (dst.as_ptr() as usize) % 16 == 0 && dst.len() % 64 == 0 {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
            let d = dst.as_mut_ptr().cast::<__m128i>();
            let s = src.as_ptr().cast::<__m128i>();
            // SAFETY: SSE2 is part of x86-64. `dst` and `src` are valid for
            // `src.len()` bytes (the slice above checked the bounds) and
            // cannot overlap (`dst` is borrowed mutably from a buffer we
            // own); `d` is 16-byte aligned as `_mm_stream_si128` requires,
            // the loads are unaligned ones, and `i < len / 16` keeps every
            // access in bounds. The fence orders the streamed stores before
            // any later store, e.g. the unlock that publishes them.
            unsafe {
                for i in 0..src.len() / 16 {
                    _mm_stream_si128(d.add(i), _mm_loadu_si128(s.add(i)));
                }
                _mm_sfence();
            }
            return;
        }
        dst.copy_from_slice(src);
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is valid for `len` initialised bytes (or dangling
        // with `len` 0), owned by this buffer until drop; `&mut self` makes
        // this the only reference to them for the borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// A guarded buffer's copy is guarded too, and takes over its record:
/// folio code copies a buffer only to write into the copy while a
/// writeback still holds the original, whose bytes are then no longer the
/// newest (the guardian must write the copy's).
impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        if let Some((arena, slot)) = &self.guarded {
            if let Some(mut copy) = AlignedBuf::guarded_stale(arena, self.len) {
                copy.copy_from_slice(self);
                let to = copy.guard_slot().expect("a guarded copy").1;
                arena.move_record(*slot, to);
                return copy;
            }
        }
        // No room in guarded memory: the copy is the process's own, and the
        // original's record goes (its bytes are no longer the newest); the
        // folio's next write records the copy's dirty blocks.
        self.forget_record();
        let mut copy = AlignedBuf::zeroed(self.len);
        copy.copy_from_slice(self);
        copy
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        match self.origin {
            Origin::Mapped => {
                // SAFETY: the mapping made in `zeroed`, of exactly this
                // length, unmapped once (we own it and are being dropped).
                let rc = unsafe { sys::unmap(self.ptr.as_ptr().cast(), self.len) };
                debug_assert!(rc.is_ok(), "munmap of our own mapping");
            }
            Origin::Slab => slab_free(self.ptr, self.len),
            Origin::Guarded => {
                let (arena, slot) = self.guarded.take().expect("a guarded buffer knows its slot");
                arena.free(slot);
            }
            Origin::Heap if self.len > 0 => {
                let layout = Layout::from_size_align(self.len, BLOCK_SIZE).expect("valid layout");
                // SAFETY: allocated in `zeroed` with this exact layout.
                unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
            }
            Origin::Heap => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::map::HUGE_PAGE_BYTES;
    use crate::buf::slab::SLAB_RELEASE_BATCH_BYTES;

    #[test]
    fn huge_page_mappings_are_aligned_to_a_huge_page() {
        for len in [HUGE_PAGE_BYTES, 3 * HUGE_PAGE_BYTES] {
            let buf = AlignedBuf::zeroed(len);
            assert_eq!(buf.origin, Origin::Mapped);
            assert_eq!(buf.as_ptr() as usize % HUGE_PAGE_BYTES, 0, "a {len}-byte buffer starts on a huge page");
            assert!(buf.iter().all(|&b| b == 0));
        }
        // A slab slot of a 1 MiB buffer lies within one huge page.
        let slot = AlignedBuf::zeroed(HUGE_PAGE_BYTES / 2);
        assert_eq!(slot.origin, Origin::Slab);
        assert_eq!(slot.as_ptr() as usize % (HUGE_PAGE_BYTES / 2), 0);
        // Mapped buffers unmap exactly what was mapped: a neighbour made
        // after a drop is intact.
        let first = AlignedBuf::zeroed(HUGE_PAGE_BYTES);
        let mut second = AlignedBuf::zeroed(HUGE_PAGE_BYTES);
        drop(first);
        second.fill(7);
        assert!(second.iter().all(|&b| b == 7));
    }

    #[test]
    fn buffers_of_every_origin_are_aligned_zeroed_and_reusable() {
        // Slab classes, a mapped size, a heap size (not a power of two);
        // enough rounds that freed slots are released and handed out again.
        let sizes = [BLOCK_SIZE, 8 * BLOCK_SIZE, 128 * BLOCK_SIZE, MAPPED_BUF_MIN_BYTES / 2, MAPPED_BUF_MIN_BYTES];
        for len in sizes.into_iter().chain([2 * MAPPED_BUF_MIN_BYTES, 3 * BLOCK_SIZE]) {
            for _round in 0..3 {
                let count = (2 * SLAB_RELEASE_BATCH_BYTES / len).clamp(2, 2048);
                let mut bufs: Vec<AlignedBuf> = (0..count).map(|_| AlignedBuf::zeroed(len)).collect();
                let mut addrs: Vec<usize> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
                addrs.sort_unstable();
                addrs.dedup();
                assert_eq!(addrs.len(), count, "live buffers of {len} never share memory");
                for b in &mut bufs {
                    assert_eq!(b.len(), len);
                    assert_eq!(b.as_ptr() as usize % BLOCK_SIZE, 0, "O_DIRECT alignment for {len}");
                    assert!(b.iter().all(|&x| x == 0), "a new buffer of {len} reads as zeros, reused or not");
                    b.fill(0xa5);
                }
            }
        }
    }

    #[test]
    fn aligned_buf_is_aligned_and_zeroed() {
        let b = AlignedBuf::zeroed(8 * BLOCK_SIZE);
        assert_eq!(b.as_ptr() as usize % BLOCK_SIZE, 0);
        assert!(b.iter().all(|&x| x == 0));
        let mut c = b.clone();
        c[5] = 9;
        assert_eq!(b[5], 0);
        assert_eq!(c[5], 9);
        assert!(AlignedBuf::zeroed(0).is_empty());
    }

    /// Streamed copies land exactly where plain ones do, on the streaming
    /// path (aligned whole lines) and on the fallback (any other offset or
    /// length), and touch nothing around them.
    #[test]
    fn streaming_copy_matches_a_plain_copy() {
        let src: Vec<u8> = (0..3 * BLOCK_SIZE + 100).map(|i| (i * 7 + 3) as u8).collect();
        for (at, len) in
            [(0, BLOCK_SIZE), (BLOCK_SIZE, 2 * BLOCK_SIZE), (64, 128), (16, 64), (8, 64), (0, 100), (5, 3000)]
        {
            let mut streamed = AlignedBuf::zeroed(4 * BLOCK_SIZE);
            streamed.fill(0xee);
            let mut plain = streamed.clone();
            streamed.copy_in_streaming(at, &src[..len]);
            plain[at..at + len].copy_from_slice(&src[..len]);
            assert!(streamed[..] == plain[..], "copy of {len} bytes at {at}");
        }
    }
}
