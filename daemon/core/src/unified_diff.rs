//! The one reading of a unified diff's file headers (`--- a/…` and
//! `+++ b/…`), shared by the permission check, which judges the files a
//! `patch` call names, and the `patch` tool, which applies it: both must
//! agree on which files a patch touches.

/// The two paths of a file header. `None` is `/dev/null` (the file is
/// created or deleted) or an empty path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHeader {
    /// The path on the `--- ` line.
    pub old: Option<String>,
    /// The path on the `+++ ` line.
    pub new: Option<String>,
}

/// The file header made of `old_line` and `new_line`, or `None` when they
/// are not one. A header is a `--- ` line directly followed by a `+++ `
/// line, anywhere in the text; each path ends at a tab (a timestamp may
/// follow) and loses surrounding quotes, and git's `a/` and `b/` prefixes
/// are removed when both sides carry them (`/dev/null` counts as either).
pub fn file_header(old_line: &str, new_line: &str) -> Option<FileHeader> {
    let old = header_path(old_line.strip_prefix("--- ")?);
    let new = header_path(new_line.strip_prefix("+++ ")?);
    let prefixed = old.as_deref().is_none_or(|p| p.starts_with("a/"))
        && new.as_deref().is_none_or(|p| p.starts_with("b/"));
    if !prefixed {
        return Some(FileHeader { old, new });
    }
    let strip = |p: Option<String>| p.map(|p| p[2..].to_string());
    Some(FileHeader {
        old: strip(old),
        new: strip(new),
    })
}

/// The path of a `---`/`+++` line: without a trailing timestamp or quotes.
fn header_path(rest: &str) -> Option<String> {
    let path = rest.split('\t').next().unwrap_or("").trim();
    let path = path
        .strip_prefix('"')
        .and_then(|p| p.strip_suffix('"'))
        .unwrap_or(path);
    (path != "/dev/null" && !path.is_empty()).then(|| path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(old: &str, new: &str) -> (Option<String>, Option<String>) {
        let h = file_header(old, new).unwrap();
        (h.old, h.new)
    }

    #[test]
    fn headers_lose_prefixes_timestamps_and_quotes() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            header("--- a/src/a.rs", "+++ b/src/a.rs"),
            (some("src/a.rs"), some("src/a.rs"))
        );
        assert_eq!(header("--- /dev/null", "+++ b/new"), (None, some("new")));
        assert_eq!(
            header("--- old.txt\t2020-01-01", "+++ /dev/null"),
            (some("old.txt"), None)
        );
        assert_eq!(
            header("--- \"a/sp ace\"", "+++ \"b/sp ace\""),
            (some("sp ace"), some("sp ace"))
        );
        // Only one side prefixed: both kept as written.
        assert_eq!(header("--- a/x", "+++ y"), (some("a/x"), some("y")));
        assert_eq!(file_header("--- x", "--- y"), None);
        assert_eq!(file_header("+++ x", "+++ y"), None);
        assert_eq!(file_header("---x", "+++ y"), None);
    }
}
