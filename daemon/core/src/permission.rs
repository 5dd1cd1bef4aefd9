//! Permission policy: modes, rules and the decision for one tool call.
//!
//! The policy is data; [`Policy::evaluate`] is a pure function of the call.
//! Nothing here touches the file system: symbolic links are resolved by the
//! runtime and handed in as [`Policy::resolved_paths`].
//!
//! How a call is decided:
//! 1. `request_mode_upgrade` asks (a deny rule on it denies); the transition
//!    code answers it where the mode makes it moot.
//! 2. In `read_only` and `plan` modes every tool that is not read-only is
//!    denied, whatever the rules say.
//! 3. The call is cut into parts: the simple commands (those in loop
//!    bodies, conditions and substitutions included; reserved words such
//!    as `for` and `done` are not commands), arithmetic expressions and
//!    file redirections of a bash line, the files of a write/edit/patch,
//!    the file or directory of a read or search (for `glob`, the directory
//!    its pattern starts in). Every rule that matches a part (or the whole
//!    call) counts, and the strongest wins: deny beats ask beats allow. A
//!    part no rule matches gets the default: read-only tools allow, the
//!    rest ask; `accept_edits` allows file writes inside the working and
//!    additional directories; `bypass` allows everything but what a deny
//!    rule denies. The commands that a command runs (`xargs rm`, `find
//!    -exec rm {} ;`, `sudo rm`, `A=1 rm`, `sh -c 'rm …'`) are parts that
//!    only deny and ask rules judge.
//! 4. Any part denied: deny. Otherwise any part asking: ask. Otherwise
//!    allow. So a compound command is allowed only if every part is, and
//!    a denied command anywhere in it denies it. An ask about a file
//!    written outside the working and additional directories says so, as
//!    `outside the working directory: /abs/path`.
//!
//! Anything the policy cannot read with certainty (an unbalanced quote, a
//! path it cannot resolve) is never allowed by a rule that might not cover
//! it, and is asked about when a deny rule might cover it.
//!
//! Step 3 is split out: `parts.rs` cuts a call into parts, `judge.rs`
//! matches rules against them and settles each part's outcome; `shell.rs`
//! reads bash lines, `paths.rs` paths and globs, `rule.rs` the rules.

mod domain;
mod judge;
mod parts;
mod paths;
mod rule;
mod sandbox;
pub(crate) mod shell;
mod suggest;

pub use domain::{rules_name_host, url_host};
pub use paths::{glob_search_dir, patch_paths, split_glob};
pub use rule::{Action, Rule, RuleError};
pub use sandbox::{RUN_UNSANDBOXED, Sandboxed, needs_network, sandbox_hint};
pub use shell::split_compound;
pub use suggest::{suggest_rule, suggested_rule};

use crate::message::ToolCall;
use crate::tools::{Subject, Tool};
use judge::{Compiled, Outcome, denied_by, strength, strongest};
use parts::Part;
use rule::{BashPattern, PatternKind};
use serde::{Deserialize, Serialize};
use shell::Script;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// How a permission request says that a file written is outside the
/// working and additional directories; the path follows. Clients may show
/// the clause apart.
pub const OUTSIDE_WORKING_DIRECTORY: &str = "outside the working directory: ";

/// The permission mode of a conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Mutating tools are not offered.
    ReadOnly,
    /// Read-only tools run; the rest follow the rules.
    #[default]
    Default,
    /// File edits inside the working directory are allowed.
    AcceptEdits,
    /// Planning: read-only, the model is told to plan.
    Plan,
    /// Nothing asks (only when the daemon allows it).
    Bypass,
    /// Like accept_edits, and a bash command that runs inside the OS
    /// sandbox runs without asking; leaving the sandbox, or (without the
    /// network) a command known to need it, asks.
    Auto,
}

