//! The registry of this library's cookie streams (`stdio.rs` makes them):
//! each open one by its `FILE` address, with the descriptor it reads and
//! writes. `fileno` and `freopen` look a stream up here, and the exit
//! hook (`lifetime.rs`) flushes them all before the cache closes
//! ([`flush_at_exit`]), so their buffered bytes go through the cache.
//!
//! Ownership and invariants: the registry holds a stream's entry exactly
//! while it is open (`stdio.rs` inserts it once `fopencookie` made the
//! `FILE`, and the cookie's close removes it before the C library frees
//! the `FILE`), so a lookup never answers for a freed stream, and a
//! stream address reused by the C library is never mistaken for a cookie
//! stream. A stream's descriptor is the stream's own (its close closes
//! it); it is -1 once closed, or after a reopen that failed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use libc::{c_int, FILE};

extern "C" {
    fn ftrylockfile(stream: *mut FILE) -> c_int;
    fn funlockfile(stream: *mut FILE);
}

/// A cookie stream: the descriptor it reads and writes (-1 once closed,
/// or after a reopen that failed) and its `FILE` (the registry's key).
pub struct Stream {
    pub fd: AtomicI32,
    pub file: AtomicUsize,
}

impl Stream {
    /// A stream over `fd` whose `FILE` is not made yet.
    pub fn new(fd: c_int) -> Stream {
        Stream { fd: AtomicI32::new(fd), file: AtomicUsize::new(0) }
    }
}

/// The open cookie streams, by `FILE` address.
static STREAMS: Mutex<BTreeMap<usize, Arc<Stream>>> = Mutex::new(BTreeMap::new());

/// Cookie streams open: while 0, a lookup (`fileno`) takes no lock.
static OPEN_STREAMS: AtomicUsize = AtomicUsize::new(0);

fn streams() -> MutexGuard<'static, BTreeMap<usize, Arc<Stream>>> {
    STREAMS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The cookie stream `fp` is, if it is one.
pub fn get(fp: *mut FILE) -> Option<Arc<Stream>> {
    if OPEN_STREAMS.load(Ordering::Acquire) == 0 || fp.is_null() {
        return None;
    }
    streams().get(&(fp as usize)).cloned()
}

/// Registers `stream`, just opened as `fp`.
pub fn insert(fp: *mut FILE, stream: Arc<Stream>) {
    stream.file.store(fp as usize, Ordering::Release);
    streams().insert(fp as usize, stream);
    OPEN_STREAMS.fetch_add(1, Ordering::AcqRel);
}

/// Forgets `stream` (its close): waits for a flush at exit in progress.
pub fn remove(stream: &Stream) {
    if streams().remove(&stream.file.load(Ordering::Acquire)).is_some() {
        OPEN_STREAMS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// At exit, before the cache closes: flushes every cookie stream no other
/// thread holds locked (waiting for one could hang the exit), so its
/// buffered bytes go through the cache. Called outside the guard.
pub fn flush_at_exit() {
    if OPEN_STREAMS.load(Ordering::Acquire) == 0 {
        return;
    }
    // Held throughout: a stream cannot close (its close takes this lock)
    // while it is flushed here.
    let streams = streams();
    for &address in streams.keys() {
        let fp = address as *mut FILE;
        // SAFETY: an open stream (in the registry); the lock is tried,
        // never waited for, and released after the flush.
        unsafe {
            if ftrylockfile(fp) == 0 {
                libc::fflush(fp);
                funlockfile(fp);
            }
        }
    }
}
