//! Plans: what the model proposes to do, step by step, and how far it got.
//!
//! A plan is data the core owns. The model proposes one with
//! `propose_plan` ([`Plan::from_input`] reads and checks its input), a user
//! approves, rejects or edits it, and the model reports progress with
//! `update_plan` ([`Plan::apply`]), the todo-list style. The core checks
//! every change of a step's status:
//! - a step starts (`pending` → `in_progress`) only once every step it
//!   depends on is completed;
//! - it completes or fails only after it started (`in_progress` →
//!   `completed` / `failed`); a pending step may be skipped;
//! - `completed`, `failed` and `skipped` are final;
//! - a step whose dependency failed or was skipped is skipped at once, and
//!   so are the steps that depend on it (the seed's "skip step").
//!
//! An update is all or nothing: one change that is not allowed refuses the
//! whole update, saying why, and the plan stays as it was.
//!
//! [`should_create_plan`] is the seed's plan detection heuristic, a pure
//! function of the user's text.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// The most steps a plan may have.
pub const MAX_STEPS: usize = 50;
/// The longest title of a step, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// Reading and understanding.
    Analyze,
    /// Changing files.
    Edit,
    /// Checking the changes (build, lint, review).
    Validate,
    /// Running tests.
    Test,
}

impl StepKind {
    /// Every kind, in the order the schema lists them.
    pub const ALL: [StepKind; 4] = [
        StepKind::Analyze,
        StepKind::Edit,
        StepKind::Validate,
        StepKind::Test,
    ];

    /// The wire and schema name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Analyze => "analyze",
            StepKind::Edit => "edit",
            StepKind::Validate => "validate",
            StepKind::Test => "test",
        }
    }

    /// The kind called `name` (case does not matter).
    pub fn from_name(name: &str) -> Option<StepKind> {
        let name = name.trim().to_ascii_lowercase();
        StepKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
    Skipped,
}

impl StepStatus {
    /// Every status.
    pub const ALL: [StepStatus; 5] = [
        StepStatus::Pending,
        StepStatus::InProgress,
        StepStatus::Completed,
        StepStatus::Failed,
        StepStatus::Skipped,
    ];

    /// The wire and schema name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::InProgress => "in_progress",
            StepStatus::Completed => "completed",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
        }
    }

    /// The status called `name`.
    pub fn from_name(name: &str) -> Option<StepStatus> {
        let name = name.trim().to_ascii_lowercase();
        StepStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Completed, failed and skipped steps never change again.
    pub fn is_final(self) -> bool {
        match self {
            StepStatus::Completed | StepStatus::Failed | StepStatus::Skipped => true,
            StepStatus::Pending | StepStatus::InProgress => false,
        }
    }

    /// Whether a step may go from `self` to `to` (its dependencies aside).
    pub fn may_become(self, to: StepStatus) -> bool {
        matches!(
            (self, to),
            (
                StepStatus::Pending,
                StepStatus::InProgress | StepStatus::Skipped
            ) | (
                StepStatus::InProgress,
                StepStatus::Completed | StepStatus::Failed
            )
        )
    }

    /// The checklist mark.
    pub fn mark(self) -> &'static str {
        match self {
            StepStatus::Pending => "[ ]",
            StepStatus::InProgress => "[>]",
            StepStatus::Completed => "[x]",
            StepStatus::Failed => "[!]",
            StepStatus::Skipped => "[-]",
        }
    }
}

/// How risky the model says the plan is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    Low,
    Medium,
    High,
}

impl Risk {
    /// The wire and schema name.
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }

    /// The risk called `name`.
    pub fn from_name(name: &str) -> Option<Risk> {
        match name.trim().to_ascii_lowercase().as_str() {
            "low" => Some(Risk::Low),
            "medium" => Some(Risk::Medium),
            "high" => Some(Risk::High),
            _ => None,
        }
    }
}

/// Where the plan itself stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanPhase {
    /// Proposed, waiting for a user's answer.
    Proposed,
    /// Approved (as proposed or edited): the model carries it out.
    Approved,
    /// Rejected: the model was asked to revise it.
    Rejected,
}

impl PlanPhase {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanPhase::Proposed => "proposed",
            PlanPhase::Approved => "approved",
            PlanPhase::Rejected => "rejected",
        }
    }
}

