//! Writeback: per-device domains with their dirty accounting and dirty inode
//! lists ([`domain`]), and the flusher thread that drains them ([`flusher`]).
//!
//! Writeback of an inode's data (collecting dirty blocks, building I/Os,
//! completing them) lives with the inode; this module decides *when* and
//! *which* inodes are written, and why.

pub mod domain;
pub mod flusher;
pub mod inflight;
