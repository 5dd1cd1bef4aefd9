//! `kill_shell`: stop a background shell and everything it started.

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolContext, ToolError, ToolOutput, input};
use crate::shells::ShellStatus;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    shell_id: String,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"shell_id": {"type": "string"}},
        "required": ["shell_id"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::KillShell.name().to_string(),
        description: "Stop a background shell and all its child processes.".to_string(),
        input_schema: schema(),
    }
}

pub(crate) async fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let input: Input = input::parse(Tool::KillShell.name(), &schema(), input)?;
    let id = input.shell_id.trim();
    let before = ctx.visible_shell(Tool::KillShell.name(), id)?;
    if before.status.is_ended() {
        return Ok(ToolOutput::ok(
            format!("Shell {id} was not running.\n[status: {}]", before.status),
            format!("{id} already {}", before.status),
        ));
    }
    let record = ctx
        .shell_manager(Tool::KillShell.name())?
        .kill_quietly(id)
        .await
        .map_err(|e| ToolError::new(format!("kill_shell: {e}")))?;
    let content = match &record.status {
        ShellStatus::Killed => format!("Killed shell {id} and its child processes."),
        ShellStatus::Running => format!("Shell {id} did not stop yet; check it with bash_output."),
        // It ended by itself while the kill was on its way.
        _ => format!("Shell {id} ended."),
    };
    Ok(ToolOutput::ok(
        format!("{content}\n[status: {}]", record.status),
        format!("{id} {}", record.status),
    ))
}

#[cfg(test)]
mod tests {
    use nix::unistd::Pid;
    use serde_json::json;

    use crate::process::group_alive;
    use crate::tools::Registry;
    use crate::tools::bash_output::tests::{shell_ctx, start};

    #[tokio::test]
    async fn kills_the_group_and_reports_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = shell_ctx(&dir, "c");
        let id = start(&ctx, "sleep 300 & sleep 300; wait").await;
        let pid = ctx.shells.as_ref().unwrap().get(&id).unwrap().pid;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;

        let reg = Registry::new();
        let out = reg.run("kill_shell", json!({"shell_id": id}), &ctx).await;
        assert!(!out.is_error, "{}", out.content);
        assert_eq!(
            out.content,
            format!("Killed shell {id} and its child processes.\n[status: killed]")
        );
        assert!(!group_alive(Pid::from_raw(pid as i32)));

        let again = reg.run("kill_shell", json!({"shell_id": id}), &ctx).await;
        assert!(!again.is_error);
        assert_eq!(
            again.content,
            format!("Shell {id} was not running.\n[status: killed]")
        );
        let out = reg.run("bash_output", json!({"shell_id": id}), &ctx).await;
        assert!(out.content.ends_with("[status: killed]"), "{}", out.content);
    }
}
