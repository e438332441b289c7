//! The C ABI's tests: from C (`from_c`), fuzzed inputs (`fuzz`) and
//! exhausted resources (`resources`).
//!
//! What belongs to the whole process stays out of the way of the tests beside
//! it: `resources` sets its resource limits and arms the allocation hook
//! (`AlignedBuf::fail_next_allocations`) only in child processes, each this
//! binary run again for that one test (`--exact`), and `fuzz`'s panic count,
//! which counts every panic of the process, runs one fuzzer at a time; the
//! other tests here panic only when they fail.

#[path = "../../../tests/common/mod.rs"]
mod common;

mod from_c;
mod fuzz;
mod resources;
