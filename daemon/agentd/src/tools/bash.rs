//! `bash`: run a shell command in the working directory.
//!
//! The command runs in a process group of its own (see [`crate::process`]),
//! so "stop it" means every process it started, not just the shell: on
//! timeout or cancel the whole group gets SIGTERM, then SIGKILL after the
//! grace period, and processes the command leaves behind when it exits are
//! stopped the same way. If the future running the command is dropped (the
//! runtime gave up on it), a guard kills the group too. Nothing the model
//! starts outlives its tool call; long-running processes belong to
//! background shells, which the daemon tracks: `run_in_background` hands the
//! command to the [`ShellManager`](crate::shells::ShellManager) and returns
//! its id at once.
//!
//! stdout and stderr share one pipe, so their lines arrive interleaved in
//! the order the command wrote them, as in a terminal. The pipe is drained
//! into a head-and-tail buffer, so memory stays bounded whatever the command
//! prints. The same reader hands the output, coalesced, to the people
//! watching while the command runs ([`super::live`]), and the result
//! carries a preview of its first and last lines.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use nix::sys::signal::Signal;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::live::{Coalescer, LineCount, OutputPreview};
use super::{ToolContext, ToolError, ToolOutput, input};
use crate::process::sandbox::Confinement;
use crate::process::{self, DRAIN, Group, KILL_WAIT, OnDrop};
use crate::shells::{CommandAction, CommandRequest, Foreground};
use crate::truncate::HeadTail;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    command: String,
    timeout_ms: Option<u64>,
    #[expect(dead_code)]
    description: Option<String>,
    #[serde(default)]
    run_in_background: bool,
    /// `"off"`: run outside the sandbox (the permission check always asks).
    sandbox: Option<SandboxChoice>,
    /// Why the command must leave the sandbox; the permission request
    /// shows it (see `agentd_core::permission`).
    #[expect(dead_code)]
    justification: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum SandboxChoice {
    On,
    Off,
}

impl Input {
    /// The sandbox the command runs in: None outside one (sandbox off in
    /// the config, no Landlock, or `sandbox: "off"`).
    fn confinement(&self, ctx: &ToolContext) -> Result<Option<Confinement>, ToolError> {
        if self.sandbox == Some(SandboxChoice::Off) {
            return Ok(None);
        }
        let writable: Vec<std::path::PathBuf> = std::iter::once(ctx.cwd.clone())
            .chain(ctx.additional_dirs.iter().cloned())
            .collect();
        let network = agentd_core::permission::needs_network(&self.command);
        ctx.sandboxes
            .confine(&writable, network)
            .map_err(|e| ToolError::new(format!("bash: {e}")))
    }
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "timeout_ms": {"type": "integer", "description": "Default 120000, max 600000"},
            "description": {"type": "string", "description": "What it does, in 5-10 words"},
            "run_in_background": {"type": "boolean", "description": "Start it as a background shell and return its ID at once; timeout_ms does not apply"},
            "sandbox": {"type": "string", "enum": ["on", "off"], "description": "\"off\" runs the command outside the OS sandbox; the user is always asked. Only for a command the sandbox stopped; say why in justification"},
            "justification": {"type": "string", "description": "With sandbox \"off\": why the command must run outside the sandbox, for the user"}
        },
        "required": ["command"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::Bash.name().to_string(),
        description: "Run a command with `bash -c` in the working directory; stdin is empty. \
                      Returns stdout and stderr interleaved, and the exit code (non-zero is an \
                      error). On timeout the command and its children are killed; processes left \
                      running when it ends are stopped. For servers and watchers use \
                      run_in_background, then bash_output and kill_shell. Prefer read, grep, \
                      glob and edit over cat, grep, find and sed."
            .to_string(),
        input_schema: schema(),
    }
}

