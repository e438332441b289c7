//! An inode: wbcache's state for one backing store, shared by every open
//! handle of it. It owns its [`Mapping`] (folio index and dirty index), the
//! logical size, the store and its length gate, the error sequence and the
//! writeback tickets. Every method of [`Inode`] lives in this module's
//! children, one per concern, and every field is private to them:
//! - [`gate`]: the store's length gate (writeback I/O against length
//!   changes);
//! - [`folios`]: lookup, creation and removal of the inode's folios;
//! - [`read`] and [`write`](mod@write): the data paths (hits, fills, copies, dirtying);
//! - [`size`]: `set_len`, the room under the file system's limit, cuts;
//! - [`range_ops`]: `fallocate` and `POSIX_FADV_DONTNEED` over a range;
//! - [`pass`]: one writeback pass (collect, build I/Os, complete);
//! - [`sync`]: tickets, fsync / fdatasync and the store's length fixes.
//!
//! The writeback layer above (domain, worker, in-flight passes, routing
//! policy) drives passes and syncs through the narrow methods these
//! modules export; an inode reaches that layer only through
//! [`DirtyInodeList`].
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
//! `locks::Rank` encodes this order as one line (`tickets` after the gate,
//! `store_writes_end` and `store` last), and debug builds check it at every
//! blocking acquisition of these locks (the store's length gate, the
//! mapping's index and dirty index and folio locks included) and count
//! what each thread holds, so `debug_assert!(locks::holds(…))` can state
//! which lock a function expects its caller to hold.
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

mod errseq;
mod folios;
mod gate;
mod membership;
mod pass;
mod range_ops;
mod read;
mod size;
mod sync;
mod write;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::locks::{self, Rank};
use crate::config::Config;
use crate::guardian::GuardedFile;
use crate::inode::errseq::ErrSeq;
use crate::io::{BackingInfo, BackingStore, BLOCK_SIZE};
use crate::mapping::{Mapping, MappingOwner};
use crate::policy::dirty::DomainDirty;
use crate::policy::dropbehind::DropBehind;
use crate::policy::memory::Memory;
use crate::stats::Counters;

use gate::{ResizeGuard, StoreLenGate};
pub use pass::{PassScope, PassSize, SizeFix, WbPass, WritebackOutcome};
pub use range_ops::Allocation;
pub use read::FillPlan;

const BLOCK: u64 = BLOCK_SIZE as u64;

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

/// In-flight writeback tickets of an inode (see `inode::sync`).
#[derive(Default)]
pub struct Tickets {
    pub last_issued: u64,
    pub in_flight: std::collections::BTreeSet<u64>,
}