/// A step as proposed or edited: everything but its status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepDraft {
    /// Unique within the plan; dependencies name it.
    pub id: String,
    pub title: String,
    pub kind: StepKind,
    /// Files it touches (as the model names them).
    #[serde(default)]
    pub files: Vec<String>,
    /// Ids of the steps that must be completed before it starts.
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// The model's estimate, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_secs: Option<u64>,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStep {
    #[serde(flatten)]
    pub draft: StepDraft,
    pub status: StepStatus,
    /// Why it failed or was skipped, as reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl PlanStep {
    /// Its id.
    pub fn id(&self) -> &str {
        &self.draft.id
    }
}

/// A plan: intent, risk, estimate and steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// What the plan achieves, in one line.
    pub intent: String,
    pub risk: Risk,
    /// The model's estimate for the whole plan, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_secs: Option<u64>,
    pub steps: Vec<PlanStep>,
    pub phase: PlanPhase,
    /// The `propose_plan` call that proposed it.
    pub tool_use_id: String,
}

/// Why a proposal, an edit or an update is refused. The text is written
/// for the model (or the user who edited the steps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

fn err<T>(message: impl Into<String>) -> Result<T, PlanError> {
    Err(PlanError(message.into()))
}

/// One change `update_plan` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepUpdate {
    pub id: String,
    pub status: StepStatus,
    /// Why it failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A step whose status changed, in the order the changes happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepChange {
    pub step_id: String,
    pub from: StepStatus,
    pub to: StepStatus,
    /// Why (a failure's reason; for a step skipped by the core, which
    /// dependency failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Plan {
    /// Reads a `propose_plan` input: `intent`, `risk` (low/medium/high),
    /// optional `estimated_seconds`, and `steps`, each with `title`,
    /// `kind`, optional `id` (its 1-based position by default), `files`,
    /// `depends_on` and `estimated_seconds`. Every step starts pending.
    pub fn from_input(input: &serde_json::Value, tool_use_id: &str) -> Result<Plan, PlanError> {
        let Some(obj) = input.as_object() else {
            return err("the input must be an object with intent, risk and steps");
        };
        let intent = match obj.get("intent").and_then(|v| v.as_str()) {
            Some(s) if !s.trim().is_empty() => s.trim().to_string(),
            _ => return err("`intent` must be a non-empty string: what the plan achieves"),
        };
        let risk = match obj.get("risk") {
            None => Risk::Medium,
            Some(v) => match v.as_str().and_then(Risk::from_name) {
                Some(r) => r,
                None => return err("`risk` must be one of low, medium, high"),
            },
        };
        let estimate_secs = seconds(obj.get("estimated_seconds"), "estimated_seconds")?;
        let Some(raw_steps) = obj.get("steps").and_then(|v| v.as_array()) else {
            return err("`steps` must be an array of steps");
        };
        let mut drafts = Vec::with_capacity(raw_steps.len());
        for (i, raw) in raw_steps.iter().enumerate() {
            drafts.push(step_from_input(raw, i)?);
        }
        let mut plan = Plan {
            intent,
            risk,
            estimate_secs,
            steps: Vec::new(),
            phase: PlanPhase::Proposed,
            tool_use_id: tool_use_id.to_string(),
        };
        plan.set_steps(drafts)?;
        Ok(plan)
    }

    /// Replaces the steps with `drafts` (a user's edit), all pending, after
    /// checking them: 1 to [`MAX_STEPS`] steps, titles present and not too
    /// long, ids unique and non-empty, dependencies naming steps listed
    /// before (so there is no cycle) and not the step itself.
    pub fn set_steps(&mut self, drafts: Vec<StepDraft>) -> Result<(), PlanError> {
        check_drafts(&drafts)?;
        self.steps = drafts
            .into_iter()
            .map(|draft| PlanStep {
                draft,
                status: StepStatus::Pending,
                note: None,
            })
            .collect();
        Ok(())
    }

    /// The step `id`.
    pub fn step(&self, id: &str) -> Option<&PlanStep> {
        self.steps.iter().find(|s| s.id() == id)
    }

    /// Every file the steps name, once, in order of first mention.
    pub fn files(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let mut files = Vec::new();
        for f in self.steps.iter().flat_map(|s| s.draft.files.iter()) {
            if seen.insert(f.clone()) {
                files.push(f.clone());
            }
        }
        files
    }

    /// Whether every step is final.
    pub fn is_finished(&self) -> bool {
        self.steps.iter().all(|s| s.status.is_final())
    }

    /// Applies `updates` in order, all or nothing; returns the new plan
    /// and every change of status, the core's own skips included. See the
    /// module's documentation for the rules.
    pub fn apply(&self, updates: &[StepUpdate]) -> Result<(Plan, Vec<StepChange>), PlanError> {
        if self.phase != PlanPhase::Approved {
            return err(format!(
                "the plan is {}, not approved: it cannot be updated; propose a plan with propose_plan and wait for its approval",
                self.phase.as_str()
            ));
        }
        if updates.is_empty() {
            return err("`steps` is empty: name at least one step and its new status");
        }
        let mut plan = self.clone();
        let mut changes = Vec::new();
        for update in updates {
            let Some(index) = plan.steps.iter().position(|s| s.id() == update.id) else {
                let ids: Vec<&str> = plan.steps.iter().map(PlanStep::id).collect();
                return err(format!(
                    "there is no step `{}`; the steps are {}",
                    update.id,
                    ids.join(", ")
                ));
            };
            let from = plan.steps[index].status;
            let to = update.status;
            if from == to {
                // Saying again where a step stands changes nothing.
                continue;
            }
            if !from.may_become(to) {
                return err(transition_refusal(&update.id, from, to));
            }
            if to == StepStatus::InProgress {
                let waiting: Vec<String> = plan.steps[index]
                    .draft
                    .dependencies
                    .iter()
                    .filter(|d| {
                        plan.step(d)
                            .is_none_or(|s| s.status != StepStatus::Completed)
                    })
                    .cloned()
                    .collect();
                if !waiting.is_empty() {
                    return err(format!(
                        "step `{}` cannot start: it depends on {} which {} not completed",
                        update.id,
                        waiting.join(", "),
                        if waiting.len() == 1 { "is" } else { "are" }
                    ));
                }
            }
            let note = update
                .note
                .as_deref()
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string);
            plan.steps[index].status = to;
            plan.steps[index].note = note.clone();
            changes.push(StepChange {
                step_id: update.id.clone(),
                from,
                to,
                note,
            });
            if matches!(to, StepStatus::Failed | StepStatus::Skipped) {
                plan.skip_dependents(&update.id, &mut changes);
            }
        }
        Ok((plan, changes))
    }

    /// Skips every pending step that depends, directly or not, on `id`
    /// (which failed or was skipped).
    fn skip_dependents(&mut self, id: &str, changes: &mut Vec<StepChange>) {
        let mut lost = vec![id.to_string()];
        while let Some(gone) = lost.pop() {
            for step in &mut self.steps {
                if step.status == StepStatus::Pending && step.draft.dependencies.contains(&gone) {
                    let note = format!("skipped: its dependency `{gone}` did not complete");
                    step.status = StepStatus::Skipped;
                    step.note = Some(note.clone());
                    changes.push(StepChange {
                        step_id: step.id().to_string(),
                        from: StepStatus::Pending,
                        to: StepStatus::Skipped,
                        note: Some(note),
                    });
                    lost.push(step.id().to_string());
                }
            }
        }
    }

    /// The plan as the approval box shows it (the seed's layout), without
    /// the question.
    pub fn render_box(&self) -> String {
        let mut out = String::new();
        out.push_str("Task Plan\n");
        out.push_str(&format!("Intent: {}\n", self.intent));
        let duration = self
            .estimate_secs
            .or_else(|| {
                let sum: Option<u64> = self.steps.iter().map(|s| s.draft.estimate_secs).sum();
                sum.filter(|s| *s > 0)
            })
            .map_or_else(|| "unknown".to_string(), |s| format!("{s}s"));
        out.push_str(&format!(
            "Risk Level: {} | Estimated Duration: {} | Files Affected: {}\n",
            self.risk.as_str().to_ascii_uppercase(),
            duration,
            self.files().len()
        ));
        out.push_str("\nSteps:\n");
        for (i, step) in self.steps.iter().enumerate() {
            let estimate = step
                .draft
                .estimate_secs
                .map(|s| format!(" ({s}s)"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {}. [{}] {}{}",
                i + 1,
                step.draft.kind.as_str().to_ascii_uppercase(),
                step.draft.title,
                estimate
            ));
            if !step.draft.dependencies.is_empty() {
                out.push_str(&format!(" (after {})", step.draft.dependencies.join(", ")));
            }
            out.push('\n');
        }
        out
    }

    /// The steps as a checklist, one line each: `[x] 2. title`.
    pub fn checklist(&self) -> String {
        let mut out = String::new();
        for step in &self.steps {
            out.push_str(&format!(
                "{} {}. {}",
                step.status.mark(),
                step.id(),
                step.draft.title
            ));
            if let Some(note) = &step.note {
                out.push_str(&format!(" — {note}"));
            }
            out.push('\n');
        }
        out
    }

    /// The steps as the simple text format a user edits:
    /// `id. [kind] title (after a, b) {file, file}` per line.
    pub fn steps_text(&self) -> String {
        let mut out = String::new();
        for step in &self.steps {
            out.push_str(&format_draft_line(&step.draft));
            out.push('\n');
        }
        out
    }
}

