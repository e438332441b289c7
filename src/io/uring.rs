//! The io_uring backend: every attempt of a batch is one or more waves of
//! `IORING_OP_READV`/`IORING_OP_WRITEV` on a ring owned by the submitting
//! thread.
//!
//! Invariants:
//! - One ring per submitting thread (thread-local, created on first use), so
//!   submitters never contend on a ring lock and a ring is never shared.
//! - At most `sq_entries` requests are pushed but not yet reaped at any time;
//!   the completion queue holds twice that, so it can never overflow.
//! - [`FdEngine::submit_once`] returns only after every request it pushed has
//!   been reaped (or, if the ring failed, after every request the kernel had
//!   accepted has completed and the ring with any unsubmitted entries has
//!   been dropped). The iovec arrays and the buffers they point into are
//!   borrowed for the whole call, so no I/O ever outlives its buffers.
//! - A thread that cannot create a ring at run time does its attempts with
//!   plain `preadv`/`pwritev` instead of failing the I/O.
//! - A request the kernel cancelled (`ECANCELED`: wbcache never cancels
//!   one, so the kernel could not run it, e.g. no io-wq worker thread under
//!   `RLIMIT_NPROC`) is redone with `preadv`/`pwritev`, never reported as
//!   the I/O's error.

use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use io_uring::{opcode, squeue, types, EnterFlags, IoUring};

use super::backend::Io;
use super::fd::{ioprio_of, open_fd_store, rw_once, FdEngine, SyncEngine};
use super::queue::{complete_without_backend, BatchQueue, Completion, QueuedWrite, Reap, SlotTable, WriteQueue};
use super::store::{Attempt, BackingStore, IoKind, IoOp, OpenHow};
use crate::base::sys;

/// The kernel's limit on ring entries (`IORING_MAX_ENTRIES`).
const MAX_RING_ENTRIES: u32 = 32_768;
/// A write queue's ring is this many times the I/O depth (see
/// `UringIo::write_queue`).
const WRITE_QUEUE_RING_FACTOR: u32 = 8;
/// Smallest ring we create: a tiny ring only adds submit round trips.
const MIN_RING_ENTRIES: u32 = 8;
/// How many times in a row `io_uring_enter` may report `EAGAIN`/`EBUSY`
/// without any completion arriving before the ring is declared broken.
const MAX_BUSY_RETRIES: u32 = 10_000;
const BUSY_BACKOFF: Duration = Duration::from_micros(100);

/// Ring size for `io_depth`: rounded up to a power of two (the kernel rounds
/// anyway), at least [`MIN_RING_ENTRIES`], at most the kernel maximum.
fn ring_entries_for(io_depth: u32) -> u32 {
    io_depth.clamp(MIN_RING_ENTRIES, MAX_RING_ENTRIES).next_power_of_two()
}

/// The io_uring backend.
pub struct UringIo {
    engine: Arc<UringEngine>,
}

impl UringIo {
    /// Checks that an io_uring can be created and used on this machine (it
    /// may be disabled by seccomp, `kernel.io_uring_disabled` or an old
    /// kernel), so the caller can fall back to the thread pool.
    pub fn new(io_depth: u32) -> io::Result<Self> {
        let entries = ring_entries_for(io_depth);
        probe(entries)?;
        Ok(UringIo { engine: Arc::new(UringEngine { entries, fallback_attempts: AtomicU64::new(0) }) })
    }

    /// Entries of each per-thread ring.
    #[cfg(test)]
    pub fn ring_entries(&self) -> u32 {
        self.engine.entries
    }

    /// How many attempts ran with `preadv`/`pwritev` because a thread could
    /// not get a working ring.
    #[cfg(test)]
    pub fn fallback_attempts(&self) -> u64 {
        self.engine.fallback_attempts.load(Ordering::Relaxed)
    }
}

impl Io for UringIo {
    fn kind(&self) -> IoKind {
        IoKind::Uring
    }

    fn open(&self, path: &Path, how: &OpenHow) -> io::Result<Arc<dyn BackingStore>> {
        open_fd_store(path, how, self.engine.clone())
    }

    fn prepare_thread(&self) {
        self.engine.with_thread_ring(|_| ((), RingState::Usable));
    }

    /// A ring of its own (the size of the thread rings) when one can be
    /// created on this thread; batches otherwise.
    fn write_queue(&self) -> Box<dyn WriteQueue> {
        // The flusher keeps up to two rings' worth of writes queued plus one
        // pass of up to four per unit of depth: its ring holds them all, so
        // the block layer sees (sorts and merges) the whole queue while the
        // completion queue stays bounded (see `UringQueue::fill`).
        let entries = ring_entries_for(self.engine.entries.saturating_mul(WRITE_QUEUE_RING_FACTOR));
        match new_thread_ring(entries) {
            Ok(ring) => Box::new(UringQueue::new(ring)),
            Err(_) => Box::<BatchQueue>::default(),
        }
    }
}

