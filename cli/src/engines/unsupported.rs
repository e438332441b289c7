//! The engines' refusal: an error that says "this engine cannot do this
//! here" (a flag the kernel refuses, an advice O_DIRECT cannot take, a
//! library not loaded), which the report shows as `unsupported` rather
//! than as a failure. Made only by [`unsupported`] and told apart only by
//! [`is_unsupported`], so the marker type is the one contract between the
//! engine that refuses and the report that says so.

use std::io;

/// Marks an error as "this engine cannot do this here" (the report's
/// `unsupported` status), as opposed to a failure.
#[derive(Debug)]
pub struct NotSupportedHere(pub String);

impl std::fmt::Display for NotSupportedHere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotSupportedHere {}

pub fn unsupported(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, NotSupportedHere(msg))
}

/// Whether `e` was made by [`unsupported`].
pub fn is_unsupported(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NotSupportedHere>())
}
