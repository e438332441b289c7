//! Write streams on real files (`stream_dropbehind`): a handle writing at
//! consecutive offsets caches the first quarter of `capacity` of its
//! stream, then writes the rest as uncached writes (written back by the
//! flusher, dropped once clean), so the stream does not push other data
//! out of the cache; random writes, a stream with the option off, and
//! data read while the stream runs stay cached. Every byte is checked on
//! the store after the cache closes.

use crate::common;
use common::pattern;

use std::path::Path;
use std::time::Duration;

use common::programs::TempDir;
use common::{assert_same, wait_until, Rng};
use wbcache::{Cache, Config, File, OpenOptions};

const MIB: u64 = 1 << 20;
/// A quarter of it (4 MiB) is what a stream writes cached.
const SMALL: &str = "capacity=16M,dirty_limit=8M";

fn new_cache(options: &str) -> Cache {
    Cache::new(Config::from_options(options).expect("options")).expect("cache")
}

fn open(cache: &Cache, path: &Path) -> File {
    cache.open(path, &OpenOptions::read_write_create()).expect("open")
}

fn cached_bytes(f: &File) -> u64 {
    f.cached_ranges().expect("cached ranges").iter().map(|r| r.end - r.start).sum()
}

/// Writes `data` in 1 MiB writes at consecutive offsets from 0.
fn stream(f: &File, data: &[u8]) {
    for (i, chunk) in data.chunks(MIB as usize).enumerate() {
        f.write_at(chunk, i as u64 * MIB).expect("write");
    }
}

/// A 64 MiB stream through a 16 MiB cache, next to a 4 MiB hot file read
/// before and after: the stream's uncached part is counted as uncached
/// dirty data and dropped once written back, the hot file stays cached
/// whole, and every byte of both reaches the store.
#[test]
fn a_long_stream_drops_behind_and_leaves_the_hot_set_cached() {
    let dir = TempDir::new("stream-dropbehind");
    let cache = new_cache(SMALL);
    let hot_path = dir.0.join("hot.bin");
    let hot_data = pattern(4 * MIB as usize, 1);
    let hot = open(&cache, &hot_path);
    hot.write_at(&hot_data, 0).unwrap();
    hot.sync_data().unwrap();
    let mut buf = vec![0u8; hot_data.len()];
    hot.read_at(&mut buf, 0).unwrap();
    let stream_path = dir.0.join("stream.bin");
    let stream_data = pattern(64 * MIB as usize, 2);
    let s = open(&cache, &stream_path);
    stream(&s, &stream_data);
    s.sync_data().unwrap();
    let settled = wait_until(Duration::from_secs(10), || cached_bytes(&s) <= 6 * MIB);
    assert!(settled, "the stream left {} bytes cached in a 16 MiB cache", cached_bytes(&s));
    let counted = wait_until(Duration::from_secs(10), || cache.stats().dropbehind_freed_bytes >= 48 * MIB);
    assert!(counted, "{}", cache.stats().dropbehind_freed_bytes);
    assert_eq!(cached_bytes(&hot), hot_data.len() as u64, "the hot file stays cached");
    let hits_before = cache.stats().hits;
    hot.read_at(&mut buf, 0).unwrap();
    assert_same(&buf, &hot_data, "hot file");
    assert!(cache.stats().hits > hits_before, "the hot file is read from the cache");
    drop((hot, s));
    cache.close().unwrap();
    assert_same(&std::fs::read(&stream_path).unwrap(), &stream_data, "stream on the store");
    assert_same(&std::fs::read(&hot_path).unwrap(), &hot_data, "hot file on the store");
}

/// With `stream_dropbehind=off` the same stream stays cached as far as
/// the cache allows, and nothing is dropped behind it.
#[test]
fn with_the_option_off_a_stream_stays_cached() {
    let dir = TempDir::new("stream-cached");
    let cache = new_cache(&format!("{SMALL},stream_dropbehind=off"));
    let path = dir.0.join("stream.bin");
    let data = pattern(32 * MIB as usize, 3);
    let s = open(&cache, &path);
    stream(&s, &data);
    s.sync_data().unwrap();
    assert_eq!(cache.stats().dropbehind_freed_bytes, 0);
    assert!(cached_bytes(&s) > 8 * MIB, "{} bytes cached", cached_bytes(&s));
    drop(s);
    cache.close().unwrap();
    assert_same(&std::fs::read(&path).unwrap(), &data, "stream on the store");
}

/// Random 1 MiB writes over a 32 MiB file are no stream: nothing drops
/// behind. Nor does a stream that restarts before reaching its quarter:
/// each write at another offset starts a new count.
#[test]
fn random_writes_and_short_streams_stay_cached() {
    let dir = TempDir::new("stream-random");
    let cache = new_cache(SMALL);
    let path = dir.0.join("random.bin");
    let f = open(&cache, &path);
    let mut image = vec![0u8; 32 * MIB as usize];
    let mut rng = Rng::new(4);
    for i in 0..96u64 {
        let block = rng.below(32) as u64;
        let chunk = pattern(MIB as usize, 100 + i);
        f.write_at(&chunk, block * MIB).unwrap();
        image[(block * MIB) as usize..][..MIB as usize].copy_from_slice(&chunk);
        // Short streams of 3 MiB, each from a new offset.
        if i % 8 == 0 {
            let start = rng.below(29) as u64 * MIB;
            for k in 0..3 {
                let chunk = pattern(MIB as usize, 1000 + i * 3 + k);
                f.write_at(&chunk, start + k * MIB).unwrap();
                image[(start + k * MIB) as usize..][..MIB as usize].copy_from_slice(&chunk);
            }
        }
    }
    f.sync_data().unwrap();
    assert_eq!(cache.stats().dropbehind_freed_bytes, 0, "no write of these was uncached");
    drop(f);
    cache.close().unwrap();
    assert_same(&std::fs::read(&path).unwrap(), &image, "file on the store");
}