/// Creates a ring, checks that READV/WRITEV are supported (when the kernel
/// can say) and runs one NOP through it: some sandboxes allow
/// `io_uring_setup` but block `io_uring_enter`.
fn probe(entries: u32) -> io::Result<()> {
    let mut ring = IoUring::new(entries)?;
    let mut probe = io_uring::Probe::new();
    // IORING_REGISTER_PROBE needs Linux 5.6; READV/WRITEV exist since 5.1, so
    // a kernel that cannot answer has them.
    if ring.submitter().register_probe(&mut probe).is_ok()
        && !(probe.is_supported(opcode::Readv::CODE) && probe.is_supported(opcode::Writev::CODE))
    {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "io_uring lacks READV/WRITEV"));
    }
    let nop = opcode::Nop::new().build().user_data(0);
    // SAFETY: a NOP references no memory.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| io::Error::other("fresh io_uring has a full submission queue"))?;
    loop {
        match ring.submitter().submit_and_wait(1) {
            Ok(_) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
    let cqe = ring.completion().next().ok_or_else(|| io::Error::other("io_uring NOP did not complete"))?;
    if cqe.result() < 0 {
        return Err(io::Error::from_raw_os_error(-cqe.result()));
    }
    Ok(())
}

/// Creates the ring of one submitting thread. SINGLE_ISSUER|DEFER_TASKRUN
/// (Linux 6.1) suit a ring that only its owner thread touches and that is
/// always waited on with GETEVENTS: completion work runs inside our own
/// `io_uring_enter` instead of interrupting the thread. Older kernels refuse
/// those flags; then COOP_TASKRUN (5.19), then a plain ring.
fn new_thread_ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::builder().setup_coop_taskrun().build(entries))
        .or_else(|_| IoUring::new(entries))
        .and_then(above_program_descriptors)
}

/// `ring` on a descriptor above the program's numbers
/// ([`sys::above_program_descriptors`] says why), mapped anew from it;
/// `ring` itself where it cannot be moved. A failed mapping fails the
/// ring (the thread then does its I/O without one).
fn above_program_descriptors(ring: IoUring) -> io::Result<IoUring> {
    use std::os::fd::AsRawFd;
    let Some(high) = sys::duplicate_above_floor(ring.as_raw_fd()) else { return Ok(ring) };
    let params = ring.params().clone();
    drop(ring);
    // SAFETY: `high` is a descriptor of the ring just dropped, which it
    // keeps alive, owned by nothing else (`from_fd` takes it, and closes
    // it on failure); `params` are the kernel's for that ring.
    unsafe { IoUring::from_fd(high, params) }
}

/// The engine shared by every store a [`UringIo`] opened.
struct UringEngine {
    entries: u32,
    fallback_attempts: AtomicU64,
}

/// This thread's rings, one per ring size in use (normally exactly one);
/// `None` records that creating that size failed here, so we do not retry
/// `io_uring_setup` on every attempt.
#[derive(Default)]
struct ThreadRings {
    /// The process the rings belong to. A child forked by this thread
    /// inherits them, but its submissions would land in the parent's rings
    /// (shared mappings), so a child starts over with rings of its own.
    pid: u32,
    rings: Vec<(u32, Option<IoUring>)>,
}

thread_local! {
    static RINGS: RefCell<ThreadRings> = RefCell::new(ThreadRings::default());
}

impl UringEngine {
    /// Runs `f` on this thread's ring of this engine's size, made on
    /// first use; `None` without one (its creation failed here, or the
    /// thread's storage is being torn down).
    fn with_thread_ring<T>(&self, f: impl FnOnce(&mut IoUring) -> (T, RingState)) -> Option<T> {
        RINGS
            .try_with(|rings| {
                // Busy only if re-entered, which cannot happen; stay safe anyway.
                let mut rings = rings.try_borrow_mut().ok()?;
                let pid = std::process::id();
                if rings.pid != pid {
                    // Closing our copies leaves the parent's rings alone.
                    rings.rings.clear();
                    rings.pid = pid;
                }
                let slot = match rings.rings.iter().position(|(entries, _)| *entries == self.entries) {
                    Some(i) => i,
                    None => {
                        rings.rings.push((self.entries, new_thread_ring(self.entries).ok()));
                        rings.rings.len() - 1
                    }
                };
                let (result, state) = f(rings.rings[slot].1.as_mut()?);
                if state == RingState::Broken {
                    // Dropping the ring discards entries the kernel never
                    // consumed; the next attempt on this thread gets a new one.
                    rings.rings.remove(slot);
                }
                Some(result)
            })
            .ok()
            .flatten()
    }
}

/// Whether a ring can be used again after a submission.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RingState {
    Usable,
    Broken,
}

impl FdEngine for UringEngine {
    fn submit_once(&self, fd: RawFd, ops: &mut [IoOp<'_>]) -> Vec<Attempt> {
        let on_ring = self.with_thread_ring(|ring| {
            let (attempts, ring_ok) = submit_on_ring(ring, fd, ops);
            (attempts, if ring_ok { RingState::Usable } else { RingState::Broken })
        });
        match on_ring {
            Some(mut attempts) => {
                // Cancelled by the kernel, not failed: do those here.
                for (op, attempt) in ops.iter_mut().zip(attempts.iter_mut()) {
                    if op.result.is_none() && is_cancelled(attempt) {
                        self.fallback_attempts.fetch_add(1, Ordering::Relaxed);
                        *attempt = rw_once(fd, op);
                    }
                }
                attempts
            }
            // No ring on this thread (creation failed, or thread-local storage
            // is being torn down): do the attempt synchronously.
            None => {
                self.fallback_attempts.fetch_add(1, Ordering::Relaxed);
                SyncEngine.submit_once(fd, ops)
            }
        }
    }
}

/// One pending op of the attempt, with the iovec array its SQE points to.
struct Request {
    index: usize,
    offset: u64,
    iovecs: Vec<libc::iovec>,
    write: bool,
    ioprio: u16,
}

fn is_busy(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY))
}

/// A request the kernel cancelled instead of running. wbcache never
/// cancels a request (no `ASYNC_CANCEL`, links or timeouts), so this means
/// the kernel could not execute it: a read or write it must hand to an
/// io-wq worker thread is cancelled when that thread cannot be created
/// (`RLIMIT_NPROC` reached; found by `capi/tests/capi/resources.rs`, where every
/// O_DIRECT write of a running cache failed so and its data was lost at
/// close). Nothing was transferred: the caller redoes it synchronously.
fn is_cancelled(attempt: &Attempt) -> bool {
    matches!(attempt, Err(e) if e.raw_os_error() == Some(libc::ECANCELED))
}

