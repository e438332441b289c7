//! Writing an install as one step that either happens whole or leaves
//! the tree as it was: every directory that is missing is created, mode
//! 0755 whatever the umask (and remembered), every file is written beside
//! its final name under a temporary name (`.NAME.wbcache-install-PID`),
//! and only when all are written are they renamed over their final names,
//! in order. Until then, [`Staging::abandon`] removes every staged file and
//! every directory this staging created, deepest first. A commit first
//! keeps a second link to each file it replaces
//! (`.NAME.wbcache-install-PID-replaced`): a rename that fails halfway is
//! undone by renaming each kept file back over its name and removing each
//! new one, so the tree is again as it was; the kept links go when the
//! commit ends.
//!
//! A rename over an existing file or link replaces it atomically, so a
//! program running from an installed library keeps its copy. This module
//! works on the paths where files are written (under `DESTDIR`, if any)
//! and knows nothing of prefixes or manifests; it owns the staged files,
//! the kept links and the created directories until it commits or abandons
//! them.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What marks a staged file's name: `.NAME` + this + the installer's pid.
const STAGED_MARK: &str = ".wbcache-install-";

/// What a kept link's name adds to the staged name.
const KEPT_SUFFIX: &str = "-replaced";

/// The mode of every directory an install creates, as `install -d` gives
/// it: readable and searchable by everyone, whatever the umask.
const DIRECTORY_MODE: u32 = 0o755;

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

/// Where a staged file's rename comes in the commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Before every file staged so far.
    First,
    /// After every file staged so far.
    Next,
}

/// What a failed commit left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// The tree as it was before the staging began.
    AsItWas,
    /// Some files renamed that could not be put back: the message names
    /// them.
    Partial,
}

/// Why a commit failed, and what it left.
#[derive(Debug)]
pub struct CommitFailure {
    pub message: String,
    pub left: Left,
}

/// The temporary name `path` is written under before it is renamed.
pub fn staged_name(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or(OsStr::new("file")).to_string_lossy();
    path.with_file_name(format!(".{name}{STAGED_MARK}{}", std::process::id()))
}

/// The name a commit keeps the file it replaces at `path` under, until it
/// ends (a staged name too: one an interrupted commit left is seen).
fn kept_name(path: &Path) -> PathBuf {
    let mut name = staged_name(path).into_os_string();
    name.push(KEPT_SUFFIX);
    PathBuf::from(name)
}

/// Whether a directory entry's name is a staged file's (this install's
/// or one an interrupted install left), or a kept link's.
pub fn is_staged_name(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with('.') && name.contains(STAGED_MARK)
}

/// The staged files and created directories of one install, in order.
#[derive(Default)]
pub struct Staging {
    /// Directories this staging created, parents before children.
    created: Vec<PathBuf>,
    /// (staged file, final name), in the order they are renamed.
    staged: Vec<(PathBuf, PathBuf)>,
    /// (kept link, final name) for each file the commit replaces.
    kept: Vec<(PathBuf, PathBuf)>,
}

