//! Where a job's requests go: the offsets of the generic streaming and
//! random patterns ([`OpGen`]), and an order of many blocks that needs no
//! table ([`KeyedPerm`]), which jobs sharing a file split between them.

use crate::spec::Pattern;
use crate::sys::Rng;

/// Offsets (relative to the target) of a streaming or random pattern.
pub enum OpGen {
    Seq {
        next: u64,
        bs: u64,
        len: u64,
        remaining: Option<u64>,
    },
    Perm {
        perm: Vec<u32>,
        i: usize,
        bs: u64,
        remaining: Option<u64>,
    },
    Random {
        rng: Rng,
        blocks: u64,
        bs: u64,
        remaining: Option<u64>,
    },
    /// A share of a [`KeyedPerm`]: its values at `next`, `next + step`, ...
    Share {
        perm: KeyedPerm,
        next: u64,
        step: u64,
        bs: u64,
    },
}

impl OpGen {
    pub fn new(pattern: &Pattern, len: u64, seed: u64) -> OpGen {
        match *pattern {
            Pattern::Seq { bs, total, .. } => OpGen::Seq { next: 0, bs, len: len.max(bs), remaining: total },
            Pattern::Rand { bs, ops, .. } => {
                let blocks = (len / bs).max(1);
                let mut rng = Rng::new(seed);
                if blocks <= 1 << 24 {
                    let mut perm: Vec<u32> = (0..blocks as u32).collect();
                    for i in (1..perm.len()).rev() {
                        let j = rng.below(i as u64 + 1) as usize;
                        perm.swap(i, j);
                    }
                    OpGen::Perm { perm, i: 0, bs, remaining: ops }
                } else {
                    OpGen::Random { rng, blocks, bs, remaining: ops }
                }
            }
            Pattern::RandShare { bs, share, shares, key } => {
                let blocks = (len / bs).max(1);
                OpGen::Share { perm: KeyedPerm::new(blocks, key), next: share, step: shares.max(1), bs }
            }
            _ => unreachable!("not a streaming pattern"),
        }
    }
}

impl Iterator for OpGen {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match self {
            OpGen::Seq { next, bs, len, remaining } => {
                if *remaining == Some(0) {
                    return None;
                }
                let off = *next;
                let n = (*bs).min(remaining.unwrap_or(u64::MAX));
                *next += *bs;
                if *next + *bs > *len {
                    *next = 0;
                }
                if let Some(r) = remaining {
                    *r -= n;
                }
                Some(off)
            }
            OpGen::Perm { perm, i, bs, remaining } => {
                if *remaining == Some(0) {
                    return None;
                }
                if let Some(r) = remaining {
                    *r -= 1;
                }
                let off = u64::from(perm[*i % perm.len()]) * *bs;
                *i += 1;
                Some(off)
            }
            OpGen::Random { rng, blocks, bs, remaining } => {
                if *remaining == Some(0) {
                    return None;
                }
                if let Some(r) = remaining {
                    *r -= 1;
                }
                Some(rng.below(*blocks) * *bs)
            }
            OpGen::Share { perm, next, step, bs } => {
                if *next >= perm.len() {
                    return None;
                }
                let block = perm.get(*next);
                *next += *step;
                Some(block * *bs)
            }
        }
    }
}

/// A pseudo-random order of `0..n` that needs no table (any number of
/// blocks, and every job that shares it computes only its own part, at no
/// cost up front): a four-round Feistel network over the smallest power of
/// four at least `n`, applied again until the value falls below `n` (cycle
/// walking keeps it a bijection of `0..n`; the domain being under `4 n`,
/// it takes under four passes on average).
pub struct KeyedPerm {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl KeyedPerm {
    pub fn new(n: u64, key: u64) -> KeyedPerm {
        let bits = 64 - (n.max(2) - 1).leading_zeros();
        let mut rng = Rng::new(key);
        KeyedPerm { n, half_bits: bits.div_ceil(2), keys: std::array::from_fn(|_| rng.next_u64()) }
    }

    fn len(&self) -> u64 {
        self.n
    }

    /// One pass of the network over `0..4^half_bits`.
    fn encrypt(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut left, mut right) = (x >> self.half_bits, x & mask);
        for k in self.keys {
            // splitmix64's finalizer as the round function.
            let mut z = right ^ k;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (left, right) = (right, left ^ (z & mask));
        }
        (left << self.half_bits) | right
    }

    /// The `i`-th value of the order (`i < n`).
    pub fn get(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = self.encrypt(i);
        while x >= self.n {
            x = self.encrypt(x);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order without a table is a bijection of `0..n`, for sizes on
    /// and off powers of two, and a different key gives another order.
    #[test]
    fn keyed_perm_is_a_permutation() {
        for n in [1u64, 2, 3, 4, 5, 7, 8, 100, 1000, 4096, 65_537] {
            let p = KeyedPerm::new(n, 40);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let v = p.get(i);
                assert!(v < n && !seen[v as usize], "n {n}: {v} twice or out of range");
                seen[v as usize] = true;
            }
        }
        let (a, b) = (KeyedPerm::new(1000, 1), KeyedPerm::new(1000, 2));
        assert!((0..1000).filter(|&i| a.get(i) != b.get(i)).count() > 900);
        // Not the identity, nor a shifted one: neighbours land far apart.
        let far = (0..999).filter(|&i| a.get(i).abs_diff(a.get(i + 1)) > 10).count();
        assert!(far > 900, "{far}");
    }

    /// Twelve shares of one target write every block once between them,
    /// each share a disjoint part.
    #[test]
    fn shares_cover_every_block_once() {
        let bs = 4096;
        let len = 1000 * bs + 100; // a partial block at the end is not written
        let mut count = vec![0u32; 1000];
        let mut sizes = Vec::new();
        for share in 0..12 {
            let pattern = Pattern::RandShare { bs, share, shares: 12, key: 40 };
            let gen = OpGen::new(&pattern, len, 99);
            let mut n = 0;
            for off in gen {
                assert_eq!(off % bs, 0);
                count[(off / bs) as usize] += 1;
                n += 1;
            }
            sizes.push(n);
        }
        assert!(count.iter().all(|&c| c == 1), "every block exactly once");
        assert!(sizes.iter().all(|&n| n == 83 || n == 84), "{sizes:?}");
    }
}
