//! Tool calls: their `⏺` line, the output of a running call (a few lines
//! live, the rest counted), the outcome with its diff, and the results read
//! back from a transcript. Separate because it owns the per-call bookkeeping
//! (begun, held, ended, live output) that keeps a call from showing twice.

use std::io::{self, Write};

use agent_proto::v1 as pb;

use super::format::truncate_chars;
use super::{
    BOLD, CYAN, DIM, GREEN, RED, Renderer, format_duration_ms, image_description, one_line,
};

/// How many lines of a command's output are shown at its start (as they
/// arrive) and at its end (when it ends); the lines between are counted.
pub const OUTPUT_LINES: usize = 5;

/// What a client has shown of a running call's output.
#[derive(Debug, Default)]
pub(super) struct LiveOutput {
    /// The line being written (no newline yet).
    partial: String,
    /// Lines shown (at most [`OUTPUT_LINES`]).
    shown: usize,
    /// Complete lines that arrived after those, not shown.
    hidden: u64,
    /// The daemon left bytes out (a flood): `hidden` is not exact.
    skipped: bool,
}

impl<W: Write> Renderer<W> {
    /// A call started: announced with `⏺`, except reads and searches,
    /// held to be shown as one line with their result when they end.
    pub(super) fn tool_call_begin(&mut self, t: &pb::ToolCallBegin) -> io::Result<()> {
        let summary = if t.summary.is_empty() {
            tool_use_summary(&t.tool_name, &t.input_json)
        } else {
            t.summary.clone()
        };
        self.tool_uses
            .insert(t.tool_use_id.clone(), summary.clone());
        if t.tool_name == super::todo::UPDATE_PLAN {
            // Shown when it ends only if it fails.
            self.todo.quiet.insert(t.tool_use_id.clone());
            return Ok(());
        }
        if matches!(t.kind(), pb::ToolKind::Read | pb::ToolKind::Search) {
            // One line with its result, when it ends.
            self.begun.insert(t.tool_use_id.clone());
            self.held.push((t.tool_use_id.clone(), summary));
            Ok(())
        } else {
            self.tool_begin(&t.tool_use_id, &summary)
        }
    }

    pub(super) fn tool_begin(&mut self, id: &str, summary: &str) -> io::Result<()> {
        let dot = self.paint(GREEN, "⏺");
        self.line(&format!("{dot} {summary}"))?;
        self.begun.insert(id.to_string());
        Ok(())
    }

    pub(super) fn tool_end(&mut self, t: &pb::ToolCallEnd) -> io::Result<()> {
        if self.quiet_end(&t.tool_use_id, t.is_error) {
            return Ok(());
        }
        if !self.begun.contains(&t.tool_use_id) {
            let summary = self
                .tool_uses
                .get(&t.tool_use_id)
                .cloned()
                .unwrap_or_else(|| t.tool_name.clone());
            self.tool_begin(&t.tool_use_id, &summary)?;
        }
        let outcome = if t.is_error {
            self.paint(RED, "error")
        } else {
            self.paint(GREEN, "ok")
        };
        let held = self
            .held
            .iter()
            .position(|(id, _)| *id == t.tool_use_id)
            .map(|i| self.held.remove(i).1);
        let lines = if held.is_some() {
            0
        } else {
            self.output_end(t)?
        };
        let mut text = match &held {
            Some(summary) => format!("{} {summary} ⎿ {outcome}", self.paint(GREEN, "⏺")),
            None => format!("  ⎿ {outcome}"),
        };
        if !t.summary.is_empty() {
            text.push(' ');
            text.push_str(&one_line(&t.summary, 120));
        }
        if t.duration_ms >= 1000 && !states_a_duration(&t.summary) {
            let took = self.paint(DIM, &format!(" ({})", format_duration_ms(t.duration_ms)));
            text.push_str(&took);
        }
        if lines > 2 * OUTPUT_LINES as u64 {
            let count = self.paint(DIM, &format!(" · {lines} lines"));
            text.push_str(&count);
        }
        if held.is_some() {
            // Other reads still running stay held: their lines come with
            // their results, in the order they end.
            self.end_text()?;
            writeln!(self.out, "{text}")?;
        } else {
            self.line(&text)?;
        }
        if !self.diff_shown.remove(&t.tool_use_id) {
            self.diff(&t.diff, "    ")?;
        }
        self.ended.insert(t.tool_use_id.clone());
        Ok(())
    }

