//! What a test sets up: the simulation's knobs ([`SimConfig`]) and the
//! kinds of fault it can inject ([`Fault`]).
//!
//! Both are plain values. The backend keeps its `SimConfig` unchanged from
//! `SimIo::new` on, so a store reads it without the
//! lock; the fault rules the disk state holds each carry a `Fault`, and
//! only the attempt and sync paths decide whether one fires.

/// Knobs of the simulation. All percentages are per attempt, 0..=100.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Seed of every random decision (latency, errors, short transfers).
    pub seed: u64,
    /// 0 = no sleep; otherwise each attempt sleeps a seeded random duration
    /// in `0..=latency_us_max` microseconds before it is executed. The ops of
    /// one `submit_once` call are in flight together, so the call sleeps the
    /// longest of their draws once.
    pub latency_us_max: u32,
    /// Chance that an attempt transfers only a leading part of what it asked
    /// for: at least one block with `direct_io`, at least one byte otherwise.
    /// An attempt that can only be transferred whole is never shortened.
    pub short_transfer_percent: u32,
    /// Chance that an attempt fails with `EINTR` or `EAGAIN` (a coin flip
    /// picks which) and transfers nothing.
    pub retryable_error_percent: u32,
    /// Enforce O_DIRECT alignment: offsets and iovec lengths must be
    /// multiples of `BLOCK_SIZE`, else `EINVAL`.
    pub direct_io: bool,
    /// The file system's largest file size: a write reaching past it is
    /// shortened, one starting at or past it fails with `EFBIG`, as
    /// `pwrite(2)` does.
    pub max_file_len: u64,
    /// Chance that a whole
    /// `BackingStore::submit_once`
    /// call is refused, as an `io_uring_enter` interrupted or out of
    /// resources would be: every op it carries fails with `EINTR` or
    /// `EAGAIN` (one coin flip for all) and transfers nothing, so the driver
    /// resubmits the whole batch.
    pub submit_error_percent: u32,
    /// Chance that a `submit_once` or `sync` call stalls for
    /// `latency_spike_us` on top of any `latency_us_max` draw: a device that
    /// is usually fast and now and then not (a queue full, a firmware
    /// hiccup), which is when requests pile up behind each other.
    pub latency_spike_percent: u32,
    /// Length of one stall, in microseconds (see `latency_spike_percent`).
    pub latency_spike_us: u32,
    /// The store writes a file's partial last block through a buffered path
    /// (`BackingStore::write_tail`), as
    /// a regular file's `FdStore` does: those writes need no alignment and
    /// never pad the file. Off, writeback writes the tail block whole and the
    /// sync cuts the padding.
    pub tail_writes: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            latency_us_max: 0,
            short_transfer_percent: 0,
            retryable_error_percent: 0,
            direct_io: true,
            max_file_len: i64::MAX as u64,
            submit_error_percent: 0,
            latency_spike_percent: 0,
            latency_spike_us: 0,
            tail_writes: false,
        }
    }
}

/// An injected fault on one 4096-byte block of one path (see
/// `SimIo::inject`). An attempt *touches* a block
/// when the bytes it would transfer (for a read: clipped at end of file)
/// overlap it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// A read attempt touching the block fails with `EIO`, transferring
    /// nothing.
    ReadEio,
    /// A write attempt touching the block fails with `EIO`, writing nothing.
    WriteEio,
    /// A write attempt touching the block fails with `ENOSPC`, writing
    /// nothing.
    Enospc,
    /// A read attempt touching the block comes back short: it stops at the
    /// start of the block, or, when the attempt starts inside the block, at
    /// the end of the block. An attempt lying wholly inside the block cannot
    /// be shortened that way; the fault then does not fire and is not
    /// consumed. Every firing transfers at least one byte, so the driver
    /// still makes progress and completes the op with exact data.
    ShortRead,
    /// As [`Fault::ShortRead`], for writes.
    ShortWrite,
    /// A `sync` (fsync/fdatasync) of the path fails with `EIO` and makes
    /// nothing durable: the data reached the device's cache but the flush
    /// failed. The block index is ignored; attempts never fire it.
    SyncEio,
}

impl Fault {
    /// Whether the fault fires on read or write attempts of this direction
    /// (a sync fault fires on neither).
    pub(super) fn hits_attempt(self, is_write: bool) -> bool {
        match self {
            Fault::WriteEio | Fault::Enospc | Fault::ShortWrite => is_write,
            Fault::ReadEio | Fault::ShortRead => !is_write,
            Fault::SyncEio => false,
        }
    }

    pub(super) fn is_short(self) -> bool {
        matches!(self, Fault::ShortRead | Fault::ShortWrite)
    }
}
