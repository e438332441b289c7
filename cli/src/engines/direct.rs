//! `kernel-direct`: O_DIRECT through io_uring, one request at a time for
//! the per-call workloads and [`DIRECT_DEPTH`] in flight for the streaming
//! ones ([`Pipelined`]). Every request submitted into a borrowed buffer is
//! reaped before the call that submitted it returns, also on errors.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

use super::engine::{CallKind, EngineFile, NextOp, OnDone, Pipelined, Target, DIRECT_DEPTH};
use super::syscall::retry_eintr;
use super::unsupported::unsupported;
use crate::sys::IoBuffer;

/// O_DIRECT through io_uring.
pub(super) struct DirectFile {
    file: fs::File,
    ring: IoUring,
}

impl DirectFile {
    pub(super) fn open(target: &Target) -> io::Result<DirectFile> {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(target.create)
            .truncate(target.create)
            .mode(0o644)
            .custom_flags(libc::O_DIRECT)
            .open(&target.path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    unsupported(format!("O_DIRECT not supported here ({e})"))
                } else {
                    e
                }
            })?;
        let ring = IoUring::new(DIRECT_DEPTH as u32).map_err(|e| unsupported(format!("io_uring unavailable ({e})")))?;
        Ok(DirectFile { file, ring })
    }

    fn fd(&self) -> types::Fd {
        types::Fd(self.file.as_raw_fd())
    }

    /// Runs one request to completion (looping on short transfers).
    fn one(&mut self, entry_for: &mut dyn FnMut(usize) -> io_uring::squeue::Entry, len: usize) -> io::Result<usize> {
        let mut done = 0usize;
        let mut attempts = 0;
        while done < len {
            let sqe = entry_for(done).user_data(0);
            // SAFETY: the entry's buffers are borrowed by the caller for this
            // whole call, and we wait for its completion before returning.
            unsafe {
                self.ring.submission().push(&sqe).map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
            let res = reap_one(&mut self.ring);
            attempts += 1;
            if res < 0 {
                if (res == -libc::EINTR || res == -libc::EAGAIN) && attempts < 1000 {
                    continue;
                }
                return Err(direct_error(-res));
            }
            if res == 0 {
                break;
            }
            done += res as usize;
        }
        Ok(done)
    }
}

fn direct_error(errno: i32) -> io::Error {
    let e = io::Error::from_raw_os_error(errno);
    if errno == libc::EINVAL {
        unsupported(format!("O_DIRECT rejected the request's alignment ({e})"))
    } else {
        e
    }
}

impl EngineFile for DirectFile {
    fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        let fd = self.fd();
        let n = self.one(
            &mut |done| {
                opcode::Write::new(fd, buf[done..].as_ptr(), (buf.len() - done) as u32)
                    .offset(off + done as u64)
                    .build()
            },
            buf.len(),
        )?;
        if n < buf.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "O_DIRECT write returned 0"));
        }
        Ok(())
    }

    fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let fd = self.fd();
        let ptr = buf.as_mut_ptr();
        let len = buf.len();
        self.one(
            &mut |done| {
                // SAFETY: pointer arithmetic within `buf`: `done < len`.
                let at = unsafe { ptr.add(done) };
                opcode::Read::new(fd, at, (len - done) as u32).offset(off + done as u64).build()
            },
            len,
        )
    }

    fn write_call(&mut self, call: CallKind, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        if call != CallKind::Writev || bufs.len() == 1 {
            // No lseek through io_uring: `write` is a positioned write too.
            for (i, b) in bufs.iter().enumerate() {
                self.write_at(b, off + (i * b.len()) as u64)?;
            }
            return Ok(());
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let iov: Vec<libc::iovec> =
            bufs.iter().map(|b| libc::iovec { iov_base: b.as_ptr() as *mut _, iov_len: b.len() }).collect();
        let fd = self.fd();
        let n = self.one(
            &mut |done| {
                assert_eq!(done, 0, "short O_DIRECT writev");
                opcode::Writev::new(fd, iov.as_ptr(), iov.len() as u32).offset(off).build()
            },
            total,
        )?;
        if n < total {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "O_DIRECT writev was short"));
        }
        Ok(())
    }

    fn fsync(&mut self) -> io::Result<()> {
        retry_eintr(|| self.file.sync_all())
    }

    fn pipeline(&mut self) -> Option<&mut dyn Pipelined> {
        Some(self)
    }
}