impl Staging {
    /// Makes `dir` exist, creating it and each missing parent, mode 0755;
    /// remembers each one created.
    pub fn make_dir(&mut self, dir: &Path) -> Result<(), String> {
        let missing: Vec<&Path> =
            dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && fs::symlink_metadata(a).is_err()).collect();
        for dir in missing.into_iter().rev() {
            let failed = |e: io::Error| format!("cannot create directory {}: {e}", dir.display());
            fs::DirBuilder::new().mode(DIRECTORY_MODE).create(dir).map_err(failed)?;
            self.created.push(dir.to_path_buf());
            // The umask took bits off the mode asked for (root's 077 would
            // leave the tree to root alone): set it whole, as `install -d`.
            fs::set_permissions(dir, fs::Permissions::from_mode(DIRECTORY_MODE)).map_err(failed)?;
        }
        Ok(())
    }

    /// The directories this staging created, parents first.
    pub fn created(&self) -> &[PathBuf] {
        &self.created
    }

    /// Writes `content` under the temporary name of `path` (whose
    /// directory exists), renamed at the commit in `order`; returns the
    /// temporary name.
    pub fn stage(&mut self, path: &Path, content: &Content, order: Order) -> Result<PathBuf, String> {
        let staged = staged_name(path);
        let written = match content {
            Content::Copy { from, mode } => fs::copy(from, &staged).and_then(|_| set_mode(&staged, *mode)),
            Content::Link(target) => std::os::unix::fs::symlink(target, &staged),
            Content::Bytes(bytes) => fs::write(&staged, bytes).and_then(|()| set_mode(&staged, Mode::Data)),
        };
        // Whatever the write left is removed by abandon, even a part.
        let entry = (staged.clone(), path.to_path_buf());
        match order {
            Order::First => self.staged.insert(0, entry),
            Order::Next => self.staged.push(entry),
        }
        written.map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(staged)
    }

    /// Renames every staged file over its final name, in order. Each file
    /// about to be replaced is first kept under a second link; a rename
    /// that fails (it should not, in one directory) is undone with the
    /// ones before it, newest first: each kept file renamed back, each new
    /// one removed, then every staged file and created directory too.
    pub fn commit(mut self) -> Result<(), CommitFailure> {
        if let Err(message) = self.keep_replaced() {
            return Err(self.fail(message, Vec::new()));
        }
        let staged = std::mem::take(&mut self.staged);
        for (done, (from, to)) in staged.iter().enumerate() {
            if let Err(e) = fs::rename(from, to) {
                let message = format!("cannot rename {} to {}: {e}", from.display(), to.display());
                let stuck = self.undo(&staged[..done]);
                self.staged = staged;
                return Err(self.fail(message, stuck));
            }
        }
        // A kept link left by a failure here is named by the next install.
        for (kept, _) in &self.kept {
            let _ = fs::remove_file(kept);
        }
        Ok(())
    }

    /// Links each file a commit will replace to its kept name.
    fn keep_replaced(&mut self) -> Result<(), String> {
        for (_, to) in &self.staged {
            if fs::symlink_metadata(to).is_err() {
                continue;
            }
            let kept = kept_name(to);
            // `link` does not follow a symbolic link: a link is kept as one.
            fs::hard_link(to, &kept)
                .map_err(|e| format!("cannot keep {} as {} while it is replaced: {e}", to.display(), kept.display()))?;
            self.kept.push((kept, to.clone()));
        }
        Ok(())
    }

    /// Undoes the renames of `done`, newest first; returns what could not
    /// be put back (its kept link, if any, stays and is named).
    fn undo(&mut self, done: &[(PathBuf, PathBuf)]) -> Vec<String> {
        let mut stuck = Vec::new();
        for (_, to) in done.iter().rev() {
            let kept = self.kept.iter().position(|(_, replaced)| replaced == to);
            let undone = match kept {
                Some(at) => fs::rename(&self.kept[at].0, to),
                None => fs::remove_file(to),
            };
            if let Err(e) = undone {
                stuck.push(match kept {
                    Some(at) => {
                        format!("{} ({e}; the file it replaced is {})", to.display(), self.kept.remove(at).0.display())
                    }
                    None => format!("{} ({e})", to.display()),
                });
            }
        }
        stuck
    }

    /// The failure of a commit that stopped: everything not `stuck` is
    /// removed, and the message says whether the tree is as it was.
    fn fail(self, message: String, mut stuck: Vec<String>) -> CommitFailure {
        stuck.extend(self.remove_all());
        if stuck.is_empty() {
            return CommitFailure { message: format!("{message}; nothing was changed"), left: Left::AsItWas };
        }
        CommitFailure { message: format!("{message}; could not put back {}", stuck.join(", ")), left: Left::Partial }
    }

    /// Removes every staged file and every created directory (children
    /// first): the prefix is as it was before this staging began.
    pub fn abandon(self) -> Result<(), String> {
        let left = self.remove_all();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("and could not remove {}", left.join(", ")))
        }
    }

    /// Removes the staged files, the kept links and the created
    /// directories; returns those that could not be removed.
    fn remove_all(&self) -> Vec<String> {
        let mut left = Vec::new();
        for (file, _) in self.staged.iter().chain(&self.kept) {
            if let Err(e) = fs::remove_file(file) {
                if e.kind() != io::ErrorKind::NotFound {
                    left.push(file.display().to_string());
                }
            }
        }
        for dir in self.created.iter().rev() {
            if fs::remove_dir(dir).is_err() {
                left.push(dir.display().to_string());
            }
        }
        left
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
        staging.stage(&dir.join("a/b/text"), &Content::Bytes(b"hello".to_vec()), Order::Next).unwrap();
        staging.stage(&dir.join("a/b/link"), &Content::Link("text".into()), Order::Next).unwrap();
        fs::write(dir.join("old"), "the file replaced").unwrap();
        staging.stage(&dir.join("old"), &Content::Bytes(b"new".to_vec()), Order::First).unwrap();
        staging.commit().unwrap();
        assert_eq!(fs::read(dir.join("a/b/link")).unwrap(), b"hello");
        assert_eq!(fs::read(dir.join("old")).unwrap(), b"new");
        assert_eq!(fs::metadata(dir.join("a/b/text")).unwrap().permissions().mode() & 0o777, 0o644);
        assert_eq!(fs::metadata(dir.join("a")).unwrap().permissions().mode() & 0o777, 0o755);
        assert_eq!(fs::read_dir(dir.join("a/b")).unwrap().count(), 2, "nothing staged is left");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2, "no kept link is left");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn abandoning_leaves_the_tree_as_it_was() {
        let dir = scratch("abandon");
        let mut staging = Staging::default();
        staging.make_dir(&dir.join("x/y")).unwrap();
        staging.stage(&dir.join("x/y/file"), &Content::Bytes(b"data".to_vec()), Order::Next).unwrap();
        let missing = Content::Copy { from: dir.join("no-such-file"), mode: Mode::Data };
        let message = staging.stage(&dir.join("x/other"), &missing, Order::Next).unwrap_err();
        assert!(message.starts_with("cannot write ") && message.contains("x/other"), "{message}");
        staging.abandon().unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the created directories are gone");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_rename_puts_back_what_the_commit_replaced() {
        use std::os::unix::fs::MetadataExt;
        let dir = scratch("undo");
        fs::write(dir.join("old"), "the file replaced").unwrap();
        std::os::unix::fs::symlink("old", dir.join("link")).unwrap();
        let inode = fs::metadata(dir.join("old")).unwrap().ino();
        let mut staging = Staging::default();
        staging.make_dir(&dir.join("new")).unwrap();
        staging.stage(&dir.join("old"), &Content::Bytes(b"new".to_vec()), Order::Next).unwrap();
        staging.stage(&dir.join("link"), &Content::Link("new/file".into()), Order::Next).unwrap();
        staging.stage(&dir.join("new/file"), &Content::Bytes(b"new".to_vec()), Order::Next).unwrap();
        let last = staging.stage(&dir.join("last"), &Content::Bytes(b"new".to_vec()), Order::Next).unwrap();
        // Its staged file gone, the last rename fails after three went through.
        fs::remove_file(last).unwrap();
        let failure = staging.commit().unwrap_err();
        assert_eq!(failure.left, Left::AsItWas, "{}", failure.message);
        assert!(failure.message.starts_with("cannot rename ") && failure.message.ends_with("nothing was changed"));
        assert_eq!(fs::read(dir.join("old")).unwrap(), b"the file replaced");
        assert_eq!(fs::metadata(dir.join("old")).unwrap().ino(), inode, "the very file, not a copy");
        assert_eq!(fs::read_link(dir.join("link")).unwrap(), Path::new("old"), "the link itself is back");
        let mut names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["link", "old"], "no new file, kept link or directory is left");
        fs::remove_dir_all(&dir).unwrap();
    }
}
