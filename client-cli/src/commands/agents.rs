//! `agent agents ls`: the custom sub-agent types a conversation can spawn.

use std::path::PathBuf;

use agent_proto::v1 as pb;
use serde_json::json;

use super::{Ctx, print_json, print_line};
use crate::error::{CliError, Exit};
use crate::io::Io;

/// `agent agents ls [DIR]`.
pub(super) async fn agents_ls(
    ctx: &Ctx,
    dir: Option<PathBuf>,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let dir = dir.unwrap_or_else(|| PathBuf::from("."));
    // The daemon runs elsewhere: the path goes absolute.
    let cwd =
        std::path::absolute(&dir).map_err(|e| CliError::io("reading the current directory", e))?;
    let mut client = ctx.client().await?;
    let response = client
        .list_agent_types(pb::ListAgentTypesRequest {
            cwd: cwd.display().to_string(),
        })
        .await
        .map_err(CliError::status)?
        .into_inner();
    if ctx.json {
        let types: Vec<serde_json::Value> = response
            .types
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "origin": t.origin,
                    "path": t.path,
                    "description": t.description,
                    "tools": if t.all_tools { serde_json::Value::Null } else { json!(t.tools) },
                    "model": t.model,
                    "usable": t.usable,
                    "problems": t.problems,
                    "error": t.error,
                })
            })
            .collect();
        print_json(io, &json!({"types": types, "notes": response.notes}))?;
        return Ok(Exit::Ok);
    }
    for note in &response.notes {
        print_line(io, &format!("note: {note}"))?;
    }
    if response.types.is_empty() {
        print_line(
            io,
            "no sub-agent types (write .agents/agents/NAME.md in a trusted project, or NAME.md in the agents directory of agentd's config directory)",
        )?;
        return Ok(Exit::Ok);
    }
    for t in &response.types {
        for line in lines(t) {
            print_line(io, &line)?;
        }
    }
    Ok(Exit::Ok)
}

/// The lines of one type: a head (name, origin, model), then its
/// description, tools, file and problems.
fn lines(t: &pb::AgentTypeInfo) -> Vec<String> {
    if !t.error.is_empty() {
        return vec![
            format!("(not loaded)  {}  {}", t.origin, t.path),
            format!("  error: {}", t.error),
        ];
    }
    let model = if t.model.is_empty() {
        "parent's model"
    } else {
        &t.model
    };
    let unused = if t.usable { "" } else { "  (not used)" };
    let tools = if t.all_tools {
        "the parent's".to_string()
    } else {
        let mut tools = t.tools.clone();
        tools.push("submit_result".to_string());
        tools.join(", ")
    };
    let mut out = vec![
        format!("{}  {}  {model}{unused}", t.name, t.origin),
        format!("  {}", t.description),
        format!("  tools: {tools}"),
        format!("  file: {}", t.path),
    ];
    out.extend(t.problems.iter().map(|p| format!("  problem: {p}")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_reads_as_a_head_and_its_details_and_a_bad_file_as_its_error() {
        let t = pb::AgentTypeInfo {
            name: "reviewer".into(),
            origin: "project".into(),
            path: "/p/.agents/agents/reviewer.md".into(),
            description: "Reviews".into(),
            tools: vec!["read".into(), "grep".into()],
            problems: vec!["unknown tool `X` is left out".into()],
            usable: true,
            ..Default::default()
        };
        assert_eq!(
            lines(&t),
            [
                "reviewer  project  parent's model",
                "  Reviews",
                "  tools: read, grep, submit_result",
                "  file: /p/.agents/agents/reviewer.md",
                "  problem: unknown tool `X` is left out",
            ]
        );
        let shadowed = pb::AgentTypeInfo {
            model: "m".into(),
            all_tools: true,
            usable: false,
            problems: Vec::new(),
            ..t
        };
        assert_eq!(lines(&shadowed)[0], "reviewer  project  m  (not used)");
        assert_eq!(lines(&shadowed)[2], "  tools: the parent's");
        let bad = pb::AgentTypeInfo {
            origin: "user".into(),
            path: "/u/a.md".into(),
            error: "/u/a.md:1: the front matter has no `name`".into(),
            ..Default::default()
        };
        assert_eq!(
            lines(&bad),
            [
                "(not loaded)  user  /u/a.md",
                "  error: /u/a.md:1: the front matter has no `name`"
            ]
        );
    }
}