pub(crate) async fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let input: Input = input::parse(Tool::Bash.name(), &schema(), input)?;
    if input.command.trim().is_empty() {
        return Err(ToolError::new("bash: `command` is empty"));
    }
    if input.run_in_background {
        if ctx.cancel.is_cancelled() {
            return Ok(super::cancelled_output());
        }
        let sandbox = input.confinement(ctx)?;
        let id = start_in_background(&input.command, ctx, sandbox.as_ref()).await?;
        return Ok(ToolOutput::ok(
            format!(
                "Command running in background with ID: {id}. Use bash_output to read its \
                 output and kill_shell to stop it."
            ),
            format!("started background shell {id}"),
        ));
    }
    let limits = ctx.limits;
    let timeout_ms = input
        .timeout_ms
        .unwrap_or(limits.bash_default_timeout_ms)
        .clamp(1, limits.bash_max_timeout_ms);
    let sandbox = input.confinement(ctx)?;
    let mut out = execute(&input.command, timeout_ms, ctx, sandbox.as_ref()).await?;
    if let (Some(_), Some(network)) = (&sandbox, ctx.sandboxes.active())
        && out.is_error
        && let Some(hint) = agentd_core::permission::sandbox_hint(&out.content, network)
    {
        out.content.push_str(&hint);
    }
    Ok(out)
}

/// For the permission answer "background": runs the bash call `input` as a
/// background shell instead of in the foreground, and returns the result the
/// model gets for the call.
pub(crate) async fn run_as_background_shell(input: &Value, ctx: &ToolContext) -> ToolOutput {
    let started = async {
        let input: Input = input::parse(Tool::Bash.name(), &schema(), input.clone())?;
        if input.command.trim().is_empty() {
            return Err(ToolError::new("bash: `command` is empty"));
        }
        let sandbox = input.confinement(ctx)?;
        start_in_background(&input.command, ctx, sandbox.as_ref()).await
    };
    match started.await {
        Ok(id) => ToolOutput::ok(
            format!(
                "Command moved to background (shell ID: {id}). Use bash_output to read its \
                 output and kill_shell to stop it."
            ),
            format!("moved to background shell {id}"),
        ),
        Err(e) => ToolOutput::error(e.0),
    }
}

/// Starts `command` as a background shell of the conversation; its id.
async fn start_in_background(
    command: &str,
    ctx: &ToolContext,
    sandbox: Option<&Confinement>,
) -> Result<String, ToolError> {
    let Some(shells) = &ctx.shells else {
        return Err(ToolError::new(
            "bash: background shells are not available yet; run the command in the foreground \
             with a suitable timeout_ms",
        ));
    };
    let record = shells
        .spawn_in(
            &ctx.conversation_id,
            command,
            &ctx.cwd,
            &ctx.launch,
            sandbox,
        )
        .await
        .map_err(|e| ToolError::new(format!("bash: {e}")))?;
    Ok(record.id)
}

/// How the wait for the command ended.
enum End {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
    /// A client killed it (its name); the turn goes on.
    Killed(String),
}

/// A command running in the foreground: what follows it while it runs.
struct Running {
    command: String,
    child: process::Child,
    group: Group,
    output: Arc<Mutex<Captured>>,
    started: Instant,
    /// Stops the pump, which hands the pipe back (moving to the background).
    stop: CancellationToken,
    reader: JoinHandle<Option<pipe::Receiver>>,
}

impl Running {
    /// Follows the command `spawned` started as, its output read by a new
    /// pump.
    fn start(command: &str, spawned: process::Spawned, ctx: &ToolContext) -> Self {
        let output = Arc::new(Mutex::new(Captured {
            text: HeadTail::new(ctx.limits.content_budget()),
            lines: LineCount::default(),
        }));
        let started = Instant::now();
        let (stop, reader) = start_pump(spawned.output, &output, started, ctx);
        Running {
            command: command.to_string(),
            child: spawned.child,
            group: spawned.group,
            output,
            started,
            stop,
            reader,
        }
    }

    /// What it printed so far, as the result shows it.
    fn text(&self, budget: usize) -> (String, u64) {
        let captured = self.output.lock().unwrap_or_else(|p| p.into_inner());
        (captured.text.render(budget), captured.lines.lines())
    }
}

