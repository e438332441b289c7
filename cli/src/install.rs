//! `wbcache install [--prefix DIR] [--destdir DIR] [--from DIR]`: installs
//! the C library for C programs to build against, as `make install` would:
//! `PREFIX/lib/libwbcache.so.VERSION` with its links `libwbcache.so.0` (the
//! SONAME, which programs load) and `libwbcache.so` (which `-lwbcache`
//! links), `PREFIX/lib/libwbcache.a`, `PREFIX/include/wbcache.h` and
//! `PREFIX/lib/pkgconfig/{wbcache,wbcache-static}.pc`.
//!
//! The libraries are the ones beside this binary (`cargo build --release`
//! leaves all three in `target/release/`) or in `--from DIR`; the header is
//! built into the binary, so it installs from anywhere. `--destdir` (or the
//! `DESTDIR` environment variable) stages the files under a directory, for
//! packaging, while the pkg-config files still name the prefix. Each file
//! is written beside its final name and renamed over it, so a program
//! running from an installed library keeps its copy.

use std::io;
use std::path::{Path, PathBuf};

use clap::Args;

/// The header, as the library's version declares it.
const HEADER: &str = include_str!("../../include/wbcache.h");

/// The version of the libraries this binary was built with.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The name programs linked against `libwbcache.so` load (the library's
/// `DT_SONAME`, set by `capi/lib/build.rs`).
const SONAME: &str = "libwbcache.so.0";

/// The pkg-config files `capi/lib/build.rs` writes beside the libraries,
/// installed with their prefix and library directory moved.
const PKG_CONFIG_FILES: [&str; 2] = ["wbcache.pc", "wbcache-static.pc"];

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// Installation prefix: PREFIX/lib, PREFIX/include and
    /// PREFIX/lib/pkgconfig; must be absolute.
    #[arg(long, value_name = "DIR", default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// Stage the files under DIR (DIR/PREFIX/...), for packaging; the
    /// pkg-config files still name PREFIX (default: $DESTDIR, if set).
    #[arg(long, value_name = "DIR")]
    pub destdir: Option<PathBuf>,
    /// Directory holding libwbcache.so and libwbcache.a (default: the
    /// wbcache binary's).
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
}

/// Installs; returns the exit status (0, 1 when a file cannot be written,
/// 2 for bad input).
pub fn run(args: InstallArgs) -> i32 {
    let plan = match Plan::new(&args) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("wbcache install: {message}");
            return 2;
        }
    };
    match plan.install() {
        Ok(installed) => {
            for path in installed {
                println!("{}", path.display());
            }
            0
        }
        Err(message) => {
            eprintln!("wbcache install: {message}");
            1
        }
    }
}

/// What goes where, checked before anything is written.
struct Plan {
    /// The prefix the pkg-config files name.
    prefix: PathBuf,
    /// Where the prefix's files are written: DESTDIR/PREFIX, or PREFIX.
    root: PathBuf,
    shared: PathBuf,
    archive: PathBuf,
    /// Where the libraries and the build's pkg-config files are.
    from: PathBuf,
}

impl Plan {
    fn new(args: &InstallArgs) -> Result<Plan, String> {
        if !args.prefix.is_absolute() {
            return Err(format!("--prefix {}: not an absolute path", args.prefix.display()));
        }
        let destdir =
            args.destdir.clone().or_else(|| std::env::var_os("DESTDIR").filter(|d| !d.is_empty()).map(PathBuf::from));
        let root = match destdir {
            Some(dir) => dir.join(args.prefix.strip_prefix("/").unwrap_or(&args.prefix)),
            None => args.prefix.clone(),
        };
        let from = match &args.from {
            Some(dir) => dir.clone(),
            None => {
                let exe = std::env::current_exe().map_err(|e| format!("cannot find the wbcache binary: {e}"))?;
                exe.parent().map(Path::to_path_buf).ok_or("the wbcache binary has no directory")?
            }
        };
        let [shared, archive] = ["libwbcache.so", "libwbcache.a"].map(|name| from.join(name));
        for lib in [&shared, &archive].into_iter().chain(&PKG_CONFIG_FILES.map(|name| from.join(name))) {
            if !lib.is_file() {
                return Err(format!(
                    "{} not found (build it with cargo build --release, or name its directory with --from)",
                    lib.display()
                ));
            }
        }
        Ok(Plan { prefix: args.prefix.clone(), root, shared, archive, from })
    }

