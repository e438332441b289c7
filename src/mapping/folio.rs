//! Folios: a naturally aligned power-of-two run of blocks with one buffer and
//! per-block uptodate / dirty / writeback bitmaps.
//!
//! Ownership: the mapping owns folios (`Arc<Folio>`); all mutable state lives
//! in [`FolioState`] behind the folio's mutex. The buffer is an
//! `Arc<AlignedBuf>`: writeback takes a clone of that `Arc` and writes from
//! it without holding the lock, so a writer that finds the buffer shared
//! copies it first (`Arc::make_mut`) and never waits for I/O on a folio under
//! writeback. A folio being filled from the backing store has
//! `read_in_flight` set; others wait on `filled` instead of issuing their own
//! read (one I/O per missing folio).
//!
//! Invariants (asserted in `check`): `nr_dirty` and `nr_writeback` equal the
//! bit counts of their bitmaps, dirty blocks are uptodate, `all_uptodate` is
//! true exactly when every block is uptodate, and a removed folio has no
//! dirty blocks.

use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::base::locks::{self, Ordered, Rank};
use crate::buf::AlignedBuf;
use crate::io::BLOCK_SIZE;

/// A folio's lock, held: its state, and (debug builds) its place in the
/// lock order.
pub type FolioGuard<'a> = Ordered<MutexGuard<'a, FolioState>>;

/// A fixed-size bitmap; one bit per block. Folios of up to 64 blocks (256
/// KiB) keep it inline, larger ones on the heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bitmap {
    Inline(u64),
    Heap(Box<[u64]>),
}

impl Bitmap {
    pub fn new(nbits: usize) -> Bitmap {
        if nbits <= 64 {
            Bitmap::Inline(0)
        } else {
            Bitmap::Heap(vec![0u64; nbits.div_ceil(64)].into_boxed_slice())
        }
    }

    fn words(&self) -> &[u64] {
        match self {
            Bitmap::Inline(w) => std::slice::from_ref(w),
            Bitmap::Heap(ws) => ws,
        }
    }

    fn words_mut(&mut self) -> &mut [u64] {
        match self {
            Bitmap::Inline(w) => std::slice::from_mut(w),
            Bitmap::Heap(ws) => ws,
        }
    }

    pub fn get(&self, bit: usize) -> bool {
        self.words()[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Applies `f(word, mask)` to each word overlapping `[start, end)`; cost
    /// is O(words touched), i.e. O(bytes of the range).
    fn for_range(&mut self, start: usize, end: usize, mut f: impl FnMut(&mut u64, u64)) {
        let words = self.words_mut();
        let mut bit = start;
        while bit < end {
            let word = bit / 64;
            let lo = bit % 64;
            let hi = (end - word * 64).min(64);
            let mask = if hi - lo == 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << lo };
            f(&mut words[word], mask);
            bit = word * 64 + hi;
        }
    }

    /// Sets `[start, end)`; returns how many bits were newly set.
    pub fn set_range(&mut self, start: usize, end: usize) -> usize {
        debug_assert!(start <= end && end <= self.words().len() * 64, "a range within the bitmap");
        let mut newly = 0;
        self.for_range(start, end, |w, m| {
            newly += (m & !*w).count_ones() as usize;
            *w |= m;
        });
        debug_assert!(newly <= end - start && self.next_clear(start, end).is_none(), "the range is set");
        newly
    }

    /// Clears `[start, end)`; returns how many bits were set before.
    pub fn clear_range(&mut self, start: usize, end: usize) -> usize {
        debug_assert!(start <= end && end <= self.words().len() * 64, "a range within the bitmap");
        let mut cleared = 0;
        self.for_range(start, end, |w, m| {
            cleared += (m & *w).count_ones() as usize;
            *w &= !m;
        });
        debug_assert!(cleared <= end - start && self.next_set(start, end).is_none(), "the range is clear");
        cleared
    }

    /// Number of set bits in `[start, end)`.
    pub fn count_range(&mut self, start: usize, end: usize) -> usize {
        let mut n = 0;
        self.for_range(start, end, |w, m| n += (m & *w).count_ones() as usize);
        n
    }

    pub fn count(&self) -> usize {
        self.words().iter().map(|w| w.count_ones() as usize).sum()
    }

    /// First set bit at or after `from` (below `nbits`).
    pub fn next_set(&self, from: usize, nbits: usize) -> Option<usize> {
        self.next_with(from, nbits, |word| word)
    }

    /// First clear bit at or after `from` (below `nbits`).
    pub fn next_clear(&self, from: usize, nbits: usize) -> Option<usize> {
        self.next_with(from, nbits, |word| !word)
    }

    /// First bit at or after `from` (below `nbits`) set in `view` of its
    /// word.
    fn next_with(&self, from: usize, nbits: usize, view: impl Fn(u64) -> u64) -> Option<usize> {
        let words = self.words();
        let mut bit = from;
        while bit < nbits {
            let word = view(words[bit / 64]);
            let masked = word & (u64::MAX << (bit % 64));
            if masked != 0 {
                let found = (bit / 64) * 64 + masked.trailing_zeros() as usize;
                return (found < nbits).then_some(found);
            }
            bit = (bit / 64 + 1) * 64;
        }
        None
    }

    /// Maximal runs of bits set here and clear in `exclude`, within
    /// `[0, nbits)`: the dirty blocks not under writeback.
    pub fn runs_excluding(&self, exclude: &Bitmap, nbits: usize) -> Vec<(usize, usize)> {
        let words: Vec<u64> = self.words().iter().zip(exclude.words()).map(|(a, b)| a & !b).collect();
        let combined = if words.len() == 1 { Bitmap::Inline(words[0]) } else { Bitmap::Heap(words.into_boxed_slice()) };
        combined.runs(nbits)
    }

    /// Maximal runs of set bits within `[0, nbits)`, as `(start, end)`.
    pub fn runs(&self, nbits: usize) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        let mut at = 0;
        while let Some(start) = self.next_set(at, nbits) {
            let end = self.next_clear(start, nbits).unwrap_or(nbits);
            runs.push((start, end));
            at = end;
        }
        runs
    }
}

