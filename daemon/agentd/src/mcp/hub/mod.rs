//! The daemon's MCP connections: one per (server spec, working directory),
//! shared by the conversations that use it.
//!
//! A connection is made when a conversation that uses the server first
//! needs its tools (lazily: a daemon with ten configured servers and no
//! conversation runs none of them). A stdio server runs in a process group
//! of its own, in the conversation's working directory, with the daemon's
//! environment minus the model API keys plus its configured `env`; a watcher
//! task notices when it exits. A server found down (exited, or its
//! connection closed) is started again on its next use, after a backoff
//! that doubles with each consecutive failure (250 ms up to 30 s). A server
//! that announces `notifications/tools/list_changed` has its tools listed
//! again before the next model request. [`Hub::shutdown`] stops every
//! process group (SIGTERM, grace, SIGKILL).
//!
//! Locks: `conn` (tokio) is held while a server starts, so two
//! conversations never start the same server twice; `status` (std) only
//! for copying small fields, never across an await.

mod connect;
mod slot;

use super::{ServerSpec, Transport};
use crate::tools::ToolOutput;
use agentd_core::ToolSpec;
use rmcp::model::CallToolRequestParams;
use slot::{Slot, Status};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a stdio server gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_millis(1_000);

/// Where a server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerState {
    /// No conversation has needed it yet.
    NotStarted,
    /// Connected.
    Running,
    /// It exited, its connection closed, or it could not be started; it is
    /// started again on its next use.
    Crashed,
}

impl ServerState {
    /// The name `agent mcp ls` shows.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ServerState::NotStarted => "not started",
            ServerState::Running => "running",
            ServerState::Crashed => "crashed",
        }
    }
}

/// One tool of a server, as the daemon offers it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolInfo {
    /// The name the model calls it by, `mcp__SERVER__TOOL`.
    pub name: String,
    pub description: String,
    /// Its input's JSON schema, as the server gave it.
    pub input_schema: serde_json::Value,
    /// The server marks it read-only and the config trusts the server.
    pub read_only: bool,
}

/// What `agent mcp ls` shows of one server.
#[derive(Debug, Clone)]
pub(crate) struct ServerInfo {
    pub spec: ServerSpec,
    /// The working directory it runs in (stdio servers once started).
    pub cwd: Option<PathBuf>,
    pub state: ServerState,
    /// How many times it was started again after a failure.
    pub restarts: u32,
    pub last_error: Option<String>,
    pub pid: Option<u32>,
    pub tools: Vec<ToolInfo>,
}

/// The MCP connections of the daemon.
#[derive(Debug)]
pub(crate) struct Hub {
    /// The servers of the config file, in every conversation.
    config: Vec<ServerSpec>,
    slots: Mutex<Vec<Arc<Slot>>>,
    stopping: CancellationToken,
}

impl Hub {
    /// A hub for the config file's `servers` (checked).
    pub(crate) fn new(config: Vec<ServerSpec>) -> Hub {
        Hub {
            config,
            slots: Mutex::new(Vec::new()),
            stopping: CancellationToken::new(),
        }
    }

    /// The config file's servers.
    pub(crate) fn config_servers(&self) -> &[ServerSpec] {
        &self.config
    }

    /// The slot of `spec` in `cwd` (HTTP servers have one for all).
    fn slot(&self, spec: &ServerSpec, cwd: &Path) -> Arc<Slot> {
        let cwd = match spec.transport {
            Transport::Stdio { .. } => cwd.to_path_buf(),
            Transport::Http { .. } => PathBuf::new(),
        };
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = slots.iter().find(|s| s.spec == *spec && s.cwd == cwd) {
            return s.clone();
        }
        let slot = Arc::new(Slot {
            spec: spec.clone(),
            cwd,
            conn: tokio::sync::Mutex::new(None),
            status: Mutex::new(Status {
                state: ServerState::NotStarted,
                restarts: 0,
                failures: 0,
                down_since: None,
                last_error: None,
                pid: None,
                tools: Vec::new(),
            }),
            changed: Arc::new(AtomicBool::new(false)),
            generation: AtomicU64::new(0),
        });
        slots.push(slot.clone());
        slot
    }