/// One step as a line of the editable text format.
pub fn format_draft_line(d: &StepDraft) -> String {
    let mut line = format!("{}. [{}] {}", d.id, d.kind.as_str(), d.title);
    if !d.dependencies.is_empty() {
        line.push_str(&format!(" (after {})", d.dependencies.join(", ")));
    }
    if !d.files.is_empty() {
        line.push_str(&format!(" {{{}}}", d.files.join(", ")));
    }
    line
}

/// Reads the editable text format ([`Plan::steps_text`]) back: one step a
/// line, `id. [kind] title`, optionally followed by `(after id, id)` and
/// `{file, file}`; blank lines and lines starting with `#` are ignored.
pub fn parse_steps_text(text: &str) -> Result<Vec<StepDraft>, PlanError> {
    let mut drafts = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| PlanError(format!("line {}: {why}: `{line}`", n + 1));
        let (id, rest) = line
            .split_once(". ")
            .ok_or_else(|| bad("expected `id. [kind] title`"))?;
        let rest = rest.trim_start();
        let rest = rest
            .strip_prefix('[')
            .ok_or_else(|| bad("expected `[kind]` after the id"))?;
        let (kind, mut title) = rest
            .split_once(']')
            .ok_or_else(|| bad("`[kind]` is not closed"))?;
        let kind = StepKind::from_name(kind)
            .ok_or_else(|| bad("the kind must be analyze, edit, validate or test"))?;
        let mut files = Vec::new();
        let mut dependencies = Vec::new();
        let mut t = title.trim();
        if let Some(open) = t.rfind('{')
            && t.ends_with('}')
        {
            files = split_list(&t[open + 1..t.len() - 1]);
            t = t[..open].trim_end();
        }
        if let Some(open) = t.rfind("(after ")
            && t.ends_with(')')
        {
            dependencies = split_list(&t[open + "(after ".len()..t.len() - 1]);
            t = t[..open].trim_end();
        }
        title = t;
        drafts.push(StepDraft {
            id: id.trim().to_string(),
            title: title.trim().to_string(),
            kind,
            files,
            dependencies,
            estimate_secs: None,
        });
    }
    check_drafts(&drafts)?;
    Ok(drafts)
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