/// [`crate::File::residency`] bit: the block's data is in the cache (uptodate).
pub const RESIDENT_CACHED: u8 = 1;
/// [`crate::File::residency`] bit: the block is dirty (not yet written back).
pub const RESIDENT_DIRTY: u8 = 2;
/// [`crate::File::residency`] bit: the block is being written back now.
pub const RESIDENT_WRITEBACK: u8 = 4;

/// Mutable state of a folio, guarded by [`Folio::state`].
pub struct FolioState {
    /// The data. Shared with in-flight writeback I/O; see the module docs.
    /// Changed only inside [`Folio::change`] ([`FolioState::buf_mut`]), so
    /// that lock-free readers see every change bracketed by the folio's
    /// sequence.
    buf: Arc<AlignedBuf>,
    /// Inside [`Folio::change`] (debug builds check `buf_mut` against it).
    #[cfg(debug_assertions)]
    changing: bool,
    pub uptodate: Bitmap,
    /// Fast path: every block is uptodate, so writes skip the per-block walk.
    pub all_uptodate: bool,
    pub dirty: Bitmap,
    pub nr_dirty: usize,
    pub writeback: Bitmap,
    pub nr_writeback: usize,
    /// Dirty blocks dirtied by uncached writes (accounted in the domain's
    /// `dontcache_dirty`), taken by the next writeback.
    pub dontcache_dirty: usize,
    /// The folio is being filled from the backing store; wait on `filled`.
    pub read_in_flight: bool,
    /// Threads waiting on `filled` now ([`Folio::lock_filled`]): the fill
    /// wakes them only when there are some, as a `notify_all` is a system
    /// call even with no one to wake (one per read miss otherwise).
    pub fill_waiters: u32,
    /// Removed from its mapping (evicted or truncated): callers that looked it
    /// up must look again.
    pub removed: bool,
}

/// What [`Folio::copy_optimistic`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimisticCopy {
    /// The bytes copied are one published state of the folio's data.
    Copied,
    /// The folio cannot be read without its lock now (a change under way,
    /// blocks not all uptodate, a fill in flight, removed): nothing copied.
    NotReadable,
    /// A writer changed the folio during the copy: discard it.
    Changed,
}

