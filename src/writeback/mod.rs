//! Writeback: when, which and how dirty data goes to the backing store.
//!
//! - [`domain`]: a device's writeback workers and their dirty inode lists,
//!   over its dirty accounting (`crate::dirty::DomainDirty`).
//! - [`route`]: which worker writes which data (single, rotor, region), as
//!   pure functions.
//! - [`worker`] and [`inflight`]: a writeback worker's loop and its passes
//!   in flight; [`policy`]: its decisions, as pure functions.
//! - [`pass`]: one writeback pass over an inode: collect, build I/Os,
//!   complete.
//! - [`sync`]: fsync / fdatasync; [`sync_range`]: `sync_file_range`.
//!
//! This layer sits above the inode: it reads and changes inode state; the
//! inode reaches it only through `inode::DirtyInodeList`.

pub mod domain;
pub mod inflight;
pub mod policy;
pub mod route;
pub mod sync_range;
pub mod worker;