fn transition_refusal(id: &str, from: StepStatus, to: StepStatus) -> String {
    if from.is_final() {
        return format!(
            "step `{id}` is already {}; a {} step does not change again",
            from.as_str(),
            from.as_str()
        );
    }
    match (from, to) {
        (StepStatus::Pending, StepStatus::Completed | StepStatus::Failed) => format!(
            "step `{id}` has not started: mark it in_progress before marking it {}",
            to.as_str()
        ),
        _ => format!(
            "step `{id}` cannot go from {} to {}",
            from.as_str(),
            to.as_str()
        ),
    }
}

fn check_drafts(drafts: &[StepDraft]) -> Result<(), PlanError> {
    if drafts.is_empty() {
        return err("a plan needs at least one step");
    }
    if drafts.len() > MAX_STEPS {
        return err(format!(
            "a plan has at most {MAX_STEPS} steps; this one has {}",
            drafts.len()
        ));
    }
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for d in drafts {
        if d.id.trim().is_empty() {
            return err("every step needs a non-empty id");
        }
        if d.title.trim().is_empty() {
            return err(format!("step `{}` needs a title", d.id));
        }
        if d.title.chars().count() > MAX_TITLE_CHARS {
            return err(format!(
                "the title of step `{}` is longer than {MAX_TITLE_CHARS} characters",
                d.id
            ));
        }
        for dep in &d.dependencies {
            if *dep == d.id {
                return err(format!("step `{}` depends on itself", d.id));
            }
            if !seen.contains(dep.as_str()) {
                return err(format!(
                    "step `{}` depends on `{dep}`, which is not a step listed before it",
                    d.id
                ));
            }
        }
        if !seen.insert(d.id.as_str()) {
            return err(format!("two steps have the id `{}`", d.id));
        }
    }
    Ok(())
}

