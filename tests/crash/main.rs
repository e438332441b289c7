//! The crash tier: real processes killed with `SIGKILL`, their files then
//! read with `std::fs` (the kernel's view, without wbcache), and the guardian
//! process's life.
//!
//! `guardian` counts the guardian processes of this process, which a cache
//! opened here by another test would change: the other tests of this binary
//! open their caches in the child processes they kill, never here.

#[path = "../common/mod.rs"]
mod common;

mod crash;
mod guardian;
