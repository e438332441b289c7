//! The real tier: the engine on this machine's file system and on block
//! devices (loop devices, as root), through io_uring and the thread pool.
//! Some modules run their checks through the simulated backend too, beside
//! the real one. Tests that need root skip without it, except under
//! `CI=true`, where they fail. One module per subject; docs/testing.md says
//! what each tier proves and how to run one.

#[path = "../common/mod.rs"]
mod common;

mod controls;
mod controls_races;
mod dirty_throttle;
mod names;
mod optimistic_reads;
mod real_faults;
mod real_io;
mod remove;
mod scan;
mod stream_dropbehind;
mod uncached;
