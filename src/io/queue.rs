//! Asynchronous writes for writeback: a [`WriteQueue`] takes writes whose
//! buffers it owns (shared `Arc`s of folio buffers), keeps as many of them in
//! flight as the backend allows, and hands back each write's final result
//! when it is done. The flusher uses it to keep the device busy across
//! writeback passes and inodes, instead of waiting for each batch to drain
//! before building the next one (the kernel's writeback submits bios and
//! completes them later in the same way).
//!
//! Invariants:
//! - A queued write's buffers belong to the queue from `push` until its
//!   [`Completion`] is returned by `reap`; nothing else may free them, so the
//!   kernel never reads freed memory.
//! - Every pushed write yields exactly one completion, with the same retry
//!   policy as [`super::run_batch`]: short writes are resubmitted for the
//!   remainder, `EINTR`/`EAGAIN` are retried, a zero-byte write is an error,
//!   and after [`super::MAX_ATTEMPTS_PER_OP`] attempts the write fails with
//!   `EIO`.
//! - A queue belongs to the thread that made it (an io_uring created with
//!   `SINGLE_ISSUER` may only be driven by that thread), so it is not `Send`.
//!
//! [`BatchQueue`] is the backend-independent implementation: it runs what
//! was pushed as one [`super::run_batch`] per store when asked to wait. The
//! io_uring and thread-pool backends have truly asynchronous ones
//! (`uring::UringQueue`, `threads::PoolQueue`), which share
//! [`QueuedSlot`]'s retry policy.

use std::io;
use std::ops::Range;
use std::sync::Arc;

use super::store::{is_retryable, run_batch, Attempt, BackingStore, IoOp, IoPriority, MAX_ATTEMPTS_PER_OP};
use crate::buf::AlignedBuf;

/// A part of a queued write: a byte range of a shared buffer.
pub struct Segment {
    pub buf: Arc<AlignedBuf>,
    pub range: Range<usize>,
}

/// One write to run asynchronously: `segments` land at consecutive offsets
/// starting at `offset` (one `pwritev`). `tag` comes back in its completion.
pub struct QueuedWrite {
    pub store: Arc<dyn BackingStore>,
    pub offset: u64,
    pub segments: Vec<Segment>,
    pub priority: IoPriority,
    pub tag: u64,
    /// The partial last block of a file, written through the kernel's
    /// cache ([`BackingStore::write_tail`]) on the pushing thread.
    pub tail: bool,
}

