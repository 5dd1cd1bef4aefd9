//! Paths for path rules: lexical normalisation, containment, globs, and the
//! files a patch touches. No file system access: symbolic links are
//! resolved by the runtime and arrive in `Policy::resolved_paths`.

use globset::{GlobBuilder, GlobMatcher};

use crate::unified_diff::file_header;

/// Resolves `.` and `..` of an absolute path without touching the file
/// system; `..` above the root stays at the root. `None` for a relative
/// path.
pub(crate) fn normalize(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// `raw` made absolute against `cwd` and normalised, or `None` when that
/// cannot be done without the file system or the environment (`~`), or
/// when `cwd` is not absolute.
pub(crate) fn absolute(raw: &str, cwd: &str) -> Option<String> {
    if raw.is_empty() || raw.starts_with('~') {
        return None;
    }
    if raw.starts_with('/') {
        return normalize(raw);
    }
    normalize(&format!("{}/{raw}", normalize(cwd)?))
}

/// Whether the normalised absolute `path` is `dir` or below it.
pub(crate) fn is_inside(path: &str, dir: &str) -> bool {
    let Some(dir) = normalize(dir) else {
        return false;
    };
    if dir == "/" {
        return true;
    }
    path == dir
        || path
            .strip_prefix(dir.as_str())
            .is_some_and(|rest| rest.starts_with('/'))
}

/// `path` relative to `dir` when inside it (`""` for `dir` itself).
pub(crate) fn relative_to<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    let dir = normalize(dir)?;
    if !is_inside(path, &dir) {
        return None;
    }
    if dir == "/" {
        return Some(path.trim_start_matches('/'));
    }
    Some(path[dir.len()..].trim_start_matches('/'))
}

/// Checks a path rule's pattern: a valid glob, no `..` (a relative rule
/// must not reach out of the working directory), no `~` (nothing expands
/// it here).
pub(crate) fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.starts_with('~') {
        return Err("`~` is not expanded in path rules; write the absolute path".to_string());
    }
    if pattern.split('/').any(|c| c == "..") {
        return Err(
            "`..` is not allowed in path rules; write an absolute pattern for files outside \
             the working directory"
                .to_string(),
        );
    }
    build_glob(&anchor(pattern, "/")).map(|_| ())
}

/// Whether `pattern` is absolute (not anchored at the working directory).
pub(crate) fn is_absolute_pattern(pattern: &str) -> bool {
    pattern.starts_with('/')
}

/// The absolute glob of a path rule's pattern: relative ones are anchored
/// at `cwd` (its glob characters escaped). `./` and `.` components are
/// dropped; a trailing `/` means everything below.
fn anchor(pattern: &str, cwd: &str) -> String {
    let mut glob = if is_absolute_pattern(pattern) {
        String::new()
    } else {
        globset::escape(cwd.trim_end_matches('/'))
    };
    for part in pattern.split('/') {
        if part.is_empty() || part == "." {
            continue;
        }
        glob.push('/');
        glob.push_str(part);
    }
    if pattern.ends_with('/') {
        glob.push_str("/**");
    }
    if glob.is_empty() {
        glob.push('/');
    }
    glob
}

fn build_glob(glob: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| e.kind().to_string())
}

/// A path rule's pattern, compiled against a working directory.
#[derive(Debug)]
pub(crate) struct PathGlob {
    matcher: Option<GlobMatcher>,
    /// Relative to the working directory.
    pub relative: bool,
}

impl PathGlob {
    pub(crate) fn new(pattern: &str, cwd: &str) -> PathGlob {
        let relative = !is_absolute_pattern(pattern);
        let usable = check_pattern(pattern).is_ok() && (!relative || normalize(cwd).is_some());
        let matcher = usable
            .then(|| build_glob(&anchor(pattern, &normalize(cwd).unwrap_or_default())).ok())
            .flatten();
        PathGlob { matcher, relative }
    }

    /// Whether the normalised absolute `path` matches; a directory that is
    /// searched also matches `dir/**`-style patterns.
    pub(crate) fn matches(&self, path: &str, is_search_root: bool) -> bool {
        let Some(m) = &self.matcher else {
            return false;
        };
        m.is_match(path)
            || (is_search_root && m.is_match(format!("{}/", path.trim_end_matches('/'))))
    }
}

/// Splits a glob pattern (the `glob` tool's) into the directory it starts
/// in and the rest, matched below that directory: the directory is the
/// leading components without glob characters (`..` included, `./`
/// dropped; the last component always goes to the rest), `.` when there
/// are none. `../x/*.rs` → (`../x`, `*.rs`); `src/**/*.rs` → (`src`,
/// `**/*.rs`); `/abs/*` → (`/abs`, `*`); `*.rs` → (`.`, `*.rs`).
///
/// The tool searches that directory and the policy judges it, so that both
/// read the pattern the same way.
pub fn split_glob(pattern: &str) -> (String, String) {
    let pattern = pattern.trim();
    let absolute = pattern.starts_with('/');
    let parts: Vec<&str> = pattern
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let literal = parts
        .iter()
        .take(parts.len().saturating_sub(1))
        .take_while(|p| !p.contains(['*', '?', '[', '{', '\\']))
        .count();
    let dir = parts[..literal].join("/");
    let dir = match (absolute, dir.is_empty()) {
        (true, _) => format!("/{dir}"),
        (false, true) => ".".to_string(),
        (false, false) => dir,
    };
    (dir, parts[literal..].join("/"))
}