fn seconds(v: Option<&serde_json::Value>, field: &str) -> Result<Option<u64>, PlanError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(s) => Ok(Some(s)),
            None => err(format!("`{field}` must be a whole number of seconds")),
        },
    }
}

fn strings(
    v: Option<&serde_json::Value>,
    field: &str,
    step: &str,
) -> Result<Vec<String>, PlanError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|i| match i {
                serde_json::Value::String(s) => Ok(s.trim().to_string()),
                // Models often number steps: `depends_on: [1]`.
                serde_json::Value::Number(n) => Ok(n.to_string()),
                _ => err(format!("step {step}: `{field}` must list strings")),
            })
            .collect(),
        Some(_) => err(format!("step {step}: `{field}` must be an array")),
    }
}

fn step_from_input(raw: &serde_json::Value, index: usize) -> Result<StepDraft, PlanError> {
    let position = (index + 1).to_string();
    let Some(obj) = raw.as_object() else {
        return err(format!(
            "step {position} must be an object with title and kind"
        ));
    };
    let id = match obj.get("id") {
        None | Some(serde_json::Value::Null) => position.clone(),
        Some(serde_json::Value::String(s)) => s.trim().to_string(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(_) => return err(format!("step {position}: `id` must be a string")),
    };
    let title = match obj.get("title").and_then(|v| v.as_str()) {
        Some(t) => t.trim().to_string(),
        None => return err(format!("step {position}: `title` must be a string")),
    };
    let kind = match obj
        .get("kind")
        .and_then(|v| v.as_str())
        .map(StepKind::from_name)
    {
        Some(Some(k)) => k,
        _ => {
            return err(format!(
                "step {position}: `kind` must be one of analyze, edit, validate, test"
            ));
        }
    };
    Ok(StepDraft {
        files: strings(obj.get("files"), "files", &position)?,
        dependencies: strings(obj.get("depends_on"), "depends_on", &position)?,
        estimate_secs: seconds(obj.get("estimated_seconds"), "estimated_seconds")?,
        id,
        title,
        kind,
    })
}

/// Reads an `update_plan` input: `steps`, a list of `{id, status, note?}`.
pub fn updates_from_input(input: &serde_json::Value) -> Result<Vec<StepUpdate>, PlanError> {
    let Some(items) = input.get("steps").and_then(|v| v.as_array()) else {
        return err("`steps` must be an array of {id, status}");
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let id = match item.get("id") {
                Some(serde_json::Value::String(s)) => s.trim().to_string(),
                Some(serde_json::Value::Number(n)) => n.to_string(),
                _ => return err(format!("update {}: `id` must name a step", i + 1)),
            };
            let Some(status) = item
                .get("status")
                .and_then(|v| v.as_str())
                .and_then(StepStatus::from_name)
            else {
                return err(format!(
                    "update {}: `status` must be one of pending, in_progress, completed, failed, skipped",
                    i + 1
                ));
            };
            let note = item
                .get("note")
                .and_then(|v| v.as_str())
                .map(str::to_string);
            Ok(StepUpdate { id, status, note })
        })
        .collect()
}

/// What [`plan_score`] found in a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanScore {
    pub score: u32,
    /// The cues that counted, for people (`complexity: refactor`).
    pub cues: Vec<String>,
}

/// The score from which a message deserves a plan (the seed's "3+").
pub const PLAN_THRESHOLD: u32 = 3;

