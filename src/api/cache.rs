//! The public cache: [`Cache`] builds the shared state (see
//! [`crate::api::shared`]) from a [`Config`] and an I/O backend, opens files, and
//! closes everything.
//!
//! Memory invariant: folio memory stays under `capacity` (see
//! [`crate::policy::memory`]); dirty memory under `dirty_limit` (see
//! [`crate::policy::throttle`]).

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::api::file::{File, OpenOptions};
use crate::api::shared::Shared;
use crate::config::Config;
use crate::io::{open_backend, Io, OpenHow};
use crate::stats::{Reason, Stats};

/// A userspace page cache. Open files with [`Cache::open`]; close with
/// [`Cache::close`] (or drop) to write back and sync everything.
///
/// Errors follow `std::fs`: one the OS returned is that error itself, its
/// errno in `raw_os_error()` (and no path in its message: add it where
/// you report it, as with std).
///
/// ```
/// use wbcache::{Cache, Config, OpenOptions};
/// # fn main() -> std::io::Result<()> {
/// let cache = Cache::new(Config::from_options("capacity=16M")?)?;
/// let path = std::env::temp_dir().join(format!("wbcache-doc-cache-{}", std::process::id()));
///
/// let file = cache.open(&path, &OpenOptions::read_write_create())?;
/// file.write_at(b"kept in the cache, written back later", 0)?;
/// cache.sync_all()?; // as syncfs: every file's data durable
/// assert_eq!(cache.stats().dirty_bytes, 0);
///
/// let missing = cache.open("/nonexistent/x", &OpenOptions::new().read(true)).err().expect("no such file");
/// assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
/// assert_eq!(missing.raw_os_error(), Some(2)); // ENOENT
///
/// drop(file);
/// cache.remove_file(&path)?;
/// cache.close()?; // writes back and syncs what is left, stops the threads
/// # Ok(()) }
/// ```
pub struct Cache {
    shared: Arc<Shared>,
}

