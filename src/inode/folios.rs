//! An inode's folios: lookup, creation (a new folio is counted by eviction
//! before the mapping's index lock is released), residency reports, and
//! removal of clean folios (eviction, drop-behind, cache close).
//!
//! Invariant: a folio leaves the mapping only clean, not under writeback
//! and unlocked by anyone else, and gives its memory back exactly once
//! (`release_removed`, with `removed` set under its lock).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Inode;
use crate::buf::user::ReadTarget;
use crate::io::BLOCK_SIZE;
use crate::mapping::folio::{DirtyMark, Folio, FolioStart, FolioState};
use crate::mapping::{choose_order, FolioRef, Mapping, MappingOwner};
use crate::policy::memory::{BufUse, WhenFull};

const BLOCK: u64 = BLOCK_SIZE as u64;

impl Inode {
    /// The folio covering `block`, if cached.
    pub fn find(&self, block: u64) -> Option<Arc<Folio>> {
        self.mapping.find(block)
    }

    /// Fills `out[i]` with the residency bits ([`crate::RESIDENT_CACHED`],
    /// `_DIRTY`, `_WRITEBACK`) of block `first_block + i`, as `mincore`
    /// does for pages: a snapshot, stale as soon as it returns.
    pub fn residency(&self, first_block: u64, out: &mut [u8]) {
        out.fill(0);
        let end_block = first_block + out.len() as u64;
        let index = self.mapping.read();
        let from = index.find(first_block).map_or(first_block, |f| f.index);
        for folio in index.range(from..end_block) {
            let st = folio.lock();
            if st.removed {
                continue;
            }
            let lo = folio.index.max(first_block);
            let hi = folio.end_index().min(end_block);
            for block in lo..hi {
                let b = (block - folio.index) as usize;
                let mut bits = 0;
                if st.all_uptodate || st.uptodate.get(b) {
                    bits |= crate::mapping::folio::RESIDENT_CACHED;
                }
                if st.dirty.get(b) {
                    bits |= crate::mapping::folio::RESIDENT_DIRTY;
                }
                if st.writeback.get(b) {
                    bits |= crate::mapping::folio::RESIDENT_WRITEBACK;
                }
                out[(block - first_block) as usize] = bits;
            }
        }
    }

    /// The runs of cached (uptodate) blocks, `[first, end)` in block
    /// numbers, in order and merged; visits cached folios only.
    pub fn cached_block_runs(&self) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let index = self.mapping.read();
        for folio in index.values() {
            let st = folio.lock();
            if st.removed {
                continue;
            }
            for block in folio.index..folio.end_index() {
                if !(st.all_uptodate || st.uptodate.get((block - folio.index) as usize)) {
                    continue;
                }
                match runs.last_mut() {
                    Some(last) if last.1 == block => last.1 += 1,
                    _ => runs.push((block, block + 1)),
                }
            }
        }
        runs
    }

    /// Finds the folio covering `block` or inserts a new one. A new folio is
    /// the largest naturally aligned power of two that starts at `block`, ends
    /// at or before `limit_block` and overlaps no cached folio; it is empty
    /// (nothing uptodate), and a fill's ([`BufUse::Read`]) starts
    /// [`FolioStart::Filling`].
    /// Returns the folio and whether it was created here.
    pub(super) fn find_or_create(
        self: &Arc<Self>,
        block: u64,
        limit_block: u64,
        usage: BufUse,
        when_full: WhenFull,
    ) -> io::Result<(Arc<Folio>, bool)> {
        debug_assert!(limit_block > block);
        let max_order = (self.config.folio_max_bytes / BLOCK).trailing_zeros() as u8;
        loop {
            let (order, inserts_seen) = {
                let map = self.mapping.read();
                if let Some(f) = map.find(block) {
                    return Ok((f.to_arc(), false));
                }
                (choose_order(&map, block, limit_block, max_order), self.mapping.inserts())
            };
            let len = BLOCK_SIZE << order;
            // Get the memory (may evict) before taking the mapping lock:
            // eviction takes mapping locks itself.
            // A folio a write creates takes guarded memory at once (see
            // `Inode::guard_folio`), one a fill creates the process's own.
            let buf = self.memory.reserve(len, usage, when_full)?;
            let mut map = self.mapping.write();
            // Only an insertion can cover `block` or crowd the chosen folio
            // (removals only make room): without one, the choice stands.
            if self.mapping.inserts() != inserts_seen {
                if let Some(f) = map.find(block) {
                    let f = f.to_arc();
                    drop(map);
                    self.memory.release_reserved_buf(buf, len);
                    return Ok((f, false));
                }
                // The mapping gained a neighbour meanwhile: start over with
                // a smaller folio.
                if choose_order(&map, block, limit_block, order) != order {
                    drop(map);
                    self.memory.release_reserved_buf(buf, len);
                    continue;
                }
            }
            debug_assert!(map.find(block).is_none() && choose_order(&map, block, limit_block, order) == order);
            let start = match usage {
                BufUse::Read => FolioStart::Filling,
                BufUse::Written => FolioStart::Idle,
            };
            let folio = Arc::new(Folio::with_buf(block, order, start, buf));
            self.mapping.insert(&mut map, folio.clone());
            // Counted before the index's lock goes: a removal racing in
            // (advice to drop it, a truncate) finds the folio only then, and
            // eviction's count of live folios never goes below zero.
            self.memory.folio_added(self, &folio);
            debug_assert!(map.find(block).is_some_and(|f| f.is(&folio)), "the new folio is cached");
            debug_assert!(folio.index == block && folio.end_index() <= limit_block, "the folio starts at the block");
            drop(map);
            return Ok((folio, true));
        }
    }

    /// Removes `folio` from the mapping if it is still there, clean, not
    /// under writeback and not being filled; frees its memory. Returns
    /// whether it was removed. Used by drop-behind and failed fills.
    pub fn try_remove_clean(&self, folio: &Arc<Folio>) -> bool {
        match self.mapping.try_remove_clean(folio) {
            Some(buf) => {
                self.memory.folio_removed(folio, buf);
                debug_assert_eq!(folio.dirty_mark.load(Ordering::Acquire), DirtyMark::REMOVED, "removed for good");
                true
            }
            None => false,
        }
    }

    /// Hands a drop-behind folio that is clean now to the reaper, which
    /// frees it if it is still marked, clean and unheld when it gets there.
    pub(super) fn queue_dropbehind(self: &Arc<Self>, folio: Arc<Folio>) {
        let owner = Arc::downgrade(self) as std::sync::Weak<dyn MappingOwner>;
        self.dropbehind.queue(owner, self.id, folio);
    }

    /// Bookkeeping for a folio just taken out of the mapping (folio locked).
    pub(crate) fn release_removed(&self, folio: &Folio, st: &mut FolioState) {
        debug_assert!(folio.state.try_lock().is_err(), "the folio's lock is held");
        let buf = Mapping::mark_removed(folio, st);
        self.memory.folio_removed(folio, buf);
        debug_assert!(
            st.removed && st.nr_dirty == 0 && st.buf().is_empty(),
            "a removed folio is clean, its buffer gone"
        );
    }
}

impl Inode {
    /// Drops every clean folio (used when the cache closes).
    pub fn drop_all_clean(&self) {
        let folios: Vec<Arc<Folio>> = self.mapping.read().values().map(FolioRef::to_arc).collect();
        for f in folios {
            self.try_remove_clean(&f);
        }
    }
}
