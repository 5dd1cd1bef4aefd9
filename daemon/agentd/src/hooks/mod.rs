//! Hooks: commands the user configures to run at points of a turn, which
//! may steer it (README "Hooks" documents them for users).
//!
//! The core decides what a `pre_tool_use` or `stop` answer means (see
//! `agentd_core::hooks`); this module is the edge that runs them: which
//! hooks apply, the JSON object each gets on stdin, the process
//! ([`runner`]), and how its exit code and stdout read. Every hook that
//! runs gives a [`HookReport`] that clients are shown, failures and
//! timeouts included.
//!
//! The answer convention, for every event: exit 0 with stdout empty or a
//! JSON object (`decision`, `reason`, `input`, `context`, as the event
//! allows); exit 2 blocks (what "blocks" means depends on the event) with
//! stderr as the reason; any other exit, a timeout, or stdout that is not
//! such an object is a failure, reported, and counts as no answer.

mod runner;

use crate::store::{FilePin, TrustRecord};
use agentd_core::hooks::{HookMatchers, HookVerdict, matcher_matches};
use agentd_core::{Action, Policy, Rule, ToolCall};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Where hooks of a project live, relative to a directory the user
/// trusted (`agent trust DIR`).
pub const PROJECT_FILE: &str = ".agentd/config.toml";

/// The points of a turn hooks run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    PreToolUse,
    PostToolUse,
    UserPromptSubmit,
    Stop,
    Notification,
    SessionStart,
}

impl Stage {
    /// The config and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::PreToolUse => "pre_tool_use",
            Stage::PostToolUse => "post_tool_use",
            Stage::UserPromptSubmit => "user_prompt_submit",
            Stage::Stop => "stop",
            Stage::Notification => "notification",
            Stage::SessionStart => "session_start",
        }
    }
}

/// What a notification is about; a notification hook's matcher names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationKind {
    /// A permission request waits for an answer.
    PermissionRequest,
    /// A turn ended (done, failed or cancelled).
    TurnEnd,
}

impl NotificationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationKind::PermissionRequest => "permission_request",
            NotificationKind::TurnEnd => "turn_end",
        }
    }

    fn parse(text: &str) -> Option<NotificationKind> {
        match text.trim() {
            "permission_request" => Some(NotificationKind::PermissionRequest),
            "turn_end" => Some(NotificationKind::TurnEnd),
            _ => None,
        }
    }
}

/// One hook as the config file writes it (`[[hooks.pre_tool_use]]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    /// `pre_tool_use`/`post_tool_use`: a permission rule pattern
    /// (`bash(git push:*)`, `write(src/**)`, `bash`); `notification`: the
    /// kind (`permission_request`, `turn_end`). Absent or `*`: everything.
    /// Other events take none.
    pub matcher: Option<String>,
    /// Run with `bash -c` in the conversation's working directory.
    pub command: String,
    /// Overrides `hooks.timeout_ms` for this hook.
    pub timeout_ms: Option<u64>,
}

/// The hooks of each event, in the order they run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HookLists {
    pub pre_tool_use: Vec<HookSpec>,
    pub post_tool_use: Vec<HookSpec>,
    pub user_prompt_submit: Vec<HookSpec>,
    pub stop: Vec<HookSpec>,
    pub notification: Vec<HookSpec>,
    pub session_start: Vec<HookSpec>,
}

/// The `[hooks]` section of the user's config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HooksSection {
    /// A hook's time limit unless it sets its own, ms.
    pub timeout_ms: u64,
    /// How many times `stop` hooks may make the model continue one turn.
    pub max_stop_continuations: u32,
    pub pre_tool_use: Vec<HookSpec>,
    pub post_tool_use: Vec<HookSpec>,
    pub user_prompt_submit: Vec<HookSpec>,
    pub stop: Vec<HookSpec>,
    pub notification: Vec<HookSpec>,
    pub session_start: Vec<HookSpec>,
}

impl Default for HooksSection {
    fn default() -> Self {
        HooksSection {
            timeout_ms: 60_000,
            max_stop_continuations: 3,
            pre_tool_use: Vec::new(),
            post_tool_use: Vec::new(),
            user_prompt_submit: Vec::new(),
            stop: Vec::new(),
            notification: Vec::new(),
            session_start: Vec::new(),
        }
    }
}

