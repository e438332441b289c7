//! Read sections and deferred reclamation: how a reader finds and copies
//! cached data with no lock and no atomic read-modify-write, and how the
//! memory it may be reading outlives it.
//!
//! A *read section* ([`ReadSection`]) brackets a lock-free walk of a folio
//! index and a copy out of a folio's buffer. Entering and leaving one are
//! two plain stores to the thread's own record, on a cache line of its
//! own: its section count goes odd on entry and even on exit. Nothing
//! shared is written, so readers on different cores do not bounce a line.
//!
//! Memory a section may still be reading (an index node replaced or
//! emptied, the index's reference to a folio it dropped, a folio buffer
//! given back) is not freed or reused at once: whoever unlinked it hands
//! its release to [`defer`]. [`reclaim`] runs deferred releases once every
//! section that could have seen the memory has ended. It issues a
//! process-wide barrier, `membarrier(2)` private expedited (every running
//! thread of the process passes a full fence, so a reader needs no fence of
//! its own), then notes the records inside a section; a batch deferred
//! before the barrier is released once each of those records has moved on.
//! A section that begins after the barrier cannot reach memory unlinked
//! before it. Where `membarrier` is unavailable, each section's entry
//! issues the fence itself. This is the kernel's RCU as liburcu's
//! membarrier flavour does it in userspace.
//!
//! Rules (asserted in debug builds):
//! - A section does not block, take a lock or call [`reclaim`]. Sections
//!   nest; an inner one costs nothing.
//! - Memory is deferred only after it is unlinked (no new section can find
//!   it), and nothing deferred is touched by its owner afterwards.
//! - A release only frees memory or gives it to a pool: it takes no lock but
//!   the allocators' own (leaf locks), so [`reclaim`] may run under any of
//!   the inode's ranked locks (a write ends with one held).
//!
//! Owns the thread records (one per thread that ever read, reused after
//! the thread exits, never freed: a lock-free list that a forked child can
//! walk) and the deferred releases (process-wide; a forked child starts
//! with none and leaks its parent's).

use std::cell::Cell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

use crate::base::locks;
use crate::base::sys;

/// One thread's record: its section count (odd while inside a section),
/// alone on its cache line.
#[repr(align(64))]
struct ReaderRecord {
    sections: AtomicU64,
    /// A live thread uses this record.
    owned: AtomicBool,
    /// The next record of the list; set before the record is published.
    next: *const ReaderRecord,
}

// SAFETY: `next` is written once, before the record is published with a
// release store, and only read afterwards; records are never freed.
unsafe impl Sync for ReaderRecord {}

/// The head of the list of every record ever made.
static RECORDS: AtomicPtr<ReaderRecord> = AtomicPtr::new(ptr::null_mut());

/// How sections order themselves against reclaimers: decided once, before
/// the first record is handed out.
static MODE: AtomicU8 = AtomicU8::new(MODE_UNSET);
const MODE_UNSET: u8 = 0;
/// `membarrier` works: sections need only a compiler fence.
const MODE_MEMBARRIER: u8 = 1;
/// No `membarrier`: each section's entry is a full fence.
const MODE_FENCE: u8 = 2;
static INIT: Once = Once::new();

/// The calling thread's record, handed back when the thread exits.
struct ThreadReader {
    record: Cell<Option<&'static ReaderRecord>>,
}

