//! `wbcache install [--prefix DIR] [--destdir DIR] [--from DIR]` installs
//! the whole product under a prefix, as `make install` would, and
//! `wbcache uninstall [--prefix DIR] [--destdir DIR]` removes it
//! (docs/install.md):
//!
//! - `bin/wbcache`, this binary (or `--from DIR/wbcache`);
//! - `lib/libwbcache_preload.so` (what `wbcache run` preloads; an installed
//!   `wbcache` finds it in `../lib`) and `lib/libwbcache_sqlite.so` (the
//!   SQLite extension);
//! - the C library: `lib/libwbcache.so.VERSION` with its links
//!   `libwbcache.so.0` (the SONAME) and `libwbcache.so`, `lib/libwbcache.a`,
//!   `include/wbcache.h` and `lib/pkgconfig/{wbcache,wbcache-static}.pc`;
//! - man pages (`share/man/man1/wbcache.1`, `wbcache-SUBCOMMAND.1`) and
//!   bash, zsh and fish completions, generated from the `clap::Command`
//!   the crate root passes in (this module does not know the command line);
//! - `share/wbcache/install-manifest`: what the install placed (each
//!   file with a digest of its content), and the directories it created,
//!   which `wbcache uninstall` removes.
//!
//! Every build output is found and every earlier install checked before
//! anything is written; then everything is staged beside its final name
//! and renamed over it (a rename that fails is undone with those before
//! it), so a failure leaves the prefix as it was, and a file replaced by a
//! reinstall stays whole for the programs using it. `--destdir` (or
//! `DESTDIR`) writes the tree under a directory, for packaging, while the
//! files (pkg-config, manifest) still name the prefix; its manifest lists
//! no directory but wbcache's own, as the others stand for the system's.
//! Every failure is one line and exit status 2.

mod layout;
mod manifest;
mod pages;
mod staging;
mod uninstall;

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use clap::Args;

use layout::{product_items, BuildOutputs, Places};
use manifest::{manifest_path, Digest, Manifest};
use staging::{is_staged_name, Content, Item, Left, Order, Staging};

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// Installation prefix: PREFIX/bin, PREFIX/lib, PREFIX/include and
    /// PREFIX/share; must be absolute.
    #[arg(long, value_name = "DIR", default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// Write the files under DIR (DIR/PREFIX/...), for packaging; they
    /// still name PREFIX (default: $DESTDIR, if set).
    #[arg(long, value_name = "DIR")]
    pub destdir: Option<PathBuf>,
    /// Directory holding the build's outputs: libwbcache.so,
    /// libwbcache.a, the .pc files, libwbcache_preload.so,
    /// libwbcache_sqlite.so and wbcache (default: this binary's
    /// directory; without a wbcache there, this binary).
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct UninstallArgs {
    /// The prefix wbcache was installed under.
    #[arg(long, value_name = "DIR", default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// The DIR the install wrote under (default: $DESTDIR, if set).
    #[arg(long, value_name = "DIR")]
    pub destdir: Option<PathBuf>,
}

/// Installs; `command` is the command line's clap definition, for the man
/// pages and completions. Returns the exit status: 0, or 2 with nothing
/// installed.
pub fn run(args: InstallArgs, command: clap::Command) -> i32 {
    match install(&args, command) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            0
        }
        Err(message) => {
            eprintln!("wbcache install: {message}");
            2
        }
    }
}

/// Uninstalls; returns the exit status: 0 (a file changed since the
/// install is kept, and named), or 2 with nothing removed when there is no
/// manifest or it lists a path reached through a symbolic link, or when a
/// listed file cannot be removed.
pub fn run_uninstall(args: UninstallArgs) -> i32 {
    let removal = Places::new(&args.prefix, args.destdir.as_deref()).and_then(|places| uninstall::uninstall(&places));
    match removal {
        Ok(removal) => {
            for note in removal.notes {
                eprintln!("wbcache uninstall: {note}");
            }
            for path in removal.removed {
                println!("{}", path.display());
            }
            0
        }
        Err(message) => {
            eprintln!("wbcache uninstall: {message}");
            2
        }
    }
}

