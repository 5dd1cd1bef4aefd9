//! One server for one working directory: its connection, its status, and
//! getting a ready peer (reusing the connection, or starting the server
//! again after a backoff).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::service::RunningService;
use rmcp::{Peer, RoleClient};
use tokio_util::sync::CancellationToken;

use super::KILL_GRACE;
use super::connect::Handler;
use super::{ServerSpec, ServerState, ToolInfo, Transport};
use crate::process::Group;

/// One server for one working directory.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) spec: ServerSpec,
    pub(super) cwd: PathBuf,
    pub(super) conn: tokio::sync::Mutex<Option<Conn>>,
    pub(super) status: Mutex<Status>,
    /// Set by the server's `tools/list_changed` notification.
    pub(super) changed: Arc<AtomicBool>,
    /// Counts connections, so a watcher of an old process cannot mark a
    /// new one crashed.
    pub(super) generation: AtomicU64,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) client: RunningService<RoleClient, Handler>,
    pub(super) group: Option<Group>,
}

#[derive(Debug, Clone)]
pub(super) struct Status {
    pub(super) state: ServerState,
    pub(super) restarts: u32,
    /// Failures since the last good start.
    pub(super) failures: u32,
    pub(super) down_since: Option<Instant>,
    pub(super) last_error: Option<String>,
    pub(super) pid: Option<u32>,
    pub(super) tools: Vec<ToolInfo>,
}

/// Backoff before the first restart after a failure; doubles per
/// consecutive failure.
const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// The longest backoff.
const BACKOFF_MAX: Duration = Duration::from_secs(30);

impl Conn {
    pub(super) async fn close(self) {
        let Conn { client, group } = self;
        let _ = tokio::time::timeout(Duration::from_millis(500), client.cancel()).await;
        if let Some(group) = group {
            group.terminate(KILL_GRACE).await;
        }
    }
}

impl Slot {
    pub(super) fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Records that the server went down (once per connection).
    pub(super) fn down(&self, why: String) {
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
    pub(super) async fn lost(&self, fallback: String) -> String {
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
    pub(super) async fn ready(
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
}

/// The wait before starting a server again after `failures` consecutive
/// failures.
fn backoff(failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(10);
    (BACKOFF_BASE * factor).min(BACKOFF_MAX)
}
