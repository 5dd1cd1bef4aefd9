//! `agent export` and `agent import`: conversations as JSON lines.

use std::path::{Path, PathBuf};

use agent_proto::v1 as pb;
use serde_json::{Value, json};

use super::{Ctx, print_json, print_line};
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;

pub(super) async fn export(ctx: &Ctx, ids: Vec<String>, io: &mut Io) -> Result<Exit, CliError> {
    let map_status = |status: tonic::Status| match ids.as_slice() {
        [one] => CliError::conversation_status(status, one),
        _ => CliError::status(status),
    };
    let mut stream = ctx
        .client()
        .await?
        .export_conversations(pb::ExportConversationsRequest {
            conversation_ids: ids.clone(),
        })
        .await
        .map_err(map_status)?
        .into_inner();
    while let Some(exported) = stream.message().await.map_err(map_status)? {
        print_json(io, &js::exported_conversation(&exported))?;
    }
    Ok(Exit::Ok)
}

/// Parses `agent export` output: one conversation per non-blank line.
pub fn parse_export(text: &str) -> Result<Vec<pb::ExportedConversation>, CliError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            let value: Value = serde_json::from_str(line)
                .map_err(|e| CliError::Input(format!("line {}: not JSON: {e}", n + 1)))?;
            js::read_exported_conversation(&value)
                .map_err(|e| CliError::Input(format!("line {}: {e}", n + 1)))
        })
        .collect()
}

pub(super) async fn import(
    ctx: &Ctx,
    file: Option<PathBuf>,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let text = match file.as_deref() {
        None => io.input.read_to_string().await,
        Some(path) if path == Path::new("-") => io.input.read_to_string().await,
        Some(path) => std::fs::read_to_string(path),
    };
    let name = file
        .as_ref()
        .map_or("stdin".to_string(), |f| f.display().to_string());
    let text = text.map_err(|e| CliError::io(format!("reading {name}"), e))?;
    let conversations = parse_export(&text).map_err(|e| CliError::Input(format!("{name}: {e}")))?;
    if conversations.is_empty() {
        // An empty backup (from a daemon with nothing in it) restores nothing.
        return report_import(ctx, io, &pb::ImportConversationsResponse::default());
    }
    let response = ctx
        .client()
        .await?
        .import_conversations(futures::stream::iter(conversations))
        .await
        .map_err(CliError::status)?
        .into_inner();
    report_import(ctx, io, &response)
}

fn report_import(
    ctx: &Ctx,
    io: &mut Io,
    response: &pb::ImportConversationsResponse,
) -> Result<Exit, CliError> {
    let (imported, skipped) = (response.imported, &response.skipped_ids);
    if ctx.json {
        print_json(
            io,
            &json!({"imported": imported, "skipped_ids": skipped, "notices": response.notices}),
        )?;
    } else {
        let plural = if imported == 1 { "" } else { "s" };
        print_line(io, &format!("imported {imported} conversation{plural}"))?;
        if !skipped.is_empty() {
            print_line(
                io,
                &format!("skipped (already present): {}", skipped.join(", ")),
            )?;
        }
        for notice in &response.notices {
            print_line(io, notice)?;
        }
    }
    Ok(Exit::Ok)
}
