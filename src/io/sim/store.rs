//! The [`BackingStore`] calls of a simulated store: length, truncation,
//! allocation and sync on the images, buffered tail writes, and
//! `submit_once`, which holds writes at the gate, counts writes that
//! overlap others in flight, and may refuse the whole call before running
//! its attempts (`attempt`).
//!
//! A call on a dead store (opened before the last crash) that would read or
//! change an image fails with `EIO` instead; the counters still count it.

use super::attempt::IoPath;
use super::config::Fault;
use super::disk::{errno, SimStore};
use crate::base::locks;
use crate::base::sys::SyncKind;
use crate::io::store::{Attempt, BackingInfo, BackingStore, IoOp, IoPriority};
use std::io;

impl BackingStore for SimStore {
    fn info(&self) -> &BackingInfo {
        &self.info
    }

    fn is_unlinked(&self) -> io::Result<bool> {
        let st = self.shared.lock();
        Ok(!self.info.is_block_device && !st.names.values().any(|&ino| ino == self.ino))
    }

    fn accepts_len(&self, len: u64) -> io::Result<bool> {
        Ok(self.info.is_block_device || len <= self.shared.config.max_file_len)
    }

    fn len(&self) -> io::Result<u64> {
        let mut st = self.shared.lock();
        st.stats.len_queries += 1;
        if self.is_dead(&st) {
            return Err(errno(libc::EIO));
        }
        let inode = st.inodes.get(&self.ino).ok_or_else(|| errno(libc::EIO))?;
        Ok(inode.written.len() as u64)
    }

    fn supports_tail_writes(&self) -> bool {
        self.shared.config.tail_writes && !self.info.is_block_device
    }

