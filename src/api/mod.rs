//! The Rust API a program calls: [`cache::Cache`] (builds the shared state,
//! opens files, closes everything), [`file`](mod@file) (a handle's reads, writes,
//! syncs and options) and, beneath both, [`shared`] (what a cache and its
//! files share: the inode table, the writeback domains, the worker
//! threads), with [`watch`] (the board other processes read the cache's
//! figures from) below it.
//!
//! Everything else in the crate serves this layer and none of it imports
//! it: the caches and files here own the inodes, domains and threads below,
//! and a handle reaches an inode only through the shared state that keeps
//! both alive.

pub mod cache;
pub mod file;
pub mod shared;
pub mod watch;
