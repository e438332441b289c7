//! Tests that need the machine or the process to themselves, one at a
//! time, each taking [`one_at_a_time`]: `soak` measures the whole
//! process (its resident memory, threads and descriptors), and
//! `device_priority` saturates a loop device with a reader, which shares
//! the disk and the CPUs with whatever runs beside it. Each had a binary
//! of its own before; one binary that runs them in turn keeps that.

use std::sync::{Mutex, MutexGuard, PoisonError};

#[path = "../common/mod.rs"]
mod common;

mod device_priority;
mod soak;

/// Held by each test of this binary for its whole run.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}
