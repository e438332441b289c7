//! The system calls the engine makes on its backing stores, made directly
//! (`syscall(2)`), never through libc's wrappers of the same names: a
//! library preloaded into the process (`LD_PRELOAD`, as wbcache's own
//! `libwbcache_preload.so`) may interpose `open`, `pwrite`, `statx`,
//! `rename` and the rest, and the cache's own I/O must reach the kernel,
//! not the interposer (which would route it back into a cache). Every
//! function here is one system call: errors come back as the kernel's
//! errno, `EINTR` included (callers loop where a call can be interrupted).
//!
//! Owns nothing but what [`Fd`] holds: descriptors and mappings are the
//! callers'. The architecture test checks that no other module of `src/`
//! calls libc's wrappers of these.

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;

/// A descriptor the engine owns, closed (by a direct `close`) when
/// dropped: `OwnedFd` would close it through libc's `close`.
#[derive(Debug)]
pub struct Fd(RawFd);

impl Fd {
    /// Takes ownership of `fd`, a descriptor nothing else owns.
    pub fn new(fd: RawFd) -> Fd {
        debug_assert!(fd >= 0, "a descriptor");
        Fd(fd)
    }
}

impl std::os::fd::AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // As `OwnedFd`: a failed close (EINTR, EIO) leaves nothing to do;
        // the descriptor is gone either way on Linux.
        let _ = close(self.0);
    }
}

/// The result of a system call that returns a count or 0: `-1` is an
/// error, in `errno`.
fn check(rc: libc::c_long) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// `openat(AT_FDCWD, path, flags, mode)`: a new descriptor.
pub fn open(path: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<RawFd> {
    // SAFETY: `path` is NUL-terminated and outlives the call; openat(2)
    // reads `mode` only with O_CREAT or O_TMPFILE.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::c_long::from(libc::AT_FDCWD),
            path.as_ptr(),
            libc::c_long::from(flags),
            libc::c_long::from(mode),
        )
    };
    check(rc).map(|fd| above_program_descriptors(fd as RawFd))
}

/// `fd` moved to a number at or above [`descriptor_floor`] (the
/// original closed), or `fd` itself where it is there already or cannot
/// be moved (the limit of open descriptors reached). The engine's own
/// descriptors stay out of the numbers a program picks for itself:
/// shells and programs `dup2` onto small numbers they believe free
/// (`exec 3>>log`), which would silently close a backing store or a ring
/// that took such a number, and then hand the program's file to the
/// engine in its place.
pub fn above_program_descriptors(fd: RawFd) -> RawFd {
    match duplicate_above_floor(fd) {
        Some(high) => {
            let _ = close(fd);
            high
        }
        None => fd,
    }
}

/// A duplicate of `fd` (close-on-exec) at or above [`descriptor_floor`],
/// if `fd` is below it and a number there is free.
pub fn duplicate_above_floor(fd: RawFd) -> Option<RawFd> {
    let floor = descriptor_floor();
    if fd >= floor {
        return None;
    }
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) touches no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fcntl,
            libc::c_long::from(fd),
            libc::c_long::from(libc::F_DUPFD_CLOEXEC),
            libc::c_long::from(floor),
        )
    };
    check(rc).ok().map(|high| high as RawFd)
}

/// A close-on-exec duplicate of `fd`, at or above [`descriptor_floor`]
/// where a number there is free, owned by the caller.
pub fn dup_above_program_descriptors(fd: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) touches no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fcntl,
            libc::c_long::from(fd),
            libc::c_long::from(libc::F_DUPFD_CLOEXEC),
            libc::c_long::from(descriptor_floor()),
        )
    };
    let dup = check(rc)? as RawFd;
    // SAFETY: a descriptor just made, ours alone.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) })
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills one live `timespec`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The program's name as the kernel keeps it (`/proc/self/comm`: its
/// main thread's, up to 15 bytes), whichever thread asks; empty where
/// `/proc` cannot say.
pub fn program_name() -> String {
    std::fs::read_to_string("/proc/self/comm").map(|name| name.trim_end().to_string()).unwrap_or_default()
}

/// The lowest number for the engine's descriptors: 256, or half the
/// process's limit of open descriptors where that is lower, so that a
/// program keeps the other half.
pub fn descriptor_floor() -> RawFd {
    static FLOOR: std::sync::OnceLock<RawFd> = std::sync::OnceLock::new();
    *FLOOR.get_or_init(|| {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit fills one live `rlimit`.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 { limit.rlim_cur } else { 1024 };
        soft.saturating_div(2).min(256) as RawFd
    })
}

