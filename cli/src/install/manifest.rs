//! The install manifest, `PREFIX/share/wbcache/install-manifest`: what
//! `wbcache install` placed under a prefix, so that `wbcache uninstall`
//! removes exactly that. One entry a line, a kind and an absolute path as
//! the installed system sees it (without `DESTDIR`):
//!
//! ```text
//! # wbcache install manifest: `wbcache uninstall --prefix /usr/local` removes what it lists
//! prefix /usr/local
//! file /usr/local/bin/wbcache
//! link /usr/local/lib/libwbcache.so
//! dir /usr/local/share/wbcache
//! ```
//!
//! `file` and `link` lie under the prefix; `dir` is a directory install
//! created (it did not exist before), under the prefix, the prefix itself
//! or one of its parents. The manifest does not list itself. A reinstall
//! over an earlier install keeps the earlier entries (a file a newer
//! version no longer installs is still removed by uninstall, a directory
//! the first install created is still removed when empty). Reading refuses
//! anything else, so an edited or damaged manifest never makes uninstall
//! remove a path outside the prefix. The type owns only its lists.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Where the manifest is, under the prefix.
pub const MANIFEST_UNDER_PREFIX: &str = "share/wbcache/install-manifest";

/// The manifest's path (as installed) for `prefix`.
pub fn manifest_path(prefix: &Path) -> PathBuf {
    prefix.join(MANIFEST_UNDER_PREFIX)
}

/// What an install placed under one prefix.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    pub prefix: PathBuf,
    /// Regular files.
    pub files: BTreeSet<PathBuf>,
    /// Symbolic links.
    pub links: BTreeSet<PathBuf>,
    /// Directories install created.
    pub dirs: BTreeSet<PathBuf>,
}

impl Manifest {
    pub fn new(prefix: &Path) -> Manifest {
        Manifest { prefix: prefix.to_path_buf(), ..Manifest::default() }
    }

    /// Adds what an `earlier` install's manifest lists; a path this one
    /// lists keeps this one's kind.
    pub fn merge(&mut self, earlier: Manifest) {
        let (files, links) = (&mut self.files, &mut self.links);
        files.extend(earlier.files.into_iter().filter(|path| !links.contains(path)));
        links.extend(earlier.links.into_iter().filter(|path| !files.contains(path)));
        self.dirs.extend(earlier.dirs);
    }

    /// The manifest's text.
    pub fn render(&self) -> Vec<u8> {
        let mut text = format!(
            "# wbcache install manifest: `wbcache uninstall --prefix {}` removes what it lists\n",
            self.prefix.display()
        )
        .into_bytes();
        let prefix = BTreeSet::from([self.prefix.clone()]);
        for (kind, paths) in [("prefix", &prefix), ("file", &self.files), ("link", &self.links), ("dir", &self.dirs)] {
            for path in paths {
                text.extend_from_slice(kind.as_bytes());
                text.push(b' ');
                text.extend_from_slice(path.as_os_str().as_bytes());
                text.push(b'\n');
            }
        }
        text
    }

    /// Reads a manifest's text for `prefix`; refuses a manifest of
    /// another prefix, an unknown kind, and any path it could not have
    /// written.
    pub fn parse(text: &[u8], prefix: &Path) -> Result<Manifest, String> {
        let mut manifest = Manifest::new(prefix);
        let mut named_prefix = None;
        for (number, line) in text.split(|&b| b == b'\n').enumerate() {
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            let bad = |why: &str| format!("line {}: {why}: {}", number + 1, String::from_utf8_lossy(line));
            let space = line.iter().position(|&b| b == b' ').ok_or_else(|| bad("no path"))?;
            let path = PathBuf::from(OsStr::from_bytes(&line[space + 1..]));
            if !is_plain_absolute(&path) {
                return Err(bad("not a plain absolute path"));
            }
            let under_prefix = path.starts_with(prefix) && path != prefix;
            let (set, allowed) = match &line[..space] {
                b"prefix" => {
                    named_prefix = Some(path);
                    continue;
                }
                b"file" => (&mut manifest.files, under_prefix),
                b"link" => (&mut manifest.links, under_prefix),
                // A parent of the prefix, but never the root.
                b"dir" => (
                    &mut manifest.dirs,
                    path.starts_with(prefix) || (prefix.starts_with(&path) && path.parent().is_some()),
                ),
                _ => return Err(bad("unknown kind")),
            };
            if !allowed {
                return Err(bad(&format!("outside the prefix {}", prefix.display())));
            }
            set.insert(path);
        }
        match named_prefix {
            Some(named) if named == prefix => Ok(manifest),
            Some(named) => {
                Err(format!("it is the manifest of the prefix {}, not {}", named.display(), prefix.display()))
            }
            None => Err("it names no prefix".to_string()),
        }
    }
}