    /// Writes every file; returns their paths (under DESTDIR, if any).
    fn install(&self) -> Result<Vec<PathBuf>, String> {
        let libdir = self.root.join("lib");
        let pkgconfig = libdir.join("pkgconfig");
        let include = self.root.join("include");
        for dir in [&libdir, &pkgconfig, &include] {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let real = format!("libwbcache.so.{VERSION}");
        let mut installed = Vec::new();
        let mut put = |path: PathBuf, what: Content| -> Result<(), String> {
            replace(&path, what).map_err(|e| format!("{}: {e}", path.display()))?;
            installed.push(path);
            Ok(())
        };
        put(libdir.join(&real), Content::Copy(&self.shared, 0o755))?;
        put(libdir.join(SONAME), Content::Link(&real))?;
        put(libdir.join("libwbcache.so"), Content::Link(SONAME))?;
        put(libdir.join("libwbcache.a"), Content::Copy(&self.archive, 0o644))?;
        put(include.join("wbcache.h"), Content::Text(HEADER.to_string()))?;
        for name in PKG_CONFIG_FILES {
            let built = self.from.join(name);
            let pc = std::fs::read_to_string(&built).map_err(|e| format!("{}: {e}", built.display()))?;
            put(pkgconfig.join(name), Content::Text(relocate(&pc, &self.prefix)))?;
        }
        Ok(installed)
    }
}

/// What one installed file holds.
enum Content<'a> {
    /// A copy of a file, with this mode.
    Copy(&'a Path, u32),
    /// A symbolic link to this (relative) target.
    Link(&'a str),
    /// This text, mode 0644.
    Text(String),
}

/// Makes `path` hold `what`: written under a temporary name in the same
/// directory, then renamed over `path` (which replaces a file or a link
/// atomically, and leaves an old library's readers their copy).
fn replace(path: &Path, what: Content) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let name = path.file_name().expect("installed files have names").to_string_lossy();
    let staged = path.with_file_name(format!(".{name}.wbcache-install-{}", std::process::id()));
    let _ = std::fs::remove_file(&staged);
    let written = match what {
        Content::Copy(from, mode) => std::fs::copy(from, &staged)
            .and_then(|_| std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))),
        Content::Link(target) => std::os::unix::fs::symlink(target, &staged),
        Content::Text(text) => std::fs::write(&staged, text)
            .and_then(|()| std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o644))),
    };
    let result = written.and_then(|()| std::fs::rename(&staged, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    result
}

/// A pkg-config file of the build (its prefix the source tree, its
/// libraries in `target/<profile>`) for the installed header and
/// libraries: `prefix` and `libdir` moved, the rest as the build wrote it.
fn relocate(pc: &str, prefix: &Path) -> String {
    pc.lines()
        .map(|line| {
            if line.starts_with("prefix=") {
                format!("prefix={}\n", prefix.display())
            } else if line.starts_with("libdir=") {
                "libdir=${prefix}/lib\n".to_string()
            } else {
                format!("{line}\n")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkg_config_names_the_prefix_and_the_libraries() {
        let built = "prefix=/src/wbcache\nincludedir=${prefix}/include\nlibdir=${prefix}/target/release\n\n\
                     Name: wbcache\nVersion: 0.1.0\nLibs: -L${libdir} -lwbcache\nLibs.private: -lpthread -ldl\n";
        let pc = relocate(built, Path::new("/opt/wb"));
        assert!(pc.starts_with("prefix=/opt/wb\nincludedir=${prefix}/include\nlibdir=${prefix}/lib\n\n"), "{pc}");
        assert!(pc.contains("Libs: -L${libdir} -lwbcache\n") && pc.ends_with("Libs.private: -lpthread -ldl\n"), "{pc}");
        assert!(!pc.contains("/src/wbcache") && !pc.contains("target/release"), "{pc}");
    }

    #[test]
    fn a_relative_prefix_is_refused() {
        let args = InstallArgs { prefix: PathBuf::from("usr/local"), destdir: None, from: None };
        let message = Plan::new(&args).err().expect("refused");
        assert!(message.contains("not an absolute path"), "{message}");
    }

    #[test]
    fn the_header_is_the_library_header() {
        assert!(HEADER.contains("const char *wbc_version(void);"));
    }
}
