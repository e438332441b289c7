//! How a run of `wbcache bench` stops early: SIGINT or SIGTERM, or its
//! output closed under it (`bench | head`), which stops it as SIGPIPE
//! would, found when a table is written or polled for between two. Either
//! sets [`INTERRUPTED`], which the measurements, the worker's wait and
//! the laying out of files check; the run then ends with 128 + the signal
//! ([`interrupted_by`]). The flags are the process's: one run per process.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::progress::Progress;

/// Set once the run is to stop: what is running ends, nothing new starts.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The signal that interrupted the run (its exit status is 128 + it).
static INTERRUPTED_BY: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    INTERRUPTED_BY.store(sig, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn install_signal_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int);
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

/// Prints a table. When nobody reads the output any more (`bench | head`),
/// the run stops as if interrupted: the rest would be measured for nobody.
pub fn print_stdout(progress: &mut Progress, text: &str) {
    progress.clear();
    let mut out = io::stdout().lock();
    let written = writeln!(out, "{text}").and_then(|()| out.flush());
    if written.is_err_and(|e| e.kind() == io::ErrorKind::BrokenPipe) {
        stop_for_closed_output();
    }
}

fn stop_for_closed_output() {
    INTERRUPTED_BY.store(libc::SIGPIPE, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Stops the run as [`print_stdout`] does when stdout is a pipe nobody
/// reads any more, found without writing: between two tables (a
/// measurement can take minutes) the run notices too.
pub fn stop_if_output_closed() {
    let mut fd = libc::pollfd { fd: libc::STDOUT_FILENO, events: 0, revents: 0 };
    // SAFETY: poll(2) of one descriptor, without waiting, on a pollfd this
    // function owns; POLLERR is reported without being asked.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    if ready > 0 && fd.revents & libc::POLLERR != 0 {
        stop_for_closed_output();
    }
}

/// The signal that interrupted the run, if one did.
pub fn interrupted_by() -> Option<i32> {
    INTERRUPTED.load(Ordering::SeqCst).then(|| INTERRUPTED_BY.load(Ordering::SeqCst))
}
