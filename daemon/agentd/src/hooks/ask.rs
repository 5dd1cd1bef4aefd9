//! Running one hook: the JSON it gets on stdin, and reading its exit code
//! and stdout as an answer, before the event's meaning is applied.

use serde::Deserialize;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::{Hook, Stage, runner};

/// What clients are told about one hook that ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookReport {
    pub stage: Stage,
    /// The command, shortened to a line.
    pub command: String,
    /// What it decided, in a word or two (`allow`, `deny`, `context`,
    /// `continue`, `none`, `failed`).
    pub decision: String,
    pub duration_ms: u64,
    /// Why it failed or timed out.
    pub error: Option<String>,
}

/// Where and for whom hooks run.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    pub cwd: PathBuf,
    pub conversation_id: String,
    /// Grace between SIGTERM and SIGKILL when a hook is stopped.
    pub grace: Duration,
    /// Fires when the turn is cancelled: running hooks are killed.
    pub cancel: CancellationToken,
    /// The conversation's shell and environment.
    pub launch: std::sync::Arc<crate::process::Launch>,
    /// The sandbox hooks run in, as the conversation's commands do, and
    /// the directories they may write in (working and additional).
    pub sandboxes: std::sync::Arc<crate::process::sandbox::Sandboxes>,
    pub writable: Vec<PathBuf>,
}

impl Env {
    /// The JSON object every hook gets, with the event's own fields.
    pub(super) fn payload(&self, stage: Stage, fields: Value) -> Vec<u8> {
        let mut object = json!({
            "event": stage.as_str(),
            "conversation_id": self.conversation_id,
            "cwd": self.cwd.display().to_string(),
        });
        if let (Some(map), Value::Object(more)) = (object.as_object_mut(), fields) {
            map.extend(more);
        }
        object.to_string().into_bytes()
    }
}

/// The optional JSON a hook prints on stdout.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Answer {
    pub(super) decision: Option<String>,
    pub(super) reason: Option<String>,
    pub(super) input: Option<Value>,
    pub(super) context: Option<String>,
}

/// How one hook answered, before the event's meaning is applied.
pub(super) enum Said {
    Answered(Answer),
    /// Exit 2: the reason is its stderr.
    Blocked(String),
    Failed(String),
}

/// Runs `hook` and reads its answer; the report is completed by the caller
/// (the decision) through the returned closure's inputs.
pub(super) async fn ask(hook: &Hook, env: &Env, payload: &[u8]) -> (Said, u64) {
    let started = Instant::now();
    let result = match env.sandboxes.confine(&env.writable, false) {
        Ok(sandbox) => {
            runner::run(
                &hook.command,
                &env.cwd,
                payload,
                runner::Deadline {
                    timeout: hook.timeout,
                    grace: env.grace,
                },
                &env.cancel,
                &env.launch,
                sandbox.as_ref(),
            )
            .await
        }
        Err(e) => Err(e.into()),
    };
    let took = started.elapsed().as_millis() as u64;
    let said = match result {
        Err(e) => Said::Failed(e.to_string()),
        Ok(done) => match done.code {
            Some(0) => {
                let out = done.stdout.trim();
                if out.is_empty() {
                    Said::Answered(Answer::default())
                } else {
                    match serde_json::from_str::<Answer>(out) {
                        Ok(answer) => Said::Answered(answer),
                        Err(e) => Said::Failed(format!(
                            "stdout is not a JSON answer ({e}): {}",
                            one_line(out, 120)
                        )),
                    }
                }
            }
            Some(2) => {
                let reason = done.stderr.trim();
                Said::Blocked(if reason.is_empty() {
                    "(the hook wrote nothing on stderr)".to_string()
                } else {
                    reason.to_string()
                })
            }
            code => {
                let how = code.map_or_else(
                    || "was killed by a signal".to_string(),
                    |c| format!("exited with {c}"),
                );
                let err = done.stderr.trim();
                Said::Failed(if err.is_empty() {
                    how
                } else {
                    format!("{how}: {}", one_line(err, 200))
                })
            }
        },
    };
    (said, took)
}

/// A hook that failed, and why: its answer is ignored.
pub(super) fn failed(hook: &Hook, duration_ms: u64, error: impl Into<String>) -> HookReport {
    report(hook, "failed", duration_ms, Some(error.into()))
}

pub(super) fn report(
    hook: &Hook,
    decision: &str,
    duration_ms: u64,
    error: Option<String>,
) -> HookReport {
    HookReport {
        stage: hook.stage,
        command: one_line(&hook.command, 60),
        decision: decision.to_string(),
        duration_ms,
        error,
    }
}

/// The first line of `text`, at most `max` characters, marked when cut.
fn one_line(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("").trim();
    let mut out: String = first.chars().take(max).collect();
    if first.chars().count() > max || text.trim().lines().count() > 1 {
        out.push('…');
    }
    out
}
