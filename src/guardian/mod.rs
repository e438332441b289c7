//! The guardian: what makes a crash of the process lose nothing a write
//! acknowledged, as on the kernel's page cache.
//!
//! Written data lives in guarded memory ([`arena`]): shared memory whose
//! table records, for every buffer holding dirty blocks, its file and
//! offset, and every managed file's size. A guardian process per cache
//! ([`process`]) maps both, holds a descriptor of every managed file (sent
//! over a Unix socket as each is opened) and waits for the owner's death;
//! if the owner dies without closing the cache it writes the dirty blocks
//! and sizes through the kernel's page cache ([`replay`]) and exits. On a
//! clean close it exits with nothing to do.
//!
//! Ownership: a [`Guardian`] belongs to one cache (its `Memory`); each
//! inode holds a [`GuardedFile`], its file slot in the table, released
//! when the inode goes.

pub mod arena;
pub mod board;
pub mod process;
pub mod replay;

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use arena::{Arena, FILE_SLOTS, STATE_CLOSED};

/// One cache's guarded memory and the link to its guardian process.
pub struct Guardian {
    arena: Arc<Arena>,
    /// The guardian process, started with the first managed file (a
    /// process that never opens one, such as a shell under `wbcache run`,
    /// costs no process); `None` inside when it could not start. Unset for
    /// good without a process (a simulated backend: the table alone,
    /// replayed by the simulation's process-crash event).
    link: OnceLock<Option<process::Link>>,
    spawn: bool,
    /// The cache's board, which the guardian process maps to say what it
    /// does after the owner's death (see [`board`]).
    board_fd: Option<std::os::fd::OwnedFd>,
    /// The library file this process loaded, opened as the cache starts,
    /// for the guardian process to load (see `process::open_loaded_library`).
    library_fd: Option<std::os::fd::OwnedFd>,
    files: Mutex<FileSlots>,
}

#[derive(Default)]
struct FileSlots {
    free: Vec<u32>,
    next: u32,
    /// The store (device, inode) of each slot in use: what a replay
    /// without a process (the simulation's) writes to.
    stores: std::collections::HashMap<u32, (u64, u64)>,
}

/// An inode's place in the crash table: its file slot and generation.
pub struct GuardedFile {
    guardian: Arc<Guardian>,
    slot: u32,
    generation: u32,
}

/// Whether a cache's guarded memory gets a guardian process (and the
/// thread that keeps the arena's memory faulted in), or is memory only (the
/// simulated backend, whose files no other process could write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardianProcess {
    Spawn,
    #[cfg(any(test, feature = "sim"))]
    MemoryOnly,
}

impl Guardian {
    /// Guarded memory for a cache of `capacity_bytes`, and its guardian
    /// process as `process` says, handed `board_fd` (the cache's board).
    pub fn start(
        capacity_bytes: u64,
        process: GuardianProcess,
        board_fd: Option<std::os::fd::OwnedFd>,
    ) -> io::Result<Arc<Guardian>> {
        let arena = Arc::new(Arena::new(capacity_bytes)?);
        let spawn = process == GuardianProcess::Spawn;
        if spawn {
            Arena::start_filler(&arena);
        }
        let files = Mutex::new(FileSlots { next: 1, ..FileSlots::default() });
        let library_fd = if spawn { process::open_loaded_library() } else { None };
        Ok(Arc::new(Guardian { arena, link: OnceLock::new(), spawn, board_fd, library_fd, files }))
    }

    pub fn arena(&self) -> &Arc<Arena> {
        &self.arena
    }

    /// The guardian process's link, started on first use.
    fn link(&self) -> Option<&process::Link> {
        if !self.spawn {
            return None;
        }
        self.link
            .get_or_init(|| {
                let (board, library) = (&self.board_fd, &self.library_fd);
                process::Link::spawn(
                    &self.arena,
                    board.as_ref().map(|fd| fd.as_raw_fd()),
                    library.as_ref().map(|fd| fd.as_raw_fd()),
                )
                .inspect_err(|e| {
                    eprintln!(
                        "wbcache: the guardian process did not start ({e}): a crash of this process loses \
                             the data not yet written back"
                    )
                })
                .ok()
            })
            .as_ref()
    }

