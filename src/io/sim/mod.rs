//! In-memory backend for model tests: seeded latency, short transfers,
//! retryable errors, injected faults and a crash model.
//!
//! [`SimIo`] keeps every simulated file in memory behind one `Mutex`, so it
//! is `Send + Sync` and every attempt is atomic with respect to the others.
//! All randomness comes from one small self-contained PRNG seeded from
//! [`SimConfig::seed`], so a test that issues the same sequence of calls from
//! one thread gets the same outcome every run (with several threads, the
//! order in which they take the lock decides which draw each one gets).
//!
//! Model and invariants:
//! - A file is an inode with two images, each a `Vec<u8>` whose length is
//!   the file size: the *written* image is what reads see, the *durable*
//!   image is what survives [`SimIo::crash`]. `sync` copies written to
//!   durable (data and length; a `SyncKind` makes no difference here).
//! - Names map paths to inodes. Creating, truncating and removing names are
//!   metadata operations that take effect at once and are durable at once;
//!   only file contents and lengths are subject to the crash model.
//! - A crash persists, per 4096-byte block where the two images differ, a
//!   seeded choice of the old (durable) or new (written) version of that
//!   block, and one of the two lengths. Each resulting byte is therefore the
//!   durable or the written byte at that position (zero where the chosen
//!   version lies past that image's end): never anything else.
//! - Every store opened before a crash is dead afterwards: all its calls fail
//!   with `EIO`, so a cache that still holds it cannot touch the "rebooted"
//!   disk. Stores opened after the crash work normally. A dead store answers
//!   at once, without latency or random draws, so a crashed cache still
//!   shutting down neither slows nor perturbs the rebooted one.
//! - An attempt transfers a leading part of what it was asked for, with the
//!   correct data, or nothing. With `direct_io`, offsets and every iovec
//!   length must be multiples of `BLOCK_SIZE`
//!   (`EINVAL` otherwise), and a short transfer is a whole number of blocks
//!   unless it stops at end of file, so the remainder the driver resubmits
//!   stays aligned. More than `IOV_MAX` buffers in one op
//!   fail with `EINVAL`, as in the kernel.
//! - Removing a name leaves the inode alive for the stores that have it open
//!   (Unix semantics); it is freed when the last of them is dropped, or at a
//!   crash.
//!
//! For tests of ordering, writes to a path can be held at a gate
//! ([`SimIo::hold_writes`]): a `submit_once` call carrying a write to it
//! waits there, before any of its attempts, until the path is released; and
//! successful write attempts can be logged in order ([`SimIo::record_writes`]).
//!
//! Counters in [`SimStats`] count attempts (one per op per
//! `BackingStore::submit_once` call,
//! whatever the outcome) and sync calls; the byte counters count bytes
//! actually transferred. Errors the sim returned are also counted per path
//! ([`SimIo::write_errors`], [`SimIo::read_errors`]), so a test can tell
//! whether the engine had an error to report without knowing which of its
//! I/Os met a fault.
//!
//! Layout, each part using only those listed before it: `config` (the
//! knobs and the fault kinds), `stats` (counters, write log, errors per
//! path), `rng` (the seeded generator), `disk` (the shared state: names,
//! inodes and their two images, fault rules, open stores; the crash model),
//! `attempt` (one attempt at one op), `store` (a store's `BackingStore`
//! calls) and `backend` ([`SimIo`]: the `Io` calls and the test's
//! controls).

mod attempt;
mod backend;
mod config;
mod disk;
mod rng;
mod stats;
mod store;

pub use backend::{SimIo, SimReplay};
pub use config::{Fault, SimConfig};
pub use stats::{SimStats, SimWrite};

/// The class of a request, as [`SimWrite`] reports it.
pub use super::store::IoPriority;

#[cfg(test)]
mod tests {
    use super::super::{
        read_full, run_batch, write_full, BackingStore, Io, IoKind, IoOp, IoPriority, OpenHow, BLOCK_SIZE,
    };
    use super::rng::Rng;
    use super::*;
    use crate::base::sys::SyncKind;
    use std::collections::HashSet;
    use std::io;
    use std::path::Path;
    use std::sync::Arc;

