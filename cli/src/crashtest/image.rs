//! A file system image in memory: the recorded directory's names and its
//! files' bytes, built from the directory as it was before the program
//! ran and changed by the trace's calls, whole or torn, to make a crash
//! state; written out into a fresh directory for the checker, or compared
//! with a directory (the replay self-check).
//!
//! Invariant: every name that is a file points at an inode in `files`;
//! a name's parent directory is in the image (the root, `""`, always is).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::trace::Call;

/// `fallocate(2)` modes the image follows (linux/falloc.h).
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// What a name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    File(u64),
    Dir,
}

/// The names and the files' bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// Every name under the root, by its path relative to the root.
    names: BTreeMap<PathBuf, Entry>,
    /// Every file's bytes, by inode.
    files: HashMap<u64, Vec<u8>>,
}

/// How much of a write a state keeps: all of it, or its first bytes only
/// (a write torn at a sector or block boundary).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kept {
    Whole,
    FirstBytes(u64),
}

impl Image {
    /// The directory `root` as it is: its files (by inode), directories
    /// and bytes. Other kinds of entries (symbolic links, devices) are
    /// left out.
    pub fn read(root: &Path) -> io::Result<Image> {
        let mut image = Image::default();
        image.read_dir(root, Path::new(""))?;
        Ok(image)
    }

