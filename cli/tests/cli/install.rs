//! `wbcache install` and `wbcache uninstall`: staged under a temporary
//! DESTDIR, the installed library, header and pkg-config files build a C
//! program with `pkg-config --cflags --libs wbcache`, which runs against the
//! installed library; every file of the product is in place with its mode
//! (the binary, the preload and SQLite libraries, the C library's SONAME
//! links, man pages that `man` renders, shell completions that complete),
//! and uninstall leaves the tree as it was. Installed under a real prefix,
//! the `wbcache` found on a PATH holding only the installed `bin` runs a
//! program under the installed preload library, and `sqlite3` loads the
//! installed extension. Every refusal (an unwritable prefix, a missing
//! build output, a partial earlier install, an uninstall with nothing
//! installed or with a manifest that reaches through a symbolic link) is
//! one line, exit status 2, and leaves nothing behind. Uninstall keeps a
//! file changed since the install; a `DESTDIR` manifest lists no system
//! directory; the directories are 0755 under a umask of 077.
//!
//! The libraries come from the capi/lib, preload and sqlite crates, which
//! `cargo test` does not build as shared libraries beside the binary: the
//! test builds them (`cargo build -p wbcache-clib -p wbcache-preload -p
//! wbcache-sqlite`) and installs with `--from` their directory. It builds
//! them in a target directory of their own, `target/install-test`: a
//! cdylib's file name has no hash, so a build in `target/debug` would
//! rewrite `deps/libwbcache_preload.so`, which other tests of this binary
//! preload into the programs they run at that moment; and `--profile
//! test` does not reuse what `cargo test` built, whose features depend on
//! the packages it was asked for (the whole workspace turns on
//! `wbcache/sim` and `libsqlite3-sys/bundled`, a build of these three
//! does not), so it relinks that file all the same. The dev profile, or
//! `--release` for a test run from `target/release`, builds there in
//! about 15 s (45 s at the test profile's opt-level 2) on two cores, once.

use crate::common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use common::{scratch, wbcache};

/// `target/<profile>`, two levels above the test executable.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("the test runs from target/<profile>/deps").to_path_buf()
}

/// Runs `cmd`; fails the test with its outputs unless it exits 0.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout
}

/// The directory holding this build's outputs: `wbcache`, `libwbcache.so`,
/// `libwbcache.a`, the pkg-config files, `libwbcache_preload.so` and
/// `libwbcache_sqlite.so` (built once for all the tests here).
fn built_outputs() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(build_outputs).clone()
}

fn build_outputs() -> PathBuf {
    let dir = profile_dir();
    let profile = dir.file_name().and_then(|n| n.to_str()).expect("profile directory name").to_string();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("cli/ has a parent");
    // Never the test's own target directory (the module's doc says why).
    let target = dir.parent().unwrap().join("install-test");
    cmd.current_dir(workspace).env("CARGO_TARGET_DIR", &target);
    cmd.args(["build", "-p", "wbcache-clib", "-p", "wbcache-preload", "-p", "wbcache-sqlite"]);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let started = std::time::Instant::now();
    run(&mut cmd, "building the libraries");
    eprintln!("the libraries to install built in {:.1} s", started.elapsed().as_secs_f64());
    target.join(profile)
}

const PROGRAM: &str = r#"#include <stdio.h>
#include <string.h>
#include <wbcache.h>

int main(void) {
    wbc_cache *c = NULL;
    int rc = wbc_cache_open("capacity=16M", &c);
    if (rc != 0) {
        fprintf(stderr, "wbc_cache_open: %d\n", rc);
        return 1;
    }
    printf("version %s\n", wbc_version());
    return wbc_cache_close(c) == 0 ? 0 : 1;
}
"#;

