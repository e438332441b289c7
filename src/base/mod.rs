//! The bottom of the library, knowing nothing above it:
//!
//! - [`epoch`]: read sections without shared writes, and releases
//!   deferred until no section can see them (RCU-style).
//! - [`locks`]: poison-ignoring lock helpers and the lock order that debug
//!   builds check.
//! - [`sys`]: the system calls the engine makes directly (so a preloaded
//!   library interposing libc never sees them).
//!
//! Layering, top first: `epoch`, `locks`, `sys`.

pub mod epoch;
pub mod locks;
pub mod sys;