impl QueuedWrite {
    pub fn len(&self) -> usize {
        self.segments.iter().map(|s| s.range.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs the write to completion on the calling thread (as one
    /// [`run_batch`] op): the path for stores and queues that cannot run it
    /// asynchronously.
    pub fn run_now(&self) -> io::Result<usize> {
        if self.tail {
            let data: Vec<u8> = self.segments.iter().flat_map(|s| s.buf[s.range.clone()].iter().copied()).collect();
            return self.store.write_tail(self.offset, &data);
        }
        let mut ops = [self.as_op()];
        run_batch(&*self.store, &mut ops);
        ops[0].result.take().expect("run_batch completes every op")
    }

    /// The write as a borrowed [`IoOp`] (for `run_batch`, or for a
    /// backend's [`IoOp::remaining_iovecs`]).
    pub(crate) fn as_op(&self) -> IoOp<'_> {
        IoOp::write(self.offset, self.segments.iter().map(|s| &s.buf[s.range.clone()]).collect(), self.priority)
    }
}

/// The final result of a queued write: all its bytes written, or an error.
pub struct Completion {
    pub tag: u64,
    pub result: io::Result<usize>,
}

/// A queued write and its progress while an asynchronous queue owns it.
pub(crate) struct QueuedSlot {
    pub write: QueuedWrite,
    /// Bytes written by earlier attempts.
    pub done: usize,
    pub attempts: u32,
    /// The iovec array of the current attempt when the kernel reads it
    /// after the call that submitted it (io_uring); moving a `QueuedSlot`
    /// does not move the array's heap storage.
    pub iovecs: Vec<libc::iovec>,
}

impl QueuedSlot {
    pub fn new(write: QueuedWrite) -> QueuedSlot {
        QueuedSlot { write, done: 0, attempts: 0, iovecs: Vec::new() }
    }

    /// The next attempt: the offset and iovecs of what is still unwritten,
    /// as `run_batch` resubmits a short write's remainder.
    pub fn remaining_iovecs(&self) -> (u64, Vec<libc::iovec>) {
        let mut op = self.write.as_op();
        op.done = self.done;
        op.remaining_iovecs()
    }

    /// Folds one attempt's outcome into the write, with `run_batch`'s
    /// policy: the final result, or `None` when the rest must go again
    /// (a short write, or `EINTR`/`EAGAIN` below the attempt cap).
    pub fn fold_attempt(&mut self, attempt: Attempt) -> Option<io::Result<usize>> {
        self.attempts += 1;
        let len = self.write.len();
        match attempt {
            Err(e) if is_retryable(&e) => {
                // Retried to the cap, as `run_batch` gives up: EIO.
                (self.attempts >= MAX_ATTEMPTS_PER_OP).then(|| Err(io::Error::from_raw_os_error(libc::EIO)))
            }
            Err(e) => Some(Err(e)),
            Ok(0) => Some(Err(io::Error::new(io::ErrorKind::WriteZero, "backing store accepted no bytes"))),
            Ok(n) => {
                self.done += n;
                assert!(self.done <= len, "the backend reported more bytes than asked");
                if self.done == len {
                    Some(Ok(len))
                } else if self.attempts >= MAX_ATTEMPTS_PER_OP {
                    Some(Err(io::Error::from_raw_os_error(libc::EIO)))
                } else {
                    None // short: the rest goes again
                }
            }
        }
    }
}

/// The writes an asynchronous queue owns, by slot number (the number its
/// backend carries with each attempt); freed slots are reused.
#[derive(Default)]
pub(crate) struct SlotTable {
    slots: Vec<Option<QueuedSlot>>,
    free: Vec<usize>,
}

impl SlotTable {
    /// Takes `write` and returns its slot.
    pub fn insert(&mut self, write: QueuedWrite) -> usize {
        let f = Some(QueuedSlot::new(write));
        match self.free.pop() {
            Some(i) => {
                debug_assert!(self.slots[i].is_none(), "free slots are empty");
                self.slots[i] = f;
                i
            }
            None => {
                self.slots.push(f);
                self.slots.len() - 1
            }
        }
    }

    pub fn get_mut(&mut self, slot: usize) -> &mut QueuedSlot {
        self.slots[slot].as_mut().expect("the slot is in use")
    }

    /// Ends a write: its completion, and the slot freed for reuse.
    pub fn finish(&mut self, slot: usize, result: io::Result<usize>) -> Completion {
        let f = self.slots[slot].take().expect("a finishing slot is in use");
        self.free.push(slot);
        Completion { tag: f.write.tag, result }
    }

    /// Slots in use.
    pub fn in_use(&self) -> Vec<usize> {
        (0..self.slots.len()).filter(|&i| self.slots[i].is_some()).collect()
    }
}

/// The completion of a write no backend needs to see: an empty one, a
/// file's partial last block, or one for a store without a descriptor (run
/// now, on the caller's thread).
pub(crate) fn complete_without_backend(write: &QueuedWrite) -> Completion {
    let result = if write.is_empty() { Ok(0) } else { write.run_now() };
    Completion { tag: write.tag, result }
}

/// Writes in flight, owned by one thread.
pub trait WriteQueue {
    /// Queues `write`. It starts at the latest during the next `reap`, as
    /// soon as the backend has room.
    fn push(&mut self, write: QueuedWrite);
    /// Writes pushed whose completion has not been returned yet.
    #[cfg(test)]
    fn len(&self) -> usize;
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Returns the completions available now; with [`Reap::Wait`], blocks
    /// until at least one is available, unless nothing is queued.
    fn reap(&mut self, how: Reap) -> Vec<Completion>;
    /// As `reap(Reap::Wait)`, but returns once `timeout` has passed, with no
    /// completion if none came. A queue that completes what it reaps on
    /// the calling thread (the batches) has no wait to cut short.
    fn reap_within(&mut self, timeout: std::time::Duration) -> Vec<Completion> {
        let _ = timeout;
        self.reap(Reap::Wait)
    }
}

/// Whether a reap waits for a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reap {
    /// Block until at least one completion is available (unless nothing is
    /// queued).
    Wait,
    /// Take what has completed and return at once.
    Poll,
}

/// Runs queued writes in batches, one [`run_batch`] per store, when `reap`
/// is asked to wait: correct on every backend, with the batch (not the
/// device queue) as the unit of overlap.
#[derive(Default)]
pub struct BatchQueue {
    pending: Vec<QueuedWrite>,
}

impl WriteQueue for BatchQueue {
    fn push(&mut self, write: QueuedWrite) {
        self.pending.push(write);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.pending.len()
    }

