//! The todo list: `update_plan` without an approved plan (issue 42 point 4).
//!
//! One vocabulary with plans: the list is a [`Plan`] in the
//! [`PlanPhase::Todo`] phase, stored, reported and replayed as plans are.
//! Each call sends the whole list (`steps`: `{title, status}`), which
//! replaces the last one; the statuses are `pending`, `in_progress` and
//! `completed`, and at most one item is in progress. An empty list clears
//! it.
//!
//! The reminder: a turn that made many tool calls ([`TodoTally`]) and has
//! no list gets one nudge, added to the message of tool results that
//! crossed the threshold.

use super::{
    MAX_STEPS, MAX_TITLE_CHARS, Plan, PlanError, PlanPhase, PlanStep, Risk, StepDraft, StepKind,
    StepStatus, err,
};
use serde::{Deserialize, Serialize};

/// The intent every todo list carries (clients show the list, not this).
pub const TODO_INTENT: &str = "Todo list";

/// The statuses an item of a todo list may have.
pub const TODO_STATUSES: [StepStatus; 3] = [
    StepStatus::Pending,
    StepStatus::InProgress,
    StepStatus::Completed,
];

impl Plan {
    /// Whether this is a todo list rather than a proposed plan.
    pub fn is_todo(&self) -> bool {
        self.phase == PlanPhase::Todo
    }

    /// Whether the model keeps a list: a todo list, or an approved plan.
    pub fn keeps_list(&self) -> bool {
        matches!(self.phase, PlanPhase::Todo | PlanPhase::Approved)
    }

    /// Reads an `update_plan` input as a whole todo list: `steps`, each
    /// `{title, status}` (`content` is taken for `title`, `id` is optional
    /// and defaults to the 1-based position). See the module's rules.
    pub fn todo_from_input(
        input: &serde_json::Value,
        tool_use_id: &str,
    ) -> Result<Plan, PlanError> {
        let Some(items) = input.get("steps").and_then(|v| v.as_array()) else {
            return err("`steps` must be an array of {title, status}: the whole todo list");
        };
        if items.len() > MAX_STEPS {
            return err(format!(
                "a todo list has at most {MAX_STEPS} items; this one has {}",
                items.len()
            ));
        }
        let mut steps: Vec<PlanStep> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let step = todo_item(item, i + 1)?;
            if steps.iter().any(|s| s.id() == step.id()) {
                return err(format!(
                    "item {}: the id `{}` is used twice",
                    i + 1,
                    step.id()
                ));
            }
            steps.push(step);
        }
        let started: Vec<&str> = steps
            .iter()
            .filter(|s| s.status == StepStatus::InProgress)
            .map(|s| s.draft.title.as_str())
            .collect();
        if started.len() > 1 {
            return err(format!(
                "at most one item is in_progress at a time; {} are: {}",
                started.len(),
                started.join("; ")
            ));
        }
        Ok(Plan {
            intent: TODO_INTENT.to_string(),
            risk: Risk::Low,
            estimate_secs: None,
            steps,
            phase: PlanPhase::Todo,
            tool_use_id: tool_use_id.to_string(),
        })
    }
}

/// Whether an `update_plan` input reads as a todo list (its items have
/// titles) rather than as changes to a plan's steps (ids and statuses).
pub fn is_todo_input(input: &serde_json::Value) -> bool {
    input
        .get("steps")
        .and_then(|v| v.as_array())
        .is_some_and(|items| {
            items
                .iter()
                .any(|i| i.get("title").is_some() || i.get("content").is_some())
        })
}

/// One item of a todo list, at 1-based `position`.
fn todo_item(item: &serde_json::Value, position: usize) -> Result<PlanStep, PlanError> {
    let title = item
        .get("title")
        .or_else(|| item.get("content"))
        .and_then(|v| v.as_str())
        .map(str::trim)
        .unwrap_or_default();
    if title.is_empty() {
        return err(format!(
            "item {position}: `title` must be a non-empty string"
        ));
    }
    if title.chars().count() > MAX_TITLE_CHARS {
        return err(format!(
            "item {position}: a title has at most {MAX_TITLE_CHARS} characters"
        ));
    }
    let id = match item.get("id") {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => position.to_string(),
    };
    let status = item
        .get("status")
        .and_then(|v| v.as_str())
        .and_then(StepStatus::from_name)
        .filter(|s| TODO_STATUSES.contains(s));
    let Some(status) = status else {
        return err(format!(
            "item {position}: `status` must be one of pending, in_progress, completed"
        ));
    };
    Ok(PlanStep {
        draft: StepDraft {
            id,
            title: title.to_string(),
            kind: StepKind::Analyze,
            files: Vec::new(),
            dependencies: Vec::new(),
            estimate_secs: None,
        },
        status,
        note: None,
    })
}

/// How many tool calls the current turn made, and whether it was reminded
/// to keep a todo list. Kept with the conversation so that a restart does
/// not nudge twice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoTally {
    /// Tool calls answered in this turn so far.
    #[serde(default, rename = "turn_tool_calls", skip_serializing_if = "is_zero")]
    pub calls: u32,
    /// The turn was reminded.
    #[serde(
        default,
        rename = "todo_nudged",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub nudged: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl TodoTally {
    /// The tally after round `iteration` of a turn answered `calls` tool
    /// calls (round 1 starts a new turn's count), and whether this round's
    /// results carry the reminder: the turn reached `threshold` calls (0:
    /// never), has no list (`has_list`: a todo list or an approved plan)
    /// and was not reminded yet.
    pub fn after_round(
        self,
        iteration: u32,
        calls: usize,
        has_list: bool,
        threshold: u32,
    ) -> (TodoTally, bool) {
        let before = if iteration <= 1 {
            TodoTally::default()
        } else {
            self
        };
        let calls = before
            .calls
            .saturating_add(u32::try_from(calls).unwrap_or(u32::MAX));
        let nudge = threshold > 0 && calls >= threshold && !has_list && !before.nudged;
        (
            TodoTally {
                calls,
                nudged: before.nudged || nudge,
            },
            nudge,
        )
    }
}
