//! The cache's side of the range calls applications make on a file
//! through the kernel's page cache: `fallocate(2)` (preallocation, hole
//! punching, zeroing) and `posix_fadvise(POSIX_FADV_DONTNEED)`.
//!
//! Coherence rules (the kernel's):
//! - A punched or zeroed range reads as zeros afterwards, cached or not.
//!   Dirty data inside it is discarded, never written over the hole later;
//!   the partial blocks at its ends keep their other bytes (and stay dirty
//!   if they were). The store's call and the cache's change happen with no
//!   writeback I/O of the inode in flight or between taking its blocks and
//!   writing them (the store's length gate), and no fill in flight over the
//!   range (the mapping's write lock): neither can bring the old bytes back.
//! - A failed store call changes nothing in the cache.
//! - `DONTNEED` writes nothing itself: it drops the clean folios wholly
//!   inside the range now and makes its dirty ones drop-behind, which the
//!   flusher writes as it writes uncached data and frees once clean.
//!
//! These are methods of [`Inode`]; they take the inode's size lock, the
//! store's length gate and the mapping's lock in the inode's lock order.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::base::locks::{self, Rank};
use crate::buf::BulkFree;
use crate::inode::Inode;
use crate::io::BLOCK_SIZE;
use crate::mapping::folio::Folio;
use crate::mapping::{FolioIndex, FolioRef};

const BLOCK: u64 = BLOCK_SIZE as u64;