/// Words that make a task large by themselves: the change reshapes code
/// rather than adding to it. A word of the message counts when it starts
/// with one of them (`refactoring`, `migrated`).
const SWEEPING: &[&str] = &[
    "refactor",
    "restructur",
    "migrat",
    "rewrite",
    "rewriting",
    "redesign",
    "overhaul",
    "reorganiz",
    "reorganis",
];

/// Words that make a task complex (the seed's list and close relatives).
const COMPLEXITY: &[&str] = &[
    "extract",
    "implement",
    "replace",
    "move",
    "moving",
    "split",
    "rename",
    "consolidat",
    "decompos",
];

/// Architecture and design cues.
const DESIGN: &[&str] = &[
    "architectur",
    "design",
    "module",
    "layer",
    "abstraction",
    "interface",
    "pattern",
    "component",
    "subsystem",
    "codebase",
    "trait",
];

/// Dependency cues.
const DEPENDENCY: &[&str] = &[
    "dependenc",
    "depend",
    "upgrade",
    "crate",
    "package",
    "librar",
    "version",
];

/// Cues of breadth: the change spans many places.
const BREADTH: &[&str] = &["across", "everywhere", "throughout", "every", "all"];

/// File extensions that make a word a file mention.
const EXTENSIONS: &[&str] = &[
    "rs", "toml", "md", "py", "ts", "tsx", "js", "jsx", "go", "java", "kt", "c", "h", "cc", "cpp",
    "hpp", "rb", "json", "yaml", "yml", "proto", "sh", "sql", "html", "css", "swift", "lock",
];

/// The seed's plan detection score of `message`:
/// - a sweeping keyword (refactor, restructure, migrate, rewrite, redesign,
///   overhaul, reorganize): +3;
/// - a complexity keyword (move, extract, implement, replace, split,
///   rename …): +2, a second different one (of either list): +1;
/// - files mentioned: more than one +2 (the seed's "> 1 = complex"), more
///   than three +1 more;
/// - an architecture or design cue: +1;
/// - a dependency cue: +1;
/// - a breadth cue (across, everywhere, all …) with one of the above: +1.
pub fn plan_score(message: &str) -> PlanScore {
    let lower = message.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let found = |list: &[&str]| -> Vec<String> {
        let mut hits: Vec<String> = Vec::new();
        for w in &words {
            if let Some(k) = list.iter().find(|k| w.starts_with(**k))
                && !hits.iter().any(|h| h == k)
            {
                hits.push((*k).to_string());
            }
        }
        hits
    };
    let mut score = 0;
    let mut cues = Vec::new();
    let sweeping = found(SWEEPING);
    let complexity = found(COMPLEXITY);
    let keywords = sweeping.len() + complexity.len();
    if !sweeping.is_empty() {
        score += 3;
    } else if !complexity.is_empty() {
        score += 2;
    }
    if keywords > 1 {
        score += 1;
    }
    if keywords > 0 {
        let all: Vec<String> = sweeping.into_iter().chain(complexity).collect();
        cues.push(format!("complexity: {}", all.join(", ")));
    }
    let files = file_mentions(message);
    if files.len() > 1 {
        score += if files.len() > 3 { 3 } else { 2 };
        cues.push(format!("files: {}", files.len()));
    }
    let design = found(DESIGN);
    if !design.is_empty() {
        score += 1;
        cues.push(format!("design: {}", design.join(", ")));
    }
    let deps = found(DEPENDENCY);
    if !deps.is_empty() {
        score += 1;
        cues.push(format!("dependencies: {}", deps.join(", ")));
    }
    let exact = |list: &[&str]| words.iter().any(|w| list.contains(w));
    if score > 0 && exact(BREADTH) {
        score += 1;
        cues.push("breadth".to_string());
    }
    PlanScore { score, cues }
}

/// The seed's `shouldCreatePlan`: whether `message` scores at least
/// [`PLAN_THRESHOLD`].
pub fn should_create_plan(message: &str) -> bool {
    plan_score(message).score >= PLAN_THRESHOLD
}