/// The requests for the ops without a result yet, each with its iovecs.
fn requests_of(ops: &mut [IoOp<'_>]) -> Vec<Request> {
    ops.iter_mut()
        .enumerate()
        .filter(|(_, op)| op.result.is_none())
        .map(|(index, op)| {
            let write = op.is_write();
            let ioprio = ioprio_of(op.priority);
            let (offset, iovecs) = op.remaining_iovecs();
            Request { index, offset, iovecs, write, ioprio }
        })
        .collect()
}

/// After a submission loop: on a fatal ring error, drains the
/// `outstanding` requests (the kernel may still read their iovecs) and
/// fails every request without a result with the error's errno. Returns
/// whether the ring is still usable.
fn settle_failure(
    ring: &mut IoUring,
    fatal: Option<io::Error>,
    outstanding: usize,
    results: &mut [Option<Attempt>],
) -> bool {
    let Some(err) = fatal else { return true };
    drain_after_failure(ring, outstanding, results);
    let errno = err.raw_os_error().unwrap_or(libc::EIO);
    for slot in results.iter_mut().filter(|r| r.is_none()) {
        *slot = Some(Err(io::Error::from_raw_os_error(errno)));
    }
    false
}

/// Pushes `requests[*next..]` onto the submission queue while fewer than
/// `capacity` are outstanding and the queue has room, advancing `next`
/// and `outstanding`; a request with too many iovecs fails at once.
fn push_requests(
    ring: &mut IoUring,
    fd: RawFd,
    requests: &[Request],
    capacity: usize,
    (next, outstanding): (&mut usize, &mut usize),
    results: &mut [Option<Attempt>],
) {
    let mut sq = ring.submission();
    while *next < requests.len() && *outstanding < capacity {
        let req = &requests[*next];
        let Ok(iov_count) = u32::try_from(req.iovecs.len()) else {
            results[req.index] = Some(Err(io::Error::from_raw_os_error(libc::EINVAL)));
            *next += 1;
            continue;
        };
        let entry = build_entry(fd, req, iov_count);
        // SAFETY: the SQE points to `req.iovecs` (owned by the caller's
        // `requests`, which outlive every entry) and through it into the
        // op's buffers, which `submit_on_ring`'s caller borrows for that
        // whole synchronous call. Every pushed entry is reaped, or the ring
        // dropped without the kernel having seen it, before
        // `submit_on_ring` returns.
        if unsafe { sq.push(&entry) }.is_err() {
            break; // full: submit what we have, then refill
        }
        *next += 1;
        *outstanding += 1;
    }
}

/// Runs one attempt of every pending op of `ops` on `ring`. Returns the
/// attempts and whether the ring is still usable.
fn submit_on_ring(ring: &mut IoUring, fd: RawFd, ops: &mut [IoOp<'_>]) -> (Vec<Attempt>, bool) {
    let mut results: Vec<Option<Attempt>> =
        ops.iter().map(|op| if op.result.is_some() { Some(Ok(0)) } else { None }).collect();
    // `requests` owns every iovec array until this function returns, and the
    // arrays are never resized after being built, so the pointers in the SQEs
    // stay valid while the kernel may read them.
    let requests = requests_of(ops);

    let capacity = ring.params().sq_entries() as usize;
    let mut next = 0; // first request not yet pushed
    let mut outstanding = 0usize; // pushed, completion not yet reaped
    let mut busy_retries = 0u32;
    let mut fatal: Option<io::Error> = None;

    while next < requests.len() || outstanding > 0 {
        // Refill: keep at most `capacity` requests outstanding, which also
        // bounds the completion queue (2 * capacity) so it cannot overflow.
        push_requests(ring, fd, &requests, capacity, (&mut next, &mut outstanding), &mut results);
        if outstanding == 0 {
            if next < requests.len() {
                // Nothing outstanding yet the queue took nothing: it is not
                // ours to fill (cannot happen), so stop rather than spin.
                fatal = Some(io::Error::from_raw_os_error(libc::EBUSY));
                break;
            }
            continue; // only unsubmittable requests remained; the loop ends
        }

        match ring.submitter().submit_and_wait(1) {
            Ok(_) => busy_retries = 0,
            // A signal interrupted the wait; entries the kernel already took
            // stay taken (its SQ head moved), the rest go with the next call.
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            // Out of kernel resources or completions backed up: reap what is
            // there, back off briefly and try again.
            Err(e) if is_busy(&e) => {
                let reaped = reap(ring, &mut results);
                outstanding = outstanding.saturating_sub(reaped);
                if reaped == 0 {
                    busy_retries += 1;
                    if busy_retries >= MAX_BUSY_RETRIES {
                        fatal = Some(e);
                        break;
                    }
                    std::thread::sleep(BUSY_BACKOFF);
                }
                continue;
            }
            Err(e) => {
                fatal = Some(e);
                break;
            }
        }
        outstanding = outstanding.saturating_sub(reap(ring, &mut results));
    }

    let ring_ok = settle_failure(ring, fatal, outstanding, &mut results);
    drop(requests); // only now may the iovec arrays go
    let attempts =
        results.into_iter().map(|r| r.unwrap_or_else(|| Err(io::Error::from_raw_os_error(libc::EIO)))).collect();
    (attempts, ring_ok)
}

fn build_entry(fd: RawFd, req: &Request, iov_count: u32) -> squeue::Entry {
    let target = types::Fd(fd);
    let entry = if req.write {
        opcode::Writev::new(target, req.iovecs.as_ptr(), iov_count).offset(req.offset).ioprio(req.ioprio).build()
    } else {
        opcode::Readv::new(target, req.iovecs.as_ptr(), iov_count).offset(req.offset).ioprio(req.ioprio).build()
    };
    entry.user_data(req.index as u64)
}

/// Moves every available completion into `results`; returns how many.
fn reap(ring: &mut IoUring, results: &mut [Option<Attempt>]) -> usize {
    let mut reaped = 0;
    for cqe in ring.completion() {
        reaped += 1;
        let res = cqe.result();
        let attempt = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(res as usize) };
        if let Some(slot) = results.get_mut(cqe.user_data() as usize) {
            *slot = Some(attempt);
        }
    }
    reaped
}

/// After `io_uring_enter` failed for good: waits for every request the
/// kernel already accepted (their buffers must stay borrowed until they
/// complete) without submitting the ones it did not; the caller then drops
/// the ring, discarding those. If even waiting fails, aborts: returning
/// would let the kernel write into freed memory.
fn drain_after_failure(ring: &mut IoUring, mut outstanding: usize, results: &mut [Option<Attempt>]) {
    loop {
        outstanding = outstanding.saturating_sub(reap(ring, results));
        let in_kernel = outstanding.saturating_sub(ring.submission().len());
        if in_kernel == 0 {
            return;
        }
        // SAFETY: to_submit = 0 submits nothing; GETEVENTS only waits for
        // completions, with no argument structure.
        let waited = unsafe { ring.submitter().enter::<libc::sigset_t>(0, 1, EnterFlags::GETEVENTS.bits(), None) };
        match waited {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) || is_busy(&e) => std::thread::sleep(BUSY_BACKOFF),
            Err(e) => {
                eprintln!("wbcache: io_uring cannot reap {in_kernel} in-flight requests ({e}); aborting");
                std::process::abort();
            }
        }
    }
}

