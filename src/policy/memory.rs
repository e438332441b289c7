//! Folio memory accounting against `capacity`: reserving a buffer for a new
//! folio (from the pool, fresh, or after eviction or waiting for writeback),
//! giving buffers back, and evicting back under capacity after a copy that
//! could not wait.
//!
//! Invariant: `cached_bytes` (folio buffers in mappings, buffers
//! still held by in-flight writeback, and reservations being turned into
//! folios) plus the pool's bytes never exceeds `capacity` after an
//! operation ends. A folio is allocated only through
//! [`Memory::reserve`]; the only excursions over capacity are
//! copies of buffers under writeback made under a folio lock
//! ([`Memory::account_shared_copy`]), which [`Memory::evict_excess`] takes
//! back once the operation holds no lock.
//!
//! Owns the buffer pool and the eviction queues; folios and mappings are
//! owned by their inodes.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::epoch;
use crate::buf::{AlignedBuf, BufPool};
use crate::guardian::Guardian;
use crate::io::BLOCK_SIZE;
use crate::mapping::folio::{metadata_bytes_for, DirtyMark, Folio, FolioState};
use crate::mapping::MappingOwner;
use crate::policy::dirty::{CacheDirty, Work};
use crate::policy::evict::Evictor;
use crate::stats::Counters;

/// How long an allocation may wait for writeback to make memory clean before
/// it fails with an out-of-memory error (only a stuck device gets here).
const RESERVE_TIMEOUT_MS: u64 = 30_000;

/// An eviction for a new folio frees up to this many folios of its size...
const EVICT_AHEAD_FOLIOS: u64 = 16;
/// ... but no more than this share of the capacity (1/256: 1 MiB of 256M).
const EVICT_AHEAD_CAPACITY_SHARE: u64 = 256;

/// How long a wait for folio memory goes on while writeback keeps failing
/// (the only way dirty folios become evictable).
const WRITEBACK_FAILING_GIVE_UP: Duration = Duration::from_secs(1);

/// What a reserved buffer is for: data read from the store, or data a
/// write brings (kept in guarded memory when the cache has it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufUse {
    Read,
    Written,
}

/// What a reservation does when the cache is full and nothing clean is
/// left to evict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// Kick the flushers and wait for writeback to make folios clean.
    Wait,
    /// Fail with `ENOMEM` at once: the work is optional (asynchronous
    /// readahead, or a fill that already holds folios of its own).
    Fail,
}

pub struct Memory {
    capacity_bytes: u64,
    /// Where written data lives so that it outlives the process (see
    /// [`crate::guardian`]); `None` with `guardian=off`.
    pub guardian: Option<Arc<Guardian>>,
    /// Folio buffers in mappings, buffers still held by in-flight
    /// writeback, and reservations being turned into folios, in bytes.
    /// Kept here, next to `capacity_bytes`, because every file operation
    /// reads it (see [`Memory::evict_excess`]).
    pub cached_bytes: AtomicU64,
    /// Shared with the releases deferred until no reader can see a
    /// buffer (see [`Memory::release_folio_buf`]).
    pub pool: Arc<BufPool>,
    pub evictor: Evictor,
    counters: Arc<Counters>,
    /// For waiting on writeback progress, kicking reclaim, and knowing the
    /// cache closed.
    dirty: Arc<CacheDirty>,
    /// [`RESERVE_TIMEOUT_MS`]; tests shorten it.
    reserve_timeout_ms: AtomicU64,
}

impl Memory {
    #[cfg(test)]
    pub fn new(capacity_bytes: u64, dirty: Arc<CacheDirty>) -> Memory {
        Memory::with_guardian(capacity_bytes, dirty, None)
    }

    /// As `Memory::new` (in tests), written data kept in `guardian`'s guarded
    /// memory.
    pub fn with_guardian(capacity_bytes: u64, dirty: Arc<CacheDirty>, guardian: Option<Arc<Guardian>>) -> Memory {
        Memory {
            guardian,
            capacity_bytes,
            cached_bytes: AtomicU64::new(0),
            pool: Arc::default(),
            evictor: Evictor::default(),
            counters: dirty.counters.clone(),
            dirty,
            reserve_timeout_ms: AtomicU64::new(RESERVE_TIMEOUT_MS),
        }
    }

    pub fn cached_bytes(&self) -> u64 {
        self.cached_bytes.load(Ordering::Acquire)
    }

    /// Folio buffers plus pooled buffers, in bytes.
    pub fn used_bytes(&self) -> u64 {
        self.cached_bytes.load(Ordering::Acquire) + self.pool.pooled_bytes()
    }

    #[cfg(test)]
    pub fn set_reserve_timeout(&self, timeout: Duration) {
        self.reserve_timeout_ms.store(timeout.as_millis() as u64, Ordering::Relaxed);
    }

