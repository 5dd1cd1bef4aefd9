//! The tools the model can call, and the one place that runs them.
//!
//! The vocabulary is [`agentd_core::tools::Tool`]: names, and the facts the
//! policy and the runtime decide by. Every tool lives in its own file and
//! exposes the same three things: a `spec()` (what the model sees), a typed
//! input struct, and a `run` function; its row in [`handler`] (the one
//! match on `Tool` in this layer) names them, with the call's one-line
//! summary and, for a tool that changes files, its `plan`.
//! [`Registry::run`] is the only entry point the runtime uses; it turns every
//! failure — unknown tool, bad input, a path outside the working directory, an
//! I/O error, even a panic — into an `is_error` [`ToolOutput`], because the
//! model must always get an answer to its call and the daemon must never fall
//! over because of what the model sent.
//!
//! Blocking work (file system walks, reads, writes) runs on tokio's blocking
//! pool so a large grep never stalls the conversation actors. Only `bash` is
//! truly asynchronous: it owns a child process group and must react to
//! timeouts and cancellation while the command runs. Background shells are
//! not the tools' own: `bash` with `run_in_background`, `bash_output` and
//! `kill_shell` go through the daemon's [`ShellManager`].

pub(crate) mod bash;
mod bash_output;
mod diff;
mod edit;
mod glob;
mod grep;
mod input;
mod keyword_search;
mod kill_shell;
mod live;
pub(crate) use live::{LiveOutput, OutputChunk, OutputPreview};
mod own;
pub(crate) use own::OwnFiles;
mod patch;
pub(crate) mod paths;
pub(crate) use paths::resolve_real;
mod preview;
pub(crate) use preview::planned_paths;
pub(crate) use preview::preview_diff;
mod read;
mod redact;
pub(crate) use redact::Redactor;
mod summary;
pub(crate) use summary::one_line;
pub(crate) use summary::summarize_call;
mod think;
use crate::truncate;
mod walk;
mod web_fetch;
pub(crate) use web_fetch::{PageCache, WebAccess};
mod write;

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;

use agentd_core::ToolSpec;
use agentd_core::tools::{Runner, Tool};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub(crate) use bash::run_as_background_shell;

use crate::shells::{ShellManager, ShellRecord};

/// Sizes and time limits of tool runs. They are configuration, not constants,
/// because the right output budget depends on the model's context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ToolLimits {
    /// Largest tool result sent to the model, in bytes.
    pub max_output_bytes: usize,
    /// Timeout of a bash command that names none.
    pub bash_default_timeout_ms: u64,
    /// Upper bound of the timeout a bash command may ask for.
    pub bash_max_timeout_ms: u64,
    /// Time between SIGTERM and SIGKILL when a command is stopped.
    pub kill_grace_ms: u64,
    /// Lines `read` returns when the call names no limit.
    pub read_default_lines: usize,
    /// Longest line `read` returns before clipping it.
    pub max_read_line_chars: usize,
}

impl ToolLimits {
    /// The bytes a tool may spend on its main output. The rest of
    /// `max_output_bytes` is kept for the tool's closing note (exit code,
    /// "results cut", paging hint), so the registry's backstop never has to
    /// cut a result that a tool already shaped.
    pub(crate) fn content_budget(&self) -> usize {
        self.max_output_bytes
            .saturating_sub(400)
            .max(self.max_output_bytes / 2)
    }
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            max_output_bytes: 30_000,
            bash_default_timeout_ms: 120_000,
            bash_max_timeout_ms: 600_000,
            kill_grace_ms: 2_000,
            read_default_lines: 2000,
            max_read_line_chars: 2000,
        }
    }
}