/// Bit of `Folio::referenced` set by the first access.
const TOUCHED: u8 = 0x80;

/// A cached folio. `index` is the first block (offset / `BLOCK_SIZE`); the
/// folio covers `1 << order` blocks and `index` is a multiple of that.
pub struct Folio {
    pub index: u64,
    pub order: u8,
    pub state: Mutex<FolioState>,
    /// Signalled when `read_in_flight` clears.
    pub filled: Condvar,
    /// Eviction frequency: a touched bit plus a count 0..=3, updated on
    /// access without the lock (see `mark_accessed`).
    pub referenced: AtomicU8,
    /// Drop after writeback when clean (uncached writes and reads).
    pub dropbehind: AtomicBool,
    /// The change sequence of the folio's published data: odd while a
    /// change is under way ([`Folio::change`]), bumped by two per change.
    /// Written only under the folio's lock; read without it by optimistic
    /// readers, which validate their copy against it.
    seq: AtomicU64,
    /// The buffer's data while the folio can be read without its lock
    /// (every block uptodate, no fill in flight, still in its mapping),
    /// null otherwise. Kept equal to that by [`Folio::change`].
    readable: AtomicPtr<u8>,
    /// The folio's standing in its inode's dirty index ([`DirtyMark`]),
    /// for code that holds the index lock and so may not take the folio
    /// lock (the index lock nests inside it). Written under the folio lock
    /// before the index is changed to match.
    pub dirty_mark: AtomicU8,
}

/// Values of [`Folio::dirty_mark`].
pub struct DirtyMark;

impl DirtyMark {
    /// No dirty blocks; not indexed, or its entry is about to go.
    pub const CLEAN: u8 = 0;
    /// Dirty blocks; indexed.
    pub const DIRTY: u8 = 1;
    /// Taken out of its mapping; an index entry that still holds it goes
    /// at the next writeback pass that meets it (an entry at its key may
    /// also hold a newer folio by now).
    pub const REMOVED: u8 = 2;
}

/// Bytes of metadata one folio costs beyond its buffer (for the metadata
/// bound in stats): the struct, its bitmaps on the heap, and its
/// eviction-queue entry. The folio index counts its own nodes.
pub fn metadata_bytes_for(nr_blocks: usize) -> usize {
    let heap_bitmaps = if nr_blocks > 64 { 3 * nr_blocks.div_ceil(64) * 8 } else { 0 };
    std::mem::size_of::<Folio>() + 2 * std::mem::size_of::<usize>() // Arc counts
        + std::mem::size_of::<AlignedBuf>() + 2 * std::mem::size_of::<usize>()
        + heap_bitmaps
        + 32 // eviction queue entry: owner and folio
}

/// Whether an I/O keeps what it brings into the cache: cached, as buffered
/// I/O does, or uncached (`RWF_DONTCACHE`, [`crate::WriteFlags::DONTCACHE`],
/// a scan past what it may cache): the folios it reads are dropped behind
/// the reader once copied, and what it writes is written back at once and
/// dropped once clean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caching {
    Cached,
    Uncached,
}

impl Caching {
    pub fn is_uncached(self) -> bool {
        self == Caching::Uncached
    }
}

/// How a new folio starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FolioStart {
    /// Its creator reads it in: a fill is in flight, and readers of its
    /// blocks wait for it.
    Filling,
    /// Nothing in flight: a write fills the blocks it covers.
    Idle,
}

impl Folio {
    /// A new folio of `1 << order` blocks at block `index`, nothing uptodate,
    /// with a zeroed buffer.
    #[cfg(test)]
    pub fn new(index: u64, order: u8, start: FolioStart) -> Folio {
        Folio::with_buf(index, order, start, AlignedBuf::zeroed(BLOCK_SIZE << order))
    }

