//! `agent set`: a conversation's mode, model and directories.

use std::path::PathBuf;

use agent_proto::v1 as pb;

use super::absolute_dir;
use super::{Ctx, client_name, conversation, print_json, print_line, retrying};
use crate::error::{CliError, Exit};
use crate::io::Io;

/// What `agent set` changes.
pub(super) struct Change {
    pub(super) mode: Option<crate::cli::Mode>,
    pub(super) model: Option<String>,
    pub(super) add_dirs: Vec<PathBuf>,
    /// Send this terminal's environment (`--env-from-here`).
    pub(super) env_from_here: bool,
}

/// Sends `request` for conversation `id`; returns the conversation as it
/// is now.
pub(super) async fn update(
    ctx: &Ctx,
    id: &str,
    request: pb::UpdateConversationRequest,
) -> Result<Option<pb::ConversationSummary>, CliError> {
    Ok(retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.update_conversation(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, id))?
    .conversation)
}

/// `agent set`: changes the mode, the model or the directories (prints
/// them when nothing is given).
pub(super) async fn set(
    ctx: &Ctx,
    id: String,
    change: Change,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let Change {
        mode,
        model,
        add_dirs,
        env_from_here,
    } = change;
    let environment = match env_from_here {
        false => None,
        true => Some(crate::environment::here().ok_or_else(|| {
            CliError::Input(
                "--env-from-here: only a client on the daemon's own machine sends its \
                 environment; this one speaks to a remote daemon"
                    .to_string(),
            )
        })?),
    };
    let sent = environment.as_ref().map(|e| e.vars.len());
    let add_dirs = add_dirs
        .iter()
        .map(|d| absolute_dir(d, "directory"))
        .collect::<Result<Vec<_>, _>>()?;
    let conversation =
        if mode.is_none() && model.is_none() && add_dirs.is_empty() && environment.is_none() {
            conversation(ctx, &id).await?.conversation
        } else {
            let request = pb::UpdateConversationRequest {
                conversation_id: id.clone(),
                mode: mode.map_or(0, |m| m.to_proto() as i32),
                model: model.unwrap_or_default(),
                client_name: client_name(),
                add_dirs,
                environment,
            };
            update(ctx, &id, request).await?
        };
    let c = conversation.unwrap_or_default();
    if ctx.json {
        print_json(io, &crate::json::conversation_summary(&c))?;
    } else {
        print_line(
            io,
            &format!(
                "mode {} · model {} ({} tokens of context)",
                crate::render::mode_name(c.mode),
                c.model,
                c.context_window
            ),
        )?;
        if !c.additional_dirs.is_empty() {
            print_line(io, &format!("also in {}", c.additional_dirs.join(", ")))?;
        }
        if let Some(n) = sent {
            print_line(
                io,
                &format!("environment: this terminal's, {n} variables, for its next command"),
            )?;
        }
    }
    Ok(Exit::Ok)
}
