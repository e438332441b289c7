//! An inode: wbcache's state for one backing store, shared by every open
//! handle of it. It owns its [`Mapping`] (folio index and dirty index), the
//! logical size, the store and its length gate, the error sequence and the
//! writeback tickets, and implements the data paths on them: read, write,
//! fill and `set_len`. The writeback layer's methods on an inode (passes,
//! completion, fsync) live in `writeback::pass` and `writeback::sync`; an
//! inode reaches that layer only through [`DirtyInodeList`].
//!
//! Lock order (outer first): `append_lock` (an `O_APPEND` handle's whole
//! write) → `size_lock` (size changes only) → the store's length gate
//! (`store_len_gate`: its I/O side is held by a writeback pass from taking
//! blocks until its writes complete; its resize side across a length
//! change) → the mapping's index → folio state → the mapping's dirty index.
//! Held briefly, beside that chain: `tickets` (alone or under the gate,
//! never with a folio locked), and `store_writes_end` → `store` (the
//! store's handle, a leaf). No lock is held across a call into eviction or
//! throttling, and only a folio's own lock is held across the
//! (single-block or folio-fill) I/O that makes that folio uptodate.
//!
//! Invariants:
//! - `on_disk_len_max` is an upper bound on the backing store's length, so a
//!   block at or beyond it reads as zeros without I/O.
//! - Writeback tickets are handed out before dirty bits are taken, so a
//!   waiter that samples the newest ticket after its own pass has covered
//!   every writeback that took a block dirty at its call.
//! - Every byte made dirty here is accounted to the domain ([`DomainDirty`])
//!   under the folio lock that set its bit, and the inode is on its
//!   domain's dirty list before the write returns.

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLockWriteGuard};

use crate::buf::{AlignedBuf, BulkFree};
use crate::config::Config;
use crate::dirty::{DirtyRoom, DomainDirty};
use crate::dropbehind::DropBehind;
use crate::errseq::ErrSeq;
use crate::folio::{DirtyMark, Folio, FolioState};
use crate::io::{run_batch, BackingInfo, BackingStore, IoOp, IoPriority, BLOCK_SIZE};
use crate::locks;
use crate::mapping::{choose_order, FolioIndex, Mapping, MappingOwner};
use crate::memory::Memory;
use crate::stats::Counters;
use crate::throttle;
use crate::userbuf::{ReadTarget, WriteSource};

const BLOCK: u64 = BLOCK_SIZE as u64;

/// Writeback I/O against changes of the backing store's length: any number
/// of writeback I/Os, or one length change with none in flight. Unlike a
/// `RwLock` guard, an I/O's hold can span an asynchronous write's lifetime
/// (taken at submission, given back at completion). A pending length change
/// holds off new I/O, so it cannot starve.
#[derive(Default)]
pub struct StoreLenGate {
    state: Mutex<GateState>,
    changed: locks::WaitQueue,
}

#[derive(Default)]
struct GateState {
    io_in_flight: usize,
    resizing: bool,
}

impl StoreLenGate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        locks::lock(&self.state)
    }

    pub fn begin_io(&self) {
        let mut st = self.lock();
        while st.resizing {
            st = self.changed.wait(st);
        }
        st.io_in_flight += 1;
        debug_assert!(!st.resizing && st.io_in_flight > 0, "I/O never overlaps a length change");
    }

    /// As `begin_io`, but gives up instead of waiting for a length change.
    pub fn try_begin_io(&self) -> bool {
        let mut st = self.lock();
        if st.resizing {
            return false;
        }
        st.io_in_flight += 1;
        debug_assert!(!st.resizing && st.io_in_flight > 0, "I/O never overlaps a length change");
        true
    }

    pub fn end_io(&self) {
        let mut st = self.lock();
        assert!(st.io_in_flight > 0, "an I/O ends once");
        st.io_in_flight -= 1;
        if st.io_in_flight == 0 {
            self.changed.notify_all();
        }
    }

    /// Exclusive access if it can be had at once: no length change under
    /// way and no I/O in flight.
    pub fn try_resize(&self) -> Option<ResizeGuard<'_>> {
        let mut st = self.lock();
        if st.resizing || st.io_in_flight > 0 {
            return None;
        }
        st.resizing = true;
        Some(ResizeGuard(self))
    }

    /// Waits for exclusive access: no other length change, no I/O.
    pub fn resize(&self) -> ResizeGuard<'_> {
        let mut st = self.lock();
        while st.resizing {
            st = self.changed.wait(st);
        }
        st.resizing = true;
        while st.io_in_flight > 0 {
            st = self.changed.wait(st);
        }
        debug_assert!(st.resizing && st.io_in_flight == 0, "a length change excludes I/O");
        ResizeGuard(self)
    }
}

pub struct ResizeGuard<'a>(&'a StoreLenGate);

impl Drop for ResizeGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        assert!(st.resizing && st.io_in_flight == 0, "a length change excludes I/O");
        st.resizing = false;
        drop(st);
        self.0.changed.notify_all();
    }
}

/// In-flight writeback tickets of an inode.
#[derive(Default)]
pub struct Tickets {
    pub last_issued: u64,
    pub in_flight: BTreeSet<u64>,
}

/// The writeback layer's side of an inode, which sits above this module:
/// the domain's lists of dirty inodes (one per writeback worker), which an
/// inode joins when it goes from clean to dirty. Implemented by
/// `writeback::domain::Domain`.
pub trait DirtyInodeList: Send + Sync {
    /// Queues `inode` with the worker that writes block `at` (just
    /// dirtied), or, with `None`, with every worker that has dirty data of
    /// it (at least one). Returns those workers, as a bit mask.
    fn queue_dirty_inode(&self, inode: &Arc<Inode>, at: Option<u64>) -> u64;
}

/// What an inode needs from the cache around it, and nothing more.
pub struct InodeHandles {
    pub config: Arc<Config>,
    pub counters: Arc<Counters>,
    pub memory: Arc<Memory>,
    /// Where drop-behind folios go to be freed once clean and idle.
    pub dropbehind: Arc<DropBehind>,
    pub dirty: Arc<DomainDirty>,
    pub dirty_list: Arc<dyn DirtyInodeList>,
}