/// Everything a tool run may depend on besides its input.
#[derive(Debug, Clone)]
pub(crate) struct ToolContext {
    /// The conversation's working directory: absolute and canonical.
    pub cwd: PathBuf,
    /// Further directories the tools may touch.
    pub additional_dirs: Vec<PathBuf>,
    /// Fired when the user cancels; long tools stop and report it.
    pub cancel: CancellationToken,
    /// Output sizes and timeouts.
    pub limits: ToolLimits,
    /// The daemon's background shells; None where there are none (then
    /// `run_in_background`, `bash_output` and `kill_shell` say so).
    pub shells: Option<Arc<ShellManager>>,
    /// The conversation the call belongs to: the model sees only the
    /// background shells this conversation started.
    pub conversation_id: String,
    /// The call's id (the model's `tool_use` id): clients name a running
    /// command by it to move it to the background or kill it.
    pub tool_use_id: String,
    /// Where a command's output goes while it runs, for people watching
    /// (`bash` in the foreground); None: nobody is told.
    pub live: Option<LiveOutput>,
    /// The conversation's model, for messages that name it.
    pub model: String,
    /// The limits images a tool returns must meet, when the model takes
    /// images; None: it does not, and `read` refuses image files.
    pub images: Option<agentd_core::ImageLimits>,
    /// agentd's own files, which no file tool touches (`/proc/*/environ`
    /// is refused also when this is empty).
    pub own_files: Arc<OwnFiles>,
    /// The conversation's shell and environment, for `bash` and the
    /// background shells it starts.
    pub launch: Arc<crate::process::Launch>,
    /// The sandbox `bash` runs its commands in (see
    /// [`crate::process::sandbox`]).
    pub sandboxes: Arc<crate::process::sandbox::Sandboxes>,
    /// What `web_fetch` reaches the web with.
    pub web: WebAccess,
}

impl ToolContext {
    /// A context rooted at `cwd` with default limits, no extra directories,
    /// no background shells and no conversation.
    #[cfg(test)]
    pub(crate) fn new(cwd: PathBuf) -> Self {
        ToolContext {
            cwd,
            additional_dirs: Vec::new(),
            cancel: CancellationToken::new(),
            limits: ToolLimits::default(),
            shells: None,
            conversation_id: String::new(),
            tool_use_id: String::new(),
            live: None,
            model: String::new(),
            images: None,
            own_files: Arc::default(),
            launch: Arc::default(),
            sandboxes: Arc::default(),
            web: WebAccess::default(),
        }
    }

    /// The background shells, or the error the model gets without them.
    pub(crate) fn shell_manager(&self, tool: &str) -> Result<&Arc<ShellManager>, ToolError> {
        self.shells.as_ref().ok_or_else(|| {
            ToolError::new(format!("{tool}: background shells are not available here"))
        })
    }

    /// The shell `id` if this conversation started it. Shells of other
    /// conversations are reported unknown, exactly like missing ones.
    pub(crate) fn visible_shell(&self, tool: &str, id: &str) -> Result<ShellRecord, ToolError> {
        self.shell_manager(tool)?
            .get(id)
            .filter(|r| r.conversation_id == self.conversation_id)
            .ok_or_else(|| ToolError::new(format!("unknown shell {id}")))
    }
}

/// What a tool run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolOutput {
    /// The text the model receives.
    pub content: String,
    /// The call failed; the model sees it as an error result.
    pub is_error: bool,
    /// One short line for people watching (clients), about the outcome.
    pub summary: String,
    /// The unified diff of a file change, for clients to render.
    pub diff: Option<String>,
    /// The start and end of what a command printed, for clients to show
    /// when the call ends (`bash` in the foreground).
    pub preview: Option<OutputPreview>,
    /// Images for the model with the text, checked and named by their
    /// content; the actor stores them before the result is committed.
    pub images: Vec<crate::images::StagedImage>,
}

impl ToolOutput {
    /// A successful result.
    pub(crate) fn ok(content: impl Into<String>, summary: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: false,
            summary: summary.into(),
            diff: None,
            preview: None,
            images: Vec::new(),
        }
    }

    /// A failed result whose summary is the first line of the message.
    pub(crate) fn error(content: impl Into<String>) -> Self {
        let content = content.into();
        let summary = format!("error: {}", one_line(&content, 100));
        ToolOutput {
            content,
            is_error: true,
            summary,
            diff: None,
            preview: None,
            images: Vec::new(),
        }
    }
}

/// Why a tool could not do what it was asked. The message is written for the
/// model: it says what was wrong and, where possible, what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ToolError(pub(crate) String);