/// What a [`File::fallocate`](crate::File::fallocate) call does: the
/// `fallocate(2)` modes wbcache accepts. `Allocation::try_from(mode)`
/// takes `fallocate(2)`'s `mode` bits, and [`Allocation::mode`] gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Allocation {
    /// Mode 0 (`keep_size: false`) or `FALLOC_FL_KEEP_SIZE`: reserve
    /// blocks; no byte changes.
    Reserve { keep_size: bool },
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`: free the blocks; the
    /// range reads as zeros.
    PunchHole,
    /// `FALLOC_FL_ZERO_RANGE` (optionally with `KEEP_SIZE`): the range
    /// reads as zeros, its blocks stay allocated.
    ZeroRange { keep_size: bool },
}

impl TryFrom<i32> for Allocation {
    type Error = io::Error;

    /// From `fallocate(2)`'s `mode`; `EOPNOTSUPP` for any other mode, as
    /// the kernel answers one its file system does not implement.
    fn try_from(mode: i32) -> io::Result<Allocation> {
        use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
        Ok(match mode {
            0 => Allocation::Reserve { keep_size: false },
            KEEP => Allocation::Reserve { keep_size: true },
            m if m == PUNCH | KEEP => Allocation::PunchHole,
            ZERO => Allocation::ZeroRange { keep_size: false },
            m if m == ZERO | KEEP => Allocation::ZeroRange { keep_size: true },
            _ => return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
        })
    }
}

impl Allocation {
    /// `fallocate(2)`'s `mode` for this allocation.
    pub fn mode(self) -> i32 {
        use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
        match self {
            Allocation::Reserve { keep_size: false } => 0,
            Allocation::Reserve { keep_size: true } => KEEP,
            Allocation::PunchHole => PUNCH | KEEP,
            Allocation::ZeroRange { keep_size: false } => ZERO,
            Allocation::ZeroRange { keep_size: true } => ZERO | KEEP,
        }
    }

    fn keeps_size(self) -> bool {
        !matches!(self, Allocation::Reserve { keep_size: false } | Allocation::ZeroRange { keep_size: false })
    }

    fn zeroes(self) -> bool {
        !matches!(self, Allocation::Reserve { .. })
    }
}

impl Inode {
    /// `fallocate(2)` of `[off, off + len)` (`len > 0`, the end within
    /// `i64::MAX`): forwarded to the store, with the cache kept coherent
    /// (see the module's rules) and the size raised unless the mode keeps
    /// it. Block devices never change size.
    pub fn allocate(&self, how: Allocation, off: u64, len: u64) -> io::Result<()> {
        debug_assert!(len > 0 && off.checked_add(len).is_some_and(|e| e <= i64::MAX as u64));
        let end = off + len;
        let _size = locks::lock_ranked(Rank::Size, &self.size_lock);
        let grows = !how.keeps_size() && !self.info.is_block_device && end > self.size();
        if grows {
            self.check_growable(end)?;
        }
        if !how.zeroes() {
            // No byte changes: only the store's length, under its gate.
            let _no_io = self.store_len_gate.resize();
            self.store().allocate(how.mode(), off, len)?;
            if grows {
                self.raise_size(end);
                self.store_len_min.fetch_max(end, Ordering::AcqRel);
            }
            return Ok(());
        }
        let (mut map, no_io) = self.quiesce_blocks(off / BLOCK..end.div_ceil(BLOCK));
        // The store first: if it refuses, the cache is as it was.
        self.store().allocate(how.mode(), off, len)?;
        let bulk = BulkFree::begin();
        let (blocks, dontcache) = self.zero_cached_range(&mut map, off, end);
        drop(map);
        drop(bulk);
        self.dirty.account_discarded(blocks * BLOCK, dontcache * BLOCK);
        if grows {
            self.raise_size(end);
            self.store_len_min.fetch_max(end, Ordering::AcqRel);
        }
        // A metadata change of the store that the next fsync must make
        // durable, even when no block is written back before it.
        self.size_changed.store(true, Ordering::Release);
        drop(no_io);
        Ok(())
    }

    /// Makes bytes `[off, end)` of the cache zeros (the mapping's write
    /// lock held, no fill in flight there): folios wholly inside are
    /// removed, dirty or not; the others get zeros in the range, and their
    /// blocks wholly inside lose their dirty bits (zeros on the store after
    /// the punch are what the cache holds). Returns the dirty and
    /// uncached-dirty blocks discarded.
    fn zero_cached_range(&self, map: &mut FolioIndex, off: u64, end: u64) -> (u64, u64) {
        let (first, end_block) = (off / BLOCK, end.div_ceil(BLOCK));
        let start_key = map.find(first).map_or(first, |f| f.index);
        let overlapping: Vec<Arc<Folio>> = map.range(start_key..end_block).map(FolioRef::to_arc).collect();
        let (mut blocks, mut dontcache) = (0u64, 0u64);
        for f in overlapping {
            let (f_start, f_end) = (f.offset(), f.offset() + f.size_bytes() as u64);
            let (b, d) = if off <= f_start && f_end <= end {
                self.discard_folio(map, f.index)
            } else {
                let mut st = f.lock();
                let from = (off.max(f_start) - f_start) as usize;
                let to = (end.min(f_end) - f_start) as usize;
                self.zero_in_folio(&f, &mut st, from, to)
            };
            blocks += b;
            dontcache += d;
        }
        debug_assert!(
            map.range(start_key..end_block).all(|f| f.offset() < off || f.offset() + f.size_bytes() as u64 > end),
            "no folio wholly inside [{off}, {end}) is cached"
        );
        (blocks, dontcache)
    }

    /// `POSIX_FADV_DONTNEED` over `[off, end)`: the folios wholly inside
    /// (a range reaching the size reaches the last folio's end) that are
    /// clean and idle are dropped now; dirty ones, and ones under
    /// writeback or held, are marked drop-behind (dirty ones also count as
    /// uncached-dirty, and the flusher is kicked to write them). Returns
    /// the bytes dropped now.
    pub fn advise_dontneed(self: &Arc<Self>, off: u64, end: u64) -> u64 {
        let end = if end >= self.size() { u64::MAX } else { end };
        let first_key = off.div_ceil(BLOCK);
        let inside: Vec<Arc<Folio>> = self
            .mapping
            .read()
            .range(first_key..)
            .take_while(|f| f.offset() < end)
            .filter(|f| f.offset() + f.size_bytes() as u64 <= end)
            .map(FolioRef::to_arc)
            .collect();
        let (mut dropped_bytes, mut made_dontcache) = (0u64, false);
        for f in inside {
            let mut st = f.lock();
            if st.removed {
                continue;
            }
            f.dropbehind.store(true, Ordering::Release);
            if st.nr_dirty > 0 {
                let newly = st.nr_dirty.saturating_sub(st.dontcache_dirty);
                st.dontcache_dirty += newly;
                self.dirty.account_made_dontcache(newly as u64 * BLOCK);
                made_dontcache = true;
                continue;
            }
            // Under writeback: its completion hands it to the reaper.
            let busy = st.nr_writeback > 0 || st.read_in_flight;
            drop(st);
            if busy {
                continue;
            }
            let bytes = f.size_bytes() as u64;
            if self.try_remove_clean(&f) {
                dropped_bytes += bytes;
            } else {
                // Held by a reader, or dirtied again meanwhile: the reaper
                // looks again (and a cached access clears the mark).
                self.queue_dropbehind(f);
            }
        }
        if made_dontcache {
            let workers = self.queue_on_dirty_list(None);
            self.dirty.kick_dontcache(workers);
        }
        dropped_bytes
    }
}