    /// Output a running call printed: its first [`OUTPUT_LINES`] lines are
    /// shown as they arrive, under the call; the rest are only counted
    /// (the end shows the last ones). The terminal is append-only, so a
    /// long build's output costs a few lines, not thousands.
    pub(super) fn tool_output(&mut self, d: &pb::ToolOutputDelta) -> io::Result<()> {
        if self.ended.contains(&d.tool_use_id) {
            return Ok(());
        }
        if !self.begun.contains(&d.tool_use_id) {
            let summary = self
                .tool_uses
                .get(&d.tool_use_id)
                .cloned()
                .unwrap_or_else(|| format!("tool call {}", d.tool_use_id));
            self.tool_begin(&d.tool_use_id, &summary)?;
        }
        let mut view = self.live.remove(&d.tool_use_id).unwrap_or_default();
        if d.skipped_bytes > 0 {
            // Lines were left out mid-stream: what is open is not a line
            // start any more, and the live count is no longer exact; the
            // end shows the last lines.
            view.partial.clear();
            view.skipped = true;
        }
        view.partial.push_str(&d.text);
        while let Some(nl) = view.partial.find('\n') {
            let line: String = view.partial.drain(..=nl).collect();
            let line = line.trim_end_matches(['\n', '\r']);
            if view.shown < OUTPUT_LINES && !view.skipped {
                self.output_line(line)?;
                view.shown += 1;
            } else {
                view.hidden += 1;
            }
        }
        self.live.insert(d.tool_use_id.clone(), view);
        Ok(())
    }

    /// One line of a command's output, under its call.
    fn output_line(&mut self, line: &str) -> io::Result<()> {
        self.output_line_within(line, 200)
    }

    /// One line of output, cut at `max` characters.
    fn output_line_within(&mut self, line: &str, max: usize) -> io::Result<()> {
        let bar = self.paint(DIM, "  │");
        // A command's escape sequences must not move the cursor under the
        // editor or clear the screen.
        let line = truncate_chars(&crate::markdown::clean(line.trim_end(), "    "), max);
        if line.is_empty() {
            self.line(&bar)
        } else {
            self.line(&format!("{bar} {line}"))
        }
    }

    /// Shows what a call printed that was not shown yet: without live
    /// output its first and last lines from the end's preview; after live
    /// output how many lines were not shown and the last ones. Returns how
    /// many lines it printed in all.
    fn output_end(&mut self, t: &pb::ToolCallEnd) -> io::Result<u64> {
        let view = self.live.remove(&t.tool_use_id);
        let has_preview = t.output_lines > 0;
        let Some(mut view) = view else {
            if !has_preview {
                return Ok(0);
            }
            for line in &t.output_head {
                self.output_line(line)?;
            }
            let omitted = t
                .output_lines
                .saturating_sub((t.output_head.len() + t.output_tail.len()) as u64);
            if omitted > 0 {
                self.more_lines(omitted)?;
            }
            for line in &t.output_tail {
                self.output_line(line)?;
            }
            return Ok(t.output_lines);
        };
        if !view.partial.is_empty() {
            let line = std::mem::take(&mut view.partial);
            if view.shown < OUTPUT_LINES && !view.skipped {
                self.output_line(&line)?;
                view.shown += 1;
            } else {
                view.hidden += 1;
            }
        }
        if !has_preview {
            // Interrupted, or from a daemon without previews: what came live.
            if view.hidden > 0 {
                self.more_lines(view.hidden)?;
            }
            return Ok(view.shown as u64 + view.hidden);
        }
        let unshown = t.output_lines.saturating_sub(view.shown as u64);
        let omitted = (t.output_head.len() + t.output_tail.len()) as u64 != t.output_lines;
        // The lines the preview has of the output's end.
        let end: Vec<&String> = if omitted {
            t.output_tail.iter().collect()
        } else {
            t.output_head.iter().chain(&t.output_tail).collect()
        };
        let last = end
            .len()
            .min(OUTPUT_LINES)
            .min(usize::try_from(unshown).unwrap_or(usize::MAX));
        let between = unshown - last as u64;
        if between > 0 {
            self.more_lines(between)?;
        }
        for line in &end[end.len() - last..] {
            self.output_line(line)?;
        }
        Ok(t.output_lines)
    }

    fn more_lines(&mut self, n: u64) -> io::Result<()> {
        let what = if n == 1 { "line" } else { "lines" };
        let hint = self
            .expand_key
            .map(|key| format!(" ({key} shows the whole result)"))
            .unwrap_or_default();
        let text = self.paint(DIM, &format!("  │ … {n} more {what}{hint}"));
        self.line(&text)
    }

    /// A diff under a call or a request, its hunks' lines numbered.
    pub(super) fn diff(&mut self, diff: &str, indent: &str) -> io::Result<()> {
        let lines = super::diff::numbered(diff);
        let width = lines
            .iter()
            .filter_map(|l| l.number)
            .max()
            .map_or(0, |n| n.to_string().len());
        for super::diff::DiffLine { number, text: line } in lines {
            let number = match (number, width) {
                (_, 0) => String::new(),
                (Some(n), _) => self.paint(DIM, &format!("{n:>width$} ")),
                (None, _) => " ".repeat(width + 1),
            };
            let painted = if line.starts_with("+++") || line.starts_with("---") {
                self.paint(BOLD, line)
            } else if line.starts_with('+') {
                self.paint(GREEN, line)
            } else if line.starts_with('-') {
                self.paint(RED, line)
            } else if line.starts_with("@@") {
                self.paint(CYAN, line)
            } else {
                line.to_string()
            };
            self.line(&format!("{indent}{number}{painted}"))?;
        }
        Ok(())
    }

