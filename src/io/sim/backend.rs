//! [`SimIo`], the simulated backend: the [`Io`] calls on names (open,
//! rename, remove) and the controls a test drives it with: fault injection,
//! the write gate and log, the write-error switch, crashes, and the images
//! it inspects.
//!
//! A `SimIo` and every store it opened share the [`Shared`] disk state
//! through an `Arc`, so the state lives as long as any of them. A crash
//! drops no store: it bumps the epoch, which makes the older ones dead.

use super::config::{Fault, SimConfig};
use super::disk::{crash_image, errno, free_if_orphan, FaultRule, Inode, Shared, SimStore, State};
use super::rng::Rng;
use super::stats::{SimStats, SimWrite};
use crate::io::backend::Io;
use crate::io::store::{BackingInfo, BackingStore, IoKind, OpenHow, Symlink, BLOCK_SIZE};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};

/// Logical block size reported when `direct_io` is off: what a buffered file
/// on a 512-byte-sector disk would report.
const BUFFERED_LOGICAL_BLOCK_SIZE: u32 = 512;

/// The `st_dev` every simulated store lives on: one writeback domain.
const SIM_DEVICE_ID: u64 = 1;

/// The simulated backend. Cheap to share: wrap it in an `Arc` and hand it to
/// `open_backend` while the test keeps a clone for
/// fault injection and crashes.
pub struct SimIo {
    /// Also read by the module's tests, which check what the disk state holds.
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for SimIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimIo").field("config", &self.shared.config).finish_non_exhaustive()
    }
}

impl SimIo {
    pub fn new(config: SimConfig) -> Self {
        let state = State {
            rng: Rng::new(config.seed),
            names: HashMap::new(),
            inodes: HashMap::new(),
            next_ino: 1,
            faults: Vec::new(),
            write_error_all: None,
            crash_epoch: 0,
            stats: SimStats::default(),
            path_errors: HashMap::new(),
            held_paths: HashSet::new(),
            waiting_at_gate: HashMap::new(),
            write_log: None,
            writes_in_flight: Vec::new(),
            next_call: 0,
        };
        SimIo { shared: Arc::new(Shared { config, state: Mutex::new(state), gate_opened: Condvar::new() }) }
    }

    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// Creates (or replaces) `path` as a raw block device of `len_bytes`
    /// zero bytes, already durable. Its size is fixed: `set_len` to another
    /// size fails `EINVAL`, writes starting at or past the end fail `ENOSPC`,
    /// reads there return 0 bytes, and an op crossing the end transfers up to
    /// the end.
    pub fn create_block_device(&self, path: &Path, len_bytes: u64) {
        let len = usize::try_from(len_bytes).expect("simulated device must fit in memory");
        let mut st = self.shared.lock();
        let ino = st.next_ino;
        st.next_ino += 1;
        st.inodes
            .insert(ino, Inode { written: vec![0; len], durable: vec![0; len], is_block_device: true, open_stores: 0 });
        if let Some(old) = st.names.insert(path.to_path_buf(), ino) {
            free_if_orphan(&mut st, old);
        }
    }

    /// Makes the next `times` attempts touching block `block_index` (in
    /// 4096-byte units) of `path` fail or come back short as `fault` says.
    /// `u32::MAX` means until [`SimIo::clear_faults`]. Faults belong to the
    /// path, not the file: they may be injected before the file exists and
    /// outlive its removal. When several faults are touched by one attempt,
    /// error faults win over short ones, then the lowest block, then the
    /// earliest injected.
    pub fn inject(&self, path: &Path, block_index: u64, fault: Fault, times: u32) {
        if times == 0 {
            return;
        }
        let mut st = self.shared.lock();
        st.faults.push(FaultRule { path: path.to_path_buf(), block_index, fault, remaining: times });
    }

    /// Removes every injected fault (not the [`SimIo::set_write_error_all`]
    /// switch).
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// Removes the faults injected for `path` only, so that tests whose
    /// threads own different files can each repair their own.
    pub fn clear_faults_for(&self, path: &Path) {
        self.shared.lock().faults.retain(|r| r.path != path);
    }

    /// Write attempts and syncs on stores opened as `path` that failed with
    /// an injected fault or the [`SimIo::set_write_error_all`] switch, since
    /// [`SimIo::new`]. The engine records each in the file's error sequence,
    /// so a test reading this before and after an operation knows whether
    /// the engine had a writeback error to report.
    pub fn write_errors(&self, path: &Path) -> u64 {
        self.shared.lock().path_errors.get(path).map_or(0, |e| e.write)
    }

    /// Read attempts on stores opened as `path` that failed with an
    /// injected [`Fault::ReadEio`], since [`SimIo::new`].
    pub fn read_errors(&self, path: &Path) -> u64 {
        self.shared.lock().path_errors.get(path).map_or(0, |e| e.read)
    }

