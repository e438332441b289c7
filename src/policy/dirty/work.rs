//! The coalesced work bits that wake a domain's flushers: one set of bits
//! per writeback worker (`WorkerWakeup`), set by kicks (from writers,
//! uncached writes, reclaim) and taken by the worker, and the shutdown that
//! stops them.
//!
//! Invariants: a work bit that is already set is not set again (many
//! uncached writers cost one wakeup). A kick notifies only a worker that
//! sleeps (or is about to wait, holding its lock): an awake one finds the
//! bit at its next round, and none misses a kick between its check and
//! its wait. A kick goes only to the workers whose dirty lists hold
//! inodes, an uncached write's to those that write what it dirtied.
//! `start_dontcache` stays set until the worker ends its round
//! ([`DomainDirty::end_start_dontcache`]), and no kick that found it set
//! is lost.
//!
//! The wakeups, the listed-workers mask, the uncached kicks' generation
//! and the shutdown flag are fields of the domain's [`DomainDirty`] (in
//! the parent, with the `WorkerWakeup` type); each worker sleeps on its
//! own.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{CacheDirty, DomainDirty};
use crate::base::locks;
use crate::stats::Counters;

/// A kind of work a flusher is woken for; its bit in a worker's
/// [`WorkBits`]. The flusher checks them in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Work {
    /// Uncached writes wrote dirty data the flusher writes back for them
    /// (as many bytes as the domain's uncached-dirty count).
    StartDontcache = 1 << 1,
    /// A writer is over the background threshold or waits for dirty room.
    /// It only wakes the flusher: the gauges say how much to write.
    Background = 1 << 2,
    /// Memory is short and nothing clean is left to evict: write so that
    /// something can be.
    Reclaim = 1 << 3,
}

impl Work {
    const fn bit(self) -> u32 {
        self as u32
    }
}

/// The work a worker took: a set of [`Work`] bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkBits(u32);

impl WorkBits {
    #[cfg(test)]
    pub const NONE: WorkBits = WorkBits(0);

    pub fn contains(self, work: Work) -> bool {
        self.0 & work.bit() != 0
    }

    /// The set of `works`.
    #[cfg(test)]
    pub fn of(works: &[Work]) -> WorkBits {
        WorkBits(works.iter().fold(0, |bits, w| bits | w.bit()))
    }
}

/// How a worker's `start_dontcache` round ended
/// ([`DomainDirty::end_start_dontcache`]).
#[derive(Clone, Copy, Debug)]
pub struct DontcacheRoundEnd {
    /// It wrote something and uncached dirty data remains.
    pub keep_going: bool,
    /// The uncached kicks' generation sampled before the round.
    pub generation_seen: u64,
    /// The worker's dirty list holds inodes.
    pub worker_has_dirty: bool,
}

impl CacheDirty {
    /// Kicks every domain's flusher with `work`.
    pub fn kick_all(&self, work: Work) {
        let domains: Vec<Arc<DomainDirty>> = locks::lock(&self.domains).clone();
        for d in domains {
            d.kick(work);
        }
    }
}

impl DomainDirty {
    /// Sets a work bit on every worker with inodes listed (the others have
    /// nothing to write) and wakes those that sleep.
    pub fn kick(&self, work: Work) {
        self.kick_workers(work, self.listed_workers.load(Ordering::Acquire));
    }

    /// Sets a work bit on the workers of `mask` and wakes those of them
    /// that sleep. A bit already set costs one atomic load: that wakeup is
    /// pending, or (for `start_dontcache`) that worker is writing.
    fn kick_workers(&self, work: Work, mask: u64) {
        let bit = work.bit();
        for (i, w) in self.wakeups.iter().enumerate() {
            if mask & (1 << i) == 0
                || w.bits.load(Ordering::Acquire) & bit != 0
                || w.bits.fetch_or(bit, Ordering::SeqCst) & bit != 0
            {
                continue;
            }
            // Pairs with `wait_work`: either the worker sees the bit before
            // it sleeps, or this sees it asleep (and it holds the lock from
            // its check until it waits, so the notify cannot come between).
            if w.sleeping.load(Ordering::SeqCst) {
                Counters::add(&self.cache.counters.flusher_wakeups, 1);
                let _g = locks::lock(&w.lock);
                w.cond.notify_one();
            }
        }
    }

