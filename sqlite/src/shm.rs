//! The WAL index ("shared memory") in process memory.
//!
//! SQLite's unix VFS keeps the WAL index in a `-shm` file mapped by every
//! process using the database. Here one process owns a database (see
//! [`crate::lock`]), so the index lives in heap memory shared by the
//! process's connections: regions are zero-filled allocations that never
//! move until the last connection unmaps them, and the eight WAL locks are
//! counters. When the last connection leaves, the index goes; the next
//! connection rebuilds it from the WAL, as SQLite does after a crash. No
//! `-shm` file is created or read.
//!
//! Invariant: a lock slot is held EXCLUSIVE by at most one connection, and
//! then by no SHARED holder; each connection's masks say what it holds.

/// `SQLITE_SHM_NLOCK`.
pub const NLOCK: usize = 8;

/// The index of one database, shared by its connections.
pub struct ShmNode {
    /// Set by the first map (0 until then).
    region_bytes: usize,
    regions: Vec<Box<[u8]>>,
    /// Per slot: connections holding it SHARED.
    shared: [u32; NLOCK],
    /// Per slot: held EXCLUSIVE by some connection.
    exclusive: [bool; NLOCK],
    /// Connections that mapped the index and have not unmapped it.
    pub users: u32,
}

/// The WAL locks one connection holds, a bit per slot.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmHeld {
    pub shared: u16,
    pub exclusive: u16,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ShmError {
    /// A region size other than the first one's.
    BadRegionSize,
    /// The lock is held elsewhere: `SQLITE_BUSY`.
    Busy,
}

/// What one `xShmLock` call does to its slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShmLockOp {
    Unlock,
    Shared,
    Exclusive,
}

impl Default for ShmNode {
    fn default() -> Self {
        ShmNode::new()
    }
}

impl ShmNode {
    pub fn new() -> ShmNode {
        ShmNode { region_bytes: 0, regions: Vec::new(), shared: [0; NLOCK], exclusive: [false; NLOCK], users: 0 }
    }

    /// `xShmMap`: the address of region `index`, made (with every region
    /// before it) when `extend`; NULL when it does not exist and `!extend`.
    /// Every region has the size the first request gave.
    pub fn map(&mut self, index: usize, region_bytes: usize, extend: bool) -> Result<*mut u8, ShmError> {
        if self.region_bytes == 0 && region_bytes > 0 {
            self.region_bytes = region_bytes;
        }
        if region_bytes != self.region_bytes {
            return Err(ShmError::BadRegionSize);
        }
        if index >= self.regions.len() {
            if !extend {
                return Ok(std::ptr::null_mut());
            }
            while self.regions.len() <= index {
                self.regions.push(vec![0u8; region_bytes].into_boxed_slice());
            }
        }
        Ok(self.regions[index].as_mut_ptr())
    }

    /// `xShmLock` for slots `[first, first + count)`, as `op` says.
    /// Updates `held`.
    pub fn lock(&mut self, held: &mut ShmHeld, first: usize, count: usize, op: ShmLockOp) -> Result<(), ShmError> {
        assert!(count >= 1 && first + count <= NLOCK, "lock slots {first}+{count} out of range");
        let mask: u16 = (((1u32 << count) - 1) << first) as u16;
        if op == ShmLockOp::Unlock {
            for slot in first..first + count {
                let bit = 1u16 << slot;
                if held.shared & bit != 0 {
                    self.shared[slot] -= 1;
                }
                if held.exclusive & bit != 0 {
                    self.exclusive[slot] = false;
                }
            }
            held.shared &= !mask;
            held.exclusive &= !mask;
            self.check(held);
            return Ok(());
        }
        if op == ShmLockOp::Exclusive {
            // Every slot free of other connections (own locks aside).
            for slot in first..first + count {
                let bit = 1u16 << slot;
                let own_shared = u32::from(held.shared & bit != 0);
                let other_exclusive = self.exclusive[slot] && held.exclusive & bit == 0;
                if other_exclusive || self.shared[slot] > own_shared {
                    return Err(ShmError::Busy);
                }
            }
            for slot in first..first + count {
                let bit = 1u16 << slot;
                if held.shared & bit != 0 {
                    self.shared[slot] -= 1;
                }
                self.exclusive[slot] = true;
            }
            held.shared &= !mask;
            held.exclusive |= mask;
        } else {
            for slot in first..first + count {
                if self.exclusive[slot] && held.exclusive & (1 << slot) == 0 {
                    return Err(ShmError::Busy);
                }
            }
            for slot in first..first + count {
                let bit = 1u16 << slot;
                if held.shared & bit == 0 && held.exclusive & bit == 0 {
                    self.shared[slot] += 1;
                    held.shared |= bit;
                }
            }
        }
        self.check(held);
        Ok(())
    }

