//! Readahead, after the kernel's: a read that continues the previous one
//! is sequential; the first sequential miss reads a window synchronously,
//! and when the reader crosses the window's trigger point the next,
//! doubled window (up to `readahead_max`) is issued asynchronously, so the
//! device is busy ahead of the reader. A random read resets the state and
//! reads only what it needs.
//!
//! - [`workers`]: [`Workers`], the cache's worker threads, which fill the
//!   asynchronous windows (and run small jobs for the flusher).
//! - [`window`]: [`Readahead`], one open handle's state, a pure state
//!   machine: blocks in, ranges out; the caller does the I/O.
//!
//! Neither imports the other: a handle's read asks its `Readahead` what to
//! read and hands an asynchronous window to the cache's `Workers`. A handle
//! owns its `Readahead`; the cache owns its `Workers`.

pub mod window;
pub mod workers;

pub use window::{Decision, IdleRead, Readahead};
pub use workers::Workers;