async fn execute(
    command: &str,
    timeout_ms: u64,
    ctx: &ToolContext,
    sandbox: Option<&Confinement>,
) -> Result<ToolOutput, ToolError> {
    let limits = ctx.limits;
    if ctx.cancel.is_cancelled() {
        return Ok(super::cancelled_output());
    }
    let spawned = process::spawn_bash(command, &ctx.cwd, OnDrop::Kill, &ctx.launch, sandbox)
        .map_err(|e| ToolError::new(format!("bash: {e}")))?;
    let mut run = Running::start(command, spawned, ctx);
    let group = run.group;
    let mut guard = GroupGuard {
        group,
        armed: true,
        reader: run.reader.abort_handle(),
    };
    let mut foreground = ctx
        .shells
        .as_ref()
        .map(|s| s.foreground(&ctx.conversation_id, &ctx.tool_use_id));
    let deadline = run.started + Duration::from_millis(timeout_ms);
    let (end, killed_reply) = loop {
        let request = tokio::select! {
            status = run.child.wait() => break (End::Exited(status), None),
            () = tokio::time::sleep_until(deadline) => break (End::TimedOut, None),
            () = ctx.cancel.cancelled() => break (End::Cancelled, None),
            request = next_request(foreground.as_mut()) => request,
        };
        match request.action {
            CommandAction::Kill => break (End::Killed(request.by), Some(request.reply)),
            CommandAction::Background => match to_background(run, ctx).await {
                Ok((id, so_far)) => {
                    guard.armed = false;
                    let _ = request.reply.send(Ok(Some(id.clone())));
                    return Ok(moved_output(&id, &request.by, so_far));
                }
                Err((e, back)) => {
                    run = back;
                    guard.reader = run.reader.abort_handle();
                    let _ = request.reply.send(Err(e));
                }
            },
        }
    };
    drop(foreground);
    let elapsed = run.started.elapsed();
    let grace = Duration::from_millis(limits.kill_grace_ms);
    let mut stopped_leftovers = false;
    match &end {
        End::Exited(Ok(_)) => {
            // The leader is reaped: only leftovers can keep the group ours.
            if group.is_alive() {
                group.terminate(grace).await;
                stopped_leftovers = true;
            }
        }
        End::Exited(Err(_)) | End::TimedOut | End::Cancelled | End::Killed(_) => {
            group.terminate(grace).await;
            // Reap the shell; it is dead or dying from SIGKILL by now.
            let _ = tokio::time::timeout(KILL_WAIT, run.child.wait()).await;
        }
    }
    if let Some(reply) = killed_reply {
        let _ = reply.send(Ok(None));
    }
    // The leader is reaped by now (or never will be): the guard may only
    // fire at a group that still holds our leftovers.
    if !group.is_alive() {
        guard.armed = false;
    }
    let _ = tokio::time::timeout(DRAIN, &mut run.reader).await;
    drop(guard);

    let (text, lines) = run.text(limits.content_budget());
    let preview = OutputPreview::of(&text, lines);
    let mut out = report(
        end,
        text,
        elapsed,
        timeout_ms,
        stopped_leftovers,
        limits.bash_max_timeout_ms,
    );
    out.preview = Some(preview);
    Ok(out)
}

/// The next request of a client for the running command; never without
/// background shells.
async fn next_request(foreground: Option<&mut Foreground>) -> CommandRequest {
    match foreground {
        Some(foreground) => foreground.next().await,
        None => std::future::pending().await,
    }
}

/// Starts the pump that reads the command's output into `output` (and to
/// the people watching); the token stops it, and it hands the pipe back.
fn start_pump(
    receiver: pipe::Receiver,
    output: &Arc<Mutex<Captured>>,
    started: Instant,
    ctx: &ToolContext,
) -> (CancellationToken, JoinHandle<Option<pipe::Receiver>>) {
    let stop = CancellationToken::new();
    let live = ctx.live.clone().map(|sink| Coalescer::new(sink, started));
    let reader = crate::tasks::spawn(
        "bash output pump",
        pump(receiver, Arc::clone(output), live, stop.clone()),
    );
    (stop, reader)
}