/// Where one folio's part of a write lies (see [`Inode::write_at`]).
struct WritePart {
    /// Bytes of the write already copied: the part starts at this offset
    /// of the source.
    done: usize,
    /// Bytes of the write left.
    len: usize,
    /// File offset of the part.
    pos: u64,
    /// Block after the write's last byte: a new folio ends at or before it.
    end_block: u64,
    dontcache: bool,
}

/// The longest part of a read copied under the mapping's read lock (see
/// [`Inode::copy_cached_part`]): a few microseconds of copying at most.
const HIT_COPY_UNDER_INDEX_MAX: usize = 64 << 10;

/// The sync-waiter id of a reader waiting for a fill (no inode's id:
/// those count up from 1).
const READER_SYNC_WAITER_ID: u64 = u64::MAX;

pub struct Inode {
    /// Unique within the cache (for eviction ghosts and debugging).
    pub id: u64,
    pub info: BackingInfo,
    store: Mutex<Arc<dyn BackingStore>>,
    store_writable: AtomicBool,
    pub config: Arc<Config>,
    pub counters: Arc<Counters>,
    pub memory: Arc<Memory>,
    /// Where drop-behind folios go to be freed once clean and idle.
    pub dropbehind: Arc<DropBehind>,
    /// The domain's dirty accounting (and its flusher's work bits).
    pub dirty: Arc<DomainDirty>,
    /// The domain's dirty inode list, which this inode joins when it goes
    /// from clean to dirty.
    dirty_list: Arc<dyn DirtyInodeList>,
    pub mapping: Mapping,
    /// Logical file size in bytes.
    size: AtomicU64,
    pub on_disk_len_max: AtomicU64,
    /// Writeback wrote a tail block that reaches past the logical size
    /// (O_DIRECT writes whole blocks): the store may hold up to a block of
    /// zeros past the size, which [`Inode::fix_backing_size`] cuts. Only
    /// such padding of our own is ever cut: a store longer for any other
    /// reason (another program appended) is left alone.
    pub store_padded: AtomicBool,
    /// A length the store's file system is known to accept (writes up to it
    /// skip the check in [`Inode::room_to_grow`]).
    len_accepted: AtomicU64,
    /// The file system's largest file size, once a write reached past it
    /// (`u64::MAX` until then).
    len_limit: AtomicU64,
    /// Serializes size changes against each other and backing-size fixes.
    pub size_lock: Mutex<()>,
    /// Held by an append from finding the end to writing there (appends
    /// through the cache never interleave).
    pub append_lock: Mutex<()>,
    /// Writeback I/O holds it shared; changing the backing store's length
    /// holds it exclusively, so a truncation never races an in-flight write
    /// beyond the old length.
    pub store_len_gate: StoreLenGate,
    /// A lower bound on the backing store's length (files only): writeback
    /// past it grows the store first ([`Inode::grow_store_for_writeback`]).
    /// Lowered by every cut, under the store's length gate.
    pub store_len_min: AtomicU64,
    /// The furthest end of the writeback writes that may extend the store
    /// (past `store_len_min`) since the store was last cut; its lock is
    /// held by [`Inode::grow_store_for_writeback`] from its look at the
    /// size to its `set_len`, which never goes below it.
    pub store_writes_end: Mutex<u64>,
    /// Size changed since the last successful store sync: use fsync, not
    /// fdatasync.
    pub size_changed: AtomicBool,
    /// Writeback wrote data since the last successful store sync.
    pub written_since_sync: AtomicBool,
    pub errseq: ErrSeq,
    pub tickets: Mutex<Tickets>,
    pub tickets_done: locks::WaitQueue,
    /// The writeback workers whose dirty lists hold this inode (or which
    /// took it off to write it and have not put it back), a bit per worker.
    pub listed_workers: AtomicU64,
    /// The worker `rotor` routing bound this inode to (`u32::MAX`: none
    /// yet; bound once, for the inode's life).
    pub rotor_worker: AtomicU32,
    /// Open handles.
    pub handles: AtomicUsize,
    /// The file's last name was removed through the cache
    /// ([`crate::Cache::remove_file`]): the inode left the inode table, and
    /// when its last handle closes its data is discarded, not written.
    unlinked: AtomicBool,
    /// Where each worker's next cyclic writeback pass starts (block).
    pub writeback_cursors: Box<[AtomicU64]>,
}

impl Inode {
    pub fn new(id: u64, store: Arc<dyn BackingStore>, writable: bool, handles: InodeHandles) -> Inode {
        let InodeHandles { config, counters, memory, dropbehind, dirty, dirty_list } = handles;
        let info = store.info().clone();
        let len = info.len_at_open;
        let mapping = Mapping::with_regions(id, config.region_tracking(), Some(counters.clone()));
        let writeback_cursors = (0..config.writeback_workers).map(|_| AtomicU64::new(0)).collect();
        Inode {
            id,
            info,
            store: Mutex::new(store),
            store_writable: AtomicBool::new(writable),
            config,
            counters,
            memory,
            dropbehind,
            dirty,
            dirty_list,
            mapping,
            size: AtomicU64::new(len),
            on_disk_len_max: AtomicU64::new(len),
            store_padded: AtomicBool::new(false),
            // Whole blocks: the tail block of a file of `len` bytes may
            // itself reach past the file system's limit.
            len_accepted: AtomicU64::new(len / BLOCK * BLOCK),
            len_limit: AtomicU64::new(u64::MAX),
            size_lock: Mutex::new(()),
            append_lock: Mutex::new(()),
            store_len_gate: StoreLenGate::default(),
            store_len_min: AtomicU64::new(len),
            store_writes_end: Mutex::new(0),
            size_changed: AtomicBool::new(false),
            written_since_sync: AtomicBool::new(false),
            errseq: ErrSeq::default(),
            tickets: Mutex::new(Tickets::default()),
            tickets_done: locks::WaitQueue::default(),
            listed_workers: AtomicU64::new(0),
            rotor_worker: AtomicU32::new(u32::MAX),
            handles: AtomicUsize::new(0),
            unlinked: AtomicBool::new(false),
            writeback_cursors,
        }
    }

    pub fn store(&self) -> Arc<dyn BackingStore> {
        locks::lock(&self.store).clone()
    }

    /// Replaces a read-only store with a writable one opened by a later
    /// handle, so writeback can write.
    pub fn upgrade_store(&self, store: Arc<dyn BackingStore>) {
        if !self.store_writable.swap(true, Ordering::AcqRel) {
            *locks::lock(&self.store) = store;
        }
    }