impl HooksSection {
    /// The lists, without the settings.
    pub fn lists(&self) -> HookLists {
        HookLists {
            pre_tool_use: self.pre_tool_use.clone(),
            post_tool_use: self.post_tool_use.clone(),
            user_prompt_submit: self.user_prompt_submit.clone(),
            stop: self.stop.clone(),
            notification: self.notification.clone(),
            session_start: self.session_start.clone(),
        }
    }
}

/// A project's `.agentd/config.toml`: hooks only.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectFile {
    #[serde(default)]
    hooks: HookLists,
}

/// What a hook's matcher selects.
#[derive(Debug, Clone, PartialEq)]
pub enum Matcher {
    All,
    /// Tool calls, as a deny rule with this pattern would match them.
    Rule(Rule),
    /// Notifications of this kind.
    Kind(NotificationKind),
}

/// One hook, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    pub stage: Stage,
    pub matcher: Matcher,
    pub command: String,
    pub timeout: Duration,
}

/// Every hook of a conversation: the user's, then its trusted project's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hooks {
    pub hooks: Vec<Hook>,
    pub max_stop_continuations: u32,
    /// Why the project's file contributes nothing, when it does not (see
    /// [`Hooks::for_conversation`]): told to clients with each message.
    pub problem: Option<String>,
}

impl Hooks {
    /// Checks the lists: matchers parse, commands are not empty, and
    /// events without matchers have none. The error names the hook.
    pub fn compile(lists: &HookLists, timeout_ms: u64) -> Result<Vec<Hook>, String> {
        let mut out = Vec::new();
        for (stage, specs) in [
            (Stage::PreToolUse, &lists.pre_tool_use),
            (Stage::PostToolUse, &lists.post_tool_use),
            (Stage::UserPromptSubmit, &lists.user_prompt_submit),
            (Stage::Stop, &lists.stop),
            (Stage::Notification, &lists.notification),
            (Stage::SessionStart, &lists.session_start),
        ] {
            for (i, spec) in specs.iter().enumerate() {
                let name = format!("hooks.{}[{i}]", stage.as_str());
                if spec.command.trim().is_empty() {
                    return Err(format!("{name}: command is empty"));
                }
                let matcher = match spec.matcher.as_deref().map(str::trim) {
                    None | Some("*") | Some("") => Matcher::All,
                    Some(text) => match stage {
                        Stage::PreToolUse | Stage::PostToolUse => Matcher::Rule(
                            Rule::parse(text, Action::Deny)
                                .map_err(|e| format!("{name}: matcher {text:?}: {e}"))?,
                        ),
                        Stage::Notification => {
                            Matcher::Kind(NotificationKind::parse(text).ok_or_else(|| {
                                format!(
                                    "{name}: matcher {text:?}: expected `permission_request` or `turn_end`"
                                )
                            })?)
                        }
                        Stage::UserPromptSubmit | Stage::Stop | Stage::SessionStart => {
                            return Err(format!(
                                "{name}: {} hooks take no matcher",
                                stage.as_str()
                            ));
                        }
                    },
                };
                let timeout_ms = spec.timeout_ms.unwrap_or(timeout_ms);
                if timeout_ms == 0 {
                    return Err(format!("{name}: timeout_ms must be at least 1"));
                }
                out.push(Hook {
                    stage,
                    matcher,
                    command: spec.command.clone(),
                    timeout: Duration::from_millis(timeout_ms),
                });
            }
        }
        Ok(out)
    }