/// [`WriteQueue`] on an io_uring of its own: writes are submitted as soon as
/// the submission queue has room and completed as their CQEs arrive, so the
/// device stays busy while the owner builds the next writes.
///
/// Invariants: every slot in use in `slots` is either in `backlog`
/// (not handed to the ring) or has exactly one SQE in the ring (`in_ring`
/// counts those); a slot is freed only after its final CQE was reaped.
pub struct UringQueue {
    /// `None` after the ring failed for good: the rest runs synchronously.
    ring: Option<IoUring>,
    slots: SlotTable,
    backlog: std::collections::VecDeque<usize>,
    in_ring: usize,
    ready: Vec<Completion>,
    queued: usize,
}

impl UringQueue {
    fn new(ring: IoUring) -> UringQueue {
        UringQueue {
            ring: Some(ring),
            slots: SlotTable::default(),
            backlog: Default::default(),
            in_ring: 0,
            ready: Vec::new(),
            queued: 0,
        }
    }

    fn finish(&mut self, slot: usize, result: io::Result<usize>) {
        let completion = self.slots.finish(slot, result);
        self.ready.push(completion);
    }

    /// Hands backlog writes to the submission queue while it has room and
    /// fewer than `sq_entries` writes are in the ring: the submission queue
    /// empties at every submit, so only this bound keeps the completions
    /// outstanding within the completion queue (twice that size). An
    /// overflowing completion queue would lean on the kernel's overflow
    /// list, which can fail to allocate (`EBADR`) and did not exist before
    /// Linux 5.5 (completions dropped: writes that never finish).
    fn fill(&mut self) {
        let Some(ring) = self.ring.as_mut() else { return };
        let mut sq = ring.submission();
        let in_ring_max = sq.capacity();
        while let Some(&slot) = self.backlog.front() {
            if sq.is_full() || self.in_ring >= in_ring_max {
                break;
            }
            let f = self.slots.get_mut(slot);
            let fd = f.write.store.raw_fd().expect("only stores with a descriptor are queued on the ring");
            let (offset, iovecs) = f.remaining_iovecs();
            f.iovecs = iovecs;
            let Ok(iov_count) = u32::try_from(f.iovecs.len()) else {
                drop(sq);
                self.backlog.pop_front();
                self.finish(slot, Err(io::Error::from_raw_os_error(libc::EINVAL)));
                sq = self.ring.as_mut().expect("checked above").submission();
                continue;
            };
            let entry = opcode::Writev::new(types::Fd(fd), f.iovecs.as_ptr(), iov_count)
                .offset(offset)
                .ioprio(ioprio_of(f.write.priority))
                .build()
                .user_data(slot as u64);
            // SAFETY: the SQE points at `f.iovecs` and through it into the
            // write's buffers; both are owned by the slot, which is freed
            // only after this request's CQE has been reaped (or, if the ring
            // dies, after `abandon_ring` waited for it). The descriptor stays
            // open because the slot holds the store.
            if unsafe { sq.push(&entry) }.is_err() {
                break;
            }
            self.backlog.pop_front();
            self.in_ring += 1;
        }
    }