/// Waits for one completion (the request is in flight into borrowed
/// buffers: never give up while it may still be running).
fn reap_one(ring: &mut IoUring) -> i32 {
    let mut failures = 0u32;
    loop {
        if let Some(c) = ring.completion().next() {
            return c.result();
        }
        if let Err(e) = ring.submit_and_wait(1) {
            failures += 1;
            if failures > 10_000 {
                eprintln!("io_uring: cannot reap an in-flight request ({e}); aborting");
                std::process::abort();
            }
            if e.kind() != io::ErrorKind::Interrupted {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Queues one entry. The queue has room for every slot, so a full queue is
/// a bug; with requests in flight into borrowed buffers, aborting is the only
/// safe answer.
///
/// # Safety
/// The entry's buffers must stay valid until its completion is reaped.
unsafe fn push_or_abort(ring: &mut IoUring, e: &io_uring::squeue::Entry) {
    // SAFETY: forwarded to the caller.
    if unsafe { ring.submission().push(e) }.is_err() {
        eprintln!("io_uring submission queue unexpectedly full; aborting");
        std::process::abort();
    }
}

/// One request in flight: its range, how much of it is done, and when it
/// was first submitted (its latency runs from there).
#[derive(Clone, Copy)]
struct Slot {
    off: u64,
    len: usize,
    done: usize,
    started: Instant,
    attempts: u32,
}

/// The requests of one [`Pipelined::run`]: which slot holds which request,
/// and the buffers its entries point into (borrowed for the whole run).
struct Flight<'b> {
    fd: types::Fd,
    write: bool,
    wbuf: &'b IoBuffer,
    /// One read buffer per slot.
    rptrs: Vec<*mut u8>,
    slots: Vec<Option<Slot>>,
    inflight: usize,
    first_err: Option<io::Error>,
}

impl Flight<'_> {
    /// The entry that submits what is left of `s`, the request in `slot`.
    fn entry(&self, slot: usize, s: &Slot) -> io_uring::squeue::Entry {
        let (off, len) = (s.off + s.done as u64, (s.len - s.done) as u32);
        let e = if self.write {
            // SAFETY: pointer arithmetic within `wbuf`: `s.done < s.len <= wbuf.len()`.
            opcode::Write::new(self.fd, unsafe { self.wbuf.as_ptr().add(s.done) }, len).offset(off).build()
        } else {
            // SAFETY: pointer arithmetic within the slot's buffer:
            // `s.done < s.len <= rbufs[slot].len()`.
            opcode::Read::new(self.fd, unsafe { self.rptrs[slot].add(s.done) }, len).offset(off).build()
        };
        e.user_data(slot as u64)
    }

    /// Submits a new request of `len` bytes at `off` into a free slot
    /// (`cap`: the size of a slot's buffer).
    fn start(&mut self, ring: &mut IoUring, off: u64, len: usize, cap: usize) {
        assert!(len <= cap, "request larger than its buffer");
        let slot = self.slots.iter().position(Option::is_none).expect("a free slot");
        let s = Slot { off, len, done: 0, started: Instant::now(), attempts: 0 };
        let e = self.entry(slot, &s);
        // SAFETY: `wbuf` and `rbufs` outlive the run, and the run reaps every
        // submitted request before it returns (also on errors).
        unsafe { push_or_abort(ring, &e) };
        self.slots[slot] = Some(s);
        self.inflight += 1;
    }

    /// Takes the completion `res` of `slot`'s request: resubmits it after
    /// an interruption or a short transfer, else frees the slot and reports
    /// the request to `done` (unless an error already ended the run).
    fn complete(&mut self, ring: &mut IoUring, slot: usize, res: i32, now: Instant, done: &mut OnDone<'_>) {
        let Some(mut s) = self.slots[slot] else { return };
        s.attempts += 1;
        let again = if res < 0 && (res == -libc::EINTR || res == -libc::EAGAIN) && s.attempts < 1000 {
            true
        } else if res < 0 {
            self.first_err.get_or_insert(direct_error(-res));
            false
        } else if res > 0 && s.done + (res as usize) < s.len {
            s.done += res as usize;
            true
        } else {
            s.done += res as usize;
            if self.first_err.is_none() {
                done(s.done, now - s.started);
            }
            false
        };
        if again {
            let e = self.entry(slot, &s);
            // SAFETY: the resubmitted request points into `wbuf` or its
            // slot's read buffer, which outlive the run, and the run reaps
            // every submitted request before it returns (also on errors).
            unsafe { push_or_abort(ring, &e) };
            self.slots[slot] = Some(s);
        } else {
            self.slots[slot] = None;
            self.inflight -= 1;
        }
    }
}

impl Pipelined for DirectFile {
    fn run(
        &mut self,
        write: bool,
        wbuf: &IoBuffer,
        rbufs: &mut [IoBuffer],
        next: &mut NextOp<'_>,
        done: &mut OnDone<'_>,
    ) -> io::Result<()> {
        let depth = DIRECT_DEPTH.min(if write { DIRECT_DEPTH } else { rbufs.len() });
        assert!(depth > 0, "no read buffers for a pipelined read");
        let cap = if write { wbuf.len() } else { rbufs[0].len() };
        let mut flight = Flight {
            fd: self.fd(),
            write,
            wbuf,
            rptrs: rbufs.iter_mut().map(|b| b.as_mut_ptr()).collect(),
            slots: vec![None; depth],
            inflight: 0,
            first_err: None,
        };
        let mut exhausted = false;
        let mut failures = 0u32;
        loop {
            while !exhausted && flight.first_err.is_none() && flight.inflight < depth {
                match next() {
                    Some((off, len)) => flight.start(&mut self.ring, off, len, cap),
                    None => exhausted = true,
                }
            }
            if flight.inflight == 0 {
                break;
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                // Requests are in flight into buffers we only borrow: keep
                // reaping, never return before they are done.
                failures += 1;
                if failures > 10_000 {
                    eprintln!("io_uring: cannot reap in-flight requests ({e}); aborting");
                    std::process::abort();
                }
                if e.kind() != io::ErrorKind::Interrupted {
                    flight.first_err.get_or_insert(e);
                    std::thread::sleep(Duration::from_millis(1));
                }
                continue;
            }
            failures = 0;
            let cqes: Vec<(u64, i32)> = self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
            let now = Instant::now();
            for (slot, res) in cqes {
                flight.complete(&mut self.ring, slot as usize, res, now, done);
            }
        }
        match flight.first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
