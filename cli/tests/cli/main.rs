//! The command line's tests: `wbcache bench` run end to end as a user runs
//! it (a module per workload family, bad inputs and signals, first runs),
//! `wbcache install` / `uninstall`, `wbcache crashtest`, and `wbcache stat` /
//! `top` watching a running program. The helpers are in `../common/`.

#[path = "../common/mod.rs"]
mod common;

mod advice_bench;
mod bad_inputs;
mod crashtest;
mod first_runs;
mod fsync_under_load;
mod hot_set;
mod install;
mod parallel_writeback;
mod program_workloads;
mod rand_read_readers;
mod sqlite_bench;
mod stat;
