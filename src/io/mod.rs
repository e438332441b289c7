//! I/O backends: the only place wbcache touches a backing store.
//!
//! Every backend implements [`Io`] (open a backing store) and returns
//! [`BackingStore`] objects that execute *one attempt* of a batch of
//! [`IoOp`]s. The generic driver [`run_batch`] owns the retry policy shared by
//! all backends: short transfers are resubmitted for the remainder,
//! `EINTR`/`EAGAIN` are retried, a zero-byte read is end of file, and every
//! other negative result becomes a named `io::Error` on that op only.
//!
//! Invariants:
//! - Buffers are borrowed for the whole synchronous [`run_batch`] call, so a
//!   buffer always outlives the I/O that uses it (no I/O survives the call).
//!   The one asynchronous path, [`queue::WriteQueue`] (the flusher's
//!   writes), owns its buffers (`Arc`s) until each write's completion.
//! - For an O_DIRECT store, every offset, length and buffer address is a
//!   multiple of [`BLOCK_SIZE`]; callers (the folio code) guarantee it and the
//!   driver asserts it.
//!
//! Backends: `uring` (io_uring, one ring per submitting thread), `threads`
//! (pread/pwrite on a small pool; the fallback when io_uring cannot be set up)
//! and `sim` (in memory, seeded faults and a crash model, for tests).
//!
//! Layering inside the folder, top first: this file (which picks a
//! backend); the backends `uring`, `threads` and `sim`; `backend` (the
//! [`Io`] trait and the cache's I/O threads); `fd` (stores on descriptors)
//! and `queue` (asynchronous writes); `store` (the [`BackingStore`] trait,
//! its ops and the driver). The rest of the crate names these through the
//! re-exports below; inside the folder each module names the one that
//! defines an item.

use std::sync::Arc;

pub mod backend;
pub mod fd;
pub mod queue;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod store;
pub mod threads;
pub mod uring;

pub use backend::{spawn_io_thread, spawn_io_worker, thread_cpu_us, Io, Ready};
pub use store::*;

/// Opens the backend named by `kind`. `Uring` falls back to `Threads` when a
/// ring cannot be created here (seccomp, `kernel.io_uring_disabled`, old
/// kernel); the returned backend's `kind()` tells which one runs.
pub fn open_backend(kind: IoKind, io_depth: u32) -> Arc<dyn Io> {
    match kind {
        IoKind::Uring => match uring::UringIo::new(io_depth) {
            Ok(u) => Arc::new(u),
            Err(_) => Arc::new(threads::ThreadsIo::new(io_depth)),
        },
        IoKind::Threads => Arc::new(threads::ThreadsIo::new(io_depth)),
        #[cfg(any(test, feature = "sim"))]
        IoKind::Sim => Arc::new(sim::SimIo::new(sim::SimConfig::default())),
    }
}
