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
//! function of the user's text (`detect.rs`). Reading the tools' input is
//! in `input.rs`, the editable text format of the steps in `text.rs`, the
//! tools' specs in `specs.rs`; the todo list (`update_plan` with no
//! approved plan, a plan in the `todo` phase) in `todo.rs`.

mod detect;
mod input;
mod specs;
mod text;
mod todo;

pub use detect::{PLAN_THRESHOLD, PlanScore, file_mentions, plan_score, should_create_plan};
pub use input::updates_from_input;
pub use specs::{propose_plan_spec, update_plan_spec};
pub use text::{format_draft_line, parse_steps_text};
pub use todo::{TODO_INTENT, TODO_STATUSES, TodoTally, is_todo_input};

use input::check_drafts;
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
    /// Not a plan but the model's todo list (`update_plan` with no
    /// approved plan): no approval, the whole list replaced each time.
    Todo,
}

impl PlanPhase {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanPhase::Proposed => "proposed",
            PlanPhase::Approved => "approved",
            PlanPhase::Rejected => "rejected",
            PlanPhase::Todo => "todo",
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
    /// The todo list was replaced (`update_plan` with no approved plan).
    TodoUpdated,
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