/// The distinct files `message` mentions: words with a path separator or a
/// known extension (`src/main.rs`, `Cargo.toml`, `lib/`).
pub fn file_mentions(message: &str) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for raw in message.split(|c: char| c.is_whitespace() || c == ',' || c == '`' || c == '"') {
        let w = raw.trim_matches(|c: char| matches!(c, '(' | ')' | '\'' | ':' | ';' | '?' | '!'));
        let w = w.strip_suffix('.').unwrap_or(w);
        if w.len() < 3 || w.starts_with("http") {
            continue;
        }
        let has_ext = w.rsplit_once('.').is_some_and(|(stem, ext)| {
            !stem.is_empty() && EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str())
        });
        let is_path = w.contains('/')
            && w.chars().any(|c| c.is_alphabetic())
            && !w.contains("//")
            && w.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '*'));
        if (has_ext || is_path) && !files.iter().any(|f| f == w) {
            files.push(w.to_string());
        }
    }
    files
}

/// How a user answers a plan approval request. A decision of its own, apart
/// from the permission decisions, so that whoever classifies answers (roles
/// that may approve) can tell a plan's approval from a tool's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum PlanAnswer {
    /// Carry it out; the conversation continues in `mode` (`default` or
    /// `accept_edits`).
    Approve { mode: crate::permission::Mode },
    /// Do not; the model is told `feedback` and revises the plan.
    Reject { feedback: String },
    /// Carry out these steps instead (all pending), in `mode`: the model is
    /// told this list is what was approved.
    Edit {
        steps: Vec<StepDraft>,
        mode: crate::permission::Mode,
    },
}

/// What happened to a plan, for clients (the seed's events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum PlanEvent {
    /// `plan_generated`: the model proposed it; an approval request follows.
    Generated,
    /// `plan_confirmed`: a user approved it (`edited`: with their own steps).
    Confirmed {
        mode: crate::permission::Mode,
        edited: bool,
    },
    /// `plan_rejected`: a user rejected it, saying why.
    Rejected { feedback: String },
    /// A step's status changed: `plan_step_started` (to in_progress),
    /// `plan_step_completed`, `plan_step_failed`, or skipped.
    Step(StepChange),
}

/// Whether a request's plan detection is off, suggests plan mode, or
/// enters it (`[plan] detect`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanDetect {
    /// No detection.
    Off,
    /// A request that deserves a plan gets a notice suggesting plan mode.
    #[default]
    Suggest,
    /// A request that deserves a plan puts the conversation in plan mode.
    Require,
}

/// The spec of `propose_plan`.
pub fn propose_plan_spec() -> crate::tools::ToolSpec {
    crate::tools::ToolSpec {
        name: crate::tools::Tool::ProposePlan.name().to_string(),
        description: "Propose a step-by-step plan for the user to approve before you change anything. The user approves it (you then carry it out, reporting progress with update_plan), rejects it with feedback (revise it and propose again), or edits the steps (carry out the steps you are told were approved).".to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["intent", "risk", "steps"],
            "properties": {
                "intent": {"type": "string", "description": "What the plan achieves, in one line"},
                "risk": {"type": "string", "enum": ["low", "medium", "high"]},
                "estimated_seconds": {"type": "integer", "description": "Your estimate for the whole plan"},
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["title", "kind"],
                        "properties": {
                            "id": {"type": "string", "description": "Unique; default: its position, 1-based"},
                            "title": {"type": "string"},
                            "kind": {"type": "string", "enum": ["analyze", "edit", "validate", "test"]},
                            "files": {"type": "array", "items": {"type": "string"}},
                            "depends_on": {"type": "array", "items": {"type": "string"}, "description": "Ids of earlier steps that must complete first"},
                            "estimated_seconds": {"type": "integer"}
                        }
                    }
                }
            }
        }),
    }
}

/// The spec of `update_plan`.
pub fn update_plan_spec() -> crate::tools::ToolSpec {
    crate::tools::ToolSpec {
        name: crate::tools::Tool::UpdatePlan.name().to_string(),
        description: "Report progress on the approved plan: mark a step in_progress when you start it, then completed or failed (with a note). A step starts only after its dependencies completed; steps that depend on a failed step are skipped.".to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["steps"],
            "properties": {
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "status"],
                        "properties": {
                            "id": {"type": "string"},
                            "status": {"type": "string", "enum": ["in_progress", "completed", "failed", "skipped"]},
                            "note": {"type": "string", "description": "Why it failed or was skipped"}
                        }
                    }
                }
            }
        }),
    }
}
