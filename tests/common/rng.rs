//! The seeded generator every test shares, the library's and the SQLite
//! VFS's (`sqlite/tests/common` includes this file by path): splitmix64,
//! small and deterministic. Bounds take any integer type the caller
//! counts in (`usize` lengths, `u64` offsets) and answer in the same type.

/// splitmix64: small, seeded, deterministic.
pub struct Rng(u64);

/// An integer type `Rng` draws in.
pub trait Bound: Copy + TryFrom<u64> + TryInto<u64> {}
impl<T: Copy + TryFrom<u64> + TryInto<u64>> Bound for T {}

fn to_u64<T: Bound>(v: T) -> u64 {
    v.try_into().ok().expect("a non-negative bound")
}

fn from_u64<T: Bound>(v: u64) -> T {
    T::try_from(v).ok().expect("a draw below its bound fits the bound's type")
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..bound` (`bound > 0`).
    pub fn below<T: Bound>(&mut self, bound: T) -> T {
        from_u64(((u128::from(self.next_u64()) * u128::from(to_u64(bound))) >> 64) as u64)
    }
    /// Uniform in `lo..=hi`.
    pub fn between<T: Bound>(&mut self, lo: T, hi: T) -> T {
        let (lo, hi) = (to_u64(lo), to_u64(hi));
        from_u64(lo + self.below(hi - lo + 1))
    }
    /// True with probability `percent`/100.
    pub fn chance<T: Bound>(&mut self, percent: T) -> bool {
        self.below(100u64) < to_u64(percent)
    }
    /// True with probability 1/`n`.
    pub fn one_in<T: Bound>(&mut self, n: T) -> bool {
        self.below(to_u64(n)) == 0
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
    /// `len` fresh bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.fill(&mut out);
        out
    }
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}
