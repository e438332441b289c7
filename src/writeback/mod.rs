//! Writeback: when, which and how dirty data goes to the backing store.
//!
//! - [`domain`]: a device's dirty inode list and flusher thread, over its
//!   dirty accounting (`crate::dirty::DomainDirty`).
//! - [`flusher`] and [`inflight`]: the flusher's loop and its passes in
//!   flight.
//! - [`pass`]: one writeback pass over an inode: collect, build I/Os,
//!   complete.
//! - [`sync`]: fsync / fdatasync.
//!
//! This layer sits above the inode: it reads and changes inode state; the
//! inode reaches it only through `inode::DirtyInodeList`.

pub mod domain;
pub mod flusher;
pub mod inflight;
pub mod pass;
pub mod sync;
