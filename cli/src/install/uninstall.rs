//! `wbcache uninstall [--prefix DIR] [--destdir DIR]`: removes what the
//! install manifest under the prefix lists and nothing else: its files and
//! links, then the manifest, then the directories install created, deepest
//! first and only those that are empty. Without a manifest (nothing was
//! installed there, or by a version without one) it removes nothing.
//!
//! Before anything is removed, every entry is checked to be reached from
//! the install root (`DESTDIR/PREFIX`) through real directories: a
//! manifest read as text alone could list `PREFIX/x/etc/shadow` with
//! `PREFIX/x` a link to `/`, which a root uninstall would then remove. One
//! that is not refuses the whole uninstall. A listed link is unlinked
//! itself, never what it names. A file whose content is not what install
//! wrote (its digest in the manifest) was replaced since: it is kept and
//! named, and the rest removed.
//!
//! An entry already gone is reported and skipped, so an uninstall after an
//! interrupted one, or after an install that could not finish, completes
//! it. A file that cannot be removed stops the uninstall before the
//! manifest goes, so the manifest still lists what is left.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::layout::Places;
use super::manifest::{manifest_path, Digest, Manifest};

/// What an uninstall did: the paths removed (as written) and the notes
/// about entries already gone or directories kept.
#[derive(Debug, Default)]
pub struct Removal {
    pub removed: Vec<PathBuf>,
    pub notes: Vec<String>,
}

/// Reads the manifest of `places`: `Ok(None)` when there is none.
pub fn read_manifest(places: &Places) -> Result<Option<Manifest>, String> {
    let path = places.written(&manifest_path(places.prefix()));
    match fs::read(&path) {
        Ok(text) => Manifest::parse(&text, places.prefix())
            .map(Some)
            .map_err(|why| format!("the install manifest {} cannot be read: {why}", path.display())),
        // Under a prefix that is not a directory there is no manifest either.
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(format!("the install manifest {}: {e}", path.display())),
    }
}

/// Removes what the manifest of `places` lists.
pub fn uninstall(places: &Places) -> Result<Removal, String> {
    let manifest_file = places.written(&manifest_path(places.prefix()));
    let Some(manifest) = read_manifest(places)? else {
        return Err(format!(
            "no install manifest at {}: nothing to remove (was wbcache installed with {}?)",
            manifest_file.display(),
            places.options()
        ));
    };
    refuse_links_on_the_way(places, &manifest)?;
    let mut removal = Removal::default();
    for (installed, digest) in &manifest.files {
        let path = places.written(installed);
        match replaced_since(&path, *digest) {
            Some(why) => removal.notes.push(format!("{} is kept: {why}", path.display())),
            None => remove_entry(&path, &manifest_file, &mut removal)?,
        }
    }
    for installed in &manifest.links {
        // `unlink` removes the link itself, never the file it names.
        remove_entry(&places.written(installed), &manifest_file, &mut removal)?;
    }
    fs::remove_file(&manifest_file).map_err(|e| format!("cannot remove {}: {e}", manifest_file.display()))?;
    removal.removed.push(manifest_file);
    remove_directories(places, &manifest, &mut removal);
    Ok(removal)
}

/// Removes the file or link `path`; an error says that `manifest_file`
/// still lists what is left.
fn remove_entry(path: &Path, manifest_file: &Path, removal: &mut Removal) -> Result<(), String> {
    match fs::remove_file(path) {
        Ok(()) => removal.removed.push(path.to_path_buf()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            removal.notes.push(format!("{} was already gone", path.display()));
        }
        Err(e) => {
            return Err(format!(
                "cannot remove {}: {e} (the manifest {} still lists what is left)",
                path.display(),
                manifest_file.display()
            ))
        }
    }
    Ok(())
}

/// Why the file at `path` is not the one install wrote (`None`: it is, it
/// is gone, or the manifest has no `digest` for it, as an earlier
/// version's does not): anything but a regular file, a file that cannot
/// be read, or other content.
fn replaced_since(path: &Path, digest: Option<Digest>) -> Option<String> {
    let digest = digest?;
    match fs::symlink_metadata(path) {
        Err(_) => return None,
        Ok(meta) if !meta.is_file() => return Some("it is no longer the regular file wbcache installed".to_string()),
        Ok(_) => {}
    }
    match Digest::of_file(path) {
        Ok(now) if now == digest => None,
        Ok(_) => Some("its content changed since wbcache installed it".to_string()),
        Err(e) => Some(format!("its content cannot be compared with what wbcache installed ({e})")),
    }
}

/// Refuses the uninstall unless every entry under the prefix (and the
/// manifest) is reached from the install root through real directories
/// only, the root resolved first: the parent of each, resolved, must be
/// the same path under the resolved root. What lies above the root (the
/// prefix and `DESTDIR` named) may be a link; the directories install
/// created above the prefix are removed by that path, as created.
fn refuse_links_on_the_way(places: &Places, manifest: &Manifest) -> Result<(), String> {
    let root = places.written(places.prefix());
    let real_root =
        fs::canonicalize(&root).map_err(|e| format!("cannot resolve the install root {}: {e}", root.display()))?;
    let manifest_file = manifest_path(places.prefix());
    let dirs = manifest.dirs.iter().filter(|dir| dir.starts_with(places.prefix()) && *dir != places.prefix());
    let entries = manifest.files.keys().chain(&manifest.links).chain(dirs).chain([&manifest_file]);
    for installed in entries {
        let written = places.written(installed);
        if let Some(why) = written.parent().and_then(|parent| link_on_the_way(&root, &real_root, parent)) {
            return Err(format!(
                "the install manifest lists {}, {why}: nothing is removed (a manifest under {} must name only its \
                 own directories)",
                written.display(),
                root.display()
            ));
        }
    }
    Ok(())
}

/// Why `dir`, a directory under `root`, is not reached through real
/// directories (`None`: it is). Its deepest part that exists is resolved
/// (a missing entry has nothing to remove; a dangling link is not missing).
fn link_on_the_way(root: &Path, real_root: &Path, dir: &Path) -> Option<String> {
    let mut existing = dir;
    while existing != root && fs::symlink_metadata(existing).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        existing = existing.parent()?;
    }
    let Ok(relative) = existing.strip_prefix(root) else {
        return Some(format!("outside the install root {}", root.display()));
    };
    match fs::canonicalize(existing) {
        Ok(real) if real == real_root.join(relative) => None,
        Ok(real) => Some(format!("reached through a symbolic link ({} is {})", existing.display(), real.display())),
        Err(e) => Some(format!("reached through {}, which cannot be resolved ({e})", existing.display())),
    }
}

/// Removes the directories install created, children before parents,
/// each only if it is empty.
fn remove_directories(places: &Places, manifest: &Manifest, removal: &mut Removal) {
    // A child sorts after its parent: reversed, children come first.
    for installed in manifest.dirs.iter().rev() {
        let path = places.written(installed);
        match fs::remove_dir(&path) {
            Ok(()) => removal.removed.push(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) if is_not_empty(&path) => {
                removal.notes.push(format!("{} is kept: it holds files wbcache did not install", path.display()));
            }
            Err(e) => removal.notes.push(format!("{} is kept: {e}", path.display())),
        }
    }
}

fn is_not_empty(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
}
