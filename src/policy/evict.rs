//! Eviction of clean folios with S3-FIFO: new folios enter a small FIFO
//! (about 10% of cached bytes); those touched again while there move to the
//! main FIFO, the rest are evicted and remembered in a ghost set, and a folio
//! whose ghost is found on insertion goes straight to main. Main is a CLOCK:
//! a referenced folio loses one reference and goes round again. A one-pass
//! scan therefore flows through the small queue and never displaces a hot
//! set living in main.
//!
//! Folios that are dirty, under writeback or being filled are skipped (they
//! go round again); the dirty limit guarantees clean folios exist. The queue
//! lock is never held while taking a mapping lock: eviction picks a victim
//! under the queue lock, releases it, then removes the victim through its
//! mapping, which re-checks the folio under the mapping and folio locks.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::base::locks;
use crate::buf::AlignedBuf;
use crate::mapping::folio::{metadata_bytes_for, DirtyMark, Folio};
use crate::mapping::MappingOwner;
use crate::stats::Counters;

struct Entry {
    folio: Arc<Folio>,
    owner: Weak<dyn MappingOwner>,
    ghost_key: u64,
}

#[derive(Default)]
struct Queues {
    small: VecDeque<Entry>,
    main: VecDeque<Entry>,
    small_bytes: u64,
    main_bytes: u64,
    ghost_fifo: VecDeque<u64>,
    ghost: HashSet<u64>,
}

impl Queues {
    /// Drops the entries of folios that left their mapping and of inodes
    /// that are gone; the rest keep their order.
    fn sweep_dead(&mut self) {
        let alive =
            |e: &Entry| e.owner.strong_count() > 0 && e.folio.dirty_mark.load(Ordering::Acquire) != DirtyMark::REMOVED;
        self.small.retain(alive);
        self.main.retain(alive);
        self.small_bytes = self.small.iter().map(|e| e.folio.size_bytes() as u64).sum();
        self.main_bytes = self.main.iter().map(|e| e.folio.size_bytes() as u64).sum();
    }

    fn remember_ghost(&mut self, key: u64) {
        if self.ghost.insert(key) {
            self.ghost_fifo.push_back(key);
        }
        // The ghost remembers about as many folios as the cache holds.
        let limit = (self.small.len() + self.main.len()).max(64);
        while self.ghost_fifo.len() > limit {
            if let Some(old) = self.ghost_fifo.pop_front() {
                self.ghost.remove(&old);
            }
        }
    }
}

#[derive(Default)]
pub struct Evictor {
    queues: Mutex<Queues>,
    /// Folios inserted and not yet removed from their mapping. Folios that
    /// leave without eviction (drop-behind, truncation, a forgotten inode)
    /// keep their queue entries until eviction meets them, which it never
    /// does while the cache is under capacity: when entries outnumber live
    /// folios two to one, `insert` sweeps the dead ones out.
    live_folios: AtomicUsize,
}

fn ghost_key(inode_id: u64, index: u64) -> u64 {
    (inode_id.wrapping_mul(0x9E37_79B9_7F4A_7C15)) ^ index.rotate_left(17)
}

/// Where a popped victim came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