    /// Domain side: whether `worker`'s dirty list holds inodes now.
    pub fn set_worker_listed(&self, worker: usize, listed: bool) {
        let bit = 1u64 << worker;
        // Called at every unlock of a list: mostly unchanged, one load.
        if (self.listed_workers.load(Ordering::Acquire) & bit != 0) == listed {
            return;
        }
        if listed {
            self.listed_workers.fetch_or(bit, Ordering::AcqRel);
        } else {
            self.listed_workers.fetch_and(!bit, Ordering::AcqRel);
        }
    }

    /// An uncached write dirtied new blocks that the workers of `mask`
    /// write: counts the kick (also the generation
    /// [`DomainDirty::end_start_dontcache`] compares) and kicks them.
    pub fn kick_dontcache(&self, mask: u64) {
        debug_assert!(mask != 0, "some worker writes the new dirty data");
        self.dontcache_kicks.fetch_add(1, Ordering::AcqRel);
        Counters::add(&self.cache.counters.dontcache_kicks, 1);
        self.kick_workers(Work::StartDontcache, mask);
    }

    /// Uncached writes' kicks so far: sampled by a worker before it writes
    /// for `start_dontcache`.
    pub fn dontcache_kick_generation(&self) -> u64 {
        self.dontcache_kicks.load(Ordering::Acquire)
    }

    /// Worker side: waits up to `interval` for work for `worker`; returns
    /// its bits and clears them, all but `start_dontcache`, which the
    /// worker ends itself ([`DomainDirty::end_start_dontcache`]). Returns
    /// no bits on a timeout: time for periodic writeback.
    pub fn wait_work(&self, worker: usize, interval: Duration) -> WorkBits {
        let w = &self.wakeups[worker];
        let g = locks::lock(&w.lock);
        w.sleeping.store(true, Ordering::SeqCst);
        if w.bits.load(Ordering::SeqCst) == 0 && !self.is_shutdown() {
            drop(locks::wait_timeout(&w.cond, g, interval));
        } else {
            drop(g);
        }
        w.sleeping.store(false, Ordering::SeqCst);
        WorkBits(w.bits.fetch_and(Work::StartDontcache.bit(), Ordering::AcqRel))
    }

    /// Worker side, while it has writes in flight: takes its bits without
    /// waiting (as [`DomainDirty::wait_work`]).
    pub fn take_work(&self, worker: usize) -> WorkBits {
        WorkBits(self.wakeups[worker].bits.fetch_and(Work::StartDontcache.bit(), Ordering::AcqRel))
    }

    /// Worker side, after a `start_dontcache` round. With `keep_going` (it
    /// wrote something and uncached dirty data remains) the bit stays set:
    /// the writers' kicks meanwhile keep coalescing into this one wakeup,
    /// and the worker's next round writes again, as the kernel's flusher
    /// holds its `start_dontcache` bit until it has written. Otherwise the
    /// bit is cleared, and set again (without a wakeup: the worker is
    /// awake) if an uncached write kicked since `generation_seen` and the
    /// worker has dirty inodes, so no kick that found the bit set is lost.
    pub fn end_start_dontcache(&self, worker: usize, end: DontcacheRoundEnd) {
        let w = &self.wakeups[worker];
        let bit = Work::StartDontcache.bit();
        if end.keep_going {
            debug_assert!(w.bits.load(Ordering::Acquire) & bit != 0, "the bit is still held");
            return;
        }
        w.bits.fetch_and(!bit, Ordering::AcqRel);
        if end.worker_has_dirty && self.dontcache_kick_generation() != end.generation_seen {
            w.bits.fetch_or(bit, Ordering::AcqRel);
        }
    }

