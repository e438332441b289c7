//! The process's cache over the process's life: its start, its end, its
//! replacement, and its children:
//! - the state (`state.rs`) is built by the first call that names a path
//!   ([`state()`], never before: a program that touches no managed path
//!   pays for nothing), and that build registers this module's hooks: an
//!   `atexit` handler and `pthread_atfork`'s before-fork and child hooks;
//! - at normal exit (`exit`, a return from `main`) the handler flushes
//!   the cookie streams (`streams.rs`) through the cache, then writes
//!   back and syncs what the cache holds, appends its statistics where
//!   `WBCACHE_STATS` asks (`stats.rs`) and closes it; `_exit` and `_Exit`
//!   (which skip `atexit` handlers) do the same, less the flush;
//! - before a `fork` every open managed file goes to the kernel
//!   (`handover.rs`), and in the child the guard stays shut (`guard.rs`),
//!   the watcher's group and the lock registries' copies are closed;
//! - the `exec` calls that name a path or search `PATH` (`execve`,
//!   `execv`, `execvp`, `execvpe`) and `posix_spawn`/`posix_spawnp` hand
//!   every open managed file to the kernel first (`handover.rs`: the new
//!   program, or the spawned one, inherits the descriptions and uses them
//!   through the kernel); the cache stays, for an `exec` that fails, and
//!   caches the files opened after it;
//! - `vfork` is a `fork`: a `vfork` child shares the parent's memory, and
//!   the cache in it must not be touched from the child (`fork` runs the
//!   hooks that hand the open files to the kernel in the parent and keep
//!   the child off the cache).
//!
//! What no library can save is documented beside the kernel's behaviour
//! in docs/run.md: a process killed by a signal loses the data it did not
//! fsync and the cache had not written back.
//!
//! Ownership: the state is `state.rs`'s; this module decides when the
//! cache closes and when the files go to the kernel, and is the one
//! builder of the state ([`state()`]): a call that may be the first to name
//! a managed path gets the state through it, every other through
//! `state::built`.

use libc::{c_char, c_int, pid_t};

use crate::state::{self, State};
use crate::{guard, handover, real, stats, streams, table, watch};

/// The process's state, built on the first call that names a path, with
/// the exit and fork hooks registered by that build; `None` when
/// nothing is managed.
pub fn state() -> Option<&'static State> {
    state::get(register_hooks)
}

/// Registers the hooks below: once, when the state is built.
fn register_hooks() {
    // SAFETY: registering plain functions to run at exit and around fork.
    unsafe {
        libc::atexit(write_back_at_exit);
        libc::pthread_atfork(Some(hand_over_before_fork), None, Some(forked_child));
    }
}

/// Writes back and syncs what the cache holds, then closes it: at normal
/// exit (`exit`, a return from `main`) and before `_exit`. Later calls
/// find no managed descriptor and go to the kernel.
fn write_back_and_close() {
    let Some(state) = state::built() else { return };
    if let Some(cache) = state.take_cache() {
        // A process that opened no managed file (a shell, a helper the
        // program ran) has no statistics to leave.
        if state.opened_any() {
            stats::record_at_exit(&cache);
        }
        if let Err(e) = cache.close() {
            state::complain(&format!("writing back at exit failed: {e}"));
        }
    }
    // What the program does after this (later atexit handlers, destructors)
    // goes to the kernel, which now holds every byte: the descriptors stop
    // being managed, where their descriptions stood.
    for (fd, desc) in table::entries() {
        table::align_kernel_descriptor(fd, &desc);
        table::remove(fd);
    }
}

/// Every open managed file to the kernel (`handover.rs`): before a
/// `fork`, whose child uses the descriptions it inherits through the
/// kernel, and before an `exec` or a spawn, whose program does.
fn hand_over_open_files() {
    if let Err(e) = handover::hand_over(None) {
        state::complain(&format!("a file stays cached, its data not written back: {e}"));
    }
}

extern "C" fn hand_over_before_fork() {
    let Some(_inside) = guard::enter() else { return };
    hand_over_open_files();
}

extern "C" fn forked_child() {
    guard::mark_forked_child();
    watch::forget_in_child();
    if let Some(state) = state::built() {
        state.close_registries_in_child();
    }
}

extern "C" fn write_back_at_exit() {
    // Not in a forked child (its parent's cache is not its own), nor
    // inside a call of this library.
    let Some(inside) = guard::enter() else { return };
    // The streams' buffered bytes go through the cache before it closes
    // (outside the guard: their writes are this library's calls).
    drop(inside);
    streams::flush_at_exit();
    let Some(_inside) = guard::enter() else { return };
    write_back_and_close();
}

fn before_the_end() {
    if let Some(_inside) = guard::enter() {
        write_back_and_close();
    }
}

fn before_another_program() {
    if let Some(_inside) = guard::enter() {
        hand_over_open_files();
    }
}

#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    before_the_end();
    // SAFETY: passed on; it does not return.
    unsafe { real::_exit(status) };
    unreachable!("_exit returned")
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    before_the_end();
    // SAFETY: passed on; it does not return.
    unsafe { real::_Exit(status) };
    unreachable!("_Exit returned")
}

#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    before_another_program();
    // SAFETY: passed on.
    unsafe { real::execve(path, argv, envp) }
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    before_another_program();
    // SAFETY: passed on.
    unsafe { real::execv(path, argv) }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    before_another_program();
    // SAFETY: passed on.
    unsafe { real::execvp(file, argv) }
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    before_another_program();
    // SAFETY: passed on.
    unsafe { real::execvpe(file, argv, envp) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attrs: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    before_another_program();
    // SAFETY: passed on.
    unsafe { real::posix_spawn(pid, path, actions, attrs, argv, envp) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attrs: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    before_another_program();
    // SAFETY: passed on.
    unsafe { real::posix_spawnp(pid, file, actions, attrs, argv, envp) }
}

#[no_mangle]
pub unsafe extern "C" fn vfork() -> pid_t {
    // SAFETY: fork is a valid vfork (the child may do more than vfork's
    // child may, never less).
    unsafe { libc::fork() }
}
