//! The layer order, checked: every module of the library (`src/`), the C
//! ABI (`capi/src/`), the SQLite VFS (`sqlite/src/`), the preload
//! library (`preload/src/`) and the command line (`cli/src/`, the
//! `wbcache` binary) may import only modules below its own. Folders are
//! layers: each crate has a table per folder, the order of the folder's
//! children (files and subfolders), top first; the tables
//! below are the one place the order lives.
//! docs/architecture.md shows the same tables, and a test holds the two
//! together. A change that needs an upward import changes the design (and
//! these tables, in review), not this test.
//!
//! An import from module A to module B is checked in the table of the
//! folder nearest to both: there, the child of that folder that holds B
//! must be below the child that holds A. So `policy::memory` naming
//! `mapping::folio` is checked in the crate's table (`policy` above
//! `mapping`), and `policy::dirty::work` naming `policy::dirty` in that
//! folder's table (`work` above `mod`, the folder's own `mod.rs`). A new file inherits its
//! folder's place: it needs a place in its folder's table only to import a
//! sibling or be imported by one. A folder's `mod.rs` is above all its
//! children unless its table places `mod`; placed among them, it may use
//! only the children below it (it may re-export any), so that a `mod.rs`
//! and a child never use each other.
//!
//! What counts as an import: every `crate::…` and `super::…` path in the
//! module's non-test code (use declarations, paths in expressions and
//! types, grouped `use crate::{a, b::c}` trees), comments and string
//! literals left out; a folder's own file's relative paths to its
//! children (`fd::open`) too. A path resolves to the deepest module it
//! names, and through a re-export (`pub use`) to the module that defines
//! the item, so `crate::io::IoPriority` counts as naming `io::store`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::source::{code_only, matching_brace};

/// The library's layers: per folder, its children top first (`>` between
/// layers, `,` between the children of one layer).
const LIBRARY_LAYERS: &str = "
crate: api > writeback, readahead > inode > policy > mapping > stats > config > io > buf > guardian > base
api: cache > file > shared > watch
api::file: cursor > mod > options
writeback: worker > inflight, sync_range > domain, policy, mod
readahead: workers, window
inode: sync > pass > range_ops, read, write, size, folios, membership > mod > gate, errseq
inode::pass: ios, completion > chunk
policy: route, throttle, dropbehind > memory > dirty, evict > background_budget
policy::dirty: room, sync_waiter, work, bandwidth > mod > progress
mapping: mod > folio_index > folio
mapping::folio_index: mod > node
stats: mod > per_thread, device > histogram
io: threads, uring, sim > backend > fd, queue > store
io::sim: backend > store > attempt > disk > config, stats, rng
buf: user > pool > aligned > slab > map
guardian: mod > process > replay > board > arena
base: epoch > locks > sys
";

/// The C ABI's layers (capi/).
const CAPI_LAYERS: &str = "
crate: lifecycle, names, rw, file_ops, report > handles > failure
";

/// The SQLite VFS's layers.
const SQLITE_LAYERS: &str = "
crate: vfs > file > state > lock, function > shm, api
";

/// The preload library's layers (preload/).
const PRELOAD_LAYERS: &str = "
crate: aliases > stdio > fdops > meta > open, control, rw > lifetime > stats, handover > watch > record > state, table, streams > guard, errno, real
";

/// The command line's layers (cli/, the `wbcache` binary).
const CLI_LAYERS: &str = "
crate: runner > cli > help, install, run, crashtest, stat > workloads > svg > report > bench_worker > spec > engines > cgroup, measure, preload_library, progress, sys
bench_worker: job > offsets
crashtest: report > check > states > model > image > trace
install: uninstall > layout, pages > manifest, staging
engines: direct, kernel, preload, wbcache_file > engine > syscall > unsupported
report: device > table, targets > mod
runner: charts, child, site > interrupt, leftovers
stat: top > render > discover
workloads: advice, competing, custom, fio, fsync_under_load, hot_set, parallel_writeback, rand_read, rocksdb, small_overwrite, sqlite > external, plain > workload
workloads::fio: jobfile > mod > table > output
workloads::rand_read: readers > region
workloads::sqlite: db > job
";

/// Per folder (`crate` for the root, else its module path), its children's
/// layers, top first.
type Tables = BTreeMap<String, Vec<Vec<String>>>;