    pub fn is_store_writable(&self) -> bool {
        self.store_writable.load(Ordering::Acquire)
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

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

    pub fn has_dirty(&self) -> bool {
        self.mapping.has_dirty()
    }

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
                    bits |= crate::folio::RESIDENT_CACHED;
                }
                if st.dirty.get(b) {
                    bits |= crate::folio::RESIDENT_DIRTY;
                }
                if st.writeback.get(b) {
                    bits |= crate::folio::RESIDENT_WRITEBACK;
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
    /// (nothing uptodate) and marked `read_in_flight` when `for_fill`.
    /// Returns the folio and whether it was created here.
    pub fn find_or_create(
        self: &Arc<Self>,
        block: u64,
        limit_block: u64,
        for_fill: bool,
        may_wait: bool,
    ) -> io::Result<(Arc<Folio>, bool)> {
        debug_assert!(limit_block > block);
        let max_order = (self.config.folio_max_bytes / BLOCK).trailing_zeros() as u8;
        loop {
            let (order, inserts_seen) = {
                let map = self.mapping.read();
                if let Some(f) = map.find(block) {
                    return Ok((f.clone(), false));
                }
                (choose_order(&map, block, limit_block, max_order), self.mapping.inserts())
            };
            let len = BLOCK_SIZE << order;
            // Get the memory (may evict) before taking the mapping lock:
            // eviction takes mapping locks itself.
            let buf = self.memory.reserve_folio_buf(len, may_wait)?;
            let mut map = self.mapping.write();
            // Only an insertion can cover `block` or crowd the chosen folio
            // (removals only make room): without one, the choice stands.
            if self.mapping.inserts() != inserts_seen {
                if let Some(f) = map.find(block) {
                    let f = f.clone();
                    drop(map);
                    self.memory.release_folio_buf(Some(buf), len);
                    return Ok((f, false));
                }
                // The mapping gained a neighbour meanwhile: start over with
                // a smaller folio.
                if choose_order(&map, block, limit_block, order) != order {
                    drop(map);
                    self.memory.release_folio_buf(Some(buf), len);
                    continue;
                }
            }
            debug_assert!(map.find(block).is_none() && choose_order(&map, block, limit_block, order) == order);
            let folio = Arc::new(Folio::with_buf(block, order, for_fill, buf));
            self.mapping.insert(&mut map, folio.clone());
            // Counted before the index's lock goes: a removal racing in
            // (advice to drop it, a truncate) finds the folio only then, and
            // eviction's count of live folios never goes below zero.
            self.memory.folio_added(self, &folio);
            debug_assert!(map.find(block).is_some_and(|f| Arc::ptr_eq(f, &folio)), "the new folio is cached");
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
    pub fn queue_dropbehind(self: &Arc<Self>, folio: Arc<Folio>) {
        let owner = Arc::downgrade(self) as std::sync::Weak<dyn MappingOwner>;
        self.dropbehind.queue(owner, self.id, folio);
    }

    /// Bookkeeping for a folio just taken out of the mapping (folio locked).
    pub(crate) fn release_removed(&self, folio: &Folio, st: &mut FolioState) {
        debug_assert!(folio.state.try_lock().is_err(), "the folio's lock is held");
        let buf = Mapping::mark_removed(folio, st);
        self.memory.folio_removed(folio, buf);
        debug_assert!(st.removed && st.nr_dirty == 0 && st.buf.is_empty(), "a removed folio is clean, its buffer gone");
    }

    /// Makes blocks `[start, end)` of a locked folio uptodate: blocks at or
    /// beyond the on-disk length become zeros, the rest are read (one I/O
    /// per contiguous run). Only the named blocks are read, never the folio.
    fn fill_blocks(&self, folio: &Folio, st: &mut FolioState, start: usize, end: usize) -> io::Result<()> {
        debug_assert!(start < end && end <= folio.nr_blocks(), "blocks {start}..{end} of the folio");
        debug_assert!(!st.removed && !st.read_in_flight, "a cached folio no fill is reading");
        let disk_blocks = self.on_disk_len_max.load(Ordering::Acquire).div_ceil(BLOCK);
        let mut b = start;
        while b < end {
            if st.all_uptodate || st.uptodate.get(b) {
                b += 1;
                continue;
            }
            let mut e = b + 1;
            while e < end && !st.uptodate.get(e) {
                e += 1;
            }
            let abs = folio.index + b as u64;
            let read_end = (folio.index + e as u64).min(disk_blocks.max(abs));
            self.memory.account_shared_copy(st);
            let buf = Arc::make_mut(&mut st.buf);
            let bytes = &mut buf[b * BLOCK_SIZE..e * BLOCK_SIZE];
            bytes.fill(0);
            if read_end > abs {
                let n = ((read_end - abs) * BLOCK) as usize;
                let store = self.store();
                crate::io::read_full(&*store, &mut bytes[..n], abs * BLOCK, IoPriority::Sync)?;
                // A short read is a hole or end of file: the zeros stand.
                // Bytes past `on_disk_len_max` (a truncate not yet applied to
                // the store) are zeros whatever the store still holds.
                let disk_len = self.on_disk_len_max.load(Ordering::Acquire);
                let valid = disk_len.saturating_sub(abs * BLOCK).min(n as u64) as usize;
                bytes[valid..].fill(0);
            }
            st.set_uptodate(folio.nr_blocks(), b, e);
            b = e;
        }
        debug_assert!(st.is_uptodate(start, end), "blocks {start}..{end} filled");
        Ok(())
    }

    /// Makes blocks `[start, end)` cached and uptodate, creating and
    /// reading the folios that are missing; `dropbehind` marks the folios it creates for
    /// dropping after use (uncached reads); `batch_bytes` bounds the reads
    /// submitted together; `reader_pos` (readahead's reader's position, in
    /// bytes) skips the blocks the reader has already passed.
    pub fn fill_range_marked(
        self: &Arc<Self>,
        start: u64,
        end: u64,
        priority: IoPriority,
        dropbehind: bool,
        batch_bytes: u64,
        reader_pos: Option<&AtomicU64>,
    ) -> io::Result<()> {
        let mut created = Vec::new();
        let mut b = start;
        while b < end {
            // A window the reader overtook (read and, uncached, dropped
            // already) is not filled again: nobody would read it, and its
            // folios would stay cached, not dropped behind.
            if let Some(pos) = reader_pos {
                let passed = pos.load(Ordering::Acquire).div_ceil(BLOCK);
                if b < passed {
                    b = passed;
                    continue;
                }
            }
            // Once some placeholders exist, fill those rather than wait for
            // memory they themselves may be holding.
            let may_wait = priority == IoPriority::Sync && created.is_empty();
            match self.find_or_create(b, end, true, may_wait) {
                Ok((f, new)) => {
                    b = f.end_index();
                    if new {
                        if dropbehind {
                            f.dropbehind.store(true, Ordering::Relaxed);
                        }
                        created.push(f);
                    }
                }
                Err(e) => {
                    if created.is_empty() {
                        return Err(e);
                    }
                    break;
                }
            }
        }
        // All placeholders exist before any I/O, so a fast reader waits for
        // this fill instead of overtaking it. The I/O then goes in batches
        // of about `batch_bytes`, each readable as soon as it completes.
        // Each batch's folios are let go once published: a reader done
        // with one of them may hand it to drop-behind, which frees only
        // folios nobody holds.
        let mut first_err = None;
        let mut rest = std::collections::VecDeque::from(created);
        while !rest.is_empty() {
            let mut n = 0;
            let mut bytes = 0;
            while n < rest.len() && (n == 0 || bytes + rest[n].size_bytes() as u64 <= batch_bytes) {
                bytes += rest[n].size_bytes() as u64;
                n += 1;
            }
            let batch: Vec<Arc<Folio>> = rest.drain(..n).collect();
            if let Err(e) = self.fill_folios(&batch, priority) {
                first_err.get_or_insert(e);
            }
            debug_assert!(batch.iter().all(|f| !f.lock().read_in_flight), "every placeholder was published");
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Reads placeholders (`read_in_flight` folios) from the store as one
    /// batch of `io_max` reads and publishes them.
    fn fill_folios(&self, created: &[Arc<Folio>], priority: IoPriority) -> io::Result<()> {
        debug_assert!(created.iter().all(|f| f.lock().read_in_flight));
        // Take the buffers out so the I/O can write them without the lock;
        // nobody else touches a read_in_flight folio's buffer.
        let mut bufs: Vec<Arc<AlignedBuf>> =
            created.iter().map(|f| std::mem::replace(&mut f.lock().buf, Arc::new(AlignedBuf::zeroed(0)))).collect();
        let (results, supplied) = self.read_placeholders(created, &mut bufs, priority);
        let disk_len = self.on_disk_len_max.load(Ordering::Acquire);
        for ((buf, &n), f) in bufs.iter_mut().zip(&supplied).zip(created) {
            let buf = Arc::get_mut(buf).expect("a filling folio's buffer is private");
            // Past end of file (or a hole the store did not return), or past
            // a truncate not yet applied to the store: zeros.
            let valid = n.min(disk_len.saturating_sub(f.offset()) as usize);
            buf[valid..].fill(0);
        }
        self.publish_fills(created, bufs, results, priority)
    }

    /// Reads each placeholder's buffer (whole blocks up to
    /// `on_disk_len_max`) in pieces of `io_max`, all in one batch. Returns
    /// each folio's result and the bytes the store supplied to it: the
    /// contiguous prefix up to its first short read (end of file).
    fn read_placeholders(
        &self,
        created: &[Arc<Folio>],
        bufs: &mut [Arc<AlignedBuf>],
        priority: IoPriority,
    ) -> (Vec<io::Result<()>>, Vec<usize>) {
        let disk_len = self.on_disk_len_max.load(Ordering::Acquire);
        let store = self.store();
        let mut results: Vec<io::Result<()>> = (0..created.len()).map(|_| Ok(())).collect();
        let mut supplied: Vec<usize> = vec![0; created.len()];
        let mut ops = Vec::new();
        let mut op_folio = Vec::new();
        let io_max = self.config.io_max_bytes as usize;
        for (i, (f, buf)) in created.iter().zip(bufs.iter_mut()).enumerate() {
            let buf = Arc::get_mut(buf).expect("a filling folio's buffer is private");
            // Whole blocks (O_DIRECT) up to `on_disk_len_max`; what lies
            // past it is zeroed by the caller.
            let want = disk_len.saturating_sub(f.offset()).next_multiple_of(BLOCK).min(buf.len() as u64) as usize;
            // io_max-sized reads keep several requests in flight on the
            // device even for one large folio.
            for (k, piece) in buf[..want].chunks_mut(io_max).enumerate() {
                ops.push(IoOp::read(f.offset() + (k * io_max) as u64, piece, priority));
                op_folio.push((i, k * io_max));
            }
        }
        // A reader waiting on the device counts as a sync waiter of the
        // domain: the flusher then keeps its background writes in the
        // device queue to `async_depth_while_sync`, so a read does not wait
        // behind megabytes of them (the kernel's block layer throttles
        // buffered writeback for reads the same way, `wbt`). No inode has
        // the waiter's id: nothing is promoted for it.
        let _reader = (priority == IoPriority::Sync).then(|| self.dirty.enter_sync(READER_SYNC_WAITER_ID));
        let started = std::time::Instant::now();
        run_batch(&*store, &mut ops);
        if priority == IoPriority::Sync {
            self.dirty.background_budget.record(started.elapsed());
        }
        let mut short = vec![false; created.len()];
        for (op, (i, start)) in ops.iter_mut().zip(op_folio) {
            match op.result.take().expect("run_batch completes every op") {
                Ok(n) if !short[i] => {
                    supplied[i] = start + n;
                    short[i] = n < op.len();
                }
                Ok(_) => {}
                Err(e) => {
                    short[i] = true;
                    if results[i].is_ok() {
                        results[i] = Err(e);
                    }
                }
            }
        }
        (results, supplied)
    }

    /// Gives each filled folio its buffer back, uptodate where its read
    /// succeeded, and wakes its waiters; a folio whose read failed leaves
    /// the mapping (unless a writer dirtied it meanwhile) so the next
    /// reader retries. Returns the first error.
    fn publish_fills(
        &self,
        created: &[Arc<Folio>],
        bufs: Vec<Arc<AlignedBuf>>,
        results: Vec<io::Result<()>>,
        priority: IoPriority,
    ) -> io::Result<()> {
        let mut first_err = None;
        let mut read_bytes = 0u64;
        for ((f, buf), result) in created.iter().zip(bufs).zip(results) {
            let mut st = f.lock();
            debug_assert!(st.read_in_flight && st.buf.is_empty(), "a placeholder's buffer is out for its read");
            debug_assert!(!st.removed && st.nr_dirty == 0 && st.nr_writeback == 0, "no one but the fill touches it");
            st.buf = buf;
            st.read_in_flight = false;
            if result.is_ok() {
                st.set_uptodate(f.nr_blocks(), 0, f.nr_blocks());
                read_bytes += f.size_bytes() as u64;
            }
            st.check(f.nr_blocks());
            debug_assert!(result.is_err() || st.all_uptodate, "a filled folio is uptodate");
            drop(st);
            // Wake waiters before taking the mapping lock: a truncate holding
            // it may be one of them.
            f.filled.notify_all();
            if let Err(e) = result {
                self.try_remove_clean(f);
                first_err.get_or_insert(e);
            }
        }
        if priority == IoPriority::Async {
            Counters::add(&self.counters.readahead_bytes, read_bytes);
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Copies file bytes `[off, off + buf.len())` (clipped to the size) into
    /// `buf`, filling missing folios with one I/O each. Returns bytes read.
    /// With `dontcache`, folios this read brought in are dropped once the
    /// read has copied up to their end; a cached read clears drop-behind.
    /// `prev_end` is where this handle's previous read ended: a folio that
    /// read already touched is not counted as accessed again (sequential
    /// small reads of one large folio are one use, not many).
    pub fn read_at<T: ReadTarget + ?Sized>(
        self: &Arc<Self>,
        buf: &mut T,
        off: u64,
        dontcache: bool,
        prev_end: u64,
    ) -> io::Result<usize> {
        let size = self.size();
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(size - off) as usize;
        let end_block = (off + len as u64).div_ceil(BLOCK);
        let mut done = 0usize;
        let mut missed = false;
        while done < len {
            let pos = off + done as u64;
            let block = pos / BLOCK;
            if !dontcache {
                if let Some(n) = self.copy_cached_part(buf, done, pos, len - done, prev_end) {
                    done += n;
                    continue;
                }
            }
            let Some(folio) = self.find(block) else {
                missed = true;
                // At most a readahead window per fill, so one huge read
                // cannot pin the whole cache in placeholders.
                let fill_end = end_block.min(block + self.config.readahead_max_blocks());
                self.fill_range_marked(block, fill_end, IoPriority::Sync, dontcache, u64::MAX, None)?;
                continue;
            };
            let Some(mut st) = folio.lock_filled() else { continue };
            let folio_off = (pos - folio.offset()) as usize;
            let n = (folio.size_bytes() - folio_off).min(len - done);
            let first = folio_off / BLOCK_SIZE;
            let last = (folio_off + n).div_ceil(BLOCK_SIZE);
            if !st.is_uptodate(first, last) {
                missed = true;
                self.fill_blocks(&folio, &mut st, first, last)?;
            }
            buf.copy_in(done, &st.buf[folio_off..folio_off + n]);
            let clean = st.nr_dirty == 0 && st.nr_writeback == 0;
            drop(st);
            if !dontcache {
                folio.dropbehind.store(false, Ordering::Relaxed);
                let touched_by_prev =
                    prev_end > folio.offset() && prev_end <= folio.offset() + folio.size_bytes() as u64;
                if !touched_by_prev {
                    folio.mark_accessed();
                }
            } else if clean && folio_off + n == folio.size_bytes() && folio.dropbehind.load(Ordering::Relaxed) {
                // Freed by the reaper, not here: the reader goes on.
                self.queue_dropbehind(folio);
            }
            done += n;
        }
        let counter = if missed { &self.counters.misses } else { &self.counters.hits };
        Counters::add(counter, 1);
        // A truncate that raced this read: what lies past the new end was
        // not there when the read finished, so it is not returned.
        Ok(len.min(self.size().saturating_sub(off) as usize))
    }

    /// A read that the cache answers whole, without I/O and without
    /// waiting: `Some(bytes read)` if every part of it lay in cached,
    /// uptodate folios (see [`Inode::copy_cached_part`]), `None` for the
    /// full path to do (which copies again what this copied).
    pub fn read_cached<T: ReadTarget + ?Sized>(&self, buf: &mut T, off: u64, prev_end: u64) -> Option<usize> {
        let size = self.size();
        if off >= size || buf.is_empty() {
            return Some(0);
        }
        let len = (buf.len() as u64).min(size - off) as usize;
        let mut done = 0;
        while done < len {
            done += self.copy_cached_part(buf, done, off + done as u64, len - done, prev_end)?;
        }
        Counters::add(&self.counters.hits, 1);
        // As the full path: a truncate that raced the read cuts it.
        Some(len.min(self.size().saturating_sub(off) as usize))
    }

    /// The read hit path: copies the part of a read at `pos` (up to
    /// `remaining` bytes) that one cached, uptodate folio holds, under the
    /// mapping's read lock and the folio's lock, without taking a
    /// reference to the folio (the lock order is the index's, then the
    /// folio's; a folio in the index is not removed while its read lock
    /// is held). Only parts of at most [`HIT_COPY_UNDER_INDEX_MAX`] bytes:
    /// a longer copy would hold off folio insertions (and, with a writer
    /// waiting, other readers) for its whole length. `None` when the slow
    /// path must do it (a miss, a folio locked by someone else, a fill in
    /// flight, blocks not uptodate, a long part).
    fn copy_cached_part<T: ReadTarget + ?Sized>(
        &self,
        buf: &mut T,
        done: usize,
        pos: u64,
        remaining: usize,
        prev_end: u64,
    ) -> Option<usize> {
        let map = self.mapping.read();
        let folio = map.find(pos / BLOCK)?;
        let folio_off = (pos - folio.offset()) as usize;
        let n = (folio.size_bytes() - folio_off).min(remaining);
        if n > HIT_COPY_UNDER_INDEX_MAX {
            return None;
        }
        // Never waits with the index locked: a folio's lock may be held
        // across a fill's I/O, and folio insertions would wait behind us.
        let mut st = folio.state.try_lock().ok()?;
        debug_assert!(!st.removed, "a folio in the index is not removed");
        let (first, last) = (folio_off / BLOCK_SIZE, (folio_off + n).div_ceil(BLOCK_SIZE));
        if st.read_in_flight || !st.is_uptodate(first, last) {
            return None;
        }
        buf.copy_in(done, &st.buf[folio_off..folio_off + n]);
        drop(st);
        if folio.dropbehind.load(Ordering::Relaxed) {
            folio.dropbehind.store(false, Ordering::Relaxed);
        }
        let touched_by_prev = prev_end > folio.offset() && prev_end <= folio.offset() + folio.size_bytes() as u64;
        if !touched_by_prev {
            folio.mark_accessed();
        }
        Some(n)
    }

    /// Copies the first `len` bytes of `data` into the cache at `off` and
    /// marks them dirty. Each folio's part is copied under that folio's lock
    /// (atomic per folio). Returns the `(bytes copied, bytes newly
    /// dirtied)`; fewer bytes copied than asked only when an error stopped
    /// the write part-way (a short write).
    pub fn write_at<S: WriteSource + ?Sized>(
        self: &Arc<Self>,
        data: &S,
        len: usize,
        off: u64,
        dontcache: bool,
    ) -> io::Result<(usize, u64)> {
        assert!(len <= data.len(), "a write of {len} bytes from a source of {}", data.len());
        let end_block = (off + len as u64).div_ceil(BLOCK);
        let mut done = 0usize;
        let mut newly_dirty_bytes_total = 0u64;
        let mut result = Ok(());
        // Dirty room a part waited for, kept for its retry.
        let mut room = self.dirty.no_room();
        while done < len {
            let part = WritePart { done, len: len - done, pos: off + done as u64, end_block, dontcache };
            match self.write_folio_part(data, &part, &mut room) {
                // The folio left the mapping before it could be locked, or
                // the part had to wait for dirty room: again, room in hand.
                Ok(None) => continue,
                Ok(Some((n, newly_bytes))) => {
                    debug_assert!(n > 0 && n <= part.len);
                    // What the part did not dirty goes back before the
                    // throttle below can pause this writer.
                    room = self.dirty.no_room();
                    done += n;
                    newly_dirty_bytes_total += newly_bytes;
                    if newly_bytes > 0 {
                        self.dirtied(part.pos / BLOCK, newly_bytes, dontcache);
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        debug_assert!(done <= len && newly_dirty_bytes_total <= (done as u64).next_multiple_of(BLOCK) + BLOCK);
        match result {
            // Bytes copied before an error stay written, as a short write.
            Err(e) if done == 0 => Err(e),
            _ => Ok((done, newly_dirty_bytes_total)),
        }
    }

    /// One folio's part of a write: find or create the folio, make its
    /// buffer private, take dirty room for the blocks it will newly dirty,
    /// read a partly covered edge block, copy, mark dirty. Returns the bytes
    /// copied and newly dirtied, or `None` when the folio left the mapping
    /// meanwhile or the part waited for room (`room` then holds it: call
    /// again).
    fn write_folio_part<S: WriteSource + ?Sized>(
        self: &Arc<Self>,
        data: &S,
        part: &WritePart,
        room: &mut DirtyRoom<'_>,
    ) -> io::Result<Option<(usize, u64)>> {
        debug_assert!(part.len > 0 && part.pos / BLOCK < part.end_block, "a part of the write is left");
        let (part_end, room_max) = self.part_bounds(part);
        debug_assert!(room.bytes() <= room_max, "a retried part holds at most the room it waited for");
        let (folio, _) = self.find_or_create(part.pos / BLOCK, part.end_block, false, true)?;
        let Some(mut st) = self.lock_private(&folio)? else { return Ok(None) };
        let folio_off = (part.pos - folio.offset()) as usize;
        let n = (folio.size_bytes() - folio_off).min(part.len).min((part_end - part.pos) as usize);
        let (first, last) = (folio_off / BLOCK_SIZE, (folio_off + n).div_ceil(BLOCK_SIZE));
        // Room for the blocks this part dirties newly, taken under the
        // folio lock, so nothing can dirty them meanwhile: a rewrite of
        // dirty blocks needs none (and costs no shared atomic). Without
        // enough room, the wait (kicking writeback, throttling this writer)
        // happens with no lock held, and the part runs again.
        let needed = (last - first - st.dirty.count_range(first, last)) as u64 * BLOCK;
        if needed > room.bytes() {
            match self.dirty.try_take_room(needed - room.bytes(), throttle::room_limit_bytes(&self.config)) {
                Some(more) => room.absorb(more),
                None => {
                    drop(st);
                    let more = throttle::wait_for_dirty_room(&self.dirty, &self.config, room_max - room.bytes())?;
                    if more.bytes() == 0 {
                        // The cache closed while this writer waited.
                        return Err(io::Error::from_raw_os_error(libc::EBADF));
                    }
                    room.absorb(more);
                    return Ok(None);
                }
            }
        }
        debug_assert!(room.bytes() >= needed, "room for every newly dirty block");
        let fresh_blocks = self.fill_edges_for_write(&folio, &mut st, folio_off, n)?;
        let dst = Arc::get_mut(&mut st.buf).expect("the buffer was made private above");
        data.copy_out(part.done, n, dst, folio_off, fresh_blocks);
        st.set_uptodate(folio.nr_blocks(), first, last);
        // The size covers these bytes before they can be written back, so a
        // backing-size fix never cuts them off.
        let new_end = part.pos + n as u64;
        self.extend_size_for_write(new_end);
        let room_before = room.bytes();
        let newly = self.mark_dirty(&folio, &mut st, (first, last), part.dontcache, room);
        debug_assert!(
            newly as u64 * BLOCK == needed && room_before - room.bytes() == needed,
            "the newly dirty blocks are the ones counted, and come out of the room"
        );
        if part.dontcache {
            folio.dropbehind.store(true, Ordering::Relaxed);
        } else {
            folio.dropbehind.store(false, Ordering::Relaxed);
            folio.mark_accessed();
        }
        st.check(folio.nr_blocks());
        debug_assert!(self.size() >= new_end && st.is_uptodate(first, last));
        Ok(Some((n, newly as u64 * BLOCK)))
    }

    /// Where a write part ends, and the most it can newly dirty: whole
    /// blocks (2 bytes across a block boundary dirty two), up to the end of
    /// its folio, which ends at a `folio_max` boundary at the latest, and at
    /// most a quarter of `dirty_limit` (a part is cut there): a folio larger
    /// than that is written in several parts, each taking its own room, so
    /// dirty + writeback never passes the limit.
    fn part_bounds(&self, part: &WritePart) -> (u64, u64) {
        let folio_max = self.config.folio_max_bytes;
        let first_byte = part.pos / BLOCK * BLOCK;
        let part_end = (part.pos + part.len as u64)
            .min((part.pos / folio_max + 1) * folio_max)
            .min(first_byte + throttle::room_max_bytes(&self.config));
        let room_max = part_end.next_multiple_of(BLOCK) - first_byte;
        debug_assert!(
            room_max > 0 && room_max <= folio_max && room_max <= throttle::room_max_bytes(&self.config),
            "a part dirties at most one folio, and at most the room a writer may take"
        );
        (part_end, room_max)
    }

    /// Before a write copies `n` bytes at `folio_off` into `folio`: reads
    /// the old contents of a partly covered edge block (no other block
    /// needs them). Returns whether the write covers only whole blocks that
    /// held nothing cached: new data on its way to the device, which the
    /// copy streams past the CPU caches (blocks that were cached may be
    /// read again soon and are copied normally).
    fn fill_edges_for_write(&self, folio: &Folio, st: &mut FolioState, folio_off: usize, n: usize) -> io::Result<bool> {
        let (first, last) = (folio_off / BLOCK_SIZE, (folio_off + n).div_ceil(BLOCK_SIZE));
        if !st.all_uptodate {
            if folio_off % BLOCK_SIZE != 0 {
                self.fill_blocks(folio, st, first, first + 1)?;
            }
            if (folio_off + n) % BLOCK_SIZE != 0 {
                self.fill_blocks(folio, st, last - 1, last)?;
            }
        }
        debug_assert!(
            st.all_uptodate || (folio_off % BLOCK_SIZE == 0 || st.is_uptodate(first, first + 1)),
            "a partly covered first block holds its old contents"
        );
        Ok(n % BLOCK_SIZE == 0
            && folio_off % BLOCK_SIZE == 0
            && !st.all_uptodate
            && st.uptodate.next(first, last, true).is_none())
    }

    /// Raises the size to `new_end` if a write reaches past it. Loads
    /// first: an overwrite leaves the size alone, and a locked
    /// read-modify-write on every write took the line from the flusher (80%
    /// of `write_folio_part`'s time under random writes).
    fn extend_size_for_write(&self, new_end: u64) {
        if self.size.load(Ordering::Acquire) < new_end && self.size.fetch_max(new_end, Ordering::AcqRel) < new_end {
            self.size_changed.store(true, Ordering::Release);
        }
        debug_assert!(self.size() >= new_end, "the size covers the write");
    }

    /// Locks a filled folio whose buffer only this folio holds. When
    /// writeback holds the buffer, the write goes into a copy instead of
    /// waiting for the I/O; the copy's memory is reserved like a new
    /// folio's (the old buffer stays counted until that writeback
    /// completes). `None` when the folio left the mapping meanwhile.
    fn lock_private<'f>(&self, folio: &'f Folio) -> io::Result<Option<MutexGuard<'f, FolioState>>> {
        let Some(st) = folio.lock_filled() else { return Ok(None) };
        if Arc::strong_count(&st.buf) <= 1 {
            return Ok(Some(st));
        }
        drop(st);
        let folio_len = folio.size_bytes();
        let mut fresh = self.memory.reserve_folio_buf(folio_len, true)?;
        let Some(mut st) = folio.lock_filled() else {
            self.memory.release_folio_buf(Some(fresh), folio_len);
            return Ok(None);
        };
        if Arc::strong_count(&st.buf) > 1 {
            fresh.copy_from_slice(&st.buf);
            st.buf = Arc::new(fresh);
            Counters::add(&self.counters.cow_copies, 1);
        } else {
            // The writeback finished meanwhile.
            self.memory.release_folio_buf(Some(fresh), folio_len);
        }
        debug_assert_eq!(Arc::strong_count(&st.buf), 1);
        Ok(Some(st))
    }

    /// Marks blocks `[first, last)` of a locked folio dirty and accounts
    /// the newly dirty ones before the lock drops, so writeback can never
    /// take (and subtract) bytes not yet added. Returns the newly dirty
    /// blocks.
    fn mark_dirty(
        &self,
        folio: &Arc<Folio>,
        st: &mut FolioState,
        (first, last): (usize, usize),
        dontcache: bool,
        room: &mut DirtyRoom<'_>,
    ) -> usize {
        debug_assert!(first < last && last <= folio.nr_blocks(), "blocks {first}..{last} of the folio");
        debug_assert_eq!(
            folio.dirty_mark.load(Ordering::Relaxed),
            if st.nr_dirty > 0 { DirtyMark::DIRTY } else { DirtyMark::CLEAN },
            "a cached folio's mark follows its dirty blocks"
        );
        let was_clean = st.nr_dirty == 0;
        let newly = st.set_dirty(first, last);
        if newly > 0 {
            let newly_bytes = newly as u64 * BLOCK;
            self.dirty.account_dirty_bytes(newly_bytes, if dontcache { newly_bytes } else { 0 }, room);
            if dontcache {
                st.dontcache_dirty += newly;
            }
            if was_clean {
                self.mapping.index_dirty(folio);
            }
        }
        debug_assert!(st.nr_dirty >= newly);
        debug_assert!(
            self.mapping.dirty_index().get(&folio.index).is_some_and(|f| Arc::ptr_eq(f, folio)),
            "a dirty folio is in its dirty index"
        );
        newly
    }

    /// After a folio's lock dropped with `newly_bytes` newly dirty: the
    /// inode joins the dirty list, an uncached write kicks the flusher
    /// (never writing back inline), and the writer is throttled.
    fn dirtied(self: &Arc<Self>, block: u64, newly_bytes: u64, dontcache: bool) {
        debug_assert!(newly_bytes > 0 && newly_bytes % BLOCK == 0, "whole blocks newly dirty");
        let workers = self.queue_on_dirty_list(Some(block));
        if dontcache {
            // Only the worker that writes this block: the others have
            // nothing of it to write.
            self.dirty.kick_dontcache(workers);
        }
        throttle::balance_dirty(&self.dirty, &self.config, newly_bytes, dontcache);
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
        let _g = locks::lock(&self.size_lock);
        if new_size >= self.size() {
            self.grow(new_size)
        } else {
            self.shrink(new_size)
        }
    }

    /// [`Inode::set_len`] to a size at least the current one (size lock
    /// held).
    fn grow(&self, new_size: u64) -> io::Result<()> {
        debug_assert!(self.size_lock.try_lock().is_err(), "the size lock is held");
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
        debug_assert!(self.size_lock.try_lock().is_err(), "the size lock is held");
        self.size.fetch_max(new_size, Ordering::AcqRel);
        self.size_changed.store(true, Ordering::Release);
        debug_assert!(self.size() >= new_size);
    }

    /// [`Inode::set_len`] to a smaller size (size lock held).
    fn shrink(&self, new_size: u64) -> io::Result<()> {
        debug_assert!(self.size_lock.try_lock().is_err(), "the size lock is held");
        debug_assert!(new_size < self.size(), "a shrink cuts");
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
        let straddling = map.find(new_size / BLOCK).filter(|f| f.offset() < new_size).cloned();
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
            let mut writes_end = locks::lock(&self.store_writes_end);
            *writes_end = (*writes_end).min(new_size);
        }
        self.store().set_len(new_size)?;
        self.store_padded.store(false, Ordering::Release);
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
    fn quiesce_for_cut(&self, new_size: u64) -> (RwLockWriteGuard<'_, FolioIndex>, ResizeGuard<'_>) {
        self.quiesce_blocks(new_size / BLOCK, u64::MAX)
    }

    /// As [`Inode::quiesce_for_cut`], for the folios that overlap blocks
    /// `[first, end)`: the mapping's write lock with no fill in flight
    /// over them, and the store's length gate.
    pub(crate) fn quiesce_blocks(&self, first: u64, end: u64) -> (RwLockWriteGuard<'_, FolioIndex>, ResizeGuard<'_>) {
        let filling_in_range = |map: &FolioIndex| {
            let from = map.find(first).map_or(first, |f| f.index);
            map.range(from..end).find(|f| f.lock().read_in_flight).cloned()
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
        let f = map.get(key).expect("a cached folio").clone();
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
        Arc::make_mut(&mut st.buf)[from..to].fill(0);
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
            first_inside >= end_inside || st.dirty.next(first_inside, end_inside, true).is_none(),
            "nothing dirty wholly inside the zeroed range"
        );
        debug_assert!(
            st.nr_dirty > 0 || f.dirty_mark.load(Ordering::Relaxed) == DirtyMark::CLEAN,
            "a folio left clean is marked clean"
        );
        (cleared as u64, dontcache as u64)
    }

    /// Marks the inode unlinked (see [`Inode::is_unlinked`]). SeqCst, paired
    /// with the handle count's: of a last close and an unlink racing, one
    /// sees the other's change and discards the data.
    pub fn mark_unlinked(&self) {
        self.unlinked.store(true, Ordering::SeqCst);
    }

    /// Whether the file's last name was removed through the cache.
    pub fn is_unlinked(&self) -> bool {
        self.unlinked.load(Ordering::SeqCst)
    }

    /// Drops every cached folio, dirty ones too, without writing anything
    /// back: for an unlinked file that no handle can read any more. Waits
    /// for fills and writeback I/O in flight first. The size and the store
    /// are left as they are (nobody will look at them again).
    pub fn discard_all(&self) {
        debug_assert!(self.is_unlinked(), "only an unlinked file's data may be thrown away");
        let _size = locks::lock(&self.size_lock);
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

    /// Drops every clean folio (used when the cache closes).
    pub fn drop_all_clean(&self) {
        let folios: Vec<Arc<Folio>> = self.mapping.read().values().cloned().collect();
        for f in folios {
            self.try_remove_clean(&f);
        }
    }

    /// Puts the inode on its domain's dirty lists (where it is not), so
    /// the writeback workers look at it: after it went from clean to dirty
    /// (`at`: a block just dirtied), or after a size change whose store
    /// sync is still owed, or a failed writeback (`None`).
    /// Joins the dirty list of the workers that write block `at` (`None`:
    /// of every worker with dirty data of it); returns them as a mask.
    pub fn queue_on_dirty_list(self: &Arc<Self>, at: Option<u64>) -> u64 {
        self.dirty_list.queue_dirty_inode(self, at)
    }

    /// Whether any writeback worker lists this inode.
    pub fn is_listed(&self) -> bool {
        self.listed_workers.load(Ordering::Acquire) != 0
    }

    /// Whether the cache this inode belongs to has closed (optional work
    /// such as readahead stops).
    pub fn is_cache_closed(&self) -> bool {
        self.dirty.cache.is_closed()
    }
}

impl MappingOwner for Inode {
    fn mapping(&self) -> &Mapping {
        &self.mapping
    }
}

impl Drop for Inode {
    /// An inode goes away at cache close or when idle; folios still mapped
    /// (busy at that moment) give their memory back here.
    fn drop(&mut self) {
        let folios = self.mapping.write().take_all();
        for folio in folios {
            let mut st = folio.lock();
            if !st.removed {
                st.dirty.clear_range(0, folio.nr_blocks());
                st.nr_dirty = 0;
                self.release_removed(&folio, &mut st);
            }
            debug_assert!(st.removed && st.nr_dirty == 0, "every folio leaves with its inode");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length change waits for I/O in flight and holds off new I/O; I/O
    /// that must not wait is refused while one is pending.
    #[test]
    fn store_len_gate_excludes_io_during_a_length_change() {
        let gate = Arc::new(StoreLenGate::default());
        gate.begin_io();
        let resized = Arc::new(AtomicBool::new(false));
        let resizer = {
            let (gate, resized) = (gate.clone(), resized.clone());
            std::thread::spawn(move || {
                let _g = gate.resize();
                resized.store(true, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(50));
                resized.store(false, Ordering::SeqCst);
            })
        };
        // The resizer is now pending (or about to be): wait until it is.
        while !gate.lock().resizing {
            std::thread::yield_now();
        }
        assert!(!gate.try_begin_io(), "a pending length change refuses new asynchronous I/O");
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!resized.load(Ordering::SeqCst), "the length change waits for I/O in flight");
        gate.end_io();
        gate.begin_io(); // waits for the length change to finish
        assert!(!resized.load(Ordering::SeqCst), "I/O never overlaps a length change");
        gate.end_io();
        resizer.join().unwrap();
        assert!(gate.try_begin_io());
        gate.end_io();
        let st = gate.lock();
        assert!(!st.resizing && st.io_in_flight == 0);
    }
}
