//! The C library, `libwbcache.so` and `libwbcache.a`: the `wbc_*` functions
//! declared in `include/wbcache.h`. They are defined in the wbcache-capi
//! crate (capi/, where the tests call them too); this crate links them,
//! with the engine they call, into the two libraries, and its build script
//! names the shared library's SONAME and writes the pkg-config files
//! beside them.

pub use wbcache_capi::*;
