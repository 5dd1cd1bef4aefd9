//! `glob`: find files by name pattern.
//!
//! Results come newest first: the files the user is working on are the
//! recently modified ones, and those are what the model usually looks for.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use agentd_core::ToolSpec;
use agentd_core::permission::{glob_search_dir, split_glob};
use agentd_core::tools::Tool;
use globset::GlobBuilder;
use ignore::WalkState;
use serde::Deserialize;
use serde_json::{Value, json};

use super::walk::{self, WalkOptions};
use super::{ToolContext, ToolError, ToolOutput, input, paths};

/// Files listed before the list is cut short.
const MAX_RESULTS: usize = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    pattern: String,
    path: Option<String>,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "pattern": {"type": "string"},
            "path": {"type": "string", "description": "Directory to search (default: working directory)"}
        },
        "required": ["pattern"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::Glob.name().to_string(),
        description: "Find files by glob pattern, e.g. `**/*.rs` or `src/**/test_*.py` (relative \
                      to path; a pattern without `/` matches file names at any depth). Honours \
                      .gitignore. Newest first."
            .to_string(),
        input_schema: schema(),
    }
}

pub(crate) fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let input: Input = input::parse(Tool::Glob.name(), &schema(), input)?;
    let (root, root_shown) = walk::search_root(ctx, input.path.as_deref())?;
    let Search {
        dir: root,
        shown: root_shown,
        pattern,
        by_name,
    } = search(ctx, &input, root, root_shown)?;
    if !root.exists() {
        return Ok(no_match(&input.pattern, &root_shown));
    }
    let matcher = GlobBuilder::new(&pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| ToolError::new(format!("glob: invalid pattern `{}`: {e}", input.pattern)))?
        .compile_matcher();

    let found: Mutex<Vec<(SystemTime, PathBuf)>> = Mutex::new(Vec::new());
    let options = WalkOptions {
        hidden: true,
        overrides: None,
    };
    let skipped = walk::files(&root, &options, &ctx.own_files, &ctx.cancel, || {
        let mut sink = walk::Collector::new(&found);
        let (matcher, root) = (&matcher, &root);
        move |entry: &ignore::DirEntry| {
            let path = entry.path();
            // Matched as bytes: a name that is not UTF-8 is found too.
            let hit = if by_name {
                matcher.is_match(Path::new(entry.file_name()))
            } else {
                path.strip_prefix(root)
                    .is_ok_and(|rel| matcher.is_match(rel))
            };
            if hit {
                let mtime = entry
                    .metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                sink.push((mtime, path.to_path_buf()));
            }
            WalkState::Continue
        }
    });
    if ctx.cancel.is_cancelled() {
        return Ok(super::cancelled_output());
    }
    let mut found = found.into_inner().unwrap_or_else(|p| p.into_inner());
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    if total == 0 {
        return Ok(walk::own_note(
            no_match(&input.pattern, &root_shown),
            skipped,
        ));
    }
    let budget = ctx.limits.content_budget();
    let mut out = String::new();
    let mut shown = 0;
    for (_, path) in found.iter().take(MAX_RESULTS) {
        let line = paths::display(ctx, path);
        if out.len() + line.len() + 1 > budget {
            break;
        }
        out.push_str(&line);
        out.push('\n');
        shown += 1;
    }
    if shown < total {
        out.push_str(&format!(
            "… [{} more files not shown; {total} in all. Narrow the pattern or path]\n",
            total - shown
        ));
    }
    let not_utf8 = found
        .iter()
        .take(shown)
        .filter(|(_, path)| path.to_str().is_none())
        .count();
    if not_utf8 > 0 {
        out.push_str(&format!(
            "[{not_utf8} of these names are not valid UTF-8: what is not is shown as U+FFFD \
             (\u{FFFD}), so the name as shown does not open the file; reach it with bash (`ls`, \
             a glob)]\n"
        ));
    }
    let summary = if total == 1 {
        "1 file".to_string()
    } else {
        format!("{total} files")
    };
    Ok(walk::own_note(ToolOutput::ok(out, summary), skipped))
}

fn no_match(pattern: &str, dir: &str) -> ToolOutput {
    ToolOutput::ok(
        format!("No files match `{pattern}` in {dir}."),
        "no files".to_string(),
    )
}

