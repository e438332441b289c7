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

/// The ranks of the locks that nest, outer first: the inode's lock order
/// (`inode/mod.rs` says why each sits where it does). A thread takes a
/// ranked lock only while every ranked lock it holds ranks lower; folio
/// locks, of one rank, may be held several at once (a pass locks its
/// folios in index order). Debug builds check this at every ranked
/// acquisition that can block, and count what each thread holds; release
/// builds compile the checks and the counts away ([`Ordered`] is then its
/// guard and nothing more).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum Rank {
    Append,
    Size,
    StoreLenGate,
    Tickets,
    Index,
    Folio,
    DirtyIndex,
    StoreWritesEnd,
    Store,
}

#[cfg(debug_assertions)]
const RANKS: [Rank; 9] = [
    Rank::Append,
    Rank::Size,
    Rank::StoreLenGate,
    Rank::Tickets,
    Rank::Index,
    Rank::Folio,
    Rank::DirtyIndex,
    Rank::StoreWritesEnd,
    Rank::Store,
];
#[cfg(debug_assertions)]
const NR_RANKS: usize = RANKS.len();

#[cfg(debug_assertions)]
thread_local! {
    /// How many locks of each rank this thread holds.
    static HELD: std::cell::Cell<[u16; NR_RANKS]> = const { std::cell::Cell::new([0; NR_RANKS]) };
}

/// Panics (debug builds) if this thread holds a lock that `rank` must not
/// be taken under: one ranked after it, or of its own rank (but folios).
pub(crate) fn check_order(rank: Rank) {
    #[cfg(debug_assertions)]
    HELD.with(|held| {
        let held = held.get();
        let from = if rank == Rank::Folio { rank as usize + 1 } else { rank as usize };
        if let Some(inner) = (from..NR_RANKS).find(|&r| held[r] > 0) {
            panic!("lock order: {rank:?} taken while holding {:?} (see locks::Rank)", RANKS[inner]);
        }
    });
    #[cfg(not(debug_assertions))]
    let _ = rank;
}

/// Whether this thread holds a lock of `rank` (debug builds; release
/// builds do not count and say yes).
pub(crate) fn holds(rank: Rank) -> bool {
    #[cfg(debug_assertions)]
    return HELD.with(|held| held.get()[rank as usize] > 0);
    #[cfg(not(debug_assertions))]
    {
        let _ = rank;
        true
    }
}

/// A thread's hold of a ranked lock, counted while it lives (debug builds).
pub(crate) struct Held {
    #[cfg(debug_assertions)]
    rank: Rank,
}

impl Held {
    pub(crate) fn new(rank: Rank) -> Held {
        #[cfg(debug_assertions)]
        HELD.with(|held| {
            let mut counts = held.get();
            counts[rank as usize] += 1;
            held.set(counts);
        });
        #[cfg(not(debug_assertions))]
        let _ = rank;
        Held {
            #[cfg(debug_assertions)]
            rank,
        }
    }
}

#[cfg(debug_assertions)]
impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|held| {
            let mut counts = held.get();
            assert!(counts[self.rank as usize] > 0, "a ranked lock is released once");
            counts[self.rank as usize] -= 1;
            held.set(counts);
        });
    }
}

/// A lock guard with its rank: dereferences to the guard's data.
pub(crate) struct Ordered<G> {
    guard: G,
    _held: Held,
}

impl<G> Ordered<G> {
    /// Takes a lock of `rank` with `acquire`, after checking the order.
    pub(crate) fn acquire(rank: Rank, acquire: impl FnOnce() -> G) -> Ordered<G> {
        check_order(rank);
        let guard = acquire();
        Ordered { guard, _held: Held::new(rank) }
    }

    /// Counts a lock taken without blocking (`try_lock`): it cannot
    /// deadlock, so its order is not checked, but locks taken under it are.
    pub(crate) fn taken(rank: Rank, guard: G) -> Ordered<G> {
        Ordered { guard, _held: Held::new(rank) }
    }

    /// Runs `f` on the bare guard (a condition-variable wait that gives the
    /// lock up and takes it back), the rank held throughout.
    pub(crate) fn with_guard(self, f: impl FnOnce(G) -> G) -> Ordered<G> {
        let Ordered { guard, _held } = self;
        Ordered { guard: f(guard), _held }
    }
}

impl<G: std::ops::Deref> std::ops::Deref for Ordered<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Ordered<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// Locks `mutex` as a lock of `rank`.
pub(crate) fn lock_ranked<T: ?Sized>(rank: Rank, mutex: &Mutex<T>) -> Ordered<MutexGuard<'_, T>> {
    Ordered::acquire(rank, || lock(mutex))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Ranked locks taken outer first pass, folios nest, a lock released
    /// stops counting, and an outer lock taken under an inner one panics
    /// (debug builds, where the checks live).
    #[test]
    #[cfg(debug_assertions)]
    fn ranked_locks_are_taken_outer_first() {
        let (size, index, folio_a, folio_b) = (Mutex::new(()), Mutex::new(()), Mutex::new(()), Mutex::new(()));
        {
            let _size = lock_ranked(Rank::Size, &size);
            let _index = lock_ranked(Rank::Index, &index);
            let _a = lock_ranked(Rank::Folio, &folio_a);
            let _b = lock_ranked(Rank::Folio, &folio_b);
            assert!(holds(Rank::Size) && holds(Rank::Folio));
        }
        assert!(!holds(Rank::Size) && !holds(Rank::Folio), "released locks stop counting");
        let waited = lock_ranked(Rank::Tickets, &size).with_guard(|g| g);
        assert!(holds(Rank::Tickets), "a wait keeps the rank");
        drop(waited);
        let inverted = std::thread::spawn(move || {
            let folio = Mutex::new(());
            let size = Mutex::new(());
            let _f = lock_ranked(Rank::Folio, &folio);
            let _s = lock_ranked(Rank::Size, &size);
        })
        .join();
        let message = inverted.expect_err("the size lock under a folio lock panics");
        let message = message.downcast_ref::<String>().expect("a formatted message");
        assert!(message.contains("Size taken while holding Folio"), "{message}");
    }

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
