//! The keys of the session's editor: the editing set (Tab completion,
//! Ctrl-O, Shift-Tab) and, while a permission request waits, the one-key
//! answers with what the prompt shows of them.

use std::sync::{Arc, Mutex, MutexGuard};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use reedline::{Emacs, Keybindings, PromptEditMode, ReedlineEvent};

use super::{BACKGROUND, COMPLETION_MENU, EXPAND_OUTPUT, NEXT_MODE};
use crate::cli::Decision;

/// The edit mode while a question waits: its keys answer it, and the keys
/// read after the answer in the same batch (which the editor drops once a
/// key has ended the read) are kept for the next line.
pub(super) struct AnswerMode {
    pub(super) keys: Emacs,
    pub(super) answered: bool,
    pub(super) after: Arc<Mutex<Vec<KeyEvent>>>,
}

impl reedline::EditMode for AnswerMode {
    fn parse_event(&mut self, event: reedline::ReedlineRawEvent) -> ReedlineEvent {
        let raw = crossterm::event::Event::from(event);
        if self.answered {
            if let crossterm::event::Event::Key(key) = raw
                && key.kind != crossterm::event::KeyEventKind::Release
            {
                lock_keys(&self.after).push(key);
            }
            return ReedlineEvent::None;
        }
        let Ok(event) = reedline::ReedlineRawEvent::try_from(raw) else {
            return ReedlineEvent::None;
        };
        let parsed = self.keys.parse_event(event);
        if matches!(parsed, ReedlineEvent::ExecuteHostCommand(_)) {
            self.answered = true;
        }
        parsed
    }

    fn edit_mode(&self) -> PromptEditMode {
        self.keys.edit_mode()
    }
}

/// The kept keys; a poisoned lock still holds them.
pub(super) fn lock_keys(keys: &Mutex<Vec<KeyEvent>>) -> MutexGuard<'_, Vec<KeyEvent>> {
    keys.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Editing keys: reedline's Emacs set, with Ctrl-O showing the last tool
/// result whole and Shift-Tab switching to the next permission mode (as
/// people know them from other agents).
pub(super) fn editing_keybindings() -> Keybindings {
    let mut keys = reedline::default_emacs_keybindings();
    keys.add_binding(
        KeyModifiers::NONE,
        KeyCode::Tab,
        ReedlineEvent::UntilFound(vec![
            ReedlineEvent::Menu(COMPLETION_MENU.to_string()),
            ReedlineEvent::MenuNext,
        ]),
    );
    keys.add_binding(
        KeyModifiers::CONTROL,
        KeyCode::Char('o'),
        ReedlineEvent::ExecuteHostCommand(EXPAND_OUTPUT.to_string()),
    );
    keys.add_binding(
        KeyModifiers::CONTROL,
        KeyCode::Char('b'),
        ReedlineEvent::ExecuteHostCommand(BACKGROUND.to_string()),
    );
    for modifiers in [KeyModifiers::SHIFT, KeyModifiers::NONE] {
        keys.add_binding(
            modifiers,
            KeyCode::BackTab,
            ReedlineEvent::ExecuteHostCommand(NEXT_MODE.to_string()),
        );
    }
    keys
}

/// The keys that answer a permission request, each returning the answer
/// as the word the session understands (`y`, `a`, `p`, `n`, ...).
pub(super) fn answer_keybindings(offered: &[Decision]) -> Keybindings {
    let mut keys = Keybindings::new();
    let mut bind = |code: KeyCode, answer: &str| {
        let event = ReedlineEvent::ExecuteHostCommand(answer.to_string());
        keys.add_binding(KeyModifiers::NONE, code, event.clone());
        if let KeyCode::Char(c) = code {
            keys.add_binding(
                KeyModifiers::SHIFT,
                KeyCode::Char(c.to_ascii_uppercase()),
                event,
            );
        }
    };
    for decision in offered {
        bind(KeyCode::Char(decision.key()), &decision.key().to_string());
        if *decision == Decision::AllowAlways {
            bind(KeyCode::Char('p'), "p");
        }
    }
    if offered.contains(&Decision::AllowOnce) {
        bind(KeyCode::Enter, "y");
    }
    if offered.contains(&Decision::Deny) {
        bind(KeyCode::Esc, "n");
    }
    keys.add_binding(
        KeyModifiers::CONTROL,
        KeyCode::Char('c'),
        ReedlineEvent::CtrlC,
    );
    keys
}

/// Before the input while a question waits: its keys.
pub(super) fn question_left(offered: &[Decision]) -> String {
    let keys: String = offered
        .iter()
        .map(|d| {
            d.key().to_string()
                + if *d == Decision::AllowAlways {
                    "/p"
                } else {
                    ""
                }
        })
        .collect::<Vec<_>>()
        .join("/");
    format!("⚠ allow? {keys} ")
}

/// At the right end while a question waits.
pub(super) fn question_right() -> String {
    "one key · Enter = [y] · Esc = deny".to_string()
}

/// The keys of a permission prompt, wrapped between options (never inside
/// one) to `width` columns.
pub fn key_lines(offered: &[Decision], width: usize, color: bool) -> Vec<String> {
    let mut options: Vec<(String, usize)> = Vec::new();
    let mut push = |key: &str, label: &str, default: bool| {
        let plain = format!("[{key}] {label}");
        let shown = match (color, default) {
            (true, true) => format!("\x1b[1;7m[{key}]\x1b[0m \x1b[1m{label}\x1b[0m"),
            (true, false) => format!("\x1b[1m[{key}]\x1b[0m {label}"),
            (false, true) => format!("[{key}]* {label}"),
            (false, false) => plain.clone(),
        };
        let columns = plain.chars().count() + usize::from(default && !color);
        options.push((shown, columns));
    };
    for decision in offered {
        match decision {
            Decision::AllowOnce => push("y", "allow once", true),
            Decision::AllowAlways => {
                push("a", "always, this conversation", false);
                push("p", "always, this project", false);
            }
            Decision::DenyAndStop => push("s", "deny and stop, then say what to do", false),
            d => push(&d.key().to_string(), d.label(), false),
        }
    }
    push("Esc", "deny", false);
    crate::render::wrap_options(options, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Decision; 6] = Decision::ALL;

    #[test]
    fn keys_wrap_between_options_at_any_width() {
        for width in [20, 40, 80, 160] {
            let lines = key_lines(&ALL, width, false);
            let text = lines.join(" ");
            for label in [
                "[y]* allow once",
                "[a] always, this conversation",
                "[p] always, this project",
                "[n] deny",
                "[s] deny and stop, then say what to do",
                "[v] never",
                "[b] background",
                "[Esc] deny",
            ] {
                assert!(text.contains(label), "{label} whole at {width}: {lines:?}");
            }
            for line in &lines {
                let options = line.matches('[').count();
                assert!(
                    line.chars().count() <= width || options == 1,
                    "{width}: {line:?}"
                );
            }
        }
        assert_eq!(key_lines(&ALL, 400, false).len(), 1);
        assert!(key_lines(&ALL, 80, false).len() >= 2);
    }

    #[test]
    fn the_question_prompt_names_the_keys() {
        let offered = [Decision::AllowOnce, Decision::AllowAlways, Decision::Deny];
        assert_eq!(question_left(&offered), "⚠ allow? y/a/p/n ");
        assert_eq!(question_left(&[Decision::AllowOnce]), "⚠ allow? y ");
    }
}