    /// The user's hooks (from the config file) plus those of the project
    /// `cwd` belongs to when a directory at or above it is in `trusted`
    /// and the project's file is as it was pinned when trusted (same bytes,
    /// same owner). `cwd` is made canonical first, so `<trusted>/../x` is
    /// not under `<trusted>`. A project file that cannot be read or
    /// checked, or that changed since it was trusted, is reported in the
    /// second value and contributes nothing.
    pub fn for_conversation(
        user: &Hooks,
        section_timeout_ms: u64,
        cwd: &Path,
        trusted: &[(PathBuf, TrustRecord)],
    ) -> (Hooks, Option<String>) {
        let mut hooks = user.clone();
        let Ok(cwd) = std::fs::canonicalize(cwd) else {
            return (hooks, None);
        };
        let Some(file) = project_file(&cwd) else {
            return (hooks, None);
        };
        let Some(project) = file.parent().and_then(Path::parent) else {
            return (hooks, None);
        };
        let covering: Vec<&(PathBuf, TrustRecord)> = trusted
            .iter()
            .filter(|(dir, _)| project.starts_with(dir))
            .collect();
        if covering.is_empty() {
            return (hooks, None);
        }
        let loaded = read_pinned(&file, covering.iter().map(|(_, t)| t))
            .map_err(|why| (why, true))
            .and_then(|text| {
                toml::from_str::<ProjectFile>(&text).map_err(|e| (e.message().to_string(), false))
            })
            .and_then(|parsed| {
                Hooks::compile(&parsed.hooks, section_timeout_ms).map_err(|e| (e, false))
            });
        match loaded {
            Ok(more) => {
                hooks.hooks.extend(more);
                (hooks, None)
            }
            Err((e, unpinned)) => {
                let again = if unpinned {
                    format!(
                        "; read it, then run `agent trust {}` to trust it as it is now",
                        project.display()
                    )
                } else {
                    String::new()
                };
                (
                    hooks,
                    Some(format!(
                        "project hooks in {} are ignored: {e}{again}",
                        file.display()
                    )),
                )
            }
        }
    }

    /// The hooks of `stage`.
    pub fn of(&self, stage: Stage) -> impl Iterator<Item = &Hook> {
        self.hooks.iter().filter(move |h| h.stage == stage)
    }

    /// What the core decides by: the `pre_tool_use` matchers and whether
    /// `stop` hooks exist.
    pub fn matchers(&self, stop_continuations: u32) -> HookMatchers {
        HookMatchers {
            pre_tool_use: self
                .of(Stage::PreToolUse)
                .map(|h| match &h.matcher {
                    Matcher::Rule(rule) => Some(rule.clone()),
                    Matcher::All | Matcher::Kind(_) => None,
                })
                .collect(),
            stop: self.of(Stage::Stop).next().is_some(),
            max_stop_continuations: self.max_stop_continuations,
            stop_continuations,
        }
    }

    /// The hooks of a tool stage whose matchers match `call`.
    pub fn for_call(&self, stage: Stage, policy: &Policy, call: &ToolCall) -> Vec<Hook> {
        self.of(stage)
            .filter(|h| match &h.matcher {
                Matcher::All => true,
                Matcher::Rule(rule) => matcher_matches(Some(rule), policy, call),
                Matcher::Kind(_) => false,
            })
            .cloned()
            .collect()
    }

    /// The notification hooks for `kind`.
    pub fn for_notification(&self, kind: NotificationKind) -> Vec<Hook> {
        self.of(Stage::Notification)
            .filter(|h| match &h.matcher {
                Matcher::All => true,
                Matcher::Kind(k) => *k == kind,
                Matcher::Rule(_) => false,
            })
            .cloned()
            .collect()
    }

    /// The hooks of `stage` (for events without matchers).
    pub fn all_of(&self, stage: Stage) -> Vec<Hook> {
        self.of(stage).cloned().collect()
    }
}

/// The nearest `.agentd/config.toml` at or above `cwd`.
/// The text of the project file `file` when one of `trusts` pinned it as
/// it is now (its bytes and owner), read once so what is checked is what
/// is parsed; else why not.
fn read_pinned<'a>(
    file: &Path,
    trusts: impl Iterator<Item = &'a TrustRecord>,
) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let bytes = std::fs::read(file).map_err(|e| e.to_string())?;
    let uid = std::fs::metadata(file).map_err(|e| e.to_string())?.uid();
    let pins: Vec<&FilePin> = trusts
        .flat_map(|t| t.pinned.iter())
        .filter(|p| p.path == file)
        .collect();
    if pins.is_empty() {
        return Err("it was not there when its directory was trusted".into());
    }
    let sha256 = sha256_hex(&bytes);
    if !pins.iter().any(|p| p.sha256 == sha256) {
        return Err("it changed since its directory was trusted".into());
    }
    if !pins.iter().any(|p| p.sha256 == sha256 && p.uid == uid) {
        return Err(format!(
            "its owner changed since its directory was trusted (now uid {uid})"
        ));
    }
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8".to_string())
}

