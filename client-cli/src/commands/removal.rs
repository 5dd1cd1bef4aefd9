//! `agent rm`, `archive`, `unarchive` and `rename`.

use agent_proto::v1 as pb;
use serde_json::json;

use super::compact::answer;
use super::{Ctx, print_json, print_line};
use crate::error::{CliError, Exit};
use crate::io::Io;

/// `agent rm`: deletes each conversation in turn and says what went; stops
/// at the first refusal (what was deleted before it stays deleted).
pub(super) async fn rm(
    ctx: &Ctx,
    ids: Vec<String>,
    force: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let mut client = ctx.client().await?;
    for id in ids {
        let deleted = client
            .delete_conversation(pb::DeleteConversationRequest {
                conversation_id: id.clone(),
                force,
            })
            .await
            .map_err(|s| CliError::conversation_status(s, &id))?
            .into_inner();
        if ctx.json {
            print_json(
                io,
                &json!({
                    "id": deleted.conversation_id,
                    "sub_agents": deleted.sub_agents,
                    "messages": deleted.messages,
                    "shells_killed": deleted.shells_killed,
                    "stopped": deleted.stopped,
                }),
            )?;
        } else {
            print_line(io, &removed_line(&deleted))?;
        }
    }
    Ok(Exit::Ok)
}

/// "removed ID (N messages, …)".
fn removed_line(d: &pb::DeleteConversationResponse) -> String {
    let mut parts = vec![plural(d.messages, "message")];
    if !d.sub_agents.is_empty() {
        parts.push(plural(d.sub_agents.len() as u64, "sub-agent"));
    }
    if d.shells_killed > 0 {
        parts.push(format!(
            "{} killed",
            plural(u64::from(d.shells_killed), "background shell")
        ));
    }
    let stopped = if d.stopped {
        "; its running turn was stopped"
    } else {
        ""
    };
    format!(
        "removed {} ({}){stopped}",
        d.conversation_id,
        parts.join(", ")
    )
}

fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `agent archive` (`archived` true) and `agent unarchive`.
pub(super) async fn archive(
    ctx: &Ctx,
    ids: Vec<String>,
    archived: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let mut client = ctx.client().await?;
    for id in ids {
        let response = client
            .archive_conversation(pb::ArchiveConversationRequest {
                conversation_id: id.clone(),
                archived,
            })
            .await
            .map_err(|s| CliError::conversation_status(s, &id))?
            .into_inner();
        answer(ctx, io, response.conversation, |c| {
            if archived {
                format!("archived {} (`agent ls --archived` lists it)", c.id)
            } else {
                format!("unarchived {}", c.id)
            }
        })?;
    }
    Ok(Exit::Ok)
}

/// `agent rename`.
pub(super) async fn rename(
    ctx: &Ctx,
    id: String,
    title: String,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let response = ctx
        .client()
        .await?
        .rename_conversation(pb::RenameConversationRequest {
            conversation_id: id.clone(),
            title,
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    answer(ctx, io, response.conversation, |c| {
        format!("renamed {} to {:?}", c.id, c.title)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_removed_line_says_what_went() {
        let d = pb::DeleteConversationResponse {
            conversation_id: "01ABC".into(),
            sub_agents: vec!["01S".into()],
            messages: 4,
            shells_killed: 1,
            stopped: true,
        };
        assert_eq!(
            removed_line(&d),
            "removed 01ABC (4 messages, 1 sub-agent, 1 background shell killed); its running turn was stopped"
        );
        let d = pb::DeleteConversationResponse {
            conversation_id: "01ABC".into(),
            messages: 1,
            ..Default::default()
        };
        assert_eq!(removed_line(&d), "removed 01ABC (1 message)");
    }
}
