//! `agent shells`: background shells listed, read and killed.

use std::io::Write;

use agent_proto::v1 as pb;
use serde_json::Value;

use super::{Ctx, now_ms, out_err, print_json, print_line};
use crate::cli::{ShellsArgs, ShellsCommand};
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;
use crate::render::shell_table;

pub(super) async fn shells(ctx: &Ctx, args: ShellsArgs, io: &mut Io) -> Result<Exit, CliError> {
    match args.command {
        None => {
            let conversation = args.conversation.unwrap_or_default();
            let response = ctx
                .client()
                .await?
                .list_shells(pb::ListShellsRequest {
                    conversation_id: conversation.clone(),
                })
                .await
                .map_err(|s| CliError::conversation_status(s, &conversation))?
                .into_inner();
            if ctx.json {
                let list: Vec<Value> = response.shells.iter().map(js::shell_info).collect();
                print_json(io, &Value::Array(list))?;
            } else {
                let of = Some(conversation.as_str()).filter(|c| !c.is_empty());
                shell_table(&mut io.out, &response.shells, of, now_ms())
                    .and_then(|()| io.out.flush())
                    .map_err(out_err)?;
            }
        }
        Some(ShellsCommand::Output {
            shell_id,
            follow,
            from,
            ..
        }) => shell_output(ctx, shell_id, follow, from, io).await?,
        Some(ShellsCommand::Kill { shell_id, .. }) => {
            let response = ctx
                .client()
                .await?
                .kill_shell(pb::KillShellRequest {
                    shell_id: shell_id.clone(),
                })
                .await
                .map_err(|s| CliError::shell_status(s, &shell_id))?
                .into_inner();
            if ctx.json {
                let shell = response.shell.as_ref().map_or(Value::Null, js::shell_info);
                print_json(io, &shell)?;
            } else {
                // The full id: `shell_id` may be a prefix.
                let id = response.shell.as_ref().map_or(&shell_id, |s| &s.id);
                print_line(io, &format!("shell {id} killed"))?;
            }
        }
    }
    Ok(Exit::Ok)
}

pub(super) async fn shell_output(
    ctx: &Ctx,
    shell_id: String,
    follow: bool,
    from: u64,
    io: &mut Io,
) -> Result<(), CliError> {
    let mut stream = ctx
        .client()
        .await?
        .read_shell_output(pb::ReadShellOutputRequest {
            shell_id: shell_id.clone(),
            offset: from,
            follow,
        })
        .await
        .map_err(|s| CliError::shell_status(s, &shell_id))?
        .into_inner();
    loop {
        let chunk = match stream.message().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok(()),
            Err(status) => return Err(CliError::shell_status(status, &shell_id)),
        };
        if ctx.json {
            print_json(io, &js::shell_output(&chunk))?;
            continue;
        }
        io.out
            .write_all(&chunk.data)
            .and_then(|()| io.out.flush())
            .map_err(out_err)?;
        if let Some(shell) = &chunk.finished {
            let status = match pb::ShellStatus::try_from(shell.status) {
                Ok(pb::ShellStatus::Exited) => format!("exited ({})", shell.exit_code),
                Ok(pb::ShellStatus::Killed) => "killed".to_string(),
                Ok(pb::ShellStatus::Lost) => "lost".to_string(),
                Ok(pb::ShellStatus::Running) => "running".to_string(),
                Ok(pb::ShellStatus::Unspecified) | Err(_) => "ended".to_string(),
            };
            writeln!(io.err, "shell {}: {status}", shell.id)
                .and_then(|()| io.err.flush())
                .map_err(out_err)?;
        }
    }
}