pub struct Inode {
    /// Unique within the cache (for eviction ghosts and debugging).
    id: u64,
    info: BackingInfo,
    store: Mutex<Arc<dyn BackingStore>>,
    store_writable: AtomicBool,
    config: Arc<Config>,
    counters: Arc<Counters>,
    memory: Arc<Memory>,
    /// Where drop-behind folios go to be freed once clean and idle.
    dropbehind: Arc<DropBehind>,
    /// The domain's dirty accounting (and its flusher's work bits).
    dirty: Arc<DomainDirty>,
    /// The domain's dirty inode list, which this inode joins when it goes
    /// from clean to dirty.
    dirty_list: Arc<dyn DirtyInodeList>,
    mapping: Mapping,
    /// Logical file size in bytes.
    size: AtomicU64,
    on_disk_len_max: AtomicU64,
    /// Writeback wrote a tail block that reaches past the logical size
    /// (O_DIRECT writes whole blocks): the store may hold up to a block of
    /// zeros past the size, which [`Inode::fix_backing_size`] cuts. Only
    /// such padding of our own is ever cut: a store longer for any other
    /// reason (another program appended) is left alone.
    store_padded: AtomicBool,
    /// A length the store's file system is known to accept (writes up to it
    /// skip the check in [`Inode::room_to_grow`]).
    len_accepted: AtomicU64,
    /// The file system's largest file size, once a write reached past it
    /// (`u64::MAX` until then).
    len_limit: AtomicU64,
    /// Serializes size changes against each other and backing-size fixes.
    size_lock: Mutex<()>,
    /// Held by an append from finding the end to writing there (appends
    /// through the cache never interleave).
    append_lock: Mutex<()>,
    /// Writeback I/O holds it shared; changing the backing store's length
    /// holds it exclusively, so a truncation never races an in-flight write
    /// beyond the old length.
    store_len_gate: StoreLenGate,
    /// A lower bound on the backing store's length (files only): writeback
    /// past it grows the store first ([`Inode::grow_store_for_writeback`]).
    /// Lowered by every cut, under the store's length gate.
    store_len_min: AtomicU64,
    /// The furthest end of the writeback writes that may extend the store
    /// (past `store_len_min`) since the store was last cut; its lock is
    /// held by [`Inode::grow_store_for_writeback`] from its look at the
    /// size to its `set_len`, which never goes below it.
    store_writes_end: Mutex<u64>,
    /// Size changed since the last successful store sync: use fsync, not
    /// fdatasync.
    size_changed: AtomicBool,
    /// Writeback wrote data since the last successful store sync.
    written_since_sync: AtomicBool,
    /// Bytes of this inode's writeback passes between collecting and
    /// completing (what an fsync that comes now waits for besides what is
    /// still dirty).
    writeback_pass_bytes: AtomicU64,
    errseq: ErrSeq,
    tickets: Mutex<Tickets>,
    tickets_done: locks::WaitQueue,
    /// The writeback workers whose dirty lists hold this inode (or which
    /// took it off to write it and have not put it back), a bit per worker.
    listed_workers: AtomicU64,
    /// The worker `rotor` routing bound this inode to (`u32::MAX`: none
    /// yet; bound once, for the inode's life).
    rotor_worker: AtomicU32,
    /// Open handles.
    handles: AtomicUsize,
    /// The file's last name was removed through the cache
    /// ([`crate::Cache::remove_file`]): the inode left the inode table, and
    /// when its last handle closes its data is discarded, not written.
    unlinked: AtomicBool,
    /// Where each worker's next cyclic writeback pass starts (block).
    writeback_cursors: Box<[AtomicU64]>,
    /// The inode's file slot in the crash table, when the cache has a
    /// guardian (see [`crate::guardian`]): written blocks and the size are
    /// recorded there.
    guarded: Option<GuardedFile>,
}

impl Inode {
    pub fn new(id: u64, store: Arc<dyn BackingStore>, writable: bool, handles: InodeHandles) -> Inode {
        let InodeHandles { config, counters, memory, dropbehind, dirty, dirty_list } = handles;
        let info = store.info().clone();
        let len = info.len_at_open;
        let mapping = Mapping::with_regions(id, config.region_tracking(), Some(counters.clone()));
        let guarded = memory.guardian.as_ref().and_then(|g| g.open_file(store.raw_fd(), info.store_id, len));
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
            writeback_pass_bytes: AtomicU64::new(0),
            errseq: ErrSeq::default(),
            tickets: Mutex::new(Tickets::default()),
            tickets_done: locks::WaitQueue::default(),
            listed_workers: AtomicU64::new(0),
            rotor_worker: AtomicU32::new(u32::MAX),
            handles: AtomicUsize::new(0),
            unlinked: AtomicBool::new(false),
            writeback_cursors,
            guarded,
        }
    }

    pub fn store(&self) -> Arc<dyn BackingStore> {
        locks::lock_ranked(Rank::Store, &self.store).clone()
    }

    /// Replaces a read-only store with a writable one opened by a later
    /// handle, so writeback can write.
    pub fn upgrade_store(&self, store: Arc<dyn BackingStore>) {
        if !self.store_writable.swap(true, Ordering::AcqRel) {
            *locks::lock_ranked(Rank::Store, &self.store) = store;
        }
    }

    pub(super) fn is_store_writable(&self) -> bool {
        self.store_writable.load(Ordering::Acquire)
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    pub fn has_dirty(&self) -> bool {
        self.mapping.has_dirty()
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

    /// Puts the inode on its domain's dirty lists (where it is not), so
    /// the writeback workers look at it: after it went from clean to dirty
    /// (`at`: a block just dirtied), or after a size change whose store
    /// sync is still owed, or a failed writeback (`None`).
    /// Joins the dirty list of the workers that write block `at` (`None`:
    /// of every worker with dirty data of it); returns them as a mask.
    pub fn queue_on_dirty_list(self: &Arc<Self>, at: Option<u64>) -> u64 {
        self.dirty_list.queue_dirty_inode(self, at)
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