    const BS: usize = BLOCK_SIZE;
    const P: IoPriority = IoPriority::Async;

    fn rw_create() -> OpenHow {
        OpenHow { read: true, write: true, create: true, mode: 0o644, ..OpenHow::default() }
    }

    fn rw() -> OpenHow {
        OpenHow { read: true, write: true, ..OpenHow::default() }
    }

    /// Recognisable, position-dependent bytes so misplaced data shows.
    fn pattern(len: usize, tag: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31) ^ tag ^ (i >> 12) as u8).collect()
    }

    fn raw(e: &io::Error) -> Option<i32> {
        e.raw_os_error()
    }

    fn write_at(store: &dyn BackingStore, offset: usize, data: &[u8]) -> io::Result<()> {
        write_full(store, vec![data], offset as u64, P)
    }

    fn read_at(store: &dyn BackingStore, offset: usize, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let n = read_full(store, &mut buf, offset as u64, P)?;
        buf.truncate(n);
        Ok(buf)
    }

    #[test]
    fn is_send_sync_and_kind_sim() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SimIo>();
        assert_eq!(SimIo::new(SimConfig::default()).kind(), IoKind::Sim);
    }

    #[test]
    fn round_trip_survives_short_transfers_and_retryable_errors() {
        let cfg = SimConfig { seed: 42, short_transfer_percent: 50, retryable_error_percent: 30, ..Default::default() };
        let sim = SimIo::new(cfg);
        let store = sim.open(Path::new("/f"), &rw_create()).unwrap();
        let a = pattern(64 * BS, 1);
        let b1 = pattern(3 * BS, 2);
        let b2 = pattern(5 * BS, 3);
        let c = pattern(16 * BS, 4);
        // Several ops per batch, one of them vectored, one leaving a gap.
        let mut ops = [
            IoOp::write(0, vec![&a[..]], P),
            IoOp::write((64 * BS) as u64, vec![&b1[..], &b2[..]], P),
            IoOp::write((100 * BS) as u64, vec![&c[..]], P),
        ];
        run_batch(&*store, &mut ops);
        for op in &mut ops {
            assert_eq!(op.result.take().unwrap().unwrap(), op.len());
        }
        let mut expected = a.clone();
        expected.extend_from_slice(&b1);
        expected.extend_from_slice(&b2);
        expected.resize(100 * BS, 0);
        expected.extend_from_slice(&c);
        assert_eq!(sim.written_image(Path::new("/f")).unwrap(), expected);

        let mut r1 = vec![0u8; 70 * BS];
        let mut r2 = vec![0u8; 46 * BS];
        let mut r3 = vec![0u8; 8 * BS]; // 4 blocks past end of file
        let mut ops = [
            IoOp::read(0, &mut r1, P),
            IoOp::read((70 * BS) as u64, &mut r2, P),
            IoOp::read((112 * BS) as u64, &mut r3, P),
        ];
        run_batch(&*store, &mut ops);
        let results: Vec<usize> = ops.iter_mut().map(|op| op.result.take().unwrap().unwrap()).collect();
        assert_eq!(results, [70 * BS, 46 * BS, 4 * BS]);
        assert_eq!(r1, expected[..70 * BS]);
        assert_eq!(r2, expected[70 * BS..116 * BS]);
        assert_eq!(r3[..4 * BS], expected[112 * BS..]);

        let stats = sim.stats();
        assert!(stats.short_transfers > 0 && stats.retryable_errors > 0, "{stats:?}");
        assert_eq!(stats.written_bytes, expected.len() as u64 - 28 * BS as u64);
        assert_eq!(stats.read_bytes, expected.len() as u64 + 4 * BS as u64);
        assert!(stats.writes > 3 && stats.reads > 3);
    }

    #[test]
    fn buffered_round_trip_with_unaligned_ops() {
        let cfg = SimConfig {
            seed: 9,
            short_transfer_percent: 50,
            retryable_error_percent: 30,
            direct_io: false,
            ..Default::default()
        };
        let sim = SimIo::new(cfg);
        let store = sim.open(Path::new("/b"), &rw_create()).unwrap();
        assert_eq!(store.info().logical_block_size, 512);
        assert!(!store.info().direct_io);
        let data = pattern(10_001, 7);
        write_at(&*store, 123, &data).unwrap();
        assert_eq!(store.len().unwrap(), 10_124);
        assert_eq!(read_at(&*store, 0, 123).unwrap(), vec![0u8; 123]);
        assert_eq!(read_at(&*store, 123, 20_000).unwrap(), data);
    }

    #[test]
    fn direct_io_rejects_unaligned_offsets_and_lengths() {
        let sim = SimIo::new(SimConfig::default());
        let store = sim.open(Path::new("/f"), &rw_create()).unwrap();
        assert_eq!(store.info().logical_block_size, 4096);
        write_at(&*store, 0, &pattern(2 * BS, 1)).unwrap();
        let buf = vec![0u8; BS];
        let half = vec![0u8; BS / 2];
        // run_batch debug-asserts alignment, so drive single attempts.
        let mut ops = [
            IoOp::write(512, vec![&buf[..]], P),
            IoOp::write(0, vec![&half[..]], P),
            IoOp::write(0, vec![&half[..], &half[..]], P),
            IoOp::write(0, vec![&buf[..]], P),
        ];
        let out = store.submit_once(&mut ops);
        let codes: Vec<_> = out.iter().map(|r| r.as_ref().map_err(raw).copied()).collect();
        assert_eq!(codes, [Err(Some(libc::EINVAL)), Err(Some(libc::EINVAL)), Err(Some(libc::EINVAL)), Ok(BS)]);
    }

    #[test]
    fn direct_read_stops_at_unaligned_end_of_file() {
        let sim = SimIo::new(SimConfig::default());
        let store = sim.open(Path::new("/f"), &rw_create()).unwrap();
        let data = pattern(2 * BS, 5);
        write_at(&*store, 0, &data).unwrap();
        store.set_len((BS + 100) as u64).unwrap();
        assert_eq!(read_at(&*store, 0, 4 * BS).unwrap(), data[..BS + 100]);
    }

    #[test]
    fn eio_fault_fails_only_the_touching_op() {
        let sim = SimIo::new(SimConfig::default());
        let path = Path::new("/f");
        let store = sim.open(path, &rw_create()).unwrap();
        let data = pattern(8 * BS, 1);
        write_at(&*store, 0, &data).unwrap();

        sim.inject(path, 3, Fault::ReadEio, 1);
        let (mut a, mut b, mut c) = (vec![0u8; 3 * BS], vec![0u8; 2 * BS], vec![0u8; 3 * BS]);
        let mut ops =
            [IoOp::read(0, &mut a, P), IoOp::read(3 * BS as u64, &mut b, P), IoOp::read(5 * BS as u64, &mut c, P)];
        run_batch(&*store, &mut ops);
        assert_eq!(ops[0].result.take().unwrap().unwrap(), 3 * BS);
        assert_eq!(raw(&ops[1].result.take().unwrap().unwrap_err()), Some(libc::EIO));
        assert_eq!(ops[2].result.take().unwrap().unwrap(), 3 * BS);
        assert_eq!(a, data[..3 * BS]);
        assert_eq!(c, data[5 * BS..]);
        // Consumed: the block reads fine now.
        assert_eq!(read_at(&*store, 3 * BS, BS).unwrap(), data[3 * BS..4 * BS]);

        sim.inject(path, 6, Fault::WriteEio, 1);
        let new = pattern(4 * BS, 9);
        let err = write_at(&*store, 4 * BS, &new).unwrap_err();
        assert_eq!(raw(&err), Some(libc::EIO));
        // A failed attempt writes nothing, not even the blocks before 6.
        assert_eq!(sim.written_image(path).unwrap(), data);
        // A write fault does not hit reads.
        sim.inject(path, 0, Fault::WriteEio, 1);
        assert_eq!(read_at(&*store, 0, BS).unwrap(), data[..BS]);
        assert_eq!(sim.stats().faults_fired, 2);
    }

    #[test]
    fn enospc_fault_and_write_error_switch() {
        let sim = SimIo::new(SimConfig::default());
        let path = Path::new("/f");
        let store = sim.open(path, &rw_create()).unwrap();
        sim.inject(path, 2, Fault::Enospc, u32::MAX);
        let data = pattern(4 * BS, 1);
        assert_eq!(raw(&write_at(&*store, 0, &data).unwrap_err()), Some(libc::ENOSPC));
        assert_eq!(raw(&write_at(&*store, 2 * BS, &data[..BS]).unwrap_err()), Some(libc::ENOSPC));
        write_at(&*store, 0, &data[..2 * BS]).unwrap();
        write_at(&*store, 3 * BS, &data[..BS]).unwrap();
        sim.clear_faults();
        write_at(&*store, 0, &data).unwrap();
        store.sync(SyncKind::DataOnly).unwrap();

        sim.set_write_error_all(Some(libc::EIO));
        assert_eq!(raw(&write_at(&*store, 0, &pattern(BS, 2)).unwrap_err()), Some(libc::EIO));
        // Reads still work; set_len is not a write.
        assert_eq!(read_at(&*store, 0, 4 * BS).unwrap(), data);
        store.set_len(8 * BS as u64).unwrap();
        assert_eq!(raw(&store.sync(SyncKind::All).unwrap_err()), Some(libc::EIO));
        assert_eq!(sim.durable_image(path).unwrap(), data, "failed sync made nothing durable");
        sim.set_write_error_all(None);
        store.sync(SyncKind::All).unwrap();
        assert_eq!(sim.durable_image(path).unwrap().len(), 8 * BS);
    }

    #[test]
    fn fault_counts_are_consumed_per_firing() {
        let sim = SimIo::new(SimConfig::default());
        let path = Path::new("/f");
        let store = sim.open(path, &rw_create()).unwrap();
        sim.inject(path, 1, Fault::WriteEio, 2);
        let data = pattern(2 * BS, 3);
        assert!(write_at(&*store, 0, &data).is_err());
        assert!(write_at(&*store, 0, &data).is_err());
        write_at(&*store, 0, &data).unwrap();
        assert_eq!(sim.stats().faults_fired, 2);

        // Short faults cut at the block (and at its end once inside it);
        // the driver still completes with exact data.
        sim.inject(path, 2, Fault::ShortWrite, 2);
        let data = pattern(8 * BS, 4);
        let mut ops = [IoOp::write(0, vec![&data[..]], P)];
        assert_eq!(store.submit_once(&mut ops)[0].as_ref().unwrap(), &(2 * BS));
        ops[0].done = 2 * BS;
        assert_eq!(store.submit_once(&mut ops)[0].as_ref().unwrap(), &BS);
        ops[0].done = 3 * BS;
        assert_eq!(store.submit_once(&mut ops)[0].as_ref().unwrap(), &(5 * BS), "fault used up");
        assert_eq!(sim.stats().faults_fired, 4);
        assert_eq!(sim.written_image(path).unwrap(), data);

        // An attempt wholly inside the block cannot be cut: not consumed.
        sim.inject(path, 0, Fault::ShortRead, 1);
        assert_eq!(read_at(&*store, 0, BS).unwrap(), data[..BS]);
        assert_eq!(sim.stats().faults_fired, 4);
        assert_eq!(read_at(&*store, 0, 3 * BS).unwrap(), data[..3 * BS]);
        assert_eq!(sim.stats().faults_fired, 5);

        // u32::MAX lasts until cleared.
        sim.inject(path, 0, Fault::ReadEio, u32::MAX);
        for _ in 0..5 {
            assert!(read_at(&*store, 0, BS).is_err());
        }
        sim.clear_faults();
        read_at(&*store, 0, BS).unwrap();
    }

    #[test]
    fn crash_keeps_synced_data_and_each_unsynced_block_old_or_new() {
        let path = Path::new("/f");
        let old = pattern(6 * BS + 300, 1);
        let mut saw_old = false;
        let mut saw_new = false;
        for seed in 0..64 {
            let sim = SimIo::new(SimConfig { direct_io: false, ..Default::default() });
            let store = sim.open(path, &rw_create()).unwrap();
            write_at(&*store, 0, &old).unwrap();
            store.sync(SyncKind::DataOnly).unwrap();
            // Unsynced: overwrite blocks 1 and 4 and extend past the end.
            write_at(&*store, BS, &pattern(BS, 2)).unwrap();
            write_at(&*store, 4 * BS + 10, &pattern(4 * BS, 3)).unwrap();
            let new = sim.written_image(path).unwrap();
            sim.crash(seed);
            let after = sim.written_image(path).unwrap();
            assert_eq!(sim.durable_image(path).unwrap(), after);
            assert!(after.len() == old.len() || after.len() == new.len());
            // Blocks 0, 2 and 3 were synced and never rewritten.
            assert_eq!(after[..BS], old[..BS]);
            assert_eq!(after[2 * BS..4 * BS], old[2 * BS..4 * BS]);
            for (i, chunk) in after.chunks(BS).enumerate() {
                let version = |img: &[u8]| -> Vec<u8> {
                    let mut v: Vec<u8> = img.iter().copied().skip(i * BS).take(chunk.len()).collect();
                    v.resize(chunk.len(), 0);
                    v
                };
                let (o, n) = (version(&old), version(&new));
                assert!(chunk == o || chunk == n, "seed {seed} block {i} is garbage");
                saw_old |= o != n && chunk == o;
                saw_new |= o != n && chunk == n;
            }
        }
        assert!(saw_old && saw_new, "the coin should land both ways over 64 seeds");
    }

    #[test]
    fn crash_kills_open_stores_and_new_opens_work() {
        let sim = SimIo::new(SimConfig::default());
        let path = Path::new("/f");
        let store = sim.open(path, &rw_create()).unwrap();
        let data = pattern(2 * BS, 1);
        write_at(&*store, 0, &data).unwrap();
        store.sync(SyncKind::All).unwrap();
        let id = store.info().store_id;
        sim.crash(1);
        assert_eq!(raw(&write_at(&*store, 0, &data).unwrap_err()), Some(libc::EIO));
        assert_eq!(raw(&read_at(&*store, 0, BS).unwrap_err()), Some(libc::EIO));
        assert_eq!(raw(&store.sync(SyncKind::DataOnly).unwrap_err()), Some(libc::EIO));
        assert_eq!(raw(&store.len().unwrap_err()), Some(libc::EIO));
        assert_eq!(raw(&store.set_len(0).unwrap_err()), Some(libc::EIO));

        let fresh = sim.open(path, &rw()).unwrap();
        assert_eq!(fresh.info().store_id, id, "same file after reboot");
        assert_eq!(fresh.info().len_at_open, 2 * BS as u64);
        assert_eq!(read_at(&*fresh, 0, 2 * BS).unwrap(), data);
        write_at(&*fresh, 0, &pattern(BS, 2)).unwrap();
    }

    #[test]
    fn block_device_bounds() {
        let sim = SimIo::new(SimConfig::default());
        let path = Path::new("/dev/sim0");
        sim.create_block_device(path, 4 * BS as u64);
        assert_eq!(sim.durable_image(path).unwrap(), vec![0u8; 4 * BS]);
        let how = OpenHow { truncate: true, ..rw() };
        let dev = sim.open(path, &how).unwrap();
        let info = dev.info();
        assert!(info.is_block_device);
        assert_eq!((info.len_at_open, info.device_id), (4 * BS as u64, 1));
        assert_eq!(raw(&dev.set_len(2 * BS as u64).unwrap_err()), Some(libc::EINVAL));
        dev.set_len(4 * BS as u64).unwrap();

        let data = pattern(2 * BS, 1);
        assert_eq!(raw(&write_at(&*dev, 4 * BS, &data).unwrap_err()), Some(libc::ENOSPC));
        // Crossing the end: the first attempt writes up to it, the driver's
        // follow-up at the end gets ENOSPC.
        let mut ops = [IoOp::write(3 * BS as u64, vec![&data[..]], P)];
        assert_eq!(dev.submit_once(&mut ops)[0].as_ref().unwrap(), &BS);
        ops[0].done = BS;
        assert_eq!(raw(dev.submit_once(&mut ops)[0].as_ref().unwrap_err()), Some(libc::ENOSPC));
        assert_eq!(dev.len().unwrap(), 4 * BS as u64);
        assert_eq!(read_at(&*dev, 3 * BS, 2 * BS).unwrap(), data[..BS]);
        assert_eq!(read_at(&*dev, 4 * BS, BS).unwrap(), Vec::<u8>::new());
        assert!(sim.open(path, &OpenHow { create_new: true, ..rw() }).is_err());
    }

    #[test]
    fn access_modes_and_open_flags() {
        let sim = SimIo::new(SimConfig::default());
        let path = Path::new("/f");
        assert_eq!(raw(&sim.open(path, &rw()).err().unwrap()), Some(libc::ENOENT));
        let store = sim.open(path, &rw_create()).unwrap();
        write_at(&*store, 0, &pattern(2 * BS, 1)).unwrap();
        let new_how = OpenHow { create_new: true, ..rw() };
        assert_eq!(raw(&sim.open(path, &new_how).err().unwrap()), Some(libc::EEXIST));
        assert_eq!(sim.open(Path::new("/g"), &new_how).unwrap().info().len_at_open, 0);

        let ro = sim.open(path, &OpenHow { read: true, ..OpenHow::default() }).unwrap();
        assert_eq!(raw(&write_at(&*ro, 0, &pattern(BS, 2)).unwrap_err()), Some(libc::EBADF));
        assert_eq!(read_at(&*ro, 0, BS).unwrap(), pattern(BS, 1));
        let wo = sim.open(path, &OpenHow { write: true, ..OpenHow::default() }).unwrap();
        assert_eq!(raw(&read_at(&*wo, 0, BS).unwrap_err()), Some(libc::EBADF));
        write_at(&*wo, 0, &pattern(BS, 2)).unwrap();

        // Store ids: stable per path across reopen, distinct across paths.
        assert_eq!(ro.info().store_id, store.info().store_id);
        assert_ne!(sim.open(Path::new("/g"), &rw()).unwrap().info().store_id, store.info().store_id);

        let trunc = sim.open(path, &OpenHow { truncate: true, ..rw() }).unwrap();
        assert_eq!(trunc.info().len_at_open, 0);
        assert_eq!(store.len().unwrap(), 0);
        assert_eq!(sim.durable_image(path).unwrap(), Vec::<u8>::new(), "never synced");
    }

    #[test]
    fn removed_file_lives_on_for_open_stores() {
        let sim = SimIo::new(SimConfig::default());
        let path = Path::new("/f");
        let store = sim.open(path, &rw_create()).unwrap();
        assert!(sim.remove(path));
        assert!(!sim.remove(path));
        assert!(sim.written_image(path).is_none());
        write_at(&*store, 0, &pattern(BS, 1)).unwrap();
        assert_eq!(read_at(&*store, 0, BS).unwrap(), pattern(BS, 1));
        let again = sim.open(path, &rw_create()).unwrap();
        assert_ne!(again.info().store_id, store.info().store_id, "a new file");
        assert_eq!(again.len().unwrap(), 0);
        drop(store);
        assert_eq!(sim.shared.lock().inodes.len(), 1, "unlinked inode freed with its last store");
    }

    #[test]
    fn sync_fault_fails_syncs_of_its_path_and_makes_nothing_durable() {
        let sim = SimIo::new(SimConfig::default());
        let (f, g) = (Path::new("/f"), Path::new("/g"));
        let store = sim.open(f, &rw_create()).unwrap();
        let other = sim.open(g, &rw_create()).unwrap();
        let data = pattern(2 * BS, 1);
        write_at(&*store, 0, &data).unwrap();
        write_at(&*other, 0, &data).unwrap();
        sim.inject(f, 123, Fault::SyncEio, 2);
        for _ in 0..2 {
            assert_eq!(raw(&store.sync(SyncKind::DataOnly).unwrap_err()), Some(libc::EIO));
            assert!(sim.durable_image(f).unwrap().is_empty(), "a failed sync made nothing durable");
        }
        // Attempts never fire it, and other paths are not affected.
        sim.inject(f, 0, Fault::SyncEio, 1);
        write_at(&*store, 0, &data).unwrap();
        assert_eq!(read_at(&*store, 0, BS).unwrap(), data[..BS]);
        other.sync(SyncKind::All).unwrap();
        assert_eq!(raw(&store.sync(SyncKind::All).unwrap_err()), Some(libc::EIO));
        store.sync(SyncKind::All).unwrap();
        assert_eq!(sim.durable_image(f).unwrap(), data);
        assert_eq!(sim.stats().faults_fired, 3);
        assert_eq!((sim.write_errors(f), sim.write_errors(g)), (3, 0));
    }

    #[test]
    fn errors_are_counted_per_path_and_faults_cleared_per_path() {
        let sim = SimIo::new(SimConfig::default());
        let (f, g) = (Path::new("/f"), Path::new("/g"));
        let store = sim.open(f, &rw_create()).unwrap();
        let other = sim.open(g, &rw_create()).unwrap();
        let data = pattern(4 * BS, 2);
        write_at(&*store, 0, &data).unwrap();
        write_at(&*other, 0, &data).unwrap();
        sim.inject(f, 1, Fault::WriteEio, u32::MAX);
        sim.inject(f, 2, Fault::ReadEio, 1);
        sim.inject(f, 3, Fault::ShortWrite, 1);
        sim.inject(g, 0, Fault::Enospc, 1);
        assert!(write_at(&*store, 0, &data).is_err());
        assert!(read_at(&*store, 0, 4 * BS).is_err());
        assert!(write_at(&*other, 0, &data).is_err());
        assert_eq!((sim.write_errors(f), sim.read_errors(f)), (1, 1));
        assert_eq!((sim.write_errors(g), sim.read_errors(g)), (1, 0));
        sim.clear_faults_for(f);
        write_at(&*store, 0, &data).unwrap();
        assert_eq!(sim.stats().faults_fired, 3, "the short-write fault went with the others of /f");
        // Only /f's faults went.
        sim.inject(g, 0, Fault::Enospc, 1);
        sim.clear_faults_for(f);
        assert!(write_at(&*other, 0, &data).is_err());
        // The switch counts too, syncs included; dead stores do not.
        sim.set_write_error_all(Some(libc::ENOSPC));
        assert!(write_at(&*store, 0, &data).is_err());
        assert!(store.sync(SyncKind::DataOnly).is_err());
        sim.set_write_error_all(None);
        assert_eq!(sim.write_errors(f), 3);
        sim.crash(1);
        assert!(store.sync(SyncKind::DataOnly).is_err());
        assert_eq!(sim.write_errors(f), 3);
        let st = sim.stats();
        assert_eq!((st.write_errors, st.read_errors), (5, 1));
    }

    #[test]
    fn refused_submissions_and_latency_spikes_are_harmless() {
        let cfg = SimConfig {
            seed: 8,
            submit_error_percent: 40,
            latency_spike_percent: 20,
            latency_spike_us: 100,
            short_transfer_percent: 20,
            ..Default::default()
        };
        let sim = SimIo::new(cfg);
        let store = sim.open(Path::new("/f"), &rw_create()).unwrap();
        let data = pattern(32 * BS, 3);
        for i in 0..8 {
            write_at(&*store, i * 4 * BS, &data[i * 4 * BS..(i + 1) * 4 * BS]).unwrap();
        }
        store.sync(SyncKind::DataOnly).unwrap();
        assert_eq!(read_at(&*store, 0, 32 * BS).unwrap(), data);
        let st = sim.stats();
        assert!(st.submit_errors > 0 && st.latency_spikes > 0, "{st:?}");
        assert_eq!(st.written_bytes, data.len() as u64, "a refused submission transfers nothing");
    }

    #[test]
    fn latency_is_applied_and_harmless() {
        let sim = SimIo::new(SimConfig { latency_us_max: 200, ..Default::default() });
        let store = sim.open(Path::new("/f"), &rw_create()).unwrap();
        let data = pattern(4 * BS, 1);
        write_at(&*store, 0, &data).unwrap();
        store.sync(SyncKind::DataOnly).unwrap();
        assert_eq!(read_at(&*store, 0, 4 * BS).unwrap(), data);
    }

    /// A scenario exercising every random decision; its outcome must depend
    /// on the seeds alone.
    fn scenario(seed: u64, crash_seed: u64) -> (Vec<u8>, SimStats) {
        let cfg = SimConfig { seed, short_transfer_percent: 40, retryable_error_percent: 20, ..Default::default() };
        let sim = SimIo::new(cfg);
        let path = Path::new("/f");
        let store = sim.open(path, &rw_create()).unwrap();
        sim.inject(path, 5, Fault::ShortWrite, 3);
        write_at(&*store, 0, &pattern(32 * BS, 1)).unwrap();
        store.sync(SyncKind::DataOnly).unwrap();
        for i in 0..8 {
            write_at(&*store, (i * 5 % 40) * BS, &pattern(3 * BS, i as u8)).unwrap();
        }
        sim.crash(crash_seed);
        (sim.written_image(path).unwrap(), sim.stats())
    }

    #[test]
    fn same_seed_same_outcome() {
        assert_eq!(scenario(3, 11), scenario(3, 11));
        let outcomes: HashSet<Vec<u8>> = (0..8).map(|crash_seed| scenario(3, crash_seed).0).collect();
        assert!(outcomes.len() > 1, "crash seeds should matter");
        assert_ne!(scenario(3, 11).1, scenario(4, 11).1, "attempt seeds should matter");
    }

    #[test]
    fn concurrent_writers_on_disjoint_ranges() {
        let cfg = SimConfig { seed: 5, short_transfer_percent: 30, retryable_error_percent: 10, ..Default::default() };
        let sim = Arc::new(SimIo::new(cfg));
        let store = sim.open(Path::new("/f"), &rw_create()).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let store = Arc::clone(&store);
                s.spawn(move || write_at(&*store, usize::from(t) * 8 * BS, &pattern(8 * BS, t)).unwrap());
            }
        });
        for t in 0..4u8 {
            assert_eq!(read_at(&*store, usize::from(t) * 8 * BS, 8 * BS).unwrap(), pattern(8 * BS, t));
        }
    }

    /// Random writes, reads, truncations and syncs through the flaky driver
    /// path must behave exactly like a plain byte vector.
    #[test]
    fn random_ops_match_a_reference_model() {
        for seed in 0..16 {
            let cfg = SimConfig {
                seed,
                short_transfer_percent: 40,
                retryable_error_percent: 20,
                direct_io: false,
                ..Default::default()
            };
            let sim = SimIo::new(cfg);
            let path = Path::new("/m");
            let store = sim.open(path, &rw_create()).unwrap();
            let mut model: Vec<u8> = Vec::new();
            let mut durable: Vec<u8> = Vec::new();
            let mut rng = Rng::new(seed ^ 0xABCD);
            for step in 0..300 {
                let offset = rng.below(40_000) as usize;
                let len = 1 + rng.below(9_000) as usize;
                match rng.below(10) {
                    0..=3 => {
                        let data = pattern(len, step as u8);
                        write_at(&*store, offset, &data).unwrap();
                        if model.len() < offset + len {
                            model.resize(offset + len, 0);
                        }
                        model[offset..offset + len].copy_from_slice(&data);
                    }
                    4..=7 => {
                        let want = &model[offset.min(model.len())..(offset + len).min(model.len())];
                        assert_eq!(read_at(&*store, offset, len).unwrap(), want, "seed {seed} step {step}");
                    }
                    8 => {
                        store.set_len(offset as u64).unwrap();
                        model.resize(offset, 0);
                    }
                    _ => {
                        store.sync(SyncKind::DataOnly).unwrap();
                        durable.clone_from(&model);
                    }
                }
                assert_eq!(store.len().unwrap(), model.len() as u64);
            }
            assert_eq!(sim.written_image(path).unwrap(), model);
            assert_eq!(sim.durable_image(path).unwrap(), durable);
        }
    }
}