    /// Folds one CQE into its write: done, retried, or failed. A write the
    /// kernel cancelled (see [`is_cancelled`]) is attempted here instead.
    fn complete(&mut self, slot: usize, res: i32) {
        assert!(self.in_ring > 0, "a completion for a request the ring holds (slot {slot})");
        self.in_ring -= 1;
        let f = self.slots.get_mut(slot);
        let mut attempt = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(res as usize) };
        if is_cancelled(&attempt) {
            let fd = f.write.store.raw_fd().expect("only stores with a descriptor are queued on the ring");
            // From what earlier attempts left, as the ring would have.
            let mut op = f.write.as_op();
            op.done = f.done;
            attempt = rw_once(fd, &mut op);
        }
        match f.fold_attempt(attempt) {
            Some(result) => self.finish(slot, result),
            None => self.backlog.push_back(slot),
        }
    }

    fn reap_cqes(&mut self) -> usize {
        let Some(ring) = self.ring.as_mut() else { return 0 };
        let cqes: Vec<(usize, i32)> = ring.completion().map(|c| (c.user_data() as usize, c.result())).collect();
        for &(slot, res) in &cqes {
            self.complete(slot, res);
        }
        cqes.len()
    }

    /// The ring failed for good: waits for the requests the kernel took
    /// (their buffers stay owned until then), drops the ring with whatever
    /// it never took, and runs every unfinished write synchronously.
    fn abandon_ring(&mut self, err: &io::Error) {
        if let Some(mut ring) = self.ring.take() {
            let in_sq = ring.submission().len();
            let mut in_kernel = self.in_ring.saturating_sub(in_sq);
            while in_kernel > 0 {
                let cqes: Vec<(usize, i32)> = ring.completion().map(|c| (c.user_data() as usize, c.result())).collect();
                in_kernel = in_kernel.saturating_sub(cqes.len());
                for (slot, res) in cqes {
                    self.complete(slot, res);
                }
                if in_kernel == 0 {
                    break;
                }
                // SAFETY: to_submit = 0 submits nothing; GETEVENTS only waits.
                let waited =
                    unsafe { ring.submitter().enter::<libc::sigset_t>(0, 1, EnterFlags::GETEVENTS.bits(), None) };
                if let Err(e) = waited {
                    if e.raw_os_error() != Some(libc::EINTR) && !is_busy(&e) {
                        eprintln!("wbcache: io_uring ({err}) cannot reap {in_kernel} in-flight writes ({e}); aborting");
                        std::process::abort();
                    }
                    std::thread::sleep(BUSY_BACKOFF);
                }
            }
            // Entries still in the SQ were never seen by the kernel.
            drop(ring);
        }
        self.in_ring = 0;
        let unfinished = self.slots.in_use();
        self.backlog.clear();
        for slot in unfinished {
            // From the start: rewriting bytes an earlier attempt wrote is
            // harmless (same data).
            let result = self.slots.get_mut(slot).write.run_now();
            self.finish(slot, result);
        }
    }

    /// Submits what fits and, with [`Reap::Wait`], blocks for one
    /// completion.
    fn enter(&mut self, how: Reap) {
        self.fill();
        let Some(ring) = self.ring.as_mut() else { return };
        let want = usize::from(how == Reap::Wait && self.in_ring > 0);
        match ring.submitter().submit_and_wait(want) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if is_busy(&e) => {
                if self.reap_cqes() == 0 {
                    std::thread::sleep(BUSY_BACKOFF);
                }
            }
            Err(e) => self.abandon_ring(&e),
        }
    }
}

impl UringQueue {
    /// As [`UringQueue::enter`] with a wait, for at most `timeout` (a ring
    /// without the kernel's timed wait, before Linux 5.11, waits in full).
    fn enter_within(&mut self, timeout: Duration) {
        self.fill();
        let in_ring = self.in_ring;
        let Some(ring) = self.ring.as_mut() else { return };
        if in_ring == 0 || !ring.params().is_feature_ext_arg() {
            return self.enter(Reap::Wait);
        }
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => {}
            Err(e) if is_busy(&e) => {
                if self.reap_cqes() == 0 {
                    std::thread::sleep(BUSY_BACKOFF);
                }
            }
            Err(e) => self.abandon_ring(&e),
        }
    }
}

impl WriteQueue for UringQueue {
    fn push(&mut self, write: QueuedWrite) {
        self.queued += 1;
        if write.tail || self.ring.is_none() || write.store.raw_fd().is_none() || write.is_empty() {
            self.ready.push(complete_without_backend(&write));
            return;
        }
        let slot = self.slots.insert(write);
        // Submitted by the next `reap` (one system call for many pushes).
        self.backlog.push_back(slot);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.queued
    }

    fn reap(&mut self, how: Reap) -> Vec<Completion> {
        loop {
            self.reap_cqes();
            if !self.ready.is_empty() || how == Reap::Poll || self.queued == 0 {
                break;
            }
            // Without a ring every write completes inside `push`.
            assert!(self.ring.is_some(), "queued writes without a ring");
            self.enter(Reap::Wait);
        }
        if how == Reap::Poll {
            // Keep the ring fed with what completions made room for.
            self.fill();
            if let Some(ring) = self.ring.as_mut() {
                let _ = ring.submit();
            }
        }
        let done = std::mem::take(&mut self.ready);
        self.queued -= done.len();
        done
    }

    fn reap_within(&mut self, timeout: Duration) -> Vec<Completion> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            self.reap_cqes();
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !self.ready.is_empty() || self.queued == 0 || left.is_zero() {
                break;
            }
            assert!(self.ring.is_some(), "queued writes without a ring");
            self.enter_within(left);
        }
        self.reap(Reap::Poll)
    }
}

