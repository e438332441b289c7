//! Failing the C way: `errno` set, the call's error value returned.

use std::io;

/// A C call's error value.
pub trait MinusOne {
    const MINUS_ONE: Self;
}

impl MinusOne for i32 {
    const MINUS_ONE: i32 = -1;
}

impl MinusOne for i64 {
    const MINUS_ONE: i64 = -1;
}

impl MinusOne for isize {
    const MINUS_ONE: isize = -1;
}

/// The errno `e` stands for (the library's mapping, `EIO` at worst).
pub fn code(e: &io::Error) -> i32 {
    wbcache::errno_of(e)
}

/// Sets `errno` to `e`'s and returns -1.
pub fn fail<T: MinusOne>(e: &io::Error) -> T {
    set(code(e));
    T::MINUS_ONE
}

/// Sets `errno` to `code` and returns -1.
pub fn fail_with<T: MinusOne>(code: i32) -> T {
    set(code);
    T::MINUS_ONE
}

pub fn set(code: i32) {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = code };
}

/// The calling thread's `errno`.
pub fn get() -> i32 {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}
