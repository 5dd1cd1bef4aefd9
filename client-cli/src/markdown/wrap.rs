//! Inline content to lines: pieces cut into words, words filled into lines
//! no wider than the room left, never broken inside a word.

use unicode_width::UnicodeWidthChar;

use super::{Look, Piece, Style, paint};

/// Inline content on one line (table cells): painted text and its width.
pub(super) fn one_line(pieces: &[Piece], style: Style) -> (String, usize) {
    let mut line = Line::default();
    for word in words(pieces) {
        line.push(word);
    }
    (line.paint(style), line.width)
}

/// A word: the runs of text between two spaces, each with its look.
#[derive(Debug, Default)]
struct Word {
    runs: Vec<(String, Look)>,
    width: usize,
    /// A hard break comes before it.
    break_before: bool,
    /// The look of the space before it (underlined inside a link).
    space: Look,
}

impl Word {
    fn push(&mut self, c: char, look: Look) {
        self.width += UnicodeWidthChar::width(c).unwrap_or(0);
        push_run(&mut self.runs, c.encode_utf8(&mut [0; 4]), look);
    }
}

fn push_run(runs: &mut Vec<(String, Look)>, text: &str, look: Look) {
    match runs.last_mut() {
        Some((run, l)) if *l == look => run.push_str(text),
        _ => runs.push((text.to_string(), look)),
    }
}

/// One output line being filled with words.
#[derive(Debug, Default)]
struct Line {
    runs: Vec<(String, Look)>,
    width: usize,
}

impl Line {
    fn push(&mut self, word: Word) {
        if !self.runs.is_empty() {
            push_run(&mut self.runs, " ", word.space);
            self.width += 1;
        }
        self.width += word.width;
        for (text, look) in word.runs {
            push_run(&mut self.runs, &text, look);
        }
    }

    fn paint(&self, style: Style) -> String {
        self.runs
            .iter()
            .map(|(text, look)| paint(style, *look, text))
            .collect()
    }
}

fn words(pieces: &[Piece]) -> Vec<Word> {
    let mut words = Vec::new();
    let mut word = Word::default();
    for piece in pieces {
        match piece {
            Piece::Break => {
                if !word.runs.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                word.break_before = true;
            }
            Piece::Text(text, look) => {
                for c in text.chars() {
                    if c.is_whitespace() {
                        if !word.runs.is_empty() {
                            words.push(std::mem::take(&mut word));
                        }
                        word.space = *look;
                    } else {
                        word.push(c, *look);
                    }
                }
            }
        }
    }
    if !word.runs.is_empty() {
        words.push(word);
    }
    words
}

/// Inline content wrapped at `width` columns, never inside a word.
pub(super) fn wrap(pieces: &[Piece], width: usize, style: Style) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = Line::default();
    let mut started = false;
    for word in words(pieces) {
        if started && (word.break_before || line.width + 1 + word.width > width) {
            lines.push(std::mem::take(&mut line).paint(style));
        }
        line.push(word);
        started = true;
    }
    if started {
        lines.push(line.paint(style));
    }
    lines
}