/// `close(fd)`.
pub fn close(fd: RawFd) -> io::Result<()> {
    // SAFETY: closing a descriptor touches no memory of ours.
    check(unsafe { libc::syscall(libc::SYS_close, libc::c_long::from(fd)) }).map(drop)
}

/// `statx(dirfd, path, flags, mask, out)`.
pub fn statx(dirfd: RawFd, path: &CStr, flags: libc::c_int, mask: u32, out: *mut libc::statx) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; the caller gives `out` valid for
    // writing one `statx`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_statx,
            libc::c_long::from(dirfd),
            path.as_ptr(),
            libc::c_long::from(flags),
            libc::c_long::from(mask),
            out,
        )
    };
    check(rc).map(drop)
}

/// `newfstatat(dirfd, path, out, flags)`: `statx`'s fallback.
pub fn fstatat(dirfd: RawFd, path: &CStr, out: *mut libc::stat, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; the caller gives `out` valid for
    // writing one `stat`.
    let rc = unsafe {
        libc::syscall(libc::SYS_newfstatat, libc::c_long::from(dirfd), path.as_ptr(), out, libc::c_long::from(flags))
    };
    check(rc).map(drop)
}

/// `mmap(MAP_SHARED | MAP_NORESERVE)` of `len` bytes of `fd` from offset 0.
pub fn map_shared(fd: RawFd, len: usize, prot: libc::c_int) -> io::Result<std::ptr::NonNull<u8>> {
    // SAFETY: a fresh mapping the kernel places; no existing memory changes.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED | libc::MAP_NORESERVE, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    std::ptr::NonNull::new(p.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

/// `madvise(ptr, len, advice)`.
///
/// # Safety
/// `[ptr, ptr + len)` is a mapping of the caller's, and `advice` does
/// nothing to it that its users do not expect.
pub unsafe fn advise(ptr: *mut libc::c_void, len: usize, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: the caller guarantees `[ptr, ptr + len)` is a mapping of
    // theirs and that `advice`'s effect on it is one its users expect.
    check(unsafe { libc::madvise(ptr, len, advice) } as libc::c_long).map(drop)
}

/// Where the symbolic link at `path` points, as text.
pub fn read_link(path: &str) -> Option<String> {
    std::fs::read_link(path).ok().map(|p| p.display().to_string())
}

/// `fstat(fd)`'s size and whether `fd` is a block device.
fn fstat_kind(fd: RawFd) -> io::Result<(u64, bool)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` has room for a stat the kernel fills in.
    check(unsafe { libc::fstat(fd, st.as_mut_ptr()) } as libc::c_long)?;
    // SAFETY: fstat succeeded and filled it in.
    let st = unsafe { st.assume_init() };
    Ok((st.st_size as u64, st.st_mode & libc::S_IFMT == libc::S_IFBLK))
}

/// `fd`'s file identity: its device's (major, minor) and inode number.
pub fn fstat_identity(fd: RawFd) -> io::Result<(u32, u32, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` has room for a stat the kernel fills in.
    check(unsafe { libc::fstat(fd, st.as_mut_ptr()) } as libc::c_long)?;
    // SAFETY: fstat succeeded and filled it in.
    let st = unsafe { st.assume_init() };
    Ok((libc::major(st.st_dev), libc::minor(st.st_dev), st.st_ino))
}

/// The identity of the file mapped at `address` in this process, from
/// `/proc/self/maps`: its device's (major, minor) and inode number.
pub fn mapped_file_identity(address: usize) -> Option<(u32, u32, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
        if !(start..end).contains(&address) {
            return None;
        }
        let (major, minor) = fields.nth(2)?.split_once(':')?;
        let inode = fields.next()?.parse().ok()?;
        Some((u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?, inode))
    })
}