impl Drop for ThreadReader {
    fn drop(&mut self) {
        if let Some(record) = self.record.get() {
            debug_assert_eq!(record.sections.load(Ordering::Relaxed) % 2, 0, "a thread exits outside any section");
            record.owned.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static READER: ThreadReader = const { ThreadReader { record: Cell::new(None) } };
}

/// A read section, held: memory reachable when it began stays valid until
/// it is dropped. Not `Send`: it is the calling thread's.
pub struct ReadSection {
    record: &'static ReaderRecord,
    /// The count to store on exit; `None` for a nested section.
    exit_count: Option<u64>,
    _not_send: PhantomData<*const ()>,
}

impl ReadSection {
    /// Enters a section. `None` only while the thread is exiting (its
    /// record is gone): the caller takes its locked path.
    #[inline]
    pub fn enter() -> Option<ReadSection> {
        let record = READER.try_with(|r| r.record.get()).ok()?.or_else(claim_record)?;
        let count = record.sections.load(Ordering::Relaxed);
        if count % 2 == 1 {
            return Some(ReadSection { record, exit_count: None, _not_send: PhantomData });
        }
        record.sections.store(count + 1, Ordering::Relaxed);
        if MODE.load(Ordering::Relaxed) == MODE_FENCE {
            fence_for_entry();
        } else {
            // The reclaimer's membarrier orders this store before the loads
            // below, as seen from its side; the compiler must not move them.
            compiler_fence(Ordering::SeqCst);
        }
        Some(ReadSection { record, exit_count: Some(count + 2), _not_send: PhantomData })
    }
}

impl Drop for ReadSection {
    #[inline]
    fn drop(&mut self) {
        if let Some(count) = self.exit_count {
            debug_assert_eq!(self.record.sections.load(Ordering::Relaxed), count - 1, "sections end in order");
            // Release: the section's reads happen before a reclaimer that
            // sees this count frees what they read.
            self.record.sections.store(count, Ordering::Release);
        }
    }
}

/// The full fence a section's entry needs where `membarrier` is missing.
#[cold]
#[inline(never)]
fn fence_for_entry() {
    fence(Ordering::SeqCst);
}

/// Gives the calling thread a record (a free one, or a new one), setting
/// the ordering mode up first. `None` while the thread is exiting.
#[cold]
fn claim_record() -> Option<&'static ReaderRecord> {
    init();
    let record = reuse_record().unwrap_or_else(new_record);
    debug_assert!(record.owned.load(Ordering::Relaxed) && record.sections.load(Ordering::Relaxed) % 2 == 0);
    match READER.try_with(|r| r.record.set(Some(record))) {
        Ok(()) => Some(record),
        Err(_) => {
            record.owned.store(false, Ordering::Release);
            None
        }
    }
}

fn records() -> impl Iterator<Item = &'static ReaderRecord> {
    let mut at = RECORDS.load(Ordering::Acquire).cast_const();
    std::iter::from_fn(move || {
        // SAFETY: records are published with a release store (the head's
        // swap) after `next` was written, and never freed.
        let record = unsafe { at.as_ref()? };
        at = record.next;
        Some(record)
    })
}

fn reuse_record() -> Option<&'static ReaderRecord> {
    records().find(|r| {
        !r.owned.load(Ordering::Relaxed)
            && r.owned.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
    })
}

fn new_record() -> &'static ReaderRecord {
    let record = Box::leak(Box::new(ReaderRecord {
        sections: AtomicU64::new(0),
        owned: AtomicBool::new(true),
        next: ptr::null(),
    }));
    let mut head = RECORDS.load(Ordering::Acquire);
    loop {
        record.next = head;
        match RECORDS.compare_exchange_weak(head, record, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return record,
            Err(now) => head = now,
        }
    }
}

/// Decides the ordering mode (once per process) and arranges for a forked
/// child to start clean. A cache calls it when it is made: registering for
/// `membarrier` in a process that already runs several threads waits for
/// an RCU grace period of the kernel's (about 20 ms here), which the first
/// read should not pay.
pub fn init() {
    INIT.call_once(|| {
        MODE.store(membarrier_mode(), Ordering::Release);
        // SAFETY: registers a handler that only touches this module's
        // atomics and leaks memory; no other handler is affected.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        assert_eq!(rc, 0, "pthread_atfork failed");
    });
}

fn membarrier_mode() -> u8 {
    let works = sys::membarrier_register_private_expedited().is_ok() && sys::membarrier_private_expedited().is_ok();
    if works {
        MODE_MEMBARRIER
    } else {
        MODE_FENCE
    }
}

