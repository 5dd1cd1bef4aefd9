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

use super::{ServerSpec, Transport};
use crate::process::Group;
use crate::tools::ToolOutput;
use agentd_core::ToolSpec;
use agentd_core::tools::mcp_name;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

/// Backoff before the first restart after a failure; doubles per
/// consecutive failure.
const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// The longest backoff.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Lines of a stdio server's stderr kept to explain a crash.
const STDERR_LINES: usize = 5;
/// How long a stdio server gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_millis(1_000);

/// Where a server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
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
    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::NotStarted => "not started",
            ServerState::Running => "running",
            ServerState::Crashed => "crashed",
        }
    }
}

/// One tool of a server, as the daemon offers it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
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
pub struct ServerInfo {
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
pub struct Hub {
    /// The servers of the config file, in every conversation.
    config: Vec<ServerSpec>,
    slots: Mutex<Vec<Arc<Slot>>>,
    stopping: CancellationToken,
}

/// One server for one working directory.
#[derive(Debug)]
struct Slot {
    spec: ServerSpec,
    cwd: PathBuf,
    conn: tokio::sync::Mutex<Option<Conn>>,
    status: Mutex<Status>,
    /// Set by the server's `tools/list_changed` notification.
    changed: Arc<AtomicBool>,
    /// Counts connections, so a watcher of an old process cannot mark a
    /// new one crashed.
    generation: AtomicU64,
}

#[derive(Debug)]
struct Conn {
    client: RunningService<RoleClient, Handler>,
    group: Option<Group>,
}

#[derive(Debug, Clone)]
struct Status {
    state: ServerState,
    restarts: u32,
    /// Failures since the last good start.
    failures: u32,
    down_since: Option<Instant>,
    last_error: Option<String>,
    pid: Option<u32>,
    tools: Vec<ToolInfo>,
}

/// The client side's handler: only notices tool list changes.
#[derive(Debug, Clone)]
struct Handler {
    changed: Arc<AtomicBool>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.changed.store(true, Ordering::SeqCst);
        std::future::ready(())
    }
}

impl Hub {
    /// A hub for the config file's `servers` (checked).
    pub fn new(config: Vec<ServerSpec>) -> Hub {
        Hub {
            config,
            slots: Mutex::new(Vec::new()),
            stopping: CancellationToken::new(),
        }
    }