/// The tables of `text`: one line per folder, `folder: a, b > c > d`.
fn parse_tables(text: &str) -> Tables {
    let mut tables = Tables::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (folder, order) = line.split_once(": ").unwrap_or_else(|| panic!("`{line}`: no `folder:`"));
        let layers: Vec<Vec<String>> =
            order.split('>').map(|layer| layer.split(',').map(|m| m.trim().to_string()).collect()).collect();
        let mut seen = BTreeSet::new();
        for name in layers.iter().flatten() {
            assert!(seen.insert(name.clone()), "`{name}` has two places in `{folder}`'s table");
        }
        let previous = tables.insert(folder.trim().to_string(), layers);
        assert!(previous.is_none(), "folder `{folder}` has two tables");
    }
    tables
}

/// A crate's source tree and its tables.
struct Tree {
    root: PathBuf,
    tables: Tables,
}

fn trees() -> Vec<Tree> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    [
        ("src", LIBRARY_LAYERS),
        ("capi/src", CAPI_LAYERS),
        ("sqlite/src", SQLITE_LAYERS),
        ("preload/src", PRELOAD_LAYERS),
        ("cli/src", CLI_LAYERS),
    ]
    .into_iter()
    .map(|(dir, layers)| Tree { root: manifest.join(dir), tables: parse_tables(layers) })
    .collect()
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The module a file holds: `io/fd.rs` → `io::fd`, `io/mod.rs` → `io`,
/// `lib.rs` (or a binary's `main.rs`) → `crate`.
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        return "crate".to_string();
    }
    parts.join("::")
}

/// The paths of a use tree starting at `s` (just after `crate::` or
/// `super::`): `a::b`, `{a, b::{c, d}}`, `a::*`; each as its segments.
fn use_tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let s_trim = s.trim_start();
    let skipped = s.len() - s_trim.len();
    if let Some(inner) = s_trim.strip_prefix('{') {
        let mut paths = Vec::new();
        let mut at = 0;
        loop {
            let rest = &inner[at..];
            let lead = rest.len() - rest.trim_start_matches([' ', '\n', '\t', '\r', ',']).len();
            at += lead;
            if inner[at..].starts_with('}') || at >= inner.len() {
                return (paths, skipped + 1 + at + 1);
            }
            let (sub, used) = use_tree(&inner[at..]);
            paths.extend(sub);
            at += used.max(1);
        }
    }
    if s_trim.starts_with('*') {
        return (vec![vec!["*".to_string()]], skipped + 1); // a glob
    }
    let ident_len = s_trim.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s_trim.len());
    if ident_len == 0 {
        return (vec![Vec::new()], skipped);
    }
    let ident = s_trim[..ident_len].to_string();
    let after = &s_trim[ident_len..];
    if let Some(more) = after.strip_prefix("::") {
        let (subs, used) = use_tree(more);
        let paths = subs
            .into_iter()
            .map(|p| {
                let mut v = vec![ident.clone()];
                v.extend(p);
                v
            })
            .collect();
        return (paths, skipped + ident_len + 2 + used);
    }
    (vec![vec![ident]], skipped + ident_len)
}

/// What a tree's modules publish, so that a path through a re-export is
/// charged to the module that defines the item: each module's re-exports
/// (`pub use`) by the name they publish, its glob re-exports
/// (`pub use store::*`), and the names it defines itself.
#[derive(Default)]
struct Published {
    reexports: BTreeMap<(String, String), String>,
    globs: BTreeMap<String, Vec<String>>,
    defined: BTreeMap<String, BTreeSet<String>>,
}

impl Published {
    /// Reads every module's re-exports and definitions.
    fn of(sources: &[(String, String)], modules: &BTreeSet<String>) -> Published {
        let mut published = Published::default();
        for (module, code) in sources {
            published.defined.insert(module.clone(), defined_names(code));
            for statement in reexport_statements(code) {
                for segments in use_tree(statement).0 {
                    let Some((target, Some(item))) = resolve_path(module, &segments, modules) else { continue };
                    if item == "*" {
                        published.globs.entry(module.clone()).or_default().push(target);
                    } else if target != *module {
                        published.reexports.insert((module.clone(), item), target);
                    }
                }
            }
        }
        published
    }

    /// The module that defines `name`, as `module` publishes it.
    fn definer(&self, module: &str, name: &str) -> String {
        let mut at = module.to_string();
        // Re-export chains are short; the bound only keeps a cycle of
        // re-exports from looping.
        for _ in 0..8 {
            if let Some(target) = self.reexports.get(&(at.clone(), name.to_string())) {
                at = target.clone();
            } else if self.defined.get(&at).is_some_and(|names| names.contains(name)) {
                break;
            } else {
                match self.globs.get(&at).map(Vec::as_slice) {
                    Some([only]) => at = only.clone(),
                    _ => break,
                }
            }
        }
        at
    }
}

