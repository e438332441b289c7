//! Unmodified programs under the preload: coreutils' `cp`, `dd`, `mv`,
//! `rm`, `truncate` and `cat` on a managed directory, and a program run
//! through `wbcache run` itself. Each test checks the bytes on disk after
//! the program exits, read by the test process (which is not preloaded),
//! so a program that read or wrote through the cache and left the file
//! wrong, short or unwritten fails; and one test shows that each program
//! really went through the library (a file another preloaded process
//! caches is refused to it), so a preload that silently failed to load
//! cannot pass the others vacuously.

mod common;

use std::path::Path;
use std::process::Command;

use common::{
    assert_file, hold, pattern, preloaded, python, refusal, run, tool, Group, Scratch, MIB, OPTIONS, TIMEOUT,
};

/// Runs `program` with `args` under the preload managing `managed`; it
/// must exit 0, the library complaining of nothing but a refused `ioctl`
/// (`cp` tries `FICLONE` first, then copies).
fn coreutils(program: &Path, args: &[&Path], managed: &Path) -> common::Output {
    let mut cmd = preloaded(program, &[managed], OPTIONS);
    cmd.args(args);
    run(cmd, TIMEOUT).ok().no_complaints(&["ioctl"])
}

/// A file of `len` pattern bytes in an unmanaged directory.
fn source(scratch: &Scratch, len: usize, seed: u64) -> (std::path::PathBuf, Vec<u8>) {
    let data = pattern(len, seed);
    let path = scratch.dir("plain").join(format!("source-{seed}"));
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

#[test]
fn cp_copies_into_and_within_a_managed_directory() {
    let Some(cp) = tool("cp") else { return };
    let scratch = Scratch::new("cp");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 6 * MIB + 4321, 1);
    let (a, b) = (managed.join("a"), managed.join("b"));
    coreutils(&cp, &[&src, &a], &managed);
    assert_file(&a, &data);
    // Managed to managed: copy_file_range between two cached files.
    coreutils(&cp, &[&a, &b], &managed);
    assert_file(&b, &data);
    assert_file(&a, &data);
}

#[test]
fn dd_with_conv_fsync_writes_every_block() {
    let Some(dd) = tool("dd") else { return };
    let scratch = Scratch::new("dd");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 5 * MIB + 777, 2);
    let out = managed.join("out");
    let (input, output) = (format!("if={}", src.display()), format!("of={}", out.display()));
    coreutils(&dd, &[input.as_ref(), output.as_ref(), "bs=64k".as_ref(), "conv=fsync".as_ref()], &managed);
    assert_file(&out, &data);
    // And back out of the cache, skipping into the file as it reads.
    let back = scratch.dir("plain").join("back");
    let (input, output) = (format!("if={}", out.display()), format!("of={}", back.display()));
    coreutils(&dd, &[input.as_ref(), output.as_ref(), "bs=64k".as_ref(), "skip=3".as_ref()], &managed);
    assert_file(&back, &data[3 * 65536..]);
}

#[test]
fn mv_renames_and_rm_removes_managed_files() {
    let (Some(cp), Some(mv), Some(rm)) = (tool("cp"), tool("mv"), tool("rm")) else { return };
    let scratch = Scratch::new("mv");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 3 * MIB + 5, 3);
    let (x, y) = (managed.join("x"), managed.join("y"));
    coreutils(&cp, &[&src, &x], &managed);
    // Over an existing name: the old file's data must not come back.
    std::fs::write(&y, b"old contents of y").unwrap();
    coreutils(&mv, &[&x, &y], &managed);
    assert!(!x.exists(), "mv left {}", x.display());
    assert_file(&y, &data);
    // Out of the managed directory (a rename the kernel does alone).
    let out = scratch.dir("plain").join("moved");
    coreutils(&mv, &[&y, &out], &managed);
    assert_file(&out, &data);
    coreutils(&cp, &[&out, &y], &managed);
    coreutils(&rm, &[&y], &managed);
    assert!(!y.exists(), "rm left {}", y.display());
}

#[test]
fn truncate_shrinks_and_extends_with_zeros() {
    let (Some(cp), Some(truncate)) = (tool("cp"), tool("truncate")) else { return };
    let scratch = Scratch::new("truncate");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 3 * MIB, 4);
    let t = managed.join("t");
    coreutils(&cp, &[&src, &t], &managed);
    coreutils(&truncate, &["-s".as_ref(), "1000".as_ref(), &t], &managed);
    assert_file(&t, &data[..1000]);
    coreutils(&truncate, &["-s".as_ref(), "5M".as_ref(), &t], &managed);
    let mut expected = data[..1000].to_vec();
    expected.resize(5 * MIB, 0);
    assert_file(&t, &expected);
}

