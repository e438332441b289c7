//! The install manifest, `PREFIX/share/wbcache/install-manifest`: what
//! `wbcache install` placed under a prefix, so that `wbcache uninstall`
//! removes exactly that. One entry a line, a kind and an absolute path as
//! the installed system sees it (without `DESTDIR`), a file's with the
//! digest of the content install wrote before it:
//!
//! ```text
//! # wbcache install manifest: `wbcache uninstall --prefix /usr/local` removes what it lists
//! prefix /usr/local
//! file fnv1a64:5f1b9ad4c3e07e2a /usr/local/bin/wbcache
//! link /usr/local/lib/libwbcache.so
//! dir /usr/local/share/wbcache
//! ```
//!
//! `file` and `link` lie under the prefix; `dir` is a directory install
//! created (it did not exist before), under the prefix, the prefix itself
//! or one of its parents. A `file` line without a digest (written by a
//! version that recorded none) still reads: that file is removed whatever
//! it holds. The manifest does not list itself. A reinstall
//! over an earlier install keeps the earlier entries (a file a newer
//! version no longer installs is still removed by uninstall, a directory
//! the first install created is still removed when empty). Reading refuses
//! anything else, so an edited or damaged manifest never makes uninstall
//! remove a path outside the prefix. The type owns only its lists.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// Where the manifest is, under the prefix.
pub const MANIFEST_UNDER_PREFIX: &str = "share/wbcache/install-manifest";

/// The manifest's path (as installed) for `prefix`.
pub fn manifest_path(prefix: &Path) -> PathBuf {
    prefix.join(MANIFEST_UNDER_PREFIX)
}

/// What marks a digest in a `file` line.
const DIGEST_TAG: &str = "fnv1a64:";

/// A file's content digest: 64-bit FNV-1a over its bytes. Not
/// cryptographic: it tells the file install wrote from one put in its
/// place since (by a user, a package), and it is defined here, not by the
/// standard library's hasher, so a manifest reads alike in every version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest(u64);

impl Digest {
    const START: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn update(state: u64, bytes: &[u8]) -> u64 {
        bytes.iter().fold(state, |state, &b| (state ^ u64::from(b)).wrapping_mul(Digest::PRIME))
    }

    #[cfg(test)]
    fn of_bytes(bytes: &[u8]) -> Digest {
        Digest(Digest::update(Digest::START, bytes))
    }

    /// The digest of the regular file at `path`, opened without following
    /// a symbolic link (refused, as anything but a regular file is): what
    /// uninstall compares is the file itself, never what a link names.
    pub fn of_file(path: &Path) -> io::Result<Digest> {
        let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
        let mut file = fs::OpenOptions::new().read(true).custom_flags(flags).open(path)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        let (mut state, mut buffer) = (Digest::START, vec![0; 1 << 16]);
        loop {
            match file.read(&mut buffer)? {
                0 => return Ok(Digest(state)),
                n => state = Digest::update(state, &buffer[..n]),
            }
        }
    }

    /// A digest as `render` writes it (`fnv1a64:` and 16 hex digits).
    fn parse(word: &[u8]) -> Option<Digest> {
        let hex = std::str::from_utf8(word.strip_prefix(DIGEST_TAG.as_bytes())?).ok()?;
        let valid = hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit());
        valid.then(|| u64::from_str_radix(hex, 16).ok().map(Digest)).flatten()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{DIGEST_TAG}{:016x}", self.0)
    }
}

