//! Folio buffers: zeroed, block-aligned memory for O_DIRECT I/O, where it
//! comes from and where it goes back to, and the program's own buffers
//! that data is copied between.
//!
//! - [`user`]: the caller's buffers: single, gather (writev) and scatter
//!   (readv) lists.
//! - [`pool`]: [`BufPool`], a cache's pool of freed folio buffers, reused
//!   by new folios of the same size.
//! - [`aligned`]: [`AlignedBuf`], one buffer. Buffers of 2 MiB and more are
//!   anonymous mappings of their own (aligned to huge pages and asked for
//!   them); smaller ones are slots of 2 MiB slabs shared process-wide.
//! - `slab`: the process-wide allocator of 2 MiB slabs per size class,
//!   with a stash that the `wbc-slab-refill` thread keeps faulted in ahead
//!   of demand, and [`BulkFree`] to return many slots under one lock.
//! - `map`: the sizes buffers are built from (block, huge page) and the
//!   kernel's anonymous mappings they are cut from.
//!
//! Layering inside the folder, top first: `user`, `pool`, `aligned`,
//! `slab`, `map`. Ownership: an `AlignedBuf` owns its memory and gives it
//! back (to its slab or to the kernel) when dropped; the pool owns the
//! buffers it holds; the slab allocator owns slabs and their free slots.
//! Nothing here knows folios.

pub mod aligned;
mod map;
pub mod pool;
mod slab;
pub mod user;

pub use aligned::AlignedBuf;
pub use map::BLOCK_SIZE;
pub use pool::BufPool;
pub use slab::BulkFree;
