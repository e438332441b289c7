//! What C builds rely on besides the header: the shared library's SONAME
//! and the pkg-config files `capi/lib/build.rs` writes next to the libraries.
//!
//! Both are checked where this test's own build left them: the test
//! executable is `target/<profile>/deps/packaging-<hash>`, `cargo test`
//! links the shared library into `deps/`, and `cargo build` copies it up to
//! `target/<profile>/`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const SONAME: &str = "libwbcache.so.0";

/// The repository: this crate is its `capi/lib/`.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("capi/lib/ has a grandparent").to_path_buf()
}

/// `target/<profile>`, two levels above the test executable.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("the test runs from target/<profile>/deps").to_path_buf()
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[test]
fn shared_library_names_its_soname() {
    let dir = profile_dir();
    // A library older than build.rs was linked before the SONAME existed
    // (an earlier `cargo build` that this test run did not redo): that one
    // says nothing about the current build.
    let since = fs::metadata(repo().join("capi/lib/build.rs")).and_then(|m| m.modified()).expect("build.rs");
    let mut checked = 0;
    for lib in [dir.join("deps/libwbcache.so"), dir.join("libwbcache.so")] {
        let Ok(modified) = fs::metadata(&lib).and_then(|m| m.modified()) else { continue };
        if modified < since {
            eprintln!("{}: older than build.rs, not checked", lib.display());
            continue;
        }
        let elf = fs::read(&lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
        assert_eq!(soname(&elf), Ok(SONAME.to_string()), "{}", lib.display());
        checked += 1;
    }
    if checked == 0 {
        eprintln!("no libwbcache.so built under {}: SONAME not checked", dir.display());
    }
}

#[test]
fn pkg_config_files_name_the_header_and_the_libraries() {
    let dir = profile_dir();
    let include = repo().join("include");
    assert!(include.join("wbcache.h").is_file());

    let shared = read_pc(&dir.join("wbcache.pc"));
    assert_eq!(shared["Cflags"], format!("-I{}", include.display()));
    let libs: Vec<&str> = shared["Libs"].split_whitespace().collect();
    assert!(libs.contains(&"-lwbcache"), "{libs:?}");
    let libdir = libs.iter().find_map(|l| l.strip_prefix("-L")).expect("Libs has -L");
    assert!(same_dir(Path::new(libdir), &dir), "-L{libdir} is not {}", dir.display());
    assert!(shared["Libs.private"].contains("-lpthread"), "{:?}", shared["Libs.private"]);

    let fixed = read_pc(&dir.join("wbcache-static.pc"));
    assert_eq!(fixed["Cflags"], shared["Cflags"]);
    let archive = fixed["Libs"].split_whitespace().next().expect("Libs names the archive");
    assert!(archive.ends_with("/libwbcache.a"), "{archive}");
    assert!(same_dir(Path::new(archive).parent().unwrap(), &dir), "{archive} is not in {}", dir.display());

    // pkg-config itself reads them the same way, where it is installed.
    let Ok(out) =
        Command::new("pkg-config").env("PKG_CONFIG_PATH", &dir).args(["--cflags", "--libs", "wbcache"]).output()
    else {
        eprintln!("pkg-config not installed: its reading not checked");
        return;
    };
    assert!(out.status.success(), "pkg-config: {}", String::from_utf8_lossy(&out.stderr));
    let words = String::from_utf8(out.stdout).unwrap();
    let words: Vec<&str> = words.split_whitespace().collect();
    assert!(words.contains(&shared["Cflags"].as_str()) && words.contains(&"-lwbcache"), "{words:?}");
}

/// A pkg-config file's fields (`Name: value`) with `${variable}`s expanded.
fn read_pc(path: &Path) -> HashMap<String, String> {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (build.rs writes it when the library is built)", path.display()));
    let mut variables = HashMap::new();
    let mut fields = HashMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let colon = line.find(':');
        let equals = line.find('=');
        let (key, value, is_field) = match (colon, equals) {
            (Some(c), Some(e)) if e < c => (&line[..e], &line[e + 1..], false),
            (Some(c), _) => (&line[..c], &line[c + 1..], true),
            (None, Some(e)) => (&line[..e], &line[e + 1..], false),
            (None, None) => panic!("{}: unreadable line '{line}'", path.display()),
        };
        let value = expand(value.trim(), &variables);
        if is_field {
            fields.insert(key.trim().to_string(), value);
        } else {
            variables.insert(key.trim().to_string(), value);
        }
    }
    fields
}

fn expand(value: &str, variables: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let end = rest[start..].find('}').map(|e| start + e).expect("unterminated ${");
        out.push_str(&rest[..start]);
        let name = &rest[start + 2..end];
        out.push_str(variables.get(name).unwrap_or_else(|| panic!("undefined variable {name}")));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The `DT_SONAME` of a 64-bit ELF shared object.
fn soname(elf: &[u8]) -> Result<String, String> {
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 {
        return Err("not a 64-bit ELF file".into());
    }
    let big_endian = elf[5] == 2;
    let bytes = |at: usize, n: usize| elf.get(at..at + n).ok_or_else(|| format!("truncated at {at}"));
    let word = |at: usize, n: usize| -> Result<u64, String> {
        let b = bytes(at, n)?;
        let fold = |acc: u64, &byte: &u8| acc << 8 | u64::from(byte);
        Ok(if big_endian { b.iter().fold(0, fold) } else { b.iter().rev().fold(0, fold) })
    };
    let at = |v: u64| usize::try_from(v).map_err(|_| "offset out of range".to_string());

    // Program headers: the dynamic section, and the loaded segments that
    // map its string table's address to a file offset.
    let (phoff, phentsize, phnum) = (at(word(0x20, 8)?)?, at(word(0x36, 2)?)?, at(word(0x38, 2)?)?);
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let (kind, offset, vaddr, filesz) = (word(ph, 4)?, word(ph + 8, 8)?, word(ph + 16, 8)?, word(ph + 32, 8)?);
        match kind {
            1 => loads.push((vaddr, offset, filesz)),
            2 => dynamic = Some((offset, filesz)),
            _ => {}
        }
    }
    let (offset, size) = dynamic.ok_or("no dynamic section")?;
    let (mut strtab, mut name) = (None, None);
    for entry in (0..size / 16).map(|i| at(offset + i * 16)) {
        let entry = entry?;
        match word(entry, 8)? {
            0 => break,
            5 => strtab = Some(word(entry + 8, 8)?),
            14 => name = Some(word(entry + 8, 8)?),
            _ => {}
        }
    }
    let (strtab, name) = (strtab.ok_or("no string table")?, name.ok_or("no DT_SONAME")?);
    let (vaddr, offset, _) =
        loads.iter().find(|(v, _, size)| (*v..v + size).contains(&strtab)).ok_or("string table not loaded")?;
    let start = at(strtab - vaddr + offset + name)?;
    let len = elf.get(start..).and_then(|s| s.iter().position(|&b| b == 0)).ok_or("unterminated name")?;
    Ok(String::from_utf8_lossy(&elf[start..start + len]).into_owned())
}