impl Evictor {
    /// Registers a newly cached folio.
    pub fn insert<O: MappingOwner + 'static>(&self, owner: &Arc<O>, folio: &Arc<Folio>) {
        let key = ghost_key(owner.mapping().id, folio.index);
        let owner: Weak<dyn MappingOwner> = Arc::downgrade(owner) as Weak<dyn MappingOwner>;
        let entry = Entry { folio: folio.clone(), owner, ghost_key: key };
        let bytes = folio.size_bytes() as u64;
        let live = self.live_folios.fetch_add(1, Ordering::AcqRel) + 1;
        let mut q = locks::lock(&self.queues);
        if q.ghost.remove(&key) {
            q.main_bytes += bytes;
            q.main.push_back(entry);
        } else {
            q.small_bytes += bytes;
            q.small.push_back(entry);
        }
        if q.small.len() + q.main.len() > 2 * live + 64 {
            q.sweep_dead();
        }
    }

    /// A folio left its mapping (evicted, dropped behind, truncated):
    /// called once per inserted folio.
    pub fn note_removed(&self) {
        let before = self.live_folios.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "more folios removed than inserted");
    }

    /// Evicts clean folios until about `want_bytes` are freed or a full
    /// round finds nothing evictable; each evicted folio's buffer goes to
    /// `release` (with its length), unless in-flight writeback still holds
    /// it. Returns the bytes freed.
    pub fn evict(&self, counters: &Counters, want_bytes: u64, release: &dyn Fn(AlignedBuf, usize)) -> u64 {
        let mut freed = 0u64;
        let mut budget = {
            let q = locks::lock(&self.queues);
            2 * (q.small.len() + q.main.len()) + 8
        };
        while freed < want_bytes && budget > 0 {
            budget -= 1;
            let Some((entry, from)) = self.pick_victim() else { break };
            let bytes = entry.folio.size_bytes() as u64;
            let removed = entry.owner.upgrade().and_then(|owner| owner.mapping().try_remove_clean(&entry.folio));
            if let Some(buf) = removed {
                self.note_removed();
                Counters::sub(&counters.metadata_bytes, metadata_bytes_for(entry.folio.nr_blocks()) as u64);
                if let Some(buf) = buf {
                    release(buf, entry.folio.size_bytes());
                }
                freed += bytes;
                Counters::add(&counters.evictions, 1);
                let mut q = locks::lock(&self.queues);
                if from == Queue::Small {
                    q.remember_ghost(entry.ghost_key);
                }
            } else if entry.owner.strong_count() > 0 && !entry.folio.lock().removed {
                // Raced with a writer or a fill: keep it for another round.
                let mut q = locks::lock(&self.queues);
                q.main_bytes += bytes;
                q.main.push_back(entry);
            }
        }
        freed
    }

    /// Pops entries until one is an eviction candidate (removing dead ones,
    /// promoting or rotating referenced and busy ones). The candidate is
    /// returned out of the queues.
    fn pick_victim(&self) -> Option<(Entry, Queue)> {
        let mut q = locks::lock(&self.queues);
        let mut scans = 2 * (q.small.len() + q.main.len()) + 1;
        while scans > 0 {
            scans -= 1;
            let total = q.small_bytes + q.main_bytes;
            let from_small = !q.small.is_empty() && (q.main.is_empty() || q.small_bytes * 10 >= total);
            let (entry, from) = if from_small {
                let e = q.small.pop_front()?;
                q.small_bytes -= e.folio.size_bytes() as u64;
                (e, Queue::Small)
            } else {
                let e = q.main.pop_front()?;
                q.main_bytes -= e.folio.size_bytes() as u64;
                (e, Queue::Main)
            };
            let bytes = entry.folio.size_bytes() as u64;
            // Busy or pinned folios go round again; removed ones drop out.
            let busy = match entry.folio.state.try_lock() {
                Ok(st) if st.removed => continue,
                Ok(st) => st.nr_dirty > 0 || st.nr_writeback > 0 || st.read_in_flight,
                Err(_) => true,
            };
            if entry.owner.strong_count() == 0 {
                continue;
            }
            let referenced = entry.folio.reference_count();
            if busy || (from == Queue::Main && referenced > 0) {
                if from == Queue::Main && referenced > 0 {
                    entry.folio.set_reference_count(referenced - 1);
                }
                q.main_bytes += bytes;
                q.main.push_back(entry);
                continue;
            }
            if from == Queue::Small && referenced > 0 {
                entry.folio.set_reference_count(0);
                q.main_bytes += bytes;
                q.main.push_back(entry);
                continue;
            }
            return Some((entry, from));
        }
        None
    }

    /// Folios currently tracked (including removed ones not yet dropped).
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        let q = locks::lock(&self.queues);
        q.small.len() + q.main.len()
    }

    /// Forgets everything (cache close).
    pub fn clear(&self) {
        let mut q = locks::lock(&self.queues);
        *q = Queues::default();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;
    use crate::io::BLOCK_SIZE;
    use crate::mapping::folio::FolioStart;
    use crate::mapping::Mapping;

    const BLOCK: u64 = BLOCK_SIZE as u64;

    /// An evictor and its counters; folios come and go with the accounting
    /// `Memory::folio_added` and `Memory::folio_removed` do.
    #[derive(Default)]
    struct Cache {
        evictor: Evictor,
        counters: Counters,
    }

    /// An uptodate, clean, idle folio of `1 << order` blocks at `index`.
    fn clean_folio(index: u64, order: u8) -> Folio {
        let folio = Folio::new(index, order, FolioStart::Idle);
        let n = folio.nr_blocks();
        folio.lock().set_uptodate(n, 0, n);
        folio
    }

    /// Whether `folio` itself (not a newer one at its index) is cached.
    fn cached(mapping: &Mapping, folio: &Arc<Folio>) -> bool {
        mapping.find(folio.index).is_some_and(|f| Arc::ptr_eq(&f, folio))
    }

    impl Cache {
        /// Puts `folio` in `mapping` and registers it for eviction.
        fn add(&self, mapping: &Arc<Mapping>, folio: Folio) -> Arc<Folio> {
            let folio = Arc::new(folio);
            mapping.insert(&mut mapping.write(), folio.clone());
            Counters::add(&self.counters.metadata_bytes, metadata_bytes_for(folio.nr_blocks()) as u64);
            self.evictor.insert(mapping, &folio);
            self.check();
            folio
        }

        fn add_clean(&self, mapping: &Arc<Mapping>, index: u64, order: u8) -> Arc<Folio> {
            self.add(mapping, clean_folio(index, order))
        }

        /// Takes a folio out without eviction (drop-behind, truncation).
        fn remove(&self, mapping: &Mapping, folio: &Arc<Folio>) {
            let buf = mapping.try_remove_clean(folio).expect("a clean idle folio is removed");
            assert!(buf.is_some());
            self.forget(folio);
        }

        /// The bookkeeping of a folio that left its mapping.
        fn forget(&self, folio: &Folio) {
            self.evictor.note_removed();
            Counters::sub(&self.counters.metadata_bytes, metadata_bytes_for(folio.nr_blocks()) as u64);
        }

        /// Evicts about `want` bytes: the bytes freed, and the lengths
        /// handed to `release` in order.
        fn evict(&self, want: u64) -> (u64, Vec<usize>) {
            let released = RefCell::new(Vec::new());
            let freed = self.evictor.evict(&self.counters, want, &|buf, len| {
                assert_eq!(buf.len(), len, "release gets the buffer with its length");
                released.borrow_mut().push(len);
            });
            self.check();
            (freed, released.into_inner())
        }

        fn evictions(&self) -> u64 {
            self.counters.evictions.load(Relaxed)
        }

        fn metadata(&self) -> u64 {
            self.counters.metadata_bytes.load(Relaxed)
        }

        /// The queues' byte totals match their entries; every ghost is in
        /// the ghost FIFO (so it will be forgotten in turn).
        fn check(&self) {
            let q = locks::lock(&self.evictor.queues);
            let bytes = |d: &VecDeque<Entry>| d.iter().map(|e| e.folio.size_bytes() as u64).sum::<u64>();
            assert_eq!(q.small_bytes, bytes(&q.small), "small_bytes");
            assert_eq!(q.main_bytes, bytes(&q.main), "main_bytes");
            assert!(q.ghost.iter().all(|k| q.ghost_fifo.contains(k)), "every ghost is in the FIFO");
        }
    }

    /// Folios used again while in the small queue move to main; a one-pass
    /// scan (and data used once, even if touched once) flows through the
    /// small queue and leaves the hot set in place.
    #[test]
    fn a_one_pass_scan_does_not_flush_the_hot_set() {
        let c = Cache::default();
        let m = Arc::new(Mapping::new(1));
        let first: Vec<_> = (0..16).map(|i| c.add_clean(&m, i, 0)).collect();
        let (hot, cold): (Vec<_>, Vec<_>) = first.iter().cloned().partition(|f| f.index % 2 == 0);
        for f in &hot {
            // The first access only marks a folio touched; the second is reuse.
            f.mark_accessed();
            f.mark_accessed();
            assert_eq!(f.reference_count(), 1);
        }
        for f in &cold {
            f.mark_accessed();
            assert_eq!(f.reference_count(), 0, "one access is not reuse");
        }
        // A scan at capacity: each new folio makes room for itself.
        let mut scan = Vec::new();
        for i in 0..200 {
            scan.push(c.add_clean(&m, 1000 + i, 0));
            assert_eq!(c.evict(BLOCK), (BLOCK, vec![BLOCK_SIZE]), "round {i}");
        }
        assert!(hot.iter().all(|f| cached(&m, f)), "the hot set stays");
        assert!(cold.iter().all(|f| !cached(&m, f)), "folios used once go first");
        assert!(scan[..192].iter().all(|f| !cached(&m, f)), "the scan flows through");
        assert!(scan[192..].iter().all(|f| cached(&m, f)), "the newest scan folios are still cached");
        assert_eq!(c.evictions(), 200);
        assert_eq!(c.evictor.tracked(), 16);
        assert_eq!(m.read().len(), 16);
    }

    /// Main is a CLOCK: a folio referenced again there loses one reference
    /// and goes round, unreferenced ones are evicted in FIFO order.
    #[test]
    fn main_gives_referenced_folios_another_round() {
        let c = Cache::default();
        let m = Arc::new(Mapping::new(1));
        let f: Vec<_> = (0..4).map(|i| c.add_clean(&m, i, 0)).collect();
        for x in &f {
            x.mark_accessed();
            x.mark_accessed();
        }
        let newcomer = c.add_clean(&m, 4, 0);
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(!cached(&m, &newcomer), "the untouched newcomer goes, the reused move to main");
        assert!(f.iter().all(|x| x.reference_count() == 0), "promotion spends the reference");
        // Main is [0, 1, 2, 3], the small queue is empty.
        f[1].mark_accessed();
        assert_eq!(f[1].reference_count(), 1);
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(!cached(&m, &f[0]));
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(cached(&m, &f[1]) && !cached(&m, &f[2]), "1 went round, 2 was evicted");
        assert_eq!(f[1].reference_count(), 0, "going round costs a reference");
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(cached(&m, &f[1]) && !cached(&m, &f[3]));
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(!cached(&m, &f[1]));
        assert_eq!(c.evictor.tracked(), 0);
        assert_eq!(c.evict(BLOCK), (0, vec![]), "nothing left");
    }

    /// A folio evicted from the small queue leaves a ghost (keyed by inode
    /// and index); coming back while remembered, it goes straight to main
    /// and outlives an untouched newcomer.
    #[test]
    fn a_folio_back_from_the_ghost_set_goes_to_main() {
        let c = Cache::default();
        let m1 = Arc::new(Mapping::new(1));
        let m2 = Arc::new(Mapping::new(2));
        let a = c.add_clean(&m1, 0, 0);
        assert_eq!(c.evict(BLOCK), (BLOCK, vec![BLOCK_SIZE]));
        assert!(m1.find(0).is_none());
        // Another inode's folio at the same index is no ghost.
        let other = c.add_clean(&m2, 0, 0);
        let again = c.add_clean(&m1, 0, 0);
        assert!(!Arc::ptr_eq(&a, &again));
        let newcomer = c.add_clean(&m1, 1, 0);
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(!cached(&m2, &other), "other inode, same index: a newcomer in the small queue");
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(!cached(&m1, &newcomer), "the untouched newcomer goes");
        assert!(cached(&m1, &again), "the returning folio is in main");
        assert_eq!(c.evictor.tracked(), 1);

        // Evicted from main it leaves no ghost, and the first ghost was
        // used up: it comes back into the small queue.
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(m1.find(0).is_none());
        let third = c.add_clean(&m1, 0, 0);
        let newcomer = c.add_clean(&m1, 1, 0);
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(!cached(&m1, &third) && cached(&m1, &newcomer), "FIFO order in the small queue");
    }

    /// The ghost set remembers about as many folios as the cache holds (at
    /// least 64): the oldest ghosts are forgotten.
    #[test]
    fn the_ghost_set_forgets_the_oldest() {
        let c = Cache::default();
        let m = Arc::new(Mapping::new(7));
        for i in 0..300 {
            c.add_clean(&m, i, 0);
        }
        assert_eq!(c.evict(u64::MAX).0, 300 * BLOCK);
        assert_eq!(locks::lock(&c.evictor.queues).ghost.len(), 64);
        let oldest = c.add_clean(&m, 0, 0);
        let newest = c.add_clean(&m, 299, 0);
        let newcomer = c.add_clean(&m, 1000, 0);
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(!cached(&m, &oldest), "forgotten: back in the small queue");
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        assert!(!cached(&m, &newcomer));
        assert!(cached(&m, &newest), "remembered: back in main");
    }

    /// Dirty folios, folios under writeback, folios being filled and folios
    /// locked by someone else are never evicted; they stay tracked and are
    /// evicted once clean and idle.
    #[test]
    fn busy_folios_are_never_evicted() {
        let c = Cache::default();
        let m = Arc::new(Mapping::new(1));
        let dirty = c.add_clean(&m, 0, 1);
        {
            let mut st = dirty.lock();
            assert_eq!(st.set_dirty(0, 1), 1);
            m.index_dirty(&dirty);
            st.check(dirty.nr_blocks());
        }
        let writeback = c.add_clean(&m, 2, 1);
        {
            let mut st = writeback.lock();
            st.nr_writeback += st.writeback.set_range(0, 2);
            st.check(writeback.nr_blocks());
        }
        let filling = c.add(&m, Folio::new(4, 1, FolioStart::Filling));
        let locked = c.add_clean(&m, 6, 1);
        let busy = [&dirty, &writeback, &filling, &locked];
        let meta = c.metadata();
        // Another thread holds `locked`'s lock: this one takes the index
        // (eviction does), which it may not do under a folio lock.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let locked = &locked;
            s.spawn(move || {
                let _guard = locked.lock();
                held_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            });
            held_rx.recv().unwrap();
            for want in [BLOCK, u64::MAX, u64::MAX] {
                assert_eq!(c.evict(want), (0, vec![]), "nothing is evictable");
            }
            assert_eq!(c.evictions(), 0);
            assert_eq!(c.metadata(), meta);
            assert_eq!(c.evictor.tracked(), 4);
            // With a clean folio behind them, eviction takes only that one.
            let clean = c.add_clean(&m, 8, 0);
            assert_eq!(c.evict(u64::MAX), (BLOCK, vec![BLOCK_SIZE]));
            assert!(!cached(&m, &clean));
            assert_eq!(c.evictions(), 1);
            release_tx.send(()).unwrap();
        });
        assert!(busy.iter().all(|f| cached(&m, f)), "busy folios stay cached");
        assert!(m.has_dirty());
        assert_eq!(c.evictor.tracked(), 4, "and stay tracked");

        // Cleaned, written and filled, they go.
        {
            let mut st = dirty.lock();
            st.nr_dirty -= st.dirty.clear_range(0, 2);
            m.unindex_clean(&dirty);
        }
        {
            let mut st = writeback.lock();
            st.nr_writeback -= st.writeback.clear_range(0, 2);
        }
        {
            let mut st = filling.lock();
            st.set_uptodate(2, 0, 2);
            st.read_in_flight = false;
        }
        let (freed, released) = c.evict(u64::MAX);
        assert_eq!(freed, 4 * 2 * BLOCK);
        assert_eq!(released, vec![2 * BLOCK_SIZE; 4]);
        assert!(busy.iter().all(|f| !cached(&m, f)));
        assert_eq!(c.evictions(), 5);
        assert_eq!(c.metadata(), 0);
        assert_eq!(c.evictor.tracked(), 0);
    }

    /// Entries of folios removed without eviction are swept out by later
    /// insertions: the queues stay bounded by the live folios, and the live
    /// ones keep their order.
    #[test]
    fn entries_of_removed_folios_are_swept() {
        let c = Cache::default();
        let m = Arc::new(Mapping::new(1));
        let live: Vec<_> = (0..10).map(|i| c.add_clean(&m, i, 0)).collect();
        for i in 0..1000 {
            let f = c.add_clean(&m, 100 + i, 0);
            assert!(c.evictor.tracked() <= 2 * 11 + 64, "round {i}: {} entries", c.evictor.tracked());
            c.remove(&m, &f);
        }
        assert!(live.iter().all(|f| cached(&m, f)));
        assert_eq!(c.evict(BLOCK), (BLOCK, vec![BLOCK_SIZE]));
        assert!(!cached(&m, &live[0]) && cached(&m, &live[1]), "the first inserted goes first");
        assert_eq!(c.evict(u64::MAX), (9 * BLOCK, vec![BLOCK_SIZE; 9]), "only the live folios are freed");
        assert_eq!(c.evictions(), 10);
        assert_eq!(c.evictor.tracked(), 0, "eviction drops the dead entries it meets");
        assert_eq!(c.metadata(), 0);
    }

    /// Entries whose mapping is gone (a forgotten inode) are swept too, and
    /// eviction neither frees nor counts them.
    #[test]
    fn entries_of_dropped_mappings_are_swept() {
        let c = Cache::default();
        let keep = Arc::new(Mapping::new(0));
        let kept = c.add_clean(&keep, 0, 0);
        for id in 1..=200 {
            let m = Arc::new(Mapping::new(id));
            let folios: Vec<_> = (0..8).map(|i| c.add_clean(&m, i, 0)).collect();
            assert!(c.evictor.tracked() <= 2 * 9 + 64, "inode {id}: {} entries", c.evictor.tracked());
            drop(m);
            for f in &folios {
                c.forget(f);
            }
        }
        assert!(c.evictor.tracked() <= 2 * 9 + 64);
        assert_eq!(c.evict(u64::MAX), (BLOCK, vec![BLOCK_SIZE]), "only the live folio is freed");
        assert!(!cached(&keep, &kept));
        assert_eq!(c.evictions(), 1);
        assert_eq!(c.evictor.tracked(), 0);
        assert_eq!(c.evict(u64::MAX), (0, vec![]));
    }

    /// Each evicted folio's buffer goes to `release` with its length; the
    /// evictions and the metadata are counted; the bytes freed are
    /// returned, whole folios until at least `want_bytes`.
    #[test]
    fn eviction_releases_buffers_and_counts() {
        let c = Cache::default();
        let m = Arc::new(Mapping::new(1));
        let orders = [0u8, 3, 1, 2, 0];
        let mut index = 0;
        let folios: Vec<_> = orders
            .iter()
            .map(|&o| {
                let f = c.add_clean(&m, index, o);
                index += 8;
                f
            })
            .collect();
        let meta = |fs: &[Arc<Folio>]| fs.iter().map(|f| metadata_bytes_for(f.nr_blocks()) as u64).sum::<u64>();
        assert_eq!(c.metadata(), meta(&folios));

        assert_eq!(c.evict(1), (BLOCK, vec![BLOCK_SIZE]), "one folio is enough for one byte");
        assert_eq!(c.evict(BLOCK + 1), (8 * BLOCK, vec![8 * BLOCK_SIZE]), "a whole folio, more than asked");
        assert_eq!(c.evict(3 * BLOCK), (6 * BLOCK, vec![2 * BLOCK_SIZE, 4 * BLOCK_SIZE]), "until enough");
        assert_eq!(c.evictions(), 4);
        assert_eq!(c.metadata(), meta(&folios[4..]));
        for f in &folios[..4] {
            let st = f.lock();
            assert!(st.removed && st.buf().is_empty(), "evicted folios are marked removed and emptied");
            drop(st);
            assert!(m.find(f.index).is_none());
        }
        assert!(cached(&m, &folios[4]));

        // A buffer someone else still holds (in-flight I/O) is not released
        // here: its holder gives it back.
        let held = folios[4].lock().buf().clone();
        let (_, released) = c.evict(u64::MAX);
        assert_eq!(released, vec![]);
        assert!(folios[4].lock().removed && m.find(folios[4].index).is_none());
        assert_eq!(c.evictions(), 5);
        assert_eq!(c.metadata(), 0);
        assert_eq!(Arc::strong_count(&held), 1, "the holder owns the buffer now");
        assert_eq!(c.evict(u64::MAX), (0, vec![]));
    }

    /// `clear` forgets queued folios and ghosts.
    #[test]
    fn clear_forgets_everything() {
        let c = Cache::default();
        let m = Arc::new(Mapping::new(1));
        c.add_clean(&m, 0, 0);
        assert_eq!(c.evict(BLOCK).0, BLOCK);
        let f = c.add_clean(&m, 1, 0);
        c.evictor.clear();
        assert_eq!(c.evictor.tracked(), 0);
        assert_eq!(c.evict(u64::MAX), (0, vec![]));
        assert!(cached(&m, &f));
        let q = locks::lock(&c.evictor.queues);
        assert!(q.ghost.is_empty() && q.ghost_fifo.is_empty() && q.small_bytes == 0 && q.main_bytes == 0);
    }
}
