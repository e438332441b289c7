//! A pool of folio buffers freed by eviction, reused by new folios of the
//! same size. Reuse avoids what a fresh allocation costs on every cache fill:
//! zeroing the memory and faulting in each page when the O_DIRECT read pins
//! it (one fault per 4 KiB).
//!
//! Accounting: pooled bytes count against `capacity` together with the
//! folios' bytes (`cached_bytes + pooled_bytes <= capacity`); the pool holds
//! at most a quarter of the capacity and is shrunk before anything is
//! evicted for a buffer of another size. Pooled buffers hold stale data;
//! folio code never exposes a block that is not uptodate, and fills zero
//! whatever the backing store did not supply.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::folio::AlignedBuf;

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
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let buf = free.get_mut(&len)?.pop()?;
        let before = self.pooled_bytes.fetch_sub(len as u64, Ordering::AcqRel);
        debug_assert!(before >= len as u64);
        Some(buf)
    }

    /// Keeps `buf` for reuse unless the pool already holds `cap_bytes`;
    /// returns whether it was kept.
    pub fn put(&self, buf: AlignedBuf, cap_bytes: u64) -> bool {
        let len = buf.len();
        if len == 0 || self.pooled_bytes() + len as u64 > cap_bytes {
            return false;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        self.pooled_bytes.fetch_add(len as u64, Ordering::AcqRel);
        free.entry(len).or_default().push(buf);
        true
    }

    /// Frees pooled buffers until at least `bytes` are released or the pool
    /// is empty; returns the bytes freed.
    pub fn shrink(&self, bytes: u64) -> u64 {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
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
    use crate::io::BLOCK_SIZE;

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