    fn check(&self, held: &ShmHeld) {
        debug_assert_eq!(held.shared & held.exclusive, 0, "a slot is held one way");
        for slot in 0..NLOCK {
            debug_assert!(!(self.exclusive[slot] && self.shared[slot] > 0), "slot {slot}: EXCLUSIVE and SHARED");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_zeroed_stable_and_made_on_demand() {
        let mut node = ShmNode::new();
        assert_eq!(node.map(0, 32768, false), Ok(std::ptr::null_mut()));
        let r2 = node.map(2, 32768, true).unwrap();
        assert!(!r2.is_null());
        // SAFETY: region 2 is 32768 bytes long.
        unsafe { *r2.add(100) = 7 };
        let r0 = node.map(0, 32768, false).unwrap();
        assert!(!r0.is_null());
        for i in 3..40 {
            node.map(i, 32768, true).unwrap();
        }
        assert_eq!(node.map(2, 32768, false).unwrap(), r2, "regions never move");
        // SAFETY: region 2 is 32768 bytes long and still mapped (regions
        // never move and `node` lives), so byte 100 is inside it.
        assert_eq!(unsafe { *r2.add(100) }, 7);
        // SAFETY: region 0 is 32768 bytes long.
        assert!((0..32768).all(|i| unsafe { *r0.add(i) } == 0));
        assert_eq!(node.map(0, 4096, false), Err(ShmError::BadRegionSize));
    }

    #[test]
    fn locks_exclude_as_sqlite_expects() {
        let mut node = ShmNode::new();
        let (mut a, mut b) = (ShmHeld::default(), ShmHeld::default());
        node.lock(&mut a, 3, 1, ShmLockOp::Shared).unwrap();
        node.lock(&mut b, 3, 1, ShmLockOp::Shared).unwrap();
        assert_eq!(node.lock(&mut a, 3, 1, ShmLockOp::Exclusive), Err(ShmError::Busy), "b reads slot 3");
        assert_eq!(node.lock(&mut b, 0, 1, ShmLockOp::Exclusive), Ok(()));
        assert_eq!(node.lock(&mut a, 0, 1, ShmLockOp::Shared), Err(ShmError::Busy), "b writes slot 0");
        node.lock(&mut b, 3, 1, ShmLockOp::Unlock).unwrap();
        assert_eq!(node.lock(&mut a, 3, 1, ShmLockOp::Exclusive), Ok(()), "a alone on slot 3 upgrades");
        assert_eq!(node.lock(&mut b, 3, 5, ShmLockOp::Exclusive), Err(ShmError::Busy));
        node.lock(&mut a, 0, NLOCK, ShmLockOp::Unlock).unwrap();
        node.lock(&mut b, 0, NLOCK, ShmLockOp::Unlock).unwrap();
        assert_eq!((a, b), (ShmHeld::default(), ShmHeld::default()));
        assert_eq!(node.lock(&mut b, 3, 5, ShmLockOp::Exclusive), Ok(()));
        assert_eq!(b.exclusive, 0b1111_1000);
    }
}