    /// As `Folio::new` (in tests) with a given buffer (possibly holding stale bytes:
    /// nothing is uptodate, so nothing of it is ever read).
    pub fn with_buf(index: u64, order: u8, start: FolioStart, buf: AlignedBuf) -> Folio {
        let nr_blocks = 1usize << order;
        assert_eq!(index % nr_blocks as u64, 0, "folios are naturally aligned");
        assert_eq!(buf.len(), nr_blocks * BLOCK_SIZE, "buffer matches the folio");
        Folio {
            index,
            order,
            state: Mutex::new(FolioState {
                buf: Arc::new(buf),
                #[cfg(debug_assertions)]
                changing: false,
                uptodate: Bitmap::new(nr_blocks),
                all_uptodate: false,
                dirty: Bitmap::new(nr_blocks),
                nr_dirty: 0,
                writeback: Bitmap::new(nr_blocks),
                nr_writeback: 0,
                dontcache_dirty: 0,
                read_in_flight: start == FolioStart::Filling,
                fill_waiters: 0,
                removed: false,
            }),
            filled: Condvar::new(),
            seq: AtomicU64::new(0),
            readable: AtomicPtr::new(std::ptr::null_mut()),
            referenced: AtomicU8::new(0),
            dropbehind: AtomicBool::new(false),
            dirty_mark: AtomicU8::new(DirtyMark::CLEAN),
        }
    }

    pub fn nr_blocks(&self) -> usize {
        1 << self.order
    }

    pub fn size_bytes(&self) -> usize {
        self.nr_blocks() * BLOCK_SIZE
    }

    /// Byte offset of the folio in its file.
    pub fn offset(&self) -> u64 {
        self.index * BLOCK_SIZE as u64
    }

    pub fn end_index(&self) -> u64 {
        self.index + self.nr_blocks() as u64
    }

    pub fn lock(&self) -> FolioGuard<'_> {
        locks::lock_ranked(Rank::Folio, &self.state)
    }

    /// Locks and waits until no read is in flight. `None` when the folio was
    /// removed from its mapping meanwhile (look it up again).
    pub fn lock_filled(&self) -> Option<FolioGuard<'_>> {
        let mut st = self.lock();
        while st.read_in_flight {
            st.fill_waiters += 1;
            st = st.with_guard(|g| locks::wait(&self.filled, g));
            debug_assert!(st.fill_waiters > 0, "a waiter is counted until it wakes");
            st.fill_waiters -= 1;
        }
        if st.removed {
            None
        } else {
            Some(st)
        }
    }

    /// Changes the folio's data or readability under its lock: `f` may
    /// write the buffer ([`FolioState::buf_mut`]), mark blocks uptodate,
    /// or remove the folio; lock-free readers see the sequence odd
    /// meanwhile and discard what they copied. Afterwards the folio is
    /// published readable, or not, as its state now says.
    #[inline]
    pub fn change<R>(&self, st: &mut FolioState, f: impl FnOnce(&mut FolioState) -> R) -> R {
        debug_assert!(self.state.try_lock().is_err(), "the folio's lock is held");
        let seq = self.seq.load(Ordering::Relaxed);
        debug_assert_eq!(seq % 2, 0, "changes do not nest");
        self.seq.store(seq + 1, Ordering::Relaxed);
        // The odd sequence is visible before any byte of the change.
        fence(Ordering::Release);
        #[cfg(debug_assertions)]
        {
            st.changing = true;
        }
        let result = f(st);
        #[cfg(debug_assertions)]
        {
            st.changing = false;
        }
        self.readable.store(st.readable_data(), Ordering::Relaxed);
        // The change is visible before the even sequence.
        self.seq.store(seq + 2, Ordering::Release);
        debug_assert!(self.published_matches(st));
        result
    }

    /// Whether what lock-free readers see matches the state (its lock
    /// held; debug checks).
    pub fn published_matches(&self, st: &FolioState) -> bool {
        self.seq.load(Ordering::Relaxed) % 2 == 0 && self.readable.load(Ordering::Relaxed) == st.readable_data()
    }

    /// Copies `len` bytes at `offset` of the folio into `copy` without its
    /// lock: [`OptimisticCopy::Copied`] when the copy is of one published
    /// state of the data (no change began or ended during it); otherwise
    /// what `copy` received, if anything, is to be discarded. The caller is
    /// inside a read section ([`crate::base::epoch::ReadSection`]), which keeps
    /// the buffer's memory valid even if the folio is removed meanwhile.
    #[inline]
    pub fn copy_optimistic(&self, offset: usize, len: usize, copy: impl FnOnce(&[u8])) -> OptimisticCopy {
        debug_assert!(offset + len <= self.size_bytes(), "a range of this folio");
        debug_assert!(crate::base::epoch::in_section(), "an optimistic copy runs in a read section");
        let seq = self.seq.load(Ordering::Acquire);
        let data = self.readable.load(Ordering::Acquire);
        if seq % 2 == 1 || data.is_null() {
            return OptimisticCopy::NotReadable;
        }
        // SAFETY: `data` is the buffer of this folio (as long as its
        // length) published under sequence `seq`; the read section keeps
        // that memory allocated even if a writer replaces or frees the
        // buffer meanwhile (releases are deferred, see `epoch`). A writer
        // may be changing the bytes as they are copied: the sequence check
        // below then fails and the caller discards the copy, as a seqlock
        // reader does.
        let bytes = unsafe { std::slice::from_raw_parts(data.add(offset), len) };
        copy(bytes);
        // The copy's loads complete before the sequence is read again.
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) == seq {
            OptimisticCopy::Copied
        } else {
            OptimisticCopy::Changed
        }
    }

    /// Marks an access for the eviction policy. The first access after the
    /// folio was cached only sets the "touched" bit (like the kernel's
    /// referenced → active two-step), so data used once — a scan, a stream —
    /// never counts as hot; later accesses count up to 3.
    pub fn mark_accessed(&self) {
        let r = self.referenced.load(Ordering::Relaxed);
        let next = if r & TOUCHED == 0 { TOUCHED } else { TOUCHED | ((r & !TOUCHED) + 1).min(3) };
        if next != r {
            self.referenced.store(next, Ordering::Relaxed);
        }
    }

    /// Accesses counted beyond the first (0..=3).
    pub fn reference_count(&self) -> u8 {
        self.referenced.load(Ordering::Relaxed) & !TOUCHED
    }

    /// Sets the counted accesses, keeping the touched bit.
    pub fn set_reference_count(&self, count: u8) {
        debug_assert!(count <= 3);
        let touched = self.referenced.load(Ordering::Relaxed) & TOUCHED;
        self.referenced.store(touched | count, Ordering::Relaxed);
    }
}

