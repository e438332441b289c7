//! stdio on managed files through `libwbcache_preload.so`. A C program
//! (`stdio.c`, compiled with `cc`) runs each scenario twice: without the
//! library, and under it with its directory managed. Both runs must
//! print the same, exit the same and leave the same files: without the
//! library the kernel keeps stdio and the descriptors coherent, so a
//! stream that bypassed the cache under it would read or leave other
//! bytes. The `probe` scenario then shows the bytes really are the
//! cache's: written and flushed through a stream, the kernel does not
//! have them until `fsync(fileno(fp))`.
//!
//! The library is the one cargo builds with the tests
//! (`target/<profile>/deps/libwbcache_preload.so`). Every program runs in its own
//! process group, killed whole when it outlives the timeout.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

const SOURCE: &str = include_str!("../stdio.c");

/// Long expiry and high thresholds: nothing is written back to the kernel
/// unless the program syncs or closes (what `probe` relies on).
const OPTIONS: &str = "capacity=64M,dirty_limit=32M,dirty_background=24M,expire_ms=600000";

const TIMEOUT: Duration = Duration::from_secs(120);

/// The preload library built with this test: the newer of
/// `target/<profile>/deps/libwbcache_preload.so` (what the test build
/// makes) and `target/<profile>/libwbcache_preload.so` (what `cargo
/// build` puts there).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let profile = deps.parent().expect("target/<profile>");
    [deps.join("libwbcache_preload.so"), profile.join("libwbcache_preload.so")]
        .into_iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).unwrap())
        .expect("cargo builds libwbcache_preload.so with the tests")
}

/// A directory of the test's own, removed when dropped, and the test's
/// claim to run preloaded processes (`common::Claim`), held until then.
struct Scratch(PathBuf, #[allow(dead_code)] crate::common::Claim);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("wbcache-preload-stdio-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir, crate::common::Claim::shared())
    }

    fn dir(&self, name: &str) -> PathBuf {
        let dir = self.0.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles `source` (file name `file`) with `compiler` into the scratch
/// directory; `None` when the compiler is not installed.
fn compile(compiler: &str, source: &str, file: &str, scratch: &Scratch, flags: &[&str]) -> Option<PathBuf> {
    let src = scratch.0.join(file);
    std::fs::write(&src, source).unwrap();
    let exe = src.with_extension("bin");
    let out = match Command::new(compiler).args(flags).arg("-o").arg(&exe).arg(&src).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("{compiler}: {e}"),
    };
    assert!(out.status.success(), "{compiler} {file}:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(exe)
}

fn c_program(scratch: &Scratch) -> PathBuf {
    compile("cc", SOURCE, "stdio.c", scratch, &["-O1", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .expect("cc (gcc) is needed for the stdio tests")
}

/// What a program did.
#[derive(Debug, PartialEq)]
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `program` with `args` in its own process group: plainly, or
/// under the library with `managed` as `WBCACHE_PATHS`.
fn run(program: &Path, args: &[&OsStr], managed: Option<&Path>, scratch: &Scratch, tag: &str) -> Run {
    let (out_path, err_path) = (scratch.0.join(format!("{tag}.out")), scratch.0.join(format!("{tag}.err")));
    let mut command = Command::new(program);
    command
        .args(args)
        .process_group(0)
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .env_remove("LD_PRELOAD")
        .env_remove("WBCACHE_PATHS")
        .env_remove("WBCACHE_OPTIONS");
    if let Some(dir) = managed {
        command.env("LD_PRELOAD", library()).env("WBCACHE_PATHS", dir).env("WBCACHE_OPTIONS", OPTIONS);
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            // SAFETY: signalling the child's own process group.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("{tag}: {} {args:?} still running after {TIMEOUT:?}", program.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let read = |path: &Path| String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
    Run { status, stdout: read(&out_path), stderr: read(&err_path) }
}

/// Every file in `dir` (not recursive) and its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (entry.file_name().to_string_lossy().into_owned(), std::fs::read(entry.path()).unwrap())
        })
        .collect()
}

/// Runs `program` with the arguments `args` makes for a fresh directory,
/// without the library and under it (that directory managed); returns
/// both runs after checking they left the same files.
fn both_ways(program: &Path, args: impl Fn(&Path) -> Vec<OsString>, scratch: &Scratch) -> (Run, Run) {
    let mut runs = Vec::new();
    for (tag, preload) in [("plain", false), ("cached", true)] {
        let dir = scratch.dir(tag);
        let args = args(&dir);
        let args: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
        runs.push(run(program, &args, preload.then_some(dir.as_path()), scratch, tag));
    }
    let (plain, cached) = (runs.remove(0), runs.remove(0));
    let name = program.display();
    assert!(plain.status.success(), "{name} without the library: {plain:?}");
    assert!(cached.status.success(), "{name} under the library: {cached:?}");
    let (plain_files, cached_files) = (files(&scratch.0.join("plain")), files(&scratch.0.join("cached")));
    assert_eq!(plain_files.keys().collect::<Vec<_>>(), cached_files.keys().collect::<Vec<_>>(), "the files left");
    for (file, bytes) in &plain_files {
        if bytes != &cached_files[file] {
            panic!(
                "{file} differs:\nwithout: {:?}\nunder:   {:?}",
                String::from_utf8_lossy(bytes),
                String::from_utf8_lossy(&cached_files[file])
            );
        }
    }
    (plain, cached)
}

/// `stdio.c`'s arguments for `scenario` in `dir`.
fn scenario_args(scenario: &str) -> impl Fn(&Path) -> Vec<OsString> + '_ {
    move |dir| vec![scenario.into(), dir.into()]
}

