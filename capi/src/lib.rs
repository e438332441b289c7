//! The C ABI: `extern "C"` functions over [`Cache`](wbcache::Cache) and
//! [`File`](wbcache::File), declared for C and C++ in `include/wbcache.h`.
//! This crate calls the wbcache crate's public Rust API only; the C
//! libraries, `libwbcache.so` and `libwbcache.a`, are built from it by
//! `capi/lib`, and they alone export these functions.
//!
//! # Handles and ownership
//! - `wbc_cache *` is a boxed [`Cache`](wbcache::Cache). [`wbc_cache_open`]
//!   allocates it and [`wbc_cache_close`] writes everything back, syncs, and
//!   frees it; the pointer is dangling afterwards.
//! - `wbc_file *` is a boxed [`File`](wbcache::File). [`wbc_open`] allocates it
//!   and [`wbc_close`] frees it. A `File` holds the cache's shared state
//!   through its own reference count, never through the `wbc_cache` box, so a
//!   file may outlive its cache: after [`wbc_cache_close`] every operation on
//!   it fails with `-EBADF`, and [`wbc_close`] still frees it. Files and
//!   caches may therefore be closed in any order; each handle must be closed
//!   exactly once.
//! - Both handles may be used from several threads at once (they wrap `Send
//!   + Sync` types), except that a close must not race with any other call on
//!   the handle it frees. A file's data written concurrently with
//!   [`wbc_cache_close`] may miss the final writeback: finish I/O first.
//!
//! # Errors
//! Every function returns a non-negative value on success and `-errno` on
//! failure, mapped by [`errno_of`](wbcache::errno_of): the OS error code when
//! there is one, or the `io::ErrorKind` otherwise. A NULL handle, buffer, path
//! or output pointer is `-EINVAL`. Panics never cross the ABI: each function
//! catches them and returns `-EIO`. [`wbc_last_error`] gives the message of
//! the last failure on the calling thread (e.g. which option was bad).
//!
//! # Layout
//! The exported functions, by what they act on: `lifecycle` (creating,
//! syncing and closing caches; opening and closing files), `names`
//! (unlink, rename, forget), `rw` (reads and writes), `file_ops` (the other
//! calls on a file) and `report` (the version, statistics and the last
//! error message).
//! Beneath them, `handles` (the handle types and checked borrows of the
//! caller's pointers) and `failure` (how a call's result, error or panic
//! becomes its return value).

#![deny(unsafe_op_in_unsafe_fn)]

mod failure;
mod file_ops;
mod handles;
mod lifecycle;
mod names;
mod report;
mod rw;

pub use file_ops::{
    wbc_fadvise, wbc_fallocate, wbc_fdatasync, wbc_fsync, wbc_residency, wbc_size, wbc_sync_range, wbc_truncate,
    WBC_RESIDENT_CACHED, WBC_RESIDENT_DIRTY, WBC_RESIDENT_WRITEBACK,
};
pub use handles::{wbc_cache, wbc_file};
pub use lifecycle::{wbc_cache_close, wbc_cache_open, wbc_cache_sync, wbc_close, wbc_open, WBC_O_DONTCACHE};
pub use names::{wbc_forget, wbc_rename, wbc_unlink};
pub use report::{wbc_last_error, wbc_stats_json, wbc_version};
pub use rw::{wbc_pread, wbc_preadv, wbc_pwrite, wbc_pwritev, WBC_DONTCACHE};

#[cfg(test)]
mod tests {
    use super::failure::{guard, guard_int};
    use super::lifecycle::{open_options, KERNEL_O_LARGEFILE};
    use super::*;
    use std::ffi::{c_int, CStr, CString};
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    use std::ptr;
    use std::sync::atomic::{AtomicU32, Ordering};
    use wbcache::errno_of;
    use wbcache::Config;
    use wbcache::WriteFlags;