    pub fn expand_last(&mut self) -> io::Result<()> {
        let Some((summary, result)) = self.last_result.clone() else {
            self.info("no tool has run in this session yet")?;
            return self.out.flush();
        };
        self.end_text()?;
        let lines = result.content.lines().count();
        let what = if lines == 1 { "line" } else { "lines" };
        let head = format!(
            "{} {summary} — the whole result ({lines} {what}):",
            self.paint(GREEN, "⏺")
        );
        self.line(&head)?;
        self.whole_output(&result)?;
        self.out.flush()
    }

    /// A tool result's every line, under its call.
    fn whole_output(&mut self, result: &pb::ToolResultBlock) -> io::Result<()> {
        if result.is_error {
            let text = self.paint(RED, "  ⎿ error:");
            self.line(&text)?;
        }
        for line in result.content.lines() {
            self.output_line_within(line, usize::MAX)?;
        }
        self.result_images(result)
    }

    /// One line for each image a tool result carries.
    fn result_images(&mut self, result: &pb::ToolResultBlock) -> io::Result<()> {
        for image in &result.images {
            let text = format!("    [image: {}]", image_description(image));
            self.line(&text)?;
        }
        Ok(())
    }

    pub(super) fn tool_result(&mut self, r: &pb::ToolResultBlock) -> io::Result<()> {
        let summary = self
            .tool_uses
            .get(&r.tool_use_id)
            .cloned()
            .unwrap_or_else(|| format!("tool call {}", r.tool_use_id));
        self.last_result = Some((summary.clone(), r.clone()));
        if self.ended.contains(&r.tool_use_id) || self.quiet_end(&r.tool_use_id, r.is_error) {
            return Ok(());
        }
        if !self.begun.contains(&r.tool_use_id) {
            self.tool_begin(&r.tool_use_id, &summary)?;
        }
        if self.full_output {
            if !r.is_error {
                let text = self.paint(GREEN, "  ⎿ ok");
                self.line(&text)?;
            }
            self.whole_output(r)?;
            self.ended.insert(r.tool_use_id.clone());
            return Ok(());
        }
        let text = if r.is_error {
            format!(
                "  ⎿ {} {}",
                self.paint(RED, "error:"),
                abbreviate(&r.content)
            )
        } else {
            format!("  ⎿ {}", abbreviate(&r.content))
        };
        self.line(&text)?;
        self.result_images(r)?;
        self.ended.insert(r.tool_use_id.clone());
        Ok(())
    }
}

/// Whether a tool's summary already ends with how long it took
/// ("exit code 0 in 2.8 s"), so the time is not printed twice.
pub(super) fn states_a_duration(summary: &str) -> bool {
    let mut words = summary.split_whitespace().rev();
    matches!(
        (words.next(), words.next(), words.next()),
        (Some("s" | "ms"), Some(number), Some("in")) if number.parse::<f64>().is_ok()
    )
}

/// A one-line summary of a tool call from its name and JSON input:
/// `bash: cargo test`, `edit: src/main.rs`.
pub fn tool_use_summary(name: &str, input_json: &str) -> String {
    const KEYS: [&str; 9] = [
        "command",
        "file_path",
        "path",
        "pattern",
        "query",
        "shell_id",
        "reason",
        "thought",
        "url",
    ];
    let value: serde_json::Value =
        serde_json::from_str(input_json).unwrap_or(serde_json::Value::Null);
    if name == super::todo::UPDATE_PLAN
        && let Some(steps) = value["steps"].as_array()
    {
        return format!("{name}: {}", update_plan_summary(steps));
    }
    if let Some(obj) = value.as_object() {
        for key in KEYS {
            if let Some(s) = obj.get(key).and_then(|v| v.as_str()) {
                return format!("{name}: {}", one_line(s, 100));
            }
        }
        if obj.is_empty() {
            return name.to_string();
        }
        return format!("{name}: {}", one_line(&value.to_string(), 100));
    }
    if input_json.trim().is_empty() {
        name.to_string()
    } else {
        format!("{name}: {}", one_line(input_json, 100))
    }
}

/// What an `update_plan` call says: a todo list's size and progress, or
/// a plan's steps and their new statuses.
fn update_plan_summary(steps: &[serde_json::Value]) -> String {
    if steps.iter().any(|s| s.get("title").is_some()) {
        let done = steps.iter().filter(|s| s["status"] == "completed").count();
        return format!("todo list, {} items, {done} done", steps.len());
    }
    let changes: Vec<String> = steps
        .iter()
        .map(|s| {
            let id = match &s["id"] {
                serde_json::Value::String(id) => id.clone(),
                other => other.to_string(),
            };
            format!(
                "{} {}",
                one_line(&id, 10),
                one_line(s["status"].as_str().unwrap_or("?"), 12)
            )
        })
        .collect();
    changes.join(", ")
}

/// A tool result in one line: its first line, and how many more there are.
pub fn abbreviate(content: &str) -> String {
    let lines = content.lines().filter(|l| !l.trim().is_empty()).count();
    let first = one_line(content, 100);
    match lines {
        0 => "(no output)".to_string(),
        1 => first,
        n => format!("{first} … (+{} lines)", n - 1),
    }
}
