//! Folio buffers: zeroed, block-aligned memory for O_DIRECT I/O, where it
//! comes from and where it goes back to.
//!
//! - [`AlignedBuf`]: one buffer. Buffers of 2 MiB and more are anonymous
//!   mappings of their own (aligned to huge pages and asked for them); smaller
//!   ones are slots of 2 MiB slabs shared process-wide.
//! - Slabs: a process-wide allocator of 2 MiB slabs per size class, with a
//!   stash that the `wbc-slab-refill` thread keeps faulted in ahead of
//!   demand, and [`BulkFree`] to return many slots under one lock.
//! - [`BufPool`]: a cache's pool of freed folio buffers, reused by new folios
//!   of the same size.
//!
//! Ownership: an `AlignedBuf` owns its memory and gives it back (to its slab
//! or to the kernel) when dropped; the pool owns the buffers it holds; the
//! slab allocator owns slabs and their free slots. Nothing here knows folios.
//!
//! The pool, in detail:
//! A pool of folio buffers freed by eviction, reused by new folios of the
//! same size. Reuse avoids what a fresh allocation costs on every cache fill:
//! zeroing the memory and faulting in each page when the O_DIRECT read pins
//! it (one fault per 4 KiB).
//!
//! Accounting: pooled bytes count against `capacity` together with the
//! folios' bytes (`cached_bytes + pooled_bytes <= capacity`); the pool holds
//! at most a quarter of the capacity and is shrunk before anything is
//! evicted for a buffer of another size. Pooled buffers hold stale data;
//! folio code never exposes a block that is not uptodate, and fills zero
//! whatever the backing store did not supply.

use std::alloc::{self, Layout};
pub mod user;

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use std::sync::Arc;

use crate::base::locks;
use crate::base::sys;
use crate::guardian::arena::{Arena, Slot};

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

/// Smaller power-of-two buffers are slots of [`SLAB_BYTES`] populated
/// mappings, one size class per slab: a fresh 4 KiB folio then costs a
/// share of one populated slab (faulted in ahead by the refill thread, see
/// [`SLAB_STASH_TARGET`]) instead of an aligned `calloc` (heap
/// bookkeeping, zeroing, a page fault), which was half of a 4 KiB write
/// into an uncached block. A freed slot's pages go back to the kernel
/// (`MADV_DONTNEED`, in batches, so it reads as zeros when reused) and the
/// slot is kept for the next buffer of its class. Resident beyond what the
/// cache counts: the unused part of at most one slab per class, the stash,
/// and at most [`SLAB_RELEASE_BATCH_BYTES`] of freed slots awaiting release
/// (more only while a [`BulkFree`] lasts).
const SLAB_BYTES: usize = 2 << 20;
const SLAB_CLASSES: usize = (MAPPED_BUF_MIN_BYTES / BLOCK_SIZE).trailing_zeros() as usize;

/// Slots freed since the last release, held back (at most
/// [`SLAB_RELEASE_BATCH_BYTES`]) so their pages go back to the kernel in
/// few calls: sorted, neighbours coalesce (a cache dropping everything
/// frees whole slabs with one `madvise` each).
const SLAB_RELEASE_BATCH_BYTES: usize = 4 << 20;

/// Populated slabs the refill thread keeps ready, not yet given to a
/// class. Populating is most of the cost of a new small buffer (a third of
/// a 4 KiB write into an uncached block while the cache fills); a growing
/// cache takes its slabs from here, and the thread populates the next ones
/// on another core meanwhile. A buffer of exactly one slab's size (a 2 MiB
/// folio, what readahead and large writes make by default) is a stashed
/// slab too: the first read of a large file then finds its buffers faulted
/// in, instead of paying the first touch of fresh huge pages inside each
/// read (slow and uneven on a virtual machine). Eight slabs (16 MiB) keep
/// the refill thread's work ahead of a reader: `seq-read --memory 1G`
/// single runs, alternating builds, averaged 1,266 MB/s with buffers
/// faulted in by the reader and 1,516 MB/s from a stash of eight. Larger
/// buffers are still populated by their writer. Resident beyond what the
/// cache counts: at most this many slabs, and only once slab-sized or
/// smaller buffers were asked for.
const SLAB_STASH_TARGET: usize = 8;

