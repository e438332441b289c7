//! The caller's side of a read or a write: where a read copies cached bytes
//! to ([`ReadTarget`]) and where a write takes them from ([`WriteSource`]),
//! either one buffer or a list of them (`readv`/`writev`: [`Scatter`],
//! [`Gather`]).
//!
//! A vectored read or write is the plain one over the concatenation of its
//! buffers: the engine copies folio by folio at increasing offsets into the
//! concatenation, and a list finds the buffer holding an offset from where
//! the previous copy ended, so a call costs O(buffers + bytes), not
//! O(buffers × folios). Both lists are built once per call and checked
//! then: their total length fits in `isize` (as `readv(2)` demands of
//! `SSIZE_MAX`), and at most [`IOV_MAX`] buffers, as the kernel allows.
//! The caller's buffers are borrowed for the call only; nothing here
//! outlives it.

use std::cell::Cell;
use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::ops::Deref;

use crate::buf::aligned::AlignedBuf;

/// The most buffers one vectored call takes (Linux `UIO_MAXIOV`); more is
/// `EINVAL`, as for `readv(2)` and `writev(2)`.
pub const IOV_MAX: usize = 1024;

/// Where a read copies cached bytes to: an initialized buffer, or one that
/// may hold uninitialized bytes (a C caller's fresh `malloc`). Reads only
/// ever write initialized bytes into it.
pub trait ReadTarget {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `src` to `[at, at + src.len())`.
    fn copy_in(&mut self, at: usize, src: &[u8]);
}

impl ReadTarget for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn copy_in(&mut self, at: usize, src: &[u8]) {
        self[at..at + src.len()].copy_from_slice(src);
    }
}

impl ReadTarget for [MaybeUninit<u8>] {
    fn len(&self) -> usize {
        <[MaybeUninit<u8>]>::len(self)
    }

    fn copy_in(&mut self, at: usize, src: &[u8]) {
        let dst = &mut self[at..at + src.len()];
        // SAFETY: `dst` and `src` are both valid for `src.len()` bytes
        // (the slice above checked the bounds), `dst` is borrowed mutably
        // so they cannot overlap, and writing initialized bytes into
        // `MaybeUninit<u8>` is always allowed.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), src.len()) };
    }
}

impl ReadTarget for IoSliceMut<'_> {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn copy_in(&mut self, at: usize, src: &[u8]) {
        self[at..at + src.len()].copy_from_slice(src);
    }
}

/// A C caller's read buffer (`struct iovec`), kept as a raw pointer: C may
/// hand `preadv` overlapping buffers (several pieces read into one scratch
/// area), and two `&mut` slices over the same bytes would be undefined
/// behaviour in Rust. Copies into it are raw, from the cache's own memory,
/// which never overlaps a caller's buffer.
#[derive(Clone, Copy, Debug)]
pub struct RawIov {
    base: *mut u8,
    len: usize,
}

impl RawIov {
    /// # Safety
    /// `base` is valid for writes of `len` bytes (which need not be
    /// initialized) for as long as the value is used, and `len` is at most
    /// `isize::MAX`. `base` may be NULL only when `len` is 0. Other
    /// `RawIov`s may cover the same bytes.
    pub unsafe fn new(base: *mut u8, len: usize) -> RawIov {
        debug_assert!(!base.is_null() || len == 0, "a NULL base with {len} bytes");
        RawIov { base, len }
    }
}

impl ReadTarget for RawIov {
    fn len(&self) -> usize {
        self.len
    }

    fn copy_in(&mut self, at: usize, src: &[u8]) {
        assert!(at + src.len() <= self.len, "copy of [{at}, {}) past a buffer of {}", at + src.len(), self.len);
        if src.is_empty() {
            return;
        }
        // SAFETY: `base` is valid for writes of `len` bytes (the contract
        // of `RawIov::new`) and the range was checked above; `src` is the
        // cache's memory or a caller's Rust slice, never the caller's C
        // buffer, so the two cannot overlap; u8 needs no alignment.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(at), src.len()) };
    }
}

impl<T: ReadTarget + ?Sized> ReadTarget for &mut T {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn copy_in(&mut self, at: usize, src: &[u8]) {
        (**self).copy_in(at, src);
    }
}

/// Where a write takes its bytes from: one buffer, or a [`Gather`] list.
pub trait WriteSource {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies source bytes `[at, at + n)` to `dst[dst_off..dst_off + n]`,
    /// with non-temporal stores when `streaming` (see
    /// [`AlignedBuf::copy_in_streaming`]).
    fn copy_out(&self, at: usize, n: usize, dst: &mut AlignedBuf, dst_off: usize, streaming: bool);
}