impl Mode {
    /// The config and wire name (`read_only`, `default`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read_only",
            Mode::Default => "default",
            Mode::AcceptEdits => "accept_edits",
            Mode::Plan => "plan",
            Mode::Bypass => "bypass",
            Mode::Auto => "auto",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a user answered a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    AllowOnce,
    /// Run it and add an allow rule.
    AllowAlways,
    /// Do not run it; the loop continues.
    Deny,
    /// Do not run it; skip the rest of the reply; stop the turn.
    DenyAndStop,
    /// Do not run it and add a deny rule.
    Never,
    /// bash only: run it as a background shell.
    Background,
    /// The request was cancelled with the turn (not a user answer).
    Cancelled,
    /// A plan approval request: approved (`Event::PlanAnswered`).
    ApprovePlan,
    /// A plan approval request: rejected with feedback.
    RejectPlan,
    /// A plan approval request: approved with the user's own steps.
    EditPlan,
}

/// A pending permission request, held in the conversation state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionAsk {
    /// Unique id; answers name it. Derived from the tool_use id.
    pub request_id: String,
    /// The tool_use id of the suspended call.
    pub tool_use_id: String,
    /// The tool (or "doom_loop").
    pub tool_name: String,
    pub input: serde_json::Value,
    pub reason: String,
    pub options: Vec<Decision>,
    /// The rule an "always" answer adds.
    pub suggested_rule: String,
}

/// What the policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Ask a user first; the reason says why.
    Ask(String),
    /// Refuse it; the reason is the tool result.
    Deny(String),
}

/// The permission policy of a conversation.
///
/// `Policy::default()` is [`Policy::allow_all`]: it is what
/// `ConvContext::default()` carries, so the state-machine tests run tools
/// without permission requests. The daemon never relies on it: it builds
/// each conversation's policy with [`Policy::new`] (or fills every field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    pub mode: Mode,
    /// Every rule in force, from all sources (config file, the rules given
    /// at creation, rules added by "always"/"never" answers). Order does not
    /// matter: the strongest matching action wins.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// What a doom loop (the same call again and again) does: ask by
    /// default; allow never asks; deny refuses the call.
    #[serde(default)]
    pub doom_loop: Action,
    /// The conversation's working directory: absolute, canonical. Relative
    /// path rules and relative paths are anchored here.
    pub cwd: String,
    /// Further directories the conversation may work in (absolute,
    /// canonical).
    #[serde(default)]
    pub additional_dirs: Vec<String>,
    /// Paths as the model wrote them → absolute canonical paths, symbolic
    /// links resolved. The runtime fills it before each transition for the
    /// paths [`Policy::paths_to_resolve`] names. A path missing here is
    /// normalised lexically against `cwd` (`..` resolved); one starting
    /// with `~` cannot be, and is treated as unknown.
    #[serde(default)]
    pub resolved_paths: BTreeMap<String, String>,
    /// The MCP tools (`mcp__SERVER__TOOL`) that count as read-only: those
    /// a server marks read-only, of servers the config trusts. The runtime
    /// fills it from what the servers said; every other MCP tool is
    /// treated as one that changes things (asks by default).
    #[serde(default)]
    pub mcp_read_only: BTreeSet<String>,
    /// How the daemon confines bash commands: None, unconfined. The
    /// runtime fills it from `[sandbox]` and the kernel's support.
    #[serde(default)]
    pub sandbox: Option<Sandboxed>,
}

impl Default for Policy {
    /// [`Policy::allow_all`]; see the type's documentation.
    fn default() -> Self {
        Policy::allow_all()
    }
}

impl Policy {
    /// A conversation's policy: `mode`, working directory `cwd` (absolute,
    /// canonical), no rules yet, doom loops ask.
    pub fn new(mode: Mode, cwd: impl Into<String>) -> Policy {
        Policy {
            mode,
            rules: Vec::new(),
            doom_loop: Action::Ask,
            cwd: cwd.into(),
            additional_dirs: Vec::new(),
            resolved_paths: BTreeMap::new(),
            mcp_read_only: BTreeSet::new(),
            sandbox: None,
        }
    }

    /// Whether the tool called `name` is read-only: a built-in tool by its
    /// facts, an MCP tool when it is in [`Policy::mcp_read_only`].
    pub fn is_read_only(&self, name: &str) -> bool {
        match crate::tools::Called::of(name) {
            crate::tools::Called::Builtin(tool) => tool.is_read_only(),
            crate::tools::Called::Mcp { .. } => self.mcp_read_only.contains(name),
            crate::tools::Called::Unknown => false,
        }
    }