    fn read_dir(&mut self, root: &Path, relative: &Path) -> io::Result<()> {
        let mut entries: Vec<fs::DirEntry> = fs::read_dir(root.join(relative))?.collect::<io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = relative.join(entry.file_name());
            let meta = entry.metadata()?;
            if meta.is_dir() {
                self.names.insert(name.clone(), Entry::Dir);
                self.read_dir(root, &name)?;
            } else if meta.is_file() {
                if let std::collections::hash_map::Entry::Vacant(file) = self.files.entry(meta.ino()) {
                    file.insert(fs::read(root.join(&name))?);
                }
                self.names.insert(name, Entry::File(meta.ino()));
            }
        }
        Ok(())
    }

    /// Applies one call, keeping `kept` of a write's `bytes`. Calls that
    /// only make earlier ones durable change nothing.
    pub fn apply(&mut self, call: &Call, bytes: &[u8], kept: Kept) {
        match call {
            Call::Create { path, ino } => {
                self.files.insert(*ino, Vec::new());
                self.names.insert(path.clone(), Entry::File(*ino));
            }
            Call::Truncate { ino, size } => self.file(*ino).resize(*size as usize, 0),
            Call::Write { ino, off, .. } => {
                let keep = match kept {
                    Kept::Whole => bytes.len(),
                    Kept::FirstBytes(n) => (n as usize).min(bytes.len()),
                };
                write_into(self.file(*ino), *off as usize, &bytes[..keep]);
            }
            Call::Fallocate { ino, mode, off, len } => fallocate(self.file(*ino), *mode, *off, *len),
            Call::Rename { from, to } => self.rename(from, to),
            Call::Link { from, to } => {
                if let Some(entry) = self.names.get(from).copied() {
                    self.names.insert(to.clone(), entry);
                }
            }
            Call::Unlink { path } => {
                self.names.remove(path);
            }
            Call::Mkdir { path } => {
                self.names.insert(path.clone(), Entry::Dir);
            }
            Call::Rmdir { path } => self.remove_tree(path),
            _ => {}
        }
    }

    /// A file's bytes (a file the trace writes before the image has it,
    /// one created before the run or by a call the state lost, starts
    /// empty).
    fn file(&mut self, ino: u64) -> &mut Vec<u8> {
        self.files.entry(ino).or_default()
    }

    /// `rename(2)`: the name, and everything under it if it is a
    /// directory, moved over whatever `to` was.
    fn rename(&mut self, from: &Path, to: &Path) {
        let Some(entry) = self.names.get(from).copied() else { return };
        self.remove_tree(to);
        let moved: Vec<(PathBuf, Entry)> =
            self.names.iter().filter(|(p, _)| p.starts_with(from)).map(|(p, e)| (p.clone(), *e)).collect();
        for (path, _) in &moved {
            self.names.remove(path);
        }
        for (path, e) in moved {
            let rest = path.strip_prefix(from).expect("under from");
            self.names.insert(if rest.as_os_str().is_empty() { to.to_path_buf() } else { to.join(rest) }, e);
        }
        debug_assert_eq!(self.names.get(to), Some(&entry));
    }

    /// A name and, for a directory, every name under it.
    fn remove_tree(&mut self, path: &Path) {
        self.names.retain(|p, _| !p.starts_with(path));
    }

    /// Writes the image into the empty directory `root`: its directories,
    /// its files (names of one inode as hard links).
    pub fn write(&self, root: &Path) -> io::Result<()> {
        let mut written: HashMap<u64, PathBuf> = HashMap::new();
        for (name, entry) in &self.names {
            let path = root.join(name);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            match entry {
                Entry::Dir => fs::create_dir_all(&path)?,
                Entry::File(ino) => match written.get(ino) {
                    Some(first) => fs::hard_link(first, &path)?,
                    None => {
                        fs::write(&path, self.files.get(ino).map(Vec::as_slice).unwrap_or_default())?;
                        written.insert(*ino, path);
                    }
                },
            }
        }
        Ok(())
    }

    /// The names and bytes as people compare directories: each name with
    /// its file's bytes (`None` for a directory), inodes aside.
    pub fn contents(&self) -> BTreeMap<PathBuf, Option<&[u8]>> {
        self.names
            .iter()
            .map(|(name, entry)| {
                let bytes = match entry {
                    Entry::Dir => None,
                    Entry::File(ino) => Some(self.files.get(ino).map(Vec::as_slice).unwrap_or_default()),
                };
                (name.clone(), bytes)
            })
            .collect()
    }

    /// A hash of the names and bytes (what a checker sees), inodes aside.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.contents().hash(&mut hasher);
        hasher.finish()
    }

    /// The first difference between this image and `other`, said for
    /// people; `None` when their names and bytes are the same.
    pub fn difference(&self, other: &Image) -> Option<String> {
        let (mine, theirs) = (self.contents(), other.contents());
        for (name, bytes) in &mine {
            match theirs.get(name) {
                None => return Some(format!("{} is only in the replay", name.display())),
                Some(b) if b != bytes => {
                    return Some(format!("{}: {}", name.display(), bytes_difference(*bytes, *b)));
                }
                Some(_) => {}
            }
        }
        let extra = theirs.keys().find(|name| !mine.contains_key(*name))?;
        Some(format!("{} is only in the directory", extra.display()))
    }

    /// The same image without the files `inodes` (their names left out).
    pub fn without_files(&self, inodes: &std::collections::BTreeSet<u64>) -> Image {
        let mut image = self.clone();
        image.names.retain(|_, e| !matches!(e, Entry::File(ino) if inodes.contains(ino)));
        image.files.retain(|ino, _| !inodes.contains(ino));
        image
    }

    /// What `path` is, if the image has it.
    pub fn entry(&self, path: &Path) -> Option<Entry> {
        self.names.get(path).copied()
    }

    /// The inode of the file at `path`, if it is one.
    pub fn name_of_path(&self, path: &Path) -> Option<u64> {
        match self.names.get(path) {
            Some(Entry::File(ino)) => Some(*ino),
            _ => None,
        }
    }

    /// Each file's name with its inode (what [`Image::renumbered`] takes
    /// back).
    pub fn inodes(&self) -> BTreeMap<PathBuf, u64> {
        self.names
            .iter()
            .filter_map(|(p, e)| match e {
                Entry::File(ino) => Some((p.clone(), *ino)),
                Entry::Dir => None,
            })
            .collect()
    }

    /// The same image, its files numbered as `inodes` says (an image read
    /// back from a copy, renumbered as the original's were): files
    /// `inodes` does not name keep theirs.
    pub fn renumbered(&self, inodes: &BTreeMap<PathBuf, u64>) -> Image {
        let mut image = Image { names: BTreeMap::new(), files: HashMap::new() };
        let mut new_of: HashMap<u64, u64> = HashMap::new();
        for (path, entry) in &self.names {
            let entry = match entry {
                Entry::Dir => Entry::Dir,
                Entry::File(ino) => {
                    let new = *new_of.entry(*ino).or_insert_with(|| inodes.get(path).copied().unwrap_or(*ino));
                    image.files.entry(new).or_insert_with(|| self.files[ino].clone());
                    Entry::File(new)
                }
            };
            image.names.insert(path.clone(), entry);
        }
        image
    }

    /// The name of the file `ino` (one of them), for traces.
    pub fn name_of(&self, ino: u64) -> Option<&Path> {
        self.names.iter().find(|(_, e)| **e == Entry::File(ino)).map(|(p, _)| p.as_path())
    }
}

