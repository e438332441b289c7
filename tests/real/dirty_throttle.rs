//! Writers held at the dirty limit are released by writeback they asked for,
//! never by periodic writeback, for every valid pair of dirty thresholds,
//! including a `dirty_background` one block below `dirty_limit`.
//!
//! Every case runs with `expire_ms` at an hour, so periodic writeback cannot
//! happen during the test: a writer that only periodic writeback could
//! release would hang, and the watchdog reports it. The assertions are on
//! the writeback reasons (nothing periodic, background writeback whenever a
//! writer waited) and on the bytes on the store, not on wall time.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{assert_same, wait_until, with_timeout, Rng};
use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, OpenOptions, Reason};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const HOUR_MS: u64 = 3_600_000;

#[derive(Clone, Copy, Debug)]
struct Case {
    dirty_limit: u64,
    dirty_background: u64,
    folio_max: u64,
    write_len: usize,
}

impl Case {
    /// The case's options; the backend is added by the caller. The
    /// writes stay buffered writes all along (`stream_dropbehind=off`):
    /// the throttle of buffered writers is what is tested, and past a
    /// quarter of these small caches a sequential writer would otherwise
    /// be an uncached one, written back for the uncached kick.
    fn options(&self) -> String {
        format!(
            "capacity={},dirty_limit={},dirty_background={},folio_max={},io_max={},expire_ms={HOUR_MS},\
             stream_dropbehind=off",
            2 * self.dirty_limit,
            self.dirty_limit,
            self.dirty_background,
            self.folio_max,
            self.folio_max.min(MIB),
        )
    }

    /// Enough sequential writes to pass the limit several times over.
    fn nr_writes(&self) -> usize {
        ((4 * self.dirty_limit) as usize).div_ceil(self.write_len).clamp(8, 64)
    }
}

/// The grid: each limit with a background threshold at its default (half),
/// at zero, at the limit minus one block, and just below the room a waiting
/// writer asks for (`limit - min(write, folio_max, limit / 4)`), the
/// reported reproductions among them.
fn grid() -> Vec<Case> {
    let mut cases = Vec::new();
    for (dirty_limit, folio_max) in
        [(40 * KIB, 16 * KIB), (256 * KIB, 64 * KIB), (4 * MIB, 256 * KIB), (16 * MIB, 4 * MIB)]
    {
        for write_len in [4 * KIB as usize, 64 * KIB as usize, 3 * MIB as usize] {
            let room = (write_len as u64).min(folio_max).min(dirty_limit / 4);
            let backgrounds = [dirty_limit / 2, 0, dirty_limit - 4 * KIB, (dirty_limit - room).saturating_sub(1)];
            for dirty_background in backgrounds {
                cases.push(Case { dirty_limit, dirty_background, folio_max, write_len });
            }
        }
    }
    cases
}

/// Writes `case.nr_writes()` sequential writes to a new file, then checks
/// the reasons the flusher wrote for and that every byte reaches the store.
/// Returns what the file should hold.
fn run_case(cache: &Cache, path: &Path, case: Case, seed: u64) -> Vec<u8> {
    let f = cache.open(path, &OpenOptions::read_write_create()).unwrap();
    let mut rng = Rng::new(seed);
    let mut want = vec![0u8; case.write_len * case.nr_writes()];
    rng.fill(&mut want);
    for (i, chunk) in want.chunks(case.write_len).enumerate() {
        let n = f.write_at(chunk, (i * case.write_len) as u64).unwrap();
        assert_eq!(n, chunk.len(), "{case:?}: write {i} was short");
    }
    let stats = cache.stats();
    let written = |s: &wbcache::Stats, r: Reason| s.written_bytes_by_reason[r as usize];
    assert_eq!(written(&stats, Reason::Periodic), 0, "{case:?}: periodic writeback ran (expire is an hour)");
    if stats.throttle_events > 0 {
        // A throttled writer kicked background writeback; a pause may end
        // by time before any of it completes (bytes are counted at
        // completion), so wait for it. Only a hang fails here.
        let background = wait_until(Duration::from_secs(60), || written(&cache.stats(), Reason::Background) > 0);
        assert!(
            background,
            "{case:?}: writers waited {} times but nothing was written back for them: {stats:?}",
            stats.throttle_events
        );
    }
    assert_eq!(written(&cache.stats(), Reason::Periodic), 0, "{case:?}: periodic writeback ran");
    assert!(
        stats.peak_dirty_bytes <= case.dirty_limit,
        "{case:?}: dirty peaked at {} over the limit",
        stats.peak_dirty_bytes
    );
    f.sync_all().unwrap();
    want
}

#[test]
fn writers_at_the_limit_never_wait_for_periodic_writeback_sim() {
    with_timeout(Duration::from_secs(120), || {
        for (n, case) in grid().into_iter().enumerate() {
            let seed = 0x7417_0000 + n as u64;
            let sim = Arc::new(SimIo::new(SimConfig { seed, latency_us_max: 50, ..SimConfig::default() }));
            let cache = Cache::with_sim(Config::from_options(&case.options()).unwrap(), sim.clone())
                .unwrap_or_else(|e| panic!("{case:?}: {e}"));
            let path = Path::new("/seq");
            let want = run_case(&cache, path, case, seed);
            assert_same(&sim.durable_image(path).unwrap(), &want, &format!("{case:?} (seed {seed:#x}): store"));
            cache.close().unwrap();
        }
    });
}

#[test]
fn writers_at_the_limit_never_wait_for_periodic_writeback_real_file() {
    let dir = std::env::temp_dir().join(format!("wbcache-dirty-throttle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let for_body = dir.clone();
    with_timeout(Duration::from_secs(120), move || {
        // The reported reproductions and their neighbours, on io_uring (or
        // its fallback) over this machine's file system.
        let cases = grid()
            .into_iter()
            .filter(|c| c.dirty_background >= c.dirty_limit / 2 && (c.write_len as u64) <= c.dirty_limit * 4);
        for (n, case) in cases.enumerate() {
            let cache = Cache::new(Config::from_options(&format!("{},io=uring", case.options())).unwrap()).unwrap();
            let path = for_body.join(format!("seq-{n}"));
            let want = run_case(&cache, &path, case, n as u64);
            cache.close().unwrap();
            assert_same(&std::fs::read(&path).unwrap(), &want, &format!("{case:?}: backing file"));
            std::fs::remove_file(&path).unwrap();
        }
    });
    std::fs::remove_dir_all(&dir).unwrap();
}