/// Where a glob looks and what it matches there.
struct Search {
    /// The directory searched: resolved, inside the allowed directories.
    dir: PathBuf,
    /// `dir` as people read it.
    shown: String,
    /// The pattern, relative to `dir`.
    pattern: String,
    /// The pattern matches file names at any depth (it had no `/`).
    by_name: bool,
}

/// Reads the pattern the way the permission policy does: the directories
/// it starts with (`../x/*.rs` starts in `../x`, `/abs/*` in `/abs`) are
/// part of where it searches, and that place must be inside the working
/// or an additional directory, as for `read` and `grep`. Matching the
/// pattern's text against paths below `root` instead would answer "no
/// files" for files that exist.
fn search(
    ctx: &ToolContext,
    input: &Input,
    root: PathBuf,
    root_shown: String,
) -> Result<Search, ToolError> {
    let raw = input.pattern.trim();
    if raw.is_empty() {
        return Err(ToolError::new("glob: `pattern` is empty"));
    }
    // Models sometimes give the searched directory itself as the pattern.
    if raw.trim_end_matches('/') == root.to_string_lossy() {
        return Ok(Search {
            dir: root,
            shown: root_shown,
            pattern: "**".to_string(),
            by_name: false,
        });
    }
    let (start, rest) = split_glob(raw);
    if rest.split('/').any(|c| c == "..") {
        return Err(ToolError::new(format!(
            "glob: `..` after a wildcard in `{raw}` is not supported; put the directory before \
             the wildcards or in `path`"
        )));
    }
    if start == "." {
        return Ok(Search {
            dir: root,
            shown: root_shown,
            by_name: !rest.contains('/'),
            pattern: rest,
        });
    }
    let dir = glob_search_dir(input.path.as_deref(), raw);
    let dir = paths::resolve(ctx, &dir)
        .map_err(|e| ToolError::new(format!("glob: pattern `{raw}`: {}", e.0)))?;
    Ok(Search {
        shown: paths::display(ctx, &dir),
        dir,
        pattern: if rest.is_empty() {
            "**".to_string()
        } else {
            rest
        },
        by_name: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::ctx_in;

    fn setup() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "src/main.rs",
            "src/lib/mod.rs",
            "README.md",
            "target/debug/out.rs",
            ".github/ci.yml",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
        let ctx = ctx_in(root);
        (dir, ctx)
    }

    fn lines(out: &ToolOutput) -> Vec<&str> {
        let mut v: Vec<&str> = out.content.lines().collect();
        v.sort();
        v
    }

    #[test]
    fn respects_gitignore_and_matches_names_anywhere() {
        let (_d, ctx) = setup();
        let out = run(json!({"pattern": "*.rs"}), &ctx).unwrap();
        assert_eq!(lines(&out), ["src/lib/mod.rs", "src/main.rs"]);
        let out = run(json!({"pattern": "**/*.rs"}), &ctx).unwrap();
        assert_eq!(lines(&out), ["src/lib/mod.rs", "src/main.rs"]);
        let out = run(json!({"pattern": "src/*.rs"}), &ctx).unwrap();
        assert_eq!(lines(&out), ["src/main.rs"]);
        let out = run(json!({"pattern": "*.yml"}), &ctx).unwrap();
        assert_eq!(lines(&out), [".github/ci.yml"]);
    }

    #[test]
    fn a_walk_leaves_agentds_own_files_out_and_says_so() {
        let (dir, mut ctx) = setup();
        let data = dir.path().join("src/agentd-data");
        std::fs::create_dir_all(data.join("db")).unwrap();
        std::fs::write(data.join("db/store.rs"), "secret").unwrap();
        ctx.own_files = std::sync::Arc::new(crate::tools::OwnFiles::new([data]));
        let out = run(json!({"pattern": "**/*.rs"}), &ctx).unwrap();
        assert_eq!(
            out.content.lines().filter(|l| l.ends_with(".rs")).count(),
            2,
            "{}",
            out.content
        );
        assert!(out.content.contains("agentd's own"), "{}", out.content);
        let grep = crate::tools::grep::run(json!({"pattern": "secret"}), &ctx).unwrap();
        assert!(grep.content.starts_with("No matches"), "{}", grep.content);
        assert!(grep.content.contains("agentd's own"), "{}", grep.content);
        // A walk that does not pass them has no note.
        let out = run(json!({"pattern": "*.rs", "path": "src/lib"}), &ctx).unwrap();
        assert_eq!(out.content, "src/lib/mod.rs\n");
        assert!(!out.content.contains("agentd's own"), "{}", out.content);
    }

    #[test]
    fn names_that_are_not_utf8_are_listed_and_said_to_be() {
        use std::os::unix::ffi::OsStrExt;
        let (dir, ctx) = setup();
        let odd = std::ffi::OsStr::from_bytes(b"odd\xffname.rs");
        std::fs::write(dir.path().join("src").join(odd), "x").unwrap();
        for pattern in ["*.rs", "src/*.rs"] {
            let out = run(json!({"pattern": pattern}), &ctx).unwrap();
            assert!(
                out.content.contains("src/odd\u{FFFD}name.rs\n"),
                "{pattern}: {}",
                out.content
            );
            assert!(
                out.content
                    .contains("[1 of these names are not valid UTF-8"),
                "{pattern}: {}",
                out.content
            );
        }
        let out = run(json!({"pattern": "*.md"}), &ctx).unwrap();
        assert!(!out.content.contains("UTF-8"), "{}", out.content);
    }

    #[test]
    fn path_scopes_the_search_and_newest_come_first() {
        let (dir, ctx) = setup();
        let old = std::fs::File::options()
            .write(true)
            .open(dir.path().join("src/main.rs"))
            .unwrap();
        old.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
            .unwrap();
        let out = run(json!({"pattern": "**/*.rs", "path": "src"}), &ctx).unwrap();
        assert_eq!(out.content, "src/lib/mod.rs\nsrc/main.rs\n");
        let out = run(json!({"pattern": "*.nothing"}), &ctx).unwrap();
        assert!(!out.is_error && out.content.starts_with("No files match"));
        assert!(run(json!({"pattern": "x", "path": "../"}), &ctx).is_err());
        assert!(
            run(json!({"pattern": "a[", "path": "src"}), &ctx)
                .unwrap_err()
                .0
                .contains("invalid pattern")
        );
    }

    #[test]
    fn patterns_that_leave_the_working_directory_are_refused() {
        let top = tempfile::tempdir().unwrap();
        let proj = top.path().join("proj");
        let outside = top.path().join("outside");
        for dir in [&proj, &outside, &proj.join("sub")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(outside.join("secret.txt"), "s").unwrap();
        std::fs::write(proj.join("sub/in.txt"), "i").unwrap();
        let mut ctx = ctx_in(&proj);
        let outside_abs = outside.canonicalize().unwrap();
        for pattern in [
            "../outside/*".to_string(),
            "sub/../../outside/*.txt".to_string(),
            format!("{}/*", outside_abs.display()),
            "../outside/secret.txt".to_string(),
        ] {
            let err = run(json!({"pattern": pattern}), &ctx).unwrap_err().0;
            assert!(
                err.contains("outside the working directory"),
                "{pattern}: {err}"
            );
        }
        let err = run(json!({"pattern": "*/../../outside/*"}), &ctx)
            .unwrap_err()
            .0;
        assert!(err.contains("`..` after a wildcard"), "{err}");
        // Inside, the same forms work; an absolute pattern matches below
        // its own directory only.
        let out = run(json!({"pattern": "sub/../sub/*.txt"}), &ctx).unwrap();
        assert_eq!(out.content, "sub/in.txt\n");
        let abs = format!("{}/*.txt", ctx.cwd.join("sub").display());
        assert_eq!(
            run(json!({"pattern": abs}), &ctx).unwrap().content,
            "sub/in.txt\n"
        );
        let abs = format!("{}/*.txt", ctx.cwd.display());
        assert!(
            run(json!({"pattern": abs}), &ctx)
                .unwrap()
                .content
                .starts_with("No files match")
        );
        let whole = ctx.cwd.display().to_string();
        assert_eq!(
            run(json!({"pattern": whole}), &ctx).unwrap().content,
            "sub/in.txt\n"
        );
        let none = run(json!({"pattern": "nothing/*.txt"}), &ctx).unwrap();
        assert!(
            none.content.starts_with("No files match"),
            "{}",
            none.content
        );
        // An additional directory stays allowed.
        ctx.additional_dirs.push(outside_abs.clone());
        let out = run(json!({"pattern": "../outside/*"}), &ctx).unwrap();
        assert_eq!(
            out.content,
            format!("{}\n", outside_abs.join("secret.txt").display())
        );
    }
}