    /// Holds every `submit_once` call that carries a write to a store
    /// opened as `path` at a gate, before any of its attempts, until
    /// [`SimIo::release_writes`]: the I/O is "in flight" for as long as the
    /// test likes. Reads and syncs pass.
    pub fn hold_writes(&self, path: &Path) {
        self.shared.lock().held_paths.insert(path.to_path_buf());
    }

    /// Lets the writes held for `path` go (and any later ones).
    pub fn release_writes(&self, path: &Path) {
        self.shared.lock().held_paths.remove(path);
        self.shared.gate_opened.notify_all();
    }

    /// Calls waiting at the gate for `path` now.
    pub fn writes_held(&self, path: &Path) -> usize {
        self.shared.lock().waiting_at_gate.get(path).copied().unwrap_or(0)
    }

    /// Starts logging successful write attempts ([`SimIo::write_log`]).
    pub fn record_writes(&self) {
        self.shared.lock().write_log.get_or_insert_with(Vec::new);
    }

    /// The successful write attempts since [`SimIo::record_writes`], in
    /// the order they took effect.
    pub fn write_log(&self) -> Vec<SimWrite> {
        self.shared.lock().write_log.clone().unwrap_or_default()
    }

    /// While `Some(errno)`, every write attempt and every sync on every file
    /// fails with `errno` and makes nothing durable: a disk that went bad or
    /// full. Survives crashes, like a broken disk would.
    pub fn set_write_error_all(&self, errno: Option<i32>) {
        self.shared.lock().write_error_all = errno;
    }

    pub fn stats(&self) -> SimStats {
        self.shared.lock().stats
    }

    /// Simulates power loss and reboot; see the module doc for the model.
    /// `seed` alone decides which unsynced blocks and lengths persisted.
    /// Injected faults and the write-error switch stay as they are: they
    /// model the disk, which a reboot does not repair.
    pub fn crash(&self, seed: u64) {
        let mut rng = Rng::new(seed);
        let mut st = self.shared.lock();
        st.crash_epoch += 1;
        // Calls held at the gate belong to stores that are dead now.
        self.shared.gate_opened.notify_all();
        let named: HashSet<u64> = st.names.values().copied().collect();
        // Unlinked inodes only lived on through open stores, all dead now.
        st.inodes.retain(|ino, _| named.contains(ino));
        // HashMap order is random per process; sort so the seed alone decides.
        let mut inos: Vec<u64> = st.inodes.keys().copied().collect();
        inos.sort_unstable();
        for ino in inos {
            let inode = st.inodes.get_mut(&ino).expect("listed above");
            let image = crash_image(&inode.durable, &inode.written, &mut rng);
            inode.written.clone_from(&image);
            inode.durable = image;
        }
    }

    /// Simulates the death of the process using the stores (not of the
    /// machine): every store open now is dead (its calls fail, as a dead
    /// process makes none), and the written images stay as they are, the
    /// kernel's page cache keeping them. A guardian's replay then writes
    /// into them with [`SimIo::replay_write`] and [`SimIo::replay_set_len`].
    pub fn process_crash(&self) {
        let mut st = self.shared.lock();
        st.crash_epoch += 1;
        self.shared.gate_opened.notify_all();
        // Unlinked files lived on through the dead process's descriptors.
        let named: HashSet<u64> = st.names.values().copied().collect();
        st.inodes.retain(|ino, _| named.contains(ino));
    }

    /// The kernel writes back what it holds: every written image becomes
    /// durable (after a process crash, before the next power loss).
    pub fn settle(&self) {
        let mut st = self.shared.lock();
        for inode in st.inodes.values_mut() {
            inode.durable.clone_from(&inode.written);
        }
    }

