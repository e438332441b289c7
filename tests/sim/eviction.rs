//! Memory bounds and scan resistance, through the sim backend.

use std::sync::Arc;

use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, OpenOptions};

fn cache(options: &str) -> (Cache, Arc<SimIo>) {
    let sim = Arc::new(SimIo::new(SimConfig::default()));
    (Cache::with_sim(Config::from_options(options).unwrap(), sim.clone()).unwrap(), sim)
}

fn fill_file(cache: &Cache, path: &str, len: usize) {
    let f = cache.open(path, &OpenOptions::read_write_create()).unwrap();
    let data: Vec<u8> = (0..len).map(|i| (i % 241) as u8).collect();
    f.write_at(&data, 0).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn one_pass_scan_does_not_evict_a_hot_set() {
    let (cache, _sim) = cache("capacity=16M,folio_max=64K,expire_ms=100000");
    fill_file(&cache, "/hot", 4 << 20);
    fill_file(&cache, "/scan", 64 << 20);
    let hot = cache.open("/hot", &OpenOptions::new().read(true)).unwrap();
    let scan = cache.open("/scan", &OpenOptions::new().read(true)).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let read_hot = |buf: &mut [u8]| {
        for off in (0..4u64 << 20).step_by(64 << 10) {
            hot.read_at(buf, off).unwrap();
        }
    };
    // Warm the hot set: it is re-read, so it earns its place in main.
    for _ in 0..3 {
        read_hot(&mut buf);
    }
    // A scan four times the cache, interleaved with the hot set's reuse.
    for (i, off) in (0..64u64 << 20).step_by(64 << 10).enumerate() {
        scan.read_at(&mut buf, off).unwrap();
        if i % 64 == 63 {
            read_hot(&mut buf);
        }
    }
    let before = cache.stats();
    read_hot(&mut buf);
    let after = cache.stats();
    let misses = after.misses - before.misses;
    let reads = (after.hits + after.misses) - (before.hits + before.misses);
    assert_eq!(reads, 64);
    assert!(misses <= 2, "hot set evicted by a scan: {misses} of {reads} reads missed");
    assert!(after.cached_bytes <= 16 << 20, "capacity exceeded: {}", after.cached_bytes);
    assert!(after.evictions > 0, "the scan must have evicted something");
}

#[test]
fn folio_memory_stays_under_capacity_while_writing_and_reading() {
    let (cache, _sim) = cache("capacity=8M,dirty_limit=2M,dirty_background=1M,folio_max=256K,expire_ms=50");
    let f = cache.open("/big", &OpenOptions::read_write_create()).unwrap();
    let chunk = vec![0x5au8; 300_000];
    let mut peak_cached = 0;
    let mut peak_dirty = 0;
    for i in 0..200u64 {
        f.write_at(&chunk, i * 300_000).unwrap();
        let st = cache.stats();
        peak_cached = peak_cached.max(st.cached_bytes);
        peak_dirty = peak_dirty.max(st.dirty_bytes);
    }
    let mut back = vec![0u8; 300_000];
    for i in (0..200u64).rev() {
        f.read_at(&mut back, i * 300_000).unwrap();
        assert!(back == chunk, "chunk {i}");
        peak_cached = peak_cached.max(cache.stats().cached_bytes);
    }
    let st = cache.stats();
    assert!(peak_cached <= 8 << 20, "cached {peak_cached} > capacity");
    assert!(peak_dirty <= 2 << 20, "dirty {peak_dirty} > dirty_limit");
    assert!(st.peak_dirty_bytes <= 2 << 20, "peak dirty {} > dirty_limit", st.peak_dirty_bytes);
    assert!(st.evictions > 0);
    assert!(st.throttle_events > 0, "a writer 7x over the dirty limit must be throttled");
}

#[test]
fn metadata_is_under_one_percent_for_large_folios() {
    let (cache, _sim) = cache("capacity=64M,folio_max=2M");
    let f = cache.open("/m", &OpenOptions::read_write_create()).unwrap();
    f.write_at(&vec![1u8; 32 << 20], 0).unwrap();
    let st = cache.stats();
    assert!(st.cached_bytes >= 32 << 20);
    assert!(st.metadata_bytes * 100 <= st.cached_bytes, "metadata {} of {}", st.metadata_bytes, st.cached_bytes);
}

#[test]
fn uncached_reads_read_ahead_and_drop_behind() {
    let (cache, sim) = cache("capacity=64M,folio_max=256K");
    let data: Vec<u8> = (0..(48usize << 20)).map(|i| (i % 253) as u8).collect();
    {
        let f = cache.open("/u", &OpenOptions::read_write_create()).unwrap();
        f.write_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        f.set_len(data.len() as u64).unwrap();
    }
    // A fresh cache so nothing of the file is cached.
    drop(cache);
    let cache = Cache::with_sim(Config::from_options("capacity=64M,folio_max=256K").unwrap(), sim.clone()).unwrap();
    let f = cache.open("/u", &OpenOptions::new().read(true)).unwrap();
    let mut buf = vec![0u8; 128 << 10];
    let mut peak_cached = 0;
    for (i, off) in (0..data.len() as u64).step_by(buf.len()).enumerate() {
        let n = f.read_at_with(&mut buf, off, wbcache::WriteFlags::DONTCACHE).unwrap();
        assert_eq!(n, buf.len());
        assert!(buf[..] == data[off as usize..off as usize + n], "chunk {i}");
        peak_cached = peak_cached.max(cache.stats().cached_bytes);
    }
    let st = cache.stats();
    assert!(st.readahead_bytes > 0, "uncached reads still read ahead");
    // At most three readahead windows (capacity/8 each) hold data at once:
    // the one being copied, the next, and the one being filled; plus what
    // waits for the drop-behind reaper (a batch of 8 MiB, and what comes
    // while it is being woken); never the whole file.
    assert!(peak_cached <= (40 << 20), "peak cached {peak_cached} for a 48 MiB uncached read");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(cache.stats().cached_bytes <= 4 << 20, "left cached: {}", cache.stats().cached_bytes);
}

#[test]
fn copies_of_folios_under_writeback_count_against_capacity() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 3, latency_us_max: 2000, ..SimConfig::default() }));
    let cache = Cache::with_sim(Config::from_options("capacity=8M,dirty_limit=6M,folio_max=2M").unwrap(), sim).unwrap();
    let f = Arc::new(cache.open("/cow", &OpenOptions::read_write_create()).unwrap());
    let mut reference = vec![0u8; 6 << 20];
    f.write_at(&reference, 0).unwrap();
    let syncer = {
        let f = f.clone();
        std::thread::spawn(move || {
            for _ in 0..40 {
                f.sync_data().unwrap();
            }
        })
    };
    let mut peak_cached = 0;
    let mut x = 7u64;
    while !syncer.is_finished() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % ((6 << 20) - 1024)) as usize;
        let byte = (x >> 40) as u8;
        f.write_at(&[byte; 1024], off as u64).unwrap();
        reference[off..off + 1024].fill(byte);
        peak_cached = peak_cached.max(cache.stats().cached_bytes);
    }
    syncer.join().unwrap();
    let st = cache.stats();
    assert!(st.cow_copies > 0, "writes raced writeback, so some folios were copied");
    assert!(peak_cached > 6 << 20, "copies in flight are counted (peak {peak_cached})");
    assert!(peak_cached <= 8 << 20, "cached {peak_cached} > capacity with copies counted");
    f.sync_all().unwrap();
    let mut back = vec![0u8; reference.len()];
    f.read_at(&mut back, 0).unwrap();
    assert!(back == reference);
    // Every copy's old buffer was given back: only the three 2 MiB folios remain.
    assert_eq!(cache.stats().cached_bytes, 6 << 20);
}
