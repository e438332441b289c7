//! Writeback: when, which and how dirty data goes to the backing store.
//!
//! - [`domain`]: a device's dirty inode list and flusher thread, over its
//!   dirty accounting (`crate::dirty::DomainDirty`).
//! - [`worker`] and [`inflight`]: a flusher worker's loop and its passes in
//!   flight; [`policy`]: its decisions, as pure functions.
//! - [`pass`]: one writeback pass over an inode: collect, build I/Os,
//!   complete.
//! - [`sync`]: fsync / fdatasync.
//!
//! This layer sits above the inode: it reads and changes inode state; the
//! inode reaches it only through `inode::DirtyInodeList`.

pub mod domain;
pub mod inflight;
pub mod pass;
pub mod policy;
pub mod sync;
pub mod worker;
