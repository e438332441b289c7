//! The slab allocator: a process-wide supply of 2 MiB slabs per size
//! class that smaller power-of-two buffers are slots of, with a stash of
//! populated slabs that the `wbc-slab-refill` thread keeps ahead of demand,
//! and [`BulkFree`] to return many slots in one sorted release.
//!
//! Invariants: a slot is on its class's free list only while it reads as
//! zeros (its pages were given back with `MADV_DONTNEED`, or never
//! touched); a freed slot waits in `pending` until then. The allocator
//! owns slabs and free slots for the life of the process (slabs are never
//! unmapped); a slot handed out is its buffer's until `slab_free`.

use std::ptr::NonNull;
use std::sync::{Condvar, Mutex};

use crate::base::locks;
use crate::base::sys;
use crate::buf::map::{map_populated, Populate, BLOCK_SIZE, MAPPED_BUF_MIN_BYTES};

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
pub(super) const SLAB_BYTES: usize = 2 << 20;
const SLAB_CLASSES: usize = (MAPPED_BUF_MIN_BYTES / BLOCK_SIZE).trailing_zeros() as usize;

// What the slabs assume, checked when the crate builds: a stashed slab is
// handed out whole as a mapped buffer of its size (so it is one, and
// unmapped as one), every slot class is smaller than a slab (a slab holds
// at least two slots of the largest), and a release batch holds at least a
// whole slab.
const _: () = {
    assert!(SLAB_BYTES == MAPPED_BUF_MIN_BYTES);
    assert!(SLAB_CLASSES > 0 && (BLOCK_SIZE << (SLAB_CLASSES - 1)) < SLAB_BYTES);
    assert!(SLAB_BYTES % BLOCK_SIZE == 0);
    assert!(SLAB_RELEASE_BATCH_BYTES >= SLAB_BYTES);
};

/// Slots freed since the last release, held back (at most
/// [`SLAB_RELEASE_BATCH_BYTES`]) so their pages go back to the kernel in
/// few calls: sorted, neighbours coalesce (a cache dropping everything
/// frees whole slabs with one `madvise` each).
pub(super) const SLAB_RELEASE_BATCH_BYTES: usize = 4 << 20;

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

pub(super) fn slab_class(len: usize) -> Option<usize> {
    (len.is_power_of_two() && (BLOCK_SIZE..MAPPED_BUF_MIN_BYTES).contains(&len))
        .then(|| (len / BLOCK_SIZE).trailing_zeros() as usize)
}

pub(super) fn slab_alloc(class: usize) -> Option<NonNull<u8>> {
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
pub(super) fn stashed_slab() -> Option<NonNull<u8>> {
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

pub(super) fn slab_free(ptr: NonNull<u8>, len: usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::aligned::AlignedBuf;

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
}
