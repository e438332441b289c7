//! # wbcache: a userspace page cache and writeback engine
//!
//! wbcache gives applications buffered I/O — cached reads, write-back
//! writes, `fsync` — on files and raw block devices, without the kernel page
//! cache's global side effects. Underneath it does O_DIRECT I/O through
//! io_uring (or a thread pool where io_uring is unavailable).
//!
//! ```no_run
//! use wbcache::{Cache, Config, OpenOptions};
//! # fn main() -> std::io::Result<()> {
//! let cache = Cache::new(Config::from_options("capacity=256M,dirty_limit=64M")?)?;
//! let file = cache.open("/tmp/data.bin", &OpenOptions::read_write_create())?;
//! file.write_at(b"hello, page cache", 0)?;   // copied into the cache, dirty
//! let mut buf = [0u8; 5];
//! file.read_at(&mut buf, 0)?;                 // served from the cache
//! file.sync_all()?;                           // durable on return
//! cache.close()?;                             // writes back and syncs all
//! # Ok(()) }
//! ```
//!
//! ## Glossary
//! - **backing store**: the file or block device under a wbcache file, opened O_DIRECT.
//! - **inode**: state for one backing store, shared by all its handles.
//! - **folio**: naturally aligned power-of-two run of blocks with one buffer.
//! - **block**: 4 KiB, the unit of uptodate/dirty tracking and of I/O alignment.
//! - **writeback domain**: dirty accounting and flushing unit, one per device.
//! - **flusher**: the thread of a domain that writes dirty folios back.
//! - **throttle**: delaying writers over the dirty thresholds.
//! - **reason**: why a writeback happened ([`Reason`]).
//!
//! ## Semantics
//! After [`File::sync_all`]/[`File::sync_data`] succeeds, every byte written
//! to that file before the call is on the backing store. A failed writeback
//! keeps the data dirty and is reported once per handle by the next sync
//! (errseq); later syncs retry. Dropping a [`File`] does not write back;
//! closing the [`Cache`] writes back and syncs everything. A crash of the
//! process loses nothing a call acknowledged (the cache's guardian process
//! writes its dirty data to the files, `guardian=on`); a crash of the
//! machine loses dirty data not yet written back, which `expire_ms`
//! (default 1 s) bounds.

mod api;
mod base;
mod buf;
mod config;
mod guardian;
mod inode;
mod io;
mod mapping;
mod policy;
mod readahead;
mod stats;
mod writeback;

pub use api::cache::Cache;
pub use api::file::{
    Advice, Allocation, File, FileCursor, OpenOptions, SyncRangeFlags, WriteFlags, RESIDENT_CACHED, RESIDENT_DIRTY,
    RESIDENT_WRITEBACK,
};
/// Reading a running cache's figures from another process (what `wbcache
/// stat` and `wbcache top` show): [`watch::read_board`] and
/// [`watch::read_unwritten_files`] over the shared memory every cache
/// keeps.
pub use api::watch;
pub use buf::user::{RawIov, IOV_MAX};
pub use buf::AlignedBuf;
pub use config::{parse_size, BackgroundIoprio, Config, Routing, OPTION_KEYS};
/// The simulated I/O backend: in memory, with seeded latency, faults and a
/// crash model (written vs. durable images). Only with the `sim` feature;
/// use it through [`Cache::with_sim`].
#[cfg(feature = "sim")]
pub use io::sim;
pub use io::{errno_of, IoKind};
pub use stats::{DeviceClass, DeviceClassSummary, IoClass, LatencySummary, Reason, Stats, WorkerStats};