struct Slabs {
    /// Free slots (addresses) per class, reading as zeros; class `c` holds
    /// `BLOCK_SIZE << c` bytes.
    free: [Vec<usize>; SLAB_CLASSES],
    /// Freed slots whose pages still hold old bytes: (address, class).
    pending: Vec<(usize, usize)>,
    pending_bytes: usize,
    /// Populated whole slabs (each its own mapping of [`SLAB_BYTES`]),
    /// reading as zeros.
    stash: Vec<usize>,
    /// A slab was taken or populated inline since the stash was last
    /// full: the refill thread should top it up.
    refill_wanted: bool,
    refill_thread_started: bool,
    /// Live [`BulkFree`] guards: while any exists, freed slots wait past
    /// the batch size.
    bulk_frees: usize,
}

static SLABS: Mutex<Slabs> = Mutex::new(Slabs::EMPTY);

/// Wakes the refill thread when `refill_wanted` is set.
static SLAB_REFILL: Condvar = Condvar::new();

impl Slabs {
    const EMPTY: Slabs = Slabs {
        free: [const { Vec::new() }; SLAB_CLASSES],
        pending: Vec::new(),
        pending_bytes: 0,
        stash: Vec::new(),
        refill_wanted: false,
        refill_thread_started: false,
        bulk_frees: 0,
    };