impl Drop for UringQueue {
    /// Waits for every write still in flight: their buffers must outlive
    /// them. The owner normally drains the queue before dropping it.
    fn drop(&mut self) {
        while self.queued > 0 {
            let _ = self.reap(Reap::Wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::fd::testutil::*;
    use crate::io::{read_full, run_batch, write_full, IoPriority, BLOCK_SIZE};

    /// The backend under test, or None (with a note) where io_uring is
    /// unavailable, e.g. in a sandbox; the fallback is tested separately.
    fn uring(io_depth: u32) -> Option<UringIo> {
        match UringIo::new(io_depth) {
            Ok(u) => Some(u),
            Err(e) => {
                eprintln!("skipping: io_uring unavailable here: {e}");
                None
            }
        }
    }

    #[test]
    fn write_queue_completes_every_write_once_across_stores() {
        let Some(io) = uring(16) else { return };
        let (pa, pb) = (TempPath::new("queue-a"), TempPath::new("queue-b"));
        let a = io.open(&pa.0, &rw_create()).unwrap();
        let b = io.open(&pb.0, &rw_create()).unwrap();
        let mut queue = io.write_queue();
        crate::io::queue::tests::exercise(&mut *queue, &a, &b);
    }

    /// The ring queue's handling of each CQE result, fed directly (a real
    /// file never returns short or interrupted writes on demand): a short
    /// write resubmits the remainder, EINTR/EAGAIN retry, zero bytes and
    /// other errors fail the write, and the attempt cap ends in EIO.
    #[test]
    fn write_queue_cqe_results_follow_the_retry_policy() {
        let Some(_) = uring(8) else { return };
        let path = TempPath::new("queue-cqe");
        let store = crate::io::fd::open_fd_store(&path.0, &rw_create(), Arc::new(SyncEngine)).unwrap();
        let mut q = UringQueue::new(new_thread_ring(8).unwrap());
        let buf = Arc::new(crate::buf::AlignedBuf::zeroed(2 * BLOCK_SIZE));
        let start = |q: &mut UringQueue, tag: u64| {
            let segments = vec![crate::io::queue::Segment { buf: buf.clone(), range: 0..2 * BLOCK_SIZE }];
            let slot = q.slots.insert(QueuedWrite {
                store: store.clone(),
                offset: 0,
                segments,
                priority: IoPriority::Async,
                tag,
                tail: false,
            });
            q.queued += 1;
            q.in_ring += 1; // as if its SQE were in the ring
            slot
        };
        let taken = |q: &mut UringQueue| std::mem::take(&mut q.ready);

        let s = start(&mut q, 1);
        q.complete(s, BLOCK_SIZE as i32);
        assert_eq!(q.backlog.pop_front(), Some(s), "a short write goes again");
        assert_eq!(q.slots.get_mut(s).done, BLOCK_SIZE);
        q.in_ring += 1;
        q.complete(s, -libc::EINTR);
        assert_eq!(q.backlog.pop_front(), Some(s), "EINTR retries");
        q.in_ring += 1;
        q.complete(s, BLOCK_SIZE as i32);
        let done = taken(&mut q);
        assert_eq!((done.len(), done[0].tag), (1, 1));
        assert_eq!(*done[0].result.as_ref().unwrap(), 2 * BLOCK_SIZE, "the whole write is reported");
        assert!(!q.slots.in_use().contains(&s) && q.backlog.is_empty());

        let s = start(&mut q, 2);
        q.complete(s, 0);
        let done = taken(&mut q);
        assert_eq!(done[0].result.as_ref().unwrap_err().kind(), io::ErrorKind::WriteZero);

        let s = start(&mut q, 3);
        q.complete(s, -libc::ENOSPC);
        assert_eq!(taken(&mut q)[0].result.as_ref().unwrap_err().raw_os_error(), Some(libc::ENOSPC));

        // Cancelled by the kernel (no io-wq worker under RLIMIT_NPROC):
        // written synchronously, from what the first attempt left.
        let s = start(&mut q, 5);
        q.complete(s, BLOCK_SIZE as i32);
        assert_eq!(q.backlog.pop_front(), Some(s));
        q.in_ring += 1;
        q.complete(s, -libc::ECANCELED);
        let done = taken(&mut q);
        assert_eq!((done.len(), done[0].tag), (1, 5));
        assert_eq!(*done[0].result.as_ref().unwrap(), 2 * BLOCK_SIZE, "cancelled, then written here");
        assert_eq!(store.len().unwrap(), 2 * BLOCK_SIZE as u64);

        let s = start(&mut q, 4);
        for _ in 1..crate::io::MAX_ATTEMPTS_PER_OP {
            q.complete(s, -libc::EAGAIN);
            assert_eq!(q.backlog.pop_front(), Some(s));
            q.in_ring += 1;
        }
        q.complete(s, -libc::EAGAIN);
        assert_eq!(taken(&mut q)[0].result.as_ref().unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(q.in_ring, 0);
        q.queued = 0; // the results were taken by hand
    }

    /// When its ring fails for good, the queue waits for the writes the
    /// kernel took and runs the rest itself: every write completes once
    /// and lands, and later writes run synchronously.
    #[test]
    fn write_queue_survives_losing_its_ring() {
        let Some(io) = uring(8) else { return };
        let path = TempPath::new("queue-abandon");
        let store = io.open(&path.0, &rw_create()).unwrap();
        let mut q = UringQueue::new(new_thread_ring(8).unwrap());
        // More writes than the ring holds: some reach the kernel, the rest
        // stay in the backlog.
        let n = 40u64;
        for i in 0..n {
            q.push(crate::io::queue::tests::write_of(&store, i * BLOCK_SIZE as u64, &[i as u8], i));
        }
        q.fill();
        q.ring.as_mut().unwrap().submit().unwrap();
        assert!(q.in_ring > 0 && !q.backlog.is_empty(), "writes both in the ring and in the backlog");
        q.abandon_ring(&io::Error::from_raw_os_error(libc::EBADF));
        assert!(q.ring.is_none());
        q.push(crate::io::queue::tests::write_of(&store, n * BLOCK_SIZE as u64, &[n as u8], n));
        let mut completed = vec![false; n as usize + 1];
        while !q.is_empty() {
            for c in q.reap(Reap::Wait) {
                assert_eq!(c.result.unwrap(), BLOCK_SIZE, "write {}", c.tag);
                assert!(!std::mem::replace(&mut completed[c.tag as usize], true), "write {} completed twice", c.tag);
            }
        }
        assert!(completed.iter().all(|&d| d));
        let mut back = crate::buf::AlignedBuf::zeroed((n as usize + 1) * BLOCK_SIZE);
        assert_eq!(read_full(&*store, &mut back, 0, IoPriority::Sync).unwrap(), back.len());
        for i in 0..=n as usize {
            assert!(back[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE].iter().all(|&x| x == i as u8), "block {i}");
        }
    }

    /// Many more writes than the ring has entries: at no point are more
    /// than `sq_entries` of them in the ring (completions outstanding), so
    /// the completion queue (twice that) can never overflow; all complete.
    #[test]
    fn write_queue_keeps_in_ring_within_the_submission_queue() {
        let Some(io) = uring(8) else { return };
        let path = TempPath::new("queue-in-ring");
        let store = io.open(&path.0, &rw_create()).unwrap();
        let mut q = UringQueue::new(new_thread_ring(8).unwrap());
        let sq_entries = q.ring.as_mut().unwrap().submission().capacity();
        let n = 200u64;
        for i in 0..n {
            q.push(crate::io::queue::tests::write_of(&store, (i % 64) * BLOCK_SIZE as u64, &[i as u8], i));
            assert!(q.in_ring <= sq_entries, "{} writes in a ring of {sq_entries}", q.in_ring);
        }
        let mut done = 0;
        while !q.is_empty() {
            done += q.reap(Reap::Wait).len();
            assert!(q.in_ring <= sq_entries, "{} writes in a ring of {sq_entries}", q.in_ring);
        }
        assert_eq!(done, n as usize);
    }

    #[test]
    fn ring_sizes() {
        assert_eq!(ring_entries_for(0), 8);
        assert_eq!(ring_entries_for(1), 8);
        assert_eq!(ring_entries_for(9), 16);
        assert_eq!(ring_entries_for(64), 64);
        assert_eq!(ring_entries_for(100), 128);
        assert_eq!(ring_entries_for(u32::MAX), MAX_RING_ENTRIES);
    }

    /// Thread rings use SINGLE_ISSUER where the kernel has it (6.0+).
    #[test]
    fn thread_ring_flags() {
        let Some(_) = uring(8) else { return };
        let ring = new_thread_ring(8).unwrap();
        assert_eq!(ring.params().sq_entries(), 8);
        eprintln!("thread ring single issuer: {}", ring.params().is_setup_single_issuer());
    }

    #[test]
    fn suite_on_small_ring() {
        let Some(io) = uring(8) else { return };
        assert_eq!(io.kind(), IoKind::Uring);
        assert_eq!(io.ring_entries(), 8);
        suite(&|p, h| io.open(p, h));
        assert_eq!(io.fallback_attempts(), 0, "the ring must have been used");
    }

    #[test]
    fn suite_on_large_ring() {
        let Some(io) = uring(128) else { return };
        suite(&|p, h| io.open(p, h));
        assert_eq!(io.fallback_attempts(), 0);
    }

    #[test]
    fn concurrent_threads_each_use_a_ring() {
        let Some(io) = uring(16) else { return };
        concurrent_submitters(&|p, h| io.open(p, h));
        assert_eq!(io.fallback_attempts(), 0);
    }

    /// Two backends with different depths on one thread keep separate rings.
    #[test]
    fn two_depths_on_one_thread() {
        let (Some(small), Some(big)) = (uring(8), uring(64)) else {
            return;
        };
        let path = TempPath::new("two-depths");
        let a = small.open(&path.0, &rw_create()).unwrap();
        let b = big.open(&path.0, &rw_create()).unwrap();
        let data = AlignedBuf::pattern(BLOCK_SIZE, 5);
        write_full(&*a, vec![&data], 0, IoPriority::Sync).unwrap();
        let mut back = AlignedBuf::zeroed(BLOCK_SIZE);
        read_full(&*b, &mut back, 0, IoPriority::Sync).unwrap();
        assert!(back[..] == data[..]);
        let count = RINGS.with(|r| r.borrow().rings.iter().filter(|(_, ring)| ring.is_some()).count());
        assert_eq!(count, 2);
    }

    /// The engine's run-time fallback: a thread whose ring creation failed
    /// still completes I/O with preadv/pwritev.
    #[test]
    fn falls_back_when_thread_has_no_ring() {
        let Some(io) = uring(8) else { return };
        let path = TempPath::new("no-ring");
        let store = io.open(&path.0, &rw_create()).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                // Pretend io_uring_setup failed on this thread.
                RINGS.with(|r| {
                    let mut r = r.borrow_mut();
                    r.pid = std::process::id();
                    r.rings.push((io.ring_entries(), None));
                });
                let data = AlignedBuf::pattern(2 * BLOCK_SIZE, 7);
                write_full(&*store, vec![&data], 0, IoPriority::Async).unwrap();
                let mut back = AlignedBuf::zeroed(2 * BLOCK_SIZE);
                assert_eq!(read_full(&*store, &mut back, 0, IoPriority::Sync).unwrap(), 2 * BLOCK_SIZE);
                assert!(back[..] == data[..]);
            });
        });
        assert_eq!(io.fallback_attempts(), 2);
    }

