//! The process's end and its replacement: `_exit` and `_Exit` (which skip
//! `atexit` handlers) and the `exec` calls that name a path or search
//! `PATH` (`execve`, `execv`, `execvp`, `execvpe`) write back and sync
//! what the cache holds first, as normal exit does through its `atexit`
//! handler. What no library can save is documented beside the kernel's
//! behaviour in the README: a process killed by a signal loses the data it
//! did not fsync.
//!
//! And new processes: `vfork` is a `fork` here. A vfork child shares its
//! parent's memory, the cache included, until it execs, and its `execve`
//! (interposed) would close the parent's cache under it (every later call
//! of the parent on a managed file failing with `EBADF`, its dirty data
//! lost); as a fork, the dirty data is written back first and the child
//! uses the kernel (POSIX lets `vfork` be `fork`: its child may only exec
//! or `_exit`). `posix_spawn` and `posix_spawnp`, whose child execs
//! inside the C library, write every managed file's dirty data back first,
//! so the new program reads what this one wrote.

use libc::{c_char, c_int};

use crate::{guard, real, state};

fn before_the_end() {
    if let Some(_inside) = guard::enter() {
        state::write_back_and_close();
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
    before_the_end();
    // SAFETY: passed on.
    unsafe { real::execve(path, argv, envp) }
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    before_the_end();
    // SAFETY: passed on.
    unsafe { real::execv(path, argv) }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    before_the_end();
    // SAFETY: passed on.
    unsafe { real::execvp(file, argv) }
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    before_the_end();
    // SAFETY: passed on.
    unsafe { real::execvpe(file, argv, envp) }
}

#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    // SAFETY: fork in place of vfork (see the module's doc); its handlers
    // (state.rs) write back before it and mark the child.
    unsafe { libc::fork() }
}

/// Before `posix_spawn(p)`: the dirty data to the kernel.
fn before_spawn() {
    if let Some(_inside) = guard::enter() {
        if state::built().is_some() {
            state::write_back_all("posix_spawn");
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    before_spawn();
    // SAFETY: passed on.
    unsafe { real::posix_spawn(pid, path, actions, attr, argv, envp) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    before_spawn();
    // SAFETY: passed on.
    unsafe { real::posix_spawnp(pid, file, actions, attr, argv, envp) }
}