    /// Tells the workers to stop and wakes them.
    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Release);
        for w in self.wakeups.iter() {
            let _g = locks::lock(&w.lock);
            w.cond.notify_all();
        }
    }

    pub fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::domain;
    use super::*;
    use crate::policy::background_budget::BackgroundBudget;

    /// A round that stops with nothing more to write, its generation
    /// sampled now, the worker's list holding inodes.
    fn stopped_now(d: &DomainDirty) -> DontcacheRoundEnd {
        DontcacheRoundEnd { keep_going: false, generation_seen: d.dontcache_kick_generation(), worker_has_dirty: true }
    }

    /// A bit already set is not set again; taking the bits clears them, all
    /// but `start_dontcache`, which the worker ends.
    #[test]
    fn work_bits_coalesce() {
        let d = domain();
        d.set_worker_listed(0, true);
        d.kick(Work::Background);
        d.kick(Work::Background);
        d.kick(Work::StartDontcache);
        assert_eq!(d.take_work(0), WorkBits::of(&[Work::Background, Work::StartDontcache]));
        assert_eq!(d.take_work(0), WorkBits::of(&[Work::StartDontcache]), "held until the worker ends it");
        d.end_start_dontcache(0, stopped_now(&d));
        assert_eq!(d.take_work(0), WorkBits::NONE);
        d.cache.kick_all(Work::Reclaim);
        assert_eq!(d.wait_work(0, Duration::from_millis(1)), WorkBits::of(&[Work::Reclaim]));
        assert_eq!(d.wait_work(0, Duration::from_millis(1)), WorkBits::NONE, "a timeout returns no bits");
        assert_eq!(d.cache.counters.flusher_wakeups.load(Ordering::Relaxed), 0, "the worker never slept on a kick");
    }

    /// A kick wakes a sleeping worker, and counts one wakeup; kicks while
    /// the bit is pending count none.
    #[test]
    fn a_kick_wakes_a_sleeping_worker_once() {
        let d = domain();
        d.set_worker_listed(0, true);
        let sleeper = {
            let d = d.clone();
            std::thread::spawn(move || d.wait_work(0, Duration::from_secs(30)))
        };
        while !d.wakeups[0].sleeping.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // Asleep (or about to wait, holding the lock): the notify follows.
        d.kick(Work::Background);
        d.kick(Work::Background);
        assert_eq!(sleeper.join().unwrap(), WorkBits::of(&[Work::Background]), "woken well before 30 s");
        assert_eq!(d.cache.counters.flusher_wakeups.load(Ordering::Relaxed), 1);
    }

    /// While a worker holds `start_dontcache`, uncached writers' kicks set
    /// nothing; ending the round clears the bit unless a kick came in since
    /// the worker sampled the generation (and it has work).
    #[test]
    fn start_dontcache_is_held_while_the_worker_writes() {
        let d = domain();
        d.kick_dontcache(1);
        assert_eq!(d.take_work(0), WorkBits::of(&[Work::StartDontcache]));
        let seen = d.dontcache_kick_generation();
        for _ in 0..1000 {
            d.kick_dontcache(1);
        }
        assert_eq!(d.cache.counters.dontcache_kicks.load(Ordering::Relaxed), 1001);
        d.end_start_dontcache(0, DontcacheRoundEnd { keep_going: true, generation_seen: seen, worker_has_dirty: true });
        assert_eq!(d.take_work(0), WorkBits::of(&[Work::StartDontcache]), "kept going");
        d.end_start_dontcache(
            0,
            DontcacheRoundEnd { keep_going: false, generation_seen: seen, worker_has_dirty: false },
        );
        assert_eq!(d.take_work(0), WorkBits::NONE, "nothing of its own to write: cleared");
        d.kick_dontcache(1);
        let seen = d.dontcache_kick_generation();
        assert_eq!(d.take_work(0), WorkBits::of(&[Work::StartDontcache]));
        d.kick_dontcache(1);
        d.end_start_dontcache(
            0,
            DontcacheRoundEnd { keep_going: false, generation_seen: seen, worker_has_dirty: true },
        );
        assert_eq!(d.take_work(0), WorkBits::of(&[Work::StartDontcache]), "a kick since the sample is not lost");
        d.end_start_dontcache(0, stopped_now(&d));
        assert_eq!(d.take_work(0), WorkBits::NONE);
    }

    /// A kick reaches every worker with inodes listed, once, and no other;
    /// each takes only its own bits.
    #[test]
    fn listed_workers_are_kicked() {
        let d = DomainDirty::new(
            &CacheDirty::new(Arc::default(), Arc::default()),
            4,
            BackgroundBudget::new(0, 1 << 20, Arc::default()),
        );
        for w in 0..3 {
            d.set_worker_listed(w, true);
        }
        d.kick(Work::Background);
        assert_eq!(d.take_work(1), WorkBits::of(&[Work::Background]));
        d.kick(Work::Background);
        assert_eq!(d.take_work(0), WorkBits::of(&[Work::Background]));
        assert_eq!(d.take_work(1), WorkBits::of(&[Work::Background]), "worker 1 took its first bit and got a second");
        assert_eq!(d.take_work(2), WorkBits::of(&[Work::Background]), "coalesced: one bit for two kicks");
        assert_eq!(d.take_work(2), WorkBits::NONE);
        assert_eq!(d.take_work(3), WorkBits::NONE, "nothing listed: not kicked");
        d.set_worker_listed(1, false);
        d.kick(Work::Background);
        assert_eq!((d.take_work(0), d.take_work(1)), (WorkBits::of(&[Work::Background]), WorkBits::NONE));
    }
}
