//! `wbcache uninstall [--prefix DIR] [--destdir DIR]`: removes what the
//! install manifest under the prefix lists and nothing else: its files and
//! links, then the manifest, then the directories install created, deepest
//! first and only those that are empty. Without a manifest (nothing was
//! installed there, or by a version without one) it removes nothing.
//!
//! An entry already gone is reported and skipped, so an uninstall after an
//! interrupted one, or after an install that could not finish, completes
//! it. A file that cannot be removed stops the uninstall before the
//! manifest goes, so the manifest still lists what is left.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::layout::Places;
use super::manifest::{manifest_path, Manifest};

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
    let mut removal = Removal::default();
    for installed in manifest.files.iter().chain(&manifest.links) {
        let path = places.written(installed);
        match fs::remove_file(&path) {
            Ok(()) => removal.removed.push(path),
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
    }
    fs::remove_file(&manifest_file).map_err(|e| format!("cannot remove {}: {e}", manifest_file.display()))?;
    removal.removed.push(manifest_file);
    remove_directories(places, &manifest, &mut removal);
    Ok(removal)
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
