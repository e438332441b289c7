//! The system calls the kernel's engines share, and how their answers are
//! read: a call interrupted by a signal is made again ([`retry_eintr`]), a
//! negative return is the call's `errno` ([`cvt`]), and the kernel's
//! refusal of `RWF_DONTCACHE` is [`unsupported`] (the report's status),
//! not a failure. [`read_full`] is the whole positional read of a descriptor,
//! which `kernel-buffered` and `kernel-dontcache` make and which reader
//! threads sharing one descriptor make at once
//! ([`super::SharedReader::Fd`]): it takes the descriptor alone, so it
//! holds no state of its own.

use std::io;
use std::os::fd::RawFd;

use super::unsupported::unsupported;

/// `RWF_DONTCACHE` (Linux 6.14+): uncached buffered I/O.
pub const RWF_DONTCACHE: libc::c_int = 0x80;

/// Makes the call `f` again while it is interrupted by a signal.
pub(super) fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// A system call's return: a count, or (negative) the call's `errno`.
pub(super) fn cvt(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// The kernel's refusal of `RWF_DONTCACHE` (`EOPNOTSUPP`, `EINVAL`) as
/// [`unsupported`]; any other error as it is.
pub(super) fn unsupported_flag(e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::EINVAL) => unsupported(format!("RWF_DONTCACHE refused by the kernel here ({e})")),
        _ => e,
    }
}

/// Reads `buf` at `off` from `fd` (to its end of file): `pread(2)`, or
/// `preadv2(2)` with `RWF_DONTCACHE` when `dontcache`. Takes `&` only, so
/// threads sharing the descriptor call it at once
/// ([`SharedReader::Fd`](super::SharedReader::Fd)).
pub(super) fn read_full(fd: RawFd, buf: &mut [u8], off: u64, dontcache: bool) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = retry_eintr(|| {
            let pos = (off + done as u64) as libc::off_t;
            // SAFETY: `buf[done..]` is valid for writes for its length.
            let rc = unsafe {
                if dontcache {
                    let iov = libc::iovec { iov_base: buf[done..].as_mut_ptr() as *mut _, iov_len: buf.len() - done };
                    libc::preadv2(fd, &iov, 1, pos, RWF_DONTCACHE)
                } else {
                    libc::pread(fd, buf[done..].as_mut_ptr() as *mut _, buf.len() - done, pos)
                }
            };
            cvt(rc)
        });
        let n = if dontcache { n.map_err(unsupported_flag)? } else { n? };
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}
