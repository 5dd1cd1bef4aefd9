//! Permission requests: the block that asks (tool, summary, reason, paths
//! outside the working directory, diff, keys) and the line that says how it
//! was answered.

use std::io::{self, Write};

use agent_proto::v1::{self as pb, PermissionDecision};

use super::format::name_or_id;
use super::{BOLD, DIM, RED, Renderer, YELLOW, one_line, shorten_home};
use crate::cli::{Decision, offered_decisions};

impl<W: Write> Renderer<W> {
    /// Renders a permission request block: tool, summary, reason, diff and
    /// the keys of the options it offers. A request already shown (same id)
    /// is not shown again.
    pub fn permission_request(&mut self, r: &pb::PermissionRequest) -> io::Result<()> {
        if self.shown_request.as_deref() == Some(r.request_id.as_str()) {
            return Ok(());
        }
        self.shown_request = Some(r.request_id.clone());
        self.end_line()?;
        if let Some(plan) = &r.plan {
            return self.plan_request(plan);
        }
        if self.auto_allow {
            let what = if r.summary.is_empty() {
                r.tool_name.clone()
            } else {
                one_line(&r.summary, 200)
            };
            let line = self.paint(YELLOW, &format!("✓ allowed once (--yes): {what}"));
            return self.line(&line);
        }
        let title = self.paint(YELLOW, &format!("⚠ permission needed: {}", r.tool_name));
        self.line(&title)?;
        if !r.sub_agent_id.is_empty() {
            let who = self.paint(
                BOLD,
                &format!(
                    "  asked by sub-agent {} ({}): {}",
                    r.sub_agent_id,
                    r.sub_agent_conversation_id,
                    one_line(&r.sub_agent_description, 120)
                ),
            );
            self.line(&who)?;
        }
        if !r.summary.is_empty() {
            for line in r.summary.lines() {
                let line = self.paint(BOLD, line);
                self.line(&format!("  {line}"))?;
            }
        } else if !r.input_json.is_empty() {
            self.line(&format!("  {}", one_line(&r.input_json, 200)))?;
        }
        // What the model says the call is for, and where a command runs.
        let input: Option<serde_json::Value> = serde_json::from_str(&r.input_json).ok();
        if let Some(description) = input
            .as_ref()
            .and_then(|i| i.get("description"))
            .and_then(|d| d.as_str())
            .filter(|d| !d.trim().is_empty())
        {
            let line = self.paint(DIM, &format!("  {}", one_line(description, 200)));
            self.line(&line)?;
        }
        let runs_a_command = r.kind() == pb::ToolKind::Execute
            && input.as_ref().is_some_and(|i| i.get("command").is_some());
        if runs_a_command && !self.cwd.is_empty() {
            let line = self.paint(DIM, &format!("  in {}", shorten_home(&self.cwd)));
            self.line(&line)?;
        }
        let (why, outside) = split_reason(&r.reason);
        for path in outside {
            let line = self.paint(RED, &format!("{OUTSIDE_WORKING_DIRECTORY}{path}"));
            self.line(&format!("  {}", self.paint(BOLD, &line)))?;
        }
        if !why.is_empty() {
            self.line(&format!("  why: {why}"))?;
        }
        self.diff(&r.diff, "  ")?;
        if !r.diff.is_empty() {
            self.diff_shown.insert(r.tool_use_id.clone());
        }
        let offered = offered_decisions(&r.options);
        if !r.suggested_rule.is_empty() && offered.contains(&Decision::AllowAlways) {
            let rule = self.paint(
                DIM,
                &format!("  \"allow always\" adds the rule {}", r.suggested_rule),
            );
            self.line(&rule)?;
        }
        if !self.show_keys {
            return Ok(());
        }
        for line in self.keys(&offered) {
            self.line(&line)?;
        }
        Ok(())
    }

    /// The keys line(s), indented, wrapped between options (never inside
    /// one) at the screen's width.
    fn keys(&self, offered: &[Decision]) -> Vec<String> {
        let width = match self.markdown.width {
            0 => usize::MAX,
            w => w,
        };
        let options = offered.iter().map(|d| {
            let label = match d {
                Decision::DenyAndStop => format!("{} (then type feedback)", d.label()),
                _ => d.label().to_string(),
            };
            let columns = 4 + label.chars().count();
            let key = self.paint(BOLD, &format!("[{}]", d.key()));
            (format!("{key} {label}"), columns)
        });
        wrap_options(options, width)
    }

    pub(super) fn permission_resolved(&mut self, p: &pb::PermissionResolved) -> io::Result<()> {
        if self.shown_request.as_deref() == Some(p.request_id.as_str()) {
            self.shown_request = None;
        }
        let decision = PermissionDecision::try_from(p.decision).unwrap_or_default();
        let text = match Decision::from_proto(decision) {
            None if decision == PermissionDecision::Cancelled => {
                "  ⎿ permission request cancelled".to_string()
            }
            None => "  ⎿ permission request resolved".to_string(),
            Some(d) if p.client_id.is_empty() => format!("  ⎿ {}", d.label()),
            Some(d) if p.client_id == self.own_client_id => format!("  ⎿ {} (you)", d.label()),
            Some(d) => format!(
                "  ⎿ {} (answered by {})",
                d.label(),
                name_or_id(&p.client_name, &p.client_id)
            ),
        };
        let text = self.paint(DIM, &text);
        self.line(&text)
    }
}

/// Lays out answer options (each as shown, and the columns it takes) on
/// lines indented by two, two spaces apart, a new line before an option
/// that would pass `width`: options are never split.
pub fn wrap_options(
    options: impl IntoIterator<Item = (String, usize)>,
    width: usize,
) -> Vec<String> {
    let mut lines = Vec::new();
    let (mut line, mut used) = (String::from("  "), 2);
    for (shown, columns) in options {
        if used > 2 && used + 2 + columns > width {
            lines.push(std::mem::replace(&mut line, String::from("  ")));
            used = 2;
        } else if used > 2 {
            line.push_str("  ");
            used += 2;
        }
        line.push_str(&shown);
        used += columns;
    }
    lines.push(line);
    lines
}

/// How the daemon says, in a permission request's reason, that a file
/// written is outside the working directory (the path follows, up to the
/// next `; `): the core's `permission::OUTSIDE_WORKING_DIRECTORY`.
const OUTSIDE_WORKING_DIRECTORY: &str = "outside the working directory: ";

/// A request's reason without its "outside the working directory: PATH"
/// clauses, and those paths: the prompt shows each on a line of its own,
/// where it cannot be missed.
fn split_reason(reason: &str) -> (String, Vec<&str>) {
    let mut why: Vec<&str> = Vec::new();
    let mut outside: Vec<&str> = Vec::new();
    for clause in reason.split("; ") {
        match clause.strip_prefix(OUTSIDE_WORKING_DIRECTORY) {
            Some(path) if !path.is_empty() => {
                if !outside.contains(&path) {
                    outside.push(path);
                }
            }
            // "bash `ls` needs permission" says nothing the title does not.
            _ if clause.ends_with(" needs permission") || clause.ends_with(" need permission") => {}
            _ => why.push(clause),
        }
    }
    (why.join("; "), outside)
}