/// The directory a `glob` call searches, as the model wrote it: its
/// `path` (the working directory by default) joined with the directory
/// its pattern starts in (see [`split_glob`]).
pub fn glob_search_dir(path: Option<&str>, pattern: &str) -> String {
    let (dir, _) = split_glob(pattern);
    let path = path.filter(|p| !p.trim().is_empty()).unwrap_or(".");
    if dir.starts_with('/') {
        dir
    } else if dir == "." {
        path.to_string()
    } else if path == "." {
        dir
    } else {
        format!("{}/{dir}", path.trim_end_matches('/'))
    }
}

/// The paths a unified diff touches, as written in its `--- `/`+++ `
/// headers (read by [`crate::unified_diff::file_header`], the patch tool's
/// reading: `/dev/null` left out), each once, in order. Both the old and
/// the new path count.
pub fn patch_paths(patch: &str) -> Vec<String> {
    let lines: Vec<&str> = patch.lines().collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        let Some(header) = file_header(lines[i], lines[i + 1]) else {
            i += 1;
            continue;
        };
        for path in [header.old, header.new].into_iter().flatten() {
            if !out.contains(&path) {
                out.push(path);
            }
        }
        i += 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_patterns_split_at_their_first_wildcard() {
        let split = |p: &str| split_glob(p);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(split("*.rs"), pair(".", "*.rs"));
        assert_eq!(split("./src/*.rs"), pair("src", "*.rs"));
        assert_eq!(split("src/**/*.rs"), pair("src", "**/*.rs"));
        assert_eq!(split("**/x/*.rs"), pair(".", "**/x/*.rs"));
        assert_eq!(split("../out/*"), pair("../out", "*"));
        assert_eq!(split("sub/../../out/*.txt"), pair("sub/../../out", "*.txt"));
        assert_eq!(split("/abs/dir/*.rs"), pair("/abs/dir", "*.rs"));
        assert_eq!(split("/x"), pair("/", "x"));
        assert_eq!(split("a//b/c.txt"), pair("a/b", "c.txt"));
        assert_eq!(split("a/\\*/b"), pair("a", "\\*/b"));
        assert_eq!(split("src/"), pair(".", "src"));
        assert_eq!(glob_search_dir(None, "*.rs"), ".");
        assert_eq!(glob_search_dir(Some("src"), "*.rs"), "src");
        assert_eq!(glob_search_dir(Some("src/"), "../x/*"), "src/../x");
        assert_eq!(glob_search_dir(None, "../x/*"), "../x");
        assert_eq!(glob_search_dir(Some("src"), "/etc/*"), "/etc");
        assert_eq!(glob_search_dir(Some(""), "a/*"), "a");
    }

    #[test]
    fn normalises_lexically() {
        assert_eq!(normalize("/a/./b/../c//d/").as_deref(), Some("/a/c/d"));
        assert_eq!(normalize("/../../etc").as_deref(), Some("/etc"));
        assert_eq!(normalize("a/b"), None);
        assert_eq!(
            absolute("../../etc/passwd", "/w/p").as_deref(),
            Some("/etc/passwd")
        );
        assert_eq!(
            absolute("src/a.rs", "/w/p").as_deref(),
            Some("/w/p/src/a.rs")
        );
        assert_eq!(absolute("/tmp/x", "/w/p").as_deref(), Some("/tmp/x"));
        assert_eq!(absolute("~/x", "/w/p"), None);
        assert_eq!(absolute("x", "relative"), None);
    }

    #[test]
    fn containment() {
        assert!(is_inside("/w/p", "/w/p"));
        assert!(is_inside("/w/p/a", "/w/p/"));
        assert!(!is_inside("/w/project", "/w/p"));
        assert!(is_inside("/anything", "/"));
        assert_eq!(relative_to("/w/p/src/a.rs", "/w/p"), Some("src/a.rs"));
        assert_eq!(relative_to("/w/p", "/w/p"), Some(""));
        assert_eq!(relative_to("/w/q", "/w/p"), None);
    }

    #[test]
    fn globs_anchor_at_cwd() {
        let g = PathGlob::new("src/**", "/w/p");
        assert!(g.relative);
        assert!(g.matches("/w/p/src/a.rs", false));
        assert!(g.matches("/w/p/src/x/y.rs", false));
        assert!(!g.matches("/w/p/src", false));
        assert!(g.matches("/w/p/src", true));
        assert!(!g.matches("/w/p/other/a.rs", false));
        let g = PathGlob::new("*.md", "/w/p");
        assert!(g.matches("/w/p/README.md", false));
        assert!(!g.matches("/w/p/docs/a.md", false));
        let g = PathGlob::new("./docs/", "/w/p");
        assert!(g.matches("/w/p/docs/a.md", false));
        // Glob characters in the working directory are literal.
        let g = PathGlob::new("a.rs", "/w/[p]");
        assert!(g.matches("/w/[p]/a.rs", false));
        assert!(!g.matches("/w/p/a.rs", false));
        let g = PathGlob::new("/etc/**", "/w/p");
        assert!(!g.relative);
        assert!(g.matches("/etc/passwd", false));
    }

    #[test]
    fn patch_headers() {
        let patch = "diff --git a/x b/x\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1 +1 @@\n-a\n+b\n\
                     --- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+x\n\
                     --- old.txt\t2020-01-01\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n\
                     --- \"a/sp ace\"\n+++ \"b/sp ace\"\n";
        assert_eq!(
            patch_paths(patch),
            ["src/a.rs", "new.txt", "old.txt", "sp ace"]
        );
        assert_eq!(patch_paths("--- x\n+++ y\n"), ["x", "y"]);
        assert!(patch_paths("no headers").is_empty());
    }
}