    /// Allows every call except `request_mode_upgrade` (which always asks)
    /// and a bash line that cannot be read; doom loops still ask. Mode
    /// `bypass`, no rules, working directory `/`. For tests and tools that
    /// must not ask.
    pub fn allow_all() -> Policy {
        Policy::new(Mode::Bypass, "/")
    }

    /// The verdict for `call`.
    pub fn evaluate(&self, call: &ToolCall) -> Verdict {
        let tool = call.name.as_str();
        let known = Tool::from_name(tool);
        if known == Some(Tool::RequestModeUpgrade) {
            if let Some(rule) = self.bare_rule(tool, Action::Deny) {
                return Verdict::Deny(denied_by(tool, rule, ""));
            }
            let mut ask = format!("the model asks to leave {} mode", self.mode);
            if let Some(reason) = input_str(call, "reason").filter(|r| !r.trim().is_empty()) {
                ask.push_str(": ");
                ask.push_str(reason.trim());
            }
            return Verdict::Ask(ask);
        }
        let read_only = self.is_read_only(tool);
        if matches!(self.mode, Mode::ReadOnly | Mode::Plan) && !read_only {
            return Verdict::Deny(format!(
                "{tool} is not available in {} mode; use {} to ask for write access",
                self.mode,
                Tool::RequestModeUpgrade
            ));
        }
        let subject = known.map(Tool::subject);
        let script = match bash_script(call, subject) {
            Some(Err(e)) => {
                if let Some(rule) = self.bare_rule(tool, Action::Deny) {
                    return Verdict::Deny(denied_by(tool, rule, ""));
                }
                return Verdict::Ask(format!(
                    "the command cannot be checked against the rules: {e}"
                ));
            }
            Some(Ok(script)) => Some(script),
            None => None,
        };
        let parts = self.parts(call, subject, script.as_ref());
        let compiled: Vec<(&Rule, Compiled)> = self
            .rules
            .iter()
            .filter(|r| rule_concerns(r, tool, subject))
            .map(|r| (r, self.compile(r)))
            .collect();

        // Rules that hold the call as a whole hold every part.
        let whole = compiled
            .iter()
            .filter_map(|(rule, c)| {
                let hit = match c {
                    Compiled::Bare => rule.names(tool),
                    Compiled::Bash(BashPattern::Exact(pattern)) => script
                        .as_ref()
                        .is_some_and(|s| s.normalized == pattern.normalized),
                    _ => false,
                };
                hit.then(|| (strength(rule.action, false), *rule))
            })
            .max_by(strongest);

        let outcomes: Vec<Outcome> = if parts.is_empty() {
            vec![self.settle(call, None, whole)]
        } else {
            parts
                .iter()
                .map(|part| {
                    let hits = compiled
                        .iter()
                        .filter_map(|(rule, c)| self.part_hit(rule, c, part).map(|s| (s, *rule)));
                    if matches!(part, Part::Wrapped(_)) {
                        // What a command runs answers to deny and ask rules
                        // only; the command itself is judged as written.
                        return match hits.max_by(strongest) {
                            None => Outcome::Allow,
                            held => self.settle(call, Some(part), held),
                        };
                    }
                    let held = hits.chain(whole).max_by(strongest);
                    self.note_outside(part, self.settle(call, Some(part), held))
                })
                .collect()
        };
        let mut asks: Vec<String> = self.sandbox_asks(call, &parts);
        for outcome in outcomes {
            match outcome {
                Outcome::Deny(reason) => return Verdict::Deny(reason),
                Outcome::Ask(reason) => {
                    if !asks.contains(&reason) {
                        asks.push(reason);
                    }
                }
                Outcome::Allow => {}
            }
        }
        if asks.is_empty() {
            Verdict::Allow
        } else {
            Verdict::Ask(asks.join("; "))
        }
    }

