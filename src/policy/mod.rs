//! The cache's policies over the bytes it holds, each usable by the inode
//! above it without knowing who acts on them:
//!
//! - [`route`]: which writeback worker writes which inode or region, as
//!   pure functions (a pass takes a worker's share of an inode by it).
//! - [`throttle`]: delaying writers over the dirty thresholds.
//! - [`dropbehind`]: freeing uncached I/O's clean folios behind it.
//! - [`memory`]: capacity accounting, and eviction back under it.
//! - [`dirty`]: the dirty and writeback gauges, writers' dirty room, sync
//!   waiters, the flushers' work bits, the writeback bandwidth and the
//!   progress signal.
//! - [`evict`]: the S3-FIFO queues of clean folios.
//! - [`background_budget`]: background writeback's I/O size, halved while
//!   foreground syncs miss their latency target.
//!
//! Layering inside the folder, top first: `route`, `throttle` and
//! `dropbehind`; `memory`; `dirty` and `evict`; `background_budget`. Each
//! policy owns its own state (gauges, queues, budgets); the inodes and
//! folios it counts or frees belong to the layers that hold them.

pub mod background_budget;
pub mod dirty;
pub mod dropbehind;
pub mod evict;
pub mod memory;
pub mod route;
pub mod throttle;