    /// Gives the pending slots' pages back to the kernel and makes the
    /// slots free (zero) again. Returns the `madvise` calls it took (one
    /// per run of neighbouring slots).
    fn release_pending(&mut self) -> usize {
        let mut calls = 0;
        let mut pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        pending.sort_unstable();
        let mut i = 0;
        while i < pending.len() {
            let start = pending[i].0;
            let mut end = start + (BLOCK_SIZE << pending[i].1);
            let mut j = i + 1;
            while j < pending.len() && pending[j].0 == end {
                end += BLOCK_SIZE << pending[j].1;
                j += 1;
            }
            // SAFETY: [start, end) is a run of freed slots inside our slab
            // mappings that nobody references any more. MADV_DONTNEED on
            // private anonymous memory only drops the pages (they read as
            // zeros afterwards).
            let rc = unsafe { sys::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
            debug_assert!(rc.is_ok(), "madvise of our own slabs");
            calls += 1;
            // On failure the slots still hold old bytes and would not read
            // as zeros: leak them rather than hand them out again.
            if rc.is_ok() {
                for &(addr, class) in &pending[i..j] {
                    self.free[class].push(addr);
                }
            }
            i = j;
        }
        calls
    }

    /// Queues a freed slot for release; releases the queue once it holds a
    /// batch, unless a [`BulkFree`] lasts.
    fn queue_free(&mut self, addr: usize, class: usize) {
        self.pending.push((addr, class));
        self.pending_bytes += BLOCK_SIZE << class;
        if self.pending_bytes >= SLAB_RELEASE_BATCH_BYTES && self.bulk_frees == 0 {
            self.release_pending();
        }
    }
}

fn slab_class(len: usize) -> Option<usize> {
    (len.is_power_of_two() && (BLOCK_SIZE..MAPPED_BUF_MIN_BYTES).contains(&len))
        .then(|| (len / BLOCK_SIZE).trailing_zeros() as usize)
}

fn slab_alloc(class: usize) -> Option<NonNull<u8>> {
    let slot_bytes = BLOCK_SIZE << class;
    let slab = {
        let mut slabs = locks::lock(&SLABS);
        if slabs.free[class].is_empty() && slabs.pending.iter().any(|&(_, c)| c == class) {
            slabs.release_pending();
        }
        if let Some(addr) = slabs.free[class].pop() {
            return NonNull::new(addr as *mut u8);
        }
        let stashed = slabs.stash.pop();
        slabs.want_refill();
        stashed
    };
    // Populate outside the lock: it takes a while.
    let base = match slab {
        Some(base) => base,
        None => map_populated(SLAB_BYTES, Populate::Bulk)?.as_ptr() as usize,
    };
    let mut slabs = locks::lock(&SLABS);
    slabs.free[class].extend((1..SLAB_BYTES / slot_bytes).rev().map(|i| base + i * slot_bytes));
    NonNull::new(base as *mut u8)
}

/// A populated slab from the stash (its own mapping of [`SLAB_BYTES`],
/// reading as zeros), asking for the stash to be topped up; `None` when
/// the stash is empty.
fn stashed_slab() -> Option<NonNull<u8>> {
    let mut slabs = locks::lock(&SLABS);
    let base = slabs.stash.pop();
    slabs.want_refill();
    NonNull::new(base? as *mut u8)
}

impl Slabs {
    /// Asks the refill thread (started on first use) to top up the stash.
    fn want_refill(&mut self) {
        if self.stash.len() >= SLAB_STASH_TARGET {
            return;
        }
        self.refill_wanted = true;
        if !self.refill_thread_started {
            // Without the thread every slab is populated inline, as before.
            self.refill_thread_started =
                std::thread::Builder::new().name("wbc-slab-refill".into()).spawn(refill_slab_stash).is_ok();
        }
        SLAB_REFILL.notify_one();
    }
}

/// The refill thread: populates slabs into the stash while it is below
/// target and someone took from it since it was last full; sleeps
/// otherwise. It lives as long as the process (one for all caches).
fn refill_slab_stash() {
    let mut slabs = locks::lock(&SLABS);
    loop {
        while !slabs.refill_wanted {
            slabs = locks::wait(&SLAB_REFILL, slabs);
        }
        drop(slabs);
        let slab = map_populated(SLAB_BYTES, Populate::PageByPage);
        slabs = locks::lock(&SLABS);
        match slab {
            Some(p) => slabs.stash.push(p.as_ptr() as usize),
            // Out of memory: stop until the next demand.
            None => slabs.refill_wanted = false,
        }
        if slabs.stash.len() >= SLAB_STASH_TARGET {
            slabs.refill_wanted = false;
        }
    }
}

fn slab_free(ptr: NonNull<u8>, len: usize) {
    let class = slab_class(len).expect("slab buffers have a slab size");
    locks::lock(&SLABS).queue_free(ptr.as_ptr() as usize, class);
}

/// While it lives, buffers freed anywhere in the process wait to go back
/// to the kernel until it is dropped, then go in one sorted release. A
/// cache that frees everything (close) frees its small buffers in no useful
/// order: released 4 MiB at a time they coalesce hardly at all, one
/// `madvise` per 4 KiB slot (64K calls, ~0.16 s, for 256M of 4 KiB folios);
/// released together they make whole slabs again, one call each. Costs no
/// memory the freeing cache was not holding a moment before. The guard is
/// process-wide: while it lasts, other caches' frees wait too (an
/// allocation that finds its size class empty still releases the queue).
pub struct BulkFree(());

impl BulkFree {
    pub fn begin() -> BulkFree {
        locks::lock(&SLABS).bulk_frees += 1;
        BulkFree(())
    }
}

impl Drop for BulkFree {
    fn drop(&mut self) {
        let mut slabs = locks::lock(&SLABS);
        assert!(slabs.bulk_frees > 0, "each guard ends once");
        slabs.bulk_frees -= 1;
        if slabs.bulk_frees == 0 && slabs.pending_bytes >= SLAB_RELEASE_BATCH_BYTES {
            slabs.release_pending();
        }
    }
}

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
fn map_populated(len: usize, how: Populate) -> Option<NonNull<u8>> {
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
enum Populate {
    /// `MAP_POPULATE`: cheapest per page, but the process's `mmap_lock`
    /// is held throughout, and a writer's `malloc` growing its arena
    /// (`mprotect`) waits for all of it.
    Bulk,
    /// One write per page: each fault takes only its mapping's own lock,
    /// so the refill thread never holds up the threads it works for.
    PageByPage,
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
    pub(crate) fn record_blocks(&self, blocks: (usize, usize), dirty: bool) {
        if let Some((arena, slot)) = self.guard_slot() {
            arena.mark(slot, blocks, dirty);
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
        // SAFETY: as in deref, and `&mut self` guarantees exclusive access.
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

#[derive(Default)]
pub struct BufPool {
    /// Free buffers by length.
    free: Mutex<HashMap<usize, Vec<AlignedBuf>>>,
    pooled_bytes: AtomicU64,
}

impl BufPool {
    pub fn pooled_bytes(&self) -> u64 {
        self.pooled_bytes.load(Ordering::Acquire)
    }

    /// A pooled buffer of exactly `len` bytes, if any.
    pub fn take(&self, len: usize) -> Option<AlignedBuf> {
        let mut free = locks::lock(&self.free);
        let buf = free.get_mut(&len)?.pop()?;
        let before = self.pooled_bytes.fetch_sub(len as u64, Ordering::AcqRel);
        debug_assert!(before >= len as u64);
        Some(buf)
    }

    /// Keeps `buf` for reuse unless the pool already holds `cap_bytes`;
    /// returns whether it was kept.
    pub fn put(&self, buf: AlignedBuf, cap_bytes: u64) -> bool {
        if !self.count_pending(buf.len(), cap_bytes) {
            return false;
        }
        self.settle(buf);
        true
    }

    /// Counts a buffer of `len` bytes that will join the pool later
    /// ([`BufPool::settle`]), unless the pool already holds `cap_bytes`
    /// (counted ones included); returns whether it was counted. A buffer
    /// a reader may still be copying from goes through here: it leaves the
    /// cache's account for the pool's at once, so the two never add up to
    /// more than the capacity, and can be handed out once it settles.
    pub fn count_pending(&self, len: usize, cap_bytes: u64) -> bool {
        let _free = locks::lock(&self.free);
        if len == 0 || self.pooled_bytes() + len as u64 > cap_bytes {
            return false;
        }
        self.pooled_bytes.fetch_add(len as u64, Ordering::AcqRel);
        true
    }

    /// A buffer counted by [`BufPool::count_pending`] joins the pool.
    pub fn settle(&self, buf: AlignedBuf) {
        locks::lock(&self.free).entry(buf.len()).or_default().push(buf);
    }

    /// A buffer counted by [`BufPool::count_pending`] will not join the
    /// pool after all (its owner frees it).
    pub fn uncount_pending(&self, len: usize) {
        let before = self.pooled_bytes.fetch_sub(len as u64, Ordering::AcqRel);
        debug_assert!(before >= len as u64, "pooled bytes underflow");
    }

    /// Frees pooled buffers until at least `bytes` are released or the pool
    /// holds none (buffers still pending are not here yet); returns the
    /// bytes freed.
    pub fn shrink(&self, bytes: u64) -> u64 {
        let mut free = locks::lock(&self.free);
        let mut freed = 0u64;
        for bufs in free.values_mut() {
            while freed < bytes {
                let Some(b) = bufs.pop() else { break };
                freed += b.len() as u64;
            }
        }
        self.pooled_bytes.fetch_sub(freed, Ordering::AcqRel);
        freed
    }
}

#[cfg(test)]
mod pool_tests {
    use super::*;

    #[test]
    fn reuses_same_size_and_respects_the_cap() {
        let pool = BufPool::default();
        assert!(pool.take(BLOCK_SIZE).is_none());
        assert!(pool.put(AlignedBuf::zeroed(BLOCK_SIZE), 2 * BLOCK_SIZE as u64));
        assert!(pool.put(AlignedBuf::zeroed(BLOCK_SIZE), 2 * BLOCK_SIZE as u64));
        assert!(!pool.put(AlignedBuf::zeroed(BLOCK_SIZE), 2 * BLOCK_SIZE as u64), "over the cap");
        assert_eq!(pool.pooled_bytes(), 2 * BLOCK_SIZE as u64);
        assert!(pool.take(2 * BLOCK_SIZE).is_none(), "sizes are exact");
        assert_eq!(pool.take(BLOCK_SIZE).unwrap().len(), BLOCK_SIZE);
        assert_eq!(pool.shrink(u64::MAX), BLOCK_SIZE as u64);
        assert_eq!(pool.pooled_bytes(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Slots freed in random order while a bulk free lasts all wait, then
    /// go back as one run: a whole slab in one `madvise`, reading as zeros.
    #[test]
    fn a_bulk_free_gives_a_whole_slab_back_in_one_call() {
        // A slab of its own and a private `Slabs`: the global one is shared
        // with other tests.
        let base = map_populated(SLAB_BYTES, Populate::Bulk).expect("a 2 MiB mapping").as_ptr() as usize;
        let mut slabs = Slabs { bulk_frees: 1, ..Slabs::EMPTY };
        let mut slots: Vec<usize> = (0..SLAB_BYTES / BLOCK_SIZE).map(|i| base + i * BLOCK_SIZE).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in (1..slots.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            slots.swap(i, (x % (i as u64 + 1)) as usize);
        }
        for &slot in &slots {
            // SAFETY: the slot lies in the mapping made above, used by no one else.
            unsafe { *(slot as *mut u8) = 0xa5 };
            slabs.queue_free(slot, 0);
        }
        // Twice the batch, so the guard is what held the release back.
        let second = map_populated(SLAB_BYTES, Populate::Bulk).expect("a 2 MiB mapping").as_ptr() as usize;
        for i in (0..SLAB_BYTES / BLOCK_SIZE).rev() {
            slabs.queue_free(second + i * BLOCK_SIZE, 0);
        }
        assert!(slabs.pending_bytes >= SLAB_RELEASE_BATCH_BYTES, "nothing released while the guard lasts");
        assert_eq!(slabs.pending.len(), 2 * SLAB_BYTES / BLOCK_SIZE);
        slabs.bulk_frees = 0;
        let calls = slabs.release_pending();
        assert!(calls <= 2, "{calls} calls for two whole slabs (one each, or one if adjacent)");
        assert_eq!(slabs.free[0].len(), 2 * SLAB_BYTES / BLOCK_SIZE);
        // SAFETY: the slots are still mapped (released pages read as zeros).
        assert!(slots.iter().all(|&slot| unsafe { *(slot as *const u8) } == 0), "released slots read as zeros");
        for b in [base, second] {
            // SAFETY: our own test mappings, of exactly this length.
            assert_eq!(unsafe { libc::munmap(b as *mut libc::c_void, SLAB_BYTES) }, 0);
        }
    }

    /// The refill thread fills the stash, and buffers carved from stashed
    /// slabs read as zeros and never overlap (other tests share the slabs,
    /// so only what holds under any interleaving is checked).
    #[test]
    fn stashed_slabs_are_refilled_and_hand_out_zeroed_buffers() {
        SLABS.lock().unwrap().want_refill();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while SLABS.lock().unwrap().stash.len() < SLAB_STASH_TARGET {
            assert!(std::time::Instant::now() < deadline, "the refill thread tops the stash up");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // More slabs' worth of the largest slab class than the stash holds.
        let len = MAPPED_BUF_MIN_BYTES / 2;
        let count = (SLAB_STASH_TARGET + 2) * SLAB_BYTES / len;
        let bufs: Vec<AlignedBuf> = (0..count).map(|_| AlignedBuf::zeroed(len)).collect();
        let mut ranges: Vec<(usize, usize)> = bufs.iter().map(|b| (b.as_ptr() as usize, b.len())).collect();
        ranges.sort_unstable();
        assert!(ranges.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "live buffers never overlap");
        for b in &bufs {
            assert_eq!(b.as_ptr() as usize % BLOCK_SIZE, 0);
            assert!(b.iter().all(|&x| x == 0), "a buffer from a stashed slab reads as zeros");
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