    const EINVAL: i64 = -(libc::EINVAL as i64);
    const EBADF: i64 = -(libc::EBADF as i64);

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "wbcache-capi-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
        fn path(&self, name: &str) -> CString {
            CString::new(self.0.join(name).as_os_str().as_bytes()).unwrap()
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A cache handle as `wbc_cache_open(options)` makes it; with `io=sim`
    /// in `options`, over the simulated backend, which the options string
    /// refuses by name (it would keep nothing), built as `wbc_cache_open`
    /// builds a handle.
    fn open_cache(options: &str) -> *mut wbc_cache {
        if let Some(rest) = options.strip_suffix(",io=sim") {
            let config = Config::from_options(rest).unwrap();
            let sim = std::sync::Arc::new(wbcache::sim::SimIo::new(wbcache::sim::SimConfig::default()));
            let cache = wbcache::Cache::with_sim(config, sim).unwrap();
            return Box::into_raw(Box::new(wbc_cache { cache }));
        }
        let options = CString::new(options).unwrap();
        let mut c = ptr::null_mut();
        // SAFETY: valid string and output pointer.
        let rc = unsafe { wbc_cache_open(options.as_ptr(), &mut c) };
        assert_eq!(rc, 0, "wbc_cache_open({options:?}): {}", last_error());
        assert!(!c.is_null());
        c
    }

    fn open_file(c: *mut wbc_cache, path: &CStr, oflags: c_int) -> Result<*mut wbc_file, i64> {
        let mut f = ptr::null_mut();
        // SAFETY: `c` is live; valid path and output pointer.
        let rc = unsafe { wbc_open(c, path.as_ptr(), oflags, 0o644, &mut f) };
        if rc == 0 {
            assert!(!f.is_null());
            Ok(f)
        } else {
            assert!(f.is_null());
            Err(i64::from(rc))
        }
    }

    fn pwrite(f: *mut wbc_file, data: &[u8], off: u64, flags: u32) -> i64 {
        // SAFETY: `f` is live (or NULL in the tests of NULL handling); `data`
        // is a valid buffer of its length.
        unsafe { wbc_pwrite(f, data.as_ptr().cast(), data.len(), off, flags) }
    }

    fn pread(f: *mut wbc_file, len: usize, off: u64, flags: u32) -> Result<Vec<u8>, i64> {
        let mut buf = vec![0xAAu8; len];
        // SAFETY: `f` is live (or NULL in the tests of NULL handling); `buf`
        // is a Vec of `len` bytes, valid for writes of them.
        let n = unsafe { wbc_pread(f, buf.as_mut_ptr().cast(), len, off, flags) };
        if n < 0 {
            return Err(n);
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// The stats JSON by the documented protocol: the counters are live
    /// (background threads move them), so a length can grow between the
    /// query and the copy, and a return `>= len` means "retry".
    fn stats_json(c: *mut wbc_cache) -> String {
        for _ in 0..100 {
            // SAFETY: `c` is live; NULL buffer is a length query.
            let n = unsafe { wbc_stats_json(c, ptr::null_mut(), 0) };
            assert!(n > 0);
            let mut buf = vec![0u8; n as usize + 1];
            // SAFETY: `buf` is valid for its length.
            let m = unsafe { wbc_stats_json(c, buf.as_mut_ptr().cast(), buf.len()) };
            assert!(m > 0);
            if (m as usize) < buf.len() {
                assert_eq!(buf[m as usize], 0, "NUL-terminated");
                return String::from_utf8(buf[..m as usize].to_vec()).unwrap();
            }
            assert!(buf.iter().all(|&b| b == 0), "a buffer too small is left untouched");
        }
        panic!("the stats JSON kept growing past the length just asked");
    }

    fn last_error() -> String {
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` is valid for its length.
        let n = unsafe { wbc_last_error(buf.as_mut_ptr().cast(), buf.len()) };
        String::from_utf8_lossy(&buf[..(n as usize).min(4095)]).into_owned()
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(u32::from(seed)) as u8).collect()
    }

    #[test]
    fn dontcache_flag_matches_the_rust_api() {
        assert_eq!(WBC_DONTCACHE, WriteFlags::DONTCACHE.bits());
    }

    #[test]
    fn errno_mapping() {
        use io::ErrorKind as K;
        assert_eq!(errno_of(&io::Error::from_raw_os_error(libc::ENOSPC)), libc::ENOSPC);
        assert_eq!(errno_of(&io::Error::from_raw_os_error(libc::EBADF)), libc::EBADF);
        for (kind, errno) in [
            (K::InvalidInput, libc::EINVAL),
            (K::NotFound, libc::ENOENT),
            (K::AlreadyExists, libc::EEXIST),
            (K::PermissionDenied, libc::EACCES),
            (K::OutOfMemory, libc::ENOMEM),
            (K::WouldBlock, libc::EAGAIN),
            (K::StorageFull, libc::ENOSPC),
            (K::FileTooLarge, libc::EFBIG),
            (K::IsADirectory, libc::EISDIR),
            (K::NotADirectory, libc::ENOTDIR),
            (K::ReadOnlyFilesystem, libc::EROFS),
            (K::ResourceBusy, libc::EBUSY),
            (K::Interrupted, libc::EINTR),
            (K::TimedOut, libc::ETIMEDOUT),
            (K::WriteZero, libc::EIO),
            (K::Unsupported, libc::EOPNOTSUPP),
            (K::Other, libc::EIO),
            (K::UnexpectedEof, libc::EIO),
        ] {
            assert_eq!(errno_of(&io::Error::new(kind, "x")), errno, "{kind:?}");
            assert_eq!(errno_of(&io::Error::from(kind)), errno, "{kind:?}");
        }
        // Every kind maps back to the errno it came from, so an error
        // rebuilt with a message (which drops the raw errno) keeps it.
        for errno in [
            libc::EAGAIN,
            libc::ENOSPC,
            libc::EFBIG,
            libc::EISDIR,
            libc::ENOTDIR,
            libc::EROFS,
            libc::EBUSY,
            libc::EINTR,
            libc::ETIMEDOUT,
            libc::ENOMEM,
            libc::EINVAL,
            libc::ENOENT,
            libc::EEXIST,
        ] {
            let kind = io::Error::from_raw_os_error(errno).kind();
            assert_eq!(errno_of(&io::Error::new(kind, "with a message")), errno, "{kind:?}");
        }
    }

    #[test]
    fn panics_become_eio() {
        assert_eq!(guard("t", || panic!("boom")), -i64::from(libc::EIO));
        assert!(last_error().contains("internal panic: boom"), "{}", last_error());
        assert_eq!(guard("t", || panic!("{}", String::from("formatted"))), -i64::from(libc::EIO));
        assert!(last_error().contains("formatted"));
        assert_eq!(guard_int("t", || Err(io::Error::from_raw_os_error(libc::ENOSPC).into())), -libc::ENOSPC);
        assert_eq!(guard("t", || Ok(7)), 7);
    }

    #[test]
    fn null_arguments_are_einval() {
        let c = open_cache("capacity=64M,dirty_limit=16M,io=sim");
        let path = CString::new("/null-args").unwrap();
        let f = open_file(c, &path, libc::O_CREAT | libc::O_RDWR).unwrap();
        let mut buf = [0u8; 8];
        let mut out_f = ptr::null_mut();
        // SAFETY: every non-NULL argument is valid; NULL ones are rejected.
        unsafe {
            assert_eq!(wbc_cache_open(ptr::null(), ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_cache_close(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_cache_sync(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_open(ptr::null_mut(), path.as_ptr(), libc::O_RDWR, 0, &mut out_f), -libc::EINVAL);
            assert!(out_f.is_null());
            assert_eq!(wbc_open(c, ptr::null(), libc::O_RDWR, 0, &mut out_f), -libc::EINVAL);
            assert_eq!(wbc_open(c, path.as_ptr(), libc::O_RDWR, 0, ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_close(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_pread(ptr::null_mut(), buf.as_mut_ptr().cast(), 8, 0, 0), EINVAL);
            assert_eq!(wbc_pread(f, ptr::null_mut(), 8, 0, 0), EINVAL);
            assert_eq!(wbc_pread(f, ptr::null_mut(), 0, 0, 0), EINVAL);
            assert_eq!(wbc_pwrite(ptr::null_mut(), buf.as_ptr().cast(), 8, 0, 0), EINVAL);
            assert_eq!(wbc_pwrite(f, ptr::null(), 8, 0, 0), EINVAL);
            assert_eq!(wbc_fsync(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_fdatasync(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_size(ptr::null_mut()), EINVAL);
            assert_eq!(wbc_truncate(ptr::null_mut(), 0), -libc::EINVAL);
            assert_eq!(wbc_stats_json(ptr::null_mut(), buf.as_mut_ptr().cast(), 8), EINVAL);
            // Lengths a slice cannot have are refused before any access.
            let dangling = ptr::NonNull::<u8>::dangling().as_ptr();
            assert_eq!(wbc_pread(f, dangling.cast(), usize::MAX, 0, 0), EINVAL);
            assert_eq!(wbc_pwrite(f, dangling.cast(), usize::MAX, 0, 0), EINVAL);
            assert_eq!(wbc_size(f), 0, "nothing was written");
            assert_eq!(wbc_close(f), 0);
            assert_eq!(wbc_cache_close(c), 0);
        }
    }

    #[test]
    fn bad_options_are_einval_with_a_message() {
        for bad in ["bogus=1", "capacity=abc", "io=spdk", "capacity=1G,dirty_limit=2G", "capacity"] {
            let options = CString::new(bad).unwrap();
            let mut c = ptr::NonNull::<wbc_cache>::dangling().as_ptr();
            // SAFETY: valid string and output pointer.
            assert_eq!(unsafe { wbc_cache_open(options.as_ptr(), &mut c) }, -libc::EINVAL, "{bad}");
            assert!(c.is_null(), "output cleared on failure");
            assert!(last_error().starts_with("wbc_cache_open: "), "{}", last_error());
        }
        let options = CString::new("bogus=1").unwrap();
        let mut c = ptr::null_mut();
        // SAFETY: `options` is a NUL-terminated CString alive for the call;
        // `c` is a local pointer, valid for the write.
        unsafe { wbc_cache_open(options.as_ptr(), &mut c) };
        assert!(last_error().contains("bogus"), "{}", last_error());
        // Not UTF-8.
        let options = CString::new(vec![0xffu8, 0xfe]).unwrap();
        // SAFETY: `options` is a NUL-terminated CString alive for the call
        // (its bytes need not be UTF-8); `c` is a local, valid for the write.
        assert_eq!(unsafe { wbc_cache_open(options.as_ptr(), &mut c) }, -libc::EINVAL);
    }

    #[test]
    fn null_options_are_the_defaults() {
        let mut c = ptr::null_mut();
        // SAFETY: NULL options are allowed; valid output pointer.
        assert_eq!(unsafe { wbc_cache_open(ptr::null(), &mut c) }, 0);
        assert!(stats_json(c).contains(&format!("\"capacity_bytes\":{}", Config::default().capacity_bytes)));
        // SAFETY: `c` is live and closed once.
        assert_eq!(unsafe { wbc_cache_close(c) }, 0);
    }

    /// The stats JSON spells out the configuration in use, thresholds the
    /// options string left to their defaults included.
    #[test]
    fn stats_json_carries_the_effective_configuration() {
        let c = open_cache("capacity=64M;dirty_limit=16M,io=sim");
        let json = stats_json(c);
        let config = format!(
            "\"config\":{{\"capacity\":{},\"dirty_limit\":{},\"dirty_background\":{},",
            64 << 20,
            16 << 20,
            8 << 20
        );
        assert!(json.contains(&config), "{json}");
        assert!(json.contains("\"io\":\"sim\",\"io_depth\":128,"), "{json}");
        // SAFETY: `c` is live and closed once.
        assert_eq!(unsafe { wbc_cache_close(c) }, 0);
    }

    #[test]
    fn open_flags_are_validated_and_mapped() {
        assert!(open_options(libc::O_APPEND | libc::O_RDWR, 0).unwrap().append);
        // OpenOptions::append implies write access; open(2)'s O_APPEND does
        // not, and the C ABI refuses it on a read-only handle as before.
        assert_eq!(open_options(libc::O_APPEND | libc::O_RDONLY, 0).unwrap_err().errno, libc::EINVAL);
        // O_TRUNC with O_APPEND: wbc_open empties the file itself.
        let o = open_options(libc::O_APPEND | libc::O_TRUNC | libc::O_WRONLY, 0).unwrap();
        assert!(o.append && !o.truncate);
        let dir = TempDir::new();
        let appended = dir.0.join("appended");
        std::fs::write(&appended, b"x").unwrap();
        let cache = wbcache::Cache::new(Config::from_options("capacity=16M,io=threads").unwrap()).unwrap();
        assert!(cache.open(&appended, &o).is_ok(), "the engine takes the mapped options");
        assert_eq!(open_options(libc::O_NONBLOCK, 0).unwrap_err().errno, libc::EINVAL);
        assert_eq!(open_options(libc::O_ACCMODE, 0).unwrap_err().errno, libc::EINVAL);
        assert_eq!(open_options(libc::O_SYNC, 0).unwrap_err().errno, libc::EINVAL);
        let o = open_options(libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECT | KERNEL_O_LARGEFILE, 0).unwrap();
        assert!(o.read && !o.write && !o.create && !o.create_new && !o.truncate);
        let o = open_options(libc::O_WRONLY, 0).unwrap();
        assert!(!o.read && o.write);
        let o = open_options(libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC, 0o100600).unwrap();
        assert!(o.read && o.write && o.create && o.create_new && o.truncate);
        assert_eq!(o.mode, 0o600);
        // O_EXCL without O_CREAT is ignored, as open(2) does for files.
        assert!(!open_options(libc::O_RDWR | libc::O_EXCL, 0).unwrap().create_new);
    }

    /// The handle semantics on any backend; `path` names a file that does
    /// not exist yet.
    fn exercise(options: &str, path: &CStr, missing: &CStr) {
        let c = open_cache(options);
        assert_eq!(open_file(c, missing, libc::O_RDWR).unwrap_err(), -i64::from(libc::ENOENT));
        assert!(last_error().contains("wbc_open"), "{}", last_error());
        assert_eq!(last_error().matches(missing.to_str().unwrap()).count(), 1, "{}", last_error());
        let f = open_file(c, path, libc::O_CREAT | libc::O_RDWR | libc::O_CLOEXEC).unwrap();
        assert_eq!(
            open_file(c, path, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR).unwrap_err(),
            -(libc::EEXIST as i64)
        );
        assert_eq!(
            open_file(c, path, libc::O_RDONLY | libc::O_APPEND).unwrap_err(),
            EINVAL,
            "append needs write access"
        );

        let data = pattern(100_000, 7);
        assert_eq!(pwrite(f, &data, 12_345, 0), data.len() as i64);
        assert_eq!(pread(f, data.len(), 12_345, 0).unwrap(), data);
        let head = pread(f, 12_345 + 10, 0, 0).unwrap();
        assert!(head[..12_345].iter().all(|&b| b == 0));
        assert_eq!(&head[12_345..], &data[..10]);
        // SAFETY: `f` is live.
        assert_eq!(unsafe { wbc_size(f) }, 112_345);
        // Reads stop at end of file and are 0 past it.
        assert_eq!(pread(f, 1000, 112_000, 0).unwrap().len(), 345);
        assert_eq!(pread(f, 10, 1 << 40, 0).unwrap().len(), 0);
        // Uncached I/O and unknown flags.
        let more = pattern(5000, 9);
        assert_eq!(pwrite(f, &more, 200_001, WBC_DONTCACHE), 5000);
        assert_eq!(pread(f, 5000, 200_001, WBC_DONTCACHE).unwrap(), more);
        assert_eq!(pwrite(f, &more, 0, 0x2), EINVAL);
        assert_eq!(pread(f, 10, 0, 0x80).unwrap_err(), EINVAL);
        assert_eq!(pwrite(f, &[], 0, 0), 0);
        // SAFETY: `f` is live.
        unsafe {
            assert_eq!(wbc_fsync(f), 0);
            assert_eq!(wbc_fdatasync(f), 0);
            assert_eq!(wbc_truncate(f, 150_000), 0);
            assert_eq!(wbc_size(f), 150_000);
        }
        assert_eq!(pread(f, 10, 149_995, 0).unwrap(), vec![0; 5]);

        // Access modes.
        let ro = open_file(c, path, libc::O_RDONLY).unwrap();
        assert_eq!(pwrite(ro, b"x", 0, 0), EBADF);
        // SAFETY: `ro` is live.
        assert_eq!(unsafe { wbc_truncate(ro, 0) }, -libc::EBADF);
        assert_eq!(pread(ro, 10, 12_345, 0).unwrap(), &data[..10]);
        let wo = open_file(c, path, libc::O_WRONLY).unwrap();
        assert_eq!(pread(wo, 10, 0, 0).unwrap_err(), EBADF);
        assert_eq!(pread(wo, 10, 1 << 40, 0).unwrap_err(), EBADF, "EBADF even past end of file");
        assert_eq!(pwrite(wo, b"wo", 0, 0), 2);
        // SAFETY: each handle is live and closed once.
        unsafe {
            assert_eq!(wbc_close(ro), 0);
            assert_eq!(wbc_close(wo), 0);
        }

        let json = stats_json(c);
        assert!(json.contains("\"cached_bytes\":") && json.contains("\"written_bytes_by_reason\":{"), "{json}");
        let mut small = [b'X'; 8];
        // SAFETY: `small` is valid for its length.
        let n = unsafe { wbc_stats_json(c, small.as_mut_ptr().cast(), small.len()) };
        assert!(n as usize >= small.len());
        assert_eq!(small, [b'X'; 8], "nothing written to a short buffer");
        let mut exact = vec![b'X'; n as usize];
        // SAFETY: `c` is live; `exact` is a Vec valid for writes of its
        // length (one byte short of room for the NUL).
        assert_eq!(unsafe { wbc_stats_json(c, exact.as_mut_ptr().cast(), exact.len()) }, n);
        assert!(exact.iter().all(|&b| b == b'X'));

        // SAFETY: `c` is live.
        assert_eq!(unsafe { wbc_cache_sync(c) }, 0);
        // Closing the cache with a file open: the file fails with EBADF and
        // can still be closed.
        assert_eq!(pwrite(f, b"tail", 149_996, 0), 4);
        // SAFETY: `c` and `f` are live; `c` is not used after its close.
        unsafe {
            assert_eq!(wbc_cache_close(c), 0);
            assert_eq!(wbc_size(f), EBADF);
            assert_eq!(wbc_fsync(f), -libc::EBADF);
            assert_eq!(wbc_fdatasync(f), -libc::EBADF);
            assert_eq!(wbc_truncate(f, 0), -libc::EBADF);
        }
        assert_eq!(pread(f, 10, 0, 0).unwrap_err(), EBADF);
        assert_eq!(pwrite(f, b"late", 0, 0), EBADF);
        // SAFETY: `f` is live and closed once.
        assert_eq!(unsafe { wbc_close(f) }, 0);
    }

    #[test]
    fn handles_on_the_sim_backend() {
        exercise(
            "capacity=64M,dirty_limit=16M,io=sim",
            &CString::new("/sim/file").unwrap(),
            &CString::new("/sim/missing").unwrap(),
        );
    }

    #[test]
    fn handles_on_real_files_with_threads() {
        let dir = TempDir::new();
        let path = dir.path("data.bin");
        exercise("capacity=64M,dirty_limit=16M,io=threads", &path, &dir.path("missing"));
        // Durable after wbc_cache_close: the expected image, read with std.
        let mut expected = vec![0u8; 150_000];
        expected[..2].copy_from_slice(b"wo");
        let data = pattern(100_000, 7);
        expected[12_345..112_345].copy_from_slice(&data);
        expected[149_996..].copy_from_slice(b"tail");
        let on_disk = std::fs::read(dir.0.join("data.bin")).unwrap();
        assert_eq!(on_disk.len(), expected.len());
        assert!(on_disk == expected, "file content differs from what was written");
    }

    #[test]
    fn handles_on_real_files_with_uring() {
        // Falls back to threads where io_uring cannot be set up.
        let dir = TempDir::new();
        exercise("capacity=64M,dirty_limit=16M,io=uring", &dir.path("u.bin"), &dir.path("missing"));
        assert_eq!(std::fs::metadata(dir.0.join("u.bin")).unwrap().len(), 150_000);
    }

    /// A read does not zero the caller's buffer first: a read that ends at
    /// end of file leaves the rest of the buffer as it was.
    #[test]
    fn pread_writes_only_the_bytes_it_returns() {
        let dir = TempDir::new();
        let path = dir.path("p.bin");
        std::fs::write(dir.0.join("p.bin"), vec![1u8; 10_000]).unwrap();
        let c = open_cache("capacity=64M,dirty_limit=16M,io=threads");
        let f = open_file(c, &path, libc::O_RDONLY).unwrap();
        let mut buf = vec![0xeeu8; 20_000];
        // SAFETY: `f` is live and `buf` is valid for 20_000 bytes.
        let n = unsafe { wbc_pread(f, buf.as_mut_ptr().cast(), 20_000, 500, 0) };
        assert_eq!(n, 9_500);
        assert!(buf[..9_500].iter().all(|&b| b == 1), "the file's bytes");
        assert!(buf[9_500..].iter().all(|&b| b == 0xee), "past end of file the buffer is untouched");
        // SAFETY: handles are live and each closed once.
        unsafe {
            assert_eq!(wbc_close(f), 0);
            assert_eq!(wbc_cache_close(c), 0);
        }
    }

    #[test]
    fn truncate_on_open_and_uninitialized_read_buffers() {
        let dir = TempDir::new();
        let path = dir.path("t.bin");
        std::fs::write(dir.0.join("t.bin"), vec![1u8; 10_000]).unwrap();
        let c = open_cache("capacity=64M,dirty_limit=16M,io=threads");
        let f = open_file(c, &path, libc::O_RDWR).unwrap();
        // SAFETY: `f` is live.
        assert_eq!(unsafe { wbc_size(f) }, 10_000);
        let mut buf: Vec<std::mem::MaybeUninit<u8>> = Vec::with_capacity(20_000);
        // SAFETY: the spare capacity is valid for 20_000 bytes of writes.
        let n = unsafe { wbc_pread(f, buf.as_mut_ptr().cast(), 20_000, 500, 0) };
        assert_eq!(n, 9_500);
        // SAFETY: wbc_pread initialized the first `n` bytes.
        let read = unsafe {
            buf.set_len(n as usize);
            std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len())
        };
        assert!(read.iter().all(|&b| b == 1));
        let t = open_file(c, &path, libc::O_RDWR | libc::O_TRUNC).unwrap();
        // SAFETY: handles are live and each closed once.
        unsafe {
            assert_eq!(wbc_size(t), 0);
            assert_eq!(wbc_size(f), 0, "both handles share the inode");
            assert_eq!(wbc_pwrite(t, b"abc".as_ptr().cast(), 3, 0, 0), 3);
            // open(2) takes O_TRUNC with O_APPEND; so does wbc_open.
            let a = open_file(c, &path, libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC).unwrap();
            assert_eq!(wbc_size(a), 0, "emptied");
            assert_eq!(wbc_pwrite(a, b"de".as_ptr().cast(), 2, 100, 0), 2);
            assert_eq!(wbc_size(f), 2, "appended at the end");
            assert_eq!(wbc_close(a), 0);
            assert_eq!(wbc_truncate(t, 0), 0);
            assert_eq!(wbc_close(t), 0);
            assert_eq!(wbc_close(f), 0);
            assert_eq!(wbc_cache_close(c), 0);
        }
        assert_eq!(std::fs::metadata(dir.0.join("t.bin")).unwrap().len(), 0);
    }

    #[test]
    fn concurrent_writers_on_one_handle() {
        let dir = TempDir::new();
        let c = open_cache("capacity=64M,dirty_limit=16M,io=threads");
        let f = open_file(c, &dir.path("mt.bin"), libc::O_CREAT | libc::O_RDWR).unwrap();
        let handle = f as usize;
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let f = handle as *mut wbc_file;
                    for i in 0..16u64 {
                        let chunk = pattern(10_000, t * 16 + i as u8);
                        assert_eq!(pwrite(f, &chunk, (u64::from(t) * 16 + i) * 10_000, 0), 10_000);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // SAFETY: `f` is live.
        assert_eq!(unsafe { wbc_fsync(f) }, 0);
        for k in 0..64u64 {
            assert_eq!(pread(f, 10_000, k * 10_000, 0).unwrap(), pattern(10_000, k as u8), "chunk {k}");
        }
        // SAFETY: handles are live and each closed once.
        unsafe {
            assert_eq!(wbc_close(f), 0);
            assert_eq!(wbc_cache_close(c), 0);
        }
    }
}
