//! Locking that ignores poisoning, in one place.
//!
//! Why poisoning is ignored: a panic while one of wbcache's locks is held
//! happens only on a failed assertion, a bug that the panic itself already
//! reports. Refusing every later operation on that lock would turn the one
//! report into hangs elsewhere: writers throttled on writeback progress,
//! fsyncs waiting for tickets, the flusher waiting for work. The state under
//! each lock is re-checked by the assertions of its next user instead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn read<T: ?Sized>(rwlock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rwlock.read().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn write<T: ?Sized>(rwlock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rwlock.write().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn wait<'a, T>(cond: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cond.wait(guard).unwrap_or_else(|e| e.into_inner())
}

/// Waits up to `timeout`; the guard comes back either way.
pub(crate) fn wait_timeout<'a, T>(cond: &Condvar, guard: MutexGuard<'a, T>, timeout: Duration) -> MutexGuard<'a, T> {
    cond.wait_timeout(guard, timeout).unwrap_or_else(|e| e.into_inner()).0
}

/// A condition variable that knows whether anyone waits on it, so that
/// waking nobody costs no system call: the standard library's
/// `Condvar::notify_all` always makes one (a commit made six, waking
/// nobody). Waiters count themselves while they hold the mutex whose
/// state they tested, so a notifier that changed that state under the
/// same mutex, and looks at the count after taking it, sees every waiter
/// that could have missed the change; a later waiter sees the change.
#[derive(Default)]
pub(crate) struct WaitQueue {
    cond: Condvar,
    waiters: AtomicUsize,
}

impl WaitQueue {
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let guard = wait(&self.cond, guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        guard
    }

    pub(crate) fn wait_timeout<'a, T>(&self, guard: MutexGuard<'a, T>, timeout: Duration) -> MutexGuard<'a, T> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let guard = wait_timeout(&self.cond, guard, timeout);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        guard
    }

    pub(crate) fn notify_all(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.cond.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Two threads hand a token back and forth many times, each waiting
    /// without a timeout: one lost wakeup would hang the exchange, which
    /// the receiver's deadline reports.
    #[test]
    fn wait_queue_loses_no_wakeup() {
        const ROUNDS: u64 = 20_000;
        let shared = Arc::new((Mutex::new(0u64), WaitQueue::default()));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for parity in 0..2u64 {
            let (shared, done_tx) = (shared.clone(), done_tx.clone());
            std::thread::spawn(move || {
                let (turn, queue) = &*shared;
                loop {
                    let mut t = lock(turn);
                    while *t % 2 != parity && *t < ROUNDS {
                        t = queue.wait(t);
                    }
                    if *t >= ROUNDS {
                        drop(t);
                        queue.notify_all();
                        break;
                    }
                    *t += 1;
                    drop(t);
                    queue.notify_all();
                }
                done_tx.send(()).unwrap();
            });
        }
        for _ in 0..2 {
            done_rx.recv_timeout(Duration::from_secs(60)).expect("a wakeup was lost: the exchange hung");
        }
        assert_eq!(*lock(&shared.0), ROUNDS);
        assert_eq!(shared.1.waiters.load(Ordering::SeqCst), 0, "every waiter left");
    }
}