/// In a forked child only the forking thread lives on: every other
/// record is free and outside any section, the releases deferred before
/// the fork are leaked (their lock may have been held by a thread that
/// no longer exists), and `membarrier` is registered again (a new address
/// space may not inherit it; without it, sections fence themselves).
extern "C" fn after_fork_in_child() {
    let own = READER.try_with(|r| r.record.get()).ok().flatten();
    for record in records() {
        if own.is_some_and(|own| ptr::eq(own, record)) {
            continue;
        }
        let count = record.sections.load(Ordering::Relaxed);
        record.sections.store(count + count % 2, Ordering::Relaxed);
        record.owned.store(false, Ordering::Release);
    }
    LIMBO.store(Box::into_raw(Box::default()), Ordering::Release);
    DEFERRED.store(0, Ordering::Release);
    DEFERRED_BYTES.store(0, Ordering::Release);
    if MODE.load(Ordering::Acquire) == MODE_MEMBARRIER {
        MODE.store(membarrier_mode(), Ordering::Release);
    }
}

/// A release of memory, run once no section can still be reading it.
type Release = Box<dyn FnOnce() + Send>;

/// Releases deferred together, with the records that were inside a
/// section when their barrier was issued and the counts they had then.
struct Batch {
    /// Batches are numbered in the order of their barriers.
    id: u64,
    releases: Vec<Release>,
    readers: Vec<(&'static ReaderRecord, u64)>,
}

#[derive(Default)]
struct Limbo {
    /// Deferred since the last barrier.
    fresh: Vec<Release>,
    /// Behind a barrier, waiting for their readers to move on.
    waiting: VecDeque<Batch>,
    /// The id of the next batch.
    next_batch_id: u64,
}

/// The deferred releases; a pointer so that a forked child can start over.
static LIMBO: AtomicPtr<Mutex<Limbo>> = AtomicPtr::new(ptr::null_mut());
/// Releases deferred and not yet run.
static DEFERRED: AtomicUsize = AtomicUsize::new(0);
/// The bytes those releases free (as their deferrers said).
static DEFERRED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// [`reclaim_if_due`] reclaims once this many releases wait...
const DUE_RELEASES: usize = 64;
/// ... or once they would free this many bytes: what a cache may hold
/// beyond its capacity in memory given back but not yet reusable.
const DUE_BYTES: usize = 4 << 20;

fn limbo() -> &'static Mutex<Limbo> {
    let mut at = LIMBO.load(Ordering::Acquire);
    if at.is_null() {
        let fresh = Box::into_raw(Box::<Mutex<Limbo>>::default());
        at = match LIMBO.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => fresh,
            Err(won) => {
                // SAFETY: `fresh` was never published.
                drop(unsafe { Box::from_raw(fresh) });
                won
            }
        };
    }
    // SAFETY: a published limbo is never freed (a forked child leaks it).
    unsafe { &*at }
}

/// Runs `release` once no read section that began before this call can
/// still be inside the memory it frees. Call it after unlinking that
/// memory; it runs at a later [`reclaim`], on whichever thread calls it.
pub fn defer(release: impl FnOnce() + Send + 'static) {
    defer_bytes(0, release);
}

/// [`defer`] for a release that frees `bytes` (a folio buffer): they count
/// towards [`reclaim_if_due`]'s bound.
pub fn defer_bytes(bytes: usize, release: impl FnOnce() + Send + 'static) {
    let release: Release = Box::new(move || {
        release();
        DEFERRED_BYTES.fetch_sub(bytes, Ordering::AcqRel);
    });
    DEFERRED_BYTES.fetch_add(bytes, Ordering::AcqRel);
    locks::lock(limbo()).fresh.push(release);
    DEFERRED.fetch_add(1, Ordering::Release);
}

/// [`reclaim`] once enough waits to be worth its barrier (a system call
/// that interrupts every other running thread of the process): for the
/// ends of operations, which would otherwise issue one each.
pub fn reclaim_if_due() -> usize {
    if DEFERRED.load(Ordering::Acquire) >= DUE_RELEASES || DEFERRED_BYTES.load(Ordering::Acquire) >= DUE_BYTES {
        reclaim()
    } else {
        0
    }
}

/// Whether some release is deferred and not yet run.
pub fn has_deferred() -> bool {
    DEFERRED.load(Ordering::Acquire) > 0
}

/// Runs the deferred releases that no section can still need, without
/// waiting for any: puts a barrier behind those deferred since the last
/// one, and runs every batch whose readers have all moved on. Returns how
/// many ran.
pub fn reclaim() -> usize {
    if !has_deferred() {
        return 0;
    }
    reclaim_batches().0
}

