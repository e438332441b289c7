//! Checks about the code and the docs: the layer order of every crate, the
//! links in the docs, what each shared library exports, the examples and the
//! README's code, and what a crate depending on wbcache builds.

#[path = "../common/mod.rs"]
mod common;

mod architecture;
mod consumer;
mod docs_links;
mod examples;
mod exports;
