//! The SQLite VFS's tests: a database through rusqlite (`smoke`), the VFS
//! against SQLite's own statement by statement (`equivalence`), crashes and
//! the database lock with real processes (`crash`), and the loadable
//! extension in the system's `sqlite3` shell (`shell`). The helpers are in
//! `../common/`.

#[path = "../common/mod.rs"]
mod common;

mod crash;
mod equivalence;
mod shell;
mod smoke;