/// The trees of each `pub use …;` (any visibility) in `code`.
fn reexport_statements(code: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("pub") {
        let start = from + at;
        from = start + 3;
        let after = &code[from..];
        let visibility_end = if after.starts_with('(') { after.find(')').map_or(0, |e| e + 1) } else { 0 };
        let rest = after[visibility_end..].trim_start();
        let preceded_by_ident = code[..start].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        if let (Some(tree), false) = (rest.strip_prefix("use "), preceded_by_ident) {
            found.push(&tree[..tree.find(';').unwrap_or(tree.len())]);
        }
    }
    found
}

/// The names `code` defines at any depth (functions, types, traits,
/// constants, statics).
fn defined_names(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for keyword in ["fn ", "struct ", "enum ", "trait ", "const ", "static ", "type ", "union "] {
        for (at, _) in code.match_indices(keyword) {
            let starts_word = code[..at].ends_with(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            let name: String =
                code[at + keyword.len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if starts_word && !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The module a path written in `module` names and the item after it, if
/// any (`*` for a glob): `crate::…`, `super::…`, `self::…` or a child's
/// name first; `None` for any other (another crate's) path.
fn resolve_path(module: &str, segments: &[String], modules: &BTreeSet<String>) -> Option<(String, Option<String>)> {
    let parent = module.rsplit_once("::").map_or("crate".to_string(), |(p, _)| p.to_string());
    let child = |name: &str| if module == "crate" { name.to_string() } else { format!("{module}::{name}") };
    let (first, rest) = segments.split_first()?;
    let base = match first.as_str() {
        "crate" => "crate".to_string(),
        "super" => parent,
        "self" => module.to_string(),
        name if modules.contains(&child(name)) => child(name),
        _ => return None,
    };
    let (deepest, at) = deepest_module(&base, rest, modules);
    Some((deepest, rest.get(at).cloned()))
}

/// The deepest module `segments` name from `base` (`super` climbs one),
/// and the index of the first segment after it.
fn deepest_module(base: &str, segments: &[String], modules: &BTreeSet<String>) -> (String, usize) {
    let mut current = if base == "crate" { String::new() } else { base.to_string() };
    let (mut deepest, mut after) = (base.to_string(), 0);
    for (i, seg) in segments.iter().enumerate() {
        if seg == "super" {
            current = current.rsplit_once("::").map_or(String::new(), |(p, _)| p.to_string());
            deepest = if current.is_empty() { "crate".to_string() } else { current.clone() };
            after = i + 1;
            continue;
        }
        current = if current.is_empty() { seg.clone() } else { format!("{current}::{seg}") };
        if modules.contains(&current) {
            deepest = current.clone();
            after = i + 1;
        }
    }
    (deepest, after)
}

/// The modules `module`'s code names, each charged to the module that
/// defines what it names: the deepest module of the path, or, through a
/// re-export, the module the item comes from.
fn imports_of(module: &str, code: &str, modules: &BTreeSet<String>, published: &Published) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    // A module names others by `crate::`, `super::` and `self::` paths, and
    // a folder's own file names its children by relative paths too
    // (`fd::open`, `use queue::Reap`).
    let prefix = if module == "crate" { String::new() } else { format!("{module}::") };
    let children: Vec<String> = modules
        .iter()
        .filter_map(|m| m.strip_prefix(&prefix).filter(|rest| !prefix.is_empty() && !rest.contains("::")))
        .map(str::to_string)
        .collect();
    let keywords = ["crate", "super", "self"].into_iter().map(str::to_string).chain(children);
    for first in keywords {
        let keyword = format!("{first}::");
        let mut from = 0;
        while let Some(at) = code[from..].find(&keyword) {
            let start = from + at;
            from = start + keyword.len();
            let preceded_by_ident =
                code[..start].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
            if preceded_by_ident || (first == "self" && module == "crate") {
                continue;
            }
            for mut segments in use_tree(&code[from..]).0 {
                segments.insert(0, first.clone());
                let Some((deepest, item)) = resolve_path(module, &segments, modules) else { continue };
                let target = match item {
                    Some(item) => published.definer(&deepest, &item),
                    None => deepest,
                };
                if target != module {
                    found.insert(target);
                }
            }
        }
    }
    found
}

/// A module's path as its segments; the crate root has none.
fn segments(module: &str) -> Vec<&str> {
    if module == "crate" {
        Vec::new()
    } else {
        module.split("::").collect()
    }
}

/// A folder's name in the tables: `crate` for the root.
fn folder_name(segments: &[&str]) -> String {
    if segments.is_empty() {
        "crate".to_string()
    } else {
        segments.join("::")
    }
}

/// Every folder of `modules` and its children's names (`mod` for the
/// folder's own file, when it has one).
fn folders_of(modules: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in modules {
        let segs = segments(module);
        for depth in 0..segs.len() {
            folders.entry(folder_name(&segs[..depth])).or_default().insert(segs[depth].to_string());
        }
    }
    for (folder, children) in folders.iter_mut() {
        if folder != "crate" && modules.contains(folder) {
            children.insert("mod".to_string());
        }
    }
    folders
}

/// Where `child` stands in `folder`'s table: its layer, top first. A
/// folder's own `mod` stands above every layer unless the table places it;
/// a child the table does not name has no place.
fn rank(tables: &Tables, folder: &str, child: &str) -> Option<isize> {
    let layers = tables.get(folder);
    let placed = layers.and_then(|l| l.iter().position(|layer| layer.iter().any(|m| m == child)));
    match placed {
        Some(layer) => Some(layer as isize),
        None if child == "mod" => Some(-1),
        None => None,
    }
}

/// A table naming a folder or child that does not exist: one line each.
fn stale_table_entries(tree: &Tree, folders: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (folder, layers) in &tree.tables {
        let Some(children) = folders.get(folder) else {
            problems.push(format!("{}: the tables name folder `{folder}`, which has no files", tree.root.display()));
            continue;
        };
        for name in layers.iter().flatten().filter(|name| !children.contains(*name)) {
            problems.push(format!("{}: `{folder}`'s table names `{name}`, which has no file", tree.root.display()));
        }
    }
    problems
}

/// Why `module` may not import `target`, if it may not: the table of the
/// folder nearest to both must place `target`'s side below `module`'s.
fn import_problem(tables: &Tables, module: &str, target: &str, how: Naming) -> Option<String> {
    let (from, to) = (segments(module), segments(target));
    if to.is_empty() {
        return None; // the crate root
    }
    if to.starts_with(&from) {
        return descendant_problem(tables, module, target, how);
    }
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let folder = folder_name(&from[..common]);
    let side = |segs: &[&str]| segs.get(common).map_or("mod".to_string(), |s| s.to_string());
    let (from_child, to_child) = (side(&from), side(&to));
    let place = |child: &str| {
        rank(tables, &folder, child)
            .ok_or_else(|| format!("`{module}` imports `{target}`, but `{child}` has no place in `{folder}`'s table"))
    };
    let (from_rank, to_rank) = match (place(&from_child), place(&to_child)) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(e), _) | (_, Err(e)) => return Some(e),
    };
    (to_rank <= from_rank).then(|| {
        format!("`{module}` imports `{target}`: in `{folder}`'s table `{to_child}` is not below `{from_child}`")
    })
}

/// How a module names another: in code (a call, a type, a plain `use`),
/// or only in a re-export (`pub use`), which is how a parent publishes
/// its children's items.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Naming {
    Code,
    ReexportOnly,
}

/// Why `module` may not use its descendant `target`, if it may not: a
/// folder's own `mod.rs` stands above its children and uses them freely,
/// unless its table places `mod` lower, among them; then it may use only
/// the children below it (re-exports aside), or a child above it and it
/// would use each other.
fn descendant_problem(tables: &Tables, module: &str, target: &str, how: Naming) -> Option<String> {
    let mod_rank = rank(tables, module, "mod").expect("`mod` always has a place");
    if how == Naming::ReexportOnly || mod_rank < 0 {
        return None;
    }
    let child = segments(target)[segments(module).len()];
    let Some(child_rank) = rank(tables, module, child) else {
        return Some(format!("`{module}` uses `{target}`, but `{child}` has no place in `{module}`'s table"));
    };
    (child_rank <= mod_rank)
        .then(|| format!("`{module}` uses its child `{target}`: in `{module}`'s table `{child}` is not below `mod`"))
}

/// `code` without its re-exports (`pub use …;`, `pub(crate) use …;`).
fn without_reexports(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("pub") {
        let after = &rest[at + 3..];
        let visibility_end = if after.starts_with('(') { after.find(')').map_or(0, |e| e + 1) } else { 0 };
        let is_reexport = after[visibility_end..].trim_start().starts_with("use ")
            && !rest[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        if !is_reexport {
            out.push_str(&rest[..at + 3]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        rest = after.find(';').map_or("", |end| &after[end + 1..]);
    }
    out.push_str(rest);
    out
}

/// Every import of `tree` against its tables: one line per violation.
fn violations(tree: &Tree) -> Vec<String> {
    let files = rust_files(&tree.root);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&tree.root, f)).collect();
    let sources: Vec<(String, String)> =
        files.iter().map(|f| (module_of(&tree.root, f), code_only(&std::fs::read_to_string(f).unwrap()))).collect();
    let published = Published::of(&sources, &modules);
    let mut problems = stale_table_entries(tree, &folders_of(&modules));
    for (file, (module, code)) in files.iter().zip(&sources) {
        let in_code = imports_of(module, &without_reexports(code), &modules, &published);
        for target in imports_of(module, code, &modules, &published) {
            let how = if in_code.contains(&target) { Naming::Code } else { Naming::ReexportOnly };
            if let Some(problem) = import_problem(&tree.tables, module, &target, how) {
                let rel = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(file);
                problems.push(format!("{}: {problem}", rel.display()));
            }
        }
    }
    problems
}

#[test]
fn every_import_points_down_the_layer_table() {
    let problems: Vec<String> = trees().iter().flat_map(violations).collect();
    assert!(problems.is_empty(), "imports against the layer order:\n{}", problems.join("\n"));
}

/// The checker itself: an upward import, a grouped one, one in a comment,
/// a string or test code, and a module's use of its own child.
#[test]
fn the_checker_finds_upward_imports_and_only_those() {
    let modules: BTreeSet<String> =
        ["inode", "file", "io", "io::fd", "locks", "buf"].into_iter().map(String::from).collect();
    let code = code_only(
        "use crate::{buf::AlignedBuf, locks};\n// crate::file in a comment\nlet s = \"crate::file\";\n\
         fn f() -> crate::io::fd::FdStore { todo!() }\n#[cfg(test)]\nmod tests { use crate::file::File; }\n",
    );
    let found = imports_of("inode", &code, &modules, &Published::default());
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["buf", "io::fd", "locks"]);
    let code = code_only("use super::{BackingStore, IoOp};\nuse crate::inode::Inode;");
    let found = imports_of("io::fd", &code, &modules, &Published::default());
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["inode", "io"]);
}