    /// A file slot for a new inode of `size` bytes whose store is `fd`
    /// (its identity `store_id`):
    /// the descriptor goes to the guardian, which writes through it if
    /// the owner dies. `None` when the table is full or the guardian
    /// cannot take the descriptor (the file is then not guarded).
    pub fn open_file(self: &Arc<Self>, fd: Option<RawFd>, store_id: (u64, u64), size: u64) -> Option<GuardedFile> {
        let slot = {
            let mut files = crate::base::locks::lock(&self.files);
            let slot = match files.free.pop() {
                Some(slot) => slot,
                None if files.next < FILE_SLOTS => {
                    files.next += 1;
                    files.next - 1
                }
                None => return None,
            };
            files.stores.insert(slot, store_id);
            slot
        };
        let record = self.arena.table().file(slot);
        debug_assert_eq!(record.used.load(Ordering::Relaxed), 0, "a free file slot");
        // Its name, for `wbcache stat`: the path the store's descriptor
        // has now (one readlink, as an inode is first opened).
        let name = fd.and_then(|fd| crate::base::sys::read_link(&format!("/proc/self/fd/{fd}")));
        self.arena.table().set_file_name(slot, name.as_deref().unwrap_or("").as_bytes());
        let generation = record.generation.load(Ordering::Relaxed);
        record.size.store(size, Ordering::Relaxed);
        // A reused slot starts clean of the earlier file's flags.
        record.padded.store(0, Ordering::Relaxed);
        record.cut_owed.store(0, Ordering::Relaxed);
        record.used.store(1, Ordering::Release);
        let file = GuardedFile { guardian: self.clone(), slot, generation };
        if let (Some(fd), Some(link)) = (fd, self.link()) {
            if let Err(e) = link.send_file(slot, fd) {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    eprintln!(
                        "wbcache: the guardian process is gone ({e}): a crash of this process loses the data \
                         not yet written back"
                    )
                });
                return None;
            }
        }
        Some(file)
    }

    /// Hands a duplicate of `fd` to the guardian process (started if it
    /// was not), which keeps it open until it exits.
    pub fn keep(&self, fd: RawFd) -> io::Result<()> {
        match self.link() {
            Some(link) => link.keep(fd),
            None => Ok(()),
        }
    }

    /// The cache closed cleanly: everything is written and synced, the
    /// guardian exits with nothing to do.
    pub fn closed(&self) {
        self.arena.table().header().state.store(STATE_CLOSED, Ordering::Release);
        if let Some(Some(link)) = self.link.get() {
            link.closed();
        }
    }
}

impl Guardian {
    /// Replays the crash table into `sink` now, as the guardian process
    /// does after its owner's death: the simulation's process crash.
    /// Other threads must have stopped writing (they died).
    #[cfg(any(test, feature = "sim"))]
    pub fn replay_into(&self, sink: &mut dyn replay::ReplaySink) -> replay::ReplayReport {
        replay::replay(self.arena.table(), self.arena.bytes(), sink)
    }

    /// The store (device, inode) of file slot `slot`, if in use.
    #[cfg(any(test, feature = "sim"))]
    pub fn store_of(&self, slot: u32) -> Option<(u64, u64)> {
        crate::base::locks::lock(&self.files).stores.get(&slot).copied()
    }
}

impl GuardedFile {
    /// (slot, generation), as buffer records name the file.
    pub fn id(&self) -> (u32, u32) {
        (self.slot, self.generation)
    }

    /// A truncation to `size` begins: the size is recorded first, and a
    /// guardian cuts the store to it.
    pub fn record_cut_owed(&self, size: u64) {
        let record = self.guardian.arena.table().file(self.slot);
        record.size.store(size, Ordering::Relaxed);
        record.cut_owed.store(1, Ordering::Relaxed);
    }

    /// The truncation reached the store: nothing is owed.
    pub fn record_cut_done(&self) {
        self.guardian.arena.table().file(self.slot).cut_owed.store(0, Ordering::Relaxed);
    }

    /// Writeback may have padded the store's tail block past the size (the
    /// guardian cuts it back, as the cache would).
    pub fn record_padded(&self) {
        self.guardian.arena.table().file(self.slot).padded.store(1, Ordering::Relaxed);
    }

    /// The store's tail is cut back to the size: no padding is left.
    pub fn record_unpadded(&self) {
        self.guardian.arena.table().file(self.slot).padded.store(0, Ordering::Relaxed);
    }

    /// The file grew to at least `size` (concurrent writers each raise
    /// it; the largest wins, as with the inode's own size).
    pub fn record_size_at_least(&self, size: u64) {
        self.guardian.arena.table().file(self.slot).size.fetch_max(size, Ordering::Relaxed);
    }

    pub fn arena(&self) -> &Arc<Arena> {
        &self.guardian.arena
    }
}

impl Drop for GuardedFile {
    fn drop(&mut self) {
        let record = self.guardian.arena.table().file(self.slot);
        record.used.store(0, Ordering::Relaxed);
        // Records of this file left in buffers are ignored from now on.
        record.generation.store(self.generation.wrapping_add(1), Ordering::Release);
        if let Some(Some(link)) = self.guardian.link.get() {
            link.release_file(self.slot);
        }
        let mut files = crate::base::locks::lock(&self.guardian.files);
        files.stores.remove(&self.slot);
        files.free.push(self.slot);
    }
}