    fn reap(&mut self, how: Reap) -> Vec<Completion> {
        if how == Reap::Poll || self.pending.is_empty() {
            return Vec::new();
        }
        let (tails, mut pending): (Vec<QueuedWrite>, Vec<QueuedWrite>) =
            std::mem::take(&mut self.pending).into_iter().partition(|w| w.tail);
        let mut completions: Vec<Completion> = tails.iter().map(complete_without_backend).collect();
        // One batch per store, in push order within each.
        pending.sort_by_key(|w| Arc::as_ptr(&w.store) as *const () as usize);
        for group in pending.chunk_by(|a, b| Arc::ptr_eq(&a.store, &b.store)) {
            let mut ops: Vec<IoOp<'_>> = group.iter().map(QueuedWrite::as_op).collect();
            run_batch(&*group[0].store, &mut ops);
            for (w, op) in group.iter().zip(ops.iter_mut()) {
                completions
                    .push(Completion { tag: w.tag, result: op.result.take().expect("run_batch completes every op") });
            }
        }
        completions
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::io::sim::{Fault, SimConfig, SimIo};
    use crate::io::{read_full, Io, OpenHow, BLOCK_SIZE};
    use std::path::Path;

    pub(crate) fn write_of(store: &Arc<dyn BackingStore>, offset: u64, fills: &[u8], tag: u64) -> QueuedWrite {
        let segments = fills
            .iter()
            .map(|&b| {
                let mut buf = AlignedBuf::zeroed(BLOCK_SIZE);
                buf.fill(b);
                Segment { buf: Arc::new(buf), range: 0..BLOCK_SIZE }
            })
            .collect();
        QueuedWrite { store: store.clone(), offset, segments, priority: IoPriority::Async, tag, tail: false }
    }

    /// Pushes writes to two stores through `queue`, reaps them all, and
    /// checks each completion and the stores' contents.
    pub(crate) fn exercise(queue: &mut dyn WriteQueue, a: &Arc<dyn BackingStore>, b: &Arc<dyn BackingStore>) {
        let n = 300u64;
        let mut completed = vec![false; n as usize];
        let record = |done: Vec<Completion>, completed: &mut Vec<bool>| {
            for c in done {
                assert_eq!(c.result.unwrap(), 2 * BLOCK_SIZE, "write {}", c.tag);
                assert!(!std::mem::replace(&mut completed[c.tag as usize], true), "write {} completed twice", c.tag);
            }
        };
        for i in 0..n {
            let store = if i % 3 == 0 { b } else { a };
            queue.push(write_of(store, i * 2 * BLOCK_SIZE as u64, &[i as u8, (i as u8).wrapping_add(1)], i));
            record(queue.reap(Reap::Poll), &mut completed);
            let done = completed.iter().filter(|&&d| d).count();
            assert_eq!(done + queue.len(), i as usize + 1, "every write is queued or completed");
        }
        while !queue.is_empty() {
            let before = queue.len();
            let done = queue.reap(Reap::Wait);
            assert!(!done.is_empty(), "reap(Reap::Wait) with {before} queued returned nothing");
            record(done, &mut completed);
        }
        assert!(completed.iter().all(|&d| d), "every write completed");
        assert!(queue.reap(Reap::Wait).is_empty(), "an empty queue returns at once");
        for i in 0..n {
            let store = if i % 3 == 0 { b } else { a };
            let mut back = AlignedBuf::zeroed(2 * BLOCK_SIZE);
            assert_eq!(
                read_full(&**store, &mut back, i * 2 * BLOCK_SIZE as u64, IoPriority::Sync).unwrap(),
                2 * BLOCK_SIZE
            );
            assert!(back[..BLOCK_SIZE].iter().all(|&x| x == i as u8), "write {i}, first block");
            assert!(back[BLOCK_SIZE..].iter().all(|&x| x == (i as u8).wrapping_add(1)), "write {i}, second block");
        }
    }

    fn sim_pair(config: SimConfig) -> (Arc<SimIo>, Arc<dyn BackingStore>, Arc<dyn BackingStore>) {
        let sim = Arc::new(SimIo::new(config));
        let how = OpenHow { read: true, write: true, create: true, mode: 0o644, ..Default::default() };
        let a = sim.open(Path::new("/a"), &how).unwrap();
        let b = sim.open(Path::new("/b"), &how).unwrap();
        (sim, a, b)
    }

    #[test]
    fn batch_queue_completes_every_write_once_across_stores() {
        let (_sim, a, b) = sim_pair(SimConfig::default());
        let mut queue = BatchQueue::default();
        exercise(&mut queue, &a, &b);
    }

    #[test]
    fn batch_queue_reports_failures_per_write() {
        let (sim, a, _b) = sim_pair(SimConfig::default());
        sim.inject(Path::new("/a"), 4, Fault::WriteEio, u32::MAX);
        let mut queue = BatchQueue::default();
        queue.push(write_of(&a, 0, &[1], 10));
        queue.push(write_of(&a, 4 * BLOCK_SIZE as u64, &[2], 11));
        let mut done = queue.reap(Reap::Wait);
        done.sort_by_key(|c| c.tag);
        assert_eq!(done.len(), 2);
        assert_eq!(done[0].result.as_ref().unwrap(), &BLOCK_SIZE);
        assert_eq!(done[1].result.as_ref().unwrap_err().raw_os_error(), Some(libc::EIO));
    }
}