    /// A fresh buffer of `len` bytes for `usage`.
    fn fresh_buf(&self, len: usize, usage: BufUse) -> io::Result<AlignedBuf> {
        match usage {
            BufUse::Written => AlignedBuf::try_written(self.guardian.as_ref().map(|g| g.arena()), len),
            BufUse::Read => AlignedBuf::try_zeroed(len),
        }
    }

    /// A buffer of `len` bytes for a new folio, accounted in
    /// `cached_bytes`: a pooled one if there is one of that size, else a new
    /// one if `cached + pooled + len <= capacity`, else after shrinking the
    /// pool, evicting clean folios, or waiting for writeback to make some
    /// clean. For a folio a write creates or copies ([`BufUse::Written`]),
    /// a fresh buffer comes from guarded memory when the cache has it (its
    /// contents stale, as a pooled one's).
    ///
    /// With [`WhenFull::Fail`] (asynchronous readahead, which is optional
    /// work) it fails with `ENOMEM` at once instead of waiting for
    /// writeback.
    pub fn reserve(&self, len: usize, usage: BufUse, when_full: WhenFull) -> io::Result<AlignedBuf> {
        debug_assert!(len.is_power_of_two() && len >= BLOCK_SIZE, "a folio's buffer, not {len} bytes");
        let capacity = self.capacity_bytes;
        let bytes = len as u64;
        let started = Instant::now();
        let errors_before = self.dirty.counters.writeback_errors.load(Ordering::Acquire);
        loop {
            if let Some(buf) = self.pool.take(len) {
                self.cached_bytes.fetch_add(bytes, Ordering::AcqRel);
                debug_assert_eq!(buf.len(), len);
                return Ok(buf);
            }
            let cur = self.cached_bytes.load(Ordering::Acquire);
            let pooled = self.pool.pooled_bytes();
            if cur + pooled + bytes <= capacity {
                if self.cached_bytes.compare_exchange(cur, cur + bytes, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    // No mapping and no heap for it: ENOMEM to the caller,
                    // and the reservation given back.
                    return self.fresh_buf(len, usage).inspect_err(|_| {
                        self.cached_bytes.fetch_sub(bytes, Ordering::AcqRel);
                    });
                }
                continue;
            }
            // Buffers given back wait until no lock-free reader can be
            // copying from them; those that can go now may land in the
            // pool.
            if epoch::has_deferred() && epoch::reclaim() > 0 {
                continue;
            }
            if pooled > 0 && self.pool.shrink(cur + pooled + bytes - capacity) > 0 {
                continue;
            }
            if self.evict(self.eviction_target(cur, bytes)) > 0 {
                continue;
            }
            // Nothing clean to evict: everything is dirty, under writeback or
            // being filled. Make the flushers write and wait for them.
            if when_full == WhenFull::Fail {
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            self.dirty.kick_all(Work::Reclaim);
            self.dirty.progress.wait(Duration::from_millis(5));
            // The cache is closing: its close waits for this operation, and
            // writeback will not free anything for it any more. EBADF, as
            // for any operation on a closed cache.
            if self.dirty.is_closed() {
                return Err(io::Error::from_raw_os_error(libc::EBADF));
            }
            // Writeback keeps failing, so the dirty folios cannot become
            // clean: give up after a second with the failure's errno, as a
            // writer held at the dirty limit does.
            let failing = self.dirty.counters.writeback_errors.load(Ordering::Acquire) > errors_before;
            if failing && started.elapsed() > WRITEBACK_FAILING_GIVE_UP {
                let errno = self.dirty.counters.last_writeback_errno.load(Ordering::Acquire);
                return Err(io::Error::from_raw_os_error(if errno > 0 { errno } else { libc::EIO }));
            }
            let timeout = Duration::from_millis(self.reserve_timeout_ms.load(Ordering::Relaxed));
            if started.elapsed() > timeout {
                return Err(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "wbcache: no folio memory could be freed within {:.1} s (writeback stuck?)",
                        timeout.as_secs_f64()
                    ),
                ));
            }
        }
    }

    /// What to evict for a new folio of `bytes` with `cached_bytes` at
    /// `cur`: what is over the capacity, and a few folios' worth ahead (at
    /// most a small share of the capacity), whose buffers wait in the pool
    /// for the next misses, so one reclaim barrier (see `evict`) serves
    /// several of them.
    fn eviction_target(&self, cur: u64, bytes: u64) -> u64 {
        let capacity = self.capacity_bytes;
        let ahead = (bytes * EVICT_AHEAD_FOLIOS).min(capacity / EVICT_AHEAD_CAPACITY_SHARE).max(bytes);
        (cur + bytes).saturating_sub(capacity).max(ahead)
    }

    /// Evicts about `want_bytes` of clean folios; returns the bytes freed.
    /// Their buffers reach the pool at once unless a lock-free reader is
    /// still copying from one (see [`Memory::release_folio_buf`]).
    fn evict(&self, want_bytes: u64) -> u64 {
        let freed = self.evictor.evict(&self.counters, want_bytes, &|buf, len| self.release_folio_buf(Some(buf), len));
        epoch::reclaim();
        freed
    }

    /// Evicts until folio memory is back under `capacity`. A copy of a
    /// buffer under writeback made under a folio lock (a fill or a truncate
    /// rewriting part of it) cannot wait for memory and is counted at once,
    /// so it can go over; the operation that made it calls this once it
    /// holds no lock, so no operation leaves the cache over capacity.
    /// Also runs the releases deferred meanwhile that no reader can still
    /// need, once enough wait (operations end here; each run is a
    /// process-wide barrier, not worth one per write).
    pub fn evict_excess(&self) {
        epoch::reclaim_if_due();
        let capacity = self.capacity_bytes;
        let used = self.used_bytes();
        if used <= capacity {
            return;
        }
        let over = used - capacity;
        let from_pool = self.pool.shrink(over);
        if from_pool < over {
            // Evicted buffers may land in the pool: empty it by as much.
            let evicted = self.evict(over - from_pool);
            self.pool.shrink(evicted);
        }
    }

    /// Gives back the buffer of a folio that left the cache, or that a
    /// folio replaced: it stops counting in `cached_bytes` now, and joins
    /// the pool (counted there at once, so `cached_bytes + pooled` stays
    /// within the capacity) or is freed once no lock-free reader can still
    /// be copying from it ([`epoch::defer_bytes`]; a later
    /// [`epoch::reclaim`] runs it). A buffer the pool has no room for is
    /// memory beyond the capacity until then: at most about what
    /// [`epoch::reclaim_if_due`] lets wait.
    pub fn release_folio_buf(&self, buf: Option<AlignedBuf>, len: usize) {
        if let Some(buf) = buf {
            debug_assert_eq!(buf.len(), len);
            // A closed cache allocates nothing more: pooling would only
            // keep the memory until the last handle goes.
            let pooled = !self.dirty.is_closed() && self.pool.count_pending(len, self.capacity_bytes / 4);
            let (pool, dirty) = (self.pool.clone(), self.dirty.clone());
            epoch::defer_bytes(len, move || match pooled {
                true if !dirty.is_closed() => pool.settle(buf),
                true => {
                    pool.uncount_pending(len);
                    drop(buf);
                }
                false => drop(buf),
            });
        }
        // After the pool counted it: the two together never undercount.
        self.uncount(len);
    }

    /// Gives back a reserved buffer no folio ever held (no reader has seen
    /// it): pooled for reuse at once when possible.
    pub fn release_reserved_buf(&self, buf: AlignedBuf, len: usize) {
        debug_assert_eq!(buf.len(), len);
        if !self.dirty.is_closed() {
            self.pool.put(buf, self.capacity_bytes / 4);
        }
        self.uncount(len);
    }

    fn uncount(&self, len: usize) {
        let before = self.cached_bytes.fetch_sub(len as u64, Ordering::AcqRel);
        debug_assert!(before >= len as u64, "cached bytes underflow");
        debug_assert!(len.is_power_of_two() && len >= BLOCK_SIZE, "a folio's buffer, not {len} bytes");
        self.dirty.progress.made();
    }

    /// A new folio entered a mapping: its metadata is counted and eviction
    /// tracks it.
    pub fn folio_added<O: MappingOwner + 'static>(&self, owner: &Arc<O>, folio: &Arc<Folio>) {
        Counters::add(&self.counters.metadata_bytes, metadata_bytes_for(folio.nr_blocks()) as u64);
        self.evictor.insert(owner, folio);
    }

    /// A folio left its mapping now (an eviction queue may still hold the
    /// `Arc`). Without `buf`, in-flight writeback still holds the buffer:
    /// it stays counted and that writeback's completion gives it back.
    pub fn folio_removed(&self, folio: &Folio, buf: Option<AlignedBuf>) {
        debug_assert_eq!(folio.dirty_mark.load(Ordering::Acquire), DirtyMark::REMOVED, "the folio left its mapping");
        debug_assert!(buf.as_ref().is_none_or(|b| b.len() == folio.size_bytes()), "the folio's own buffer");
        self.evictor.note_removed();
        Counters::sub(&self.counters.metadata_bytes, metadata_bytes_for(folio.nr_blocks()) as u64);
        if let Some(buf) = buf {
            self.release_folio_buf(Some(buf), folio.size_bytes());
        }
    }

    /// Before `Arc::make_mut` on a buffer writeback may share: the copy is
    /// counted at once (these paths hold the folio lock and cannot wait for
    /// memory; the old buffer is given back when its writeback completes).
    pub fn account_shared_copy(&self, st: &FolioState) {
        debug_assert!(!st.removed && !st.read_in_flight, "only a cached, filled folio's buffer is copied");
        if !st.buf().is_empty() && Arc::strong_count(st.buf()) > 1 {
            Counters::add(&self.counters.cow_copies, 1);
            self.cached_bytes.fetch_add(st.buf().len() as u64, Ordering::AcqRel);
        }
    }
}
