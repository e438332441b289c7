//! A mapping: an inode's index from folio index (first block) to folio (a
//! radix tree, [`FolioIndex`]), and its dirty index (the folios with dirty
//! blocks, so writeback finds them without walking the whole mapping).
//!
//! Invariants:
//! - Folios in the index do not overlap; each is naturally aligned.
//! - A folio is in the dirty index (keyed by its index) exactly when it has
//!   dirty blocks; the index holds the folio itself, so writeback takes
//!   dirty folios without a lookup in the main index.
//! - A folio leaves the index once, through [`Mapping::mark_removed`], and
//!   is clean when it does.
//! - With regions (`writeback_routing=region`), the dirty index counts its
//!   entries per region of the backing store, so writeback knows which
//!   regions of the inode hold dirty data without walking the index. A
//!   folio lies in one region (regions are at least `folio_max`).
//!
//! Lock order (outer first): the index → a folio's state → the dirty index.
//! Owned by its inode (inline); eviction holds the inode weakly through
//! [`MappingOwner`], so a mapping outlives no inode.
//!
//! The folder also holds what the index holds: [`folio`], one folio's
//! buffer and block states, below the index.

pub mod folio;
mod folio_index;

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::base::epoch::ReadSection;
use crate::base::locks::{self, Ordered, Rank};
use crate::buf::AlignedBuf;
use crate::mapping::folio::{DirtyMark, Folio, FolioState};
use crate::stats::Counters;

/// The mapping's folio index, write-locked.
pub type IndexWriteGuard<'a> = Ordered<RwLockWriteGuard<'a, FolioIndex>>;

pub use folio_index::{FolioIndex, FolioRef};

/// The dirty index's map: folio index → folio.
pub type DirtyFolios = BTreeMap<u64, Arc<Folio>>;

/// The dirty index: folio index → dirty folio (entries of folios that went
/// clean or were removed may linger until writeback or truncation drops
/// them), and, when regions are tracked, how many entries each region
/// holds. Read it as the map it derefs to; change it only through
/// [`DirtyIndex::insert`] and [`DirtyIndex::remove`], which keep the
/// counts.
pub struct DirtyIndex {
    folios: DirtyFolios,
    /// Region → entries in it; empty when regions are not tracked.
    regions: BTreeMap<u64, usize>,
    /// log2 of the region size in blocks; `None`: not tracked.
    region_shift_blocks: Option<u32>,
}

impl std::ops::Deref for DirtyIndex {
    type Target = DirtyFolios;
    fn deref(&self) -> &DirtyFolios {
        &self.folios
    }
}

impl DirtyIndex {
    pub fn new(region_shift_blocks: Option<u32>) -> DirtyIndex {
        DirtyIndex { folios: BTreeMap::new(), regions: BTreeMap::new(), region_shift_blocks }
    }

    fn region_of(&self, index: u64) -> Option<u64> {
        self.region_shift_blocks.map(|shift| index >> shift)
    }

    /// Indexes `folio`, replacing (and returning) an entry at its index.
    pub fn insert(&mut self, folio: Arc<Folio>) -> Option<Arc<Folio>> {
        let index = folio.index;
        let old = self.folios.insert(index, folio);
        if old.is_none() {
            if let Some(region) = self.region_of(index) {
                *self.regions.entry(region).or_insert(0) += 1;
            }
        }
        self.check_counts();
        old
    }

