//! How every exported function answers: its body runs in [`guard`], which
//! turns `Ok(n)` into `n`, a [`Failure`] into `-errno` and a panic into
//! `-EIO`, so no error and no unwind crosses the ABI. A failure's message
//! is kept per thread ([`LAST_ERROR`]) until the next failure on that
//! thread; successful calls leave it alone. `wbc_last_error` reads it.

use std::cell::RefCell;
use std::ffi::c_int;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use wbcache::errno_of;

thread_local! {
    /// Message of the last failed call on this thread, for
    /// [`wbc_last_error`](super::wbc_last_error).
    pub(super) static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A failed call: the errno it returns (positive) and the message kept for
/// [`wbc_last_error`](super::wbc_last_error).
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) errno: i32,
    pub(super) message: String,
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure { errno: errno_of(&e), message: e.to_string() }
    }
}

impl Failure {
    /// A failed call on `path`: the error's errno, and a message that
    /// names the path (the Rust API's errors leave it out, as std's do).
    pub(super) fn on_path(path: &Path, e: io::Error) -> Failure {
        Failure { errno: errno_of(&e), message: format!("{}: {e}", path.display()) }
    }
}

pub(super) fn einval(message: &str) -> Failure {
    Failure { errno: libc::EINVAL, message: message.to_string() }
}

fn set_last_error(function: &str, message: &str) {
    // `try_with`: a call made while this thread's locals are being destroyed
    // just loses its message.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut s) = slot.try_borrow_mut() {
            s.clear();
            s.push_str(function);
            s.push_str(": ");
            s.push_str(message);
        }
    });
}

/// Runs the body of an exported function: `Ok(n)` becomes `n`, an error
/// `-errno`, a panic `-EIO`; failures are recorded for
/// [`wbc_last_error`](super::wbc_last_error).
pub(super) fn guard(function: &str, body: impl FnOnce() -> Result<i64, Failure>) -> i64 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(n)) => n,
        Ok(Err(failure)) => {
            set_last_error(function, &failure.message);
            -i64::from(failure.errno)
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("unknown panic");
            set_last_error(function, &format!("internal panic: {what}"));
            // Dropping the payload could itself panic; leak it instead.
            std::mem::forget(payload);
            -i64::from(libc::EIO)
        }
    }
}

/// [`guard`] for the functions that return `int` (0 or `-errno`).
pub(super) fn guard_int(function: &str, body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    // 0 or -errno; every errno fits in an int.
    guard(function, || body().map(|()| 0)) as c_int
}
