//! An inode's size: growing and shrinking (`set_len`), the room a write
//! has under the file system's largest file size, and the cuts a shrink,
//! a punch or a discard make in the cache. A cut quiesces the blocks it
//! removes first (the mapping's write lock and the store's length gate:
//! no fill and no writeback I/O in flight over them), so no old byte comes
//! back after it.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Inode, ResizeGuard};
use crate::base::locks::{self, Rank};
use crate::buf::BulkFree;
use crate::io::BLOCK_SIZE;
use crate::mapping::folio::{DirtyMark, Folio, FolioState};
use crate::mapping::{FolioIndex, FolioRef, IndexWriteGuard};

const BLOCK: u64 = BLOCK_SIZE as u64;

impl Inode {
    /// How many of `len` bytes at `off` a write may take without growing
    /// the file past its file system's largest file size: all of them, a
    /// leading part (the write is short), or `EFBIG` when `off` is at or
    /// past the limit, as `pwrite(2)` answers. Writeback past the limit
    /// would fail for good, so it is checked here, before anything is
    /// cached. Asks the store only when the write reaches past the largest
    /// length known to be fine, and then for twice that, so a growing file
    /// asks a logarithmic number of times.
    pub fn room_to_grow(&self, off: u64, len: usize) -> io::Result<usize> {
        // Writeback writes the tail block whole: the store must be able to
        // reach the end of the block the write ends in.
        let end = off.saturating_add(len as u64).next_multiple_of(BLOCK);
        let accepted = self.len_accepted.load(Ordering::Acquire);
        if end <= accepted || self.info.is_block_device {
            return Ok(len);
        }
        let mut limit = self.len_limit.load(Ordering::Acquire);
        if limit == u64::MAX {
            let store = self.store();
            let probe = end.max(accepted.saturating_mul(2)).min(i64::MAX as u64 / BLOCK * BLOCK);
            if probe >= end && store.accepts_len(probe)? {
                self.len_accepted.fetch_max(probe, Ordering::AcqRel);
                return Ok(len);
            }
            if store.accepts_len(end)? {
                self.len_accepted.fetch_max(end, Ordering::AcqRel);
                return Ok(len);
            }
            // The limit lies in [accepted, end): find it.
            let (mut lo, mut hi) = (accepted, end);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if store.accepts_len(mid)? {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            // Whole blocks: writeback writes the tail block whole.
            limit = lo / BLOCK * BLOCK;
            self.len_accepted.fetch_max(limit, Ordering::AcqRel);
            self.len_limit.store(limit, Ordering::Release);
        }
        if off >= limit {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        Ok(len.min((limit - off).try_into().unwrap_or(usize::MAX)))
    }

    /// Changes the logical size. Shrinking waits for writeback I/O in
    /// flight and holds off new writeback until the store is cut, drops
    /// cached data beyond the new size (dirty or not), zeroes the tail of
    /// the last folio and truncates the store at once, so no stale bytes
    /// can reappear when the file grows again. Writers that extend the file
    /// meanwhile see their blocks written back only after the cut.
    pub fn set_len(&self, new_size: u64) -> io::Result<()> {
        if self.info.is_block_device {
            if new_size == self.size() {
                return Ok(());
            }
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a block device's size cannot change"));
        }
        let _g = locks::lock_ranked(Rank::Size, &self.size_lock);
        if new_size >= self.size() {
            self.grow(new_size)
        } else {
            self.shrink(new_size)
        }
    }

    /// [`Inode::set_len`] to a size at least the current one (size lock
    /// held).
    fn grow(&self, new_size: u64) -> io::Result<()> {
        debug_assert!(locks::holds(Rank::Size), "this thread holds the size lock");
        // Refused before anything changes, as ftruncate(2) refuses it.
        self.check_growable(new_size)?;
        // The store grows with zeros, which is what `on_disk_len_max`
        // already says lies past the old end.
        self.raise_size(new_size);
        // Only ever grow the store here: a writer that extended the file
        // past `new_size` since the size was read may have had those blocks
        // written back already, and cutting them would lose them.
        let _no_io = self.store_len_gate.resize();
        let store = self.store();
        if store.len()? < new_size {
            store.set_len(new_size)?;
            self.store_len_min.fetch_max(new_size, Ordering::AcqRel);
        }
        debug_assert!(self.size() >= new_size);
        Ok(())
    }

    /// `EFBIG` unless the file system lets the store grow to `len` bytes.
    pub(crate) fn check_growable(&self, len: u64) -> io::Result<()> {
        if len > self.len_accepted.load(Ordering::Acquire) && !self.store().accepts_len(len)? {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        Ok(())
    }

    /// Raises the size to `new_size` (size lock held), a change the next
    /// store sync must cover. Writers may have extended past `new_size`
    /// meanwhile: this never shrinks.
    pub(crate) fn raise_size(&self, new_size: u64) {
        debug_assert!(locks::holds(Rank::Size), "this thread holds the size lock");
        self.size.fetch_max(new_size, Ordering::AcqRel);
        if let Some(guarded) = &self.guarded {
            guarded.record_size_at_least(new_size);
        }
        self.size_changed.store(true, Ordering::Release);
        debug_assert!(self.size() >= new_size);
    }

    /// [`Inode::set_len`] to a smaller size (size lock held).
    fn shrink(&self, new_size: u64) -> io::Result<()> {
        debug_assert!(locks::holds(Rank::Size), "this thread holds the size lock");
        debug_assert!(new_size < self.size(), "a shrink cuts");
        // In the crash table before anything is dropped: a guardian that
        // finds the data half gone finds the cut to finish, never a file of
        // the old length with a hole in it.
        if let Some(guarded) = &self.guarded {
            guarded.record_cut_owed(new_size);
        }
        // No writeback I/O from before the new size is published until the
        // store is cut: a writer may extend the file again meanwhile, and a
        // block of its extension written back before the cut would be lost
        // by it (and a fill could read the old bytes the cut removes).
        let (mut map, no_io) = self.quiesce_for_cut(new_size);
        // A large cut frees folios in file order, their buffers in no useful
        // order: they go back to the kernel together once the mapping lock
        // is given back (see `BulkFree`). Only now, after the waits above:
        // the guard is process-wide, and while it lasts every buffer freed
        // anywhere (evictions included) stays resident outside `capacity`.
        let bulk = BulkFree::begin();
        let (mut discarded_blocks, mut discarded_dontcache) = self.drop_folios_from(&mut map, new_size.div_ceil(BLOCK));
        // Zero the tail of a folio straddling the new size, and publish the
        // size under its lock: a writer of that folio either came before
        // (its bytes past the end are cut) or after (its write extends the
        // file again), never half of each.
        let straddling = map.find(new_size / BLOCK).filter(|f| f.offset() < new_size).map(FolioRef::to_arc);
        match straddling {
            Some(f) => {
                let mut st = f.lock();
                let from = (new_size - f.offset()) as usize;
                let (blocks, dontcache) = self.zero_in_folio(&f, &mut st, from, f.size_bytes());
                discarded_blocks += blocks;
                discarded_dontcache += dontcache;
                self.size.store(new_size, Ordering::Release);
            }
            None => self.size.store(new_size, Ordering::Release),
        }
        // From now on fills treat bytes past the new size as zeros, even
        // before the store is truncated below.
        self.on_disk_len_max.fetch_min(new_size, Ordering::AcqRel);
        debug_assert!(map.range(new_size.div_ceil(BLOCK)..).next().is_none());
        drop(map);
        drop(bulk);
        self.dirty.account_discarded(discarded_blocks * BLOCK, discarded_dontcache * BLOCK);
        // Writeback I/O of the removed blocks ended before the gate was
        // taken, and none has run since: the cut is the last word on them.
        self.size_changed.store(true, Ordering::Release);
        self.store_len_min.fetch_min(new_size, Ordering::AcqRel);
        // No writeback I/O runs (the gate): no registered write outlives the cut.
        {
            let mut writes_end = locks::lock_ranked(Rank::StoreWritesEnd, &self.store_writes_end);
            *writes_end = (*writes_end).min(new_size);
        }
        self.store().set_len(new_size)?;
        self.store_padded.store(false, Ordering::Release);
        if let Some(guarded) = &self.guarded {
            guarded.record_unpadded();
            guarded.record_cut_done();
        }
        // Raised only by writeback taking blocks, which the gate holds off.
        debug_assert!(self.on_disk_len_max.load(Ordering::Acquire) <= new_size, "nothing on disk past the cut");
        drop(no_io);
        debug_assert!(self.size() >= new_size, "writers only extend the file again");
        Ok(())
    }

    /// The mapping's write lock with no fill in flight over blocks past
    /// `new_size`, and the store's length gate (no writeback I/O in flight
    /// or starting). Fills are waited for without holding the mapping lock
    /// (a filler may need it to allocate its next folio); the gate is taken
    /// before the mapping lock (writeback completions take mapping locks)
    /// and never held while waiting for a fill.
    fn quiesce_for_cut(&self, new_size: u64) -> (IndexWriteGuard<'_>, ResizeGuard<'_>) {
        self.quiesce_blocks(new_size / BLOCK..)
    }

    /// As [`Inode::quiesce_for_cut`], for the folios that overlap the
    /// block range `blocks` (`first..end`, or `first..` to the end): the
    /// mapping's write lock with no fill in flight over them, and the
    /// store's length gate.
    pub(crate) fn quiesce_blocks(
        &self,
        blocks: impl std::ops::RangeBounds<u64>,
    ) -> (IndexWriteGuard<'_>, ResizeGuard<'_>) {
        use std::ops::Bound;
        let first = match blocks.start_bound() {
            Bound::Included(&b) => b,
            Bound::Excluded(&b) => b + 1,
            Bound::Unbounded => 0,
        };
        let end = match blocks.end_bound() {
            Bound::Included(&b) => b + 1,
            Bound::Excluded(&b) => b,
            Bound::Unbounded => u64::MAX,
        };
        let filling_in_range = |map: &FolioIndex| {
            let from = map.find(first).map_or(first, |f| f.index);
            map.range(from..end).find(|f| f.lock().read_in_flight).map(FolioRef::to_arc)
        };
        loop {
            let filling = filling_in_range(&self.mapping.write());
            if let Some(f) = filling {
                drop(f.lock_filled());
                continue;
            }
            let gate = self.store_len_gate.resize();
            let map = self.mapping.write();
            // A fill may have begun while neither was held.
            if filling_in_range(&map).is_none() {
                return (map, gate);
            }
        }
    }

    /// Removes every folio from `first_gone_block` on, dirty or not.
    /// Returns the dirty and uncached-dirty blocks discarded.
    fn drop_folios_from(&self, map: &mut FolioIndex, first_gone_block: u64) -> (u64, u64) {
        let (mut blocks, mut dontcache) = (0u64, 0u64);
        for key in map.range(first_gone_block..).map(|f| f.index).collect::<Vec<_>>() {
            let (b, d) = self.discard_folio(map, key);
            blocks += b;
            dontcache += d;
        }
        debug_assert!(map.first_from(first_gone_block).is_none(), "nothing cached from block {first_gone_block}");
        (blocks, dontcache)
    }

    /// Removes the folio at `key`, dirty or not, without writing it (the
    /// mapping's write lock held, no fill in flight). Returns the dirty and
    /// uncached-dirty blocks discarded.
    pub(crate) fn discard_folio(&self, map: &mut FolioIndex, key: u64) -> (u64, u64) {
        let f = map.get(key).expect("a cached folio").to_arc();
        let mut st = f.lock();
        assert!(!st.read_in_flight, "no fill runs under the mapping lock");
        let blocks = st.nr_dirty as u64;
        let dontcache = std::mem::take(&mut st.dontcache_dirty) as u64;
        st.dirty.clear_range(0, f.nr_blocks());
        st.nr_dirty = 0;
        self.mapping.unindex_clean(&f);
        map.remove(key);
        self.release_removed(&f, &mut st);
        debug_assert!(st.removed && st.dontcache_dirty == 0, "folio {key} left clean");
        debug_assert!(map.get(key).is_none(), "folio {key} left the index");
        (blocks, dontcache)
    }

    /// Zeroes bytes `[from, to)` of a locked, cached folio (a part of it:
    /// the tail a truncation cuts, or what a punch or zeroing covers) and
    /// drops the dirty bits of the blocks wholly inside: they hold what the
    /// store will hold there, or lie past the size. Returns the dirty and
    /// uncached-dirty blocks discarded.
    pub(crate) fn zero_in_folio(&self, f: &Folio, st: &mut FolioState, from: usize, to: usize) -> (u64, u64) {
        debug_assert!(from < to && to <= f.size_bytes() && (from > 0 || to < f.size_bytes()), "a part of the folio");
        debug_assert!(!st.removed && !st.read_in_flight, "a cached folio no fill is reading");
        self.memory.account_shared_copy(st);
        f.change(st, |st| Arc::make_mut(st.buf_mut())[from..to].fill(0));
        let (first_inside, end_inside) = (from.div_ceil(BLOCK_SIZE), to / BLOCK_SIZE);
        let cleared = if first_inside < end_inside { st.dirty.clear_range(first_inside, end_inside) } else { 0 };
        st.nr_dirty -= cleared;
        // Uncached-dirty blocks are counted per folio, not per block: what
        // exceeds the dirty blocks left goes with the discarded ones.
        let dontcache = if cleared > 0 { st.dontcache_dirty.saturating_sub(st.nr_dirty) } else { 0 };
        st.dontcache_dirty -= dontcache;
        if cleared > 0 && st.nr_dirty == 0 {
            self.mapping.unindex_clean(f);
        }
        st.check(f.nr_blocks());
        debug_assert!(
            first_inside >= end_inside || st.dirty.next_set(first_inside, end_inside).is_none(),
            "nothing dirty wholly inside the zeroed range"
        );
        debug_assert!(
            st.nr_dirty > 0 || f.dirty_mark.load(Ordering::Relaxed) == DirtyMark::CLEAN,
            "a folio left clean is marked clean"
        );
        (cleared as u64, dontcache as u64)
    }
}

impl Inode {
    /// Drops every cached folio, dirty ones too, without writing anything
    /// back: for an unlinked file that no handle can read any more. Waits
    /// for fills and writeback I/O in flight first. The size and the store
    /// are left as they are (nobody will look at them again).
    pub fn discard_all(&self) {
        debug_assert!(self.is_unlinked(), "only an unlinked file's data may be thrown away");
        let _size = locks::lock_ranked(Rank::Size, &self.size_lock);
        let (mut map, no_io) = self.quiesce_for_cut(0);
        let bulk = BulkFree::begin();
        let (blocks, dontcache) = self.drop_folios_from(&mut map, 0);
        debug_assert!(map.is_empty(), "nothing cached after a discard");
        drop(map);
        drop(bulk);
        self.dirty.account_discarded(blocks * BLOCK, dontcache * BLOCK);
        // Nothing of the file is worth a store sync any more.
        self.written_since_sync.store(false, Ordering::Release);
        self.size_changed.store(false, Ordering::Release);
        drop(no_io);
        debug_assert!(!self.has_dirty(), "a discarded inode is clean");
    }
}
