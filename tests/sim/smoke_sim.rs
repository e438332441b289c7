//! Quick end-to-end checks through the sim backend.
use std::path::Path;
use std::sync::Arc;
use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, OpenOptions};

#[test]
fn write_read_fsync_roundtrip() {
    let sim = Arc::new(SimIo::new(SimConfig::default()));
    let cache = Cache::with_sim(Config::from_options("capacity=64M").unwrap(), sim.clone()).unwrap();
    let f = cache.open("/a", &OpenOptions::read_write_create()).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(f.write_at(&data, 1000).unwrap(), data.len());
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(&mut back, 1000).unwrap(), data.len());
    assert_eq!(back, data);
    f.sync_all().unwrap();
    let img = sim.durable_image(Path::new("/a")).unwrap();
    assert_eq!(img.len(), 1000 + data.len());
    assert_eq!(&img[1000..], &data[..]);
    assert!(img[..1000].iter().all(|&b| b == 0));
    drop(f);
    cache.close().unwrap();
}

#[test]
fn public_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Cache>();
    check::<wbcache::File>();
    check::<wbcache::Stats>();
}