    /// The slot of `spec` in `cwd` if some conversation made one.
    fn find_slot(&self, spec: &ServerSpec, cwd: &Path) -> Option<Arc<Slot>> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .find(|s| {
                s.spec == *spec
                    && match spec.transport {
                        Transport::Stdio { .. } => s.cwd == cwd,
                        Transport::Http { .. } => true,
                    }
            })
            .cloned()
    }

    /// The tools of `servers` for a conversation in `cwd`, starting servers
    /// that are not running and listing again those whose tools changed;
    /// only read-only ones when `restricted`. A model request does not wait
    /// for a server that is waiting out its backoff after a failure: that
    /// one's last known tools are offered (so the request's tool list, and
    /// its cached prefix, stay as they were), and a call of one of them
    /// starts it again.
    pub(crate) async fn offer(
        &self,
        servers: &[ServerSpec],
        cwd: &Path,
        restricted: bool,
    ) -> Vec<ToolSpec> {
        let mut out = Vec::new();
        for spec in servers {
            let slot = self.slot(spec, cwd);
            let startup = Duration::from_millis(spec.startup_timeout_ms);
            if let Err(e) = slot.ready(&self.stopping, startup, false).await {
                // Its last known tools stay offered (a call starts it
                // again, after the backoff); one never started has none.
                tracing::warn!(server = %spec.name, "MCP server unavailable: {e}");
            }
            let status = slot.status();
            out.extend(
                status
                    .tools
                    .iter()
                    .filter(|t| !restricted || t.read_only)
                    .map(|t| ToolSpec {
                        name: t.name.clone(),
                        description: t.description.clone(),
                        input_schema: t.input_schema.clone(),
                    }),
            );
        }
        out
    }

    /// The names of the read-only tools (see [`ToolInfo::read_only`]) among
    /// what `servers` last listed for `cwd`. Reads no server.
    pub(crate) fn read_only_tools(&self, servers: &[ServerSpec], cwd: &Path) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for spec in servers.iter().filter(|s| s.trust) {
            let Some(slot) = self.find_slot(spec, cwd) else {
                continue;
            };
            out.extend(
                slot.status()
                    .tools
                    .into_iter()
                    .filter(|t| t.read_only)
                    .map(|t| t.name),
            );
        }
        out
    }

    /// Calls `tool` of the server called `server` among `servers`, for the
    /// conversation of `ctx` (its working directory, its cancel, whether its
    /// model takes images). Every failure is an `is_error` output that
    /// names the server.
    pub(crate) async fn call(
        &self,
        servers: &[ServerSpec],
        server: &str,
        tool: &str,
        input: serde_json::Value,
        ctx: &crate::tools::ToolContext,
    ) -> ToolOutput {
        let (cwd, cancel, images) = (&ctx.cwd, &ctx.cancel, ctx.images);
        let Some(spec) = servers.iter().find(|s| s.name == server) else {
            let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
            return ToolOutput::error(format!(
                "no MCP server `{server}` in this conversation (servers: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        };
        let serde_json::Value::Object(arguments) = input else {
            return ToolOutput::error(format!(
                "MCP server `{server}`: the input of `{tool}` must be a JSON object"
            ));
        };
        let slot = self.slot(spec, cwd);
        let limit = Duration::from_millis(spec.timeout_ms);
        let work = async {
            let peer = slot
                .ready(
                    &self.stopping,
                    Duration::from_millis(spec.startup_timeout_ms),
                    true,
                )
                .await?;
            let params = CallToolRequestParams {
                meta: None,
                name: tool.to_string().into(),
                arguments: Some(arguments),
                task: None,
            };
            let answer = peer.call_tool(params).await;
            // rmcp handles a notification on a task of its own, so one the
            // server sent before this answer (`tools/list_changed`) may not
            // have been seen yet when the answer wakes us first (always so
            // on a one-worker runtime). Letting the runtime's queued tasks
            // run first keeps the server's order: the next request then
            // lists the changed tools.
            tokio::task::yield_now().await;
            match answer {
                Ok(result) => Ok(super::result::to_output(server, tool, result, images)),
                Err(rmcp::ServiceError::McpError(e)) => Err(format!(
                    "tool `{tool}` failed: {} (code {})",
                    e.message, e.code.0
                )),
                Err(e) => {
                    // The connection is gone: the next use starts it again.
                    let why = slot.lost(format!("connection lost: {e}")).await;
                    Err(format!("`{tool}` failed: {why}"))
                }
            }
        };
        tokio::select! {
            r = tokio::time::timeout(limit, work) => match r {
                Ok(Ok(out)) => out,
                Ok(Err(e)) => ToolOutput::error(format!("MCP server `{server}`: {e}")),
                Err(_) => ToolOutput::error(format!(
                    "MCP server `{server}`: `{tool}` timed out after {} ms",
                    spec.timeout_ms
                )),
            },
            _ = cancel.cancelled() => ToolOutput::error(format!(
                "MCP server `{server}`: `{tool}` cancelled"
            )),
        }
    }

    /// Every server the daemon knows: the config's (not started until a
    /// conversation needs them) and those conversations started.
    pub(crate) fn list(&self) -> Vec<ServerInfo> {
        let slots: Vec<Arc<Slot>> = self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut out: Vec<ServerInfo> = self
            .config
            .iter()
            .filter(|c| !slots.iter().any(|s| s.spec == **c))
            .map(|spec| ServerInfo {
                spec: spec.clone(),
                cwd: None,
                state: ServerState::NotStarted,
                restarts: 0,
                last_error: None,
                pid: None,
                tools: Vec::new(),
            })
            .collect();
        for slot in slots {
            let s = slot.status();
            out.push(ServerInfo {
                spec: slot.spec.clone(),
                cwd: (!slot.cwd.as_os_str().is_empty()).then(|| slot.cwd.clone()),
                state: s.state,
                restarts: s.restarts,
                last_error: s.last_error,
                pid: s.pid,
                tools: s.tools,
            });
        }
        out.sort_by(|a, b| (&a.spec.name, &a.cwd).cmp(&(&b.spec.name, &b.cwd)));
        out
    }

    /// Stops every server: closes the connections and terminates the
    /// process groups. No server starts after this.
    pub(crate) async fn shutdown(&self) {
        self.stopping.cancel();
        let slots: Vec<Arc<Slot>> = self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for slot in slots {
            let conn = slot.conn.lock().await.take();
            if let Some(conn) = conn {
                conn.close().await;
            }
        }
    }
}
