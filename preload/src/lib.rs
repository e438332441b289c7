//! `libwbcache_preload.so`: unmodified programs' file I/O through one
//! process-wide wbcache. Loaded with `LD_PRELOAD` (`wbcache run` sets it
//! up), it interposes the C library's file calls; calls on regular files
//! and block devices under the directories in `WBCACHE_PATHS` are served
//! by the cache (built from `WBCACHE_OPTIONS`), every other call goes to
//! the C library unchanged.
//!
//! Its modules (private: `cargo doc --document-private-items` shows them),
//! in layers, top first; a module uses only those below its own
//! (`tests/meta/architecture.rs` checks it):
//!
//! - `aliases`: the C library's other names for the calls served below;
//! - `stdio`: streams on managed files (`fopen`, `fdopen`, `freopen`,
//!   `fileno`), whose reads and writes come back through `rw`;
//! - `fdops`: duplication, status flags, copies, `mmap`, `ioctl`;
//! - `meta`: the `stat` family and the path calls (`truncate`, `rename`,
//!   `unlink`);
//! - `open`, `control`, `rw`: opening and closing, sync/size/advice
//!   calls, reads and writes;
//! - `lifetime`: the process's start (the state's build), end, `exec`,
//!   spawn and `fork`: the exit and fork hooks;
//! - `stats`, `handover`: the cache's statistics for a program that asks
//!   (`wbcache_preload_stats_json`, the one call added, not interposed)
//!   and at exit; handing files to the kernel;
//! - `watch`: the watcher (other processes' opens of cached files);
//! - `record`: the crash test's recorder (`wbcache crashtest`): every
//!   call that changes a file or name under its directory, and every
//!   durability point, written to a trace when one is asked for;
//! - `state`, `table`, `streams`: the cache, the managed directories and
//!   per-file cross-process locks; managed descriptors and their shared
//!   descriptions; the registry of cookie streams;
//! - `guard`, `errno`, `real`: re-entry (this library's own calls go to
//!   the C library), failing the C way, the C library's functions behind
//!   the interposed ones.
//!
//! The engine's own I/O never comes through here: it makes its system
//! calls directly. Not interposed, and so not cached (docs/run.md lists
//! them): the I/O of glibc's own standard streams when the program puts
//! a managed descriptor under them with `dup2`, of streams opened with a
//! character set (`,ccs=`), and of `dprintf`/`vdprintf` on a managed
//! descriptor (the C library writes them itself); `io_uring` and Linux
//! AIO submitted by the program; `fork` (a child must not use its
//! parent's managed descriptors); calls made with `syscall(2)`.

mod aliases;
mod control;
mod errno;
mod fdops;
mod guard;
mod handover;
mod lifetime;
mod meta;
mod open;
mod real;
mod record;
mod rw;
mod state;
mod stats;
mod stdio;
mod streams;
mod table;
mod watch;
