//! The process's end and its replacement: `_exit` and `_Exit` (which skip
//! `atexit` handlers) and the `exec` calls that name a path or search
//! `PATH` (`execve`, `execv`, `execvp`, `execvpe`) write back and sync
//! what the cache holds first, as normal exit does through its `atexit`
//! handler. What no library can save is documented beside the kernel's
//! behaviour in the README: a process killed by a signal loses the data it
//! did not fsync.

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