impl ToolError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        ToolError(message.into())
    }

    /// This error, with the `SELF_CORRECT_ATTEMPT:` signal and its metadata
    /// after the text people and the model already read (issue 17): the
    /// core re-engages the model with the fallback request.
    pub(crate) fn with_correction(self, signal: &agentd_core::CorrectionSignal) -> Self {
        ToolError(format!("{}\n\n{}", self.0, signal.render()))
    }
}

/// How the tool layer runs a tool's calls; agrees with the core's
/// [`Runner`] (`handlers_agree_with_the_core_table`).
#[derive(Clone, Copy)]
enum Run {
    /// Asynchronous, awaited by the caller: it owns a process or talks to
    /// the background shells.
    Async(for<'a> fn(Value, &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>>),
    /// Synchronous, on the blocking pool.
    Blocking(fn(Value, &ToolContext) -> Result<ToolOutput, ToolError>),
    /// Synchronous and at once, without a context ([`Runner::Instant`]).
    Instant(fn(Value) -> Result<ToolOutput, ToolError>),
    /// Never: the core answers its calls ([`Runner::Core`]).
    Core,
}

/// The file changes a call would make, worked out without making them.
type Plan = fn(Value, &ToolContext) -> Result<Vec<diff::FileChange>, ToolError>;

/// What the tool layer has of one tool besides the core's facts: its row
/// in [`handler`]. The registry, the previews and the summaries read it,
/// so none of them matches on `Tool`.
#[derive(Clone, Copy)]
struct Handler {
    /// What the model sees; each tool's file writes its own.
    spec: fn() -> ToolSpec,
    run: Run,
    /// The call in one line after the tool's name ("edit src/main.rs");
    /// `None` when the input lacks what the line needs.
    summary: fn(Tool, &Value) -> Option<String>,
    /// For tools that change files: what a call would change, for the
    /// permission prompt's diff and the checkpoints.
    plan: Option<Plan>,
}

impl Handler {
    const fn new(
        spec: fn() -> ToolSpec,
        run: Run,
        summary: fn(Tool, &Value) -> Option<String>,
    ) -> Self {
        Handler {
            spec,
            run,
            summary,
            plan: None,
        }
    }

