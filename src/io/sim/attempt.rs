//! One attempt at one op, under the disk's lock: the checks it meets
//! (access mode, `IOV_MAX`, alignment, the file's bounds); the seeded
//! retryable errors, injected faults and short transfers; and the copy
//! between the caller's iovecs and the written image. Also the latency a
//! call sleeps before its attempts, outside the lock.
//!
//! An attempt transfers a leading part of what it asked for, with the
//! correct data, or nothing; with O_DIRECT a short transfer is whole blocks
//! unless it stops at end of file. Nothing here retries: the driver of
//! `submit_once` resubmits what remains, and `write_tail` loops as a
//! buffered `pwrite` loop does.

use super::config::Fault;
use super::disk::{errno, FaultRule, SimStore, State, BLOCK_SIZE_U64};
use super::rng::Rng;
use super::stats::SimWrite;
use crate::io::store::{Attempt, IoOp, IoPriority, BLOCK_SIZE, IOV_MAX};
use std::io;
use std::time::Duration;

/// What an injected fault does to one attempt.
enum FaultEffect {
    Fail(i32),
    /// Transfer only this many bytes (more than 0, fewer than asked).
    Shorten(usize),
}

/// How a simulated store's I/O reaches the disk: through O_DIRECT (held
/// to its alignment) or buffered (a buffered write, unaligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IoPath {
    Direct,
    Buffered,
}

impl SimStore {
    /// Sleeps `attempts` seeded latencies' worth (their maximum: the
    /// attempts are in flight together). The lock is not held while
    /// sleeping, so other threads' I/O proceeds meanwhile.
    pub(super) fn simulate_latency(&self, attempts: usize) {
        let config = &self.shared.config;
        let latency_us_max = config.latency_us_max;
        let spikes = config.latency_spike_percent > 0 && config.latency_spike_us > 0;
        if (latency_us_max == 0 && !spikes) || attempts == 0 {
            return;
        }
        let sleep_us = {
            let mut st = self.shared.lock();
            if self.is_dead(&st) {
                return;
            }
            let mut us = if latency_us_max == 0 {
                0
            } else {
                (0..attempts).map(|_| st.rng.below(u64::from(latency_us_max) + 1)).max().unwrap_or(0)
            };
            // One stall per call: the ops of a call wait together.
            if spikes && st.rng.chance(config.latency_spike_percent) {
                st.stats.latency_spikes += 1;
                us += u64::from(config.latency_spike_us);
            }
            us
        };
        if sleep_us > 0 {
            std::thread::sleep(Duration::from_micros(sleep_us));
        }
    }

    /// One attempt at `op`, under the lock; a [`IoPath::Direct`] one is
    /// held to O_DIRECT's alignment (when the sim enforces it at all).
    pub(super) fn attempt(&self, st: &mut State, op: &mut IoOp<'_>, path: IoPath) -> Attempt {
        let direct = path == IoPath::Direct;
        let is_write = op.is_write();
        if is_write {
            st.stats.writes += 1;
        } else {
            st.stats.reads += 1;
        }
        if self.is_dead(st) {
            return Err(errno(libc::EIO));
        }
        if (is_write && !self.writable) || (!is_write && !self.readable) {
            return Err(errno(libc::EBADF));
        }
        let (offset, iovecs) = op.remaining_iovecs();
        // As preadv/pwritev and io_uring's READV/WRITEV: too many buffers.
        if iovecs.len() > IOV_MAX {
            return Err(errno(libc::EINVAL));
        }
        let asked: usize = iovecs.iter().map(|v| v.iov_len).sum();
        if asked == 0 {
            return Ok(0);
        }
        let config = &self.shared.config;
        let inode = st.inodes.get(&self.ino).ok_or_else(|| errno(libc::EIO))?;
        let size = inode.written.len() as u64;
        // Like iomap, a direct read at or past end of file returns 0 before
        // checking alignment: after a read that stopped at an unaligned end
        // of file, the driver's follow-up attempt must see end of file.
        if !is_write && offset >= size {
            return Ok(0);
        }
        let direct = direct && config.direct_io;
        if direct && (offset % BLOCK_SIZE_U64 != 0 || iovecs.iter().any(|v| v.iov_len % BLOCK_SIZE != 0)) {
            return Err(errno(libc::EINVAL));
        }
        if is_write {
            if let Some(code) = st.write_error_all {
                st.count_write_error(&self.path);
                return Err(errno(code));
            }
        }
        let room = room_for(is_write && !inode.is_block_device, size, config.max_file_len, offset, asked)?;
        if st.rng.chance(config.retryable_error_percent) {
            st.stats.retryable_errors += 1;
            let code = if st.rng.coin() { libc::EINTR } else { libc::EAGAIN };
            return Err(errno(code));
        }
        let mut len = room;
        match self.fire_fault(st, is_write, offset, room) {
            Some(FaultEffect::Fail(code)) => {
                st.count_error(&self.path, is_write);
                return Err(errno(code));
            }
            Some(FaultEffect::Shorten(n)) => len = n,
            None => {}
        }
        if st.rng.chance(config.short_transfer_percent) {
            if let Some(n) = random_short_len(&mut st.rng, len, direct) {
                st.stats.short_transfers += 1;
                len = n;
            }
        }
        self.transfer(st, offset, &iovecs, len, is_write.then_some(op.priority))
    }