impl FolioState {
    /// The folio's data.
    pub fn buf(&self) -> &Arc<AlignedBuf> {
        &self.buf
    }

    /// The folio's data, to change or replace: only inside
    /// [`Folio::change`], which readers without the lock see.
    pub fn buf_mut(&mut self) -> &mut Arc<AlignedBuf> {
        #[cfg(debug_assertions)]
        assert!(self.changing, "a folio's buffer changes only inside Folio::change");
        &mut self.buf
    }

    /// What [`Folio::readable`] must hold for this state: the data's
    /// address when every block is uptodate, no fill is in flight and the
    /// folio is in its mapping; null otherwise.
    fn readable_data(&self) -> *mut u8 {
        if self.all_uptodate && !self.read_in_flight && !self.removed && !self.buf.is_empty() {
            self.buf.as_ptr().cast_mut()
        } else {
            std::ptr::null_mut()
        }
    }

    /// Marks blocks `[start, end)` uptodate.
    pub fn set_uptodate(&mut self, nr_blocks: usize, start: usize, end: usize) {
        debug_assert!(start <= end && end <= nr_blocks, "blocks of this folio");
        if self.all_uptodate {
            return;
        }
        self.uptodate.set_range(start, end);
        self.all_uptodate = self.uptodate.count() == nr_blocks;
        debug_assert!(self.all_uptodate || self.uptodate.next_clear(start, end).is_none(), "the range is uptodate");
    }

    pub fn is_uptodate(&mut self, start: usize, end: usize) -> bool {
        self.all_uptodate || self.uptodate.count_range(start, end) == end - start
    }

    /// Marks `[start, end)` dirty; returns the number of newly dirty blocks.
    pub fn set_dirty(&mut self, start: usize, end: usize) -> usize {
        debug_assert!(!self.removed, "a removed folio has no dirty blocks");
        debug_assert!(self.is_uptodate(start, end), "only uptodate blocks become dirty");
        let newly = self.dirty.set_range(start, end);
        self.nr_dirty += newly;
        debug_assert!(self.nr_dirty == self.dirty.count(), "nr_dirty matches the dirty bitmap");
        newly
    }

