//! Drop-behind: freeing the folios uncached I/O brought in or dirtied, as
//! soon as they are clean and nobody holds them, so a stream never grows
//! the cache and never pushes out what other readers use.
//!
//! Who queues: a writeback completion queues each drop-behind folio it
//! left clean; an uncached read queues each drop-behind folio it has
//! copied to the end. Neither frees anything itself: removing a folio
//! takes its mapping's write lock and gives its buffer back, work that
//! belongs neither on the I/O completion path (it would delay the wakeup
//! of the fsync waiting for that I/O) nor on a reader's or writer's path.
//! The reaper thread (`wbc-dropbehind`, one per cache) takes the queued
//! folios in batches, in task context, as the kernel defers uncached
//! completions to task context in batches.
//!
//! What is freed: a folio still marked drop-behind (a cached access clears
//! the mark), clean, not under writeback or being filled, and held by
//! nobody beyond the cache's own references (its mapping, the eviction
//! queue, and the dirty index until its batched cleanup): a reader that has found the folio keeps it alive, and the
//! reaper tries again in a later batch, a few times, before leaving it to
//! eviction. A folio the reaper skips is never lost, only cached longer.
//!
//! Locks: the queue is sharded by inode and folio index, so producers on
//! different threads rarely meet on one lock and none is cache-wide; the
//! reaper holds a shard's lock only to swap its vector out.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::base::locks;
use crate::buf::BulkFree;
use crate::mapping::folio::{DirtyMark, Folio};
use crate::mapping::MappingOwner;
use crate::policy::memory::Memory;
use crate::stats::Counters;

/// Queue shards: a few per core on this class of machine, so that
/// completions and readers on different threads seldom share a lock.
const SHARDS: usize = 8;

/// Queued bytes that wake the reaper at once; below this it wakes on its
/// tick. At 2 GB/s of uncached I/O that is about 250 batches a second.
const BATCH_BYTES: u64 = 8 << 20;

/// How long a queued folio may wait for a batch to fill: the memory it
/// holds is capacity no one else can use meanwhile.
const TICK: Duration = Duration::from_millis(2);

/// How long a folio someone holds is retried (in every batch) before the
/// reaper leaves it to eviction: far longer than a reader or a fill holds
/// a folio, even on a loaded machine. 0.1 s (48 retries at one batch per
/// tick) was too short there: on a 2-core machine running two test suites
/// at once, a test found 8 MiB of an uncached reader's folios still cached
/// 10 s after the reads.
const HELD_FOR_MAX: Duration = Duration::from_secs(2);

/// References the cache itself keeps to a clean, idle folio: its
/// mapping's index and its eviction queue entry (and the dirty index's,
/// counted apart). One more is the reaper's.
const CACHE_REFS: usize = 2;

struct Queued {
    owner: Weak<dyn MappingOwner>,
    folio: Arc<Folio>,
    /// When the reaper first found it held.
    held_since: Option<Instant>,
}

#[derive(Default)]
struct Wake {
    wanted: bool,
    stop: bool,
}

pub struct DropBehind {
    shards: Box<[Mutex<Vec<Queued>>]>,
    queued_bytes: AtomicU64,
    /// Set while a wakeup is pending, so producers past the batch size do
    /// not take the wake lock again.
    wake_pending: AtomicBool,
    wake: Mutex<Wake>,
    cond: Condvar,
    memory: Arc<Memory>,
    counters: Arc<Counters>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl DropBehind {
    /// The queue and its reaper thread.
    pub fn start(memory: Arc<Memory>, counters: Arc<Counters>) -> io::Result<Arc<DropBehind>> {
        let this = Arc::new(DropBehind {
            shards: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
            queued_bytes: AtomicU64::new(0),
            wake_pending: AtomicBool::new(false),
            wake: Mutex::new(Wake::default()),
            cond: Condvar::new(),
            memory,
            counters,
            thread: Mutex::new(None),
        });
        let reaper = this.clone();
        let handle = std::thread::Builder::new().name("wbc-dropbehind".into()).spawn(move || reaper.run())?;
        *locks::lock(&this.thread) = Some(handle);
        Ok(this)
    }

    /// Queues a drop-behind folio of `owner`'s mapping to be freed if it
    /// is still clean, idle and marked when the reaper gets to it.
    pub fn queue(&self, owner: Weak<dyn MappingOwner>, mapping_id: u64, folio: Arc<Folio>) {
        // The mark may be gone already (a cached access raced the caller):
        // the reaper looks again.
        let bytes = folio.size_bytes() as u64;
        // Folio indexes are multiples of the folio's size: mixed by the
        // multiply, whose high bits pick the shard.
        let key = mapping_id.rotate_left(32) ^ (folio.index >> folio.order);
        let shard = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % SHARDS;
        // Counted before it is visible, so the reaper never takes more
        // than was counted.
        let before = self.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        locks::lock(&self.shards[shard]).push(Queued { owner, folio, held_since: None });
        if before + bytes >= BATCH_BYTES && !self.wake_pending.swap(true, Ordering::AcqRel) {
            locks::lock(&self.wake).wanted = true;
            self.cond.notify_one();
        } else if before == 0 {
            // The reaper sleeps long while nothing is queued: have it
            // start its tick.
            let _g = locks::lock(&self.wake);
            self.cond.notify_one();
        }
    }

    /// Bytes of folios queued and not yet looked at.
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes.load(Ordering::Acquire)
    }