    const fn planned(self, plan: Plan) -> Self {
        Handler {
            plan: Some(plan),
            ..self
        }
    }
}

/// Every tool's row: the one match on `Tool` in the tool layer.
fn handler(tool: Tool) -> Handler {
    use Run::{Async, Blocking, Core, Instant};
    match tool {
        Tool::Bash => Handler::new(
            bash::spec,
            Async(|i, c| Box::pin(bash::run(i, c))),
            summary::bash,
        ),
        Tool::BashOutput => Handler::new(
            bash_output::spec,
            Async(|i, c| Box::pin(bash_output::run(i, c))),
            summary::bash_output,
        ),
        Tool::KillShell => Handler::new(
            kill_shell::spec,
            Async(|i, c| Box::pin(kill_shell::run(i, c))),
            summary::kill_shell,
        ),
        Tool::Read => Handler::new(read::spec, Blocking(read::run), summary::read),
        Tool::Write => {
            Handler::new(write::spec, Blocking(write::run), summary::path).planned(write::plan)
        }
        Tool::Edit => {
            Handler::new(edit::spec, Blocking(edit::run), summary::path).planned(edit::plan)
        }
        Tool::Patch => {
            Handler::new(patch::spec, Blocking(patch::run), summary::patch).planned(patch::plan)
        }
        Tool::Glob => Handler::new(glob::spec, Blocking(glob::run), summary::pattern),
        Tool::Grep => Handler::new(grep::spec, Blocking(grep::run), summary::pattern),
        Tool::KeywordSearch => Handler::new(
            keyword_search::spec,
            Blocking(keyword_search::run),
            summary::keyword_search,
        ),
        Tool::Think => Handler::new(think::spec, Instant(think::run), summary::name),
        Tool::RequestModeUpgrade => Handler::new(
            agentd_core::tools::request_mode_upgrade_spec,
            Core,
            summary::name,
        ),
        Tool::ProposePlan => Handler::new(
            agentd_core::plan::propose_plan_spec,
            Core,
            summary::propose_plan,
        ),
        Tool::UpdatePlan => Handler::new(
            agentd_core::plan::update_plan_spec,
            Core,
            summary::update_plan,
        ),
        Tool::SpawnAgents => Handler::new(
            agentd_core::tools::spawn_agents_spec,
            Core,
            summary::spawn_agents,
        ),
        Tool::SubmitResult => {
            Handler::new(agentd_core::tools::submit_result_spec, Core, summary::name)
        }
        Tool::WebFetch => Handler::new(
            web_fetch::spec,
            Async(|i, c| Box::pin(web_fetch::run(i, c))),
            web_fetch::summary,
        ),
    }
}

/// Whether this registry runs calls of `tool` (the core answers the rest).
fn runs_here(tool: Tool) -> bool {
    match tool.runner() {
        Runner::Spawned | Runner::Instant => true,
        Runner::Core => false,
    }
}

/// The set of tools and their specs. Specs are built once because the
/// runtime asks for them on every model request.
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    /// Every tool's spec, in the order the model sees them.
    specs: Vec<(Tool, ToolSpec)>,
    /// What a model request offers in the unrestricted modes: every tool.
    offer_all: Arc<[ToolSpec]>,
    /// What it offers in the restricted modes: the read-only tools and
    /// `request_mode_upgrade`.
    offer_restricted: Arc<[ToolSpec]>,
    /// What a sub-agent is offered, unrestricted and restricted: the same
    /// without `spawn_agents` (no nesting) and `request_mode_upgrade`
    /// (REQ-BED-018), with `submit_result`.
    offer_child_all: Arc<[ToolSpec]>,
    offer_child_restricted: Arc<[ToolSpec]>,
    /// Pages `web_fetch` read lately, shared by every conversation.
    pages: Arc<PageCache>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// All built-in tools.
    pub(crate) fn new() -> Self {
        let specs: Vec<(Tool, ToolSpec)> = Tool::ALL
            .iter()
            .map(|&t| (t, (handler(t).spec)()))
            .collect();
        let offer = |restricted: bool, child: bool| -> Arc<[ToolSpec]> {
            specs
                .iter()
                .filter(|(t, _)| t.is_offered(restricted))
                .filter(|(t, _)| match t {
                    Tool::SubmitResult => child,
                    Tool::SpawnAgents | Tool::RequestModeUpgrade => !child,
                    _ => true,
                })
                .map(|(_, s)| s.clone())
                .collect()
        };
        Registry {
            offer_all: offer(false, false),
            offer_restricted: offer(true, false),
            offer_child_all: offer(false, true),
            offer_child_restricted: offer(true, true),
            specs,
            pages: Arc::default(),
        }
    }

    /// The daemon's cache of fetched pages, for the tools' contexts.
    pub(crate) fn page_cache(&self) -> Arc<PageCache> {
        self.pages.clone()
    }