/// docs/architecture.md shows the same tables: after a `<!-- layers:
/// library -->` (or `capi`, `sqlite`, ...) marker, a code block with one line
/// per folder, as the constants above write them.
#[test]
fn the_documented_layers_are_the_checked_ones() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md")).unwrap();
    for (title, layers) in [
        ("library", LIBRARY_LAYERS),
        ("capi", CAPI_LAYERS),
        ("sqlite", SQLITE_LAYERS),
        ("preload", PRELOAD_LAYERS),
        ("cli", CLI_LAYERS),
    ] {
        let marker = format!("<!-- layers: {title} -->");
        let start = doc.find(&marker).unwrap_or_else(|| panic!("docs/architecture.md has no `{marker}` block"));
        let block = &doc[start + marker.len()..];
        let block = &block[block.find("```").expect("a code block follows the marker") + 3..];
        let block = &block[block.find('\n').unwrap() + 1..];
        let block = &block[..block.find("```").expect("the code block ends")];
        assert_eq!(parse_tables(block), parse_tables(layers), "the {title} layers in docs/architecture.md");
    }
}

/// The problems `violations` finds in a tree of `files` (path, code) under
/// `tables`.
fn violations_in(files: &[(&str, &str)], tables: &str) -> Vec<String> {
    static TREES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = TREES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("wbcache-arch-{}-{n}", std::process::id()));
    for (path, code) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, code).unwrap();
    }
    let problems = violations(&Tree { root: dir.clone(), tables: parse_tables(tables) });
    std::fs::remove_dir_all(&dir).unwrap();
    problems
}

