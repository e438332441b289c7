//! The state a cache and all its open files share: the inode table, the
//! writeback domains, the open/closed gate, the worker threads, and the
//! narrow handles (configuration, counters, dirty accounting, memory, I/O
//! backend) that inodes and domains are built with.
//!
//! Ownership: [`crate::Cache`] and every [`crate::File`] hold `Arc<Shared>`.
//! Shared owns the inode table and the domains; domains run the flushers
//! and hold dirty inodes; inodes hold their domain. Those cycles are broken
//! by [`Shared::shutdown`] (cache close or drop), which writes everything
//! back, stops the threads and empties the tables. Nothing below this
//! module holds `Shared`: inodes and domains get only the handles they use.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, Weak};

use crate::base::locks;
use crate::base::sys::SyncKind;
use crate::buf::BulkFree;
use crate::config::Config;
use crate::guardian::board::Board;
use crate::guardian::{Guardian, GuardianProcess};
use crate::inode::{Inode, InodeHandles};
use crate::io::{BackingStore, Io, Symlink};
use crate::policy::background_budget::BackgroundBudget;
use crate::policy::dirty::{CacheDirty, DomainDirty, Progress};
use crate::policy::dropbehind::DropBehind;
use crate::policy::memory::Memory;
use crate::readahead::Workers;
use crate::stats::{Counters, Reason, Stats};
use crate::writeback::domain::Domain;
use crate::writeback::sync_range::RangeWriter;

use super::watch::{figures_of, Figures, Publisher, Sampler};

/// Inodes kept in the table (each holds a descriptor); beyond this, idle
/// ones are synced and forgotten.
pub const MAX_CACHED_INODES: usize = 1024;

/// Held by a file operation while it runs (see `Shared::ops_gate`).
pub type OpGuard<'a> = RwLockReadGuard<'a, ()>;

pub struct Shared {
    pub config: Arc<Config>,
    pub counters: Arc<Counters>,
    pub dirty: Arc<CacheDirty>,
    pub memory: Arc<Memory>,
    pub dropbehind: Arc<DropBehind>,
    pub io: Arc<dyn Io>,
    /// File operations hold it shared; closing takes it exclusively after
    /// marking the cache closed, so every operation that got in has
    /// finished before the final sync.
    ops_gate: RwLock<()>,
    inodes: Mutex<HashMap<(u64, u64), Arc<Inode>>>,
    domains: Mutex<HashMap<u64, Arc<Domain>>>,
    pub workers: Workers,
    /// Writes the range writebacks started without a wait.
    pub range_writer: RangeWriter,
    /// Set first when the cache closes; file operations check it on entry
    /// (the dirty accounting's own flag ends waits for room or memory).
    closed: AtomicBool,
    next_inode_id: AtomicU64,
    pub all_direct_io: AtomicBool,
    /// Publishes the cache's figures for `wbcache stat` (see
    /// [`super::watch`]); `None` over the simulated backend, or where no
    /// `memfd` could be made.
    publisher: Option<Publisher>,
}

impl Shared {
    pub fn new(config: Config, io: Arc<dyn Io>) -> io::Result<Arc<Shared>> {
        // Before the cache's threads start: lock-free reads need it set up,
        // and it is cheapest with fewer threads.
        crate::base::epoch::init();
        let counters = Arc::new(Counters::default());
        let dirty = CacheDirty::new(counters.clone(), Arc::new(Progress::default()));
        let board = create_board(&*io);
        let guardian = start_guardian(&config, &*io, board.as_deref());
        let memory = Arc::new(Memory::with_guardian(config.capacity_bytes, dirty.clone(), guardian));
        if let (Some(board), Some(guardian)) = (&board, &memory.guardian) {
            board.set_table_inode(crate::base::sys::fstat_inode(guardian.arena().table_fd()).unwrap_or(0));
        }
        let workers = Workers::start(config.io_max_bytes, &io)?;
        let range_writer = RangeWriter::start(&io)?;
        let dropbehind = DropBehind::start(memory.clone(), counters.clone())?;
        Ok(Arc::new_cyclic(|weak: &Weak<Shared>| {
            let publisher = board.and_then(|board| {
                let weak = weak.clone();
                let sample: Sampler = Box::new(move || weak.upgrade().map(|shared| shared.figures()));
                // Without its thread the cache runs all the same, unseen
                // by `wbcache stat`.
                Publisher::start(board, sample).ok()
            });
            Shared {
                config: Arc::new(config),
                counters,
                dirty,
                memory,
                dropbehind,
                io,
                ops_gate: RwLock::new(()),
                inodes: Mutex::new(HashMap::new()),
                domains: Mutex::new(HashMap::new()),
                workers,
                range_writer,
                closed: AtomicBool::new(false),
                next_inode_id: AtomicU64::new(1),
                all_direct_io: AtomicBool::new(true),
                publisher,
            }
        }))
    }