    /// Specs (name, description, JSON schema) of the tools this registry
    /// runs, in a stable order. `read_only` = true returns only read-only
    /// tools.
    #[cfg(test)]
    pub(crate) fn specs(&self, read_only: bool) -> Vec<ToolSpec> {
        self.specs
            .iter()
            .filter(|(t, _)| runs_here(*t) && (!read_only || t.is_read_only()))
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// The tools a model request offers: all of them, or in a restricted
    /// mode the read-only ones and `request_mode_upgrade`. Shared, not
    /// copied: every request of a conversation sends the same list.
    pub(crate) fn offered(&self, restricted: bool) -> Arc<[ToolSpec]> {
        if restricted {
            self.offer_restricted.clone()
        } else {
            self.offer_all.clone()
        }
    }

    /// The tools a sub-agent's model request offers (see `offered`).
    pub(crate) fn offered_to_sub_agent(&self, restricted: bool) -> Arc<[ToolSpec]> {
        if restricted {
            self.offer_child_restricted.clone()
        } else {
            self.offer_child_all.clone()
        }
    }

    /// Runs a tool that finishes at once and touches nothing outside the
    /// daemon (`think`), or returns `None` for every other tool. The
    /// runtime runs such a call inline, without persisting the call before
    /// it: running it again after a crash changes nothing.
    pub(crate) fn run_instant(&self, name: &str, input: &Value) -> Option<ToolOutput> {
        let tool = Tool::from_name(name)?;
        match tool.runner() {
            Runner::Instant => {
                Some(run_now(tool, input.clone()).unwrap_or_else(|e| ToolOutput::error(e.0)))
            }
            Runner::Spawned | Runner::Core => None,
        }
    }

    /// Runs a tool. Never panics: every failure becomes an `is_error`
    /// output whose content says what was wrong.
    pub(crate) async fn run(&self, name: &str, input: Value, ctx: &ToolContext) -> ToolOutput {
        let Some(tool) = Tool::from_name(name).filter(|t| runs_here(*t)) else {
            let names: Vec<&str> = self
                .specs
                .iter()
                .filter(|(t, _)| runs_here(*t))
                .map(|(t, _)| t.name())
                .collect();
            return ToolOutput::error(format!(
                "unknown tool `{name}`; available tools: {}",
                names.join(", ")
            ));
        };
        // A panic in a tool is a bug, but it must cost one error result, not
        // the conversation actor that awaits this future.
        let result = AssertUnwindSafe(dispatch(tool, input, ctx))
            .catch_unwind()
            .await;
        let mut out = match result {
            Ok(Ok(out)) => out,
            // A panic is the seed's "Error executing {tool}: {error}"; a
            // tool's own errors say what was wrong in its words.
            Ok(Err(e)) if e.0 == TOOL_PANICKED => ToolOutput::error(
                agentd_core::texts::tool_execution_error(name, TOOL_PANICKED),
            ),
            Ok(Err(e)) => ToolOutput::error(e.0),
            Err(_) => ToolOutput::error(agentd_core::texts::tool_execution_error(
                name,
                TOOL_PANICKED,
            )),
        };
        // Each tool budgets its own output; this is the backstop that keeps
        // the promise to the model whatever a tool did.
        if out.content.len() > ctx.limits.max_output_bytes {
            out.content = truncate::truncate(&out.content, ctx.limits.max_output_bytes);
        }
        out
    }
}

async fn dispatch(tool: Tool, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    match handler(tool).run {
        Run::Async(run) => run(input, ctx).await,
        Run::Blocking(run) => blocking(ctx, tool.is_read_only(), move |c| run(input, c)).await,
        Run::Instant(run) => run(input),
        // `Registry::run` never gets here: the core answers these calls.
        Run::Core => Err(ToolError::new(format!(
            "{tool}: the daemon answers this call itself; it is never run"
        ))),
    }
}

/// Runs an instant tool (see [`Runner::Instant`]): synchronously, without
/// a context.
fn run_now(tool: Tool, input: Value) -> Result<ToolOutput, ToolError> {
    match handler(tool).run {
        Run::Instant(run) => run(input),
        Run::Async(_) | Run::Blocking(_) | Run::Core => Err(ToolError::new(format!(
            "{tool}: not an instant tool, it cannot run inline"
        ))),
    }
}

/// Runs a synchronous tool on the blocking pool. Read-only tools stop
/// waiting as soon as the user cancels (the walkers notice the token and
/// wind down on their own; a read simply finishes unobserved); tools that write are awaited to the end, because
/// reporting "cancelled" for a write that then happens would be a lie.
async fn blocking<F>(
    ctx: &ToolContext,
    abandon_on_cancel: bool,
    f: F,
) -> Result<ToolOutput, ToolError>
where
    F: FnOnce(&ToolContext) -> Result<ToolOutput, ToolError> + Send + 'static,
{
    let owned = ctx.clone();
    let handle = crate::tasks::spawn_blocking("tool file work", move || f(&owned));
    let joined = if abandon_on_cancel {
        tokio::select! {
            joined = handle => joined,
            () = ctx.cancel.cancelled() => return Ok(cancelled_output()),
        }
    } else {
        handle.await
    };
    match joined {
        Ok(result) => result,
        Err(e) if e.is_panic() => Err(ToolError::new(TOOL_PANICKED)),
        Err(_) => Ok(cancelled_output()),
    }
}

/// What a tool that panicked failed with.
const TOOL_PANICKED: &str = "internal error (the tool panicked)";

/// The result of a tool the user cancelled while it ran.
pub(crate) fn cancelled_output() -> ToolOutput {
    ToolOutput {
        content: agentd_core::texts::CANCELLED_BY_USER.to_string(),
        is_error: true,
        summary: "cancelled".to_string(),
        diff: None,
        preview: None,
        images: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn ctx_in(dir: &std::path::Path) -> ToolContext {
        ToolContext::new(dir.canonicalize().unwrap())
    }

    #[test]
    fn specs_are_lean_and_ordered() {
        let reg = Registry::new();
        let all = reg.specs(false);
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "bash",
                "bash_output",
                "kill_shell",
                "read",
                "write",
                "edit",
                "patch",
                "glob",
                "grep",
                "keyword_search",
                "web_fetch",
                "think"
            ]
        );
        let ro: Vec<String> = reg.specs(true).into_iter().map(|s| s.name).collect();
        assert_eq!(
            ro,
            [
                "bash_output",
                "read",
                "glob",
                "grep",
                "keyword_search",
                "web_fetch",
                "think"
            ]
        );
        let bytes = serde_json::to_string(&all).unwrap().len();
        assert!(bytes < 6_000, "tool specs are {bytes} bytes of JSON");
        for s in &all {
            assert_eq!(s.input_schema["type"], "object", "{}", s.name);
        }
    }