/// A deliberately added back edge is caught: `locks` (the bottom layer)
/// naming `inode`.
#[test]
fn a_back_edge_is_reported_with_its_file_and_path() {
    let files = [("inode.rs", "use crate::locks;\n"), ("locks.rs", "pub fn f() { crate::inode::g(); }\n")];
    let problems = violations_in(&files, "crate: inode > locks");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("locks.rs") && problems[0].contains("imports `inode`"), "{problems:?}");
}

/// A file new to a folder takes the folder's place against other folders
/// without a table entry; it needs one only for its siblings.
#[test]
fn a_new_file_inherits_its_folders_layer() {
    let tables = "crate: api > policy > base\npolicy: throttle > dirty";
    let tree = |fresh: &'static str| {
        let files = [
            ("api/mod.rs", "use crate::policy::fresh;\n"),
            ("policy/mod.rs", "pub mod dirty; pub mod fresh; pub mod throttle;\n"),
            ("policy/throttle.rs", "use crate::policy::dirty;\n"),
            ("policy/dirty.rs", "use crate::base::sys;\n"),
            ("policy/fresh.rs", fresh),
            ("base/sys.rs", ""),
        ];
        violations_in(&files, tables)
    };
    assert_eq!(tree("use crate::base::sys;\n"), Vec::<String>::new());
    let problems = tree("use crate::api::Cache;\n");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("in `crate`'s table `api` is not below `policy`"), "{problems:?}");
    let problems = tree("use super::dirty;\n");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("`fresh` has no place in `policy`'s table"), "{problems:?}");
}

