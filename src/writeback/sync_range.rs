//! Writeback of a byte range on request (`sync_file_range(2)`): wait for
//! the writeback in flight, start writeback of the range's dirty blocks,
//! wait for it, in any combination of the three.
//!
//! As the kernel's call it makes no durability promise: nothing flushes the
//! device's cache or syncs the store's metadata. Its writes go in the
//! async class (they take no sync-waiter role, so background writeback is
//! not throttled for them) and count as [`Reason::SyncRange`].
//!
//! A start without a wait returns once the blocks are taken (under
//! writeback, with the pass's ticket held); the [`RangeWriter`]'s threads
//! write and complete them. They only write passes whose store gate and
//! blocks the caller already took, so they never wait for anything but
//! their I/O: nothing they run behind can hold them up. At most
//! [`QUEUED_PASSES_MAX`] passes wait for it; a caller beyond that waits for
//! room, as the kernel's caller waits for a request slot.

use std::io;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::base::locks;
use crate::inode::Inode;
use crate::inode::{PassScope, SizeFix, WbPass};
use crate::io::IoPriority;
use crate::stats::Reason;

/// Passes queued for the range writers beyond the ones they write. Few:
/// a later fsync waits for all of them. With 8 (of 8 MiB each), a stream
/// starting the writeback of every 8 MiB it wrote (`wbcache bench -w
/// advice/stream-sync-range`, 256M) took 33 ms for its final fsync and
/// held 80 MiB dirty or under writeback; with 2, 14 ms and 40 MiB, at the
/// same MB/s.
pub const QUEUED_PASSES_MAX: usize = 2;

/// Range-writer threads. Each writes one pass at a time (all its I/Os
/// submitted together, then waited for): with two, the next pass's I/O is
/// in flight while the last one's completes, so the device queue does not
/// drain between passes.
const RANGE_WRITERS: usize = 2;

struct Job {
    inode: Arc<Inode>,
    pass: WbPass,
}

/// The threads that write started range writebacks.
pub struct RangeWriter {
    tx: Mutex<Option<SyncSender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl RangeWriter {
    pub fn start(io: &Arc<dyn crate::io::Io>) -> io::Result<RangeWriter> {
        let (tx, rx) = sync_channel::<Job>(QUEUED_PASSES_MAX);
        let rx = Arc::new(Mutex::new(rx));
        let writer = RangeWriter { tx: Mutex::new(Some(tx)), threads: Mutex::new(Vec::new()) };
        for n in 0..RANGE_WRITERS {
            let rx = rx.clone();
            let thread = crate::io::spawn_io_worker(format!("wbc-range-writer-{n}"), io, move || {
                loop {
                    // The receiver's lock is held only while waiting for a
                    // job, never while writing one.
                    let job = locks::lock(&rx).recv();
                    let Ok(Job { inode, pass }) = job else { break };
                    inode.write_gated_pass(pass, IoPriority::Async, SizeFix::Try);
                }
            });
            // The spawn's error is the OS's (EAGAIN), its errno kept.
            match thread {
                Ok(t) => locks::lock(&writer.threads).push(t),
                Err(e) => {
                    writer.stop();
                    return Err(e);
                }
            }
        }
        Ok(writer)
    }

    /// Runs one range writeback of blocks `[start, end)` of `inode`; the
    /// waits report nothing (the caller checks its error cursor after
    /// each, see [`RangeWriter::wait`]).
    pub fn start_writeback(&self, inode: &Arc<Inode>, (start, end): (u64, u64), wait_after: bool) {
        let Some(pass) = inode.begin_gated_pass(Reason::SyncRange, PassScope::Blocks { start, end }) else {
            return;
        };
        if wait_after {
            // The caller waits anyway: no hand-off.
            inode.write_gated_pass(pass, IoPriority::Async, SizeFix::Try);
            return;
        }
        let tx = locks::lock(&self.tx).clone();
        let job = Job { inode: inode.clone(), pass };
        // Stopped (the cache closed under the call): written here.
        if let Err(std::sync::mpsc::SendError(Job { inode, pass })) = match tx {
            Some(tx) => tx.send(job),
            None => Err(std::sync::mpsc::SendError(job)),
        } {
            inode.write_gated_pass(pass, IoPriority::Async, SizeFix::Try);
        }
    }

    /// Waits until every writeback of `inode` that began before the call
    /// has completed (the range's and any other).
    pub fn wait(inode: &Inode) {
        inode.wait_writeback_before_now();
    }

    /// Stops the threads after the passes queued (a closing cache's final
    /// sync has waited for them already).
    pub fn stop(&self) {
        locks::lock(&self.tx).take();
        let threads: Vec<JoinHandle<()>> = locks::lock(&self.threads).drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}