impl Cache {
    /// Creates a cache with `config` (validated) and its I/O backend.
    pub fn new(config: Config) -> io::Result<Cache> {
        #[cfg(all(feature = "sim", not(test)))]
        if config.io == crate::io::IoKind::Sim {
            // It would report every fsync durable and keep nothing.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "io=sim is an in-memory test backend: use Cache::with_sim",
            ));
        }
        config.validate()?;
        let io = open_backend(config.io, config.io_depth);
        Cache::build(config, io)
    }

    /// Creates a cache over a simulated backend (tests and model checking;
    /// the `sim` feature).
    #[cfg(any(test, feature = "sim"))]
    pub fn with_sim(mut config: Config, sim: Arc<crate::io::sim::SimIo>) -> io::Result<Cache> {
        config.io = crate::io::IoKind::Sim;
        config.validate()?;
        Cache::build(config, sim)
    }

    fn build(config: Config, io: Arc<dyn Io>) -> io::Result<Cache> {
        Ok(Cache { shared: Shared::new(config, io)? })
    }

    /// The configuration the cache runs with (validated).
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Opens (or creates) the file or block device at `path`, as
    /// `options` say (see [`OpenOptions`] for what it refuses).
    ///
    /// Errors are `open(2)`'s as `std::fs::OpenOptions::open` returns
    /// them: the OS's error itself, with its errno in `raw_os_error()`
    /// (`NotFound` for a missing file is `ENOENT`, a directory `EISDIR`),
    /// and without the path. Besides: `InvalidInput` (`EINVAL`) for
    /// options std refuses, a file that is neither a regular file nor a
    /// block device, or a block device whose size is not a multiple of
    /// 4096; `EBADF` once the cache is closed. [`crate::errno_of`] gives
    /// every error's errno.
    pub fn open(&self, path: impl AsRef<Path>, options: &OpenOptions) -> io::Result<File> {
        self.open_path(path.as_ref(), options)
    }

    /// Removes the name `path`, as `unlink(2)` does, and with it the file's
    /// cached data when that was its last name: every cached folio of it,
    /// dirty ones too, is dropped without being written. Handles still
    /// open keep reading and writing the file until they close, as with
    /// `unlink(2)`, and then its data goes; none of it ever reaches a file
    /// created later under the name (or with the same inode number). With
    /// other hard links left, or for a block device node, the data stays
    /// cached. Errors are `unlink(2)`'s (`NotFound`, `IsADirectory`, ...),
    /// with their errno, as `std::fs::remove_file` returns them.
    pub fn remove_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.shared.remove_file(path.as_ref())
    }

    /// Renames `from` to `to` as `rename(2)` does, replacing `to`. The
    /// cached data follows the file, dirty data included (it is written
    /// back to the file under its new name); handles open on it keep
    /// working. A replaced `to` whose last name that was loses its cached
    /// data, dirty blocks unwritten, as [`Cache::remove_file`] drops it.
    /// Errors are `rename(2)`'s, with their errno, as `std::fs::rename`
    /// returns them.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
        self.shared.rename(from.as_ref(), to.as_ref())
    }

    /// Makes the cache forget the file `path` names, if it is cached and no
    /// handle has it open: writes back and syncs its dirty data, then drops
    /// every cached folio and what the cache knew of its size, so the next
    /// open reads the store afresh. For a program that lets other processes
    /// change the file while it has no handle open (SQLite's VFS does this
    /// when it gives up its lock on a database). Returns whether the file
    /// was forgotten: `false` if it was not cached, names nothing, or is
    /// open. A failed writeback or sync is returned and the file stays
    /// cached, its data dirty.
    pub fn forget(&self, path: impl AsRef<Path>) -> io::Result<bool> {
        self.shared.forget(path.as_ref())
    }

    fn open_path(&self, path: &Path, options: &OpenOptions) -> io::Result<File> {
        let shared = &self.shared;
        shared.check_open()?;
        options.validate()?;
        // A read-only handle opens the store read-only, as open(2) would
        // (no EACCES, EROFS or ETXTBSY that a reader would not get); the
        // first writable handle of the inode upgrades its store.
        let how = OpenHow {
            read: true,
            write: options.writable(),
            create: options.create,
            create_new: options.create_new,
            truncate: false, // through the cache, so cached data goes too
            mode: options.mode,
        };
        let store = match shared.io.open(path, &how) {
            // Out of descriptors: idle inodes hold one each; give those
            // back (synced first) and try once more.
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) && shared.forget_idle_inodes() > 0 =>
            {
                shared.io.open(path, &how)?
            }
            result => result?,
        };
        let store_writable = options.writable();
        let info = store.info().clone();
        if info.is_block_device && info.len_at_open % crate::io::BLOCK_SIZE as u64 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("block device size {} is not a multiple of 4096", info.len_at_open),
            ));
        }
        if !info.direct_io {
            shared.all_direct_io.store(false, Ordering::Release);
        }
        let inode = shared.inode_for(store, store_writable)?;
        let file = File::new(inode, shared.clone(), options);
        // open(2) ignores O_TRUNC on a block device; so do we.
        if options.truncate && !info.is_block_device {
            file.set_len(0)?;
        }
        Ok(file)
    }

    /// Hands a duplicate of `fd` to the cache's guardian process (see
    /// `guardian` in the options), which keeps it open until it exits: if
    /// this process dies, the open file description, and the
    /// open-file-description locks (`F_OFD_SETLK`) held on it, live on
    /// until the guardian has written the dead process's data to the
    /// files. For a lock that tells other processes to keep off a file
    /// until its data is there. Without a guardian (`guardian=off`, or a
    /// simulated backend) it does nothing. Errors: `EBADF` for a closed
    /// cache or a bad `fd`, and the errors of `sendmsg(2)`.
    pub fn keep_for_guardian(&self, fd: std::os::fd::RawFd) -> io::Result<()> {
        self.shared.check_open()?;
        match &self.shared.memory.guardian {
            Some(guardian) => guardian.keep(fd),
            None => Ok(()),
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let mut st = self.shared.stats();
        st.config = Some((*self.shared.config).clone());
        st
    }

    /// Writes back and syncs every dirty inode (like `syncfs`). Returns the
    /// first error; failed data stays dirty.
    pub fn sync_all(&self) -> io::Result<()> {
        self.shared.check_open()?;
        self.shared.sync_everything(Reason::Close)
    }

    /// Test hook (the `sim` feature): the process dies now, as far as
    /// `sim` can tell. Its stores die (their calls fail), and the cache's
    /// guardian replays what the crash table records into the simulated
    /// disk's written images, as the guardian process would through the
    /// kernel's page cache: afterwards every write the cache acknowledged
    /// is there. The cache itself is then only good for dropping (on a
    /// thread of its own, as a crashed one). Returns the bytes replayed
    /// and the failures (without a guardian, `guardian=off`: nothing).
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub fn simulate_process_crash(&self, sim: &crate::io::sim::SimIo) -> (u64, Vec<String>) {
        sim.process_crash();
        let Some(guardian) = &self.shared.memory.guardian else { return (0, Vec::new()) };
        let store_of = |slot: u32| guardian.store_of(slot);
        let report = guardian.replay_into(&mut crate::io::sim::SimReplay { sim, store_of: &store_of });
        (report.bytes, report.failures)
    }

    /// Writes back and syncs everything, stops the threads and frees the
    /// cache. Files still open afterwards fail with `EBADF`. Returns the
    /// first writeback or sync error (that data is lost with the cache).
    pub fn close(self) -> io::Result<()> {
        self.shared.shutdown()
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = self.shared.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::memory::{BufUse, WhenFull};
    use std::time::{Duration, Instant};

    use crate::buf::AlignedBuf;
    use crate::io::sim::{SimConfig, SimIo};
    use crate::io::BLOCK_SIZE;
    use crate::OpenOptions;

    /// A cache over a fresh sim backend, and its shared state.
    fn sim_cache(options: &str) -> (Cache, Arc<Shared>) {
        let sim = Arc::new(SimIo::new(SimConfig::default()));
        let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim).unwrap();
        let shared = cache.shared.clone();
        (cache, shared)
    }

    /// Open errors are the OS's own, with their errno, as std's are; the
    /// C ABI returns that errno.
    #[test]
    fn open_errors_carry_the_os_errno() {
        use crate::errno_of;

        let cache = Cache::new(Config::from_options("capacity=16M,io=threads").unwrap()).unwrap();
        let missing = std::env::temp_dir().join(format!("wbcache-missing-{}/x", std::process::id()));
        let read = OpenOptions::new().read(true);
        let err = cache.open(&missing, &read).err().expect("no such file");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
        assert_eq!(err.to_string(), io::Error::from_raw_os_error(libc::ENOENT).to_string(), "std's message");
        assert_eq!(errno_of(&err), libc::ENOENT);

        let dir = std::env::temp_dir();
        let err = cache.open(&dir, &read).err().expect("a directory");
        assert_eq!(err.raw_os_error(), Some(libc::EISDIR), "{err}");
        assert_eq!(errno_of(&err), libc::EISDIR, "{err}");
        // As std::fs::remove_file's and std::fs::rename's.
        let err = cache.remove_file(&missing).expect_err("no such file");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
        let err = cache.rename(&missing, dir.join("x")).expect_err("no such file");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");

        let (closed, shared) = sim_cache("capacity=8M");
        shared.shutdown().unwrap();
        let err = closed.open("/late", &OpenOptions::read_write_create()).err().expect("closed");
        assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{err}");
        cache.close().unwrap();
    }

    /// The builder refuses what std's refuses, with std's words, and
    /// `append` implies write access.
    #[test]
    fn open_options_follow_std() {
        let (cache, _shared) = sim_cache("capacity=8M");
        let refused = |options: OpenOptions| {
            let err = cache.open("/o", &options).map(drop).expect_err("refused");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{options:?}");
            assert_eq!(crate::errno_of(&err), libc::EINVAL, "{options:?}");
            err.to_string()
        };
        assert_eq!(refused(OpenOptions::new()), "must specify at least one of read, write, or append access");
        for options in [
            OpenOptions::new().create(true),
            OpenOptions::new().read(true).create(true),
            OpenOptions::new().read(true).create_new(true),
            OpenOptions::new().read(true).truncate(true),
        ] {
            assert_eq!(refused(options), "creating or truncating a file requires write or append access");
        }
        assert!(refused(OpenOptions::new().write(true).append(true).truncate(true)).contains("append"));

        let log = cache.open("/o", &OpenOptions::new().append(true).create(true)).unwrap();
        assert!(log.is_append());
        assert_eq!(log.write_at(b"abc", 100).unwrap(), 3);
        assert_eq!(log.write_at(b"de", 0).unwrap(), 2);
        assert_eq!(log.len().unwrap(), 5, "appended whatever the offsets");
        let mut buf = [0u8; 5];
        assert_eq!(log.read_at(&mut buf, 0).unwrap_err().raw_os_error(), Some(libc::EBADF), "not readable");
        let both = cache.open("/o", &OpenOptions::new().read(true).append(true)).unwrap();
        assert_eq!(both.read_at(&mut buf, 0).unwrap(), 5);
        assert_eq!(&buf, b"abcde");
        // A new file may be created "truncated" with append, as in std.
        cache.open("/n", &OpenOptions::new().append(true).create_new(true).truncate(true)).unwrap();
        cache.close().unwrap();
    }

    /// A closed cache keeps no buffer pool: the pool is emptied at close,
    /// and a buffer given back afterwards (by a handle that outlived the
    /// cache) is freed instead of pooled, so open handles cannot keep the
    /// cache's memory resident.
    #[test]
    fn a_closed_cache_pools_nothing() {
        let (cache, shared) = sim_cache("capacity=8M,folio_max=64K");
        let file = cache.open("/f", &OpenOptions::read_write_create()).unwrap();
        file.write_at(&vec![5u8; 4 << 20], 0).unwrap();
        file.sync_all().unwrap();
        assert_eq!(
            shared.dirty.unclean_bytes.load(Ordering::Acquire),
            0,
            "nothing dirty or under writeback after a sync"
        );
        // Reading 8M through an 8M cache evicts into the pool.
        let mut buf = vec![0u8; 64 << 10];
        for off in (0..8u64 << 20).step_by(64 << 10) {
            file.read_at(&mut buf, off).unwrap();
        }
        let held = shared.memory.reserve(BLOCK_SIZE, BufUse::Read, WhenFull::Wait).unwrap();
        cache.close().unwrap();
        assert_eq!(shared.memory.pool.pooled_bytes(), 0, "close empties the pool");
        shared.memory.release_folio_buf(Some(held), BLOCK_SIZE);
        assert_eq!(shared.memory.pool.pooled_bytes(), 0, "a buffer freed after close is not pooled");
        assert_eq!(shared.memory.cached_bytes(), 0, "nothing stays counted");
        let err = file.read_at(&mut buf, 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    }

    /// Folios that leave without eviction (truncation, drop-behind) while
    /// the cache is far under capacity do not pile up in the eviction
    /// queues: their entries (and the folio structs they hold) are swept
    /// once dead ones outnumber the live folios.
    #[test]
    fn folios_that_leave_without_eviction_leave_the_queues() {
        let (cache, shared) = sim_cache("capacity=16M,folio_max=4K");
        let f = cache.open("/t", &OpenOptions::read_write_create()).unwrap();
        let data = vec![5u8; 64 * BLOCK_SIZE];
        for _ in 0..500 {
            f.write_at(&data, 0).unwrap();
            f.set_len(0).unwrap();
        }
        assert!(
            shared.memory.evictor.tracked() <= 2 * 64 + 64 + 1,
            "truncated: {} entries",
            shared.memory.evictor.tracked()
        );
        let block = vec![6u8; BLOCK_SIZE];
        for round in 0..20_000u64 {
            f.write_at_with(&block, (round % 64) * BLOCK_SIZE as u64, crate::WriteFlags::DONTCACHE).unwrap();
            if round % 64 == 63 {
                f.sync_data().unwrap();
            }
        }
        // At most 64 folios (the file's blocks) are live at any insert.
        assert!(
            shared.memory.evictor.tracked() <= 2 * 64 + 64 + 1,
            "dropped behind: {} entries",
            shared.memory.evictor.tracked()
        );
        cache.close().unwrap();
    }

    /// A copy counted over capacity (as a fill or a truncate makes under a
    /// folio lock) is evicted back under it by the operation's end.
    #[test]
    fn excess_from_an_unreserved_copy_is_evicted() {
        let (cache, shared) = sim_cache("capacity=1M,folio_max=64K");
        let f = cache.open("/x", &OpenOptions::read_write_create()).unwrap();
        f.write_at(&vec![1u8; 2 << 20], 0).unwrap();
        f.sync_all().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        f.read_at(&mut buf, 1 << 20).unwrap();
        let full = shared.memory.cached_bytes() + shared.memory.pool.pooled_bytes();
        assert!(full > (1 << 20) - (64 << 10), "the cache is full: {full}");
        // The copy: counted without a reservation.
        shared.memory.cached_bytes.fetch_add(64 << 10, Ordering::AcqRel);
        let evictions = shared.counters.evictions.load(Ordering::Acquire);
        shared.memory.evict_excess();
        let after = shared.memory.cached_bytes() + shared.memory.pool.pooled_bytes();
        assert!(after <= 1 << 20, "still over: {after}");
        assert!(
            shared.counters.evictions.load(Ordering::Acquire) > evictions || shared.memory.pool.pooled_bytes() == 0
        );
        shared.memory.cached_bytes.fetch_sub(64 << 10, Ordering::AcqRel);
        drop(f);
        cache.close().unwrap();
    }

    /// With all memory held by buffers nobody can evict, an allocation
    /// that may not wait fails with `ENOMEM` at once, and one that may
    /// waits for the timeout and then fails with an out-of-memory error
    /// (it kicked the flusher meanwhile, which had nothing to write). Once
    /// memory is given back, allocations succeed again.
    #[test]
    fn a_reservation_that_finds_nothing_to_free_times_out() {
        let (cache, shared) = sim_cache("capacity=1M,folio_max=64K,dirty_limit=128K");
        shared.memory.set_reserve_timeout(Duration::from_millis(200));
        // A file gives the cache a writeback domain whose flusher is kicked.
        let _file = cache.open("/f", &OpenOptions::read_write_create()).unwrap();
        let held: Vec<AlignedBuf> = (0..(1 << 20) / BLOCK_SIZE)
            .map(|_| shared.memory.reserve(BLOCK_SIZE, BufUse::Read, WhenFull::Fail).unwrap())
            .collect();
        let err = shared.memory.reserve(BLOCK_SIZE, BufUse::Read, WhenFull::Fail).err().expect("memory is full");
        assert_eq!(err.raw_os_error(), Some(libc::ENOMEM));
        let started = Instant::now();
        let err = shared.memory.reserve(BLOCK_SIZE, BufUse::Read, WhenFull::Wait).err().expect("nothing can be freed");
        let waited = started.elapsed();
        assert_eq!(err.kind(), io::ErrorKind::OutOfMemory);
        assert!(err.to_string().contains("0.2 s"), "{err}");
        assert!(waited >= Duration::from_millis(200), "gave up after {waited:?}");
        assert_eq!(shared.memory.cached_bytes(), 1 << 20, "a failure reserves nothing");
        for b in held {
            shared.memory.release_folio_buf(Some(b), BLOCK_SIZE);
        }
        let again = shared.memory.reserve(BLOCK_SIZE, BufUse::Read, WhenFull::Wait).unwrap();
        shared.memory.release_folio_buf(Some(again), BLOCK_SIZE);
        cache.close().unwrap();
    }
}
