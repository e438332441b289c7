//! `libwbcache_preload.so`: unmodified programs' file I/O through one
//! process-wide wbcache. Loaded with `LD_PRELOAD` (`wbcache run` sets it
//! up), it interposes the C library's file calls; calls on regular files
//! and block devices under the directories in `WBCACHE_PATHS` are served
//! by the cache (built from `WBCACHE_OPTIONS`), every other call goes to
//! the C library unchanged.
//!
//! - [`real`]: the C library's functions behind the interposed ones;
//! - [`guard`]: re-entry (this library's own calls go to the C library);
//! - [`state`]: the cache, the managed directories, per-file
//!   cross-process locks, exit;
//! - [`table`]: managed descriptors and their shared descriptions;
//! - [`open`], [`rw`], [`control`], [`meta`], [`fdops`], [`lifetime`]:
//!   the interposed calls, by kind.
//!
//! The engine's own I/O never comes through here: it makes its system
//! calls directly. Not interposed, and so not cached (the README lists
//! them): stdio's internal reads and writes, `io_uring` and Linux AIO
//! submitted by the program, `fork` (a child must not use its parent's
//! managed descriptors), and calls made with `syscall(2)`.

mod control;
mod errno;
mod fdops;
mod guard;
mod lifetime;
mod meta;
mod open;
mod real;
mod rw;
mod state;
mod table;
