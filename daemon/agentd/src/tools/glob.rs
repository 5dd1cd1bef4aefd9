//! `glob`: find files by name pattern.
//!
//! Results come newest first: the files the user is working on are the
//! recently modified ones, and those are what the model usually looks for.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use agentd_core::ToolSpec;
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
    let pattern = relative_pattern(&input.pattern, &root)?;
    let by_name = !pattern.contains('/');
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
    walk::files(&root, &options, &ctx.cancel, || {
        let mut sink = walk::Collector::new(&found);
        let (matcher, root) = (&matcher, &root);
        move |entry: &ignore::DirEntry| {
            let path = entry.path();
            let hit = if by_name {
                entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| matcher.is_match(n))
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
        return Ok(ToolOutput::ok(
            format!("No files match `{}` in {root_shown}.", input.pattern),
            "no files".to_string(),
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
    let summary = if total == 1 {
        "1 file".to_string()
    } else {
        format!("{total} files")
    };
    Ok(ToolOutput::ok(out, summary))
}

/// Makes a pattern relative to the search root. Models sometimes repeat the
/// absolute directory in the pattern, or start it with `./`.
fn relative_pattern(pattern: &str, root: &std::path::Path) -> Result<String, ToolError> {
    let pattern = pattern.trim();
    if pattern.is_empty() {
        return Err(ToolError::new("glob: `pattern` is empty"));
    }
    if pattern.starts_with('/') {
        let root_str = root.to_string_lossy();
        return match pattern.strip_prefix(root_str.as_ref()) {
            Some("") => Ok("**".to_string()),
            Some(rest) if rest.starts_with('/') => Ok(rest[1..].to_string()),
            _ => Err(ToolError::new(format!(
                "glob: pattern `{pattern}` is absolute; give it relative to path ({})",
                root.display()
            ))),
        };
    }
    Ok(pattern.strip_prefix("./").unwrap_or(pattern).to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
}
