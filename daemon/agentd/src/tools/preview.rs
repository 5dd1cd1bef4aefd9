//! What a call of a tool that changes files would change, worked out
//! without changing anything: the diff a permission prompt shows, and the
//! files the checkpoints record first.

use std::path::PathBuf;

use agentd_core::tools::Tool;
use serde_json::Value;

use super::{Plan, ToolContext, diff, handler};

/// The plan of the tool called `name`, if it changes files.
fn plan_of(name: &str) -> Option<Plan> {
    Tool::from_name(name).and_then(|tool| handler(tool).plan)
}

/// For permission prompts: the unified diff an edit/write/patch call WOULD
/// make, without making it (None for other tools or when it cannot be
/// computed).
pub(crate) async fn preview_diff(name: &str, input: &Value, ctx: &ToolContext) -> Option<String> {
    let plan = plan_of(name)?;
    let input = input.clone();
    let owned = ctx.clone();
    let changes = crate::tasks::spawn_blocking("patch preview", move || plan(input, &owned).ok())
        .await
        .ok()??;
    Some(diff::unified_all(&changes, ctx))
}

/// The files a call of a tool that changes files (`write`, `edit`,
/// `patch`) would change, absolute; empty for other tools and for calls
/// that would fail before changing anything. Blocking: it reads the files.
/// The checkpoints record these files' contents before the call runs.
pub(crate) fn planned_paths(name: &str, input: &Value, ctx: &ToolContext) -> Vec<PathBuf> {
    let Some(plan) = plan_of(name) else {
        return Vec::new();
    };
    plan(input.clone(), ctx)
        .map(|changes| changes.into_iter().map(|c| c.path).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::ctx_in;
    use serde_json::json;

    #[tokio::test]
    async fn preview_diff_does_not_write() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx_in(dir.path());
        std::fs::write(dir.path().join("f.txt"), "one\ntwo\n").unwrap();
        let input = json!({"path": "f.txt", "old_string": "two", "new_string": "three"});
        let diff = preview_diff("edit", &input, &ctx).await.unwrap();
        assert!(diff.contains("-two") && diff.contains("+three"), "{diff}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
            "one\ntwo\n"
        );
        assert!(
            preview_diff("bash", &json!({"command": "ls"}), &ctx)
                .await
                .is_none()
        );
        let bad = json!({"path": "f.txt", "old_string": "nope", "new_string": "x"});
        assert!(preview_diff("edit", &bad, &ctx).await.is_none());
    }
}