    /// Whether `rule` (whatever its action) matches `call` the way a deny
    /// rule would: any part of it, quotes and other spellings seen
    /// through, and a part that cannot be read well enough to tell counts
    /// as matched. Hooks' matchers are judged with it.
    pub fn rule_matches(&self, rule: &Rule, call: &ToolCall) -> bool {
        let tool = call.name.as_str();
        let subject = Tool::from_name(tool).map(Tool::subject);
        if !rule_concerns(rule, tool, subject) {
            return false;
        }
        let probe = Rule {
            action: Action::Deny,
            ..rule.clone()
        };
        let compiled = self.compile(&probe);
        let script = match bash_script(call, subject) {
            Some(Err(_)) => return true,
            Some(Ok(script)) => Some(script),
            None => None,
        };
        let whole = match &compiled {
            Compiled::Bare => probe.names(tool),
            Compiled::Bash(BashPattern::Exact(pattern)) => script
                .as_ref()
                .is_some_and(|s| s.normalized == pattern.normalized),
            _ => false,
        };
        whole
            || self
                .parts(call, subject, script.as_ref())
                .iter()
                .any(|part| self.part_hit(&probe, &compiled, part).is_some())
    }

    /// The raw paths of `call` that the runtime should resolve (symbolic
    /// links) into [`Policy::resolved_paths`] before evaluating it.
    pub fn paths_to_resolve(call: &ToolCall) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let subject = Tool::from_name(&call.name).map(Tool::subject);
        match subject {
            Some(Subject::WrittenFile | Subject::ReadFile) => {
                out.extend(input_str(call, "path").map(str::to_string));
            }
            Some(Subject::SearchedDir) => out.extend(searched_dir(call).map(|d| d.into_owned())),
            Some(Subject::PatchedFiles) => out.extend(
                input_str(call, "patch")
                    .map(patch_paths)
                    .unwrap_or_default(),
            ),
            Some(Subject::CommandLine) => {
                if let Some(Ok(script)) = bash_script(call, subject) {
                    out.extend(
                        script
                            .writes
                            .iter()
                            .chain(&script.wrapped_writes)
                            .filter_map(|w| w.target.literal.clone()),
                    );
                }
            }
            Some(Subject::ShellId | Subject::Domain | Subject::Nothing) | None => {}
        }
        out
    }

    /// A bare rule on `tool` with `action`, if there is one.
    fn bare_rule(&self, tool: &str, action: Action) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|r| r.names(tool) && r.pattern.is_none() && r.action == action)
    }
}

fn input_str<'a>(call: &'a ToolCall, key: &str) -> Option<&'a str> {
    call.input.get(key).and_then(serde_json::Value::as_str)
}

/// The directory a search looks in, as the model wrote it: its `path`,
/// and for `glob` the directory the pattern starts in (`../x/*.rs`
/// searches `../x`), as the tool reads it.
fn searched_dir(call: &ToolCall) -> Option<std::borrow::Cow<'_, str>> {
    let path = input_str(call, "path");
    if Tool::from_name(&call.name) == Some(Tool::Glob)
        && let Some(pattern) = input_str(call, "pattern")
    {
        return Some(glob_search_dir(path, pattern).into());
    }
    path.map(Into::into)
}

/// The command line of a call whose tool has `subject`, read; `None` for
/// tools without one and for a call without a command.
fn bash_script(call: &ToolCall, subject: Option<Subject>) -> Option<Result<Script, String>> {
    if subject != Some(Subject::CommandLine) {
        return None;
    }
    input_str(call, "command").map(shell::parse)
}

/// Whether `rule` can say anything about a call of the tool called `tool`
/// (which has `subject`).
fn rule_concerns(rule: &Rule, tool: &str, subject: Option<Subject>) -> bool {
    if rule.names(tool) {
        return true;
    }
    // Path rules on one file-writing tool apply to all file writes, bash
    // redirections included; likewise for reading tools.
    let Some(subject) = subject.filter(|_| rule.is_path_rule()) else {
        return false;
    };
    match rule.kind() {
        PatternKind::WrittenPath => subject.writes_files(),
        PatternKind::ReadPath => subject.reads_files(),
        PatternKind::Command
        | PatternKind::ShellId
        | PatternKind::Domain
        | PatternKind::Nothing => false,
    }
}