    /// The config file's servers.
    pub fn config_servers(&self) -> &[ServerSpec] {
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
    pub async fn offer(
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
    pub fn read_only_tools(&self, servers: &[ServerSpec], cwd: &Path) -> BTreeSet<String> {
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
    pub async fn call(
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
    pub fn list(&self) -> Vec<ServerInfo> {
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
    pub async fn shutdown(&self) {
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

impl Conn {
    async fn close(self) {
        let Conn { client, group } = self;
        let _ = tokio::time::timeout(Duration::from_millis(500), client.cancel()).await;
        if let Some(group) = group {
            group.terminate(KILL_GRACE).await;
        }
    }
}

impl Slot {
    fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Records that the server went down (once per connection).
    fn down(&self, why: String) {
        self.update(|s| {
            if s.state == ServerState::Running {
                s.state = ServerState::Crashed;
                s.failures += 1;
                s.down_since = Some(Instant::now());
                s.pid = None;
                s.last_error = Some(why);
            }
        });
    }

    /// Records a lost connection and says why it was lost. A stdio
    /// server's exit is what explains it best (status, stderr), and its
    /// watcher may report it a moment after the connection noticed:
    /// that is waited for briefly.
    async fn lost(&self, fallback: String) -> String {
        if matches!(self.spec.transport, Transport::Stdio { .. }) {
            for _ in 0..50 {
                let s = self.status();
                if s.state != ServerState::Running {
                    return s.last_error.unwrap_or(fallback);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.down(fallback.clone());
        fallback
    }

    /// A peer of a running connection: the current one, or a new one
    /// (after the backoff, when the last one failed: waited out when
    /// `wait_backoff`, else an error). Lists the tools again when the server said
    /// they changed.
    async fn ready(
        self: &Arc<Slot>,
        stopping: &CancellationToken,
        startup: Duration,
        wait_backoff: bool,
    ) -> Result<Peer<RoleClient>, String> {
        let mut conn = self.conn.lock().await;
        if stopping.is_cancelled() {
            return Err("the daemon is shutting down".to_string());
        }
        if let Some(c) = conn.as_ref() {
            if !c.client.is_closed() && self.status().state == ServerState::Running {
                let peer = c.client.peer().clone();
                if self.changed.swap(false, Ordering::SeqCst) {
                    match tokio::time::timeout(startup, peer.list_all_tools()).await {
                        Ok(Ok(tools)) => {
                            let tools = self.tool_infos(tools);
                            self.update(|s| s.tools = tools);
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(server = %self.spec.name, "listing tools again failed: {e}")
                        }
                        Err(_) => {
                            tracing::warn!(server = %self.spec.name, "listing tools again timed out")
                        }
                    }
                }
                return Ok(peer);
            }
            self.down("the connection closed".to_string());
        }
        if let Some(old) = conn.take() {
            old.close().await;
        }
        let status = self.status();
        if status.state == ServerState::Crashed && status.failures > 0 {
            let wait = backoff(status.failures);
            let since = status.down_since.unwrap_or_else(Instant::now);
            let left = wait.saturating_sub(since.elapsed());
            if !left.is_zero() && !wait_backoff {
                return Err(format!(
                    "failed ({}); next start in {} ms",
                    status.last_error.as_deref().unwrap_or("unknown error"),
                    left.as_millis()
                ));
            }
            if !left.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(left) => {}
                    _ = stopping.cancelled() => return Err("the daemon is shutting down".to_string()),
                }
            }
        }
        let restart = status.state == ServerState::Crashed;
        match tokio::time::timeout(startup, self.connect(stopping)).await {
            Ok(Ok((c, tools))) => {
                let peer = c.client.peer().clone();
                let pid = c.group.map(|g| g.pgid().as_raw().unsigned_abs());
                self.update(|s| {
                    s.state = ServerState::Running;
                    if restart {
                        s.restarts += 1;
                    }
                    s.failures = 0;
                    s.down_since = None;
                    s.pid = pid;
                    s.tools = tools;
                });
                *conn = Some(c);
                Ok(peer)
            }
            Ok(Err(e)) => Err(self.failed_start(restart, e)),
            Err(_) => Err(self.failed_start(
                restart,
                format!("did not start within {} ms", startup.as_millis()),
            )),
        }
    }

    fn failed_start(&self, restart: bool, why: String) -> String {
        self.update(|s| {
            s.state = ServerState::Crashed;
            if restart {
                s.restarts += 1;
            }
            s.failures += 1;
            s.down_since = Some(Instant::now());
            s.pid = None;
            s.last_error = Some(why.clone());
        });
        why
    }

    /// Starts the server and lists its tools.
    async fn connect(
        self: &Arc<Slot>,
        stopping: &CancellationToken,
    ) -> Result<(Conn, Vec<ToolInfo>), String> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.changed.store(false, Ordering::SeqCst);
        let handler = Handler {
            changed: self.changed.clone(),
        };
        let (client, group) = match &self.spec.transport {
            Transport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args)
                    .current_dir(&self.cwd)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .process_group(0)
                    .kill_on_drop(true);
                // Inherited credentials are withheld; what the user wrote
                // in this server's own `env` table is given as written.
                crate::process::withhold_secrets(cmd.as_std_mut());
                cmd.envs(env);
                let mut child = cmd
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                let pid = child
                    .id()
                    .and_then(|p| i32::try_from(p).ok())
                    .ok_or_else(|| format!("`{command}` exited at once"))?;
                let group = Group::new(
                    nix::unistd::Pid::from_raw(pid),
                    crate::process::proc_stat(pid).map(|s| s.start_ticks),
                );
                let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                    group.terminate(KILL_GRACE).await;
                    return Err("the server's stdin/stdout could not be opened".to_string());
                };
                let tail = Arc::new(Mutex::new(VecDeque::new()));
                if let Some(stderr) = child.stderr.take() {
                    let tail = tail.clone();
                    let name = self.spec.name.clone();
                    tokio::spawn(async move {
                        let mut lines = tokio::io::BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            tracing::debug!(server = %name, "stderr: {line}");
                            let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                            if t.len() == STDERR_LINES {
                                t.pop_front();
                            }
                            t.push_back(crate::tools::one_line(&line, 200));
                        }
                    });
                }
                self.watch(child, generation, tail.clone(), stopping.clone());
                match handler.serve((stdout, stdin)).await {
                    Ok(client) => (client, Some(group)),
                    Err(e) => {
                        group.terminate(KILL_GRACE).await;
                        let said = stderr_tail(&tail);
                        return Err(format!("initialization failed: {e}{said}"));
                    }
                }
            }
            Transport::Http { url, headers } => {
                let mut map = http::HeaderMap::new();
                for (k, v) in headers {
                    let (Ok(k), Ok(v)) = (
                        http::HeaderName::try_from(k.as_str()),
                        http::HeaderValue::try_from(v.as_str()),
                    ) else {
                        return Err(format!("invalid header {k:?}"));
                    };
                    map.insert(k, v);
                }
                let http = reqwest::Client::builder()
                    .default_headers(map)
                    .build()
                    .map_err(|e| format!("HTTP client: {e}"))?;
                let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                    http,
                    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        url.as_str(),
                    ),
                );
                let client = handler
                    .serve(transport)
                    .await
                    .map_err(|e| format!("cannot connect to {url}: {e}"))?;
                (client, None)
            }
        };
        let conn = Conn { client, group };
        match conn.client.peer().list_all_tools().await {
            Ok(tools) => {
                let tools = self.tool_infos(tools);
                Ok((conn, tools))
            }
            Err(e) => {
                conn.close().await;
                Err(format!("listing tools failed: {e}"))
            }
        }
    }

    /// Waits for the stdio server's process to exit and records it, with
    /// the last lines it wrote to stderr.
    fn watch(
        self: &Arc<Slot>,
        mut child: tokio::process::Child,
        generation: u64,
        tail: Arc<Mutex<VecDeque<String>>>,
        stopping: CancellationToken,
    ) {
        let slot = Arc::downgrade(self);
        tokio::spawn(async move {
            // Not raced against `stopping`: dropping the child would kill
            // only its leader, while `Conn::close` stops the whole group.
            let exit = child.wait().await;
            if stopping.is_cancelled() {
                return;
            }
            let Some(slot) = slot.upgrade() else {
                return;
            };
            if slot.generation.load(Ordering::SeqCst) != generation {
                return;
            }
            let why = match exit {
                Ok(status) => format!("the server exited ({status})"),
                Err(e) => format!("waiting for the server failed: {e}"),
            };
            slot.down(format!("{why}{}", stderr_tail(&tail)));
        });
    }

    /// The tools a server listed, as offered: named `mcp__SERVER__TOOL`;
    /// names a model API would refuse are left out (and logged).
    fn tool_infos(&self, tools: Vec<rmcp::model::Tool>) -> Vec<ToolInfo> {
        let server = &self.spec.name;
        let mut out = Vec::new();
        for t in tools {
            let name = mcp_name(server, &t.name);
            let valid = name.len() <= 128
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
            if !valid {
                tracing::warn!(server = %server, tool = %t.name, "MCP tool left out: its name has characters model APIs refuse, or is too long");
                continue;
            }
            let hint = t
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false);
            out.push(ToolInfo {
                name,
                description: t
                    .description
                    .as_deref()
                    .or(t.title.as_deref())
                    .unwrap_or("")
                    .to_string(),
                input_schema: serde_json::Value::Object((*t.input_schema).clone()),
                read_only: hint && self.spec.trust,
            });
        }
        out
    }
}

fn stderr_tail(tail: &Mutex<VecDeque<String>>) -> String {
    let t = tail.lock().unwrap_or_else(|e| e.into_inner());
    if t.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = t.iter().map(String::as_str).collect();
        format!("; stderr: {}", lines.join(" | "))
    }
}

/// The wait before starting a server again after `failures` consecutive
/// failures.
fn backoff(failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(10);
    (BACKOFF_BASE * factor).min(BACKOFF_MAX)
}
