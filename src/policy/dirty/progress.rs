//! The progress signal: wakes everyone waiting for writeback progress or
//! freed memory (writers throttled on dirty room, reservations waiting for
//! a buffer, the cache's close), whoever made the progress.
//!
//! Invariant: the generation only grows, by one per [`Progress::made`],
//! and is read and bumped under the lock the waiters sleep on, so a waiter
//! that read it, looked at the counters and then waits from it
//! ([`Progress::wait_since`]) cannot miss the progress it needs.
//!
//! One `Progress` per cache, held by its [`CacheDirty`], through which the
//! throttle, the memory accounting and the domains' gauges reach it. It
//! knows nothing of what the progress was, so it stands below the rest of
//! the folder.
//!
//! [`CacheDirty`]: super::CacheDirty

use std::sync::Mutex;
use std::time::Duration;

use crate::base::locks;

/// Wakes everyone waiting for writeback progress or freed memory.
#[derive(Default)]
pub struct Progress {
    generation: Mutex<u64>,
    changed: locks::WaitQueue,
}

impl Progress {
    pub fn made(&self) {
        let mut g = locks::lock(&self.generation);
        *g += 1;
        self.changed.notify_all();
    }

    /// Waits for the next [`Progress::made`], at most `timeout`.
    pub fn wait(&self, timeout: Duration) {
        let g = locks::lock(&self.generation);
        drop(self.changed.wait_timeout(g, timeout));
    }

    /// The progress made so far, to wait from ([`Progress::wait_since`]).
    pub fn generation(&self) -> u64 {
        *locks::lock(&self.generation)
    }

    /// Waits, at most `timeout`, unless progress was made since
    /// `generation` was read: a waiter that looked at the counters after
    /// reading it cannot miss the progress it needs.
    pub fn wait_since(&self, generation: u64, timeout: Duration) {
        let g = locks::lock(&self.generation);
        if *g != generation {
            return;
        }
        drop(self.changed.wait_timeout(g, timeout));
    }
}
