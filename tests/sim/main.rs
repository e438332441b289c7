//! The simulated tier: the engine against reference models through its
//! simulated backend (`wbcache::sim`, `Cache::with_sim`), with seeded faults,
//! latency and a crash model of the machine and of the process. No test here
//! touches a real file or device, so the tier runs alike on every machine.
//! One module per subject; docs/testing.md says what each tier proves and how
//! to run one.

#[path = "../common/mod.rs"]
mod common;

mod bridging;
mod commit_path;
mod concurrency;
mod errors;
mod eviction;
mod foreground_reads;
mod fsync_boost;
mod model;
mod parallel_writeback;
mod process_crash_sim;
mod simulation;
mod smoke_sim;
mod truncate_races;
