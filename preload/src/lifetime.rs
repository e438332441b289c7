//! The process's end, its replacement, and its children:
//! - `_exit` and `_Exit` (which skip `atexit` handlers) write back and sync
//!   what the cache holds and close it, as normal exit does through its
//!   `atexit` handler;
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

use libc::{c_char, c_int, pid_t};

use crate::{guard, real, state};

fn before_the_end() {
    if let Some(_inside) = guard::enter() {
        state::write_back_and_close();
    }
}

fn before_another_program() {
    if let Some(_inside) = guard::enter() {
        state::hand_over_open_files();
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