/// A child naming its folder's own `mod.rs` needs the table to place
/// `mod` below it; a table naming a file that is gone is reported.
#[test]
fn a_folders_own_file_stands_above_its_children_unless_placed() {
    let files = [("io/mod.rs", "pub mod sim;\n"), ("io/sim.rs", "use crate::io::IoKind;\n")];
    let problems = violations_in(&files, "crate: io\nio: sim");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("in `io`'s table `mod` is not below `sim`"), "{problems:?}");
    assert_eq!(violations_in(&files, "crate: io\nio: sim > mod"), Vec::<String>::new());
    let problems = violations_in(&files, "crate: io\nio: sim > gone > mod\nold: x");
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("names `gone`, which has no file")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("folder `old`, which has no files")), "{problems:?}");
}

/// A folder's `mod.rs` placed among its children may not use the ones
/// above it (they use it: a cycle), though it may re-export them; unplaced,
/// it stands above all and uses them freely. `super::super` climbs two.
#[test]
fn a_folders_own_file_placed_low_uses_only_what_is_below_it() {
    let tree = |mod_rs: &'static str| {
        let files = [
            ("io/mod.rs", mod_rs),
            ("io/fd.rs", "use super::IoOp;\n"),
            ("io/sim/mod.rs", "pub mod disk;\n"),
            ("io/sim/disk.rs", "use super::super::IoOp;\n"),
            ("io/types.rs", ""),
        ];
        violations_in(&files, "crate: io\nio: sim, fd > mod > types")
    };
    assert_eq!(tree("pub mod fd; pub use fd::FdStore; use types::Op;\n"), Vec::<String>::new());
    let problems = tree("pub fn open() { fd::open() }\n");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("`io` uses its child `io::fd`: in `io`'s table `fd` is not below `mod`"),
        "{problems:?}"
    );
    let unplaced = [("io/mod.rs", "pub fn open() { fd::open() }\n"), ("io/fd.rs", "")];
    assert_eq!(violations_in(&unplaced, "crate: io\nio: fd"), Vec::<String>::new());
}

/// A path through a re-export is charged to the module that defines the
/// item: `super::Work`, published by `dirty/mod.rs` from `work.rs`, names
/// `work` (above `room`), not the folder's own file (placed below it).
/// Glob re-exports are followed too.
#[test]
fn a_path_through_a_reexport_names_the_defining_module() {
    let tree = |mod_rs: &'static str| {
        let files = [
            ("dirty/mod.rs", mod_rs),
            ("dirty/work.rs", "pub struct Work;\n"),
            ("dirty/room.rs", "use super::Work;\npub struct Room;\n"),
        ];
        violations_in(&files, "crate: dirty\ndirty: work > room > mod")
    };
    for mod_rs in
        ["pub mod room; pub mod work; pub use work::Work;\n", "pub mod room; pub mod work; pub use work::*;\n"]
    {
        let problems = tree(mod_rs);
        assert_eq!(problems.len(), 1, "{mod_rs}: {problems:?}");
        assert!(problems[0].contains("`dirty::room` imports `dirty::work`"), "{problems:?}");
    }
    assert_eq!(tree("pub mod room; pub mod work;\npub struct Work;\n"), Vec::<String>::new(), "defined in mod.rs");
}

#[test]
#[should_panic(expected = "`fd` has two places in `io`'s table")]
fn a_name_twice_in_one_table_is_refused() {
    parse_tables("io: fd > queue > fd");
}