    /// Checks the invariants in the module docs (debug builds and tests).
    pub fn check(&self, nr_blocks: usize) {
        if cfg!(debug_assertions) {
            assert_eq!(self.nr_dirty, self.dirty.count(), "nr_dirty matches dirty bitmap");
            assert_eq!(self.nr_writeback, self.writeback.count(), "nr_writeback matches bitmap");
            assert_eq!(self.all_uptodate, self.uptodate.count() == nr_blocks, "all_uptodate matches bitmap");
            if let Some(b) = self.dirty.next_set(0, nr_blocks) {
                assert!(self.all_uptodate || self.uptodate.get(b), "dirty block {b} is uptodate");
                assert!(!self.removed, "a removed folio has no dirty blocks");
            }
        }
    }

    /// [`FolioState::check`] for `debug_assert!`: panics on a violated
    /// invariant, true otherwise (release builds never call it).
    pub fn invariants_hold(&self, nr_blocks: usize) -> bool {
        self.check(nr_blocks);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_ranges_count_and_runs() {
        for nbits in [1usize, 7, 64, 65, 130, 512] {
            let mut bm = Bitmap::new(nbits);
            let mut reference = vec![false; nbits];
            let mut seed = nbits as u64 * 7919;
            for _ in 0..200 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let a = (seed >> 33) as usize % nbits;
                let b = (seed >> 13) as usize % nbits;
                let (s, e) = (a.min(b), a.max(b) + 1);
                let before = reference[s..e].iter().filter(|&&x| x).count();
                if seed & 1 == 0 {
                    assert_eq!(bm.set_range(s, e), (e - s) - before, "nbits {nbits}");
                    reference[s..e].iter_mut().for_each(|x| *x = true);
                } else {
                    assert_eq!(bm.clear_range(s, e), before, "nbits {nbits}");
                    reference[s..e].iter_mut().for_each(|x| *x = false);
                }
                assert_eq!(bm.count(), reference.iter().filter(|&&x| x).count());
                let runs = bm.runs(nbits);
                let mut rebuilt = vec![false; nbits];
                for (s, e) in runs {
                    rebuilt[s..e].iter_mut().for_each(|x| *x = true);
                }
                assert_eq!(rebuilt, reference);
            }
        }
    }

    #[test]
    fn runs_excluding_skips_blocks_under_writeback() {
        for nbits in [8usize, 130] {
            let mut dirty = Bitmap::new(nbits);
            let mut wb = Bitmap::new(nbits);
            dirty.set_range(0, 6);
            dirty.set_range(100.min(nbits - 2), nbits);
            wb.set_range(2, 4);
            let mut expected = vec![(0, 2), (4, 6)];
            if nbits > 100 {
                expected.push((100, nbits));
            } else {
                expected = vec![(0, 2), (4, 8)];
            }
            assert_eq!(dirty.runs_excluding(&wb, nbits), expected, "nbits {nbits}");
        }
    }

    #[test]
    fn metadata_is_under_one_percent_from_32k_folios() {
        for order in 3..=9u8 {
            let blocks = 1usize << order;
            let meta = metadata_bytes_for(blocks);
            assert!(meta * 100 <= blocks * BLOCK_SIZE, "order {order}: {meta} bytes of metadata");
        }
        // 4 KiB folios cost more (documented in docs/semantics.md).
        assert!(metadata_bytes_for(1) * 100 > BLOCK_SIZE);
        assert!(metadata_bytes_for(1) * 100 <= 8 * BLOCK_SIZE, "{}", metadata_bytes_for(1));
    }

    #[test]
    fn dirty_marking_counts_new_blocks_only() {
        let f = Folio::new(0, 3, FolioStart::Idle);
        let mut st = f.lock();
        st.set_uptodate(8, 0, 8);
        assert!(st.all_uptodate);
        assert_eq!(st.set_dirty(0, 4), 4);
        assert_eq!(st.set_dirty(2, 6), 2);
        assert_eq!(st.nr_dirty, 6);
        st.check(8);
    }

    #[test]
    #[should_panic(expected = "naturally aligned")]
    fn misaligned_folio_is_rejected() {
        let _ = Folio::new(3, 2, FolioStart::Idle);
    }
}
