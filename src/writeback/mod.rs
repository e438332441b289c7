//! Writeback: when, which and how dirty data goes to the backing store.
//!
//! - [`domain`]: a device's writeback workers and their dirty inode lists,
//!   over its dirty accounting (`crate::policy::dirty::DomainDirty`).
//! - [`worker`] and [`inflight`]: a writeback worker's loop and its passes
//!   in flight; [`policy`]: its decisions, as pure functions.
//! - [`sync_range`]: `sync_file_range`'s writes, started and waited on.
//!
//! One writeback pass over an inode (collect, build I/Os, complete) and
//! fsync are the inode's own methods (`inode::pass`, `inode::sync`): this
//! layer decides when and which, and drives them through those methods
//! without touching inode state itself. The inode reaches this layer only
//! through `inode::DirtyInodeList`; which worker writes which data is
//! `policy::route`, below the inode, because a pass consults it for a
//! worker's share.

pub mod domain;
pub mod inflight;
pub mod policy;
pub mod sync_range;
pub mod worker;