    #[test]
    fn restricted_modes_offer_read_only_tools_and_the_upgrade() {
        let reg = Registry::new();
        let names = |restricted: bool| -> Vec<String> {
            reg.offered(restricted)
                .iter()
                .map(|s| s.name.clone())
                .collect()
        };
        // The tools the core answers join the ones this registry runs: the
        // plan tools and spawn_agents in every mode (a sub-agent's children
        // are narrowed to its mode), the upgrade in the restricted ones.
        let mut all: Vec<String> = reg.specs(false).into_iter().map(|s| s.name).collect();
        all.extend(["propose_plan", "update_plan", "spawn_agents"].map(String::from));
        assert_eq!(names(false), all);
        let mut restricted: Vec<String> = reg.specs(true).into_iter().map(|s| s.name).collect();
        restricted.extend(
            [
                "request_mode_upgrade",
                "propose_plan",
                "update_plan",
                "spawn_agents",
            ]
            .map(String::from),
        );
        assert_eq!(names(true), restricted);
    }

    /// A sub-agent is offered the same tools without spawn_agents (no
    /// nesting) and request_mode_upgrade (REQ-BED-018), with submit_result.
    #[test]
    fn sub_agents_are_offered_submit_result_and_no_nesting() {
        let reg = Registry::new();
        for restricted in [false, true] {
            let parent: Vec<String> = reg
                .offered(restricted)
                .iter()
                .map(|s| s.name.clone())
                .collect();
            let child: Vec<String> = reg
                .offered_to_sub_agent(restricted)
                .iter()
                .map(|s| s.name.clone())
                .collect();
            let mut expected: Vec<String> = parent
                .into_iter()
                .filter(|n| n != "spawn_agents" && n != "request_mode_upgrade")
                .collect();
            expected.push("submit_result".to_string());
            assert_eq!(child, expected, "restricted: {restricted}");
        }
    }

    /// Each row of `handler` runs as the core's table says, offers the spec
    /// of its own tool, and plans changes only for a tool that writes.
    #[test]
    fn handlers_agree_with_the_core_table() {
        for &tool in Tool::ALL {
            let row = handler(tool);
            let runner = match row.run {
                Run::Async(_) | Run::Blocking(_) => Runner::Spawned,
                Run::Instant(_) => Runner::Instant,
                Run::Core => Runner::Core,
            };
            assert_eq!(runner, tool.runner(), "{tool}");
            assert_eq!((row.spec)().name, tool.name());
            if row.plan.is_some() {
                assert!(
                    tool.subject().writes_files() && !tool.is_read_only(),
                    "{tool}"
                );
            }
        }
    }

