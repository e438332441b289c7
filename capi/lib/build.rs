//! Packaging for C consumers: the shared library's SONAME, and pkg-config
//! files next to the libraries cargo builds (`target/<profile>/`). Only
//! this crate, the C library, has them: a Rust crate depending on wbcache
//! gets none of them in its target directory.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// The ABI major version: C programs linked against `libwbcache.so` record
/// this name and load `libwbcache.so.0`, so an incompatible release can
/// install beside them as `.so.1` without breaking them.
const SONAME: &str = "libwbcache.so.0";

/// What `libwbcache.a` needs besides what every C program links. `rustc
/// --print native-static-libs` says `-lgcc_s -lutil -lrt -lpthread -lm -ldl
/// -lc` for the standard library as a whole; `cc` links the unwinder
/// (`gcc_s`) and libc itself, nothing in the library calls into libutil,
/// and libpthread, libdl and librt are part of libc from glibc 2.34 on but
/// separate before it.
const LIBS_PRIVATE: &str = "-lpthread -ldl -lrt -lm";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{SONAME}");

    // This crate is capi/lib/ in the repository, whose include/ holds the
    // header.
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let repo = manifest.ancestors().nth(2).expect("capi/lib/ has a grandparent").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/wbcache-clib-<hash>/out, and the
    // profile directory three up is where `cargo build` puts the libraries.
    // Cargo has no variable naming it, so a layout it does not recognise
    // gets no files rather than files in a wrong place.
    let Some(profile_dir) = out_dir.ancestors().nth(3).filter(|dir| dir.join("build").is_dir()) else {
        println!("cargo:warning=no pkg-config files: unexpected OUT_DIR layout {}", out_dir.display());
        return;
    };
    let libdir = match profile_dir.strip_prefix(&repo) {
        Ok(relative) => format!("${{prefix}}/{}", relative.display()),
        // CARGO_TARGET_DIR outside the repository.
        Err(_) => profile_dir.display().to_string(),
    };
    let version = env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let pc = |libs: &str, libs_private: &str| pkg_config(&repo, &libdir, &version, libs, libs_private);
    write_if_changed(&profile_dir.join("wbcache.pc"), &pc("-L${libdir} -lwbcache", LIBS_PRIVATE));
    // `-lwbcache` takes libwbcache.so over libwbcache.a in the same
    // directory, so linking the archive needs a file that names it.
    write_if_changed(
        &profile_dir.join("wbcache-static.pc"),
        &pc(&format!("${{libdir}}/libwbcache.a {LIBS_PRIVATE}"), ""),
    );

    // A program linked against libwbcache.so asks the loader for the
    // SONAME, a file cargo does not make: the link lets it run from here
    // (LD_LIBRARY_PATH) as it would against an installed libwbcache.so.0.
    let link = profile_dir.join(SONAME);
    if fs::symlink_metadata(&link).is_err() {
        if let Err(e) = std::os::unix::fs::symlink("libwbcache.so", &link) {
            println!("cargo:warning={} not created: {e}", link.display());
        }
    }
}

/// A pkg-config file that uses the header and the libraries where they
/// are: the repository is the prefix.
fn pkg_config(repo: &Path, libdir: &str, version: &str, libs: &str, libs_private: &str) -> String {
    let mut pc = format!(
        "prefix={prefix}\n\
         includedir=${{prefix}}/include\n\
         libdir={libdir}\n\
         \n\
         Name: wbcache\n\
         Description: Userspace page cache and writeback engine over O_DIRECT\n\
         Version: {version}\n\
         Cflags: -I${{includedir}}\n\
         Libs: {libs}\n",
        prefix = repo.display(),
    );
    if !libs_private.is_empty() {
        pc.push_str(&format!("Libs.private: {libs_private}\n"));
    }
    pc
}

/// Leaves an unchanged file alone, so that its time says when what it
/// describes last changed.
fn write_if_changed(path: &Path, content: &str) {
    if fs::read_to_string(path).ok().as_deref() == Some(content) {
        return;
    }
    if let Err(e) = fs::write(path, content) {
        println!("cargo:warning={} not written: {e}", path.display());
    }
}