/// What differs between a replayed file's bytes and the directory's.
fn bytes_difference(replayed: Option<&[u8]>, found: Option<&[u8]>) -> String {
    match (replayed, found) {
        (Some(a), Some(b)) if a.len() != b.len() => {
            format!("{} bytes replayed, {} in the directory", a.len(), b.len())
        }
        (Some(a), Some(b)) => {
            let at = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0);
            format!("the bytes differ from offset {at}")
        }
        (None, _) => "a directory in the replay, a file in the directory".to_string(),
        (_, None) => "a file in the replay, a directory in the directory".to_string(),
    }
}

/// `bytes` written at `off`, the file grown with zeros to reach it.
fn write_into(file: &mut Vec<u8>, off: usize, bytes: &[u8]) {
    let end = off + bytes.len();
    if file.len() < end {
        file.resize(end, 0);
    }
    file[off..end].copy_from_slice(bytes);
}

/// `fallocate(2)` on a file's bytes: allocation grows the size unless
/// `FALLOC_FL_KEEP_SIZE`; punching a hole or zeroing a range zeroes it.
fn fallocate(file: &mut Vec<u8>, mode: i32, off: u64, len: u64) {
    let end = (off + len) as usize;
    if mode & FALLOC_FL_KEEP_SIZE == 0 && file.len() < end {
        file.resize(end, 0);
    }
    if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
        let stop = end.min(file.len());
        let start = (off as usize).min(stop);
        file[start..stop].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn write(ino: u64, off: u64, len: u64) -> Call {
        Call::Write { ino, off, len, data_at: 0, sync: super::super::trace::WriteSync::None }
    }

    #[test]
    fn calls_change_names_and_bytes_as_the_kernel_would() {
        let mut image = Image::default();
        image.apply(&Call::Mkdir { path: p("d") }, &[], Kept::Whole);
        image.apply(&Call::Create { path: p("d/a"), ino: 5 }, &[], Kept::Whole);
        image.apply(&write(5, 2, 3), b"xyz", Kept::Whole);
        assert_eq!(image.contents()[&p("d/a")], Some(&b"\0\0xyz"[..]));
        image.apply(&write(5, 0, 4), b"abcd", Kept::FirstBytes(2));
        assert_eq!(image.contents()[&p("d/a")], Some(&b"abxyz"[..]), "a torn write keeps its first bytes");
        image.apply(&Call::Link { from: p("d/a"), to: p("b") }, &[], Kept::Whole);
        image.apply(&Call::Rename { from: p("d"), to: p("e") }, &[], Kept::Whole);
        assert_eq!(image.name_of(5), Some(Path::new("b")));
        assert!(image.contents().contains_key(&p("e/a")) && !image.contents().contains_key(&p("d/a")));
        image.apply(&Call::Truncate { ino: 5, size: 1 }, &[], Kept::Whole);
        assert_eq!(image.contents()[&p("b")], Some(&b"a"[..]), "both names are one file");
        image.apply(&Call::Fallocate { ino: 5, mode: 0, off: 0, len: 4 }, &[], Kept::Whole);
        image.apply(&Call::Fallocate { ino: 5, mode: 0x03, off: 0, len: 1 }, &[], Kept::Whole);
        assert_eq!(image.contents()[&p("b")], Some(&b"\0\0\0\0"[..]));
        image.apply(&Call::Unlink { path: p("b") }, &[], Kept::Whole);
        image.apply(&Call::Rmdir { path: p("e") }, &[], Kept::Whole);
        assert!(image.contents().is_empty());
    }

    #[test]
    fn an_image_written_out_reads_back_the_same() {
        let dir = std::env::temp_dir().join(format!("wbcache-image-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let mut image = Image::default();
        image.apply(&Call::Mkdir { path: p("d") }, &[], Kept::Whole);
        image.apply(&Call::Create { path: p("d/a"), ino: 5 }, &[], Kept::Whole);
        image.apply(&write(5, 0, 3), b"abc", Kept::Whole);
        image.apply(&Call::Link { from: p("d/a"), to: p("b") }, &[], Kept::Whole);
        image.write(&dir).unwrap();
        let back = Image::read(&dir).unwrap();
        assert_eq!(back.difference(&image), None);
        assert_eq!(fs::metadata(dir.join("b")).unwrap().ino(), fs::metadata(dir.join("d/a")).unwrap().ino());
        let mut other = image.clone();
        other.apply(&write(5, 1, 1), b"X", Kept::Whole);
        assert_eq!(back.difference(&other).unwrap(), "b: the bytes differ from offset 1");
        fs::remove_dir_all(&dir).unwrap();
    }
}
