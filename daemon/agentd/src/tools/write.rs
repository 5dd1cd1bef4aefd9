//! `write`: create or overwrite a whole file.

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use serde::Deserialize;
use serde_json::{Value, json};

use super::diff::{self, FileChange};
use super::{ToolContext, ToolError, ToolOutput, input, paths};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    path: String,
    content: String,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "content": {"type": "string"}
        },
        "required": ["path", "content"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::Write.name().to_string(),
        description: "Create or overwrite a file with `content` (parent directories are created). \
                      For changes to an existing file prefer edit or patch."
            .to_string(),
        input_schema: schema(),
    }
}

/// The change a write would make.
pub(crate) fn plan(input: Value, ctx: &ToolContext) -> Result<Vec<FileChange>, ToolError> {
    let input: Input = input::parse(Tool::Write.name(), &schema(), input)?;
    let path = paths::resolve(ctx, &input.path)?;
    if path.is_dir() {
        return Err(ToolError::new(format!(
            "{} is a directory; give the path of a file",
            paths::display(ctx, &path)
        )));
    }
    let old = match std::fs::read(&path) {
        // Overwriting a binary file is allowed; the diff just shows it as
        // replaced text.
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(ToolError::new(format!(
                "cannot read {}: {e}",
                paths::display(ctx, &path)
            )));
        }
    };
    Ok(vec![FileChange {
        path,
        old,
        new: Some(input.content),
    }])
}

pub(crate) fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let changes = plan(input, ctx)?;
    diff::apply(&changes, ctx)?;
    let change = &changes[0];
    let shown = paths::display(ctx, &change.path);
    let new = change.new.as_deref().unwrap_or("");
    let lines = new.lines().count();
    let (content, summary) = match &change.old {
        None => (
            format!("Created {shown} ({lines} lines, {} bytes).", new.len()),
            format!("created {shown} ({lines} lines)"),
        ),
        Some(_) => {
            let (added, removed) = change.stats();
            (
                format!(
                    "Overwrote {shown} ({lines} lines, {} bytes; +{added} -{removed}).",
                    new.len()
                ),
                format!("wrote {shown} (+{added} -{removed})"),
            )
        }
    };
    let mut out = ToolOutput::ok(content, summary);
    out.diff = Some(change.unified(ctx));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::ctx_in;

    #[test]
    fn creates_parents_and_reports_diff() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx_in(dir.path());
        let out = run(json!({"path": "a/b/c.txt", "content": "hi\n"}), &ctx).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "hi\n"
        );
        assert!(
            out.content.starts_with("Created a/b/c.txt"),
            "{}",
            out.content
        );
        let d = out.diff.unwrap();
        assert!(
            d.contains("--- /dev/null") && d.contains("+++ b/a/b/c.txt") && d.contains("+hi"),
            "{d}"
        );

        let out = run(json!({"path": "a/b/c.txt", "content": "ho\n"}), &ctx).unwrap();
        assert!(out.diff.unwrap().contains("-hi\n+ho"));
        assert_eq!(out.summary, "wrote a/b/c.txt (+1 -1)");
    }

    #[test]
    fn refuses_directories_and_escapes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("proj")).unwrap();
        let ctx = ctx_in(&dir.path().join("proj"));
        std::fs::create_dir(ctx.cwd.join("d")).unwrap();
        assert!(
            run(json!({"path": "d", "content": ""}), &ctx)
                .unwrap_err()
                .0
                .contains("is a directory")
        );
        let err = run(json!({"path": "../x.txt", "content": ""}), &ctx)
            .unwrap_err()
            .0;
        assert!(err.contains("outside the working directory"), "{err}");
        assert!(!dir.path().join("x.txt").exists());
    }
}
