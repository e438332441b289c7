//! Every entry point the C library offers for a call the preload serves
//! is served: for each served call, each of its names that glibc exports
//! (the call, its `64` name, the fortified `__X_chk`, `__X_2` and their
//! `64` forms, the `__X` internal alias, and the pre-2.33 `stat`
//! entry points) must be exported by `libwbcache_preload.so` too. A
//! program that reached a missing one (a `_FORTIFY_SOURCE` build calls
//! `__pread_chk`) would read and write around the cache, unseen.
//!
//! Both lists come from `nm -D` of the two libraries: the C library is
//! the one this test process runs with (from `/proc/self/maps`).

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The calls the preload serves (docs/run.md's table), by their base names.
const SERVED: &[&str] = &[
    "open",
    "openat",
    "creat",
    "close",
    "close_range",
    "closefrom",
    "read",
    "write",
    "pread",
    "pwrite",
    "readv",
    "writev",
    "preadv",
    "pwritev",
    "preadv2",
    "pwritev2",
    "lseek",
    "fsync",
    "fdatasync",
    "syncfs",
    "sync",
    "ftruncate",
    "truncate",
    "fallocate",
    "posix_fallocate",
    "posix_fadvise",
    "readahead",
    "sync_file_range",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "stat",
    "lstat",
    "fstat",
    "fstatat",
    "statx",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "copy_file_range",
    "sendfile",
    "mmap",
    "fopen",
    "fdopen",
    "freopen",
    "fileno",
    "ioctl",
    "execve",
    "execv",
    "execvp",
    "execvpe",
    "posix_spawn",
    "posix_spawnp",
    "vfork",
    "_exit",
    "_Exit",
];

/// The `stat` entry points of programs built against glibc before 2.33.
const OLD_STAT: &[&str] =
    &["__xstat", "__xstat64", "__lxstat", "__lxstat64", "__fxstat", "__fxstat64", "__fxstatat", "__fxstatat64"];

/// Every name a served call may be reached by.
fn variants(base: &str) -> Vec<String> {
    let mut names = Vec::new();
    for name in [base.to_string(), format!("{base}64")] {
        names.push(format!("__{name}"));
        names.push(format!("__{name}_chk"));
        names.push(format!("__{name}_2"));
        names.push(name);
    }
    names
}

/// The functions `library` exports (defined text or weak symbols), by
/// name without their version.
fn exported_functions(library: &Path) -> BTreeSet<String> {
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(library).output().expect("nm (binutils) runs");
    assert!(out.status.success(), "nm -D {}: {}", library.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_address, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
            matches!(kind, "T" | "W" | "i").then(|| name.split('@').next().unwrap_or(name).to_string())
        })
        .collect()
}

/// The C library this process runs with.
fn c_library() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let path = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| Path::new(path).file_name().is_some_and(|name| name.to_string_lossy().starts_with("libc.so")))
        .expect("this process maps libc.so");
    PathBuf::from(path)
}

#[test]
fn every_glibc_name_of_a_served_call_is_served() {
    if common::tool("nm").is_none() {
        return;
    }
    let glibc = exported_functions(&c_library());
    let ours = exported_functions(&common::library());
    let wanted = SERVED.iter().flat_map(|base| variants(base)).chain(OLD_STAT.iter().map(|s| s.to_string()));
    let missing: Vec<String> = wanted.filter(|name| glibc.contains(name) && !ours.contains(name)).collect();
    assert!(missing.is_empty(), "glibc exports these names of served calls, the preload does not: {missing:?}");
    // The list is not vacuous: glibc has the fortified and old names.
    for name in ["__pread_chk", "__read_chk", "__open_2", "__fxstat64", "pread64"] {
        assert!(glibc.contains(name), "glibc exports no {name}: is this glibc?");
    }
}
