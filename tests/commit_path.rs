//! The commit path: what one `write_at` + `sync_data` costs in calls to
//! the backing store, through the `sim` backend. A commit that overwrites
//! data inside the file asks the store nothing but the write and the sync:
//! no length query (`fstat`), whose only effect on Linux 6.13+ is to make
//! the next write update the file's ctime (multigrain timestamps), a
//! journal update per commit.

use std::path::Path;
use std::sync::Arc;

use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, OpenOptions};

const DB: &str = "/db";

fn cache(sim: &Arc<SimIo>) -> Cache {
    Cache::with_sim(Config::from_options("capacity=16M,dirty_limit=4M,expire_ms=600000").unwrap(), sim.clone()).unwrap()
}

#[test]
fn overwrite_commits_do_not_query_the_store_length() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 1, ..SimConfig::default() }));
    let cache = cache(&sim);
    let file = cache.open(DB, &OpenOptions::read_write_create()).unwrap();
    // A file whose size is not a whole number of blocks: its tail block
    // is padded by O_DIRECT writeback and cut by the first sync.
    file.write_at(&vec![1u8; 64 * 1024 + 100], 0).unwrap();
    file.sync_data().unwrap();
    assert_eq!(sim.durable_image(Path::new(DB)).unwrap().len(), 64 * 1024 + 100);
    let before = sim.stats();
    for i in 0..20u64 {
        file.write_at(&[i as u8; 4096], (i % 16) * 4096).unwrap();
        file.sync_data().unwrap();
    }
    let after = sim.stats();
    assert_eq!(after.syncs - before.syncs, 20, "one store sync per commit");
    assert_eq!(after.len_queries, before.len_queries, "no length query in an overwrite commit");
    // The tail block is written again (padded, then cut): the length is
    // looked at then, and the store keeps the logical size.
    file.write_at(b"tail", 64 * 1024 + 10).unwrap();
    file.sync_data().unwrap();
    let image = sim.durable_image(Path::new(DB)).unwrap();
    assert_eq!(image.len(), 64 * 1024 + 100);
    assert_eq!(&image[64 * 1024 + 10..64 * 1024 + 14], b"tail");
    assert_eq!(image[15 * 4096], 15);
    drop(file);
    cache.close().unwrap();
}