    /// Moves `len` bytes between the iovecs and the written image at
    /// `offset`: a write (`Some` of its priority) extends the file and is
    /// logged; a read fills the iovecs.
    fn transfer(
        &self,
        st: &mut State,
        offset: u64,
        iovecs: &[libc::iovec],
        len: usize,
        write: Option<IoPriority>,
    ) -> Attempt {
        let start = usize::try_from(offset).map_err(|_| errno(libc::EFBIG))?;
        let end = start.checked_add(len).ok_or_else(|| errno(libc::EFBIG))?;
        let inode = st.inodes.get_mut(&self.ino).expect("looked up by the attempt");
        if let Some(priority) = write {
            if inode.written.len() < end {
                // Writing past end of file extends it; any gap reads as zeros.
                inode.written.resize(end, 0);
            }
            gather(iovecs, &mut inode.written[start..end]);
            st.stats.written_bytes += len as u64;
            if let Some(log) = st.write_log.as_mut() {
                log.push(SimWrite { path: self.path.clone(), offset, len, priority });
            }
        } else {
            scatter(&inode.written[start..end], iovecs);
            st.stats.read_bytes += len as u64;
        }
        Ok(len)
    }

    /// Finds, consumes and applies the injected fault, if any, for an
    /// attempt moving `len` (> 0) bytes at `offset`.
    fn fire_fault(&self, st: &mut State, is_write: bool, offset: u64, len: usize) -> Option<FaultEffect> {
        let first_block = offset / BLOCK_SIZE_U64;
        let last_block = (offset + len as u64 - 1) / BLOCK_SIZE_U64;
        let applies = |r: &FaultRule| {
            r.remaining > 0
                && r.fault.hits_attempt(is_write)
                && (first_block..=last_block).contains(&r.block_index)
                && r.path == self.path
        };
        // Where a short fault on `block` cuts this attempt, if it can.
        let cut = |block: u64| -> Option<usize> {
            let block_start = block * BLOCK_SIZE_U64;
            let n = if block_start > offset { block_start - offset } else { block_start + BLOCK_SIZE_U64 - offset };
            (n < len as u64).then_some(n as usize)
        };
        // min_by_key keeps the first of equal keys: the earliest injected.
        let chosen = st
            .faults
            .iter()
            .enumerate()
            .filter(|(_, r)| applies(r) && (!r.fault.is_short() || cut(r.block_index).is_some()))
            .min_by_key(|(_, r)| (r.fault.is_short(), r.block_index))
            .map(|(i, _)| i)?;
        let rule = &mut st.faults[chosen];
        let effect = match rule.fault {
            Fault::ReadEio | Fault::WriteEio => FaultEffect::Fail(libc::EIO),
            Fault::Enospc => FaultEffect::Fail(libc::ENOSPC),
            Fault::ShortRead | Fault::ShortWrite => FaultEffect::Shorten(cut(rule.block_index).expect("filtered")),
            Fault::SyncEio => unreachable!("sync faults never match an attempt"),
        };
        if rule.remaining != u32::MAX {
            rule.remaining -= 1;
            if rule.remaining == 0 {
                st.faults.swap_remove(chosen);
            }
        }
        st.stats.faults_fired += 1;
        Some(effect)
    }
}

/// A random proper leading part of `len` bytes: whole blocks with
/// `direct_io` (so the remainder stays aligned), any byte count otherwise.
/// `None` when `len` cannot be split that way.
fn random_short_len(rng: &mut Rng, len: usize, direct_io: bool) -> Option<usize> {
    let unit = if direct_io { BLOCK_SIZE } else { 1 };
    // Number of multiples k*unit with 1 <= k and k*unit < len.
    let choices = len.saturating_sub(1) / unit;
    if choices == 0 {
        return None;
    }
    Some((1 + rng.below(choices as u64) as usize) * unit)
}

/// Copies `src` into the iovecs in order, filling them front to back.
fn scatter(src: &[u8], iovecs: &[libc::iovec]) {
    let mut copied = 0;
    for v in iovecs {
        if copied == src.len() {
            break;
        }
        let n = v.iov_len.min(src.len() - copied);
        // SAFETY: the iovec comes from `IoOp::remaining_iovecs` of a read op,
        // so it points into a `&mut [u8]` the caller lent for the whole
        // synchronous `run_batch`/`submit_once` call, valid for `iov_len >= n`
        // bytes and not aliased by `src` (which lives in the sim's own Vec).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(copied), v.iov_base.cast::<u8>(), n) };
        copied += n;
    }
}

/// Bytes an attempt of `asked` bytes at `offset` can move before bounds
/// stop it: a read, or a write of a block device, stops at `size` (a
/// block device has no room past its end); a write of a regular file at
/// the file system's largest file size, `max_file_len`.
fn room_for(grows_file: bool, size: u64, max_file_len: u64, offset: u64, asked: usize) -> io::Result<usize> {
    let (limit, past_it) = if grows_file { (max_file_len, libc::EFBIG) } else { (size, libc::ENOSPC) };
    if offset >= limit {
        // Reads at or past the end returned 0 before: only writes get here.
        return Err(errno(past_it));
    }
    Ok(usize::try_from(limit - offset).unwrap_or(usize::MAX).min(asked))
}

/// Fills `dst` from the iovecs in order.
fn gather(iovecs: &[libc::iovec], dst: &mut [u8]) {
    let mut copied = 0;
    for v in iovecs {
        if copied == dst.len() {
            break;
        }
        let n = v.iov_len.min(dst.len() - copied);
        // SAFETY: the iovec comes from `IoOp::remaining_iovecs` of a write op,
        // so it points into a `&[u8]` the caller lent for the whole
        // synchronous call, valid for reads of `iov_len >= n` bytes; `dst` is
        // the sim's own Vec, so the two cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(v.iov_base.cast::<u8>().cast_const(), dst.as_mut_ptr().add(copied), n) };
        copied += n;
    }
}
