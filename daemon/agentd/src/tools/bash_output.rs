//! `bash_output`: what a background shell printed since the model last
//! looked, and whether it still runs.

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolContext, ToolError, ToolOutput, input};
use crate::shells::ShellError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    shell_id: String,
    filter: Option<String>,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "shell_id": {"type": "string"},
            "filter": {"type": "string", "description": "Regex; only matching lines are returned"}
        },
        "required": ["shell_id"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::BashOutput.name().to_string(),
        description: "Read a background shell's new output (since your last read of it) and its \
                      status: running, exited (code N), killed or lost."
            .to_string(),
        input_schema: schema(),
    }
}

pub(crate) async fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let input: Input = input::parse(Tool::BashOutput.name(), &schema(), input)?;
    let filter = match input.filter.as_deref() {
        Some(f) => Some(regex::Regex::new(f).map_err(|e| {
            ToolError::new(format!("bash_output: `filter` is not a valid regex: {e}"))
        })?),
        None => None,
    };
    let id = input.shell_id.trim();
    ctx.visible_shell(Tool::BashOutput.name(), id)?;
    let shells = ctx.shell_manager(Tool::BashOutput.name())?;
    let (text, record) = shells
        .read_new(id, filter.as_ref(), ctx.limits.content_budget())
        .await
        .map_err(|e| match e {
            ShellError::NotFound(_) => ToolError::new(format!("unknown shell {id}")),
            e => ToolError::new(format!("bash_output: {e}")),
        })?;
    let lines = text.lines().count();
    let mut content = if text.is_empty() {
        match &filter {
            Some(_) => "(no new output matching the filter)\n".to_string(),
            None => "(no new output)\n".to_string(),
        }
    } else if text.ends_with('\n') {
        text
    } else {
        format!("{text}\n")
    };
    content.push_str(&format!("[status: {}]", record.status));
    let summary = format!("{id}: {lines} new lines, {}", record.status);
    Ok(ToolOutput::ok(content, summary))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use crate::shells::{ShellLimits, ShellManager, ShellRecord, ShellStatus};
    use crate::tools::tests::ctx_in;
    use crate::tools::{Registry, ToolContext};

    /// A context of conversation `conv` with a shell manager in `dir`.
    pub(crate) fn shell_ctx(dir: &tempfile::TempDir, conv: &str) -> ToolContext {
        let mut ctx = ctx_in(dir.path());
        let (events, _) = tokio::sync::broadcast::channel(16);
        ctx.shells = Some(ShellManager::new(
            dir.path().join("spool"),
            ShellLimits {
                kill_grace_ms: 500,
                ..ShellLimits::default()
            },
            Box::new(|_: &ShellRecord| {}),
            events,
        ));
        ctx.conversation_id = conv.to_string();
        ctx
    }

    /// Starts `command` through the bash tool; the shell id it returned.
    pub(crate) async fn start(ctx: &ToolContext, command: &str) -> String {
        let out = Registry::new()
            .run(
                "bash",
                json!({"command": command, "run_in_background": true}),
                ctx,
            )
            .await;
        assert!(!out.is_error, "{}", out.content);
        let id = out
            .content
            .strip_prefix("Command running in background with ID: ")
            .and_then(|rest| rest.split('.').next())
            .unwrap()
            .to_string();
        assert_eq!(
            out.content,
            format!(
                "Command running in background with ID: {id}. Use bash_output to read its \
                 output and kill_shell to stop it."
            )
        );
        id
    }

    async fn wait_end(ctx: &ToolContext, id: &str) {
        let shells: &Arc<ShellManager> = ctx.shells.as_ref().unwrap();
        tokio::time::timeout(Duration::from_secs(10), shells.wait_output(id, u64::MAX))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn polls_return_each_line_once_then_the_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = shell_ctx(&dir, "conv-a");
        let id = start(&ctx, "for i in $(seq 1 5); do echo $i; sleep 0.2; done").await;
        let reg = Registry::new();

        tokio::time::sleep(Duration::from_millis(450)).await;
        let first = reg.run("bash_output", json!({"shell_id": id}), &ctx).await;
        assert!(!first.is_error, "{}", first.content);
        assert!(
            first.content.ends_with("[status: running]"),
            "{}",
            first.content
        );

        wait_end(&ctx, &id).await;
        let second = reg.run("bash_output", json!({"shell_id": id}), &ctx).await;
        assert!(
            second.content.ends_with("[status: exited (code 0)]"),
            "{}",
            second.content
        );
        let lines: Vec<&str> = first
            .content
            .lines()
            .chain(second.content.lines())
            .filter(|l| !l.starts_with('['))
            .collect();
        assert_eq!(lines, ["1", "2", "3", "4", "5"]);
        assert!(
            second.summary.contains("exited (code 0)"),
            "{}",
            second.summary
        );

        let third = reg.run("bash_output", json!({"shell_id": id}), &ctx).await;
        assert_eq!(third.content, "(no new output)\n[status: exited (code 0)]");
    }

    #[tokio::test]
    async fn filter_keeps_matching_lines() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = shell_ctx(&dir, "c");
        let id = start(&ctx, "printf 'ok\\nERROR one\\nok\\n'").await;
        wait_end(&ctx, &id).await;
        let reg = Registry::new();
        let out = reg
            .run(
                "bash_output",
                json!({"shell_id": id, "filter": "ERR"}),
                &ctx,
            )
            .await;
        assert_eq!(out.content, "ERROR one\n[status: exited (code 0)]");
        let out = reg
            .run("bash_output", json!({"shell_id": id, "filter": "("}), &ctx)
            .await;
        assert!(
            out.is_error && out.content.contains("not a valid regex"),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn other_conversations_shells_are_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let ctx_a = shell_ctx(&dir, "conv-a");
        let id = start(&ctx_a, "sleep 300").await;
        let mut ctx_b = ctx_a.clone();
        ctx_b.conversation_id = "conv-b".to_string();
        let reg = Registry::new();

        for tool in ["bash_output", "kill_shell"] {
            let out = reg.run(tool, json!({"shell_id": id}), &ctx_b).await;
            assert!(out.is_error, "{tool}");
            assert_eq!(out.content, format!("unknown shell {id}"), "{tool}");
            let out = reg
                .run(tool, json!({"shell_id": "sh-zzzzzz"}), &ctx_a)
                .await;
            assert!(out.is_error, "{tool}");
            assert_eq!(out.content, "unknown shell sh-zzzzzz", "{tool}");
        }
        // B's attempt did not touch it.
        let shells = ctx_a.shells.clone().unwrap();
        assert_eq!(shells.get(&id).unwrap().status, ShellStatus::Running);
        shells.kill_all().await;
    }

    #[tokio::test]
    async fn without_a_shell_manager_the_tools_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx_in(dir.path());
        let reg = Registry::new();
        let out = reg
            .run("bash_output", json!({"shell_id": "sh-abcdef"}), &ctx)
            .await;
        assert!(out.is_error);
        assert!(out.content.contains("not available"), "{}", out.content);
        let out = reg.run("bash_output", json!({}), &ctx).await;
        assert_eq!(out.content, "bash_output: missing field `shell_id`");
    }
}
