//! C ABI (in progress)
