//! Watching a cache from outside its process: the owner's publisher, and
//! what `wbcache stat` and `wbcache top` read.
//!
//! Every cache over a real backend keeps a board in shared memory (see
//! `guardian::board`): a thread of the cache, the publisher, writes a
//! sample of its counters there every 250 ms, the same counters
//! [`crate::Cache::stats`] reports, read without any lock a read, write or
//! sync takes. Another process finds the board through `/proc/PID/fd`
//! (a `memfd` named [`BOARD_MEMFD_NAME`]), maps it read-only and reads it
//! with [`read_board`]; the crash table beside it ([`TABLE_MEMFD_NAME`])
//! gives the files holding unwritten data ([`read_unwritten_files`]).
//!
//! Ownership: the publisher belongs to the cache's shared state and stops
//! with it (after a last sample and the board's `closed` state); readers
//! own their mappings.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::base::locks;
use crate::guardian::arena::MappedTable;
use crate::guardian::board::{Board, BoardView, Writable, PUBLISH_INTERVAL};
use crate::guardian::replay::unwritten_bytes_by_file;
use crate::stats::{DeviceClass, Stats};

pub use crate::guardian::board::{BoardReading, CacheState, Figure, Figures, GuardianProgress};

/// The name a cache's board `memfd` has (`/proc/PID/fd/N` links to
/// `/memfd:wbcache-board (deleted)`).
pub const BOARD_MEMFD_NAME: &str = "wbcache-board";
/// The name of a cache's crash table `memfd` (with `guardian=on`).
pub const TABLE_MEMFD_NAME: &str = "wbcache-table";

/// Reads the board `fd` refers to (opened from `/proc/PID/fd/N`).
/// `InvalidData` when it is not a board of this version.
pub fn read_board(fd: &OwnedFd) -> io::Result<BoardReading> {
    BoardView::open(fd, Writable::No).map(|view| view.read())
}

/// A file holding data only the cache has (dirty, or under writeback).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnwrittenFile {
    /// Its path when the cache first opened it (empty when unknown).
    pub name: String,
    pub bytes: u64,
}

/// The files of the crash table `fd` refers to that hold unwritten data,
/// largest first. `InvalidData` when it is not a table of this version.
pub fn read_unwritten_files(fd: &OwnedFd) -> io::Result<Vec<UnwrittenFile>> {
    let table = MappedTable::open(fd)?;
    let view = table.view();
    Ok(unwritten_bytes_by_file(view)
        .into_iter()
        .filter_map(|u| {
            let name = view.file_name_of(u.file, u.generation)?;
            Some(UnwrittenFile { name: String::from_utf8_lossy(&name).into_owned(), bytes: u.bytes })
        })
        .collect())
}

/// A sample of `stats` (a snapshot without the configuration) for the
/// board, taken at `time_ns` on the monotonic clock.
pub(crate) fn figures_of(stats: &Stats, dirty_limit_bytes: u64, time_ns: u64) -> Figures {
    let mut f = Figures::default();
    let device_read = |class: DeviceClass| stats.device[class as usize].bytes;
    for (figure, value) in [
        (Figure::TimeNs, time_ns),
        (Figure::CapacityBytes, stats.capacity_bytes),
        (Figure::CachedBytes, stats.cached_bytes),
        (Figure::DirtyBytes, stats.dirty_bytes),
        (Figure::WritebackBytes, stats.writeback_bytes),
        (Figure::DirtyLimitBytes, dirty_limit_bytes),
        (Figure::Hits, stats.hits),
        (Figure::Misses, stats.misses),
        (Figure::ReadBytes, device_read(DeviceClass::Read) + device_read(DeviceClass::Readahead)),
        (Figure::WrittenBytesTotal, stats.written_bytes_total),
        (Figure::Fsyncs, stats.fsyncs),
        (Figure::FsyncLatencyUsP50, stats.fsync_lat_us.p50_us),
        (Figure::FsyncLatencyUsP99, stats.fsync_lat_us.p99_us),
        (Figure::FsyncLatencyUsMax, stats.fsync_lat_us.max_us),
        (Figure::ThrottleEvents, stats.throttle_events),
        (Figure::WritebackErrors, stats.writeback_errors),
        (Figure::Evictions, stats.evictions),
        (Figure::OpenInodes, stats.open_inodes),
    ] {
        f.set(figure, value);
    }
    f
}

/// What the publisher is asked for each sample: `None` once the cache
/// is gone.
pub(crate) type Sampler = Box<dyn Fn() -> Option<Figures> + Send>;

/// The cache's publisher thread and its board.
pub(crate) struct Publisher {
    board: Arc<Board>,
    /// The process whose thread publishes.
    owner_pid: u32,
    stopping: Arc<(Mutex<bool>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Publisher {
    /// Starts publishing `sample()` on `board` every [`PUBLISH_INTERVAL`].
    pub(crate) fn start(board: Arc<Board>, sample: Sampler) -> io::Result<Publisher> {
        let stopping = Arc::new((Mutex::new(false), Condvar::new()));
        let (thread_board, thread_stopping) = (board.clone(), stopping.clone());
        let thread = std::thread::Builder::new().name("wbcache-board".into()).spawn(move || {
            let (stop, wake) = &*thread_stopping;
            let mut stopped = locks::lock(stop);
            while !*stopped {
                drop(stopped);
                if let Some(figures) = sample() {
                    thread_board.publish(&figures);
                }
                stopped = locks::lock(stop);
                if !*stopped {
                    stopped = wake.wait_timeout(stopped, PUBLISH_INTERVAL).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        })?;
        Ok(Publisher { board, owner_pid: std::process::id(), stopping, thread: Mutex::new(Some(thread)) })
    }

    /// Stops the thread, publishes `last` and marks the board closed;
    /// in a fork child of the owner (whose cache is the parent's copy, and
    /// has no publisher thread), only forgets the thread: the board is
    /// the parent's.
    pub(crate) fn stop(&self, last: Figures) {
        if self.owner_pid != std::process::id() {
            if let Some(thread) = locks::lock(&self.thread).take() {
                std::mem::forget(thread);
            }
            return;
        }
        let (stop, wake) = &*self.stopping;
        *locks::lock(stop) = true;
        wake.notify_all();
        if let Some(thread) = locks::lock(&self.thread).take() {
            let _ = thread.join();
        }
        self.board.publish(&last);
        self.board.set_state(CacheState::Closed);
    }
}
