//! wbcache from Rust: open a cache and a file, write through the cache, read
//! back, sync, print the cache's statistics.
//!
//! Run it as `cargo run --example quickstart [path]`; without a path it uses
//! a new file in the temporary directory and removes it at the end.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use wbcache::{Cache, Config, OpenOptions, WriteFlags};

fn main() -> ExitCode {
    // The message, not the Debug form `main() -> io::Result` would print.
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> io::Result<()> {
    let given = std::env::args_os().nth(1).map(PathBuf::from);
    let path = match &given {
        Some(path) => path.clone(),
        None => std::env::temp_dir().join(format!("wbcache-quickstart-{}.db", std::process::id())),
    };

    let cache = Cache::new(Config::from_options("capacity=256M,dirty_limit=64M")?)?;
    // As with std::fs, the error is the OS's (`raw_os_error()` is its
    // errno) and does not name the path: say which file it was.
    let file = cache
        .open(&path, &OpenOptions::read_write_create())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    file.write_at(b"hello", 4096)?; // into the cache, dirty
    file.write_at_with(b"log", 0, WriteFlags::DONTCACHE)?; // uncached: flushed off-path, dropped when clean
    let mut buf = [0u8; 5];
    file.read_at(&mut buf, 4096)?; // served from the cache
    println!("read back: {}", String::from_utf8_lossy(&buf));
    file.sync_data()?; // durable on return
    println!("{}", cache.stats().to_json());
    cache.close()?; // writes back and syncs everything

    if given.is_none() {
        std::fs::remove_file(&path)?;
    }
    Ok(())
}
