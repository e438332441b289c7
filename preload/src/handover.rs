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
//! - an `ioctl` that may change the data, and the target of a clone;
//! - another process opening the file (the watcher, `watch.rs`).
//!
//! While a process has a handed-over (or otherwise kernel-served)
//! descriptor of a file open, it opens the file through the kernel again
//! (`state::track_uncached`): caching it beside a description the kernel
//! serves would let the two diverge. Once the last such descriptor
//! closes, the next open caches the file afresh.
//!
//! Invariants: a hand-over waits for the calls in flight on the file's
//! descriptions (`table::begin_hand_over`), so no write is acknowledged
//! by the cache after its data went to the kernel; hand-overs run one at
//! a time, and an open of a file being handed over is the kernel's
//! (`State::begin_handing`, `State::end_handing`); a failed writeback leaves the file cached
//! (its data still dirty) and is returned.

use std::io;
use std::sync::{Arc, Mutex};

use crate::state::Fingerprint;
use crate::table::{self, Desc};
use crate::{state, watch};

/// One hand-over at a time: a second one (a `fork` while the watcher
/// hands a file over) waits for the first, so it never returns while a
/// file it covers is still being written back.
static HANDING: Mutex<()> = Mutex::new(());

/// Hands the file `key` to the kernel, or every managed file when `None`.
/// A file whose dirty data cannot be written back stays cached (its
/// descriptors managed) and the first such error is returned. The caller
/// holds no description (a hand-over waits for every holder).
pub fn hand_over(key: Option<(u64, u64)>) -> io::Result<()> {
    let Some(state) = state::built() else { return Ok(()) };
    let _one_at_a_time = HANDING.lock().unwrap_or_else(|e| e.into_inner());
    // An open of these files from now on goes to the kernel.
    let keys: Vec<(u64, u64)> = match key {
        Some(key) => vec![key],
        None => table::entries().into_iter().map(|(_, d)| d.key).collect(),
    };
    state.begin_handing(&keys);
    let marked = table::begin_hand_over(key);
    let (written, failed, first_error) = write_back_each_file(marked);
    table::abort_hand_over(&failed);
    for (fd, desc) in &written {
        table::align_kernel_descriptor(*fd, desc);
    }
    // Counted as the kernel's while lookups of them still wait: a `dup`
    // or `close` of one right after the hand-over sees it so.
    for (fd, desc) in &written {
        state.track_uncached(*fd, desc.key);
        if state.unlock_file(desc.key) {
            watch::unwatch(*fd);
        }
    }
    table::end_hand_over(&written);
    let_go(state, written);
    state.end_handing(&keys);
    first_error.map_or(Ok(()), Err)
}

/// The marked descriptors whose file's dirty data reached the kernel, and
/// those whose did not, with the first error.
type WrittenBack = (Vec<(libc::c_int, Arc<Desc>)>, Vec<(libc::c_int, Arc<Desc>)>, Option<io::Error>);

/// Writes each marked file's dirty data back to the kernel, once per
/// file; a file whose writeback failed keeps every description of it.
fn write_back_each_file(marked: Vec<(libc::c_int, Arc<Desc>)>) -> WrittenBack {
    let mut first_error = None;
    let mut written: Vec<(libc::c_int, Arc<Desc>)> = Vec::with_capacity(marked.len());
    let mut failed: Vec<(libc::c_int, Arc<Desc>)> = Vec::new();
    for (fd, desc) in marked {
        let outcome = if failed.iter().any(|(_, d)| d.key == desc.key) {
            Err(())
        } else if written.iter().any(|(_, d)| d.key == desc.key) {
            Ok(())
        } else {
            desc.write_back().map_err(|e| {
                state::complain(&format!("{}: writing back for the kernel failed: {e}", desc.path.display()));
                first_error.get_or_insert(e);
            })
        };
        match outcome {
            Ok(()) => written.push((fd, desc)),
            Err(()) => failed.push((fd, desc)),
        }
    }
    (written, failed, first_error)
}

/// The cache lets go of handed-over descriptions: their (clean) pages
/// go, and the next open here that caches the file forgets what the
/// cache knew of it (its size) first, since the kernel's file may change
/// through the handed descriptors. The engine's own descriptors of the
/// file stay open meanwhile: closing any descriptor of a file would drop
/// every POSIX record lock the program holds on it (SQLite's among them).
fn let_go(state: &state::State, handed: Vec<(libc::c_int, Arc<Desc>)>) {
    for (_, desc) in &handed {
        let _ = desc.file.advise(0..i64::MAX as u64, wbcache::Advice::DontNeed);
        state.remember_closed(desc.key, Fingerprint::STALE);
    }
}

/// Waits for a hand-over in progress, if any, to end.
pub fn wait_for_hand_overs() {
    drop(HANDING.lock().unwrap_or_else(|e| e.into_inner()));
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