    pub fn remove(&mut self, index: u64) -> Option<Arc<Folio>> {
        let old = self.folios.remove(&index);
        if old.is_some() {
            if let Some(region) = self.region_of(index) {
                let Entry::Occupied(mut e) = self.regions.entry(region) else {
                    panic!("an indexed folio's region {region} is counted")
                };
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
        self.check_counts();
        old
    }

    /// The regions with entries, in order (empty when not tracked).
    pub fn regions(&self) -> impl Iterator<Item = u64> + '_ {
        self.regions.keys().copied()
    }

    fn check_counts(&self) {
        debug_assert!(
            self.region_shift_blocks.is_none() || self.regions.values().sum::<usize>() == self.folios.len(),
            "every entry is counted in its region"
        );
        debug_assert!(self.region_shift_blocks.is_some() || self.regions.is_empty(), "no counts untracked");
    }
}

/// What owns a mapping (an inode). Eviction holds owners weakly and
/// reaches their mappings through them, so a mapping lives inside its
/// owner: no allocation and no pointer to follow on the data paths.
pub trait MappingOwner: Send + Sync {
    fn mapping(&self) -> &Mapping;
}

/// A bare mapping owns itself (tests of the layers below the inode).
impl MappingOwner for Mapping {
    fn mapping(&self) -> &Mapping {
        self
    }
}

pub struct Mapping {
    /// The inode's id, unique within the cache (eviction's ghosts are keyed
    /// by it).
    pub id: u64,
    folios: RwLock<FolioIndex>,
    /// The index's root word, for lookups without its lock
    /// ([`Mapping::find_lockless`]).
    lockless_root: Arc<AtomicUsize>,
    /// Insertions into `folios`, counted under its write lock: a folio
    /// placement chosen under the read lock still holds while this is
    /// unchanged (removals only make room).
    inserts: AtomicU64,
    dirty: Mutex<DirtyIndex>,
}

impl Mapping {
    /// A mapping whose dirty index counts its entries per region of
    /// `2^region_shift_blocks` blocks, or not at all (`None`), and whose
    /// folio index counts its nodes in `counters.metadata_bytes`.
    pub fn with_regions(id: u64, region_shift_blocks: Option<u32>, counters: Option<Arc<Counters>>) -> Mapping {
        let folios = FolioIndex::counted_in(counters);
        Mapping {
            id,
            lockless_root: folios.root_word(),
            folios: RwLock::new(folios),
            inserts: AtomicU64::new(0),
            dirty: Mutex::new(DirtyIndex::new(region_shift_blocks)),
        }
    }

    /// A mapping without region counts (the tests of the layers below).
    #[cfg(test)]
    pub fn new(id: u64) -> Mapping {
        Mapping::with_regions(id, None, None)
    }

    pub fn read(&self) -> Ordered<RwLockReadGuard<'_, FolioIndex>> {
        Ordered::acquire(Rank::Index, || locks::read(&self.folios))
    }

