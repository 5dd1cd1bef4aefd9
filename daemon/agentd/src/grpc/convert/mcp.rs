//! MCP servers: the ones a client gives a new conversation, checked, and
//! the daemon's as `agent mcp ls` shows them.

use crate::grpc::convert::brief;
use agent_proto::v1 as pb;
use tonic::Status;

/// An MCP server a client gives a new conversation, checked.
pub(crate) fn mcp_server_from(s: &pb::McpServer) -> Result<crate::mcp::ServerSpec, Status> {
    use crate::mcp::{ServerSpec, Transport};
    let transport = match (s.command.is_empty(), s.url.is_empty()) {
        (false, true) => {
            if !s.headers.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "MCP server {:?}: headers are for url servers",
                    brief(&s.name)
                )));
            }
            Transport::Stdio {
                command: s.command.clone(),
                args: s.args.clone(),
                env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            }
        }
        (true, false) => {
            if !s.args.is_empty() || !s.env.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "MCP server {:?}: args and env are for command servers",
                    brief(&s.name)
                )));
            }
            Transport::Http {
                url: s.url.clone(),
                headers: s
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            }
        }
        _ => {
            return Err(Status::invalid_argument(format!(
                "MCP server {:?}: give exactly one of command and url",
                brief(&s.name)
            )));
        }
    };
    let spec = ServerSpec {
        name: s.name.clone(),
        transport,
        trust: false,
        timeout_ms: crate::mcp::DEFAULT_CALL_TIMEOUT_MS,
        startup_timeout_ms: crate::mcp::DEFAULT_STARTUP_TIMEOUT_MS,
    };
    spec.validate().map_err(Status::invalid_argument)?;
    Ok(spec)
}

/// The MCP servers as `agent mcp ls` shows them.
pub(crate) fn mcp_servers(
    list: Vec<crate::mcp::ServerInfo>,
    config: &[crate::mcp::ServerSpec],
) -> pb::ListMcpServersResponse {
    pb::ListMcpServersResponse {
        servers: list
            .into_iter()
            .map(|s| pb::McpServerStatus {
                source: if config.contains(&s.spec) {
                    "config"
                } else {
                    "conversation"
                }
                .to_string(),
                name: s.spec.name.clone(),
                transport: s.spec.transport_name().to_string(),
                target: s.spec.target(),
                cwd: s.cwd.map(|c| c.display().to_string()).unwrap_or_default(),
                state: s.state.as_str().to_string(),
                restarts: s.restarts,
                last_error: s.last_error.unwrap_or_default(),
                pid: s.pid.unwrap_or(0),
                trusted: s.spec.trust,
                tools: s
                    .tools
                    .into_iter()
                    .map(|t| pb::McpToolInfo {
                        name: t.name,
                        description: t.description,
                        read_only: t.read_only,
                    })
                    .collect(),
            })
            .collect(),
    }
}
