//! The editable text format of a plan's steps, one step a line, as people
//! read and edit it.

use super::input::check_drafts;
use super::{PlanError, StepDraft, StepKind};

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

/// Reads the editable text format
/// ([`Plan::steps_text`](super::Plan::steps_text)) back: one step a line,
/// `id. [kind] title`, optionally followed by `(after id, id)` and
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
