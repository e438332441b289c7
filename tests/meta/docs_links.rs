//! Every relative link in README.md and docs/*.md leads somewhere: its file
//! exists, and a `#anchor` into a Markdown file (or into the same one) names
//! one of its headings, by GitHub's rule for heading anchors.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, as paths relative to the root.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![PathBuf::from("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root()).expect("under the root").to_path_buf())
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

/// The text outside fenced code blocks, one entry per line (code lines
/// become empty, so line numbers stay right).
fn prose_lines(text: &str) -> Vec<String> {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return String::new();
            }
            if fenced {
                String::new()
            } else {
                line.to_string()
            }
        })
        .collect()
}

/// `line` without its inline code spans (a link inside backquotes is code).
fn without_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The targets of the inline links `[text](target)` of `line`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.to_string());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor for a heading's text: lowercase, inline-code backquotes
/// and every punctuation mark but `-` and `_` dropped, each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings; a repeated one gets `-1`,
/// `-2`, ... as on GitHub.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose_lines(text) {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    seen
}

/// What is wrong with `target` as a link from `doc`, if anything.
fn broken(doc: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let path = if file.is_empty() { doc.to_path_buf() } else { doc.parent().unwrap_or(Path::new("")).join(file) };
    let full = root().join(&path);
    if !full.exists() {
        return Some(format!("{} does not exist", path.display()));
    }
    let anchor = anchor?;
    if full.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if anchors(&text).contains(anchor) {
        None
    } else {
        Some(format!("{} has no heading with the anchor #{anchor}", path.display()))
    }
}

#[test]
fn every_relative_link_in_the_documentation_leads_somewhere() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(root().join(&doc)).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        for (n, line) in prose_lines(&text).iter().enumerate() {
            for target in link_targets(line) {
                checked += 1;
                if let Some(problem) = broken(&doc, &target) {
                    problems.push(format!("{}:{}: ({target}): {problem}", doc.display(), n + 1));
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} links found: is the parser still right?");
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
}

#[test]
fn anchors_follow_githubs_rule() {
    assert_eq!(slug("fsync under load"), "fsync-under-load");
    assert_eq!(slug("`wbcache bench` and the test suite"), "wbcache-bench-and-the-test-suite");
    assert_eq!(slug("`-w fio`"), "-w-fio");
    assert_eq!(slug("balance_dirty_pages"), "balance_dirty_pages");
    assert_eq!(
        slug("Semantics, reliability, and how wbcache differs"),
        "semantics-reliability-and-how-wbcache-differs"
    );
    let doc = "# A\n## Same\n```\n# not a heading\n```\n## Same\n";
    let want: HashSet<String> = ["a", "same", "same-1"].iter().map(|s| s.to_string()).collect();
    assert_eq!(anchors(doc), want);
    assert_eq!(link_targets("see [a](a.md#x) and `[b](b.md)`, [c](c.md \"title\")"), ["a.md#x", "c.md"]);
}
