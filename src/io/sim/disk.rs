//! The simulated disk behind one [`SimIo`](super::SimIo): names, inodes
//! with their written and durable images, the injected fault rules, the
//! counters, the stores open on it, and the crash model that turns an
//! inode's two images into one.
//!
//! Everything mutable lives in one [`State`] behind one mutex ([`Shared`]),
//! which the backend and every store it opened share, so each attempt is
//! atomic with respect to the others. Invariants: a name maps to a live
//! inode; an inode no name maps to lives only while a store holds it
//! (`open_stores`) and is freed with the last one, or at a crash; inode
//! numbers are never reused; a store is dead once the crash epoch has moved
//! past the one it was opened in.

use super::config::{Fault, SimConfig};
use super::rng::Rng;
use super::stats::{PathErrors, SimStats, SimWrite};
use crate::base::locks;
use crate::io::store::{BackingInfo, BLOCK_SIZE};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Block size used for fault positions and the crash model, whatever the
/// store's alignment: both are about pages of the cache, not sectors.
pub(super) const BLOCK_SIZE_U64: u64 = BLOCK_SIZE as u64;

pub(super) struct Inode {
    /// What reads see; its length is the file size.
    pub(super) written: Vec<u8>,
    /// What survives a crash.
    pub(super) durable: Vec<u8>,
    pub(super) is_block_device: bool,
    /// Stores holding this inode; an unnamed inode is freed at zero.
    pub(super) open_stores: usize,
}

pub(super) struct FaultRule {
    pub(super) path: PathBuf,
    pub(super) block_index: u64,
    pub(super) fault: Fault,
    /// Firings left; `u32::MAX` never runs out.
    pub(super) remaining: u32,
}

pub(super) struct State {
    pub(super) rng: Rng,
    pub(super) names: HashMap<PathBuf, u64>,
    pub(super) inodes: HashMap<u64, Inode>,
    /// Inode numbers are never reused, so a store can never reach a newer
    /// file through a stale number.
    pub(super) next_ino: u64,
    pub(super) faults: Vec<FaultRule>,
    pub(super) write_error_all: Option<i32>,
    /// Bumped by every crash; a store opened in an older epoch is dead.
    pub(super) crash_epoch: u64,
    pub(super) stats: SimStats,
    /// By the path a store was opened with, as faults are matched.
    pub(super) path_errors: HashMap<PathBuf, PathErrors>,
    /// Paths whose writes wait at the gate, and the calls waiting there.
    pub(super) held_paths: HashSet<PathBuf>,
    pub(super) waiting_at_gate: HashMap<PathBuf, usize>,
    /// Successful write attempts in order, while recording.
    pub(super) write_log: Option<Vec<SimWrite>>,
    /// Writes in flight: `(call, crash epoch of its store, inode, byte
    /// range)`.
    pub(super) writes_in_flight: Vec<(u64, u64, u64, std::ops::Range<u64>)>,
    pub(super) next_call: u64,
}

impl State {
    /// Counts a write error returned to a store of `path`.
    pub(super) fn count_write_error(&mut self, path: &Path) {
        self.count_error(path, true);
    }

    /// Counts an error returned to a store of `path` (see [`PathErrors`]).
    pub(super) fn count_error(&mut self, path: &Path, is_write: bool) {
        let entry = self.path_errors.entry(path.to_path_buf()).or_default();
        if is_write {
            entry.write += 1;
            self.stats.write_errors += 1;
        } else {
            entry.read += 1;
            self.stats.read_errors += 1;
        }
    }
}

pub(super) struct Shared {
    pub(super) config: SimConfig,
    pub(super) state: Mutex<State>,
    /// Signalled when a path is released from the gate.
    pub(super) gate_opened: Condvar,
}

impl Shared {
    /// A panicking test thread must not turn every later call into a second
    /// panic: the state is still consistent between calls, so poisoning is
    /// ignored.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        locks::lock(&self.state)
    }
}

pub(super) fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

pub(super) fn free_if_orphan(st: &mut State, ino: u64) {
    let unused = st.inodes.get(&ino).is_some_and(|i| i.open_stores == 0);
    if unused && !st.names.values().any(|&n| n == ino) {
        st.inodes.remove(&ino);
    }
}

/// The image a crash leaves: per block, the durable or the written version
/// (coin flip where they differ), then the durable or written length.
pub(super) fn crash_image(durable: &[u8], written: &[u8], rng: &mut Rng) -> Vec<u8> {
    if durable == written {
        return durable.to_vec();
    }
    let max_len = durable.len().max(written.len());
    let mut image = vec![0u8; max_len];
    // The slice of `img` inside `range`, short (or empty) past its end.
    let part = |img: &'_ [u8], start: usize, end: usize| -> std::ops::Range<usize> {
        start.min(img.len())..end.min(img.len())
    };
    for start in (0..max_len).step_by(BLOCK_SIZE) {
        let end = (start + BLOCK_SIZE).min(max_len);
        let old = &durable[part(durable, start, end)];
        let new = &written[part(written, start, end)];
        // Unequal lengths count as a difference: the block was extended or
        // cut, and the kernel may or may not have persisted that.
        let chosen = if old != new && rng.coin() { new } else { old };
        // Bytes past the chosen version's end stay zero: a hole.
        image[start..start + chosen.len()].copy_from_slice(chosen);
    }
    let len = if durable.len() != written.len() && rng.coin() { written.len() } else { durable.len() };
    image.truncate(len);
    image
}

/// A store open on the disk. Its calls are in `store` (the
/// [`BackingStore`](crate::io::BackingStore) calls) and `attempt` (one
/// attempt at one op).
pub(super) struct SimStore {
    pub(super) shared: Arc<Shared>,
    /// Path at open: faults are looked up by it.
    pub(super) path: PathBuf,
    pub(super) ino: u64,
    pub(super) readable: bool,
    pub(super) writable: bool,
    /// Crash epoch at open; the store is dead once the sim moves past it.
    pub(super) epoch: u64,
    pub(super) info: BackingInfo,
}

impl Drop for SimStore {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if let Some(inode) = st.inodes.get_mut(&self.ino) {
            inode.open_stores -= 1;
        }
        free_if_orphan(&mut st, self.ino);
    }
}

impl SimStore {
    pub(super) fn is_dead(&self, st: &State) -> bool {
        st.crash_epoch != self.epoch
    }
}