    /// A guardian's write into store `ino`'s written image, as a buffered
    /// `pwrite` through the kernel's page cache (not durable until a later
    /// sync or shutdown). Fails as every write does while the disk fails.
    pub fn replay_write(&self, ino: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut st = self.shared.lock();
        if let Some(errno) = st.write_error_all {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let inode = st.inodes.get_mut(&ino).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let (start, end) = (offset as usize, offset as usize + data.len());
        if inode.written.len() < end {
            if inode.is_block_device {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            inode.written.resize(end, 0);
        }
        inode.written[start..end].copy_from_slice(data);
        Ok(())
    }

    /// Store `ino`'s written length, as a guardian's `fstat` sees it.
    pub fn replay_len(&self, ino: u64) -> io::Result<u64> {
        let st = self.shared.lock();
        let inode = st.inodes.get(&ino).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        Ok(inode.written.len() as u64)
    }

    /// A guardian's `ftruncate` of store `ino` (nothing for a block device).
    pub fn replay_set_len(&self, ino: u64, len: u64) -> io::Result<()> {
        let mut st = self.shared.lock();
        let inode = st.inodes.get_mut(&ino).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        if !inode.is_block_device {
            inode.written.resize(len as usize, 0);
        }
        Ok(())
    }

    /// What would survive a crash now, or `None` if `path` does not exist.
    pub fn durable_image(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.shared.lock();
        st.names.get(path).map(|ino| st.inodes[ino].durable.clone())
    }

    /// What reads see now, or `None` if `path` does not exist.
    pub fn written_image(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.shared.lock();
        st.names.get(path).map(|ino| st.inodes[ino].written.clone())
    }

    /// Unlinks `path`; returns whether it existed. Stores already open keep
    /// working on the unlinked file until dropped or a crash.
    pub fn remove(&self, path: &Path) -> bool {
        let mut st = self.shared.lock();
        match st.names.remove(path) {
            Some(ino) => {
                free_if_orphan(&mut st, ino);
                true
            }
            None => false,
        }
    }
}

impl Io for SimIo {
    fn kind(&self) -> IoKind {
        IoKind::Sim
    }

    fn store_id_at(&self, path: &Path, _symlink: Symlink) -> io::Result<Option<(u64, u64)>> {
        let st = self.shared.lock();
        match st.names.get(path) {
            Some(&ino) => Ok(Some((SIM_DEVICE_ID, ino))),
            None => Err(errno(libc::ENOENT)),
        }
    }

    fn remove_name(&self, path: &Path) -> io::Result<()> {
        if self.remove(path) {
            Ok(())
        } else {
            Err(errno(libc::ENOENT))
        }
    }

    fn rename_name(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.shared.lock();
        let ino = st.names.remove(from).ok_or_else(|| errno(libc::ENOENT))?;
        if let Some(replaced) = st.names.insert(to.to_path_buf(), ino) {
            if replaced != ino {
                free_if_orphan(&mut st, replaced);
            }
        }
        Ok(())
    }

    fn open(&self, path: &Path, how: &OpenHow) -> io::Result<Arc<dyn BackingStore>> {
        // Same rules as std's OpenOptions, which the real backends go through.
        if !how.read && !how.write {
            return Err(errno(libc::EINVAL));
        }
        if (how.create || how.create_new || how.truncate) && !how.write {
            return Err(errno(libc::EINVAL));
        }
        let direct_io = self.shared.config.direct_io;
        let mut st = self.shared.lock();
        let ino = match st.names.get(path) {
            Some(_) if how.create_new => return Err(errno(libc::EEXIST)),
            Some(&ino) => ino,
            None if !(how.create || how.create_new) => return Err(errno(libc::ENOENT)),
            None => {
                let ino = st.next_ino;
                st.next_ino += 1;
                let inode = Inode { written: Vec::new(), durable: Vec::new(), is_block_device: false, open_stores: 0 };
                st.inodes.insert(ino, inode);
                st.names.insert(path.to_path_buf(), ino);
                ino
            }
        };
        let epoch = st.crash_epoch;
        let inode = st.inodes.get_mut(&ino).expect("named inodes exist");
        // Linux ignores O_TRUNC on a block device.
        if how.truncate && !inode.is_block_device {
            inode.written.clear();
        }
        inode.open_stores += 1;
        let info = BackingInfo {
            len_at_open: inode.written.len() as u64,
            logical_block_size: if direct_io { BLOCK_SIZE as u32 } else { BUFFERED_LOGICAL_BLOCK_SIZE },
            is_block_device: inode.is_block_device,
            direct_io,
            device_id: SIM_DEVICE_ID,
            store_id: (SIM_DEVICE_ID, ino),
        };
        Ok(Arc::new(SimStore {
            shared: Arc::clone(&self.shared),
            path: path.to_path_buf(),
            ino,
            readable: how.read,
            writable: how.write,
            epoch,
            info,
        }))
    }
}

/// A guardian's replay into a simulated disk (see [`SimIo::process_crash`]).
pub struct SimReplay<'a> {
    pub sim: &'a SimIo,
    /// The store (device, inode) of each file slot.
    pub store_of: &'a dyn Fn(u32) -> Option<(u64, u64)>,
}

impl crate::guardian::replay::ReplaySink for SimReplay<'_> {
    fn has_file(&self, file: u32) -> bool {
        (self.store_of)(file).is_some()
    }

    fn name(&self, file: u32) -> String {
        format!("file slot {file}")
    }

    fn len(&mut self, file: u32) -> io::Result<u64> {
        let (_, ino) = (self.store_of)(file).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        self.sim.replay_len(ino)
    }

    fn set_len(&mut self, file: u32, len: u64) -> io::Result<()> {
        let (_, ino) = (self.store_of)(file).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        self.sim.replay_set_len(ino, len)
    }

    fn write(&mut self, file: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let (_, ino) = (self.store_of)(file).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        self.sim.replay_write(ino, offset, data)
    }
}
