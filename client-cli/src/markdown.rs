//! Markdown for the terminal: the assistant's replies, streamed.
//!
//! A reply arrives in small deltas and the terminal is append-only (nothing
//! is ever moved back up to be redrawn), so [`MarkdownStream`] shows a block
//! only once it is complete: a paragraph at the blank line after it, a fenced
//! code block at its closing fence, a heading at the end of its line, a list
//! or a quote when the next block starts. [`MarkdownStream::finish`] shows the
//! rest. Each block is parsed and rendered on its own, from the same slice of
//! source whatever the deltas were, so how the text was cut into deltas never
//! changes what is printed.
//!
//! Without colour the output is plain text with no escape sequence at all:
//! markers that carry meaning stay (`#` of headings, `**`, backticks, code
//! fences), the others go. With colour, styles replace the markers and fenced
//! code is highlighted by the co-process `agent-highlight` when it is
//! installed (started once, when the first fenced block begins to stream
//! in); without it, code is shown plain.
//!
//! Nothing here fails: any input, however broken, renders to some text.
//!
//! The parts: [`MarkdownStream`] in `stream` (cutting the source into
//! top-level blocks and deciding when each is complete), `block` (one block's
//! pulldown-cmark events to terminal lines, tables in `block::table`), `wrap`
//! (words to lines at a width) and `highlight` (the client of
//! `agent-highlight`, for fenced code).
//! The vocabulary they share lives here: [`Style`], `Look` and `Piece`.

use pulldown_cmark::Options;
use unicode_width::UnicodeWidthStr;

mod block;
mod highlight;
mod stream;
mod wrap;

#[cfg(test)]
mod tests;

pub(crate) use highlight::{find_highlighter, probe_highlighter};
pub use stream::MarkdownStream;

/// How replies are shown: with or without colour, and how wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// ANSI styles and colours (never any escape sequence without it).
    pub color: bool,
    /// The terminal takes 24-bit colours (`COLORTERM=truecolor`); otherwise
    /// highlighted code uses the 256-colour palette.
    pub truecolor: bool,
    /// Columns to wrap prose at; 0 for no wrapping.
    pub width: usize,
}

impl Style {
    /// Plain text wrapped at `width` columns.
    pub fn plain(width: usize) -> Style {
        Style {
            color: false,
            truecolor: false,
            width,
        }
    }

    /// Colour (256-colour code highlighting) wrapped at `width` columns.
    pub fn colored(width: usize) -> Style {
        Style {
            color: true,
            truecolor: false,
            width,
        }
    }
}

/// Renders a whole document at once.
pub fn render(markdown: &str, style: Style) -> String {
    let mut stream = MarkdownStream::new(style);
    let mut out = stream.push(markdown);
    out.push_str(&stream.finish());
    out
}

fn options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS
}

/// How a run of inline text looks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Look {
    bold: bool,
    dim: bool,
    italic: bool,
    underline: bool,
    strike: bool,
    /// An SGR foreground colour parameter ("36", "38;5;110").
    fg: Option<&'static str>,
}

const HEADING: &str = "35";
const CODE: &str = "36";
const LINK: &str = "34";
const MARKER: &str = "33";

impl Look {
    fn is_plain(&self) -> bool {
        *self == Look::default()
    }
}

/// Text painted with `look` (or left alone without colour).
fn paint(style: Style, look: Look, text: &str) -> String {
    if !style.color || look.is_plain() || text.is_empty() {
        return text.to_string();
    }
    let mut codes: Vec<&str> = Vec::new();
    if look.bold {
        codes.push("1");
    }
    if look.dim {
        codes.push("2");
    }
    if look.italic {
        codes.push("3");
    }
    if look.underline {
        codes.push("4");
    }
    if look.strike {
        codes.push("9");
    }
    if let Some(fg) = look.fg {
        codes.push(fg);
    }
    format!("\x1b[{}m{text}\x1b[0m", codes.join(";"))
}

fn dim() -> Look {
    Look {
        dim: true,
        ..Look::default()
    }
}

/// Inline content: text with its look, or a hard line break.
#[derive(Debug, Clone)]
enum Piece {
    Text(String, Look),
    Break,
}

/// Plain text wrapped at `width` columns, never inside a word (a word
/// longer than the line stays whole).
pub(crate) fn wrap_text(text: &str, width: usize) -> Vec<String> {
    wrap::wrap(
        &[Piece::Text(text.to_string(), Look::default())],
        width,
        Style::plain(width),
    )
}

/// Text made safe for a terminal (model replies, command output): control
/// characters (an escape could move the cursor or change the title) become
/// `�`, tabs `tab`.
pub(crate) fn clean(text: &str, tab: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' => out.push_str(tab),
            '\n' => out.push('\n'),
            '\r' => {}
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn display_width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}
