//! The model's todo list as a panel: a `☐`/`◐`/`☒` line per item, wrapped
//! at word boundaries with a hanging indent to the screen's width.
//!
//! Written straight to a terminal, the panel is drawn again in place at
//! each update when it is still the last thing on the screen (the cursor
//! goes back up over it), and drawn anew below otherwise. Piped, and in the
//! interactive session (whose output goes through the line editor's
//! printer, and whose spinner line shows the item in progress as it
//! changes, `repl/status.rs`), it is printed once, as the list stands when
//! the turn ends (or the output does).

use std::collections::HashSet;
use std::io::{self, Write};

use agent_proto::v1 as pb;

use super::{BOLD, DIM, Renderer};
use crate::markdown::wrap_text;

/// How updates of the list are shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum PanelMode {
    /// Printed once, as it stands at the end of the turn.
    #[default]
    Final,
    /// Redrawn in place on a terminal.
    InPlace,
}

/// The list and what of it is on the screen.
#[derive(Debug, Default)]
pub(super) struct TodoPanel {
    pub(super) mode: PanelMode,
    /// The latest list (a plan in phase `todo`).
    list: Option<pb::Plan>,
    /// The latest list is shown.
    shown: bool,
    /// The panel on the screen: the output's length in bytes right after
    /// it, and its lines (redrawn in place while nothing followed it).
    drawn: Option<(u64, usize)>,
    /// `update_plan` calls seen live: the panel (or the plan's step lines)
    /// shows what they did, so they get no `⏺` line unless they fail.
    pub(super) quiet: HashSet<String>,
}

/// The tool whose calls the panel and the plan's step lines stand for.
pub(super) const UPDATE_PLAN: &str = "update_plan";

