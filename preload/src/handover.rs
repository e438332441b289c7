//! Handing files to the kernel: one rule, *a description the cache cannot
//! see through is the kernel's*. The moment a managed file's description
//! becomes reachable by code that bypasses the interposed calls, the
//! cache writes the file's dirty data back to the kernel, the kernel's
//! descriptors take their descriptions' positions and status flags, and
//! the cache lets the file go: its calls are the kernel's from then on.
//! That moment is:
//! - `fork` (and `vfork`, a `fork` here): the child shares every
//!   description and uses it through the kernel;
//! - `exec` and `posix_spawn`: the new program inherits the descriptions;
//! - a managed description put on descriptor 0, 1 or 2 (`dup2`, `dup3`,
//!   `dup`, `F_DUPFD`, an `open` that returns one of them): the C
//!   library's own standard streams write and read there with its
//!   internal calls, which this library never sees;
//! - a shared writable `mmap` (the mapping is the kernel's page cache);
//! - another process opening the file (the watcher, `watch.rs`).
//!
//! While a process has a handed-over (or otherwise kernel-served)
//! descriptor of a file open, it opens the file through the kernel again
//! (`state::track_uncached`): caching it beside a description the kernel
//! serves would let the two diverge. Once the last such descriptor
//! closes, the next open caches the file afresh.
//!
//! Invariant: a hand-over waits for the calls in flight on the file's
//! descriptions (`table::begin_hand_over`), so no write is acknowledged
//! by the cache after its data went to the kernel; a failed writeback
//! leaves the file cached (its data still dirty) and is returned.

use std::io;
use std::sync::Arc;

use crate::table::{self, Desc};
use crate::{open, state};

/// Hands the file `key` to the kernel, or every managed file when `None`.
/// A file whose dirty data cannot be written back stays cached (its
/// descriptors managed) and the first such error is returned.
pub fn hand_over(key: Option<(u64, u64)>) -> io::Result<()> {
    let Some(state) = state::built() else { return Ok(()) };
    let marked = table::begin_hand_over(key);
    if marked.is_empty() {
        return Ok(());
    }
    let mut first_error = None;
    let mut written: Vec<(libc::c_int, Arc<Desc>)> = Vec::with_capacity(marked.len());
    let mut failed: Vec<(libc::c_int, Arc<Desc>)> = Vec::new();
    for (fd, desc) in marked {
        // Each description once (dups share one); a file whose writeback
        // failed keeps every description of it.
        let outcome = if failed.iter().any(|(_, d)| d.key == desc.key) {
            Err(())
        } else if written.iter().any(|(_, d)| d.key == desc.key) {
            Ok(())
        } else {
            open::write_back(&desc).map_err(|e| {
                state::complain(&format!("{}: writing back for the kernel failed: {e}", desc.path.display()));
                first_error.get_or_insert(e);
            })
        };
        match outcome {
            Ok(()) => written.push((fd, desc)),
            Err(()) => failed.push((fd, desc)),
        }
    }
    table::abort_hand_over(&failed);
    for (fd, desc) in &written {
        table::align_kernel_descriptor(*fd, desc);
    }
    table::end_hand_over(&written);
    let paths = let_go(state, written);
    for (key, path) in paths {
        // The cache's copy (clean now) and what it knew of the size go:
        // the kernel's file may change through the handed descriptors.
        let _ = state.take_closed(key);
        if let Err(e) = state.with_cache(|cache| cache.forget(&path).map(drop)) {
            state::complain(&format!("{}: forgetting the cached copy failed: {e}", path.display()));
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Gives up the cache locks of handed-over descriptors and counts them as
/// kernel-served; returns each file once, with its path, after every
/// description of it was dropped (its cache handles closed).
fn let_go(state: &state::State, handed: Vec<(libc::c_int, Arc<Desc>)>) -> Vec<((u64, u64), std::path::PathBuf)> {
    let mut files: Vec<((u64, u64), std::path::PathBuf)> = Vec::new();
    for (fd, desc) in &handed {
        state.track_uncached(*fd, desc.key);
        if state.unlock_file(desc.key) {
            crate::watch::unwatch(*fd);
        }
        if !files.iter().any(|(k, _)| *k == desc.key) {
            files.push((desc.key, desc.path.clone()));
        }
    }
    drop(handed);
    files
}

/// After the kernel put a managed description on `fd` (a `dup` family
/// call): on descriptors 0-2, where the C library's own streams reach it,
/// the file goes to the kernel; a duplicate of a kernel-served descriptor
/// is one too.
pub fn after_duplicate(old: libc::c_int, new: libc::c_int) {
    let Some(state) = state::built() else { return };
    if let Some(key) = state.uncached_key(old) {
        state.track_uncached(new, key);
        return;
    }
    if (0..=2).contains(&new) {
        if let Some(desc) = table::get(new) {
            let key = desc.key;
            drop(desc);
            if let Err(e) = hand_over(Some(key)) {
                state::complain(&format!("descriptor {new}: the file stays cached: {e}"));
            }
        }
    }
}
