//! The quick-start programs: docs/quickstart.md shows `examples/quickstart.rs`
//! and `examples/quickstart.c` whole, and both run as it says. The README's
//! code blocks are held to the same: its Rust lines are
//! [`readme_rust_example`], which runs here, and its C commands are the
//! quick start's. `examples/read_scaling.c` builds as its comment says and
//! runs, on a small region with few reads.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::programs::{c_compiler, example, manifest_dir, run, static_library, TempDir};

fn read(relative: &str) -> String {
    std::fs::read_to_string(manifest_dir().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The quick start's section under `heading` (a `## ` line), up to the next one.
fn quickstart_section(quickstart: &str, heading: &str) -> String {
    let start =
        quickstart.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("docs/quickstart.md has no {heading:?}"))
            + 1;
    let rest = &quickstart[start..];
    let end = rest[heading.len()..].find("\n## ").map_or(rest.len(), |i| i + heading.len() + 1);
    rest[..end].to_string()
}

/// The contents of the first code block fenced as ```` ```lang ```` in `section`.
fn fenced_block(section: &str, lang: &str) -> String {
    let open = format!("```{lang}\n");
    let start = section.find(&open).unwrap_or_else(|| panic!("no ```{lang} block in:\n{section}")) + open.len();
    let len = section[start..].find("\n```").unwrap_or_else(|| panic!("unclosed ```{lang} block")) + 1;
    section[start..start + len].to_string()
}

/// The quick start's command line that builds the C example.
fn quickstart_cc_command() -> Vec<String> {
    let quickstart = read("docs/quickstart.md");
    let block = fenced_block(&quickstart_section(&quickstart, "## C"), "sh");
    let line = block.lines().find(|l| l.starts_with("cc ")).expect("a cc command in the quick start's C section");
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn quickstart_shows_the_examples_verbatim() {
    let quickstart = read("docs/quickstart.md");
    let rust = fenced_block(&quickstart_section(&quickstart, "## Rust"), "rust");
    assert!(
        rust == read("examples/quickstart.rs"),
        "docs/quickstart.md's Rust example differs from examples/quickstart.rs"
    );
    let c = fenced_block(&quickstart_section(&quickstart, "## C"), "c");
    assert!(c == read("examples/quickstart.c"), "docs/quickstart.md's C example differs from examples/quickstart.c");
    // The program's own comment says how to build it, as the quick start does.
    let cc = quickstart_cc_command().join(" ");
    assert!(c.contains(&cc), "examples/quickstart.c does not give the quick start's command `{cc}`");
}

/// Checks a quick-start run: it exits 0, prints what it read back and the
/// statistics as one JSON object, and left `data` (when given) holding what
/// it wrote.
fn check_run(out: &Output, data: Option<&Path>, wrote: &[(u64, &[u8])]) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "quickstart failed ({}):\n{stdout}\n{stderr}", out.status);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"read back: hello"), "{stdout}");
    let json = lines.last().expect("output");
    assert!(json.starts_with('{') && json.ends_with('}'), "the last line is not a JSON object: {json}");
    for key in ["\"capacity_bytes\":268435456", "\"written_bytes_by_reason\":", "\"io_backend\":"] {
        assert!(json.contains(key), "{key} missing from {json}");
    }
    if let Some(data) = data {
        let bytes = std::fs::read(data).unwrap_or_else(|e| panic!("{}: {e}", data.display()));
        for &(off, want) in wrote {
            let at = &bytes[off as usize..off as usize + want.len()];
            assert_eq!(at, want, "bytes at {off} of {}", data.display());
        }
    }
}

/// Runs a quick-start program on a path in a directory that does not exist:
/// it exits 1 and its message names the path and the error.
fn check_missing_directory(exe: &Path, work: &Path, message_end: &str) {
    let missing = work.join("no-such-directory/data.db");
    let out = Command::new(exe).arg(&missing).output().unwrap_or_else(|e| panic!("cannot run {exe:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let want = format!("quickstart: {}: {message_end}", missing.display());
    assert_eq!(stderr.trim_end(), want);
}

/// Runs `cmd` with no path argument; returns its output and process id.
fn run_with_default_path(cmd: &mut Command) -> (Output, u32) {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let pid = child.id();
    (child.wait_with_output().expect("wait for quickstart"), pid)
}

#[test]
fn c_example_builds_with_the_readme_command_and_runs() {
    let work = TempDir::new("example-c");
    let exe = work.0.join("quickstart");
    let lib = static_library();
    // The README's command with this build's library and a scratch output.
    let mut args = quickstart_cc_command().into_iter().skip(1).collect::<Vec<_>>();
    for arg in &mut args {
        if arg == "target/release/libwbcache.a" {
            *arg = lib.display().to_string();
        }
    }
    let o = args.iter().position(|a| a == "-o").expect("-o in the README's cc command");
    args[o + 1] = exe.display().to_string();
    run(
        Command::new(c_compiler()).current_dir(manifest_dir()).args(["-Wall", "-Wextra", "-Werror"]).args(&args),
        "compiling examples/quickstart.c",
    );

    let data = work.0.join("data.db");
    let out = Command::new(&exe).arg(&data).output().expect("run quickstart");
    check_run(&out, Some(&data), &[(0, b"log"), (4096, b"hello"), (8192, b"abcd")]);

    let (out, pid) = run_with_default_path(&mut Command::new(&exe));
    check_run(&out, None, &[]);
    let default = PathBuf::from(format!("/tmp/wbcache-quickstart-{pid}.db"));
    assert!(!default.exists(), "{} left behind", default.display());

    check_missing_directory(&exe, &work.0, "No such file or directory");
}

/// `cargo test` builds the examples before it runs the tests (a run of
/// this file alone builds the example itself).
#[test]
fn rust_example_runs() {
    let exe = example("quickstart");
    let work = TempDir::new("example-rust");
    let data = work.0.join("data.db");
    let out = Command::new(&exe).arg(&data).output().unwrap_or_else(|e| panic!("cannot run {exe:?}: {e}"));
    check_run(&out, Some(&data), &[(0, b"log"), (4096, b"hello")]);

    // By default it works on a file in the temporary directory and removes it.
    let tmp = TempDir::new("example-rust-tmp");
    let (out, _) = run_with_default_path(Command::new(&exe).env("TMPDIR", &tmp.0));
    check_run(&out, None, &[]);
    let left: Vec<_> = std::fs::read_dir(&tmp.0).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    check_missing_directory(&exe, &work.0, "No such file or directory (os error 2)");
}

/// The README's Rust example: the lines between the markers are the
/// README's "## From Rust" block, character for character (after this
/// function's indentation), and `readme_rust_example_runs` runs them.
fn readme_rust_example(path: &Path) -> std::io::Result<()> {
    // README begin
    let cache = wbcache::Cache::new(wbcache::Config::from_options("capacity=256M")?)?;
    let file = cache.open(path, &wbcache::OpenOptions::read_write_create())?;
    file.write_at(b"hello", 0)?; // into the cache, written back by the flusher
    file.sync_data()?; // durable on return
    cache.close()?; // writes back and syncs everything

    // README end
    Ok(())
}

/// The README's section under `heading` (a `## ` line), up to the next one.
fn readme_section(heading: &str) -> String {
    quickstart_section(&read("README.md"), heading)
}

#[test]
fn readme_shows_the_rust_example_verbatim() {
    let source = read("tests/meta/examples.rs");
    let begin = "    // README begin\n";
    let start = source.find(begin).expect("the README begin marker") + begin.len();
    let len = source[start..].find("// README end").expect("the README end marker");
    let lines = source[start..start + len].trim_end();
    let example: String = lines.lines().map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l))).collect();
    let shown = fenced_block(&readme_section("## From Rust"), "rust");
    assert!(shown == example, "README.md's Rust example differs from readme_rust_example:\n{shown}\n---\n{example}");
}