#[test]
fn cat_reads_a_managed_file_whole() {
    let (Some(cp), Some(cat)) = (tool("cp"), tool("cat")) else { return };
    let scratch = Scratch::new("cat");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 4 * MIB + 99, 5);
    let f = managed.join("f");
    coreutils(&cp, &[&src, &f], &managed);
    let out_path = scratch.dir("plain").join("out");
    let mut cmd = preloaded(cat, &[&managed], OPTIONS);
    cmd.arg(&f);
    let stdout = std::fs::File::create(&out_path).unwrap();
    Group::spawn_to(cmd, stdout).wait(TIMEOUT).ok().no_complaints(&[]);
    assert_file(&out_path, &data);
}

/// Each program opens a file another preloaded process caches: it must
/// be refused (EBUSY) with the library's line naming the file, which
/// only a program whose calls reach the library can be.
#[test]
fn each_program_goes_through_the_library() {
    let Some(python) = python() else { return };
    let scratch = Scratch::new("interposed");
    let managed = scratch.dir("managed");
    let held = managed.join("held");
    std::fs::write(&held, pattern(10_000, 6)).unwrap();
    let holder = hold(&python, &held, &managed, "os.O_RDWR");
    let copy = scratch.dir("plain").join("copy");
    let (input, output) = (format!("if={}", held.display()), format!("of={}", copy.display()));
    let cases: [(&str, Vec<&std::ffi::OsStr>); 5] = [
        ("cp", vec![held.as_os_str(), copy.as_os_str()]),
        ("dd", vec![input.as_ref(), output.as_ref()]),
        ("cat", vec![held.as_os_str()]),
        ("truncate", vec!["-s".as_ref(), "0".as_ref(), held.as_os_str()]),
        ("sqlite3", vec![held.as_os_str(), "PRAGMA user_version".as_ref()]),
    ];
    for (program, args) in cases {
        let Some(path) = tool(program) else { continue };
        let mut cmd = preloaded(path, &[&managed], OPTIONS);
        cmd.args(args);
        let out = run(cmd, TIMEOUT);
        assert!(!out.status.success(), "{program} opened a file another process caches\n{}", out.details());
        assert!(out.stderr.contains(&refusal(&held)), "{program}: no refusal line\n{}", out.details());
    }
    drop(holder);
    assert_file(&held, &pattern(10_000, 6));
}

/// `wbcache run` (the binary the workspace's `cargo test` builds) runs a
/// program with the library preloaded on the directories of `--paths`.
#[test]
fn wbcache_run_runs_a_program_preloaded() {
    let (Some(python), Some(wbcache)) = (python(), wbcache_run()) else { return };
    let scratch = Scratch::new("run");
    let managed = scratch.dir("managed");
    let code = "import fcntl, os, sys\n\
                fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)\n\
                os.write(fd, b'through wbcache run\\n' * 1000)\n\
                try:\n    fcntl.ioctl(fd, 0x541B, b'1234')\n    sys.exit('ioctl was not refused')\n\
                except OSError as e:\n    assert e.errno == 95, e\n";
    let file = managed.join("out");
    let mut cmd = Command::new(wbcache);
    // The library this `cargo test` built (`wbcache run` looks beside
    // itself by default, where `cargo build` leaves one that may be older).
    cmd.env("WBCACHE_PRELOAD", common::library()).arg("run").arg("--paths").arg(&managed);
    cmd.args(["--set", "capacity=16M", "--"]).arg(python).arg("-c").arg(code).arg(&file);
    let out = run(cmd, TIMEOUT).ok().no_complaints(&["ioctl 0x541b"]);
    assert!(out.stderr.contains("ioctl"), "the program ran without the library\n{}", out.details());
    assert_file(&file, &b"through wbcache run\n".repeat(1000));
}

/// The `wbcache` binary, or a skip: `cargo test -p wbcache-preload` alone
/// does not build it (the workspace's `cargo test` does, for the CLI's
/// tests).
fn wbcache_run() -> Option<std::path::PathBuf> {
    common::wbcache_binary()
        .or_else(|| common::missing("target/debug/wbcache is not built (run the workspace's tests)"))
}
