//! The store's length gate: writeback I/O against changes of the backing
//! store's length. Any number of writeback I/Os may be in flight, or one
//! length change with none; a pending length change holds off new I/O so
//! it cannot starve. An I/O's hold may span an asynchronous write (taken
//! at submission, given back at completion), which a `RwLock` guard
//! cannot. Owned by the inode (`Inode::store_len_gate`); the gate's state
//! lock is a leaf.

use std::sync::{Mutex, MutexGuard};

use crate::base::locks::{self, Held, Rank};

/// Writeback I/O against changes of the backing store's length: any number
/// of writeback I/Os, or one length change with none in flight. Unlike a
/// `RwLock` guard, an I/O's hold can span an asynchronous write's lifetime
/// (taken at submission, given back at completion). A pending length change
/// holds off new I/O, so it cannot starve.
#[derive(Default)]
pub struct StoreLenGate {
    state: Mutex<GateState>,
    changed: locks::WaitQueue,
}

#[derive(Default)]
struct GateState {
    io_in_flight: usize,
    resizing: bool,
}

impl StoreLenGate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        locks::lock(&self.state)
    }

    pub(super) fn begin_io(&self) {
        locks::check_order(Rank::StoreLenGate);
        let mut st = self.lock();
        while st.resizing {
            st = self.changed.wait(st);
        }
        st.io_in_flight += 1;
        debug_assert!(!st.resizing && st.io_in_flight > 0, "I/O never overlaps a length change");
    }

    /// As `begin_io`, but gives up instead of waiting for a length change.
    pub(super) fn try_begin_io(&self) -> bool {
        let mut st = self.lock();
        if st.resizing {
            return false;
        }
        st.io_in_flight += 1;
        debug_assert!(!st.resizing && st.io_in_flight > 0, "I/O never overlaps a length change");
        true
    }

    pub(super) fn end_io(&self) {
        let mut st = self.lock();
        assert!(st.io_in_flight > 0, "an I/O ends once");
        st.io_in_flight -= 1;
        if st.io_in_flight == 0 {
            self.changed.notify_all();
        }
    }

    /// Exclusive access if it can be had at once: no length change under
    /// way and no I/O in flight.
    pub(super) fn try_resize(&self) -> Option<ResizeGuard<'_>> {
        let mut st = self.lock();
        if st.resizing || st.io_in_flight > 0 {
            return None;
        }
        st.resizing = true;
        Some(ResizeGuard { gate: self, _held: Held::new(Rank::StoreLenGate) })
    }

    /// Waits for exclusive access: no other length change, no I/O.
    pub fn resize(&self) -> ResizeGuard<'_> {
        locks::check_order(Rank::StoreLenGate);
        let mut st = self.lock();
        while st.resizing {
            st = self.changed.wait(st);
        }
        st.resizing = true;
        while st.io_in_flight > 0 {
            st = self.changed.wait(st);
        }
        debug_assert!(st.resizing && st.io_in_flight == 0, "a length change excludes I/O");
        ResizeGuard { gate: self, _held: Held::new(Rank::StoreLenGate) }
    }
}

/// A length change's exclusive hold of the gate (ranked as the gate in
/// the lock order while it lives).
pub struct ResizeGuard<'a> {
    gate: &'a StoreLenGate,
    _held: Held,
}

impl Drop for ResizeGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.gate.lock();
        assert!(st.resizing && st.io_in_flight == 0, "a length change excludes I/O");
        st.resizing = false;
        drop(st);
        self.gate.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A length change waits for I/O in flight and holds off new I/O; I/O
    /// that must not wait is refused while one is pending.
    #[test]
    fn store_len_gate_excludes_io_during_a_length_change() {
        let gate = Arc::new(StoreLenGate::default());
        gate.begin_io();
        let resized = Arc::new(AtomicBool::new(false));
        let resizer = {
            let (gate, resized) = (gate.clone(), resized.clone());
            std::thread::spawn(move || {
                let _g = gate.resize();
                resized.store(true, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(50));
                resized.store(false, Ordering::SeqCst);
            })
        };
        // The resizer is now pending (or about to be): wait until it is.
        while !gate.lock().resizing {
            std::thread::yield_now();
        }
        assert!(!gate.try_begin_io(), "a pending length change refuses new asynchronous I/O");
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!resized.load(Ordering::SeqCst), "the length change waits for I/O in flight");
        gate.end_io();
        gate.begin_io(); // waits for the length change to finish
        assert!(!resized.load(Ordering::SeqCst), "I/O never overlaps a length change");
        gate.end_io();
        resizer.join().unwrap();
        assert!(gate.try_begin_io());
        gate.end_io();
        let st = gate.lock();
        assert!(!st.resizing && st.io_in_flight == 0);
    }
}