#[test]
fn readme_rust_example_runs() {
    let work = TempDir::new("example-readme");
    let data = work.0.join("data.db");
    readme_rust_example(&data).expect("the README's Rust example");
    assert_eq!(std::fs::read(&data).expect("the example's file"), b"hello");
}

/// The README's C commands are the quick start's: its `cc` line is the one
/// `c_example_builds_with_the_readme_command_and_runs` compiles with, and
/// every other command it shows (its comment aside) is in docs/quickstart.md.
#[test]
fn readme_shows_the_quickstart_c_commands() {
    let section = readme_section("## From C");
    let block = fenced_block(&section, "sh");
    let cc = block.lines().find(|l| l.starts_with("cc ")).expect("a cc command in the README's C section");
    assert_eq!(cc.split_whitespace().collect::<Vec<_>>(), quickstart_cc_command(), "README.md's cc command");
    let quickstart = read("docs/quickstart.md");
    for line in block.lines() {
        let command = line.split(" #").next().unwrap_or(line).trim();
        assert!(quickstart.contains(command), "README.md's C command `{command}` is not in docs/quickstart.md");
    }
    // The pkg-config line, in backquotes in both (outside the code block).
    let after_block = section.split("\n```\n").last().expect("text after the C block");
    let pkg = after_block.split('`').skip(1).step_by(2).find(|s| s.contains("pkg-config"));
    let pkg = pkg.expect("a pkg-config command after the README's C block");
    assert!(quickstart.contains(&format!("`{pkg}`")), "README.md's `{pkg}` is not in docs/quickstart.md");
}

/// The command examples/read_scaling.c and docs/bench.md give to build it.
const READ_SCALING_CC: &str =
    "cc -O2 -pthread -o target/read_scaling examples/read_scaling.c -Iinclude -Ltarget/release -lwbcache";

/// The reader-scaling program says how to build it (as docs/bench.md
/// does), builds with the same flags (linked against this build's static
/// library) and runs: with a few reads of a 1 MiB region, a line per thread
/// count with both ways of reading, and its file removed.
#[test]
fn read_scaling_example_builds_and_runs() {
    assert!(read("examples/read_scaling.c").contains(READ_SCALING_CC), "examples/read_scaling.c: `{READ_SCALING_CC}`");
    assert!(read("docs/bench.md").contains(READ_SCALING_CC), "docs/bench.md: `{READ_SCALING_CC}`");
    let work = TempDir::new("example-read-scaling");
    let exe = work.0.join("read_scaling");
    run(
        Command::new(c_compiler())
            .current_dir(manifest_dir())
            .args(["-O2", "-pthread", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .args(["examples/read_scaling.c", "-Iinclude"])
            .arg(static_library())
            .args(["-lpthread", "-ldl", "-lm"]),
        "compiling examples/read_scaling.c",
    );
    let data = work.0.join("data");
    std::fs::create_dir(&data).unwrap();
    let out = run(Command::new(&exe).arg(&data).args(["2000", "1"]), "examples/read_scaling");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].starts_with("read_scaling: a cached 1 MiB region, random 4 KiB reads, 2000 per thread"), "{out}");
    assert!(lines[1].starts_with("threads") && lines[1].contains("wbc reads/s"), "{out}");
    for (line, threads) in lines[2..].iter().zip(["1", "2", "4"]) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((fields.len(), fields[0]), (6, threads), "{out}");
        for figure in &fields[1..5] {
            assert!(figure.parse::<f64>().is_ok_and(|v| v > 0.0), "{figure} in {out}");
        }
    }
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0, "its file is removed");
}
