//! The managed descriptors: for each descriptor number the program holds
//! on a managed file, its open file description ([`Desc`]): the cache's
//! handle, the file position and status flags, which `dup`licates share
//! as the kernel's descriptions are shared.
//!
//! The descriptor number itself is a real descriptor of the file, opened
//! by the kernel with the program's flags (less `O_TRUNC`, `O_APPEND` and
//! `O_DIRECT`, which the cache does): the number stays reserved, and calls
//! this library does not serve on it (`flock`, `fchmod`, POSIX record
//! locks) reach the real file.
//!
//! Invariants: a number is in the table only while its real descriptor is
//! open; the table is changed only under its write lock, and a lookup
//! clones the description out, so a `close` racing a `read` of the same
//! number never frees what the reader uses.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// An open file description of a managed file.
pub struct Desc {
    pub file: wbcache::File,
    /// The file position (`read`, `write`, `lseek`).
    pub pos: Mutex<u64>,
    /// `O_APPEND`, `O_SYNC`, `O_DSYNC`, `O_NONBLOCK` and the access mode,
    /// as `F_GETFL` answers and `F_SETFL` changes.
    pub status_flags: AtomicI32,
    /// The file's device and inode (its cross-process lock's key).
    pub key: (u64, u64),
    pub path: PathBuf,
}

impl Desc {
    pub fn flags(&self) -> i32 {
        self.status_flags.load(Ordering::Acquire)
    }
}

static TABLE: RwLock<Vec<Option<Arc<Desc>>>> = RwLock::new(Vec::new());

/// Managed descriptors open: while 0, a lookup takes no lock.
static MANAGED: AtomicUsize = AtomicUsize::new(0);

/// The description of descriptor `fd`, if it is managed.
pub fn get(fd: libc::c_int) -> Option<Arc<Desc>> {
    if MANAGED.load(Ordering::Acquire) == 0 || fd < 0 {
        return None;
    }
    let table = TABLE.read().unwrap_or_else(|e| e.into_inner());
    table.get(fd as usize).and_then(Clone::clone)
}

/// Makes `fd` a managed descriptor of `desc` (replacing what it was).
pub fn insert(fd: libc::c_int, desc: Arc<Desc>) {
    assert!(fd >= 0, "a descriptor number");
    let mut table = TABLE.write().unwrap_or_else(|e| e.into_inner());
    let at = fd as usize;
    if table.len() <= at {
        table.resize(at + 1, None);
    }
    if table[at].replace(desc).is_none() {
        MANAGED.fetch_add(1, Ordering::AcqRel);
    }
    debug_assert!(table[at].is_some());
}

/// Takes `fd` out of the table; its description, if it was managed.
pub fn remove(fd: libc::c_int) -> Option<Arc<Desc>> {
    if fd < 0 || MANAGED.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut table = TABLE.write().unwrap_or_else(|e| e.into_inner());
    let taken = table.get_mut(fd as usize).and_then(Option::take);
    if taken.is_some() {
        MANAGED.fetch_sub(1, Ordering::AcqRel);
    }
    taken
}

/// A description of the file `key`, if a descriptor here has it open.
pub fn any_of(key: (u64, u64)) -> Option<Arc<Desc>> {
    if MANAGED.load(Ordering::Acquire) == 0 {
        return None;
    }
    let table = TABLE.read().unwrap_or_else(|e| e.into_inner());
    table.iter().flatten().find(|d| d.key == key).cloned()
}

/// Gives the kernel's descriptor `fd` the description's position and
/// `O_APPEND`, so that calls made on it through the kernel (by a forked
/// child, or after the descriptor stops being managed) continue where the
/// cache's description stands.
pub fn align_kernel_descriptor(fd: libc::c_int, desc: &Desc) {
    let pos = *desc.pos.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: plain calls on the program's own descriptor.
    unsafe {
        crate::real::lseek(fd, pos as libc::off_t, libc::SEEK_SET);
        let kernel_flags = crate::real::fcntl(fd, libc::F_GETFL, 0);
        if kernel_flags >= 0 {
            let append = desc.flags() & libc::O_APPEND;
            crate::real::fcntl(fd, libc::F_SETFL, ((kernel_flags & !libc::O_APPEND) | append) as libc::c_ulong);
        }
    }
}

/// The managed descriptors that `keep` selects, with their descriptions,
/// in descriptor order (a snapshot: the table may change after).
pub fn entries_where(keep: impl Fn(libc::c_int, &Desc) -> bool) -> Vec<(libc::c_int, Arc<Desc>)> {
    if MANAGED.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    let table = TABLE.read().unwrap_or_else(|e| e.into_inner());
    table
        .iter()
        .enumerate()
        .filter_map(|(fd, d)| Some((fd as libc::c_int, d.as_ref()?)))
        .filter(|(fd, d)| keep(*fd, d))
        .map(|(fd, d)| (fd, d.clone()))
        .collect()
}

/// Every managed descriptor with its description.
pub fn entries() -> Vec<(libc::c_int, Arc<Desc>)> {
    entries_where(|_, _| true)
}