    pub fn write(&self) -> IndexWriteGuard<'_> {
        Ordered::acquire(Rank::Index, || locks::write(&self.folios))
    }

    pub fn dirty_index(&self) -> Ordered<MutexGuard<'_, DirtyIndex>> {
        locks::lock_ranked(Rank::DirtyIndex, &self.dirty)
    }

    pub fn has_dirty(&self) -> bool {
        !self.dirty_index().is_empty()
    }

    /// The folio covering `block`, if cached.
    pub fn find(&self, block: u64) -> Option<Arc<Folio>> {
        self.read().find(block).map(FolioRef::to_arc)
    }

    /// The folio covering `block`, found without the index's lock: one that
    /// covers the block and was indexed during the call, or `None` (also
    /// when a change was under way: look again under the lock). Whether
    /// its data may be read is the folio's own to say
    /// ([`Folio::copy_optimistic`]).
    #[inline]
    pub fn find_lockless<'a>(&'a self, section: &'a ReadSection, block: u64) -> Option<&'a Folio> {
        FolioIndex::find_lockless(&self.lockless_root, section, block)
    }

    /// Insertions so far (see `inserts`); sampled under the read lock.
    pub fn inserts(&self) -> u64 {
        self.inserts.load(Ordering::Acquire)
    }

    /// Inserts a new folio; `index` is the write guard of this mapping's
    /// index, and nothing in it may overlap the folio (the index checks).
    pub fn insert(&self, index: &mut FolioIndex, folio: Arc<Folio>) {
        debug_assert_eq!(folio.dirty_mark.load(Ordering::Relaxed), DirtyMark::CLEAN, "a new folio is clean");
        let before = self.inserts.fetch_add(1, Ordering::AcqRel);
        index.insert(folio);
        debug_assert!(self.inserts() > before);
    }

    /// A folio that just went from clean to dirty (its lock held) joins the
    /// dirty index.
    pub fn index_dirty(&self, folio: &Arc<Folio>) {
        debug_assert!(folio.state.try_lock().is_err(), "the folio's lock is held");
        debug_assert_ne!(folio.dirty_mark.load(Ordering::Relaxed), DirtyMark::REMOVED, "removed folios stay clean");
        debug_assert_eq!(folio.dirty_mark.load(Ordering::Relaxed), DirtyMark::CLEAN, "only a clean folio joins");
        folio.dirty_mark.store(DirtyMark::DIRTY, Ordering::Release);
        self.dirty_index().insert(folio.clone());
        debug_assert!(
            self.dirty_index().get(&folio.index).is_some_and(|f| Arc::ptr_eq(f, folio)),
            "folio {} indexed",
            folio.index
        );
    }

    /// Whether the dirty index holds `folio` itself (a folio gone clean
    /// stays there until the next writeback pass's batched cleanup).
    pub fn dirty_index_holds(&self, folio: &Arc<Folio>) -> bool {
        self.dirty_index().get(&folio.index).is_some_and(|f| Arc::ptr_eq(f, folio))
    }

    /// A folio whose dirty blocks were all discarded or written (its lock
    /// held) leaves the dirty index.
    pub fn unindex_clean(&self, folio: &Folio) {
        debug_assert!(folio.state.try_lock().is_err(), "the folio's lock is held");
        debug_assert_ne!(folio.dirty_mark.load(Ordering::Relaxed), DirtyMark::REMOVED, "a removed folio left already");
        folio.dirty_mark.store(DirtyMark::CLEAN, Ordering::Release);
        let mut idx = self.dirty_index();
        if idx.get(&folio.index).is_some_and(|f| std::ptr::eq(Arc::as_ptr(f), folio)) {
            idx.remove(folio.index);
        }
        debug_assert!(idx.get(&folio.index).is_none_or(|f| !std::ptr::eq(Arc::as_ptr(f), folio)));
    }

    /// Removes `folio` if it is still here, clean, not under writeback and
    /// not being filled. `Some(buffer)` when it was removed: the buffer to
    /// free, unless in-flight writeback still holds it (that writeback's
    /// completion frees it then).
    pub fn try_remove_clean(&self, folio: &Arc<Folio>) -> Option<Option<AlignedBuf>> {
        self.remove_clean_if(folio, |_| true)
    }

    /// As [`Mapping::try_remove_clean`], only while the folio is still
    /// marked drop-behind (checked under its lock: a cached access that
    /// cleared the mark before the removal keeps it).
    pub fn try_remove_clean_dropbehind(&self, folio: &Arc<Folio>) -> Option<Option<AlignedBuf>> {
        self.remove_clean_if(folio, |f| f.dropbehind.load(Ordering::Acquire))
    }

    fn remove_clean_if(&self, folio: &Arc<Folio>, still_wanted: impl Fn(&Folio) -> bool) -> Option<Option<AlignedBuf>> {
        let mut index = self.write();
        if !index.get(folio.index).is_some_and(|f| f.is(folio)) {
            return None;
        }
        let mut st = folio.lock();
        if st.removed || st.nr_dirty > 0 || st.nr_writeback > 0 || st.read_in_flight || !still_wanted(folio) {
            return None;
        }
        debug_assert_eq!(st.dontcache_dirty, 0, "a clean folio holds no uncached-dirty blocks");
        index.remove(folio.index);
        debug_assert!(index.get(folio.index).is_none(), "folio {} left the index", folio.index);
        Some(Self::mark_removed(folio, &mut st))
    }

    /// Bookkeeping for a folio just taken out of the index (its lock held):
    /// marks it removed and takes its buffer, returned when nothing else
    /// (in-flight writeback) holds it.
    pub fn mark_removed(folio: &Folio, st: &mut FolioState) -> Option<AlignedBuf> {
        assert!(!st.removed, "a folio is removed once");
        assert_eq!(st.nr_dirty, 0, "removed folios are clean");
        debug_assert!(!st.read_in_flight, "a folio being filled is not removed");
        st.buf().forget_record();
        let buf = folio.change(st, |st| {
            st.removed = true;
            std::mem::replace(st.buf_mut(), Arc::new(AlignedBuf::zeroed(0)))
        });
        folio.dirty_mark.store(DirtyMark::REMOVED, Ordering::Release);
        debug_assert!(st.buf().is_empty());
        debug_assert!(st.invariants_hold(folio.nr_blocks()));
        Arc::into_inner(buf)
    }
}