/// Moves the running command to the background: the pump stops and hands
/// the pipe back, and the shell manager takes the process group and the
/// pipe, with the output so far. Its shell id and that output (text,
/// lines); when it cannot (a limit), the command comes back, running here
/// as before, with the error.
async fn to_background(
    mut run: Running,
    ctx: &ToolContext,
) -> Result<(String, (String, u64)), (String, Running)> {
    let Some(shells) = ctx.shells.clone() else {
        let e = "background shells are not available here".to_string();
        return Err((e, run));
    };
    run.stop.cancel();
    let receiver = match (&mut run.reader).await {
        Ok(Some(receiver)) => receiver,
        // The output ended first: the command is finishing here.
        _ => return Err(("the command is ending; it was not moved".to_string(), run)),
    };
    let so_far = run.text(ctx.limits.content_budget());
    let spawned = process::Spawned {
        child: run.child,
        group: run.group,
        output: receiver,
    };
    let adopted = shells.adopt(
        &ctx.conversation_id,
        &run.command,
        &ctx.cwd,
        spawned,
        so_far.0.as_bytes(),
    );
    match adopted {
        Ok(record) => Ok((record.id, so_far)),
        Err(refused) => {
            let (e, spawned) = *refused;
            let (stop, reader) = start_pump(spawned.output, &run.output, run.started, ctx);
            let back = Running {
                child: spawned.child,
                stop,
                reader,
                ..run
            };
            Err((
                format!("cannot move the command to the background: {e}"),
                back,
            ))
        }
    }
}

/// The result of a command a client moved to the background: the seed's
/// text with the shell id, who moved it, and the output so far (what
/// `bash_output` returns starts after it).
fn moved_output(id: &str, by: &str, (text, lines): (String, u64)) -> ToolOutput {
    let mut content = format!(
        "Command moved to background (shell ID: {id}) by {by}. It keeps running: use \
         bash_output to read its new output and kill_shell to stop it."
    );
    if text.is_empty() {
        content.push_str("\nNo output so far.");
    } else {
        content.push_str("\nOutput so far:\n");
        content.push_str(&text);
    }
    let mut out = ToolOutput::ok(content, format!("moved to background shell {id} by {by}"));
    out.preview = Some(OutputPreview::of(&text, lines));
    out
}

/// What the command printed: the bounded text the result keeps, and how
/// many lines there were in all.
struct Captured {
    text: HeadTail,
    lines: LineCount,
}

/// Builds the result the model sees.
fn report(
    end: End,
    text: String,
    elapsed: Duration,
    timeout_ms: u64,
    stopped_leftovers: bool,
    max_timeout_ms: u64,
) -> ToolOutput {
    let mut content = text;
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    let secs = elapsed.as_secs_f64();
    let (is_error, summary) = match end {
        End::Exited(Ok(status)) => {
            let (what, failed) = match (status.code(), status.signal()) {
                (Some(code), _) => (format!("exit code {code}"), code != 0),
                (None, Some(sig)) => (format!("killed by signal {sig}{}", signal_name(sig)), true),
                (None, None) => ("exit status unknown".to_string(), true),
            };
            if content.is_empty() {
                content = format!("[{what}; no output]");
            } else {
                content.push_str(&format!("[{what}]"));
            }
            (failed, format!("{what} in {secs:.1} s"))
        }
        End::Exited(Err(e)) => {
            content.push_str(&format!(
                "[waiting for the command failed: {e}; it was killed]"
            ));
            (true, "failed".to_string())
        }
        End::TimedOut => {
            content.push_str(&format!(
                "[timed out after {timeout_ms} ms; the command's process group (it and its child \
                 processes) was killed. For long-running commands such as servers or watchers \
                 use run_in_background: true; otherwise raise timeout_ms (max {max_timeout_ms})]"
            ));
            (true, format!("timed out after {timeout_ms} ms"))
        }
        End::Killed(by) => {
            let text = format!(
                "Killed by the user ({by}): the command and every process it started were stopped."
            );
            content = if content.is_empty() {
                text
            } else {
                format!("{text}\nOutput before the kill:\n{content}")
            };
            (true, format!("killed by {by}"))
        }
        End::Cancelled => {
            let text = agentd_core::texts::CANCELLED_BY_USER;
            content = if content.is_empty() {
                text.to_string()
            } else {
                format!("{text}\nOutput before the cancel:\n{content}")
            };
            (true, "cancelled".to_string())
        }
    };
    if stopped_leftovers {
        content.push_str(
            "\n[processes the command left running were stopped; use run_in_background for \
             long-running processes]",
        );
    }
    ToolOutput {
        content,
        is_error,
        summary,
        diff: None,
        preview: None,
        images: Vec::new(),
    }
}

fn signal_name(sig: i32) -> String {
    Signal::try_from(sig)
        .map(|s| format!(" ({s})"))
        .unwrap_or_default()
}

