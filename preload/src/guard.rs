//! Re-entry: while a thread runs this library's code for one interposed
//! call, every interposed call it makes (the standard library resolving a
//! path, printing an error) goes straight to the C library. The engine's
//! own I/O never arrives here at all: it makes its system calls directly.
//!
//! Invariant: a thread is inside at most once; leaving (the guard's drop)
//! clears the mark even when the call unwinds.

use std::cell::Cell;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// This thread's mark of being inside the library, cleared when dropped.
pub struct Inside(());

/// Marks this thread inside, or `None` when it already is (or its
/// thread-locals are gone, at thread exit): the caller then forwards the
/// call to the C library.
pub fn enter() -> Option<Inside> {
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
