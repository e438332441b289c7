//! [`BufPool`]: a cache's pool of folio buffers freed by eviction, reused
//! by new folios of the same size. Reuse avoids what a fresh allocation
//! costs on every cache fill: zeroing the memory and faulting in each page
//! when the O_DIRECT read pins it (one fault per 4 KiB).
//!
//! Accounting: pooled bytes count against `capacity` together with the
//! folios' bytes (`cached_bytes + pooled_bytes <= capacity`); the pool holds
//! at most a quarter of the capacity and is shrunk before anything is
//! evicted for a buffer of another size. Pooled buffers hold stale data;
//! folio code never exposes a block that is not uptodate, and fills zero
//! whatever the backing store did not supply. The pool owns the buffers it
//! holds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::base::locks;
use crate::buf::aligned::AlignedBuf;

#[derive(Default)]
pub struct BufPool {
    /// Free buffers by length.
    free: Mutex<HashMap<usize, Vec<AlignedBuf>>>,
    pooled_bytes: AtomicU64,
}

impl BufPool {
    pub fn pooled_bytes(&self) -> u64 {
        self.pooled_bytes.load(Ordering::Acquire)
    }

    /// A pooled buffer of exactly `len` bytes, if any.
    pub fn take(&self, len: usize) -> Option<AlignedBuf> {
        let mut free = locks::lock(&self.free);
        let buf = free.get_mut(&len)?.pop()?;
        let before = self.pooled_bytes.fetch_sub(len as u64, Ordering::AcqRel);
        debug_assert!(before >= len as u64);
        Some(buf)
    }

    /// Keeps `buf` for reuse unless the pool already holds `cap_bytes`;
    /// returns whether it was kept.
    pub fn put(&self, buf: AlignedBuf, cap_bytes: u64) -> bool {
        if !self.count_pending(buf.len(), cap_bytes) {
            return false;
        }
        self.settle(buf);
        true
    }

    /// Counts a buffer of `len` bytes that will join the pool later
    /// ([`BufPool::settle`]), unless the pool already holds `cap_bytes`
    /// (counted ones included); returns whether it was counted. A buffer
    /// a reader may still be copying from goes through here: it leaves the
    /// cache's account for the pool's at once, so the two never add up to
    /// more than the capacity, and can be handed out once it settles.
    pub fn count_pending(&self, len: usize, cap_bytes: u64) -> bool {
        let _free = locks::lock(&self.free);
        if len == 0 || self.pooled_bytes() + len as u64 > cap_bytes {
            return false;
        }
        self.pooled_bytes.fetch_add(len as u64, Ordering::AcqRel);
        true
    }

    /// A buffer counted by [`BufPool::count_pending`] joins the pool.
    pub fn settle(&self, buf: AlignedBuf) {
        locks::lock(&self.free).entry(buf.len()).or_default().push(buf);
    }

    /// A buffer counted by [`BufPool::count_pending`] will not join the
    /// pool after all (its owner frees it).
    pub fn uncount_pending(&self, len: usize) {
        let before = self.pooled_bytes.fetch_sub(len as u64, Ordering::AcqRel);
        debug_assert!(before >= len as u64, "pooled bytes underflow");
    }

    /// Frees every pooled buffer; returns the bytes freed.
    pub fn shrink_all(&self) -> u64 {
        self.shrink(u64::MAX)
    }

    /// Frees pooled buffers until at least `bytes` are released or the pool
    /// holds none (buffers still pending are not here yet); returns the
    /// bytes freed.
    pub fn shrink(&self, bytes: u64) -> u64 {
        let mut free = locks::lock(&self.free);
        let mut freed = 0u64;
        for bufs in free.values_mut() {
            while freed < bytes {
                let Some(b) = bufs.pop() else { break };
                freed += b.len() as u64;
            }
        }
        self.pooled_bytes.fetch_sub(freed, Ordering::AcqRel);
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::map::BLOCK_SIZE;

    #[test]
    fn reuses_same_size_and_respects_the_cap() {
        let pool = BufPool::default();
        assert!(pool.take(BLOCK_SIZE).is_none());
        assert!(pool.put(AlignedBuf::zeroed(BLOCK_SIZE), 2 * BLOCK_SIZE as u64));
        assert!(pool.put(AlignedBuf::zeroed(BLOCK_SIZE), 2 * BLOCK_SIZE as u64));
        assert!(!pool.put(AlignedBuf::zeroed(BLOCK_SIZE), 2 * BLOCK_SIZE as u64), "over the cap");
        assert_eq!(pool.pooled_bytes(), 2 * BLOCK_SIZE as u64);
        assert!(pool.take(2 * BLOCK_SIZE).is_none(), "sizes are exact");
        assert_eq!(pool.take(BLOCK_SIZE).unwrap().len(), BLOCK_SIZE);
        assert_eq!(pool.shrink(u64::MAX), BLOCK_SIZE as u64);
        assert_eq!(pool.pooled_bytes(), 0);
    }
}