/// Copies the command's output into the bounded buffer until end-of-file,
/// and hands it to `live` (if anyone watches) when a chunk is due. Sending
/// never waits, so the command is never held up by its viewers. When
/// `stop` fires it returns the pipe, read up to a chunk boundary (the
/// command moves to the background and its new owner reads on).
async fn pump(
    mut receiver: pipe::Receiver,
    output: Arc<Mutex<Captured>>,
    mut live: Option<Coalescer>,
    stop: CancellationToken,
) -> Option<pipe::Receiver> {
    let mut buf = vec![0u8; 64 * 1024];
    let handed_back = loop {
        let due = live.as_ref().and_then(Coalescer::due);
        // Reading is cancel-safe: a read that loses the race has taken
        // nothing from the pipe.
        let read = tokio::select! {
            biased;
            () = stop.cancelled() => break true,
            read = receiver.read(&mut buf) => read,
            () = until(due) => {
                if let Some(live) = &mut live {
                    live.flush(Instant::now());
                }
                continue;
            }
        };
        match read {
            Ok(0) | Err(_) => break false,
            Ok(n) => {
                let bytes = &buf[..n];
                {
                    let mut captured = output.lock().unwrap_or_else(|p| p.into_inner());
                    captured.text.push(bytes);
                    captured.lines.push(bytes);
                }
                if let Some(live) = &mut live {
                    live.push(bytes);
                }
            }
        }
    };
    if let Some(live) = live {
        live.finish();
    }
    handed_back.then_some(receiver)
}

/// Returns at `due`; never without one.
async fn until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// Kills the process group when the run is abandoned halfway (its future
/// dropped), so no process of the command is left behind.
struct GroupGuard {
    group: Group,
    armed: bool,
    reader: AbortHandle,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.group.signal(Signal::SIGKILL);
        }
        self.reader.abort();
    }
}

#[cfg(test)]
mod tests {
    use nix::unistd::Pid;

    use super::*;
    use crate::process::group_alive;
    use crate::tools::tests::ctx_in;

    fn ctx(dir: &tempfile::TempDir) -> ToolContext {
        let mut ctx = ctx_in(dir.path());
        ctx.limits.kill_grace_ms = 500;
        ctx
    }

    /// The pgid the command printed first (`echo $$`).
    fn printed_pgid(content: &str) -> Pid {
        let first = content.lines().next().unwrap();
        Pid::from_raw(first.trim().parse().unwrap())
    }