#[test]
fn installed_library_builds_and_runs_a_c_program_with_pkg_config() {
    if Command::new("pkg-config").arg("--version").output().is_err() {
        eprintln!("pkg-config not installed: the installed files are not checked");
        return;
    }
    let from = built_outputs();
    let work = scratch("install");
    let destdir = work.join("stage");
    let prefix = "/opt/wbcache-test";
    let out = run(
        wbcache().env("DESTDIR", &destdir).args(["install", "--prefix", prefix, "--from"]).arg(&from),
        "wbcache install",
    );
    let root = destdir.join(prefix.trim_start_matches('/'));
    let lib = root.join("lib");
    let real = format!("libwbcache.so.{}", env!("CARGO_PKG_VERSION"));
    assert!(out.contains(&lib.join(&real).display().to_string()), "{out}");
    assert_eq!(std::fs::read_link(lib.join("libwbcache.so.0")).unwrap(), Path::new(&real));
    assert_eq!(std::fs::read_link(lib.join("libwbcache.so")).unwrap(), Path::new("libwbcache.so.0"));
    assert!(lib.join("libwbcache.a").is_file() && root.join("include/wbcache.h").is_file());
    let pc = std::fs::read_to_string(lib.join("pkgconfig/wbcache.pc")).unwrap();
    assert!(pc.starts_with(&format!("prefix={prefix}\n")), "the .pc names the prefix, not DESTDIR:\n{pc}");
    assert!(lib.join("pkgconfig/wbcache-static.pc").is_file());

    // pkg-config reads the staged files as a staged tree's: their paths
    // with DESTDIR in front (PKG_CONFIG_SYSROOT_DIR).
    let flags = run(
        Command::new("pkg-config")
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
            .env("PKG_CONFIG_SYSROOT_DIR", &destdir)
            .args(["--cflags", "--libs", "wbcache"]),
        "pkg-config",
    );
    let source = work.join("version.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let exe = work.join("version");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    run(
        Command::new(cc).args(["-Wall", "-Werror"]).arg(&source).args(flags.split_whitespace()).arg("-o").arg(&exe),
        "compiling against the installed library",
    );
    let out = run(Command::new(&exe).env("LD_LIBRARY_PATH", &lib), "the program");
    assert_eq!(out.trim_end(), format!("version {}", env!("CARGO_PKG_VERSION")));
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_relative_prefix_is_refused() {
    let out = wbcache().args(["install", "--prefix", "relative/dir"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not an absolute path"), "{stderr}");
}

/// Every entry under `root`, one line each, sorted: its path relative to
/// `root`, then a directory's mode, a file's mode and size, or a link's
/// target.
fn listing(root: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let mode = meta.permissions().mode() & 0o7777;
            lines.push(if meta.file_type().is_symlink() {
                format!("{name} -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                dirs.push(path.clone());
                format!("{name}/ {mode:o}")
            } else {
                format!("{name} {mode:o} {}", meta.len())
            });
        }
    }
    lines.sort();
    lines
}

/// The visible subcommands, as `wbcache --help` lists them (clap's own
/// `help` left out): each has a man page.
fn visible_subcommands() -> Vec<String> {
    let help = run(wbcache().arg("--help"), "wbcache --help");
    let commands = help.split("Commands:\n").nth(1).expect("--help lists the commands");
    let names = commands.lines().take_while(|line| line.starts_with("  "));
    let names = names.filter_map(|line| line.split_whitespace().next()).filter(|&name| name != "help");
    names.map(str::to_string).collect()
}

/// Runs `cmd`, which must be refused: exit status 2 and one line on
/// stderr, from `who` (`wbcache install`), containing `why`.
fn refused(cmd: &mut Command, who: &str, why: &str) {
    let out: Output = cmd.env_remove("DESTDIR").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{cmd:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with(&format!("{who}: ")) && stderr.contains(why), "{why}: {stderr}");
}

/// `man -l` renders `page` without a complaint.
fn check_man_page(page: &Path) {
    let out = Command::new("man").arg("-l").arg(page).env("MANWIDTH", "80").output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stderr.is_empty(), "man -l {}: {stderr}", page.display());
    assert!(stdout.contains("NAME") && stdout.contains("SYNOPSIS"), "man -l {}: {stdout}", page.display());
}

/// What bash completes `wbcache be` to with the installed completion.
fn bash_completes(completion: &Path) -> String {
    let script = r#"source "$1" || exit 1
        function=$(complete -p wbcache | sed -E 's/.* -F ([^ ]+) .*/\1/')
        COMP_WORDS=(wbcache be); COMP_CWORD=1; COMP_LINE="wbcache be"; COMP_POINT=${#COMP_LINE}
        "$function" wbcache be wbcache
        printf '%s\n' "${COMPREPLY[@]}""#;
    run(Command::new("bash").args(["-c", script, "bash"]).arg(completion), "the bash completion")
}

#[test]
fn install_places_the_whole_product_and_uninstall_removes_exactly_it() {
    let from = built_outputs();
    let work = scratch("install-all");
    let root = work.join("opt/wbcache-all");
    let prefix = root.to_str().unwrap();
    // Not wbcache's: it and its directories stay.
    std::fs::create_dir_all(root.join("share/man/man1")).unwrap();
    std::fs::write(root.join("share/man/man1/unrelated.1"), ".TH UNRELATED 1\n").unwrap();
    let before = listing(&work);
    let install = || {
        let mut cmd = wbcache();
        cmd.env_remove("DESTDIR").args(["install", "--prefix", prefix, "--from"]).arg(&from);
        run(&mut cmd, "wbcache install")
    };
    install();

    let real = format!("lib/libwbcache.so.{}", env!("CARGO_PKG_VERSION"));
    let executables = ["bin/wbcache", "lib/libwbcache_preload.so", "lib/libwbcache_sqlite.so", real.as_str()];
    let pages: Vec<String> = std::iter::once("wbcache".to_string())
        .chain(visible_subcommands().into_iter().map(|name| format!("wbcache-{name}")))
        .map(|page| format!("share/man/man1/{page}.1"))
        .collect();
    assert!(pages.len() >= 6 && !pages.iter().any(|p| p.contains("bench-worker")), "{pages:?}");
    let data = ["lib/libwbcache.a", "include/wbcache.h", "lib/pkgconfig/wbcache.pc", "lib/pkgconfig/wbcache-static.pc"]
        .into_iter()
        .chain([
            "share/bash-completion/completions/wbcache",
            "share/zsh/site-functions/_wbcache",
            "share/fish/vendor_completions.d/wbcache.fish",
            "share/wbcache/install-manifest",
        ])
        .chain(pages.iter().map(String::as_str));
    for (file, mode) in executables.iter().map(|f| (*f, 0o755)).chain(data.map(|f| (f, 0o644))) {
        let meta = std::fs::symlink_metadata(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(meta.is_file(), "{file} is a file");
        assert_eq!(meta.permissions().mode() & 0o7777, mode, "{file}'s mode");
    }
    let lib = root.join("lib");
    assert_eq!(std::fs::read_link(lib.join("libwbcache.so.0")).unwrap(), Path::new(real.trim_start_matches("lib/")));
    assert_eq!(std::fs::read_link(lib.join("libwbcache.so")).unwrap(), Path::new("libwbcache.so.0"));
    let manifest = std::fs::read_to_string(root.join("share/wbcache/install-manifest")).unwrap();
    let binary = format!(" {prefix}/bin/wbcache");
    let with_digest = |line: &str| line.starts_with("file fnv1a64:") && line.ends_with(&binary);
    assert!(manifest.lines().any(with_digest), "the binary, with its digest:\n{manifest}");
    assert!(!manifest.contains("unrelated"), "{manifest}");
    assert!(manifest.contains(&format!("\ndir {prefix}/share/wbcache\n")), "a directory created:\n{manifest}");

    if Command::new("man").arg("--version").output().is_ok() {
        pages.iter().for_each(|page| check_man_page(&root.join(page)));
    } else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "man is installed under CI (.ci/run installs man-db)");
        eprintln!("man not installed: the man pages are not rendered");
    }
    assert_eq!(bash_completes(&root.join("share/bash-completion/completions/wbcache")), "bench\n");

    // An upgrade over a complete install works, and lists the same.
    install();
    assert_eq!(std::fs::read_to_string(root.join("share/wbcache/install-manifest")).unwrap(), manifest);

    let mut uninstall = wbcache();
    uninstall.env_remove("DESTDIR").args(["uninstall", "--prefix", prefix]);
    run(&mut uninstall, "wbcache uninstall");
    assert_eq!(listing(&work), before, "uninstall leaves the tree as it was");
    let _ = std::fs::remove_dir_all(&work);
}

/// A program's absolute path on this PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// The Python interpreter itself (not a wrapper such as pyenv's shims,
/// which need the PATH this test takes away).
fn python() -> Option<PathBuf> {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())).filter(|p| out.status.success() && p.is_file())
}

