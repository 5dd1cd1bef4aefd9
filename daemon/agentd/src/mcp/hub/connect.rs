//! Starting a server: a stdio server's process (its group, its stderr, a
//! watcher for its exit) or an HTTP connection, then its tools as offered.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agentd_core::tools::mcp_name;
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

use super::slot::{Conn, Slot};
use super::{KILL_GRACE, ToolInfo, Transport};
use crate::process::Group;

/// Lines of a stdio server's stderr kept to explain a crash.
const STDERR_LINES: usize = 5;

/// The client side's handler: only notices tool list changes.
#[derive(Debug, Clone)]
pub(super) struct Handler {
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

fn stderr_tail(tail: &Mutex<VecDeque<String>>) -> String {
    let t = tail.lock().unwrap_or_else(|e| e.into_inner());
    if t.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = t.iter().map(String::as_str).collect();
        format!("; stderr: {}", lines.join(" | "))
    }
}

impl Slot {
    /// Starts the server and lists its tools.
    pub(super) async fn connect(
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
                let (client, group) = self
                    .start_stdio(handler, command, args, env, generation, stopping)
                    .await?;
                (client, Some(group))
            }
            Transport::Http { url, headers } => (connect_http(handler, url, headers).await?, None),
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

    /// Starts a stdio server in its own process group, keeps the tail of
    /// its stderr, watches for its exit and initializes the session.
    async fn start_stdio(
        self: &Arc<Slot>,
        handler: Handler,
        command: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        generation: u64,
        stopping: &CancellationToken,
    ) -> Result<(RunningService<RoleClient, Handler>, Group), String> {
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
            crate::tasks::spawn("MCP server stderr", async move {
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
            Ok(client) => Ok((client, group)),
            Err(e) => {
                group.terminate(KILL_GRACE).await;
                let said = stderr_tail(&tail);
                Err(format!("initialization failed: {e}{said}"))
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
        crate::tasks::spawn("MCP server watch", async move {
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
    pub(super) fn tool_infos(&self, tools: Vec<rmcp::model::Tool>) -> Vec<ToolInfo> {
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

/// Connects to an HTTP server with its configured headers.
async fn connect_http(
    handler: Handler,
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<RunningService<RoleClient, Handler>, String> {
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
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url),
    );
    let client = handler
        .serve(transport)
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    Ok(client)
}