    #[tokio::test]
    async fn runs_in_cwd_and_interleaves_output() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(&dir);
        let out = run(
            json!({"command": "pwd; echo out; echo err >&2; echo out2"}),
            &ctx,
        )
        .await
        .unwrap();
        assert!(!out.is_error);
        let cwd = ctx.cwd.display().to_string();
        assert_eq!(out.content, format!("{cwd}\nout\nerr\nout2\n[exit code 0]"));
        assert!(out.summary.starts_with("exit code 0"), "{}", out.summary);
    }

    #[tokio::test]
    async fn nonzero_exit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(json!({"command": "exit 3"}), &ctx(&dir)).await.unwrap();
        assert!(out.is_error);
        assert_eq!(out.content, "[exit code 3; no output]");
        let out = run(json!({"command": "kill -9 $$"}), &ctx(&dir))
            .await
            .unwrap();
        assert!(
            out.is_error && out.content.contains("killed by signal 9 (SIGKILL)"),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn stdin_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(json!({"command": "cat; echo done"}), &ctx(&dir))
            .await
            .unwrap();
        assert_eq!(out.content, "done\n[exit code 0]");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let out = run(
            json!({"command": "echo $$; sleep 30 & sleep 30 & trap '' TERM; sleep 30", "timeout_ms": 300}),
            &ctx(&dir),
        )
        .await
        .unwrap();
        assert!(out.is_error);
        assert!(
            out.content.contains("timed out after 300 ms"),
            "{}",
            out.content
        );
        assert!(
            out.content.contains("process group")
                && out.content.contains("was killed")
                && out.content.contains("use run_in_background: true"),
            "{}",
            out.content
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let pgid = printed_pgid(&out.content);
        assert!(!group_alive(pgid), "a process of group {pgid} survived");
    }

    #[tokio::test]
    async fn cancel_returns_within_grace_even_if_term_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(&dir);
        let cancel = ctx.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let out = run(
            json!({"command": "echo $$; trap '' TERM; sleep 30 & sleep 30"}),
            &ctx,
        )
        .await
        .unwrap();
        let elapsed = started.elapsed();
        assert!(out.is_error);
        assert!(
            out.content.starts_with("Cancelled by user"),
            "{}",
            out.content
        );
        // 200 ms until the cancel, 500 ms of grace, then SIGKILL.
        assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
        let pgid = Pid::from_raw(out.content.lines().nth(2).unwrap().trim().parse().unwrap());
        assert!(!group_alive(pgid));
    }

    #[tokio::test]
    async fn leftover_background_processes_are_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let out = run(
            json!({"command": "echo $$; sleep 30 >/dev/null 2>&1 & echo started"}),
            &ctx(&dir),
        )
        .await
        .unwrap();
        assert!(!out.is_error, "{}", out.content);
        assert!(
            out.content.contains("left running were stopped"),
            "{}",
            out.content
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(!group_alive(printed_pgid(&out.content)));
    }

    #[tokio::test]
    async fn dropping_the_run_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("pgid");
        let command = format!("echo $$ > {}; sleep 30", marker.display());
        let ctx = ctx(&dir);
        let fut = run(json!({"command": command}), &ctx);
        let _ = tokio::time::timeout(Duration::from_millis(300), fut).await;
        let pgid = Pid::from_raw(
            std::fs::read_to_string(&marker)
                .unwrap()
                .trim()
                .parse()
                .unwrap(),
        );
        for _ in 0..100 {
            if !group_alive(pgid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("group {pgid} survived the dropped run");
    }

    #[tokio::test]
    async fn huge_output_is_truncated_with_a_marker() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(&dir);
        let out = run(
            json!({"command": "yes | head -c 50000000; echo; echo THE END"}),
            &ctx,
        )
        .await
        .unwrap();
        assert!(!out.is_error, "{}", out.summary);
        assert!(
            out.content
                .contains("[output truncated: 50000009 bytes total"),
            "{}",
            &out.content[..200]
        );
        assert!(out.content.starts_with("y\ny\n"));
        assert!(
            out.content.ends_with("THE END\n[exit code 0]"),
            "{}",
            &out.content[out.content.len() - 100..]
        );
        assert!(
            out.content.len() <= ctx.limits.max_output_bytes,
            "{}",
            out.content.len()
        );
    }

    #[tokio::test]
    async fn background_and_empty_commands_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(
            json!({"command": "sleep 1", "run_in_background": true}),
            &ctx(&dir),
        )
        .await
        .unwrap_err()
        .0;
        assert!(
            err.contains("background shells are not available yet"),
            "{err}"
        );
        let err = run(json!({"command": "  "}), &ctx(&dir))
            .await
            .unwrap_err()
            .0;
        assert!(err.contains("empty"), "{err}");
    }

    #[tokio::test]
    async fn background_commands_return_their_shell_id_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = crate::tools::bash_output::tests::shell_ctx(&dir, "conv-a");
        let shells = ctx.shells.clone().unwrap();
        let started = Instant::now();
        let out = run(
            json!({"command": "echo $PWD; sleep 300", "run_in_background": true, "timeout_ms": 10}),
            &ctx,
        )
        .await
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(!out.is_error);
        let record = shells.list(Some("conv-a")).pop().unwrap();
        assert_eq!(
            out.content,
            format!(
                "Command running in background with ID: {}. Use bash_output to read its output \
                 and kill_shell to stop it.",
                record.id
            )
        );
        assert_eq!(
            out.summary,
            format!("started background shell {}", record.id)
        );
        assert_eq!(
            (record.command.as_str(), &record.cwd),
            ("echo $PWD; sleep 300", &ctx.cwd)
        );
        // timeout_ms does not apply: still running well after it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            shells.get(&record.id).unwrap().status,
            crate::shells::ShellStatus::Running
        );

        let moved = run_as_background_shell(&json!({"command": "sleep 300"}), &ctx).await;
        assert!(!moved.is_error, "{}", moved.content);
        let newest = shells.list(None).remove(0);
        assert!(
            moved.content.starts_with(&format!(
                "Command moved to background (shell ID: {}).",
                newest.id
            )),
            "{}",
            moved.content
        );
        let bad = run_as_background_shell(&json!({"command": " "}), &ctx).await;
        assert!(
            bad.is_error && bad.content.contains("empty"),
            "{}",
            bad.content
        );

        shells.kill_all().await;
        assert!(!group_alive(Pid::from_raw(record.pid as i32)));
    }

    #[tokio::test]
    async fn background_limit_errors_reach_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = crate::tools::bash_output::tests::shell_ctx(&dir, "c");
        let (events, _) = tokio::sync::broadcast::channel(4);
        let shells = crate::shells::ShellManager::new(
            dir.path().join("spool"),
            crate::shells::ShellLimits {
                max_total: 1,
                kill_grace_ms: 500,
                ..Default::default()
            },
            Box::new(|_: &crate::shells::ShellRecord| {}),
            events,
        );
        ctx.shells = Some(Arc::clone(&shells));
        let input = json!({"command": "sleep 300", "run_in_background": true});
        run(input.clone(), &ctx).await.unwrap();
        let err = run(input, &ctx).await.unwrap_err().0;
        assert_eq!(
            err,
            "bash: too many background shells (1 running; limit 1) — kill one with kill_shell first"
        );
        shells.kill_all().await;
    }

    #[tokio::test]
    async fn a_client_moves_a_running_command_to_the_background_and_no_output_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = crate::tools::bash_output::tests::shell_ctx(&dir, "conv-m");
        ctx.tool_use_id = "toolu_m".into();
        let shells = ctx.shells.clone().unwrap();
        let command = "echo $$; echo before; sleep 0.6; echo after; sleep 300";
        let mover = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            shells
                .control("conv-m", "toolu_m", CommandAction::Background, "alice")
                .await
        };
        let (out, moved) = tokio::join!(run(json!({"command": command}), &ctx), mover);
        let (out, id) = (out.unwrap(), moved.unwrap().unwrap());
        assert!(!out.is_error, "{}", out.content);
        assert!(
            out.content.starts_with(&format!(
                "Command moved to background (shell ID: {id}) by alice."
            )) && out.content.contains("Output so far:\n"),
            "{}",
            out.content
        );
        assert!(out.content.contains("before"), "{}", out.content);
        let record = shells.get(&id).unwrap();
        assert_eq!(
            (record.command.as_str(), &record.status),
            (command, &crate::shells::ShellStatus::Running)
        );
        // The same process group, now the shell's.
        let pgid = Pid::from_raw(out.content.lines().nth(2).unwrap().trim().parse().unwrap());
        assert_eq!(record.pid, pgid.as_raw() as u32);
        shells.wait_output(&id, record.output_bytes).await;
        let (new, _) = shells.read_new(&id, None, 10_000).await.unwrap();
        assert_eq!(
            new, "after\n",
            "bash_output starts after what the result showed"
        );
        let (all, _) = shells.read(&id, 0, 10_000).await.unwrap();
        let all = String::from_utf8_lossy(&all);
        assert!(
            all.contains("before\n") && all.ends_with("after\n"),
            "{all}"
        );
        shells.kill_all().await;
        assert!(!group_alive(pgid));
    }

    #[tokio::test]
    async fn a_client_kills_a_running_command_and_the_result_says_who() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = crate::tools::bash_output::tests::shell_ctx(&dir, "conv-k");
        ctx.limits.kill_grace_ms = 500;
        ctx.tool_use_id = "toolu_k".into();
        let shells = ctx.shells.clone().unwrap();
        let killer = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            shells
                .control("conv-k", "", CommandAction::Kill, "bob@tty2")
                .await
        };
        let command = "echo $$; echo started; trap '' TERM; sleep 300";
        let (out, killed) = tokio::join!(run(json!({"command": command}), &ctx), killer);
        let out = out.unwrap();
        assert_eq!(killed.unwrap(), None);
        assert!(out.is_error);
        assert!(
            out.content.starts_with(
                "Killed by the user (bob@tty2): the command and every process it started were \
                 stopped.\nOutput before the kill:\n"
            ) && out.content.contains("started"),
            "{}",
            out.content
        );
        assert_eq!(out.summary, "killed by bob@tty2");
        let pgid = Pid::from_raw(out.content.lines().nth(2).unwrap().trim().parse().unwrap());
        assert!(!group_alive(pgid));
        // Over: nothing runs to be asked any more.
        assert!(
            shells
                .control("conv-k", "", CommandAction::Kill, "bob")
                .await
                .is_err()
        );
    }
}
