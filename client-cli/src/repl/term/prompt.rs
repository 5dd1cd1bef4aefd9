//! What the editor shows and accepts: the one-line prompt (spinner or
//! question on the left, status on the right) and lines continued with a
//! trailing `\`.

use reedline::{
    DefaultValidator, Prompt, PromptEditMode, PromptHistorySearch, ValidationResult, Validator,
};

/// A line ending in `\` continues on the next one (Alt-Enter does too).
pub(super) struct ContinuationValidator;

impl Validator for ContinuationValidator {
    fn validate(&self, line: &str) -> ValidationResult {
        if line.ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            DefaultValidator.validate(line)
        }
    }
}

/// The text of an accepted input: a `\` that continued a line is dropped.
pub fn accepted_text(buffer: &str) -> String {
    buffer.replace("\\\n", "\n")
}

/// The prompt: one line (reedline prints output above a one-line prompt
/// cleanly), the spinner or question before the input, the status at the
/// right end.
pub(super) struct UiPrompt {
    pub(super) left: String,
    pub(super) right: String,
}

impl Prompt for UiPrompt {
    fn render_prompt_left(&self) -> std::borrow::Cow<'_, str> {
        self.left.as_str().into()
    }

    fn render_prompt_right(&self) -> std::borrow::Cow<'_, str> {
        self.right.as_str().into()
    }

    fn render_prompt_indicator(&self, _mode: PromptEditMode) -> std::borrow::Cow<'_, str> {
        "› ".into()
    }

    fn render_prompt_multiline_indicator(&self) -> std::borrow::Cow<'_, str> {
        "  ".into()
    }

    fn render_prompt_history_search_indicator(
        &self,
        search: PromptHistorySearch,
    ) -> std::borrow::Cow<'_, str> {
        format!("(history: {}) ", search.term).into()
    }

    fn get_prompt_color(&self) -> reedline::Color {
        reedline::Color::Yellow
    }

    fn get_prompt_right_color(&self) -> reedline::Color {
        reedline::Color::DarkGray
    }

    fn get_indicator_color(&self) -> reedline::Color {
        reedline::Color::Cyan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backslash_continues_the_line() {
        assert!(matches!(
            ContinuationValidator.validate("first \\"),
            ValidationResult::Incomplete
        ));
        assert!(matches!(
            ContinuationValidator.validate("done"),
            ValidationResult::Complete
        ));
        assert_eq!(accepted_text("one \\\ntwo"), "one \ntwo");
    }
}