/// What an install placed under one prefix.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    pub prefix: PathBuf,
    /// Regular files, each with the digest of what install wrote (`None`:
    /// a manifest of a version that recorded none).
    pub files: BTreeMap<PathBuf, Option<Digest>>,
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
    /// A file both list keeps this one's digest.
    pub fn merge(&mut self, earlier: Manifest) {
        let (files, links) = (&mut self.files, &mut self.links);
        for (path, digest) in earlier.files.into_iter().filter(|(path, _)| !links.contains(path)) {
            files.entry(path).or_insert(digest);
        }
        links.extend(earlier.links.into_iter().filter(|path| !files.contains_key(path)));
        self.dirs.extend(earlier.dirs);
    }

    /// The manifest's text.
    pub fn render(&self) -> Vec<u8> {
        let mut text = format!(
            "# wbcache install manifest: `wbcache uninstall --prefix {}` removes what it lists\n",
            self.prefix.display()
        )
        .into_bytes();
        let line = |text: &mut Vec<u8>, kind: &str, path: &Path| {
            text.extend_from_slice(kind.as_bytes());
            text.push(b' ');
            text.extend_from_slice(path.as_os_str().as_bytes());
            text.push(b'\n');
        };
        line(&mut text, "prefix", &self.prefix);
        for (path, digest) in &self.files {
            match digest {
                Some(digest) => line(&mut text, &format!("file {digest}"), path),
                None => line(&mut text, "file", path),
            }
        }
        self.links.iter().for_each(|path| line(&mut text, "link", path));
        self.dirs.iter().for_each(|path| line(&mut text, "dir", path));
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
            let (kind, mut rest) = (&line[..space], &line[space + 1..]);
            // A path is absolute: a word before it is a file's digest.
            let mut digest = None;
            if kind == b"file" && !rest.starts_with(b"/") {
                let space = rest.iter().position(|&b| b == b' ').ok_or_else(|| bad("no path"))?;
                digest = Some(Digest::parse(&rest[..space]).ok_or_else(|| bad("a damaged digest"))?);
                rest = &rest[space + 1..];
            }
            let path = PathBuf::from(OsStr::from_bytes(rest));
            if !is_plain_absolute(&path) {
                return Err(bad("not a plain absolute path"));
            }
            let under_prefix = path.starts_with(prefix) && path != prefix;
            // A directory may be a parent of the prefix, but never the root.
            let allowed = match kind {
                b"prefix" => true,
                b"file" | b"link" => under_prefix,
                b"dir" => path.starts_with(prefix) || (prefix.starts_with(&path) && path.parent().is_some()),
                _ => return Err(bad("unknown kind")),
            };
            if !allowed {
                return Err(bad(&format!("outside the prefix {}", prefix.display())));
            }
            match kind {
                b"prefix" => named_prefix = Some(path),
                b"file" => {
                    manifest.files.insert(path, digest);
                }
                b"link" => {
                    manifest.links.insert(path);
                }
                _ => {
                    manifest.dirs.insert(path);
                }
            }
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
        manifest.files.insert("/opt/wb/bin/wbcache".into(), Some(Digest::of_bytes(b"a binary")));
        manifest.files.insert("/opt/wb/share/old file".into(), None);
        manifest.links.insert("/opt/wb/lib/libwbcache.so".into());
        manifest.dirs.extend(["/opt".into(), "/opt/wb".into(), "/opt/wb/share/wbcache".into()]);
        manifest
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let manifest = sample();
        let text = manifest.render();
        let shown = String::from_utf8_lossy(&text);
        assert!(shown.contains("\nfile fnv1a64:626847a1162dc8b1 /opt/wb/bin/wbcache\n"), "{shown}");
        assert!(shown.contains("\nfile /opt/wb/share/old file\n"), "a file without a digest, as before: {shown}");
        assert_eq!(Manifest::parse(&text, Path::new("/opt/wb")).unwrap(), manifest);
    }

    #[test]
    fn the_digest_is_fnv1a_64_of_the_content() {
        // The published FNV-1a 64 values: a manifest reads alike in every version.
        assert_eq!(Digest::of_bytes(b"").to_string(), "fnv1a64:cbf29ce484222325");
        assert_eq!(Digest::of_bytes(b"a").to_string(), "fnv1a64:af63dc4c8601ec8c");
        let file = std::env::temp_dir().join(format!("wbcache-digest-{}", std::process::id()));
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(&file, &bytes).unwrap();
        assert_eq!(Digest::of_file(&file).unwrap(), Digest::of_bytes(&bytes), "read in pieces, the same digest");
        let link = file.with_extension("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(Digest::of_file(&link).is_err(), "a symbolic link is not followed");
        fs::remove_file(&file).unwrap();
        fs::remove_file(&link).unwrap();
    }

    #[test]
    fn merging_keeps_both_installs_entries() {
        let mut newer = Manifest::new(Path::new("/opt/wb"));
        let digest = Some(Digest::of_bytes(b"a newer binary"));
        newer.files.insert("/opt/wb/lib/libwbcache.so.0.2.0".into(), None);
        newer.files.insert("/opt/wb/bin/wbcache".into(), digest);
        newer.files.insert("/opt/wb/lib/libwbcache.so".into(), None);
        newer.merge(sample());
        assert_eq!(newer.files.len(), 4, "{newer:?}");
        assert_eq!(newer.files[Path::new("/opt/wb/bin/wbcache")], digest, "the newer install's digest wins");
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
            ("prefix /opt/wb\nfile fnv1a64:0123 /opt/wb/x\n", "a damaged digest"),
            ("prefix /opt/wb\nfile fnv1a64:0123456789abcdef\n", "no path"),
            ("prefix /opt/wb\nfile fnv1a64:0123456789abcdef /etc/passwd\n", "outside the prefix"),
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
