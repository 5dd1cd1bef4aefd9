//! Reading the plan tools' input (the model's JSON): a proposed plan, an
//! update's changes, and the checks every list of steps passes.

use super::{
    MAX_STEPS, MAX_TITLE_CHARS, Plan, PlanError, PlanPhase, Risk, StepDraft, StepKind, StepStatus,
    StepUpdate, err,
};
use std::collections::BTreeSet;

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
}

/// The checks every list of steps passes (see [`Plan::set_steps`]).
pub(super) fn check_drafts(drafts: &[StepDraft]) -> Result<(), PlanError> {
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