    /// The SQE carries what the kernel needs: opcode, fd, offset, iovec
    /// array and count, the op's ioprio and its index as user_data.
    #[test]
    fn sqe_fields() {
        let mut buf = AlignedBuf::zeroed(2 * BLOCK_SIZE);
        let mut op = IoOp::read(3 * BLOCK_SIZE as u64, &mut buf, IoPriority::Async);
        op.done = BLOCK_SIZE;
        let (offset, iovecs) = op.remaining_iovecs();
        for (write, priority) in [(false, IoPriority::Async), (true, IoPriority::Sync)] {
            let req = Request { index: 17, offset, iovecs: iovecs.clone(), write, ioprio: ioprio_of(priority) };
            let entry = build_entry(42, &req, 1);
            assert_eq!(std::mem::size_of::<squeue::Entry>(), 64);
            // SAFETY: squeue::Entry is a #[repr(C)] wrapper of the kernel's
            // 64-byte io_uring_sqe; reading it as bytes is always valid.
            let raw: [u8; 64] = unsafe { std::mem::transmute(entry) };
            let u16_at = |o: usize| u16::from_ne_bytes(raw[o..o + 2].try_into().unwrap());
            let u32_at = |o: usize| u32::from_ne_bytes(raw[o..o + 4].try_into().unwrap());
            let u64_at = |o: usize| u64::from_ne_bytes(raw[o..o + 8].try_into().unwrap());
            let opcode = if write { opcode::Writev::CODE } else { opcode::Readv::CODE };
            assert_eq!(raw[0], opcode);
            assert_eq!(u16_at(2), ioprio_of(priority), "ioprio");
            assert_eq!(u32_at(4), 42, "fd");
            assert_eq!(u64_at(8), 4 * BLOCK_SIZE as u64, "offset includes done");
            assert_eq!(u64_at(16), req.iovecs.as_ptr() as u64, "iovec array");
            assert_eq!(u32_at(24), 1, "iovec count");
            assert_eq!(u64_at(32), 17, "user_data");
        }
    }