/// An absolute path of plain names only (no `.`, `..` or `//`), as
/// install writes them.
pub fn is_plain_absolute(path: &Path) -> bool {
    let mut components = path.components();
    components.next() == Some(Component::RootDir)
        && components.all(|c| matches!(c, Component::Normal(_)))
        // Path equality compares components: the bytes show `//`, `/./` and a trailing `/`.
        && path.components().collect::<PathBuf>().as_os_str() == path.as_os_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let mut manifest = Manifest::new(Path::new("/opt/wb"));
        manifest.files.insert("/opt/wb/bin/wbcache".into());
        manifest.links.insert("/opt/wb/lib/libwbcache.so".into());
        manifest.dirs.extend(["/opt".into(), "/opt/wb".into(), "/opt/wb/share/wbcache".into()]);
        manifest
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let manifest = sample();
        let text = manifest.render();
        assert!(String::from_utf8_lossy(&text).contains("\nfile /opt/wb/bin/wbcache\n"));
        assert_eq!(Manifest::parse(&text, Path::new("/opt/wb")).unwrap(), manifest);
    }

    #[test]
    fn merging_keeps_both_installs_entries() {
        let mut newer = Manifest::new(Path::new("/opt/wb"));
        newer.files.insert("/opt/wb/lib/libwbcache.so.0.2.0".into());
        newer.files.insert("/opt/wb/bin/wbcache".into());
        newer.files.insert("/opt/wb/lib/libwbcache.so".into());
        newer.merge(sample());
        assert_eq!(newer.files.len(), 3, "{newer:?}");
        assert!(newer.links.is_empty(), "the newer install's kind wins: {newer:?}");
        assert_eq!(newer.dirs.len(), 3);
    }

    #[test]
    fn paths_outside_the_prefix_are_refused() {
        let prefix = Path::new("/opt/wb");
        for (text, why) in [
            ("prefix /opt/wb\nfile /etc/passwd\n", "outside the prefix"),
            ("prefix /opt/wb\nfile /opt/wb/../../etc/passwd\n", "not a plain absolute path"),
            ("prefix /opt/wb\nfile /opt/wb\n", "outside the prefix"),
            ("prefix /opt/wb\nlink opt/wb/lib/x\n", "not a plain absolute path"),
            ("prefix /opt/wb\nlink /opt/wb//lib/./x\n", "not a plain absolute path"),
            ("prefix /opt/wb\ndir /\n", "outside the prefix"),
            ("prefix /opt/wb\ndir /usr\n", "outside the prefix"),
            ("prefix /opt/wb\nremove /opt/wb/x\n", "unknown kind"),
            ("prefix /opt/wb\nfile\n", "no path"),
            ("prefix /opt/other\nfile /opt/wb/x\n", "the manifest of the prefix /opt/other"),
            ("file /opt/wb/x\n", "names no prefix"),
        ] {
            let message = Manifest::parse(text.as_bytes(), prefix).unwrap_err();
            assert!(message.contains(why), "{text:?}: {message}");
        }
        let ok = "prefix /opt/wb\ndir /opt\ndir /opt/wb/share\n\n# a comment\n";
        assert_eq!(Manifest::parse(ok.as_bytes(), prefix).unwrap().dirs.len(), 2);
    }
}