    /// Frees what is queued now, on the caller's thread.
    #[cfg(test)]
    pub fn reap_now(&self) -> u64 {
        self.reap_batch()
    }

    /// Stops the reaper after a last batch (the cache is closing: what is
    /// queued later goes with its inode).
    pub fn stop(&self) {
        {
            let mut wake = locks::lock(&self.wake);
            wake.stop = true;
            self.cond.notify_one();
        }
        if let Some(handle) = locks::lock(&self.thread).take() {
            let _ = handle.join();
        }
        self.reap_batch();
    }

    fn run(self: Arc<Self>) {
        loop {
            let mut wake = locks::lock(&self.wake);
            loop {
                if wake.stop {
                    return;
                }
                if wake.wanted {
                    wake.wanted = false;
                    break;
                }
                // Something queued: reap within a tick. Nothing: sleep
                // until the first folio comes (its producer notifies).
                let timeout = if self.queued_bytes() > 0 { TICK } else { Duration::from_secs(1) };
                let (guard, result) =
                    self.cond.wait_timeout(wake, timeout).unwrap_or_else(std::sync::PoisonError::into_inner);
                wake = guard;
                if result.timed_out() && self.queued_bytes() > 0 {
                    break;
                }
            }
            drop(wake);
            self.wake_pending.store(false, Ordering::Release);
            self.reap_batch();
            if let Some(us) = crate::io::thread_cpu_us() {
                self.counters.dropbehind_cpu_us.store(us, Ordering::Relaxed);
            }
        }
    }

