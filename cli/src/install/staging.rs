//! Writing an install as one step that either happens whole or leaves
//! nothing behind: every directory that is missing is created (and
//! remembered), every file is written beside its final name under a
//! temporary name (`.NAME.wbcache-install-PID`), and only when all are
//! written are they renamed over their final names, in order. Until then,
//! [`Staging::abandon`] removes every staged file and every directory this
//! staging created, deepest first, so the prefix is as it was.
//!
//! A rename over an existing file or link replaces it atomically, so a
//! program running from an installed library keeps its copy. This module
//! works on the paths where files are written (under `DESTDIR`, if any)
//! and knows nothing of prefixes or manifests; it owns the staged files
//! and the created directories until it commits or abandons them.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What marks a staged file's name: `.NAME` + this + the installer's pid.
const STAGED_MARK: &str = ".wbcache-install-";

/// The permissions an installed file gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// 0755: the binary and the shared libraries.
    Executable,
    /// 0644: everything else.
    Data,
}

impl Mode {
    fn bits(self) -> u32 {
        match self {
            Mode::Executable => 0o755,
            Mode::Data => 0o644,
        }
    }
}

/// What one installed file holds.
#[derive(Debug)]
pub enum Content {
    /// A copy of a file of the build.
    Copy { from: PathBuf, mode: Mode },
    /// A symbolic link to this (relative) target.
    Link(String),
    /// These bytes (a generated text), mode 0644.
    Bytes(Vec<u8>),
}

/// One file or link to install: where it goes (as the installed system
/// sees it, without `DESTDIR`) and what it holds.
#[derive(Debug)]
pub struct Item {
    pub path: PathBuf,
    pub content: Content,
}

impl Item {
    pub fn is_link(&self) -> bool {
        matches!(self.content, Content::Link(_))
    }
}

/// The temporary name `path` is written under before it is renamed.
pub fn staged_name(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or(OsStr::new("file")).to_string_lossy();
    path.with_file_name(format!(".{name}{STAGED_MARK}{}", std::process::id()))
}

/// Whether a directory entry's name is a staged file's (this install's
/// or one an interrupted install left).
pub fn is_staged_name(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with('.') && name.contains(STAGED_MARK)
}

/// The staged files and created directories of one install, in order.
#[derive(Default)]
pub struct Staging {
    /// Directories this staging created, parents before children.
    created: Vec<PathBuf>,
    /// (staged file, final name), in the order they were staged.
    staged: Vec<(PathBuf, PathBuf)>,
}

impl Staging {
    /// Makes `dir` exist, creating it and each missing parent; remembers
    /// each one created.
    pub fn make_dir(&mut self, dir: &Path) -> Result<(), String> {
        let missing: Vec<&Path> =
            dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && fs::symlink_metadata(a).is_err()).collect();
        for dir in missing.into_iter().rev() {
            fs::create_dir(dir).map_err(|e| format!("cannot create directory {}: {e}", dir.display()))?;
            self.created.push(dir.to_path_buf());
        }
        Ok(())
    }

    /// The directories this staging created, parents first.
    pub fn created(&self) -> &[PathBuf] {
        &self.created
    }

    /// Writes `content` under the temporary name of `path` (whose
    /// directory exists).
    pub fn stage(&mut self, path: &Path, content: &Content) -> Result<(), String> {
        let staged = staged_name(path);
        let written = match content {
            Content::Copy { from, mode } => fs::copy(from, &staged).and_then(|_| set_mode(&staged, *mode)),
            Content::Link(target) => std::os::unix::fs::symlink(target, &staged),
            Content::Bytes(bytes) => fs::write(&staged, bytes).and_then(|()| set_mode(&staged, Mode::Data)),
        };
        // Whatever the write left is removed by abandon, even a part.
        self.staged.push((staged, path.to_path_buf()));
        written.map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Renames every staged file over its final name, in the order they
    /// were staged. A rename that fails (it should not, in one directory)
    /// stops there: the staged files left are removed, and the message
    /// says which files are already in place.
    pub fn commit(mut self) -> Result<(), String> {
        let staged = std::mem::take(&mut self.staged);
        for (done, (from, to)) in staged.iter().enumerate() {
            if let Err(e) = fs::rename(from, to) {
                for (left, _) in &staged[done..] {
                    let _ = fs::remove_file(left);
                }
                return Err(format!(
                    "cannot rename {} to {}: {e}; {done} files were already in place \
                     (`wbcache uninstall` with the same --prefix removes them)",
                    from.display(),
                    to.display()
                ));
            }
        }
        Ok(())
    }

    /// Removes every staged file and every created directory (children
    /// first): the prefix is as it was before this staging began.
    pub fn abandon(self) -> Result<(), String> {
        let mut left = Vec::new();
        for (staged, _) in &self.staged {
            if let Err(e) = fs::remove_file(staged) {
                if e.kind() != io::ErrorKind::NotFound {
                    left.push(staged.display().to_string());
                }
            }
        }
        for dir in self.created.iter().rev() {
            if fs::remove_dir(dir).is_err() {
                left.push(dir.display().to_string());
            }
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("and could not remove {}", left.join(", ")))
        }
    }
}

fn set_mode(path: &Path, mode: Mode) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode.bits()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wbcache-staging-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn staged_names_are_recognised() {
        let staged = staged_name(Path::new("/p/lib/libwbcache.a"));
        assert_eq!(staged.parent(), Some(Path::new("/p/lib")));
        assert!(is_staged_name(staged.file_name().unwrap()), "{}", staged.display());
        assert!(!is_staged_name(OsStr::new("libwbcache.a")) && !is_staged_name(OsStr::new(".hidden")));
    }

    #[test]
    fn a_commit_puts_every_file_in_place() {
        let dir = scratch("commit");
        let mut staging = Staging::default();
        staging.make_dir(&dir.join("a/b")).unwrap();
        assert_eq!(staging.created(), [dir.join("a"), dir.join("a/b")]);
        staging.stage(&dir.join("a/b/text"), &Content::Bytes(b"hello".to_vec())).unwrap();
        staging.stage(&dir.join("a/b/link"), &Content::Link("text".into())).unwrap();
        staging.commit().unwrap();
        assert_eq!(fs::read(dir.join("a/b/link")).unwrap(), b"hello");
        assert_eq!(fs::metadata(dir.join("a/b/text")).unwrap().permissions().mode() & 0o777, 0o644);
        assert_eq!(fs::read_dir(dir.join("a/b")).unwrap().count(), 2, "nothing staged is left");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn abandoning_leaves_the_tree_as_it_was() {
        let dir = scratch("abandon");
        let mut staging = Staging::default();
        staging.make_dir(&dir.join("x/y")).unwrap();
        staging.stage(&dir.join("x/y/file"), &Content::Bytes(b"data".to_vec())).unwrap();
        let missing = Content::Copy { from: dir.join("no-such-file"), mode: Mode::Data };
        let message = staging.stage(&dir.join("x/other"), &missing).unwrap_err();
        assert!(message.starts_with("cannot write ") && message.contains("x/other"), "{message}");
        staging.abandon().unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the created directories are gone");
        fs::remove_dir_all(&dir).unwrap();
    }
}
