//! What a `sqlite` transactions job is told, as the worker's spec carries
//! it ([`SqliteJob`]): the journal mode to measure ([`Journal`]), the
//! accounts to load, with pgbench's shape of branches and tellers around
//! them, and the streaming writer's head start. The workload's file makes
//! it from a variant and the run's sizes; the database ([`super::db`])
//! loads and runs what it says. Plain data below both, naming neither.

use serde::{Deserialize, Serialize};

/// SQLite's journal modes the `sqlite` workload measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Journal {
    /// `journal_mode=WAL`: commits append to the write-ahead log.
    Wal,
    /// `journal_mode=DELETE`: SQLite's default rollback journal.
    Delete,
}

impl Journal {
    /// The `PRAGMA journal_mode` value (SQLite answers it in lower case).
    pub fn pragma(self) -> &'static str {
        match self {
            Journal::Wal => "wal",
            Journal::Delete => "delete",
        }
    }
}

/// pgbench's shape: accounts and tellers per branch.
pub const ACCOUNTS_PER_BRANCH: u64 = 100_000;
pub const TELLERS_PER_BRANCH: u64 = 10;

/// What a `sqlite` transactions job does: the database to load (its
/// target; SQLite's files next to it are the job's other targets, removed
/// with it), the journal mode to measure, and how far the streaming writer
/// gets ahead of the first transaction.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SqliteJob {
    pub journal: Journal,
    /// Accounts loaded (pgbench's `100,000 × scale`, here to reach the size).
    pub accounts: u64,
    /// The transactions start once the job with the
    /// [`STREAMER`](super::STREAMER) role has written this many bytes (0:
    /// no streaming writer).
    pub head_start: u64,
}

impl SqliteJob {
    /// pgbench's scale: branches, one per 100,000 accounts (the last one
    /// may have fewer).
    pub fn branches(&self) -> u64 {
        self.accounts.div_ceil(ACCOUNTS_PER_BRANCH).max(1)
    }

    pub fn tellers(&self) -> u64 {
        self.branches() * TELLERS_PER_BRANCH
    }
}
