//! Where an install goes and what it is made of: the prefix and the
//! `DESTDIR` it is written under ([`Places`]), the build outputs it copies
//! ([`BuildOutputs`], checked before anything is written), and the files
//! and links they become under the prefix ([`product_items`]): the binary,
//! the preload library, the SQLite extension, the C library with its
//! SONAME links, its header and pkg-config files. The man pages and shell
//! completions are generated from the command line (`pages.rs`).

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::staging::{Content, Item, Mode};
use crate::preload_library::PRELOAD_LIBRARY;

/// The header, as the library's version declares it.
const HEADER: &str = include_str!("../../../include/wbcache.h");

/// The version of the libraries this binary was built with.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The name programs linked against `libwbcache.so` load (the library's
/// `DT_SONAME`, set by `capi/lib/build.rs`).
const SONAME: &str = "libwbcache.so.0";

/// The SQLite loadable extension (`.load PREFIX/lib/libwbcache_sqlite`).
const SQLITE_EXTENSION: &str = "libwbcache_sqlite.so";

/// The pkg-config files `capi/lib/build.rs` writes beside the libraries,
/// installed with their prefix and library directory moved.
const PKG_CONFIG_FILES: [&str; 2] = ["wbcache.pc", "wbcache-static.pc"];

/// The prefix, and where its files are written.
#[derive(Debug)]
pub struct Places {
    /// The prefix the installed files name (`/usr/local`).
    prefix: PathBuf,
    /// Where the prefix's tree is staged for a package, if anywhere.
    destdir: Option<PathBuf>,
}

impl Places {
    /// Checks `prefix` (absolute, plain names); `destdir` defaults to
    /// `$DESTDIR`, when set and not empty.
    pub fn new(prefix: &Path, destdir: Option<&Path>) -> Result<Places, String> {
        if !prefix.is_absolute() {
            return Err(format!("--prefix {}: not an absolute path", prefix.display()));
        }
        if prefix.components().any(|c| c == Component::ParentDir) || prefix.as_os_str().as_bytes().contains(&b'\n') {
            return Err(format!("--prefix {}: `..` or a line break in the path", prefix.display()));
        }
        let prefix: PathBuf = prefix.components().collect();
        if prefix.parent().is_none() {
            return Err("--prefix /: the root is no prefix (try /usr/local)".to_string());
        }
        // An empty DESTDIR, given or inherited, is none (not the current directory).
        let destdir = destdir
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("DESTDIR").map(PathBuf::from))
            .filter(|dir| !dir.as_os_str().is_empty());
        Ok(Places { prefix, destdir })
    }

    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The directory the tree is written under for a package, if any.
    pub fn destdir(&self) -> Option<&Path> {
        self.destdir.as_deref()
    }

    /// Where the installed path `installed` (absolute) is written:
    /// under `DESTDIR`, if any.
    pub fn written(&self, installed: &Path) -> PathBuf {
        match &self.destdir {
            Some(dir) => dir.join(installed.strip_prefix("/").unwrap_or(installed)),
            None => installed.to_path_buf(),
        }
    }

    /// The installed path a written one stands for; `None` for `DESTDIR`
    /// itself and what is above it.
    pub fn installed(&self, written: &Path) -> Option<PathBuf> {
        match &self.destdir {
            Some(dir) => {
                let inside = written.strip_prefix(dir).ok().filter(|p| !p.as_os_str().is_empty())?;
                Some(Path::new("/").join(inside))
            }
            None => Some(written.to_path_buf()),
        }
    }

    /// How a user names these places on the command line.
    pub fn options(&self) -> String {
        match &self.destdir {
            Some(dir) => format!("--prefix {} --destdir {}", self.prefix.display(), dir.display()),
            None => format!("--prefix {}", self.prefix.display()),
        }
    }
}

/// The build's files an install copies, each found before anything is
/// written.
#[derive(Debug)]
pub struct BuildOutputs {
    /// The `wbcache` binary: `--from DIR/wbcache`, else the running one.
    binary: PathBuf,
    /// `libwbcache.so`, `libwbcache.a`, the preload library, the SQLite
    /// extension.
    shared: PathBuf,
    archive: PathBuf,
    preload: PathBuf,
    sqlite: PathBuf,
    /// The directory holding the build's pkg-config files.
    from: PathBuf,
}

