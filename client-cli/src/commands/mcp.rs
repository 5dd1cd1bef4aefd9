//! `agent mcp ls`: the MCP servers and their tools.

use agent_proto::v1 as pb;
use serde_json::json;

use super::{Ctx, print_json, print_line};
use crate::error::{CliError, Exit};
use crate::io::Io;

/// `agent mcp ls`.
pub(super) async fn mcp_ls(ctx: &Ctx, io: &mut Io) -> Result<Exit, CliError> {
    let mut client = ctx.client().await?;
    let response = client
        .list_mcp_servers(pb::ListMcpServersRequest {})
        .await
        .map_err(CliError::status)?
        .into_inner();
    if ctx.json {
        let servers: Vec<serde_json::Value> = response
            .servers
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "transport": s.transport,
                    "target": s.target,
                    "cwd": s.cwd,
                    "state": s.state,
                    "restarts": s.restarts,
                    "last_error": s.last_error,
                    "pid": s.pid,
                    "trusted": s.trusted,
                    "source": s.source,
                    "tools": s.tools.iter().map(|t| json!({
                        "name": t.name,
                        "description": t.description,
                        "read_only": t.read_only,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        print_json(io, &json!({ "servers": servers }))?;
        return Ok(Exit::Ok);
    }
    if response.servers.is_empty() {
        print_line(
            io,
            "no MCP servers (configure [mcp.servers.NAME], or agent run --mcp NAME=COMMAND)",
        )?;
        return Ok(Exit::Ok);
    }
    for s in &response.servers {
        let mut head = format!("{}  {}  {}  {}", s.name, s.state, s.transport, s.target);
        if s.restarts > 0 {
            head.push_str(&format!("  restarts: {}", s.restarts));
        }
        if s.pid != 0 {
            head.push_str(&format!("  pid {}", s.pid));
        }
        if s.trusted {
            head.push_str("  trusted");
        }
        if s.source != "config" {
            head.push_str(&format!("  ({})", s.source));
        }
        print_line(io, &head)?;
        if !s.cwd.is_empty() {
            print_line(io, &format!("  cwd: {}", s.cwd))?;
        }
        if !s.last_error.is_empty() {
            print_line(io, &format!("  last error: {}", s.last_error))?;
        }
        for t in &s.tools {
            let ro = if t.read_only { " (read-only)" } else { "" };
            let desc = t.description.lines().next().unwrap_or("");
            print_line(io, &format!("  {}{ro}  {desc}", t.name))?;
        }
    }
    Ok(Exit::Ok)
}
