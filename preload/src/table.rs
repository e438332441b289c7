//! The managed descriptors: for each descriptor number the program holds
//! on a managed file, its open file description ([`Desc`]): the cache's
//! handle, the file position and status flags, which `dup`licates share
//! as the kernel's descriptions are shared. A description writes its
//! file's dirty data back to the kernel ([`Desc::write_back`]) for the
//! calls that need the kernel's file current: a last close, a hand-over,
//! a mapping, an `ioctl`.
//!
//! The descriptor number itself is a real descriptor of the file, opened
//! by the kernel with the program's flags (less `O_TRUNC` and `O_DIRECT`,
//! which the cache does): the number stays reserved, and calls
//! this library does not serve on it (`flock`, `fchmod`, POSIX record
//! locks) reach the real file.
//!
//! Invariants: a number is in the table only while its real descriptor is
//! open; the table is changed only under its write lock, and a lookup
//! clones the description out, so a `close` racing a `read` of the same
//! number never frees what the reader uses.
//!
//! Handing a file to the kernel ([`begin_hand_over`], then
//! [`end_hand_over`]) marks its descriptions under the write lock, waits
//! until no call holds one (the calls in flight finish through the
//! cache), and only then takes them out: a lookup that finds a marked
//! description waits for the hand-over to end and then answers that the
//! descriptor is not managed, so its call goes to the kernel's
//! descriptor once that stands where the description stood. A lookup
//! pays one load of the mark for this.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use wbcache::SyncRangeFlags;

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
    /// Set while the description is being handed to the kernel.
    pub handed: AtomicBool,
}

impl Desc {
    pub fn new(file: wbcache::File, flags: i32, key: (u64, u64), path: PathBuf) -> Desc {
        let status_flags = AtomicI32::new(flags);
        Desc { file, pos: Mutex::new(0), status_flags, key, path, handed: AtomicBool::new(false) }
    }

    pub fn flags(&self) -> i32 {
        self.status_flags.load(Ordering::Acquire)
    }

    /// Writes the file's dirty data back to the kernel (waiting for it).
    pub fn write_back(&self) -> std::io::Result<()> {
        self.file.writeback_range(0..i64::MAX as u64, SyncRangeFlags::WRITE | SyncRangeFlags::WAIT_AFTER)
    }
}

static TABLE: RwLock<Vec<Option<Arc<Desc>>>> = RwLock::new(Vec::new());

/// Managed descriptors open: while 0, a lookup takes no lock.
static MANAGED: AtomicUsize = AtomicUsize::new(0);

/// The description of descriptor `fd`, if it is managed (after a
/// hand-over of it in progress ends: then it is not).
pub fn get(fd: libc::c_int) -> Option<Arc<Desc>> {
    if MANAGED.load(Ordering::Acquire) == 0 || fd < 0 {
        return None;
    }
    let desc = lookup(fd)?;
    if !desc.handed.load(Ordering::Acquire) {
        return Some(desc);
    }
    drop(desc);
    wait_for_hand_over(fd)
}

fn lookup(fd: libc::c_int) -> Option<Arc<Desc>> {
    let table = TABLE.read().unwrap_or_else(|e| e.into_inner());
    table.get(fd as usize).and_then(Clone::clone)
}

/// Waits (rarely: a hand-over is brief) until `fd`'s description is no
/// longer being handed over; what the table then says of `fd`.
#[cold]
fn wait_for_hand_over(fd: libc::c_int) -> Option<Arc<Desc>> {
    loop {
        std::thread::sleep(std::time::Duration::from_micros(100));
        match lookup(fd) {
            Some(desc) if desc.handed.load(Ordering::Acquire) => continue,
            found => return found,
        }
    }
}

/// The descriptors of the file `key` (of every file when `None`),
/// marked as being handed to the kernel, once no call uses their
/// descriptions any more: each with its description, in descriptor
/// order. They stay in the table until [`end_hand_over`]: lookups and
/// removals wait, and no duplicate joins them ([`insert`] refuses).
pub fn begin_hand_over(key: Option<(u64, u64)>) -> Vec<(libc::c_int, Arc<Desc>)> {
    let marked: Vec<(libc::c_int, Arc<Desc>)> = {
        let table = TABLE.write().unwrap_or_else(|e| e.into_inner());
        let marked: Vec<_> = table
            .iter()
            .enumerate()
            .filter_map(|(fd, d)| Some((fd as libc::c_int, d.as_ref()?)))
            .filter(|(_, d)| key.is_none_or(|k| d.key == k) && !d.handed.load(Ordering::Acquire))
            .map(|(fd, d)| (fd, d.clone()))
            .collect();
        for (_, desc) in &marked {
            desc.handed.store(true, Ordering::Release);
        }
        marked
    };
    // Each marked description is held by its table entries and by this
    // list, once per descriptor; any other holder is a call in flight.
    for (_, desc) in &marked {
        let held_here = 2 * marked.iter().filter(|(_, d)| Arc::ptr_eq(d, desc)).count();
        let mut wait_us = 10;
        while Arc::strong_count(desc) > held_here {
            std::thread::sleep(std::time::Duration::from_micros(wait_us));
            wait_us = (wait_us * 2).min(1000);
        }
    }
    marked
}