/// A scenario of `stdio.c` must run exactly as it does without the
/// library.
fn same_either_way(scenario: &str) {
    let scratch = Scratch::new(scenario);
    let program = c_program(&scratch);
    let (plain, cached) = both_ways(&program, scenario_args(scenario), &scratch);
    assert_eq!(plain, cached, "{scenario}: without the library (left), under it (right)");
}

#[test]
fn streams_and_descriptors_see_each_others_bytes() {
    same_either_way("basic");
}

#[test]
fn every_mode_opens_as_glibc_opens_it() {
    same_either_way("modes");
}

#[test]
fn fdopen_wraps_a_managed_descriptor() {
    same_either_way("fdopen");
}

#[test]
fn fscanf_getline_and_ungetc_read_through_the_cache() {
    same_either_way("text");
}

#[test]
fn large_and_unbuffered_streams() {
    same_either_way("big");
}

#[test]
fn freopen_of_stdout_stdin_and_in_place() {
    same_either_way("freopen");
}

#[test]
fn streams_left_open_at_exit_and_written_after_the_cache_closed() {
    same_either_way("exit");
}

#[test]
fn a_forked_child_writes_where_its_streams_stand() {
    same_either_way("fork");
}

#[test]
fn threads_share_a_stream() {
    same_either_way("threads");
}

#[test]
fn a_stream_of_an_unmanaged_file_reopened_onto_a_managed_path_is_the_c_librarys() {
    let scratch = Scratch::new("foreign");
    let program = c_program(&scratch);
    let (plain, cached) = both_ways(&program, scenario_args("foreign"), &scratch);
    assert_eq!(plain.stdout, cached.stdout);
    let complaints: Vec<&str> = cached.stderr.lines().filter(|l| l.starts_with("wbcache: ")).collect();
    assert_eq!(complaints.len(), 1, "one line says it is not cached: {}", cached.stderr);
    assert!(complaints[0].ends_with("not cached"), "{}", complaints[0]);
    let rest: Vec<&str> = cached.stderr.lines().filter(|l| !l.starts_with("wbcache: ")).collect();
    assert_eq!(plain.stderr.lines().collect::<Vec<_>>(), rest);
}

#[test]
fn stream_writes_are_the_caches_until_fsync_of_fileno() {
    let scratch = Scratch::new("probe");
    let program = c_program(&scratch);
    let dir = scratch.dir("cached");
    let cached = run(&program, &[OsStr::new("probe"), dir.as_os_str()], Some(&dir), &scratch, "cached");
    assert!(cached.status.success(), "{cached:?}");
    let expected = "fwrite: size 8192, the kernel's 0\n\
                    fsync(fileno): the kernel's size 8192\n\
                    write(2), fread: [cached bytes], the kernel's size 0\n";
    assert_eq!(cached.stdout, expected);
    assert_eq!(cached.stderr, "");
}

/// libstdc++'s file streams `fopen` the file and then use `fileno`'s
/// descriptor with `read`/`write`/`lseek`.
const CXX_SOURCE: &str = r#"
#include <fcntl.h>
#include <unistd.h>
#include <fstream>
#include <iostream>
#include <string>

int main(int, char **argv) {
    std::string path = std::string(argv[1]) + "/cxx";
    {
        std::ofstream out(path);
        out << "first line\n" << 42 << "\n";
    }
    int fd = open(path.c_str(), O_RDWR | O_APPEND);
    if (fd < 0 || write(fd, "raw\n", 4) != 4) return 1;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) std::cout << "ifstream: " << line << "\n";
    std::fstream both(path, std::ios::in | std::ios::out);
    both.seekp(0);
    both << "FIRST";
    both.flush();
    char buf[64];
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    std::cout << "pread: " << std::string(buf, n > 0 ? n : 0);
    both.seekg(0);
    std::getline(both, line);
    std::cout << "fstream: " << line << "\n";
    std::ofstream app(path, std::ios::app);
    app << "appended\n";
    app.close();
    close(fd);
    return both.good() ? 0 : 1;
}
"#;

#[test]
fn cxx_file_streams_go_through_the_cache() {
    let scratch = Scratch::new("cxx");
    let Some(program) = compile("c++", CXX_SOURCE, "streams.cc", &scratch, &["-O1", "-Wall"]) else {
        eprintln!("c++ is not installed: skipped");
        return;
    };
    let (plain, cached) = both_ways(&program, |dir| vec![dir.into()], &scratch);
    assert_eq!(plain, cached, "without the library (left), under it (right)");
}

/// Python runs a script with `fopen`, reads it through the stream and
/// marks its descriptor close-on-exec with `ioctl(FIOCLEX)`.
const PYTHON_SCRIPT: &str = r#"
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
made = os.path.join(here, "made.txt")
with open(made, "w") as f:
    f.write("written by the script\n")
print(open(made).read(), end="")
print("arguments:", sys.argv[1:])
"#;

#[test]
fn python_runs_a_script_in_a_managed_directory() {
    let scratch = Scratch::new("python");
    let found = Command::new("python3").arg("-c").arg("pass").output().is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("python3 is not installed: skipped");
        return;
    }
    let args = |dir: &Path| {
        let script = dir.join("script.py");
        std::fs::write(&script, PYTHON_SCRIPT).unwrap();
        vec![script.into(), "one".into(), "two".into()]
    };
    let (plain, cached) = both_ways(Path::new("python3"), args, &scratch);
    assert_eq!(plain, cached, "without the library (left), under it (right)");
}