/// `fd`'s inode number (`st_ino`).
pub fn fstat_inode(fd: RawFd) -> io::Result<u64> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` has room for a stat the kernel fills in.
    check(unsafe { libc::fstat(fd, st.as_mut_ptr()) } as libc::c_long)?;
    // SAFETY: fstat succeeded and filled it in.
    Ok(unsafe { st.assume_init() }.st_ino)
}

/// `fd`'s size (`st_size`).
pub fn fstat_size(fd: RawFd) -> io::Result<u64> {
    fstat_kind(fd).map(|(size, _)| size)
}

/// Whether `fd` is a block device.
pub fn is_block_device(fd: RawFd) -> io::Result<bool> {
    fstat_kind(fd).map(|(_, block)| block)
}

/// `pwrite64(fd, buf, len, offset)`.
pub fn pwrite(fd: RawFd, buf: &[u8], offset: i64) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reads of its length for the call.
    check(unsafe { libc::syscall(libc::SYS_pwrite64, libc::c_long::from(fd), buf.as_ptr(), buf.len(), offset) })
}

/// `preadv` or `pwritev` of `iovecs` at `offset` (the kernel's calls take
/// the offset as two halves; on a 64-bit target the low one holds it all).
///
/// # Safety
/// Every iovec's base is valid for `write ? reads : writes` of its length
/// for the call.
pub unsafe fn rw_vectored(fd: RawFd, iovecs: &[libc::iovec], offset: i64, write: bool) -> io::Result<usize> {
    let nr = if write { libc::SYS_pwritev } else { libc::SYS_preadv };
    // SAFETY: the caller's contract covers the buffers; `iovecs` outlives
    // the call.
    check(unsafe {
        libc::syscall(nr, libc::c_long::from(fd), iovecs.as_ptr(), iovecs.len(), offset, 0 as libc::c_long)
    })
}

/// `lseek(fd, offset, whence)`: the new offset.
pub fn lseek(fd: RawFd, offset: i64, whence: libc::c_int) -> io::Result<u64> {
    // SAFETY: no memory is passed.
    let rc = unsafe { libc::syscall(libc::SYS_lseek, libc::c_long::from(fd), offset, libc::c_long::from(whence)) };
    check(rc).map(|o| o as u64)
}

/// `ftruncate(fd, len)`.
pub fn ftruncate(fd: RawFd, len: i64) -> io::Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { libc::syscall(libc::SYS_ftruncate, libc::c_long::from(fd), len) }).map(drop)
}

/// The seals that fix a `memfd`'s size for good (`F_SEAL_SHRINK`,
/// `F_SEAL_GROW`, and `F_SEAL_SEAL` so that no holder adds a write seal):
/// another process that maps it can then trust its length.
pub fn seal_size(fd: RawFd) -> io::Result<()> {
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl(F_ADD_SEALS) touches no memory of ours.
    let rc =
        unsafe { libc::syscall(libc::SYS_fcntl, libc::c_long::from(fd), libc::c_long::from(libc::F_ADD_SEALS), seals) };
    check(rc).map(drop)
}

/// Whether `fd`'s size is sealed (see [`seal_size`]): a memory object
/// whose length cannot change under a reader's mapping.
pub fn is_size_sealed(fd: RawFd) -> bool {
    // SAFETY: fcntl(F_GET_SEALS) touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_fcntl, libc::c_long::from(fd), libc::c_long::from(libc::F_GET_SEALS)) };
    rc >= 0
        && rc as libc::c_int & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) == (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
}

/// What a sync makes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    /// Data and every metadata change (`fsync(2)`).
    All,
    /// Data and the metadata needed to read it back (`fdatasync(2)`).
    DataOnly,
}

/// `fsync(fd)` or `fdatasync(fd)`, as `kind` says.
pub fn sync(fd: RawFd, kind: SyncKind) -> io::Result<()> {
    let nr = match kind {
        SyncKind::All => libc::SYS_fsync,
        SyncKind::DataOnly => libc::SYS_fdatasync,
    };
    // SAFETY: no memory is passed.
    check(unsafe { libc::syscall(nr, libc::c_long::from(fd)) }).map(drop)
}

/// `fallocate(fd, mode, offset, len)`.
pub fn fallocate(fd: RawFd, mode: libc::c_int, offset: i64, len: i64) -> io::Result<()> {
    // SAFETY: no memory is passed.
    let rc =
        unsafe { libc::syscall(libc::SYS_fallocate, libc::c_long::from(fd), libc::c_long::from(mode), offset, len) };
    check(rc).map(drop)
}

/// `fadvise64(fd, offset, len, advice)`.
pub fn fadvise(fd: RawFd, offset: i64, len: i64, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: no memory is passed.
    let rc =
        unsafe { libc::syscall(libc::SYS_fadvise64, libc::c_long::from(fd), offset, len, libc::c_long::from(advice)) };
    check(rc).map(drop)
}

/// `fcntl(fd, cmd, arg)` for the integer commands (`F_GETFL`, `F_SETFL`,
/// `F_GETFD`).
pub fn fcntl(fd: RawFd, cmd: libc::c_int, arg: libc::c_long) -> io::Result<libc::c_int> {
    // SAFETY: the integer commands pass no memory.
    let rc = unsafe { libc::syscall(libc::SYS_fcntl, libc::c_long::from(fd), libc::c_long::from(cmd), arg) };
    check(rc).map(|v| v as libc::c_int)
}

/// `ioctl(fd, request, out)` for a request that writes one `T`.
///
/// # Safety
/// `request` writes at most one `T` through its argument.
pub unsafe fn ioctl_read<T>(fd: RawFd, request: libc::Ioctl, out: &mut T) -> io::Result<()> {
    // SAFETY: `out` is valid for writing one `T`, all `request` writes.
    let rc = unsafe { libc::syscall(libc::SYS_ioctl, libc::c_long::from(fd), request as libc::c_ulong, out as *mut T) };
    check(rc).map(drop)
}

/// `unlinkat(AT_FDCWD, path, 0)`.
pub fn unlink(path: &CStr) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_unlinkat, libc::c_long::from(libc::AT_FDCWD), path.as_ptr(), 0) };
    check(rc).map(drop)
}

/// `renameat(AT_FDCWD, from, AT_FDCWD, to)`, replacing `to`.
pub fn rename(from: &CStr, to: &CStr) -> io::Result<()> {
    let cwd = libc::c_long::from(libc::AT_FDCWD);
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let rc = unsafe { libc::syscall(libc::SYS_renameat2, cwd, from.as_ptr(), cwd, to.as_ptr(), 0) };
    check(rc).map(drop)
}

/// A private anonymous read-write mapping of `len` bytes (`flags` adds to
/// `MAP_PRIVATE | MAP_ANONYMOUS`, e.g. `MAP_POPULATE`); `None` when the
/// kernel refuses it.
pub fn map_anonymous(len: usize, flags: libc::c_int) -> Option<std::ptr::NonNull<libc::c_void>> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags;
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: a fresh anonymous mapping touches no existing memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            std::ptr::null_mut::<libc::c_void>(),
            len,
            libc::c_long::from(prot),
            libc::c_long::from(flags),
            -1 as libc::c_long,
            0 as libc::c_long,
        )
    };
    if rc < 0 {
        return None;
    }
    std::ptr::NonNull::new(rc as *mut libc::c_void)
}

/// `munmap(addr, len)`.
///
/// # Safety
/// `[addr, addr + len)` is (part of) a mapping of ours that nothing refers
/// to any more.
pub unsafe fn unmap(addr: *mut libc::c_void, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees `[addr, addr + len)` is (part of) a
    // mapping of ours that nothing refers to any more.
    check(unsafe { libc::syscall(libc::SYS_munmap, addr, len) }).map(drop)
}

/// `madvise(addr, len, advice)`.
///
/// # Safety
/// `[addr, addr + len)` lies in a mapping of ours, and `advice` is one
/// whose effect the caller accepts for it (`MADV_DONTNEED` zeroes private
/// anonymous pages).
pub unsafe fn madvise(addr: *mut libc::c_void, len: usize, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: the caller guarantees `[addr, addr + len)` lies in a mapping
    // of ours and accepts `advice`'s effect on it.
    check(unsafe { libc::syscall(libc::SYS_madvise, addr, len, libc::c_long::from(advice)) }).map(drop)
}

/// `membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)`: lets this
/// process use [`membarrier_private_expedited`].
pub fn membarrier_register_private_expedited() -> io::Result<()> {
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
    // SAFETY: a command number and a zero flag; no memory is passed.
    check(unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) }).map(drop)
}

/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: on return, every thread
/// of this process that was running has passed a full memory barrier.
pub fn membarrier_private_expedited() -> io::Result<()> {
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    // SAFETY: a command number and a zero flag; no memory is passed.
    check(unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A descriptor the engine opens lands at or above the floor, and the
    /// number the kernel first gave it is free again (the program's).
    #[test]
    fn opened_descriptors_stay_above_the_programs() {
        let floor = descriptor_floor();
        assert!(floor >= 2, "a floor above the standard descriptors: {floor}");
        let path = c"/dev/null";
        let fd = Fd::new(open(path, libc::O_RDONLY | libc::O_CLOEXEC, 0).unwrap());
        assert!(fd.0 >= floor, "descriptor {} below the floor {floor}", fd.0);
        // The lowest free number now: a plain open gets it, below the floor.
        let probe = open_low(path);
        assert!(probe < floor, "the low numbers stay free for the program: got {probe}");
        let _ = close(probe);
        // Already high: left where it is.
        assert_eq!(above_program_descriptors(fd.0), fd.0);
    }

    /// A plain `openat`, not moved (what a program's own open gets).
    fn open_low(path: &CStr) -> RawFd {
        // SAFETY: a NUL-terminated path.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::c_long::from(libc::AT_FDCWD),
                path.as_ptr(),
                libc::c_long::from(libc::O_RDONLY),
            )
        };
        check(rc).unwrap() as RawFd
    }
}