impl BuildOutputs {
    /// The outputs in `from` (default: the running binary's directory);
    /// names every one missing.
    pub fn find(from: Option<&Path>) -> Result<BuildOutputs, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the wbcache binary: {e}"))?;
        let from = match from {
            Some(dir) => dir.to_path_buf(),
            None => exe.parent().map(Path::to_path_buf).ok_or("the wbcache binary has no directory")?,
        };
        let binary = Some(from.join("wbcache")).filter(|b| b.is_file()).unwrap_or(exe);
        let [shared, archive, preload, sqlite] =
            ["libwbcache.so", "libwbcache.a", PRELOAD_LIBRARY, SQLITE_EXTENSION].map(|name| from.join(name));
        let pkg_config = PKG_CONFIG_FILES.map(|name| from.join(name));
        let missing: Vec<String> = [&shared, &archive, &preload, &sqlite]
            .into_iter()
            .chain(&pkg_config)
            .filter(|path| !path.is_file())
            .map(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{} not found in {} (build them with `cargo build --release`, or name their directory with --from)",
                missing.join(", "),
                from.display()
            ));
        }
        Ok(BuildOutputs { binary, shared, archive, preload, sqlite, from })
    }
}

/// The product's files and links under `prefix`, from `outputs`: the
/// binary, the libraries (the C library's SONAME chain), the header and
/// the pkg-config files naming `prefix`.
pub fn product_items(prefix: &Path, outputs: &BuildOutputs) -> Result<Vec<Item>, String> {
    let bin = prefix.join("bin");
    let lib = prefix.join("lib");
    let real = format!("libwbcache.so.{VERSION}");
    let copy = |from: &Path, mode| Content::Copy { from: from.to_path_buf(), mode };
    let mut items = vec![
        Item { path: bin.join("wbcache"), content: copy(&outputs.binary, Mode::Executable) },
        Item { path: lib.join(PRELOAD_LIBRARY), content: copy(&outputs.preload, Mode::Executable) },
        Item { path: lib.join(SQLITE_EXTENSION), content: copy(&outputs.sqlite, Mode::Executable) },
        Item { path: lib.join(&real), content: copy(&outputs.shared, Mode::Executable) },
        Item { path: lib.join(SONAME), content: Content::Link(real) },
        Item { path: lib.join("libwbcache.so"), content: Content::Link(SONAME.to_string()) },
        Item { path: lib.join("libwbcache.a"), content: copy(&outputs.archive, Mode::Data) },
        Item { path: prefix.join("include/wbcache.h"), content: Content::Bytes(HEADER.as_bytes().to_vec()) },
    ];
    for name in PKG_CONFIG_FILES {
        let built = outputs.from.join(name);
        let pc = std::fs::read_to_string(&built).map_err(|e| format!("{}: {e}", built.display()))?;
        let relocated = relocate(&pc, prefix);
        items.push(Item { path: lib.join("pkgconfig").join(name), content: Content::Bytes(relocated.into_bytes()) });
    }
    Ok(items)
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
    fn bad_prefixes_are_refused() {
        for (prefix, why) in [
            ("usr/local", "not an absolute path"),
            ("/usr/../etc", "`..`"),
            ("/opt/a\nb", "line break"),
            ("/", "the root is no prefix"),
        ] {
            let message = Places::new(Path::new(prefix), None).unwrap_err();
            assert!(message.contains(why), "{prefix:?}: {message}");
        }
    }

    #[test]
    fn destdir_moves_where_files_are_written_not_what_they_name() {
        let places = Places::new(Path::new("/opt/wb/"), Some(Path::new("/stage"))).unwrap();
        assert_eq!(places.prefix(), Path::new("/opt/wb"));
        assert_eq!(places.written(Path::new("/opt/wb/lib/x")), Path::new("/stage/opt/wb/lib/x"));
        assert_eq!(places.installed(Path::new("/stage/opt")), Some(PathBuf::from("/opt")));
        assert_eq!(places.installed(Path::new("/stage")), None);
        let direct = Places::new(Path::new("/opt/wb"), Some(Path::new(""))).unwrap();
        assert_eq!(direct.written(Path::new("/opt/wb/lib/x")), Path::new("/opt/wb/lib/x"));
    }

    #[test]
    fn the_header_is_the_library_header() {
        assert!(HEADER.contains("const char *wbc_version(void);"));
    }
}
