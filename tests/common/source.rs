//! Rust source read as text by the tests that check the tree
//! (`meta/architecture.rs`, `meta/exports.rs`): the code without comments, literals
//! and test items, and brace matching on it.

/// `src` without comments, string and char literals (their text could
/// look like paths) and without the items marked `#[cfg(test)]`.
pub fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                out.extend(std::iter::repeat_n('\n', src[i..end].matches('\n').count()));
                i = end;
            }
            b'r' if b.get(i + 1) == Some(&b'#') && b.get(i + 2) == Some(&b'"') => {
                let end = src[i + 3..].find("\"#").map_or(b.len(), |e| i + 3 + e + 2);
                out.push_str("\"\"");
                out.extend(std::iter::repeat_n('\n', src[i..end].matches('\n').count()));
                i = end;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(b.len());
                out.push_str("\"\"");
                out.extend(std::iter::repeat_n('\n', src[start..i].matches('\n').count()));
            }
            // A char literal ('x', '\n', '{'), not a lifetime ('a).
            b'\'' if b.get(i + 2) == Some(&b'\'') || (b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'')) => {
                i += if b[i + 1] == b'\\' { 4 } else { 3 };
                out.push_str("' '");
            }
            _ => {
                let ch = src[i..].chars().next().unwrap();
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    without_test_items(&out)
}

/// The index of the `}` that closes the `{` at `open` in `code`
/// (comments and literals already removed), if any.
pub fn matching_brace(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + k);
                }
            }
            _ => {}
        }
    }
    None
}

/// Removes each item after a `#[cfg(test)]` (through its `;` or its
/// balanced `{ … }`).
fn without_test_items(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let (brace, semi) = (item.find('{'), item.find(';'));
        let end = match (brace, semi) {
            (Some(b), Some(s)) if s < b => s + 1,
            (None, Some(s)) => s + 1,
            (Some(b), _) => matching_brace(item, b).map_or(item.len(), |close| close + 1),
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}