impl WriteSource for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn copy_out(&self, at: usize, n: usize, dst: &mut AlignedBuf, dst_off: usize, streaming: bool) {
        copy_piece(&self[at..at + n], dst, dst_off, streaming);
    }
}

fn copy_piece(src: &[u8], dst: &mut AlignedBuf, dst_off: usize, streaming: bool) {
    if streaming {
        dst.copy_in_streaming(dst_off, src);
    } else {
        dst[dst_off..dst_off + src.len()].copy_from_slice(src);
    }
}

/// The buffer holding an offset of a list's concatenation, remembered
/// between copies: `(index, offset of that buffer's first byte)`.
#[derive(Clone, Copy, Default)]
struct Position {
    index: usize,
    start: usize,
}

/// Walks `lens` from `from` (or from the start when `at` lies before it) to
/// the buffer holding byte `at`; empty buffers are skipped. `at` must be
/// below the total length.
fn locate(lens: impl Fn(usize) -> usize, count: usize, from: Position, at: usize) -> Position {
    let mut pos = if at < from.start { Position::default() } else { from };
    while pos.index < count && at >= pos.start + lens(pos.index) {
        pos.start += lens(pos.index);
        pos.index += 1;
    }
    assert!(pos.index < count, "offset {at} lies past the list's end");
    pos
}

/// Checks a list's buffer count and total length, as `readv(2)` does.
fn checked_total(count: usize, mut lens: impl Iterator<Item = usize>) -> io::Result<usize> {
    if count > IOV_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{count} buffers in one vectored call; at most {IOV_MAX}"),
        ));
    }
    lens.try_fold(0usize, |sum, len| sum.checked_add(len).filter(|&s| s <= isize::MAX as usize)).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "the buffers' total length exceeds isize::MAX (SSIZE_MAX)")
    })
}

/// A write's gather list: the concatenation of `bufs` (`IoSlice`s or
/// `&[u8]`s), in order.
pub struct Gather<'a, T: Deref<Target = [u8]>> {
    bufs: &'a [T],
    len: usize,
    position: Cell<Position>,
}

impl<'a, T: Deref<Target = [u8]>> Gather<'a, T> {
    /// A gather list over `bufs`; `InvalidInput` (EINVAL) for more than
    /// [`IOV_MAX`] buffers or a total length past `isize::MAX`.
    pub fn new(bufs: &'a [T]) -> io::Result<Self> {
        let len = checked_total(bufs.len(), bufs.iter().map(|b| b.len()))?;
        Ok(Gather { bufs, len, position: Cell::new(Position::default()) })
    }
}

impl<T: Deref<Target = [u8]>> WriteSource for Gather<'_, T> {
    fn len(&self) -> usize {
        self.len
    }

    fn copy_out(&self, at: usize, n: usize, dst: &mut AlignedBuf, dst_off: usize, streaming: bool) {
        assert!(at + n <= self.len, "copy of [{at}, {}) past a gather list of {}", at + n, self.len);
        let mut copied = 0;
        while copied < n {
            let pos = locate(|i| self.bufs[i].len(), self.bufs.len(), self.position.get(), at + copied);
            self.position.set(pos);
            let buf = &self.bufs[pos.index][..];
            let within = at + copied - pos.start;
            let piece = (buf.len() - within).min(n - copied);
            copy_piece(&buf[within..within + piece], dst, dst_off + copied, streaming);
            copied += piece;
        }
    }
}

/// A read's scatter list: the concatenation of `bufs` (`IoSliceMut`s, or
/// `&mut [MaybeUninit<u8>]`s from a C caller), in order.
pub struct Scatter<'a, T: ReadTarget> {
    bufs: &'a mut [T],
    len: usize,
    position: Position,
}

impl<'a, T: ReadTarget> Scatter<'a, T> {
    /// A scatter list over `bufs`; `InvalidInput` (EINVAL) for more than
    /// [`IOV_MAX`] buffers or a total length past `isize::MAX`.
    pub fn new(bufs: &'a mut [T]) -> io::Result<Self> {
        let len = checked_total(bufs.len(), bufs.iter().map(|b| b.len()))?;
        Ok(Scatter { bufs, len, position: Position::default() })
    }
}

