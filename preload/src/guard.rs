//! Re-entry: while a thread runs this library's code for one interposed
//! call, every interposed call it makes (the standard library resolving a
//! path, printing an error) goes straight to the C library. The engine's
//! own I/O never arrives here at all: it makes its system calls directly.
//!
//! After `fork`, the child never enters: the parent's cache, whose threads
//! the child does not have, is not the child's, and the child's calls on
//! the descriptors it inherited reach the kernel, which holds every byte
//! the parent wrote before the fork (written back in the parent first).
//!
//! Invariant: a thread is inside at most once; leaving (the guard's drop)
//! clears the mark even when the call unwinds.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set in a child after `fork`: the parent's cache (its threads did not
/// survive the fork) is not this process's, and every call goes to the C
/// library.
static FORKED_CHILD: AtomicBool = AtomicBool::new(false);

/// Marks this process as a forked child (`pthread_atfork`'s child hook).
pub fn mark_forked_child() {
    FORKED_CHILD.store(true, Ordering::Release);
}

/// Whether this process is a forked child.
pub fn is_forked_child() -> bool {
    FORKED_CHILD.load(Ordering::Acquire)
}

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// This thread's mark of being inside the library, cleared when dropped.
pub struct Inside(());

/// Marks this thread inside, or `None` when it already is (or its
/// thread-locals are gone, at thread exit): the caller then forwards the
/// call to the C library.
pub fn enter() -> Option<Inside> {
    if FORKED_CHILD.load(Ordering::Acquire) {
        return None;
    }
    INSIDE
        .try_with(|inside| {
            if inside.get() {
                None
            } else {
                inside.set(true);
                Some(Inside(()))
            }
        })
        .ok()
        .flatten()
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.set(false));
    }
}
