//! Plans: the approval request's box and keys, the checklist and each
//! step's progress, the plan's notices, and the text a person edits the
//! steps in (written and read back).

use std::io::{self, Write};

use agent_proto::v1 as pb;

use super::{BOLD, DIM, GREEN, RED, Renderer, YELLOW, mode_name, one_line};

impl<W: Write> Renderer<W> {
    /// A plan approval request: the seed's box (intent, risk, duration,
    /// files, steps). The keys that answer it are the session's to say
    /// (`cli::PLAN_KEYS`): only it knows whether it can read them.
    pub fn plan_request(&mut self, plan: &pb::Plan) -> io::Result<()> {
        let rule = "━".repeat(60);
        let title = self.paint(YELLOW, "📋 Task Plan Generated");
        self.line(&title)?;
        self.line(&rule)?;
        for line in plan_box(plan).lines() {
            self.line(line)?;
        }
        Ok(())
    }

    /// The steps of a plan, one line each, with their statuses.
    pub fn plan_checklist(&mut self, plan: &pb::Plan) -> io::Result<()> {
        for step in &plan.steps {
            let line = checklist_line(step);
            let line = match step.status.as_str() {
                "completed" => self.paint(GREEN, &line),
                "failed" => self.paint(RED, &line),
                "skipped" => self.paint(DIM, &line),
                _ => line,
            };
            self.line(&format!("  {line}"))?;
        }
        Ok(())
    }

    /// One step's change, as its checklist line and the plan's progress.
    pub(super) fn plan_step(&mut self, s: &pb::PlanStepChanged) -> io::Result<()> {
        self.end_line()?;
        let Some(plan) = &s.plan else {
            return Ok(());
        };
        let Some(step) = plan.steps.iter().find(|st| st.id == s.step_id) else {
            return Ok(());
        };
        let done = plan
            .steps
            .iter()
            .filter(|st| matches!(st.status.as_str(), "completed" | "failed" | "skipped"))
            .count();
        let line = format!("{} ({done}/{})", checklist_line(step), plan.steps.len());
        let line = match step.status.as_str() {
            "completed" => self.paint(GREEN, &line),
            "failed" => self.paint(RED, &line),
            "skipped" => self.paint(DIM, &line),
            _ => self.paint(BOLD, &line),
        };
        self.line(&format!("  {line}"))
    }

    /// The plan was approved: the mode it runs in, and its steps.
    pub(super) fn plan_confirmed(&mut self, p: &pb::PlanConfirmed) -> io::Result<()> {
        self.end_line()?;
        let how = if p.edited {
            "approved as edited"
        } else {
            "approved"
        };
        self.notice(&format!("plan {how}; mode {}", mode_name(p.mode)))?;
        if let Some(plan) = &p.plan {
            self.plan_checklist(plan)?;
        }
        Ok(())
    }
}

/// A rejected plan, with the feedback the model revises it by.
pub(super) fn plan_rejected_text(p: &pb::PlanRejected) -> String {
    if p.feedback.trim().is_empty() {
        "plan rejected".to_string()
    } else {
        format!("plan rejected: {}", one_line(&p.feedback, 200))
    }
}

/// The seed's plan box, without its rules and question.
pub fn plan_box(plan: &pb::Plan) -> String {
    let mut files: Vec<&str> = Vec::new();
    for f in plan.steps.iter().flat_map(|s| s.files.iter()) {
        if !files.contains(&f.as_str()) {
            files.push(f);
        }
    }
    let total: u64 = plan.steps.iter().map(|s| s.estimate_secs).sum();
    let duration = match (plan.estimate_secs, total) {
        (0, 0) => "unknown".to_string(),
        (0, t) => format!("{t}s"),
        (e, _) => format!("{e}s"),
    };
    let mut out = format!(
        "Intent: {}\nRisk Level: {} | Estimated Duration: {duration} | Files Affected: {}\n",
        plan.intent,
        plan.risk.to_uppercase(),
        files.len()
    );
    if !files.is_empty() {
        out.push_str(&format!("Files: {}\n", files.join(", ")));
    }
    out.push_str("\nSteps:\n");
    for (i, s) in plan.steps.iter().enumerate() {
        out.push_str(&format!(
            "  {}. [{}] {}",
            i + 1,
            s.kind.to_uppercase(),
            s.title
        ));
        if s.estimate_secs > 0 {
            out.push_str(&format!(" ({}s)", s.estimate_secs));
        }
        if !s.dependencies.is_empty() {
            out.push_str(&format!(" (after {})", s.dependencies.join(", ")));
        }
        out.push('\n');
    }
    out
}

/// `[x] 2. title — note`.
pub fn checklist_line(step: &pb::PlanStep) -> String {
    let mark = match step.status.as_str() {
        "in_progress" => "[>]",
        "completed" => "[x]",
        "failed" => "[!]",
        "skipped" => "[-]",
        _ => "[ ]",
    };
    let mut line = format!("{mark} {}. {}", step.id, step.title);
    if !step.note.is_empty() {
        line.push_str(&format!(" — {}", one_line(&step.note, 120)));
    }
    line
}

/// What a client says when the daemon finds a request deserves a plan.
pub fn plan_suggested_text(s: &pb::PlanSuggested) -> String {
    format!(
        "this looks like a multi-step task ({}); to review a plan before any change, /mode plan and send it again",
        s.cues.join("; ")
    )
}

/// The steps as the text a user edits: `id. [kind] title (after a, b)
/// {file, file}` per line (the daemon's format).
pub fn plan_steps_text(plan: &pb::Plan) -> String {
    let mut out = String::new();
    for s in &plan.steps {
        out.push_str(&format!("{}. [{}] {}", s.id, s.kind, s.title));
        if !s.dependencies.is_empty() {
            out.push_str(&format!(" (after {})", s.dependencies.join(", ")));
        }
        if !s.files.is_empty() {
            out.push_str(&format!(" {{{}}}", s.files.join(", ")));
        }
        out.push('\n');
    }
    out
}

/// Reads the text a user edited back into steps: one a line, `id. [kind]
/// title`, then optionally `(after id, id)` and `{file, file}`; blank lines
/// and `#` comments are skipped. The daemon checks the result as a plan.
pub fn parse_plan_steps(text: &str) -> Result<Vec<pb::PlanStep>, String> {
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut steps = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}: {line}", n + 1);
        let (id, rest) = line
            .split_once(". ")
            .ok_or_else(|| bad("expected `id. [kind] title`"))?;
        let rest = rest
            .trim_start()
            .strip_prefix('[')
            .ok_or_else(|| bad("expected `[kind]` after the id"))?;
        let (kind, title) = rest
            .split_once(']')
            .ok_or_else(|| bad("`[kind]` is not closed"))?;
        let mut title = title.trim();
        let mut files = Vec::new();
        let mut dependencies = Vec::new();
        if let Some(open) = title.rfind('{')
            && title.ends_with('}')
        {
            files = list(&title[open + 1..title.len() - 1]);
            title = title[..open].trim_end();
        }
        if let Some(open) = title.rfind("(after ")
            && title.ends_with(')')
        {
            dependencies = list(&title[open + "(after ".len()..title.len() - 1]);
            title = title[..open].trim_end();
        }
        steps.push(pb::PlanStep {
            id: id.trim().to_string(),
            title: title.to_string(),
            kind: kind.trim().to_lowercase(),
            files,
            dependencies,
            ..Default::default()
        });
    }
    if steps.is_empty() {
        return Err("the edited plan has no steps".to_string());
    }
    Ok(steps)
}