impl<T: ReadTarget> ReadTarget for Scatter<'_, T> {
    fn len(&self) -> usize {
        self.len
    }

    fn copy_in(&mut self, at: usize, src: &[u8]) {
        assert!(at + src.len() <= self.len, "copy of [{at}, {}) past a scatter list of {}", at + src.len(), self.len);
        let mut copied = 0;
        while copied < src.len() {
            let pos = locate(|i| self.bufs[i].len(), self.bufs.len(), self.position, at + copied);
            self.position = pos;
            let buf = &mut self.bufs[pos.index];
            let within = at + copied - pos.start;
            let piece = (buf.len() - within).min(src.len() - copied);
            buf.copy_in(within, &src[copied..copied + piece]);
            copied += piece;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut out = Vec::new();
        let mut start = 0;
        for &c in cuts {
            out.push(&data[start..c]);
            start = c;
        }
        out.push(&data[start..]);
        out
    }

    #[test]
    fn gather_copies_any_window_of_the_concatenation() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
        // Empty buffers at the start, middle and end, and a 1-byte one.
        let bufs = pieces(&data, &[0, 0, 13, 14, 14, 100, 200]);
        let gather = Gather::new(&bufs).unwrap();
        assert_eq!(WriteSource::len(&gather), 200);
        let mut dst = AlignedBuf::zeroed(4096);
        // Forward windows reuse the position; a backward one restarts.
        for (at, n) in [(0, 5), (5, 20), (25, 175), (3, 150), (199, 1), (0, 200), (14, 0)] {
            dst.fill(0);
            gather.copy_out(at, n, &mut dst, 64, false);
            assert_eq!(&dst[64..64 + n], &data[at..at + n], "window [{at}, {})", at + n);
            assert!(dst[..64].iter().chain(&dst[64 + n..]).all(|&b| b == 0), "nothing outside the window");
        }
    }

    #[test]
    fn gather_streams_whole_blocks() {
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        // Whole aligned pieces go through the streaming stores, the rest not.
        let bufs = pieces(&data, &[4096, 4160, 6000]);
        let gather = Gather::new(&bufs).unwrap();
        let mut dst = AlignedBuf::zeroed(8192);
        gather.copy_out(0, 8192, &mut dst, 0, true);
        assert_eq!(&dst[..], &data[..]);
    }

    #[test]
    fn scatter_fills_any_window_of_the_concatenation() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 13) as u8).collect();
        let mut a = [0u8; 0];
        let mut b = [0u8; 100];
        let mut c = [0u8; 1];
        let mut d = [0u8; 199];
        let mut bufs =
            [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b), IoSliceMut::new(&mut c), IoSliceMut::new(&mut d)];
        let mut scatter = Scatter::new(&mut bufs).unwrap();
        assert_eq!(ReadTarget::len(&scatter), 300);
        scatter.copy_in(0, &data[..50]);
        scatter.copy_in(50, &data[50..101]);
        scatter.copy_in(101, &data[101..300]);
        // A backward copy restarts the walk.
        scatter.copy_in(99, &data[99..102]);
        let joined: Vec<u8> = [&b[..], &c[..], &d[..]].concat();
        assert_eq!(joined, data);
    }

    #[test]
    fn scatter_writes_into_uninitialized_buffers() {
        let mut x = [MaybeUninit::<u8>::uninit(); 3];
        let mut y = [MaybeUninit::<u8>::uninit(); 5];
        let mut bufs: [&mut [MaybeUninit<u8>]; 2] = [&mut x, &mut y];
        let mut scatter = Scatter::new(&mut bufs).unwrap();
        scatter.copy_in(0, b"abcdefgh");
        // SAFETY: every byte of both arrays was written by the copy above.
        let (x, y) = unsafe { (x.map(|b| b.assume_init()), y.map(|b| b.assume_init())) };
        assert_eq!(&x, b"abc");
        assert_eq!(&y, b"defgh");
    }

    #[test]
    fn raw_iovs_may_overlap() {
        let mut scratch = [0u8; 8];
        let base = scratch.as_mut_ptr();
        // SAFETY: both cover `scratch`, alive and unborrowed while they are
        // used; overlapping is what this test is about.
        let mut bufs = unsafe { [RawIov::new(base, 8), RawIov::new(base.add(4), 4)] };
        let mut scatter = Scatter::new(&mut bufs).unwrap();
        scatter.copy_in(0, b"abcdefghWXYZ");
        assert_eq!(&scratch, b"abcdWXYZ", "the second buffer's bytes land last");
    }

    #[test]
    fn too_many_buffers_or_too_many_bytes_is_invalid_input() {
        let one = [0u8; 1];
        let bufs = vec![&one[..]; IOV_MAX + 1];
        let e = Gather::new(&bufs).err().expect("more than IOV_MAX buffers");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("1025 buffers"), "{e}");
        assert!(Gather::new(&bufs[..IOV_MAX]).is_ok(), "IOV_MAX itself is allowed");
        let e = checked_total(2, [isize::MAX as usize, 1].into_iter()).unwrap_err();
        assert!(e.to_string().contains("SSIZE_MAX"), "{e}");
        assert_eq!(checked_total(0, std::iter::empty()).unwrap(), 0);
    }
}
