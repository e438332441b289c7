//! What each shared library exports: a cdylib exports the `#[no_mangle]`
//! functions of every crate it links, so the ABI lives in a crate that only
//! the C library links. `libwbcache.so` exports exactly the `wbc_*`
//! functions of capi/, and the preload library and the SQLite extension
//! exactly their own `#[no_mangle]` functions (the C library functions the
//! preload interposes, the extension's entry points), none of the C ABI:
//! a program linking `libwbcache.so` under the preload meets one copy of
//! each `wbc_*` function.
//!
//! The exported names are read from the sources (without comments,
//! literals and test items, as the architecture test reads them): each
//! `#[no_mangle]` function, and for one a macro defines, every name the macro is invoked
//! with. The dynamic symbol table is `nm -D --defined-only`'s.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::programs::{manifest_dir, run, shared_library};
use common::source::code_only;

/// Every symbol `library` defines and exports, functions and data alike.
fn dynamic_symbols(library: &Path) -> BTreeSet<String> {
    let out = run(Command::new("nm").args(["-D", "--defined-only"]).arg(library), "nm -D");
    out.lines()
        .filter_map(|line| match line.split_whitespace().collect::<Vec<_>>()[..] {
            [_, _kind, name] => Some(name.to_string()),
            _ => None,
        })
        .collect()
}

/// The identifier `text` starts with (`$` included, for macro variables).
fn identifier(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$')).unwrap_or(text.len());
    &text[..end]
}

/// Every name `macro_name! { ... }` is invoked with: the identifier that
/// starts each of its `;`-separated entries.
fn macro_entries(code: &str, macro_name: &str) -> Vec<String> {
    let mut names = Vec::new();
    let opening = format!("{macro_name}! {{");
    for (at, _) in code.match_indices(&opening) {
        let body = &code[at + opening.len()..];
        let body = &body[..body.find("\n}").expect("the invocation ends")];
        names.extend(body.split(';').map(|entry| identifier(entry.trim()).to_string()).filter(|n| !n.is_empty()));
    }
    names
}

/// The names of the `#[no_mangle]` functions defined in `code`.
fn no_mangle_functions(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in code.match_indices("#[no_mangle]") {
        let after = &code[at..];
        let name = identifier(&after[after.find("fn ").expect("a function follows") + 3..]);
        if !name.starts_with('$') {
            names.push(name.to_string());
            continue;
        }
        let definition = code[..at].rfind("macro_rules! ").expect("a macro variable is inside macro_rules!");
        let macro_name = identifier(&code[definition + "macro_rules! ".len()..]);
        names.extend(macro_entries(code, macro_name));
    }
    names
}

/// The `#[no_mangle]` functions of every `.rs` file under `dir`.
fn crate_exports(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                names.extend(no_mangle_functions(&code_only(&std::fs::read_to_string(&path).unwrap())));
            }
        }
    }
    names
}

fn assert_exports(library: &Path, source_dir: &str) -> BTreeSet<String> {
    let exported = dynamic_symbols(library);
    let declared = crate_exports(&manifest_dir().join(source_dir));
    let extra: Vec<_> = exported.difference(&declared).collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{}: exported but not declared in {source_dir}: {extra:?}; declared but not exported: {missing:?}",
        library.display()
    );
    exported
}

#[test]
fn the_c_library_exports_the_c_abi_and_nothing_else() {
    let library = shared_library("wbcache-clib", "wbcache", "capi/lib");
    let exported = assert_exports(&library, "capi/src");
    assert!(exported.iter().all(|name| name.starts_with("wbc_")), "{exported:?}");
    assert!(exported.len() >= 20, "the whole ABI: {exported:?}");
}

#[test]
fn the_preload_library_exports_its_interposers_only() {
    let library = shared_library("wbcache-preload", "wbcache_preload", "preload");
    let exported = assert_exports(&library, "preload/src");
    assert!(exported.contains("open") && exported.contains("pwrite64") && exported.contains("__pread_chk"));
    assert!(!exported.iter().any(|name| name.starts_with("wbc_")), "no C ABI: {exported:?}");
}

#[test]
fn the_sqlite_extension_exports_its_entry_points_only() {
    let library = shared_library("wbcache-sqlite", "wbcache_sqlite", "sqlite");
    let exported = assert_exports(&library, "sqlite/src");
    assert!(exported.contains("sqlite3_wbcachesqlite_init"), "{exported:?}");
    assert!(!exported.iter().any(|name| name.starts_with("wbc_")), "no C ABI: {exported:?}");
}

/// The source reader on the two forms it meets: a plain `#[no_mangle]`
/// function, and a macro's `#[no_mangle]` template with its invocation;
/// one named in a comment is none.
#[test]
fn the_source_reader_finds_plain_and_macro_made_exports() {
    let commented = code_only("// #[no_mangle] fn a() {}\n/* #[no_mangle]\n fn b() {} */ fn c() {}\n");
    assert!(no_mangle_functions(&commented).is_empty(), "{commented}");
    let code = "#[no_mangle]\npub extern \"C\" fn plain(x: i32) {}\n\
                macro_rules! forward {\n  ($($alias:ident() => $p:path;)*) => { $( #[no_mangle]\n pub extern \"C\" fn $alias() {} )* };\n}\n\
                forward! {\n    __one() => a::b;\n    __two() => c::d;\n}\n";
    assert_eq!(no_mangle_functions(code), ["plain", "__one", "__two"]);
}