#[test]
fn reexports_are_told_from_uses() {
    let code = "pub use fd::A;\npub(crate) use queue::{B, C};\nuse pass::D;\nfn f() { crate::x::y(); }\n";
    assert_eq!(without_reexports(code), "\n\nuse pass::D;\nfn f() { crate::x::y(); }\n");
}

/// The longest a non-test function may be, in lines from its `fn` to its
/// closing brace (TigerBeetle's rule: a function that fits on a screen is
/// read whole).
const FUNCTION_LINES_MAX: usize = 70;

/// Each non-test function of `code` longer than `FUNCTION_LINES_MAX`
/// lines: its name and length.
fn long_functions(code: &str) -> Vec<(String, usize)> {
    const QUALIFIERS: [&str; 7] = ["pub(crate) ", "pub(super) ", "pub ", "const ", "unsafe ", "extern \"\" ", "async "];
    let mut long = Vec::new();
    let mut line_start = 0;
    for line in code.split_inclusive('\n') {
        let mut rest = line.trim_start();
        while let Some(q) = QUALIFIERS.iter().find(|q| rest.starts_with(**q)) {
            rest = &rest[q.len()..];
        }
        if let Some(signature) = rest.strip_prefix("fn ") {
            let name: String = signature.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let from = line_start;
            let body = &code[from..];
            let (brace, semi) = (body.find('{'), body.find(';'));
            if let Some(close) = brace.filter(|&b| semi.is_none_or(|s| b < s)).and_then(|b| matching_brace(body, b)) {
                let lines = body[..close].matches('\n').count() + 1;
                if lines > FUNCTION_LINES_MAX {
                    long.push((name, lines));
                }
            }
        }
        line_start += line.len();
    }
    long
}

/// Every crate's source tree, for the length checks: the library, the C
/// library, the SQLite VFS, the CLI and the preload library.
fn source_roots() -> Vec<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    ["src", "capi/src", "capi/lib/src", "sqlite/src", "cli/src", "preload/src"]
        .iter()
        .map(|dir| manifest.join(dir))
        .collect()
}

/// The C ABI and the C library are crates of their own: the wbcache crate
/// builds an rlib only, has no build script and no `#[no_mangle]`
/// function, so a crate depending on it builds neither C library, gets no
/// files of theirs and exports none of the ABI; capi/ holds the ABI's
/// functions, and capi/lib/ builds both libraries, named libwbcache, by
/// re-exporting capi/ whole (it defines nothing of its own); both are
/// built by a plain `cargo build`.
#[test]
fn the_c_library_is_the_capi_crates() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let manifest = read("Cargo.toml");
    assert!(!manifest.contains("crate-type"), "the wbcache crate is an rlib only");
    assert!(!root.join("build.rs").exists(), "the wbcache crate has no build script");
    for file in rust_files(&root.join("src")) {
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        assert!(!code.contains("no_mangle"), "{}: the engine exports no C symbol", file.display());
    }
    let clib = read("capi/lib/Cargo.toml");
    assert!(clib.contains("name = \"wbcache\"") && clib.contains("crate-type = [\"cdylib\", \"staticlib\"]"), "{clib}");
    assert!(root.join("capi/lib/build.rs").is_file());
    let members = |key: &str| {
        let line = manifest.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key}"));
        line.contains("\"capi\"") && line.contains("\"capi/lib\"")
    };
    assert!(members("members") && members("default-members"), "capi is built by cargo build and cargo test");
    let code = code_only(&read("capi/lib/src/lib.rs"));
    assert_eq!(code.split_whitespace().collect::<Vec<_>>(), ["pub", "use", "wbcache_capi::*;"]);
}

#[test]
fn no_function_is_longer_than_seventy_lines() {
    let mut problems = Vec::new();
    for root in source_roots() {
        for file in rust_files(&root) {
            let code = code_only(&std::fs::read_to_string(&file).unwrap());
            for (name, lines) in long_functions(&code) {
                let rel = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(&file).display().to_string();
                problems.push(format!("{rel}: fn {name} is {lines} lines (at most {FUNCTION_LINES_MAX})"));
            }
        }
    }
    assert!(problems.is_empty(), "functions to split:\n{}", problems.join("\n"));
}

#[test]
fn the_length_check_measures_from_fn_to_its_closing_brace() {
    let body = "    let x = 1;\n".repeat(FUNCTION_LINES_MAX - 2);
    let fits = format!("pub(crate) fn fits() {{\n{body}}}\n");
    assert!(long_functions(&fits).is_empty(), "exactly {FUNCTION_LINES_MAX} lines fit");
    let over = format!("unsafe fn over() {{\n{body}    let y = \"{{\";\n}}\nfn decl();\n");
    assert_eq!(long_functions(&code_only(&over)), [("over".to_string(), FUNCTION_LINES_MAX + 1)]);
}

