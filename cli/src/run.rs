//! `wbcache run [--paths DIR[:DIR...]] [--set KEY=VALUE...] [--stats
//! FILE] -- PROGRAM ARGS...`: runs an unmodified program with `libwbcache_preload.so`
//! preloaded, so its regular files and block devices under the given
//! directories go through one process-wide wbcache. The settings travel
//! as `WBCACHE_PATHS`, `WBCACHE_OPTIONS` and `WBCACHE_STATS`, which people who set
//! `LD_PRELOAD` themselves set the same way.
//!
//! Everything is checked before the program starts (the library exists,
//! every directory exists, every option is known and valid), so a bad
//! input is one line and exit status 2, never a program run uncached.
//! The program's exit status is `run`'s. The library is found as the
//! bench finds it ([`crate::preload_library`]).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use clap::Args;
use wbcache::Config;

use crate::preload_library::{library, preload_list};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Directories whose regular files and block devices go through the
    /// cache, colon separated (default: the current directory). Everything
    /// else the program touches is left to the kernel.
    #[arg(long, value_name = "DIR[:DIR...]")]
    pub paths: Option<OsString>,
    /// A wbcache option (the C ABI's keys), repeatable: --set capacity=1G
    /// --set dirty_limit=256M.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Append the cache's statistics (JSON, one line per process that
    /// cached anything) to FILE when the program exits.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// The program and its arguments, after `--`.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM")]
    pub program: Vec<OsString>,
}

/// The managed directories, each checked and made absolute.
fn directories(paths: Option<&OsString>) -> Result<OsString, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?;
    let given: Vec<PathBuf> = match paths {
        Some(list) => std::env::split_paths(list).filter(|p| !p.as_os_str().is_empty()).collect(),
        None => vec![cwd.clone()],
    };
    if given.is_empty() {
        return Err("--paths names no directory".to_string());
    }
    let mut checked = Vec::new();
    for dir in given {
        let absolute = if dir.is_absolute() { dir } else { cwd.join(dir) };
        match std::fs::metadata(&absolute) {
            Ok(m) if m.is_dir() => checked.push(std::fs::canonicalize(&absolute).unwrap_or(absolute)),
            Ok(_) => return Err(format!("--paths: {} is not a directory", absolute.display())),
            Err(e) => return Err(format!("--paths: {}: {e}", absolute.display())),
        }
    }
    std::env::join_paths(checked).map_err(|e| format!("--paths: {e}"))
}

/// `--stats FILE`: its directory must exist (the file is appended to at
/// the program's exit, too late to say so).
fn stats_file(file: Option<&Path>) -> Result<(), String> {
    let Some(file) = file else { return Ok(()) };
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if dir.is_dir() {
        Ok(())
    } else {
        Err(format!("--stats {}: no directory {}", file.display(), dir.display()))
    }
}

/// The options as one string, checked by the library's own parser.
fn options(set: &[String]) -> Result<String, String> {
    let joined = set.join(",");
    Config::from_options(&joined).map_err(|e| format!("--set: {e}"))?;
    Ok(joined)
}

/// Runs the program; returns its exit status (2 for bad input, 127 when
/// it cannot be started).
pub fn run(args: RunArgs) -> i32 {
    let checked = library().and_then(|lib| {
        stats_file(args.stats.as_deref())?;
        Ok((lib, directories(args.paths.as_ref())?, options(&args.set)?))
    });
    let (lib, dirs, opts) = match checked {
        Ok(all) => all,
        Err(message) => {
            eprintln!("wbcache run: {message}");
            return 2;
        }
    };
    let (program, rest) = args.program.split_first().expect("clap requires the program");
    let mut command = std::process::Command::new(program);
    command.args(rest).env("WBCACHE_PATHS", &dirs).env("WBCACHE_OPTIONS", &opts);
    command.env("LD_PRELOAD", preload_list(&lib));
    if let Some(stats) = &args.stats {
        command.env("WBCACHE_STATS", stats);
    }
    // exec: the program takes this process's place (its pid, its signals).
    let error = command.exec();
    eprintln!("wbcache run: {}: {error}", Path::new(program).display());
    127
}