/// The order of a new folio at `block`: the largest order not above
/// `max_order` whose folio is naturally aligned at `block`, ends at or
/// before `limit_block` (so it follows the request's size and alignment)
/// and overlaps no folio already in `index`.
pub fn choose_order(index: &FolioIndex, block: u64, limit_block: u64, max_order: u8) -> u8 {
    let fits = |order: u8, limit: u64| {
        let n = 1u64 << order;
        block % n == 0 && block + n <= limit
    };
    let mut order = max_order;
    while order > 0 && !fits(order, limit_block) {
        order -= 1;
    }
    // Only a folio larger than a block can reach a neighbour: a single
    // block write (random 4 KiB I/O) skips the map walk.
    if order > 0 {
        let next_start = index.first_from(block + 1).map_or(u64::MAX, |f| f.index);
        while order > 0 && !fits(order, next_start) {
            order -= 1;
        }
    }
    debug_assert!(order <= max_order && block % (1 << order) == 0);
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::folio::FolioStart;

    #[test]
    fn order_follows_size_alignment_and_neighbours() {
        let mut map = FolioIndex::new();
        assert_eq!(choose_order(&map, 0, 1, 9), 0, "a 1 KiB write gets one block");
        assert_eq!(choose_order(&map, 0, 512, 9), 9, "2 MiB aligned write");
        assert_eq!(choose_order(&map, 0, 10_000, 9), 9, "capped at folio_max");
        assert_eq!(choose_order(&map, 256, 1024, 9), 8, "alignment limits the order");
        assert_eq!(choose_order(&map, 3, 1024, 9), 0, "odd block");
        map.insert(Arc::new(Folio::new(8, 0, FolioStart::Idle)));
        assert_eq!(choose_order(&map, 0, 512, 9), 3, "a neighbour limits the order");
        assert_eq!(choose_order(&map, 0, 8, 9), 3, "a neighbour just past the folio does not");
        assert_eq!(choose_order(&map, 16, 512, 9), 4, "a neighbour before the block does not");
        map.insert(Arc::new(Folio::new(1, 0, FolioStart::Idle)));
        assert_eq!(choose_order(&map, 0, 512, 9), 0, "a neighbour at the next block");
    }

    /// Region counts follow insertions and removals, a replaced entry is
    /// counted once, and an untracked index counts nothing.
    #[test]
    fn dirty_index_counts_entries_per_region() {
        let folio = |index: u64| Arc::new(Folio::new(index, 0, FolioStart::Idle));
        let mut idx = DirtyIndex::new(Some(4)); // 16 blocks per region
        for i in [0, 3, 15, 16, 40] {
            assert!(idx.insert(folio(i)).is_none());
        }
        assert!(idx.insert(folio(3)).is_some(), "a replaced entry");
        assert_eq!(idx.regions().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(idx.regions[&0], 3);
        idx.remove(16);
        idx.remove(16);
        assert_eq!(idx.regions().collect::<Vec<_>>(), vec![0, 2], "an emptied region leaves");
        for i in [0, 3, 15, 40] {
            idx.remove(i);
        }
        assert!(idx.is_empty() && idx.regions().next().is_none());
        let mut untracked = DirtyIndex::new(None);
        untracked.insert(folio(5));
        assert_eq!(untracked.regions().count(), 0);
    }

    /// Removal takes only clean, idle folios, once; the dirty index follows
    /// the folio's transitions.
    #[test]
    fn only_clean_idle_folios_are_removed_and_only_once() {
        let mapping = Mapping::new(1);
        let folio = Arc::new(Folio::new(0, 2, FolioStart::Idle));
        mapping.insert(&mut mapping.write(), folio.clone());
        assert_eq!(mapping.inserts(), 1);
        {
            let mut st = folio.lock();
            st.set_uptodate(folio.nr_blocks(), 0, folio.nr_blocks());
            st.dirty.set_range(0, 1);
            st.nr_dirty = 1;
            mapping.index_dirty(&folio);
        }
        assert!(mapping.has_dirty());
        assert!(mapping.try_remove_clean(&folio).is_none(), "a dirty folio stays");
        {
            let mut st = folio.lock();
            st.dirty.clear_range(0, 1);
            st.nr_dirty = 0;
            mapping.unindex_clean(&folio);
        }
        assert!(!mapping.has_dirty());
        let removed = mapping.try_remove_clean(&folio).expect("a clean idle folio goes");
        assert_eq!(removed.map(|b| b.len()), Some(folio.size_bytes()), "its buffer comes back");
        assert!(mapping.find(0).is_none());
        assert!(mapping.try_remove_clean(&folio).is_none(), "removed once");
    }
}