/// The longest a source file may be, in non-blank lines (comments
/// included) before its test module: a module longer than that holds more
/// than one concept.
const FILE_LINES_MAX: usize = 800;

/// Non-blank lines of `src` before its first top-level `#[cfg(test)]`
/// module (its tests or test helpers).
fn lines_before_tests(src: &str) -> usize {
    let lines: Vec<&str> = src.lines().collect();
    let tests_at = (0..lines.len())
        .find(|&i| {
            lines[i] == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|l| l.contains("mod ") && l.trim_end().ends_with('{'))
        })
        .unwrap_or(lines.len());
    lines[..tests_at].iter().filter(|l| !l.trim().is_empty()).count()
}

#[test]
fn the_file_check_counts_lines_before_the_test_module() {
    let src = "//! doc\n\nfn a() {}\n    #[cfg(test)]\n    fn b() {}\n#[cfg(test)]\npub(crate) mod util {\n}\n";
    assert_eq!(lines_before_tests(src), 4, "blank lines do not count, an inner cfg(test) item does");
    assert_eq!(lines_before_tests("fn a() {}\n#[cfg(test)]\nconst X: u8 = 1;\n"), 3, "only a module ends the count");
}

#[test]
fn no_source_file_is_longer_than_eight_hundred_lines() {
    let mut problems = Vec::new();
    for root in source_roots() {
        for file in rust_files(&root) {
            let lines = lines_before_tests(&std::fs::read_to_string(&file).unwrap());
            if lines > FILE_LINES_MAX {
                let rel = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(&file).display().to_string();
                problems.push(format!("{rel}: {lines} non-blank lines before its tests (at most {FILE_LINES_MAX})"));
            }
        }
    }
    assert!(problems.is_empty(), "files to split:\n{}", problems.join("\n"));
}

/// The libc wrappers a preloaded library may interpose (`LD_PRELOAD`,
/// wbcache's own `libwbcache_preload.so` among them). The engine makes
/// these calls only through `src/base/sys.rs` (direct system calls), and never
/// through `std::fs`, whose calls go through the same wrappers: its own I/O
/// must reach the kernel, not an interposer.
const INTERPOSABLE: &[&str] = &[
    "open",
    "open64",
    "openat",
    "creat",
    "close",
    "read",
    "write",
    "pread",
    "pread64",
    "pwrite",
    "pwrite64",
    "readv",
    "writev",
    "preadv",
    "pwritev",
    "preadv2",
    "pwritev2",
    "lseek",
    "lseek64",
    "fsync",
    "fdatasync",
    "ftruncate",
    "truncate",
    "fallocate",
    "posix_fallocate",
    "posix_fadvise",
    "readahead",
    "sync_file_range",
    "fcntl",
    "ioctl",
    "stat",
    "lstat",
    "fstat",
    "fstatat",
    "statx",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "mmap",
    "munmap",
    "madvise",
    "dup",
    "dup2",
    "dup3",
    "copy_file_range",
    "sendfile",
    "access",
];

/// Each call of an interposable libc wrapper or use of `std::fs` in
/// `code`: the name found.
fn interposable_calls(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("libc::") {
        let name: String = code[at + 6..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let called = code[at + 6 + name.len()..].starts_with('(');
        if called && INTERPOSABLE.contains(&name.as_str()) {
            found.push(format!("libc::{name}"));
        }
    }
    found.extend(code.match_indices("std::fs").map(|_| "std::fs".to_string()));
    found
}

#[test]
fn the_engine_makes_its_system_calls_directly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut problems = Vec::new();
    for file in rust_files(&root) {
        if module_of(&root, &file) == "base::sys" {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        for call in interposable_calls(&code) {
            let rel = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(&file).display().to_string();
            problems.push(format!("{rel}: {call} (use crate::base::sys)"));
        }
    }
    assert!(problems.is_empty(), "calls a preloaded library could interpose:\n{}", problems.join("\n"));
}

#[test]
fn the_interposable_check_finds_wrapper_calls_only() {
    let code = code_only(
        "let a = libc::pwrite(fd, p, n, o);\nlet b = libc::O_DIRECT;\nstd::fs::rename(x, y);\n// libc::open(\n",
    );
    assert_eq!(interposable_calls(&code), ["libc::pwrite", "std::fs"]);
}