/// Unmarks descriptors [`begin_hand_over`] marked: they stay managed.
pub fn abort_hand_over(marked: &[(libc::c_int, Arc<Desc>)]) {
    let _table = TABLE.write().unwrap_or_else(|e| e.into_inner());
    for (_, desc) in marked {
        desc.handed.store(false, Ordering::Release);
    }
}

/// Takes the descriptors [`begin_hand_over`] marked out of the table:
/// their calls are the kernel's from now on.
pub fn end_hand_over(marked: &[(libc::c_int, Arc<Desc>)]) {
    let mut table = TABLE.write().unwrap_or_else(|e| e.into_inner());
    for (fd, desc) in marked {
        let slot = &mut table[*fd as usize];
        assert!(slot.as_ref().is_some_and(|d| Arc::ptr_eq(d, desc)), "a marked descriptor stays until handed over");
        *slot = None;
        MANAGED.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Makes `fd` a managed descriptor of `desc` (replacing what it was).
/// `false`, and nothing done, when `desc` is being handed to the kernel
/// (a duplicate made while the hand-over runs is the kernel's too).
pub fn insert(fd: libc::c_int, desc: Arc<Desc>) -> bool {
    assert!(fd >= 0, "a descriptor number");
    let mut table = TABLE.write().unwrap_or_else(|e| e.into_inner());
    if desc.handed.load(Ordering::Acquire) {
        return false;
    }
    let at = fd as usize;
    if table.len() <= at {
        table.resize(at + 1, None);
    }
    if table[at].replace(desc).is_none() {
        MANAGED.fetch_add(1, Ordering::AcqRel);
    }
    debug_assert!(table[at].is_some());
    true
}

/// Takes `fd` out of the table; its description, if it was managed. A
/// descriptor being handed over is taken out once the hand-over ended
/// (then it is not managed any more): its entries stay put meanwhile.
pub fn remove(fd: libc::c_int) -> Option<Arc<Desc>> {
    if fd < 0 || MANAGED.load(Ordering::Acquire) == 0 {
        return None;
    }
    loop {
        let mut table = TABLE.write().unwrap_or_else(|e| e.into_inner());
        let slot = table.get_mut(fd as usize)?;
        if slot.as_ref().is_some_and(|d| d.handed.load(Ordering::Acquire)) {
            drop(table);
            std::thread::sleep(std::time::Duration::from_micros(100));
            continue;
        }
        let taken = slot.take();
        if taken.is_some() {
            MANAGED.fetch_sub(1, Ordering::AcqRel);
        }
        return taken;
    }
}

/// A description of the file `key`, if a descriptor here has it open.
pub fn any_of(key: (u64, u64)) -> Option<Arc<Desc>> {
    if MANAGED.load(Ordering::Acquire) == 0 {
        return None;
    }
    let table = TABLE.read().unwrap_or_else(|e| e.into_inner());
    table.iter().flatten().find(|d| d.key == key).cloned()
}

/// Gives the kernel's descriptor `fd` the description's position and its
/// status flags (`O_APPEND`, and `O_DIRECT`, which the kernel's open
/// left to the cache), so that calls made on it through the kernel
/// continue where the cache's description stands.
pub fn align_kernel_descriptor(fd: libc::c_int, desc: &Desc) {
    let pos = *desc.pos.lock().unwrap_or_else(|e| e.into_inner());
    let changeable = libc::O_APPEND | libc::O_DIRECT;
    // SAFETY: lseek and fcntl's F_GETFL/F_SETFL take integers only (no
    // pointer); they only reposition and reflag the program's descriptor.
    unsafe {
        crate::real::lseek(fd, pos as libc::off_t, libc::SEEK_SET);
        let kernel_flags = crate::real::fcntl(fd, libc::F_GETFL, 0);
        let wanted = desc.flags() & changeable;
        if kernel_flags >= 0 && kernel_flags & changeable != wanted {
            crate::real::fcntl(fd, libc::F_SETFL, ((kernel_flags & !changeable) | wanted) as libc::c_ulong);
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