#[test]
fn an_installed_wbcache_on_the_path_runs_programs_and_sqlite_loads_its_extension() {
    let (Some(python), Some(sqlite3)) = (python(), on_path("sqlite3")) else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "python3 and sqlite3 are installed under CI");
        eprintln!("skipped: python3 or sqlite3 is missing here");
        return;
    };
    let work = scratch("install-path");
    let prefix = work.join("prefix");
    let mut install = wbcache();
    install.env_remove("DESTDIR").arg("install").arg("--prefix").arg(&prefix).arg("--from").arg(built_outputs());
    run(&mut install, "wbcache install");
    let data = work.join("data");
    std::fs::create_dir(&data).unwrap();
    let bin = prefix.join("bin");

    // `wbcache` is the PATH's, which holds only the installed bin.
    let file = data.join("out.txt");
    let stats = work.join("stats.jsonl");
    let code = "import sys\nwith open(sys.argv[1], 'w') as f:\n    f.write('line\\n' * 100000)\n";
    let script = r#"command -v wbcache && exec wbcache run --paths "$1" --stats "$2" -- "$3" -c "$4" "$5""#;
    let mut cmd = Command::new("/bin/sh");
    cmd.env_clear().env("PATH", &bin).args(["-c", script, "sh"]).arg(&data).arg(&stats).arg(&python).arg(code);
    let out = run(cmd.arg(&file), "wbcache run from the installed bin");
    assert_eq!(out.lines().next(), Some(bin.join("wbcache").to_str().unwrap()), "found through PATH");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "line\n".repeat(100000), "the kernel sees the file whole");
    let stats = std::fs::read_to_string(&stats).unwrap_or_default();
    assert!(stats.contains("\"written_bytes_total\""), "the program ran through the cache: {stats}");

    // sqlite3 loads the installed extension, whose VFS makes a table that
    // the shell's own VFS reads back.
    let db = data.join("t.db");
    let extension = prefix.join("lib/libwbcache_sqlite");
    let script = format!(
        ".load {}\n.open file:{}?vfs=wbcache\n.vfsname\nCREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n\
         INSERT INTO t VALUES (1, 'one'), (2, 'two');\nSELECT group_concat(v) FROM t;\n",
        extension.display(),
        db.display()
    );
    let mut shell = Command::new(&sqlite3);
    shell
        .env_clear()
        .env("PATH", &bin)
        .arg("-batch")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = shell.spawn().unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!((stdout.as_ref(), stderr.as_ref()), ("wbcache\none,two\n", ""), "sqlite3 on the installed extension");
    let out = run(Command::new(&sqlite3).arg(&db).arg("SELECT count(*), group_concat(v) FROM t;"), "sqlite3 read back");
    assert_eq!(out, "2|one,two\n");

    run(wbcache().env_remove("DESTDIR").arg("uninstall").arg("--prefix").arg(&prefix), "wbcache uninstall");
    assert!(!prefix.exists(), "the prefix install created is gone");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn an_unwritable_prefix_is_refused_and_nothing_is_left() {
    let from = built_outputs();
    let work = scratch("install-unwritable");
    std::fs::write(work.join("file"), "a regular file\n").unwrap();
    // A file where a directory of the install must go: the directories
    // made before it are removed again.
    std::fs::create_dir_all(work.join("half/share")).unwrap();
    std::fs::write(work.join("half/share/zsh"), "not a directory\n").unwrap();
    let before = listing(&work);
    let install = |prefix: &Path| {
        let mut cmd = wbcache();
        cmd.arg("install").arg("--prefix").arg(prefix).arg("--from").arg(&from);
        cmd
    };
    refused(&mut install(&work.join("file/prefix")), "wbcache install", "Not a directory");
    refused(&mut install(&work.join("half")), "wbcache install", "share/zsh/site-functions");
    let proc = Path::new("/proc/wbcache-install-test");
    refused(&mut install(proc), "wbcache install", "/proc/wbcache-install-test");
    assert!(!proc.exists());
    assert_eq!(listing(&work), before, "nothing is left");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_missing_build_output_is_named_and_nothing_is_written() {
    let work = scratch("install-missing");
    let empty = work.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let prefix = work.join("prefix");
    let mut cmd = wbcache();
    cmd.arg("install").arg("--prefix").arg(&prefix).arg("--from").arg(&empty);
    refused(&mut cmd, "wbcache install", "libwbcache_preload.so, libwbcache_sqlite.so");
    refused(&mut cmd, "wbcache install", "cargo build --release");
    assert!(!prefix.exists(), "no prefix made");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_partial_earlier_install_is_refused_and_uninstall_clears_it() {
    let from = built_outputs();
    let work = scratch("install-partial");
    let prefix = work.join("prefix");
    let install = || {
        let mut cmd = wbcache();
        cmd.env_remove("DESTDIR").arg("install").arg("--prefix").arg(&prefix).arg("--from").arg(&from);
        cmd
    };
    let mut uninstall = wbcache();
    uninstall.env_remove("DESTDIR").arg("uninstall").arg("--prefix").arg(&prefix);

    // A file the manifest lists is gone.
    run(&mut install(), "wbcache install");
    std::fs::remove_file(prefix.join("lib/libwbcache.a")).unwrap();
    let before = listing(&work);
    refused(&mut install(), "wbcache install", "a partial earlier install");
    assert_eq!(listing(&work), before, "nothing changed");
    let out = uninstall.output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stderr).contains("libwbcache.a was already gone"));
    assert!(!prefix.exists());

    // A staged file an interrupted install left.
    run(&mut install(), "wbcache install");
    let left = prefix.join("bin/.wbcache.wbcache-install-999999");
    std::fs::write(&left, "half a binary").unwrap();
    let before = listing(&work);
    refused(&mut install(), "wbcache install", "did not finish");
    assert_eq!(listing(&work), before, "nothing changed");
    std::fs::remove_file(&left).unwrap();
    run(&mut uninstall, "wbcache uninstall");
    assert!(!prefix.exists());
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn uninstall_without_a_manifest_or_with_a_foreign_one_removes_nothing() {
    let work = scratch("uninstall-refused");
    let prefix = work.join("prefix");
    let mut uninstall = wbcache();
    uninstall.arg("uninstall").arg("--prefix").arg(&prefix);
    refused(&mut uninstall, "wbcache uninstall", "no install manifest");
    // A manifest naming a file outside the prefix is refused whole.
    let outside = work.join("outside");
    std::fs::write(&outside, "stays\n").unwrap();
    std::fs::create_dir_all(prefix.join("share/wbcache")).unwrap();
    let manifest = format!("prefix {}\nfile {}\n", prefix.display(), outside.display());
    std::fs::write(prefix.join("share/wbcache/install-manifest"), manifest).unwrap();
    refused(&mut uninstall, "wbcache uninstall", "outside the prefix");
    assert!(outside.exists() && prefix.join("share/wbcache/install-manifest").exists());
    let _ = std::fs::remove_dir_all(&work);
}

/// `wbcache install --prefix PREFIX --from` the built outputs, no DESTDIR.
fn install_into(prefix: &Path) -> Command {
    let mut cmd = wbcache();
    cmd.env_remove("DESTDIR").arg("install").arg("--prefix").arg(prefix).arg("--from").arg(built_outputs());
    cmd
}

/// `wbcache uninstall --prefix PREFIX`, no DESTDIR.
fn uninstall_from(prefix: &Path) -> Command {
    let mut cmd = wbcache();
    cmd.env_remove("DESTDIR").arg("uninstall").arg("--prefix").arg(prefix);
    cmd
}

#[test]
fn uninstall_refuses_a_manifest_that_reaches_through_a_symbolic_link() {
    let work = scratch("uninstall-symlink");
    let prefix = work.join("prefix");
    let outside = work.join("outside");
    std::fs::create_dir_all(outside.join("etc")).unwrap();
    std::fs::write(outside.join("etc/shadow"), "stays\n").unwrap();
    std::fs::create_dir_all(prefix.join("share/wbcache")).unwrap();
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::write(prefix.join("bin/wbcache"), "listed, and stays too: nothing is removed\n").unwrap();
    // Text alone, PREFIX/x/etc/shadow lies under the prefix; PREFIX/x is
    // a link to a directory elsewhere (`/`, for an attacker).
    std::os::unix::fs::symlink(&outside, prefix.join("x")).unwrap();
    let manifest = prefix.join("share/wbcache/install-manifest");
    let text = |entries: &str| format!("prefix {}\nfile {}/bin/wbcache\n{entries}", prefix.display(), prefix.display());
    std::fs::write(&manifest, text(&format!("file {}/x/etc/shadow\n", prefix.display()))).unwrap();
    let before = listing(&work);
    refused(&mut uninstall_from(&prefix), "wbcache uninstall", "reached through a symbolic link");
    assert_eq!(listing(&work), before, "nothing is removed");

    // A directory it would remove when empty, reached the same way.
    std::fs::create_dir(outside.join("empty")).unwrap();
    std::fs::write(&manifest, text(&format!("dir {}/x/empty\n", prefix.display()))).unwrap();
    let before = listing(&work);
    refused(&mut uninstall_from(&prefix), "wbcache uninstall", "reached through a symbolic link");
    assert_eq!(listing(&work), before, "nothing is removed");

    // A listed link is unlinked itself; the file it names stays.
    std::fs::remove_file(prefix.join("x")).unwrap();
    std::os::unix::fs::symlink(outside.join("etc/shadow"), prefix.join("bin/alias")).unwrap();
    std::fs::write(&manifest, text(&format!("link {}/bin/alias\n", prefix.display()))).unwrap();
    run(&mut uninstall_from(&prefix), "wbcache uninstall");
    assert!(std::fs::symlink_metadata(prefix.join("bin/alias")).is_err(), "the link is gone");
    assert_eq!(std::fs::read_to_string(outside.join("etc/shadow")).unwrap(), "stays\n");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn uninstall_keeps_a_file_changed_since_the_install() {
    let work = scratch("uninstall-changed");
    let prefix = work.join("prefix");
    let completion = prefix.join("share/zsh/site-functions/_wbcache");
    let users = "#compdef wbcache\n# the user's own\n";
    run(&mut install_into(&prefix), "wbcache install");
    std::fs::write(&completion, users).unwrap();
    let out = uninstall_from(&prefix).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let kept =
        format!("wbcache uninstall: {} is kept: its content changed since wbcache installed it", completion.display());
    assert!(stderr.lines().any(|line| line == kept), "named on stderr: {stderr}");
    assert_eq!(std::fs::read_to_string(&completion).unwrap(), users);
    let left = ["share/ 755", "share/zsh/ 755", "share/zsh/site-functions/ 755"].map(String::from);
    let file = format!("share/zsh/site-functions/_wbcache 644 {}", users.len());
    assert_eq!(listing(&prefix), [&left[..], &[file]].concat(), "the rest is removed");
    std::fs::remove_dir_all(&prefix).unwrap();

    // A manifest of the earlier format (no digests) still reads, and its
    // files are removed whatever they hold, as that version did.
    run(&mut install_into(&prefix), "wbcache install");
    let manifest = prefix.join("share/wbcache/install-manifest");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let earlier: String = text
        .lines()
        .map(|line| match line.strip_prefix("file fnv1a64:") {
            Some(rest) => format!("file {}\n", rest.split_once(' ').unwrap().1),
            None => format!("{line}\n"),
        })
        .collect();
    assert!(earlier.contains("\nfile /") && !earlier.contains("fnv1a64"), "{earlier}");
    std::fs::write(&manifest, earlier).unwrap();
    std::fs::write(&completion, users).unwrap();
    run(&mut uninstall_from(&prefix), "wbcache uninstall");
    assert!(!prefix.exists(), "everything is removed, the changed file too");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_destdir_manifest_lists_no_system_directory() {
    let work = scratch("install-destdir");
    let stage = work.join("stage");
    let prefix = "/usr/local";
    let mut install = wbcache();
    install.env("DESTDIR", &stage).args(["install", "--prefix", prefix, "--from"]).arg(built_outputs());
    run(&mut install, "wbcache install");
    let root = stage.join("usr/local");
    let manifest = std::fs::read_to_string(root.join("share/wbcache/install-manifest")).unwrap();
    let dirs: Vec<&str> = manifest.lines().filter_map(|line| line.strip_prefix("dir ")).collect();
    assert_eq!(dirs, ["/usr/local/share/wbcache"], "only wbcache's own directory:\n{manifest}");

    // A staged tree's uninstall leaves the directories a package shares.
    let mut uninstall = wbcache();
    uninstall.env("DESTDIR", &stage).args(["uninstall", "--prefix", prefix]);
    run(&mut uninstall, "wbcache uninstall");
    let left = listing(&stage);
    assert!(left.iter().all(|entry| entry.ends_with("/ 755")), "directories only: {left:?}");
    assert!(left.contains(&"usr/local/bin/ 755".to_string()) && !root.join("share/wbcache").exists(), "{left:?}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn directories_are_0755_under_a_restrictive_umask() {
    let work = scratch("install-umask");
    let prefix = work.join("prefix");
    let install = install_into(&prefix);
    // The umask root may well have: every directory made is 0755 all the same.
    let mut cmd = Command::new("/bin/sh");
    cmd.env_remove("DESTDIR").args(["-c", "umask 077 && exec \"$@\"", "sh"]).arg(install.get_program());
    run(cmd.args(install.get_args()), "wbcache install under umask 077");
    let entries = listing(&prefix);
    let dirs: Vec<&String> = entries.iter().filter(|entry| entry.contains("/ ")).collect();
    assert!(dirs.len() >= 10 && dirs.iter().all(|dir| dir.ends_with("/ 755")), "{dirs:?}");
    assert_eq!(std::fs::metadata(&prefix).unwrap().permissions().mode() & 0o7777, 0o755, "the prefix made too");
    let mode = |file: &str| std::fs::metadata(prefix.join(file)).unwrap().permissions().mode() & 0o7777;
    assert_eq!((mode("bin/wbcache"), mode("include/wbcache.h")), (0o755, 0o644), "files keep their modes");
    assert_eq!(mode("share/wbcache/install-manifest"), 0o644);
    run(&mut uninstall_from(&prefix), "wbcache uninstall");
    let _ = std::fs::remove_dir_all(&work);
}
