//! What a test reads back: the counters ([`SimStats`]), the log of
//! successful writes ([`SimWrite`]) and the errors returned per path
//! ([`PathErrors`]).
//!
//! The disk state owns the counters, the log (while recording) and the errors
//! per path, and updates them under its lock; a test gets copies
//! (`SimIo::stats`,
//! `SimIo::write_log`), never a live view.

use crate::io::store::IoPriority;
use std::path::PathBuf;

/// Counters since `SimIo::new`; see the [`sim`](super)
/// module doc for what they count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Read attempts.
    pub reads: u64,
    /// Write attempts.
    pub writes: u64,
    /// Of those, the attempts of buffered writes
    /// (`BackingStore::write_tail`,
    /// with `SimConfig::tail_writes`).
    pub buffered_writes: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// `sync` calls.
    pub syncs: u64,
    /// `len` calls: the `fstat` a real file answers, which the commit path
    /// avoids (on Linux 6.13+ a `stat` makes the next write update the
    /// file's ctime).
    pub len_queries: u64,
    /// Injected faults (`SimIo::inject`) that fired.
    pub faults_fired: u64,
    /// Random `EINTR`/`EAGAIN` returned (`retryable_error_percent`).
    pub retryable_errors: u64,
    /// Random short transfers (`short_transfer_percent`).
    pub short_transfers: u64,
    /// Write attempts and syncs that failed with an injected fault or the
    /// `SimIo::set_write_error_all`
    /// switch (not those of dead stores).
    pub write_errors: u64,
    /// Read attempts that failed with an injected
    /// `Fault::ReadEio`.
    pub read_errors: u64,
    /// Whole `submit_once` calls refused (`submit_error_percent`).
    pub submit_errors: u64,
    /// Stalls of `latency_spike_us` (`latency_spike_percent`).
    pub latency_spikes: u64,
    /// Write calls that began while another call's write to an overlapping
    /// range of the same file was in flight (from the start of its call,
    /// latency included, to its end): two versions of a block in flight at
    /// once, which could land in either order. The engine never does this.
    pub overlapping_writes: u64,
}

/// One successful write attempt, as
/// `SimIo::write_log` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimWrite {
    /// The path its store was opened with.
    pub path: PathBuf,
    pub offset: u64,
    pub len: usize,
    /// The class the engine gave it (its `ioprio`).
    pub priority: IoPriority,
}

/// Errors the sim returned for one path, as [`SimStats::write_errors`] and
/// [`SimStats::read_errors`] count them.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PathErrors {
    pub(super) write: u64,
    pub(super) read: u64,
}