/// [`reclaim`]'s work: returns how many releases ran and the id of the
/// newest batch put behind a barrier so far (all deferred before the
/// call are in it or older).
fn reclaim_batches() -> (usize, u64) {
    debug_assert!(!in_section(), "a read section does not reclaim");
    init();
    let (ready, newest) = {
        let mut limbo = locks::lock(limbo());
        if !limbo.fresh.is_empty() {
            let releases = std::mem::take(&mut limbo.fresh);
            barrier();
            let readers = records()
                .filter_map(|r| {
                    let count = r.sections.load(Ordering::Acquire);
                    (count % 2 == 1).then_some((r, count))
                })
                .collect();
            let id = limbo.next_batch_id;
            limbo.next_batch_id += 1;
            limbo.waiting.push_back(Batch { id, releases, readers });
        }
        let mut ready = Vec::new();
        limbo.waiting.retain_mut(|batch| {
            batch.readers.retain(|(r, count)| r.sections.load(Ordering::Acquire) == *count);
            if batch.readers.is_empty() {
                ready.append(&mut batch.releases);
            }
            !batch.readers.is_empty()
        });
        (ready, limbo.next_batch_id)
    };
    let ran = ready.len();
    DEFERRED.fetch_sub(ran, Ordering::AcqRel);
    ready.into_iter().for_each(|release| release());
    (ran, newest)
}

/// Runs every release deferred before the call, waiting (yielding) for
/// the sections still inside their memory: for a cache's close and for
/// tests. Releases deferred meanwhile by other threads are not waited for.
pub fn reclaim_all() {
    let (_, newest) = reclaim_batches();
    loop {
        let oldest_waiting = locks::lock(limbo()).waiting.front().map(|b| b.id);
        if oldest_waiting.is_none_or(|id| id >= newest) {
            return;
        }
        std::thread::yield_now();
        reclaim_batches();
    }
}

/// Every section that began before this returns is visible to the caller
/// (its entry store), and every unlink before it is visible to sections
/// that begin after.
fn barrier() {
    if MODE.load(Ordering::Acquire) == MODE_MEMBARRIER {
        sys::membarrier_private_expedited().expect("membarrier worked when registered");
    } else {
        fence(Ordering::SeqCst);
    }
}

