//! The simulation's one source of randomness, so a seed alone decides every
//! draw.
//!
//! The disk state owns the `Rng` every attempt draws from, under its lock:
//! the order in which calls take the lock decides which draw each gets. A
//! crash draws from its own, seeded by the crash's seed, so the same seed on
//! the same images persists the same blocks whatever was drawn before.

/// splitmix64: tiny, fast and good enough for test decisions; self-written
/// to keep the crate free of a `rand` dependency.
#[derive(Clone, Debug)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound`; `bound` must be non-zero. Multiply-high keeps
    /// the bias negligible without a rejection loop.
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    pub(super) fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// True with probability `percent`/100; draws nothing when `percent` is
    /// 0 so a quiet configuration does not shift the sequence.
    pub(super) fn chance(&mut self, percent: u32) -> bool {
        percent > 0 && self.below(100) < u64::from(percent)
    }
}