    /// Takes every shard's queue and frees what may be freed; returns the
    /// bytes freed.
    fn reap_batch(&self) -> u64 {
        let mut batch: Vec<Queued> = Vec::new();
        for shard in self.shards.iter() {
            let mut q = locks::lock(shard);
            if batch.is_empty() {
                std::mem::swap(&mut batch, &mut q);
            } else {
                batch.append(&mut q);
            }
        }
        if batch.is_empty() {
            return 0;
        }
        let taken_bytes: u64 = batch.iter().map(|q| q.folio.size_bytes() as u64).sum();
        let before = self.queued_bytes.fetch_sub(taken_bytes, Ordering::AcqRel);
        debug_assert!(before >= taken_bytes, "queued bytes underflow");
        // One entry per folio: a folio queued twice (made drop-behind
        // again, or retried and queued anew) would count the other entry's
        // reference as a holder's, and each would wait for the other to
        // expire. The newest look (not yet found held) is kept.
        batch.sort_unstable_by_key(|q| (Arc::as_ptr(&q.folio) as usize, q.held_since.is_some()));
        batch.dedup_by(|later, kept| Arc::ptr_eq(&later.folio, &kept.folio));
        let bulk = BulkFree::begin();
        let mut freed_bytes = 0u64;
        let mut retry = Vec::new();
        for mut q in batch {
            if q.folio.dirty_mark.load(Ordering::Acquire) == DirtyMark::REMOVED
                || !q.folio.dropbehind.load(Ordering::Acquire)
            {
                continue;
            }
            let Some(owner) = q.owner.upgrade() else { continue };
            // A folio that went clean may still sit in the dirty index until
            // the inode's next writeback pass: the cache's own reference too.
            let cache_refs = CACHE_REFS + usize::from(owner.mapping().dirty_index_holds(&q.folio));
            if Arc::strong_count(&q.folio) > cache_refs + 1 {
                // Someone found it (a reader about to copy, a writer about
                // to dirty it): not now.
                let since = *q.held_since.get_or_insert_with(Instant::now);
                if since.elapsed() < HELD_FOR_MAX {
                    retry.push(q);
                }
                continue;
            }
            if let Some(buf) = owner.mapping().try_remove_clean_dropbehind(&q.folio) {
                self.memory.folio_removed(&q.folio, buf);
                // Counted as the folio leaves its mapping, not after the
                // batch: whoever sees it gone (a residency look) then
                // finds it counted, give or take this one step.
                let bytes = q.folio.size_bytes() as u64;
                Counters::add(&self.counters.dropbehind_freed_bytes, bytes);
                freed_bytes += bytes;
            }
        }
        // The buffers freed wait for lock-free readers that may still be
        // copying from them; those that need not wait go back now.
        crate::base::epoch::reclaim();
        drop(bulk);
        if !retry.is_empty() {
            let bytes: u64 = retry.iter().map(|q| q.folio.size_bytes() as u64).sum();
            self.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
            locks::lock(&self.shards[0]).append(&mut retry);
        }
        freed_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::folio::DirtyMark;
    use crate::mapping::folio::FolioStart;
    use crate::mapping::Mapping;
    use crate::policy::dirty::{CacheDirty, Progress};
    use crate::policy::memory::{BufUse, WhenFull};

    fn setup() -> (Arc<DropBehind>, Arc<Mapping>, Arc<Memory>, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let dirty = CacheDirty::new(counters.clone(), Arc::new(Progress::default()));
        let memory = Arc::new(Memory::new(64 << 20, dirty));
        let db = DropBehind::start(memory.clone(), counters.clone()).unwrap();
        (db, Arc::new(Mapping::new(7)), memory, counters)
    }

    /// A clean, uptodate 16 KiB folio at `index`, cached and counted.
    fn cached_folio(mapping: &Arc<Mapping>, memory: &Memory, index: u64, dropbehind: bool) -> Arc<Folio> {
        let buf = memory.reserve(16 << 10, BufUse::Read, WhenFull::Fail).unwrap();
        let folio = Arc::new(Folio::with_buf(index, 2, FolioStart::Idle, buf));
        folio.lock().set_uptodate(4, 0, 4);
        mapping.insert(&mut mapping.write(), folio.clone());
        memory.folio_added(mapping, &folio);
        folio.dropbehind.store(dropbehind, Ordering::Relaxed);
        folio
    }

    /// A queued folio that is clean, idle and still marked is freed and
    /// counted; one a cached access unmarked stays.
    #[test]
    fn marked_idle_folios_are_freed_unmarked_ones_stay() {
        let (db, mapping, memory, counters) = setup();
        let owner: Weak<dyn MappingOwner> = Arc::downgrade(&mapping) as Weak<dyn MappingOwner>;
        let freed = cached_folio(&mapping, &memory, 0, true);
        let kept = cached_folio(&mapping, &memory, 4, true);
        db.queue(owner.clone(), mapping.id, freed.clone());
        db.queue(owner, mapping.id, kept.clone());
        kept.dropbehind.store(false, Ordering::Relaxed);
        let (freed_id, kept_id) = (freed.index, kept.index);
        drop((freed, kept));
        assert_eq!(db.reap_now(), 16 << 10);
        assert_eq!(counters.dropbehind_freed_bytes.load(Ordering::Relaxed), 16 << 10);
        assert!(mapping.find(freed_id).is_none(), "freed");
        assert!(mapping.find(kept_id).is_some(), "a cached access cleared the mark");
        assert_eq!(memory.cached_bytes(), 16 << 10);
        db.stop();
    }

    /// A folio someone holds (a reader that found it) is not freed under
    /// it; once let go, a later batch frees it.
    #[test]
    fn a_held_folio_is_not_freed_under_its_holder() {
        let (db, mapping, memory, _counters) = setup();
        let owner: Weak<dyn MappingOwner> = Arc::downgrade(&mapping) as Weak<dyn MappingOwner>;
        let folio = cached_folio(&mapping, &memory, 0, true);
        let reader = folio.clone();
        db.queue(owner, mapping.id, folio);
        assert_eq!(db.reap_now(), 0, "held by the reader");
        assert_ne!(reader.dirty_mark.load(Ordering::Acquire), DirtyMark::REMOVED);
        assert!(db.queued_bytes() > 0, "queued again for a later batch");
        drop(reader);
        assert_eq!(db.reap_now(), 16 << 10, "freed once let go");
        db.stop();
    }

    /// The reaper thread frees a batch on its own (on its tick), off the
    /// queuing thread.
    #[test]
    fn the_reaper_frees_on_its_own() {
        let (db, mapping, memory, counters) = setup();
        let owner: Weak<dyn MappingOwner> = Arc::downgrade(&mapping) as Weak<dyn MappingOwner>;
        for i in 0..8 {
            let f = cached_folio(&mapping, &memory, i * 4, true);
            db.queue(owner.clone(), mapping.id, f);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while counters.dropbehind_freed_bytes.load(Ordering::Acquire) < 8 * (16 << 10) {
            assert!(std::time::Instant::now() < deadline, "the reaper did not run");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(memory.cached_bytes(), 0);
        db.stop();
    }
}
