//! The preload library's tests: unmodified programs run with
//! `libwbcache_preload.so` and without it, and what they leave compared;
//! the helpers are in `../common/`, the C and Python programs in `../c/`,
//! `../py/` and `../stdio.c`.
//!
//! The tests run side by side, each with its own processes; `dev_shm`, which
//! looks at the locks every preloaded process takes under `/dev/shm`, runs
//! alone among them (`common::Claim`).

#[path = "../common/mod.rs"]
mod common;

mod coherence;
mod dev_shm;
mod differential;
mod exports;
mod fio_verify;
mod lifetime;
mod lock_registry;
mod process_crash;
mod programs;
mod python_calls;
mod rocksdb_db_bench;
mod shell_corpus;
mod sigkill;
mod sqlite_journal_modes;
mod stdio;