    /// Only `think` runs inline; every other call, known or not, is left to
    /// the spawned path.
    #[test]
    fn only_instant_tools_run_inline() {
        let reg = Registry::new();
        let input = json!({"thought": "hm", "command": "true", "path": "x"});
        for &tool in Tool::ALL {
            let out = reg.run_instant(tool.name(), &input);
            assert_eq!(out.is_some(), tool == Tool::Think, "{tool}");
        }
        let out = reg.run_instant("think", &json!({"thought": "hm"})).unwrap();
        assert!(!out.is_error, "{}", out.content);
        let out = reg.run_instant("think", &json!({})).unwrap();
        assert!(out.is_error);
        assert!(reg.run_instant("frobnicate", &json!({})).is_none());
    }

    /// The core answers `request_mode_upgrade`; should a call reach the
    /// registry, it is as unknown here as any other name.
    #[tokio::test]
    async fn core_answered_tools_are_not_run_here() {
        let dir = tempfile::tempdir().unwrap();
        let out = Registry::new()
            .run(
                "request_mode_upgrade",
                json!({"reason": "x"}),
                &ctx_in(dir.path()),
            )
            .await;
        assert!(out.is_error);
        assert!(
            out.content
                .starts_with("unknown tool `request_mode_upgrade`; available tools: bash,"),
            "{}",
            out.content
        );
        assert!(
            !out.content.ends_with("request_mode_upgrade"),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn unknown_tool_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = Registry::new()
            .run("frobnicate", json!({}), &ctx_in(dir.path()))
            .await;
        assert!(out.is_error);
        assert!(
            out.content.contains("unknown tool `frobnicate`"),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn malformed_inputs_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx_in(dir.path());
        let reg = Registry::new();

        let out = reg.run("bash", json!("{\"command\": \"ls"), &ctx).await;
        assert!(out.is_error);
        assert!(out.content.contains("not valid JSON"), "{}", out.content);

        let out = reg.run("bash", json!({}), &ctx).await;
        assert!(out.is_error);
        assert_eq!(out.content, "bash: missing field `command`");

        let out = reg
            .run("bash", json!({"command": "true", "timeout_ms": "5"}), &ctx)
            .await;
        assert!(out.is_error);
        assert!(
            out.content.contains("`timeout_ms`") && out.content.contains("integer"),
            "{}",
            out.content
        );

        let out = reg
            .run("read", json!({"path": "x", "bogus": 1}), &ctx)
            .await;
        assert!(out.is_error);
        assert!(
            out.content.contains("unknown field `bogus`"),
            "{}",
            out.content
        );

        let out = reg.run("read", json!([1, 2]), &ctx).await;
        assert!(out.is_error);
        assert!(out.content.contains("JSON object"), "{}", out.content);

        let out = reg
            .run("keyword_search", json!({"keywords": [1]}), &ctx)
            .await;
        assert!(out.is_error);
        assert!(out.content.contains("`keywords`"), "{}", out.content);
    }

    #[tokio::test]
    async fn cancelled_searches_say_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "needle\n").unwrap();
        let ctx = ctx_in(dir.path());
        ctx.cancel.cancel();
        for (tool, input) in [
            ("grep", json!({"pattern": "needle"})),
            ("glob", json!({"pattern": "*"})),
            ("keyword_search", json!({"keywords": ["needle"]})),
            ("bash", json!({"command": "echo hi"})),
        ] {
            let out = Registry::new().run(tool, input, &ctx).await;
            assert!(out.is_error, "{tool}");
            assert_eq!(out.content, agentd_core::texts::CANCELLED_BY_USER, "{tool}");
        }
    }

    #[tokio::test]
    async fn tool_output_fits_the_budget_with_one_marker() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = ctx_in(dir.path());
        ctx.limits.max_output_bytes = 5_000;
        let out = Registry::new()
            .run("bash", json!({"command": "seq 1 100000"}), &ctx)
            .await;
        assert!(out.content.len() <= 5_000, "{}", out.content.len());
        assert_eq!(
            out.content.matches("output truncated").count(),
            1,
            "{}",
            out.content
        );
        assert!(
            out.content.ends_with("100000\n[exit code 0]"),
            "{}",
            out.content
        );
    }
}
