//! The C ABI from C: builds `tests/c/abi_test.c` against `include/wbcache.h`
//! and the static library, runs it on a temporary directory, and checks that
//! the header declares exactly the functions `capi/src/` exports.
//! `common::programs` finds (or builds) the static library.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::programs::{c_compiler, manifest_dir, run, static_library, TempDir};

/// Compiles `tests/c/abi_test.c` with `cflags`, statically linked against
/// the library; `None` if `allow_compile_failure` and the compiler refused
/// (e.g. no sanitizer runtime installed).
fn build_abi_test(work: &Path, cflags: &[&str], allow_compile_failure: bool) -> Option<PathBuf> {
    let root = manifest_dir();
    let lib = static_library();
    let exe = work.join("abi_test");
    let mut cmd = Command::new(c_compiler());
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(cflags)
        .arg(format!("-DWBC_EXPECTED_VERSION=\"{}\"", env!("CARGO_PKG_VERSION")))
        .arg(root.join("tests/c/abi_test.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-o"])
        .arg(&exe);
    if allow_compile_failure {
        let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        if !out.status.success() {
            eprintln!("compiler refused {cflags:?}; skipping:\n{}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
    } else {
        run(&mut cmd, "compiling tests/c/abi_test.c");
    }
    Some(exe)
}

/// Runs the C test on a fresh directory and checks its summary line.
fn run_abi_test(exe: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let data = TempDir::new("capi-data");
    let mut cmd = Command::new(exe);
    cmd.arg(&data.0).envs(env.iter().copied());
    cmd.output().unwrap_or_else(|e| panic!("cannot run {exe:?}: {e}"))
}

fn assert_abi_test_passed(out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(out.status.success(), "tests/c/abi_test failed ({}):\n{stdout}\n{stderr}", out.status);
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.ends_with(" passed, 0 failed"), "unexpected summary: {summary:?}\n{stderr}");
}

#[test]
fn c_abi_test_passes() {
    let work = TempDir::new("capi-build");
    let exe = build_abi_test(&work.0, &["-O1"], false).expect("compiled");
    assert_abi_test_passed(&run_abi_test(&exe, &[]));
}

/// The same program with AddressSanitizer (the C side: buffer use, handle
/// use after free) and LeakSanitizer (every handle the test opens is freed
/// by its close; the Rust side's allocations go through the intercepted
/// malloc). Skipped where the compiler has no ASan runtime.
#[test]
fn c_abi_test_passes_under_asan() {
    let work = TempDir::new("capi-asan-build");
    let Some(exe) = build_abi_test(&work.0, &["-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer"], true)
    else {
        return;
    };
    let strict = "detect_leaks=1:halt_on_error=1:abort_on_error=0";
    let mut out = run_abi_test(&exe, &[("ASAN_OPTIONS", strict), ("UBSAN_OPTIONS", "halt_on_error=1")]);
    if !out.status.success()
        && String::from_utf8_lossy(&out.stderr).contains("LeakSanitizer has encountered a fatal error")
    {
        // LSan cannot run here (ptrace, restricted /proc): check the rest.
        eprintln!("LeakSanitizer unavailable here; running without leak detection");
        out = run_abi_test(&exe, &[("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1")]);
    }
    assert_abi_test_passed(&out);
}

/// The header is valid C++ too (the `extern "C"` block and guards).
#[test]
fn header_compiles_as_cpp() {
    let Ok(cxx) = which_cxx() else {
        eprintln!("no C++ compiler found; skipping");
        return;
    };
    let work = TempDir::new("capi-cpp");
    let src = work.0.join("header.cpp");
    std::fs::write(
        &src,
        "#include \"wbcache.h\"\n#include \"wbcache.h\"\n\
         static_assert(WBC_DONTCACHE == 1u, \"flag\");\n\
         static_assert(WBC_O_DONTCACHE == 0x40000000, \"open flag\");\n\
         int main() { wbc_cache *c = nullptr; return wbc_cache_open(nullptr, &c) == 0 ? wbc_cache_close(c) : 1; }\n",
    )
    .unwrap();
    run(
        Command::new(cxx)
            .args(["-std=c++11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
            .arg(manifest_dir().join("include"))
            .arg(&src),
        "compiling the header as C++",
    );
}

fn which_cxx() -> Result<String, ()> {
    for cxx in [std::env::var("CXX").unwrap_or_default(), "c++".into(), "g++".into()] {
        if !cxx.is_empty() && Command::new(&cxx).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Ok(cxx);
        }
    }
    Err(())
}

/// Names of the functions the files of `capi/src/` export (`extern "C" fn
/// wbc_*`).
fn exported_functions() -> Vec<String> {
    let mut src = String::new();
    for entry in std::fs::read_dir(manifest_dir().join("capi/src")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            src.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    let mut names: Vec<String> = src
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("pub unsafe extern \"C\" fn ").or_else(|| l.strip_prefix("pub extern \"C\" fn "))
        })
        .map(|rest| rest.split('(').next().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Names of the functions the header declares (`... wbc_name(` at the start
/// of a declaration line).
fn declared_functions() -> Vec<String> {
    let header = std::fs::read_to_string(manifest_dir().join("include/wbcache.h")).unwrap();
    let mut names: Vec<String> = header
        .lines()
        .filter(|l| !l.trim_start().starts_with('*') && !l.trim_start().starts_with("/*") && l.contains('('))
        .filter_map(|l| {
            let before_paren = l.split('(').next()?;
            let name = before_paren.rsplit([' ', '*']).next()?;
            name.starts_with("wbc_").then(|| name.to_string())
        })
        .collect();
    names.sort();
    names
}

#[test]
fn header_declares_exactly_the_exported_functions() {
    let exported = exported_functions();
    for required in [
        "wbc_cache_open",
        "wbc_cache_close",
        "wbc_open",
        "wbc_close",
        "wbc_pread",
        "wbc_pwrite",
        "wbc_fsync",
        "wbc_fdatasync",
        "wbc_size",
        "wbc_truncate",
        "wbc_stats_json",
        "wbc_version",
    ] {
        assert!(exported.iter().any(|e| e == required), "{required} is not exported by capi/src/");
    }
    assert_eq!(declared_functions(), exported, "include/wbcache.h and capi/src/ disagree");
    let header = std::fs::read_to_string(manifest_dir().join("include/wbcache.h")).unwrap();
    assert!(header.contains("#define WBC_DONTCACHE 0x1u"));
    assert_eq!(wbcache_capi::WBC_DONTCACHE, wbcache::WriteFlags::DONTCACHE.bits());
    assert!(header.contains(&format!("#define WBC_O_DONTCACHE {:#x}", wbcache_capi::WBC_O_DONTCACHE)));
}

/// A C program writing through the C ABI (statically linked), never
/// syncing, killed with SIGKILL: every record it reported written is on
/// the file once its cache's guardian has finished.
#[test]
fn c_abi_writes_survive_a_sigkill_of_the_program() {
    let work = TempDir::new("capi-crash");
    let exe = work.0.join("crash_writer");
    let root = manifest_dir();
    let mut cmd = Command::new(c_compiler());
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg(root.join("tests/c/crash_writer.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg(static_library())
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-o"])
        .arg(&exe);
    run(&mut cmd, "compiling tests/c/crash_writer.c");
    let data = TempDir::new("capi-crash-data");
    let mut child = Command::new(&exe)
        .arg(&data.0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the C writer starts");
    let pid = child.id() as libc::pid_t;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let mut acked = 0u64;
    for _ in 0..200 {
        let line = lines.next().expect("an acknowledgement").unwrap();
        acked = line.strip_prefix("acked ").and_then(|n| n.parse().ok()).expect("acked N");
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // What it printed before it died was acknowledged too.
    for line in lines.map_while(Result::ok) {
        acked = line.strip_prefix("acked ").and_then(|n| n.parse().ok()).unwrap_or(acked);
    }
    let _ = child.wait();
    common::wait_for_guardians_of(pid);
    let file = std::fs::read(data.0.join("log")).unwrap();
    let whole = file.chunks_exact(100).enumerate().take_while(|(i, r)| {
        let mut want = [(*i % 251) as u8; 100];
        let head = format!("record {i:08} ");
        want[..head.len()].copy_from_slice(head.as_bytes());
        *r == &want[..]
    });
    let whole = whole.count() as u64;
    println!("C ABI writer killed: {} records acknowledged, {whole} whole records on the file", acked + 1);
    assert!(whole > acked, "record {whole} of {acked} acknowledged is missing or wrong");
}