/// Whether the calling thread is inside a read section (debug checks).
pub fn in_section() -> bool {
    READER.try_with(|r| r.record.get()).ok().flatten().is_some_and(|r| r.sections.load(Ordering::Relaxed) % 2 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A flag that a release deferred now sets when it runs.
    fn deferred_flag() -> Arc<AtomicBool> {
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        defer(move || flag.store(true, Ordering::SeqCst));
        ran
    }

    /// Defers a release while `reader` is inside a section, reclaims three
    /// times, then lets the reader leave and reclaims all: whether the
    /// release was held while the section lasted, and whether it ran after.
    fn a_release_deferred_inside(
        reader: std::thread::JoinHandle<()>,
        leave: std::sync::mpsc::Sender<()>,
    ) -> (bool, bool) {
        let ran = deferred_flag();
        for _ in 0..3 {
            reclaim();
        }
        let held = !ran.load(Ordering::SeqCst);
        leave.send(()).unwrap();
        reader.join().unwrap();
        reclaim_all();
        (held, ran.load(Ordering::SeqCst))
    }

    /// A release waits for a section that was open when it was deferred,
    /// and runs once that section ends; nested sections count once.
    #[test]
    fn a_release_waits_for_an_open_section() {
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let outer = ReadSection::enter().unwrap();
            let inner = ReadSection::enter().unwrap();
            drop(inner);
            assert!(in_section(), "the outer section is still open");
            entered_tx.send(()).unwrap();
            leave_rx.recv().unwrap();
            drop(outer);
            assert!(!in_section());
        });
        entered_rx.recv().unwrap();
        let (held, ran_after) = a_release_deferred_inside(reader, leave_tx);
        assert!(held, "released while a section that could see it was open");
        assert!(ran_after, "released once the section ended");
    }

    /// A section that begins after the release was deferred does not hold
    /// it back.
    #[test]
    fn later_sections_do_not_hold_a_release() {
        let ran = deferred_flag();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        // A reader entering and leaving sections all the time.
        let reader = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                let _s = ReadSection::enter().unwrap();
                std::hint::spin_loop();
            }
        });
        let started = std::time::Instant::now();
        while !ran.load(Ordering::SeqCst) {
            reclaim();
            assert!(started.elapsed().as_secs() < 10, "a busy reader starved reclamation");
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
    }

    /// A thread inside a read section until told to leave (a send, or the
    /// sender dropped); returned once it is inside.
    fn thread_inside_a_section() -> (std::thread::JoinHandle<()>, std::sync::mpsc::Sender<()>) {
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let section = ReadSection::enter().unwrap();
            entered_tx.send(()).unwrap();
            let _ = leave_rx.recv();
            drop(section);
        });
        entered_rx.recv().unwrap();
        (reader, leave_tx)
    }

    /// Runs `body` in a forked child of this (multi-threaded) test process
    /// and returns its exit status: 0 when `body` returned true, 1 when
    /// false, 2 when it panicked; killed by SIGALRM after 20 s (a child
    /// waiting for a section that will never end). The child prints
    /// nothing and ends with `_exit`: only the forking thread lives on in
    /// it, and locks other threads held stay held there.
    fn in_forked_child(body: impl FnOnce() -> bool) -> libc::c_int {
        init();
        // SAFETY: the child runs only `body` and `_exit`s: no destructor,
        // flush or atexit handler of the parent's runs twice.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: alarm and _exit are async-signal-safe.
            unsafe { libc::alarm(20) };
            let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(_) => 2,
            };
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked; `status` is ours.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(rc, pid, "waitpid: {}", std::io::Error::last_os_error());
        assert!(
            libc::WIFEXITED(status),
            "the child ended by signal {} (a section that never ends?)",
            libc::WTERMSIG(status)
        );
        libc::WEXITSTATUS(status)
    }

    /// A child forked while another thread is inside a section reclaims
    /// without waiting for that thread (it does not exist in the child),
    /// leaks the releases deferred before the fork instead of running them
    /// (their memory may still be the parent's in use), and reads in
    /// sections of its own.
    #[test]
    fn a_forked_child_reclaims_without_its_parents_readers() {
        let (reader, leave_tx) = thread_inside_a_section();
        let before_fork = deferred_flag();
        let code = in_forked_child(|| {
            let ran = deferred_flag();
            drop(ReadSection::enter());
            reclaim_all();
            let own = READER.with(|r| r.record.get());
            let others_free = records()
                .filter(|r| !own.is_some_and(|own| ptr::eq(own, *r)))
                .all(|r| !r.owned.load(Ordering::Acquire) && r.sections.load(Ordering::Acquire) % 2 == 0);
            ran.load(Ordering::SeqCst) && !before_fork.load(Ordering::SeqCst) && others_free
        });
        assert_eq!(code, 0, "the child's reclamation (1: a release ran or did not as it should)");
        leave_tx.send(()).unwrap();
        reader.join().unwrap();
        reclaim_all();
        assert!(before_fork.load(Ordering::SeqCst), "the parent runs its own release");
    }

    /// Where `membarrier` is missing, sections fence themselves and the
    /// reclaimer's barrier is a fence: a release still waits for an open
    /// section and runs after it. Checked in a forked child (one thread,
    /// so switching the mode cannot race another test's sections).
    #[test]
    fn fence_mode_waits_for_open_sections_too() {
        let code = in_forked_child(|| {
            MODE.store(MODE_FENCE, Ordering::SeqCst);
            let (reader, leave_tx) = thread_inside_a_section();
            let (held, ran_after) = a_release_deferred_inside(reader, leave_tx);
            held && ran_after && MODE.load(Ordering::SeqCst) == MODE_FENCE
        });
        assert_eq!(code, 0, "in fence mode a release ran early or never (1) or the child panicked (2)");
    }

    /// Records are reused after their threads exit.
    #[test]
    fn exited_threads_give_their_records_back() {
        for _ in 0..50 {
            std::thread::spawn(|| drop(ReadSection::enter().unwrap())).join().unwrap();
        }
        assert!(records().count() < 50, "{} records for 50 threads, one at a time", records().count());
    }
}