    /// Rings inherited across fork (recorded pid differs) are replaced, not
    /// used: a child's submissions would land in the parent's shared rings.
    #[test]
    fn inherited_rings_are_replaced() {
        let Some(io) = uring(8) else { return };
        let path = TempPath::new("fork");
        let store = io.open(&path.0, &rw_create()).unwrap();
        let data = AlignedBuf::pattern(BLOCK_SIZE, 8);
        std::thread::scope(|s| {
            s.spawn(|| {
                write_full(&*store, vec![&data], 0, IoPriority::Sync).unwrap();
                // Pretend this thread's ring came from a parent process; mark
                // it so we can tell whether it survives.
                RINGS.with(|r| {
                    let mut r = r.borrow_mut();
                    r.pid = r.pid.wrapping_add(1);
                    r.rings.push((1, None));
                });
                write_full(&*store, vec![&data], BLOCK_SIZE as u64, IoPriority::Sync).unwrap();
                RINGS.with(|r| {
                    let r = r.borrow();
                    assert_eq!(r.pid, std::process::id());
                    assert_eq!(r.rings.len(), 1, "inherited rings must be dropped");
                    assert!(r.rings[0].1.is_some());
                });
            });
        });
        assert_eq!(io.fallback_attempts(), 0);
    }

    /// Errors from the CQE are negative errnos and land on their own op.
    #[test]
    fn cqe_errors_map_to_errno() {
        let Some(io) = uring(8) else { return };
        let path = TempPath::new("cqe-errors");
        let store = io.open(&path.0, &rw_create()).unwrap();
        let mut good = AlignedBuf::zeroed(BLOCK_SIZE);
        let mut bad = AlignedBuf::zeroed(BLOCK_SIZE);
        let mut ops = [
            IoOp::read(0, &mut good, IoPriority::Sync),
            // Offset beyond off_t: the kernel answers -EINVAL.
            IoOp::read(1 << 63, &mut bad, IoPriority::Async),
        ];
        run_batch(&*store, &mut ops);
        assert_eq!(ops[0].result.take().unwrap().unwrap(), 0);
        assert_eq!(ops[1].result.take().unwrap().unwrap_err().raw_os_error(), Some(libc::EINVAL));
    }

    /// submit_once answers completed ops with Ok(0) and does not touch them.
    #[test]
    fn completed_ops_are_skipped() {
        let Some(io) = uring(8) else { return };
        let path = TempPath::new("skip");
        let store = io.open(&path.0, &rw_create()).unwrap();
        let data = AlignedBuf::pattern(BLOCK_SIZE, 3);
        let mut ops = [
            IoOp::write(0, vec![&data[..]], IoPriority::Sync),
            IoOp::write(BLOCK_SIZE as u64, vec![&data[..]], IoPriority::Sync),
        ];
        ops[0].result = Some(Ok(BLOCK_SIZE));
        let attempts = store.submit_once(&mut ops);
        assert_eq!(attempts.len(), 2);
        assert_eq!(*attempts[0].as_ref().unwrap(), 0);
        assert_eq!(*attempts[1].as_ref().unwrap(), BLOCK_SIZE);
        // Only the second op was written: the first block is a hole.
        let mut back = AlignedBuf::pattern(BLOCK_SIZE, 4);
        assert_eq!(read_full(&*store, &mut back, 0, IoPriority::Sync).unwrap(), BLOCK_SIZE);
        assert!(back.iter().all(|&b| b == 0));
    }

    /// See `fd::testutil::block_device_writes`; destroys the device's data.
    #[test]
    #[ignore = "needs WBCACHE_TEST_BLOCK_DEVICE naming a scratch block device"]
    fn block_device_write_round_trip() {
        let Some(io) = uring(8) else { return };
        block_device_writes(&|p, h| io.open(p, h));
        assert_eq!(io.fallback_attempts(), 0);
    }
}