    /// A buffered `pwrite` loop: any offset and length, short transfers
    /// and retryable errors retried, subject to the faults and the crash
    /// model as every write is.
    fn write_tail(&self, offset: u64, data: &[u8]) -> io::Result<usize> {
        if !self.supports_tail_writes() {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        let mut done = 0;
        while done < data.len() {
            self.simulate_latency(1);
            let mut op = IoOp::write(offset + done as u64, vec![&data[done..]], IoPriority::Sync);
            let mut st = self.shared.lock();
            st.stats.buffered_writes += 1;
            match self.attempt(&mut st, &mut op, IoPath::Buffered) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the file accepted no bytes")),
                Ok(n) => done += n,
                Err(e) if crate::io::store::is_retryable(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.shared.lock();
        if self.is_dead(&st) {
            return Err(errno(libc::EIO));
        }
        if !self.info.is_block_device && len > self.shared.config.max_file_len {
            return Err(errno(libc::EFBIG));
        }
        // ftruncate(2) on a descriptor not open for writing is EINVAL.
        if !self.writable {
            return Err(errno(libc::EINVAL));
        }
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(|| errno(libc::EIO))?;
        if inode.is_block_device {
            return if len == inode.written.len() as u64 { Ok(()) } else { Err(errno(libc::EINVAL)) };
        }
        let len = usize::try_from(len).map_err(|_| errno(libc::EFBIG))?;
        inode.written.resize(len, 0);
        Ok(())
    }

    /// `fallocate(2)` on the written image, subject to the crash model as
    /// a write is: allocation (mode 0, `KEEP_SIZE`) changes no byte and
    /// grows the length unless `KEEP_SIZE`; a punched or zeroed range
    /// reads as zeros. Block devices take only the zeroing modes, and
    /// only within the device (as the kernel's `blkdev_fallocate`).
    fn allocate(&self, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
        let mut st = self.shared.lock();
        if self.is_dead(&st) {
            return Err(errno(libc::EIO));
        }
        if !self.writable {
            return Err(errno(libc::EBADF));
        }
        let end = offset.checked_add(len).filter(|&e| e <= i64::MAX as u64).ok_or_else(|| errno(libc::EFBIG))?;
        let (zeroes, keep_size) = match mode {
            0 => (false, false),
            KEEP => (false, true),
            m if m == PUNCH | KEEP => (true, true),
            ZERO => (true, false),
            m if m == ZERO | KEEP => (true, true),
            _ => return Err(errno(libc::EOPNOTSUPP)),
        };
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(|| errno(libc::EIO))?;
        if inode.is_block_device {
            if !zeroes {
                return Err(errno(libc::EOPNOTSUPP));
            }
            if end > inode.written.len() as u64 {
                return Err(errno(libc::EINVAL));
            }
        } else if !keep_size && end > self.shared.config.max_file_len {
            return Err(errno(libc::EFBIG));
        }
        let end = usize::try_from(end).map_err(|_| errno(libc::EFBIG))?;
        if !keep_size && inode.written.len() < end {
            inode.written.resize(end, 0);
        }
        if zeroes {
            let stop = end.min(inode.written.len());
            let start = (offset as usize).min(stop);
            inode.written[start..stop].fill(0);
        }
        Ok(())
    }

    fn sync(&self, _kind: SyncKind) -> io::Result<()> {
        self.simulate_latency(1);
        let mut st = self.shared.lock();
        st.stats.syncs += 1;
        if self.is_dead(&st) {
            return Err(errno(libc::EIO));
        }
        if let Some(code) = st.write_error_all {
            st.count_write_error(&self.path);
            return Err(errno(code));
        }
        if let Some(i) =
            st.faults.iter().position(|r| r.fault == Fault::SyncEio && r.remaining > 0 && r.path == self.path)
        {
            let rule = &mut st.faults[i];
            if rule.remaining != u32::MAX {
                rule.remaining -= 1;
                if rule.remaining == 0 {
                    st.faults.swap_remove(i);
                }
            }
            st.stats.faults_fired += 1;
            st.count_write_error(&self.path);
            return Err(errno(libc::EIO));
        }
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(|| errno(libc::EIO))?;
        inode.durable.clone_from(&inode.written);
        Ok(())
    }

    fn submit_once(&self, ops: &mut [IoOp<'_>]) -> Vec<Attempt> {
        let call = self.writes_begin(ops);
        let attempts = self.submit_once_in_flight(ops);
        if let Some(call) = call {
            self.shared.lock().writes_in_flight.retain(|(c, _, _, _)| *c != call);
        }
        attempts
    }
}

impl SimStore {
    /// Registers the call's pending writes as in flight, counting those
    /// that overlap another call's writes in flight to this file.
    fn writes_begin(&self, ops: &mut [IoOp<'_>]) -> Option<u64> {
        let ranges: Vec<std::ops::Range<u64>> = ops
            .iter_mut()
            .filter(|op| op.result.is_none() && op.is_write())
            .map(|op| {
                let (offset, iovecs) = op.remaining_iovecs();
                offset..offset + iovecs.iter().map(|v| v.iov_len as u64).sum::<u64>()
            })
            .filter(|r| !r.is_empty())
            .collect();
        if ranges.is_empty() {
            return None;
        }
        let mut st = self.shared.lock();
        let call = st.next_call;
        st.next_call += 1;
        // A crash ends the cache that wrote before it: its writes still in
        // flight fail, so only writes of one epoch can race.
        let epoch = self.epoch;
        for range in ranges {
            let overlaps = !self.is_dead(&st)
                && st.writes_in_flight.iter().any(|(_, e, ino, other)| {
                    *e == epoch && *ino == self.ino && other.start < range.end && range.start < other.end
                });
            if overlaps {
                st.stats.overlapping_writes += 1;
            }
            st.writes_in_flight.push((call, epoch, self.ino, range));
        }
        Some(call)
    }

    fn submit_once_in_flight(&self, ops: &mut [IoOp<'_>]) -> Vec<Attempt> {
        self.simulate_latency(ops.iter().filter(|op| op.result.is_none()).count());
        let mut st = self.shared.lock();
        if ops.iter().any(|op| op.result.is_none() && op.is_write()) {
            while st.held_paths.contains(&self.path) && !self.is_dead(&st) {
                *st.waiting_at_gate.entry(self.path.clone()).or_insert(0) += 1;
                st = locks::wait(&self.shared.gate_opened, st);
                *st.waiting_at_gate.get_mut(&self.path).expect("counted above") -= 1;
            }
        }
        let refuse = self.shared.config.submit_error_percent;
        if !self.is_dead(&st) && st.rng.chance(refuse) {
            st.stats.submit_errors += 1;
            let code = if st.rng.coin() { libc::EINTR } else { libc::EAGAIN };
            // Still attempts, as the counters promise.
            for op in ops.iter().filter(|op| op.result.is_none()) {
                if op.is_write() {
                    st.stats.writes += 1;
                } else {
                    st.stats.reads += 1;
                }
            }
            return ops.iter().map(|op| if op.result.is_some() { Ok(0) } else { Err(errno(code)) }).collect();
        }
        ops.iter_mut()
            .map(|op| if op.result.is_some() { Ok(0) } else { self.attempt(&mut st, op, IoPath::Direct) })
            .collect()
    }
}