/// A writer that counts the bytes written through it, so the panel knows
/// whether anything was printed after it.
#[derive(Debug)]
pub(super) struct Counted<W> {
    pub(super) inner: W,
    pub(super) written: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written = self.written.saturating_add(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The panel's lines at `width` columns, unpainted: a heading with the
/// count done, then each item with its mark, continuation lines indented
/// under its text.
pub fn todo_panel_lines(list: &pb::Plan, width: usize) -> Vec<(String, &'static str)> {
    let done = list
        .steps
        .iter()
        .filter(|s| s.status == "completed")
        .count();
    let mut lines = vec![(
        format!("Todo list · {done}/{} done", list.steps.len()),
        BOLD,
    )];
    if list.steps.is_empty() {
        lines[0].0 = "Todo list cleared".to_string();
    }
    let room = width.saturating_sub(4).max(20);
    for step in &list.steps {
        let (mark, look) = match step.status.as_str() {
            "completed" => ("☒", DIM),
            "in_progress" => ("◐", BOLD),
            _ => ("☐", ""),
        };
        let title = crate::markdown::clean(&step.title, " ");
        for (i, text) in wrap_text(&title, room).into_iter().enumerate() {
            let lead = if i == 0 {
                format!("  {mark} ")
            } else {
                "    ".to_string()
            };
            lines.push((format!("{lead}{text}"), look));
        }
    }
    lines
}

/// The list in a few words for a status line: the item in progress (or
/// the next one) and how many are done; empty when there is no list.
pub fn todo_status(list: &pb::Plan) -> String {
    let done = list
        .steps
        .iter()
        .filter(|s| s.status == "completed")
        .count();
    let current = list
        .steps
        .iter()
        .find(|s| s.status == "in_progress")
        .map(|s| format!("◐ {}", s.title))
        .or_else(|| {
            list.steps
                .iter()
                .find(|s| s.status == "pending")
                .map(|s| format!("☐ {}", s.title))
        });
    match current {
        Some(item) => format!("{item} ({done}/{})", list.steps.len()),
        None if list.steps.is_empty() => String::new(),
        None => format!("☒ all {} done", list.steps.len()),
    }
}

impl<W: Write> Renderer<W> {
    /// The list was replaced (or a snapshot carries it).
    pub(super) fn todo_updated(&mut self, list: &pb::Plan) -> io::Result<()> {
        self.todo.list = Some(list.clone());
        self.todo.shown = false;
        match self.todo.mode {
            PanelMode::Final => Ok(()),
            PanelMode::InPlace => self.draw_todo(),
        }
    }

    /// Whether the end of call `id` is shown by the panel: a live
    /// `update_plan` call that succeeded (it is then ended here).
    pub(super) fn quiet_end(&mut self, id: &str, is_error: bool) -> bool {
        if is_error || !self.todo.quiet.contains(id) {
            return false;
        }
        self.ended.insert(id.to_string());
        true
    }

    /// The list a snapshot carries: shown unless it is the one shown.
    pub(super) fn todo_snapshot(&mut self, list: &pb::Plan) -> io::Result<()> {
        if self.todo.list.as_ref() == Some(list) {
            return Ok(());
        }
        self.todo_updated(list)
    }

    /// Prints the list as it stands if it is not shown yet (the end of a
    /// turn, or of the output).
    pub fn todo_final(&mut self) -> io::Result<()> {
        if self.todo.shown || self.todo.list.is_none() {
            return Ok(());
        }
        self.draw_todo()
    }

    fn draw_todo(&mut self) -> io::Result<()> {
        let Some(list) = self.todo.list.clone() else {
            return Ok(());
        };
        self.end_line()?;
        if let Some((end, lines)) = self.todo.drawn
            && end == self.out.written
            && lines > 0
        {
            // Nothing was printed after it: up over it, and clear.
            write!(self.out, "\x1b[{lines}A\r\x1b[J")?;
        }
        let lines = todo_panel_lines(&list, self.markdown.width);
        for (text, look) in &lines {
            let text = if look.is_empty() {
                text.clone()
            } else {
                self.paint(look, text)
            };
            writeln!(self.out, "{text}")?;
        }
        self.todo.shown = true;
        self.todo.drawn = Some((self.out.written, lines.len()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(title: &str, status: &str) -> pb::PlanStep {
        pb::PlanStep {
            title: title.to_string(),
            status: status.to_string(),
            ..pb::PlanStep::default()
        }
    }

    fn list(items: &[(&str, &str)]) -> pb::Plan {
        pb::Plan {
            phase: "todo".to_string(),
            steps: items.iter().map(|(t, s)| item(t, s)).collect(),
            ..pb::Plan::default()
        }
    }

    fn text(lines: &[(String, &'static str)]) -> String {
        lines.iter().map(|(t, _)| format!("{t}\n")).collect()
    }

    #[test]
    fn items_wrap_at_words_with_a_hanging_indent() {
        let l = list(&[
            ("Read the parser", "completed"),
            (
                "Fix the off-by-one in the tokenizer that drops the last character of every quoted string",
                "in_progress",
            ),
            ("Run the tests", "pending"),
        ]);
        let lines = todo_panel_lines(&l, 40);
        assert_eq!(
            text(&lines),
            "Todo list · 1/3 done\n  ☒ Read the parser\n  ◐ Fix the off-by-one in the tokenizer\n    that drops the last character of\n    every quoted string\n  ☐ Run the tests\n"
        );
        assert!(lines.iter().all(|(t, _)| t.chars().count() <= 40));
    }

    #[test]
    fn the_status_names_the_item_in_progress() {
        let l = list(&[("a", "completed"), ("b", "in_progress"), ("c", "pending")]);
        assert_eq!(todo_status(&l), "◐ b (1/3)");
        assert_eq!(
            todo_status(&list(&[("a", "completed"), ("c", "pending")])),
            "☐ c (1/2)"
        );
        assert_eq!(todo_status(&list(&[("a", "completed")])), "☒ all 1 done");
        assert_eq!(todo_status(&list(&[])), "");
    }

    #[test]
    fn in_place_redraws_only_while_nothing_followed() {
        let mut r = Renderer::new(Vec::new(), false);
        r.todo.mode = PanelMode::InPlace;
        r.todo_updated(&list(&[("a", "in_progress")])).unwrap();
        r.todo_updated(&list(&[("a", "completed")])).unwrap();
        r.info("something else").unwrap();
        r.todo_updated(&list(&[("a", "completed"), ("b", "pending")]))
            .unwrap();
        let out = String::from_utf8(r.into_inner()).unwrap();
        assert_eq!(
            out,
            "Todo list · 0/1 done\n  ◐ a\n\x1b[2A\r\x1b[JTodo list · 1/1 done\n  ☒ a\nsomething else\nTodo list · 1/2 done\n  ☒ a\n  ☐ b\n"
        );
    }

    #[test]
    fn agent_show_prints_the_panel() {
        let mut r = Renderer::new(Vec::new(), false);
        r.transcript(&pb::GetConversationResponse {
            plan: Some(list(&[("a", "completed"), ("b", "in_progress")])),
            ..Default::default()
        })
        .unwrap();
        let out = String::from_utf8(r.into_inner()).unwrap();
        assert!(
            out.ends_with("\nTodo list · 1/2 done\n  ☒ a\n  ◐ b\n"),
            "{out:?}"
        );
    }

    #[test]
    fn piped_the_list_is_printed_once_as_it_ends() {
        let mut r = Renderer::new(Vec::new(), false);
        r.todo_updated(&list(&[("a", "in_progress")])).unwrap();
        r.todo_updated(&list(&[("a", "completed")])).unwrap();
        r.todo_final().unwrap();
        r.todo_final().unwrap();
        let out = String::from_utf8(r.into_inner()).unwrap();
        assert_eq!(out, "Todo list · 1/1 done\n  ☒ a\n");
    }
}