    /// A snapshot of the counters, without the configuration.
    pub fn stats(&self) -> Stats {
        let mut st = Stats::from_counters(&self.counters, self.memory.cached_bytes());
        st.capacity_bytes = self.config.capacity_bytes;
        st.io_backend = self.io.kind().name();
        st.direct_io = self.all_direct_io.load(Ordering::Acquire);
        st.open_inodes = self.nr_inodes() as u64;
        st
    }

    /// The board's sample of the counters now.
    fn figures(&self) -> Figures {
        figures_of(&self.stats(), self.config.dirty_limit_bytes, crate::base::sys::monotonic_ns())
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Enters a file operation (see [`OpGuard`]); `EBADF` once closed.
    pub fn enter_op(&self) -> io::Result<OpGuard<'_>> {
        let guard = locks::read(&self.ops_gate);
        self.check_open()?;
        Ok(guard)
    }

    pub fn check_open(&self) -> io::Result<()> {
        if self.is_closed() {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        Ok(())
    }

    pub fn nr_inodes(&self) -> usize {
        locks::lock(&self.inodes).len()
    }

    /// The inode of an opened store: the cached one (its store upgraded
    /// when this handle writes), or a new one in the store's device's
    /// domain. Counts the new handle.
    pub fn inode_for(self: &Arc<Self>, store: Arc<dyn BackingStore>, writable: bool) -> io::Result<Arc<Inode>> {
        let info = store.info().clone();
        let mut table = locks::lock(&self.inodes);
        if let Some(inode) = table.get(&info.store_id) {
            if writable {
                inode.upgrade_store(store);
            }
            inode.handle_opened();
            return Ok(inode.clone());
        }
        let domain = self.domain_for(info.device_id)?;
        let id = self.next_inode_id.fetch_add(1, Ordering::Relaxed);
        let handles = InodeHandles {
            config: self.config.clone(),
            counters: self.counters.clone(),
            memory: self.memory.clone(),
            dropbehind: self.dropbehind.clone(),
            dirty: domain.dirty.clone(),
            dirty_list: domain.clone(),
        };
        // Unlinked between the open and this lock (a `remove_file` that
        // ran in between found no inode to mark): keep it out of the table,
        // and let its last handle discard its data, as the mark does.
        let unlinked = store.is_unlinked().unwrap_or(false);
        let inode = Arc::new(Inode::new(id, store, writable, handles));
        inode.handle_opened();
        if unlinked {
            inode.mark_unlinked();
        } else {
            table.insert(info.store_id, inode.clone());
        }
        Ok(inode)
    }

    /// The domain of `device_id`, started on first use.
    fn domain_for(self: &Arc<Self>, device_id: u64) -> io::Result<Arc<Domain>> {
        let mut domains = locks::lock(&self.domains);
        if let Some(domain) = domains.get(&device_id) {
            return Ok(domain.clone());
        }
        let weak: Weak<Shared> = Arc::downgrade(self);
        let on_idle = move |inode: &Arc<Inode>| {
            if let Some(shared) = weak.upgrade() {
                shared.forget_inode_if_idle_later(inode);
            }
        };
        let nr_workers = crate::policy::route::Route::new(&self.config).nr_workers;
        let domain = crate::writeback::worker::start_domain(
            device_id,
            DomainDirty::new(
                &self.dirty,
                nr_workers,
                BackgroundBudget::new(
                    self.config.sync_latency_target_us,
                    self.config.io_max_bytes,
                    self.counters.clone(),
                ),
            ),
            self.config.clone(),
            self.io.clone(),
            &self.counters,
            Box::new(on_idle),
        )?;
        domains.insert(device_id, domain.clone());
        Ok(domain)
    }

    /// [`Shared::forget_inode_if_idle`] for the flusher: a worker thread
    /// does it (forgetting syncs the inode, and the flusher must never wait
    /// for writeback: its own passes of that inode may still be in flight,
    /// and only it completes them), if it is worth a look.
    pub fn forget_inode_if_idle_later(self: &Arc<Self>, inode: &Arc<Inode>) {
        if self.nr_inodes() > MAX_CACHED_INODES {
            let shared = self.clone();
            let inode = inode.clone();
            self.workers.run(Box::new(move || {
                if !shared.is_closed() {
                    shared.forget_inode_if_idle(&inode);
                }
            }));
        }
    }

    /// Called when an inode may have become idle (last handle closed, or
    /// the flusher cleaned it). Idle inodes stay cached, like the kernel's
    /// inode cache, so reopening a file finds its data; only past
    /// [`MAX_CACHED_INODES`] is an idle inode forgotten, after its data was
    /// made durable (an error keeps it, so the next open or the cache close
    /// reports it).
    pub fn forget_inode_if_idle(&self, inode: &Arc<Inode>) {
        if self.nr_inodes() > MAX_CACHED_INODES {
            self.forget_inode(inode);
        }
    }

    /// Forgets every idle inode, whatever their number, giving their
    /// backing descriptors back: for an open that ran out of descriptors
    /// (`EMFILE`/`ENFILE`). Returns how many were forgotten.
    pub fn forget_idle_inodes(&self) -> usize {
        let inodes: Vec<Arc<Inode>> = locks::lock(&self.inodes).values().cloned().collect();
        for inode in &inodes {
            if inode.open_handles() == 0 {
                self.unlist_if_clean(inode);
            }
        }
        inodes.iter().filter(|inode| self.forget_inode(inode)).count()
    }

    /// Forgets `inode` if it is idle, after its data was made durable;
    /// returns whether it was.
    fn forget_inode(&self, inode: &Arc<Inode>) -> bool {
        let idle = |i: &Inode| i.open_handles() == 0 && !i.has_dirty() && !i.is_listed();
        if !idle(inode) {
            return false;
        }
        if inode.needs_store_sync() && inode.write_and_sync(SyncKind::All, Reason::Close).is_err() {
            return false;
        }
        let mut table = locks::lock(&self.inodes);
        if !idle(inode) || inode.needs_store_sync() {
            return false;
        }
        let key = inode.info().store_id;
        if matches!(table.get(&key), Some(i) if Arc::ptr_eq(i, inode)) {
            table.remove(&key);
        }
        drop(table);
        let _bulk = BulkFree::begin();
        inode.drop_all_clean();
        true
    }

    /// [`crate::Cache::remove_file`]: unlinks `path`; if that removed the
    /// last name of a cached file, the file's inode leaves the table (a new
    /// file that gets its inode number is a new inode) and its data is
    /// discarded unwritten, now or when its last handle closes.
    pub fn remove_file(&self, path: &Path) -> io::Result<()> {
        let _op = self.enter_op()?;
        // The name's identity before it goes (a symlink is removed, not
        // followed, as unlink(2) does).
        let id = self.io.store_id_at(path, Symlink::NoFollow)?;
        self.io.remove_name(path)?;
        if let Some(id) = id {
            self.drop_if_unlinked(id);
        }
        Ok(())
    }

    /// [`crate::Cache::rename`]: renames `from` to `to`; the cached inode
    /// follows the file (inodes are keyed by identity, not name), and a
    /// replaced `to` whose last name that was loses its cached data as
    /// [`Shared::remove_file`] drops it.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let _op = self.enter_op()?;
        let replaced = match self.io.store_id_at(to, Symlink::NoFollow) {
            Ok(id) => id,
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        self.io.rename_name(from, to)?;
        if let Some(id) = replaced {
            self.drop_if_unlinked(id);
        }
        Ok(())
    }

    /// After a name of the file `id` went: if that was its last name, its
    /// inode leaves the table and its data is discarded unwritten, now or
    /// when its last handle closes.
    fn drop_if_unlinked(&self, id: (u64, u64)) {
        let inode = {
            let mut table = locks::lock(&self.inodes);
            let Some(inode) = table.get(&id).cloned() else { return };
            // Other hard links keep the data readable: then the cache keeps
            // it too. A failed fstat keeps it as well (nothing is lost).
            if !inode.store().is_unlinked().unwrap_or(false) {
                return;
            }
            table.remove(&id);
            inode.mark_unlinked();
            inode
        };
        // SeqCst: see `Inode::mark_unlinked`. Handles only go away now (no
        // open finds the inode), and the last to go discards.
        if inode.open_handles() == 0 {
            self.discard_unlinked(&inode);
        }
    }

    /// Throws away an unlinked inode's data (no handle is left), and takes
    /// it off its domain's dirty list at once: the list's reference would
    /// otherwise keep its descriptor, and so the file's blocks on disk,
    /// until the flusher's next look at it.
    pub fn discard_unlinked(&self, inode: &Arc<Inode>) {
        inode.discard_all();
        self.unlist_if_clean(inode);
    }

    /// Takes a clean inode off its domain's dirty list: a sync or a
    /// discard may have cleaned it while listed, and a listed inode never
    /// counts as idle.
    fn unlist_if_clean(&self, inode: &Arc<Inode>) {
        if inode.is_listed() {
            let domain = locks::lock(&self.domains).get(&inode.info().device_id).cloned();
            if let Some(domain) = domain {
                domain.unlist_clean(inode);
            }
        }
    }

    /// [`crate::Cache::forget`]: if the file `path` names is cached and no
    /// handle has it open, writes it back, syncs it and drops it from the
    /// cache. Returns whether it did.
    pub fn forget(&self, path: &Path) -> io::Result<bool> {
        let _op = self.enter_op()?;
        let id = match self.io.store_id_at(path, Symlink::Follow) {
            Ok(Some(id)) => id,
            Ok(None) => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let Some(inode) = locks::lock(&self.inodes).get(&id).cloned() else { return Ok(false) };
        if inode.open_handles() != 0 {
            return Ok(false);
        }
        inode.write_and_sync(SyncKind::All, Reason::Close)?;
        self.unlist_if_clean(&inode);
        Ok(self.forget_inode(&inode))
    }

    /// Writes back and syncs every inode; returns the first error.
    pub fn sync_everything(&self, reason: Reason) -> io::Result<()> {
        let inodes: Vec<Arc<Inode>> = locks::lock(&self.inodes).values().cloned().collect();
        let mut first_err = None;
        for inode in inodes {
            if let Err(e) = inode.write_and_sync(SyncKind::All, reason) {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Closes the cache: refuses new operations, waits for those inside,
    /// writes back and syncs everything, stops the threads and frees the
    /// memory. Returns the first writeback or sync error; later calls do
    /// nothing.
    pub fn shutdown(&self) -> io::Result<()> {
        // Refuse new I/O first, so no write can land after the final sync.
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let was_open = self.dirty.close();
        debug_assert!(was_open, "the dirty accounting closes with the cache");
        // Wait for operations already inside (throttled writers see
        // `closed` and stop waiting); new ones fail with EBADF.
        drop(locks::write(&self.ops_gate));
        let result = self.sync_everything(Reason::Close);
        self.workers.stop();
        self.range_writer.stop();
        let domains: Vec<Arc<Domain>> = locks::lock(&self.domains).drain().map(|(_, d)| d).collect();
        for d in domains {
            d.stop();
        }
        // After the flushers: their last completions queue drop-behind
        // folios too.
        self.dropbehind.stop();
        self.dirty.clear_domains();
        let inodes: Vec<Arc<Inode>> = locks::lock(&self.inodes).drain().map(|(_, i)| i).collect();
        let bulk = BulkFree::begin();
        for inode in &inodes {
            inode.drop_all_clean();
        }
        self.memory.evictor.clear();
        // Folios still mapped (busy, or dirty after failed writeback) go
        // with the inodes; then the pooled buffers: nothing will reuse
        // them, and open handles could keep the pool alive long after the
        // close.
        drop(inodes);
        // Buffers given back wait for lock-free readers; none of this
        // cache's can start now, and those inside finish their copy.
        crate::base::epoch::reclaim_all();
        self.memory.pool.shrink_all();
        drop(bulk);
        self.dirty.progress.made();
        debug_assert_eq!(self.nr_inodes(), 0);
        // Everything is written and synced (or reported lost with the
        // cache): the guardian has nothing to keep.
        if let Some(guardian) = &self.memory.guardian {
            guardian.closed();
        }
        if let Some(publisher) = &self.publisher {
            publisher.stop(self.figures());
        }
        result
    }
}

/// The cache's board (see [`super::watch`]), over a real backend: named
/// after the program. A process that cannot make one (no `memfd`) runs
/// without, and `wbcache stat` does not see its cache.
fn create_board(io: &dyn Io) -> Option<Arc<Board>> {
    #[cfg(any(test, feature = "sim"))]
    if io.kind() == crate::io::IoKind::Sim {
        return None;
    }
    #[cfg(not(any(test, feature = "sim")))]
    let _ = io;
    Board::create(&crate::base::sys::program_name()).ok().map(Arc::new)
}

/// The cache's guardian (see [`crate::guardian`]), unless `guardian=off`:
/// with a process over a real backend, the table alone over the simulated
/// one. A cache that cannot have one (no `memfd`, no `fork`) runs without,
/// and says so once on standard error: a crash of the process then loses
/// what was not written back.
fn start_guardian(config: &Config, io: &dyn Io, board: Option<&Board>) -> Option<Arc<Guardian>> {
    if !config.guardian {
        return None;
    }
    #[cfg(any(test, feature = "sim"))]
    let process =
        if io.kind() == crate::io::IoKind::Sim { GuardianProcess::MemoryOnly } else { GuardianProcess::Spawn };
    #[cfg(not(any(test, feature = "sim")))]
    let process = {
        let _ = io;
        GuardianProcess::Spawn
    };
    // The guardian process gets its own descriptor of the board.
    let board_fd = board.and_then(|board| crate::base::sys::dup_above_program_descriptors(board.fd()).ok());
    match Guardian::start(config.capacity_bytes, process, board_fd) {
        Ok(guardian) => Some(guardian),
        Err(e) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!("wbcache: no guardian ({e}): a crash of this process loses the data not yet written back")
            });
            None
        }
    }
}
