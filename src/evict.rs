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

use crate::buf::AlignedBuf;
use crate::folio::{metadata_bytes_for, DirtyMark, Folio};
use crate::locks;
use crate::mapping::Mapping;
use crate::stats::Counters;

struct Entry {
    folio: Arc<Folio>,
    mapping: Weak<Mapping>,
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
        let alive = |e: &Entry| {
            e.mapping.strong_count() > 0 && e.folio.dirty_mark.load(Ordering::Acquire) != DirtyMark::REMOVED
        };
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
    pub fn insert(&self, mapping: &Arc<Mapping>, folio: &Arc<Folio>) {
        let key = ghost_key(mapping.id, folio.index);
        let entry = Entry { folio: folio.clone(), mapping: Arc::downgrade(mapping), ghost_key: key };
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
            let removed = entry.mapping.upgrade().and_then(|mapping| mapping.try_remove_clean(&entry.folio));
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
            } else if entry.mapping.strong_count() > 0 && !entry.folio.lock().removed {
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
            if entry.mapping.strong_count() == 0 {
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
