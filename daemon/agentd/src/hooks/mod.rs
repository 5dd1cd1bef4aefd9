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

mod ask;
mod pins;
mod runner;
mod stages;

pub(crate) use ask::{Env, HookReport};
pub(crate) use pins::{check_pin, pins_under, sha256_hex};
use pins::{project_file, read_pinned};
pub(crate) use stages::{
    PreToolUse, Prompt, before_prompt, notify, post_tool_use, pre_tool_use, stop,
};

use crate::store::TrustRecord;
pub(crate) use crate::store::persisted::Stage;
use agentd_core::hooks::{HookMatchers, matcher_matches};
use agentd_core::{Action, Policy, Rule, ToolCall};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where hooks of a project live, relative to a directory the user
/// trusted (`agent trust DIR`).
pub(crate) const PROJECT_FILE: &str = ".agentd/config.toml";

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
pub(crate) enum NotificationKind {
    /// A permission request waits for an answer.
    PermissionRequest,
    /// A turn ended (done, failed or cancelled).
    TurnEnd,
}

impl NotificationKind {
    pub(crate) fn as_str(self) -> &'static str {
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
pub(crate) struct HookSpec {
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
pub(crate) struct HookLists {
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
pub(crate) struct HooksSection {
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
    pub(crate) fn lists(&self) -> HookLists {
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
pub(crate) enum Matcher {
    All,
    /// Tool calls, as a deny rule with this pattern would match them.
    Rule(Rule),
    /// Notifications of this kind.
    Kind(NotificationKind),
}

/// One hook, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hook {
    pub stage: Stage,
    pub matcher: Matcher,
    pub command: String,
    pub timeout: Duration,
}

/// Every hook of a conversation: the user's, then its trusted project's.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Hooks {
    pub hooks: Vec<Hook>,
    pub max_stop_continuations: u32,
    /// Why the project's file contributes nothing, when it does not (see
    /// [`Hooks::for_conversation`]): told to clients with each message.
    pub problem: Option<String>,
}

impl Hooks {
    /// Checks the lists: matchers parse, commands are not empty, and
    /// events without matchers have none. The error names the hook.
    pub(crate) fn compile(lists: &HookLists, timeout_ms: u64) -> Result<Vec<Hook>, String> {
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
    pub(crate) fn for_conversation(
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
    pub(crate) fn of(&self, stage: Stage) -> impl Iterator<Item = &Hook> {
        self.hooks.iter().filter(move |h| h.stage == stage)
    }

    /// What the core decides by: the `pre_tool_use` matchers and whether
    /// `stop` hooks exist.
    pub(crate) fn matchers(&self, stop_continuations: u32) -> HookMatchers {
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
    pub(crate) fn for_call(&self, stage: Stage, policy: &Policy, call: &ToolCall) -> Vec<Hook> {
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
    pub(crate) fn for_notification(&self, kind: NotificationKind) -> Vec<Hook> {
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
    pub(crate) fn all_of(&self, stage: Stage) -> Vec<Hook> {
        self.of(stage).cloned().collect()
    }
}

#[cfg(test)]
mod tests;