/// Checks, stages and commits the install; returns the paths written.
fn install(args: &InstallArgs, command: clap::Command) -> Result<Vec<PathBuf>, String> {
    let places = Places::new(&args.prefix, args.destdir.as_deref())?;
    let outputs = BuildOutputs::find(args.from.as_deref())?;
    let mut items = product_items(places.prefix(), &outputs)?;
    items.extend(pages::man_pages(command.clone(), places.prefix())?);
    items.extend(pages::completions(command, places.prefix()));
    let earlier = earlier_install(&places, &items)?;
    let mut staging = Staging::default();
    if let Err(message) = stage(&mut staging, &places, &items, earlier) {
        return Err(match staging.abandon() {
            Ok(()) => message,
            Err(left) => format!("{message} {left}"),
        });
    }
    staging.commit().map_err(|failure| match failure.left {
        Left::AsItWas => failure.message,
        Left::Partial => format!(
            "{} (`wbcache uninstall {}` removes what the manifest in place lists)",
            failure.message,
            places.options()
        ),
    })?;
    let mut written: Vec<PathBuf> = items.iter().map(|item| places.written(&item.path)).collect();
    written.push(places.written(&manifest_path(places.prefix())));
    Ok(written)
}

/// The directories (as written) the items and the manifest go in.
fn directories(places: &Places, items: &[Item]) -> BTreeSet<PathBuf> {
    let manifest_file = manifest_path(places.prefix());
    let paths = items.iter().map(|item| &item.path).chain([&manifest_file]);
    paths.filter_map(|path| path.parent()).map(|dir| places.written(dir)).collect()
}

/// The manifest of a complete earlier install under `places` (`None`:
/// there is none). An install that did not finish is refused: a staged
/// file left beside the final names, or a manifest listing a file that
/// is gone; so is a directory where a file goes.
fn earlier_install(places: &Places, items: &[Item]) -> Result<Option<Manifest>, String> {
    let manifest_file = manifest_path(places.prefix());
    for dir in directories(places, items) {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        if let Some(left) = entries.flatten().find(|e| is_staged_name(&e.file_name())) {
            return Err(format!(
                "a partial earlier install: {} was left by an install that did not finish (remove it, then install again)",
                left.path().display()
            ));
        }
    }
    // A rename cannot replace a directory: refused now, not halfway.
    if let Some(item) =
        items.iter().find(|item| places.written(&item.path).symlink_metadata().is_ok_and(|m| m.is_dir()))
    {
        return Err(format!("{} is a directory; a file is installed there", places.written(&item.path).display()));
    }
    let Some(manifest) = uninstall::read_manifest(places)? else { return Ok(None) };
    let gone = manifest.files.keys().chain(&manifest.links).find(|p| fs::symlink_metadata(places.written(p)).is_err());
    if let Some(gone) = gone {
        return Err(format!(
            "a partial earlier install: {} lists {}, which is missing (`wbcache uninstall {}` removes the rest; then install again)",
            places.written(&manifest_file).display(),
            places.written(gone).display(),
            places.options()
        ));
    }
    Ok(Some(manifest))
}

/// Creates the missing directories and stages every item, then the
/// manifest: it lists the items (each file with the digest of what was
/// staged), the directories created and what an `earlier` install listed.
fn stage(staging: &mut Staging, places: &Places, items: &[Item], earlier: Option<Manifest>) -> Result<(), String> {
    for dir in directories(places, items) {
        staging.make_dir(&dir)?;
    }
    let mut manifest = Manifest::new(places.prefix());
    for item in items {
        let staged = staging.stage(&places.written(&item.path), &item.content, Order::Next)?;
        if item.is_link() {
            manifest.links.insert(item.path.clone());
            continue;
        }
        // Read back from what was written, which is what uninstall compares.
        let digest = Digest::of_file(&staged).map_err(|e| format!("cannot read back {}: {e}", staged.display()))?;
        manifest.files.insert(item.path.clone(), Some(digest));
    }
    manifest.dirs.extend(listed_directories(places, staging.created()));
    if let Some(earlier) = earlier {
        manifest.merge(earlier);
    }
    // Renamed first: an install cut short after it is seen as partial.
    let manifest_file = places.written(&manifest_path(places.prefix()));
    staging.stage(&manifest_file, &Content::Bytes(manifest.render()), Order::First)?;
    Ok(())
}

/// The directories (as installed) of those `created` that the manifest
/// lists. With a `DESTDIR`, wbcache's own only (`PREFIX/share/wbcache`):
/// a staged tree starts empty, so every directory in it was created, but
/// `/usr`, `/usr/local/bin`... stand for the target system's, which an
/// uninstall there must never remove.
fn listed_directories(places: &Places, created: &[PathBuf]) -> Vec<PathBuf> {
    let own = manifest_path(places.prefix());
    let own = own.parent().unwrap_or(places.prefix());
    let installed = created.iter().filter_map(|dir| places.installed(dir));
    installed.filter(|dir| places.destdir().is_none() || dir.starts_with(own)).collect()
}