/// Most project files one `agent trust` pins: a directory with more
/// projects than this is better trusted project by project.
const MAX_PINS: usize = 256;
/// How deep under a trusted directory project files are looked for.
const PIN_DEPTH: usize = 8;

/// The project files at or under `dir` (canonical) as they are now, for
/// `agent trust`: ripgrep's walker, honouring `.gitignore` so `target/`
/// and `node_modules/` are not searched, symbolic links not followed, at
/// most [`PIN_DEPTH`] levels and [`MAX_PINS`] files.
pub fn pins_under(dir: &Path) -> Vec<FilePin> {
    use std::os::unix::fs::MetadataExt;
    let walk = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .parents(false)
        .require_git(false)
        .max_depth(Some(PIN_DEPTH))
        .filter_entry(|e| e.file_name() != ".git")
        .build();
    let mut pins = Vec::new();
    for entry in walk.flatten() {
        let path = entry.path();
        if !path.ends_with(PROJECT_FILE) {
            continue;
        }
        let (Ok(bytes), Ok(meta)) = (std::fs::read(path), std::fs::symlink_metadata(path)) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        pins.push(FilePin {
            path: path.to_path_buf(),
            sha256: sha256_hex(&bytes),
            uid: meta.uid(),
        });
        if pins.len() == MAX_PINS {
            break;
        }
    }
    pins
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn project_file(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .map(|d| d.join(PROJECT_FILE))
        .find(|f| f.is_file())
}

/// What clients are told about one hook that ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookReport {
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
pub struct Env {
    pub cwd: PathBuf,
    pub conversation_id: String,
    /// Grace between SIGTERM and SIGKILL when a hook is stopped.
    pub grace: Duration,
    /// Fires when the turn is cancelled: running hooks are killed.
    pub cancel: CancellationToken,
}

impl Env {
    /// The JSON object every hook gets, with the event's own fields.
    fn payload(&self, stage: Stage, fields: Value) -> Vec<u8> {
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
struct Answer {
    decision: Option<String>,
    reason: Option<String>,
    input: Option<Value>,
    context: Option<String>,
}

/// How one hook answered, before the event's meaning is applied.
enum Said {
    Answered(Answer),
    /// Exit 2: the reason is its stderr.
    Blocked(String),
    Failed(String),
}

/// Runs `hook` and reads its answer; the report is completed by the caller
/// (the decision) through the returned closure's inputs.
async fn ask(hook: &Hook, env: &Env, payload: &[u8]) -> (Said, u64) {
    let started = Instant::now();
    let result = runner::run(
        &hook.command,
        &env.cwd,
        payload,
        hook.timeout,
        env.grace,
        &env.cancel,
    )
    .await;
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

fn report(hook: &Hook, decision: &str, duration_ms: u64, error: Option<String>) -> HookReport {
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

/// What the `pre_tool_use` hooks of a call decided together.
#[derive(Debug, Clone, PartialEq)]
pub struct PreToolUse {
    pub verdict: HookVerdict,
    /// The input the call runs with instead.
    pub new_input: Option<Value>,
}

/// Runs the `pre_tool_use` hooks of `call` in order. Each sees the input
/// as the hooks before it left it; the first `deny` (or exit 2) ends the
/// run; otherwise `ask` beats `allow` beats no decision.
pub async fn pre_tool_use(
    hooks: &[Hook],
    env: &Env,
    call: &ToolCall,
) -> (PreToolUse, Vec<HookReport>) {
    let mut reports = Vec::new();
    let mut input = call.input.clone();
    let mut replaced = false;
    let mut verdict = HookVerdict::None;
    for hook in hooks {
        let payload = env.payload(
            Stage::PreToolUse,
            json!({"tool_name": call.name, "tool_use_id": call.id, "tool_input": input}),
        );
        let (said, took) = ask(hook, env, &payload).await;
        match said {
            Said::Blocked(reason) => {
                reports.push(report(hook, "deny (exit 2)", took, None));
                verdict = HookVerdict::Deny(reason);
                break;
            }
            Said::Failed(e) => reports.push(report(hook, "failed", took, Some(e))),
            Said::Answered(answer) => {
                if answer.context.is_some() {
                    reports.push(report(
                        hook,
                        "failed",
                        took,
                        Some("`context` is not an answer of pre_tool_use".to_string()),
                    ));
                    continue;
                }
                if let Some(new) = answer.input {
                    if new.is_object() {
                        input = new;
                        replaced = true;
                    } else {
                        reports.push(report(
                            hook,
                            "failed",
                            took,
                            Some("`input` must be a JSON object".to_string()),
                        ));
                        continue;
                    }
                }
                let reason = answer.reason.unwrap_or_default();
                let word = match answer.decision.as_deref() {
                    None => "none",
                    Some("allow") => {
                        if verdict == HookVerdict::None {
                            verdict = HookVerdict::Allow;
                        }
                        "allow"
                    }
                    Some("ask") => {
                        if !matches!(verdict, HookVerdict::Ask(_)) {
                            verdict = HookVerdict::Ask(reason.clone());
                        }
                        "ask"
                    }
                    Some("deny") => {
                        verdict = HookVerdict::Deny(reason);
                        reports.push(report(hook, "deny", took, None));
                        break;
                    }
                    Some(other) => {
                        reports.push(report(
                            hook,
                            "failed",
                            took,
                            Some(format!(
                                "unknown decision {other:?} (expected allow, deny or ask)"
                            )),
                        ));
                        continue;
                    }
                };
                let word = if replaced && word == "none" {
                    "input replaced"
                } else {
                    word
                };
                reports.push(report(hook, word, took, None));
            }
        }
    }
    let new_input = replaced.then_some(input);
    (PreToolUse { verdict, new_input }, reports)
}

/// Runs the `post_tool_use` hooks of a call that ran; returns the text
/// they add to its result (their `context`, or stderr on exit 2).
pub async fn post_tool_use(
    hooks: &[Hook],
    env: &Env,
    call: &ToolCall,
    result: &str,
    is_error: bool,
) -> (Vec<String>, Vec<HookReport>) {
    let payload = env.payload(
        Stage::PostToolUse,
        json!({
            "tool_name": call.name,
            "tool_use_id": call.id,
            "tool_input": call.input,
            "tool_result": {"content": result, "is_error": is_error},
        }),
    );
    let mut added = Vec::new();
    let mut reports = Vec::new();
    for hook in hooks {
        let (said, took) = ask(hook, env, &payload).await;
        reports.push(match said {
            Said::Blocked(text) => {
                added.push(text);
                report(hook, "context (exit 2)", took, None)
            }
            Said::Failed(e) => report(hook, "failed", took, Some(e)),
            Said::Answered(Answer {
                decision: None,
                input: None,
                context,
                reason: _,
            }) => match context.filter(|c| !c.trim().is_empty()) {
                Some(text) => {
                    added.push(text);
                    report(hook, "context", took, None)
                }
                None => report(hook, "none", took, None),
            },
            Said::Answered(_) => report(
                hook,
                "failed",
                took,
                Some("post_tool_use answers with `context` only".to_string()),
            ),
        });
    }
    (added, reports)
}

/// What the hooks before a user message said.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Send it, with this context after the text (empty: none).
    Send { context: Vec<String> },
    /// Refuse it, telling the user why.
    Block(String),
}

/// Runs the `session_start` hooks (for a conversation's first message)
/// then the `user_prompt_submit` hooks, in order, until one blocks.
pub async fn before_prompt(
    session_start: &[Hook],
    prompt_submit: &[Hook],
    env: &Env,
    text: &str,
) -> (Prompt, Vec<HookReport>) {
    let mut context = Vec::new();
    let mut reports = Vec::new();
    let start = env.payload(Stage::SessionStart, json!({}));
    let submit = env.payload(Stage::UserPromptSubmit, json!({"prompt": text}));
    for hook in session_start.iter().chain(prompt_submit) {
        let payload = if hook.stage == Stage::SessionStart {
            &start
        } else {
            &submit
        };
        let (said, took) = ask(hook, env, payload).await;
        let can_block = hook.stage == Stage::UserPromptSubmit;
        match said {
            Said::Blocked(reason) if can_block => {
                reports.push(report(hook, "block (exit 2)", took, None));
                return (Prompt::Block(reason), reports);
            }
            Said::Blocked(_) => reports.push(report(
                hook,
                "failed",
                took,
                Some("exited with 2, which session_start hooks cannot use to block".to_string()),
            )),
            Said::Failed(e) => reports.push(report(hook, "failed", took, Some(e))),
            Said::Answered(answer) => {
                if answer.input.is_some() {
                    reports.push(report(
                        hook,
                        "failed",
                        took,
                        Some(format!(
                            "`input` is not an answer of {}",
                            hook.stage.as_str()
                        )),
                    ));
                    continue;
                }
                match answer.decision.as_deref() {
                    Some("block") if can_block => {
                        reports.push(report(hook, "block", took, None));
                        let reason = answer.reason.unwrap_or_default();
                        return (Prompt::Block(reason), reports);
                    }
                    Some(other) => {
                        reports.push(report(
                            hook,
                            "failed",
                            took,
                            Some(format!(
                                "unknown decision {other:?} for {}",
                                hook.stage.as_str()
                            )),
                        ));
                        continue;
                    }
                    None => {}
                }
                match answer.context.filter(|c| !c.trim().is_empty()) {
                    Some(text) => {
                        context.push(text);
                        reports.push(report(hook, "context", took, None));
                    }
                    None => reports.push(report(hook, "none", took, None)),
                }
            }
        }
    }
    (Prompt::Send { context }, reports)
}

/// Runs the `stop` hooks; the first that wants the model to go on (its
/// `decision: "continue"` with a reason, or exit 2 with stderr) wins.
pub async fn stop(
    hooks: &[Hook],
    env: &Env,
    last_reply: &str,
) -> (Option<String>, Vec<HookReport>) {
    let payload = env.payload(Stage::Stop, json!({"last_reply": last_reply}));
    let mut reports = Vec::new();
    for hook in hooks {
        let (said, took) = ask(hook, env, &payload).await;
        match said {
            Said::Blocked(reason) => {
                reports.push(report(hook, "continue (exit 2)", took, None));
                return (Some(reason), reports);
            }
            Said::Failed(e) => reports.push(report(hook, "failed", took, Some(e))),
            Said::Answered(answer) => match answer.decision.as_deref() {
                None if answer.input.is_none() && answer.context.is_none() => {
                    reports.push(report(hook, "none", took, None));
                }
                Some("continue") if answer.input.is_none() && answer.context.is_none() => {
                    let reason = answer.reason.unwrap_or_default();
                    if reason.trim().is_empty() {
                        reports.push(report(
                            hook,
                            "failed",
                            took,
                            Some("`continue` needs a `reason` for the model".to_string()),
                        ));
                        continue;
                    }
                    reports.push(report(hook, "continue", took, None));
                    return (Some(reason), reports);
                }
                _ => reports.push(report(
                    hook,
                    "failed",
                    took,
                    Some(
                        "stop hooks answer with `decision: \"continue\"` and a `reason` only"
                            .to_string(),
                    ),
                )),
            },
        }
    }
    (None, reports)
}

/// Runs the notification hooks of `kind`; their answers are not read, but
/// a failure is reported.
pub async fn notify(
    hooks: &[Hook],
    env: &Env,
    kind: NotificationKind,
    message: &str,
) -> Vec<HookReport> {
    let payload = env.payload(
        Stage::Notification,
        json!({"kind": kind.as_str(), "message": message}),
    );
    let mut reports = Vec::new();
    for hook in hooks {
        let (said, took) = ask(hook, env, &payload).await;
        reports.push(match said {
            Said::Failed(e) => report(hook, "failed", took, Some(e)),
            Said::Blocked(_) | Said::Answered(_) => report(hook, "sent", took, None),
        });
    }
    reports
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
