//! Cutting a streamed reply into top-level blocks: where each starts, what
//! kind it is, and whether the last one can still change. Kept apart from
//! the rendering, which only ever sees one complete block's source.

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag};

use super::block::render_block;
use super::highlight;
use super::{Style, options};

/// A reply being streamed: takes its text in deltas, gives back the terminal
/// text of each block as soon as the block is complete.
#[derive(Debug)]
pub struct MarkdownStream {
    style: Style,
    /// Source not shown yet: the block in progress (and what follows it).
    pending: String,
    /// A block was shown (the next one is preceded by a blank line).
    shown: bool,
}

impl MarkdownStream {
    /// An empty stream.
    pub fn new(style: Style) -> MarkdownStream {
        MarkdownStream {
            style,
            pending: String::new(),
            shown: false,
        }
    }

    /// Adds `delta` to the source; returns the terminal text (whole lines)
    /// of the blocks it completed, often nothing.
    pub fn push(&mut self, delta: &str) -> String {
        self.pending.push_str(delta);
        // A block can only be completed by the end of a line.
        if delta.contains('\n') {
            self.drain(false)
        } else {
            String::new()
        }
    }

    /// The end of the text: returns the terminal text of whatever was held
    /// back. The stream is empty again afterwards (and may be reused).
    pub fn finish(&mut self) -> String {
        let out = self.drain(true);
        self.shown = false;
        out
    }

    /// Whether source text is held back, waiting for its block to complete.
    pub fn has_pending(&self) -> bool {
        !self.pending.trim().is_empty()
    }

    fn drain(&mut self, all: bool) -> String {
        // Only whole lines: the end of a line being typed can change what an
        // earlier line is (three backticks open a fence unless a backtick
        // follows on the same line).
        let upto = if all {
            self.pending.len()
        } else {
            self.pending.rfind('\n').map_or(0, |i| i + 1)
        };
        let text = &self.pending[..upto];
        let blocks = top_level_blocks(text);
        let mut complete = if all {
            blocks.len()
        } else {
            blocks.len().saturating_sub(1)
        };
        if let Some(last) = blocks.last()
            && !all
            && last.is_complete(&text[last.start..])
        {
            complete = blocks.len();
        }
        // A fenced block has begun: the highlighter starts now, so that its
        // loading overlaps the rest of the block.
        if self.style.color && blocks.get(complete).is_some_and(|b| b.kind == Kind::Fenced) {
            highlight::warm_up();
        }
        let cut = match blocks.get(complete) {
            Some(next) => next.start,
            None if complete > 0 || all => upto,
            None => 0,
        };
        let mut out = String::new();
        for block in blocks.iter().take(complete) {
            // Each block is rendered from its own source alone, the same
            // whatever came before or after it (link definitions outside a
            // block do not reach into it).
            let source = text
                .get(block.start..block.end.min(cut))
                .unwrap_or_default();
            let text = render_block(source, self.style);
            if text.is_empty() {
                continue;
            }
            if self.shown {
                out.push('\n');
            }
            out.push_str(&text);
            self.shown = true;
        }
        self.pending.drain(..cut);
        out
    }
}

/// The kind of a top-level block, as far as completion goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Paragraph,
    Heading,
    Rule,
    Fenced,
    Table,
    /// Lists, quotes, HTML, indented code: complete only when the next
    /// block starts.
    Other,
}

#[derive(Debug, Clone, Copy)]
struct Block {
    /// Byte offset of the start of the block's first line.
    start: usize,
    /// Byte offset of its end.
    end: usize,
    kind: Kind,
}

impl Block {
    /// Whether the block, being the last one so far, can no longer change
    /// whatever comes next. `source` runs from its start to the end.
    fn is_complete(&self, source: &str) -> bool {
        match self.kind {
            Kind::Paragraph | Kind::Table => ends_with_blank_line(source),
            Kind::Heading | Kind::Rule => source.ends_with('\n'),
            Kind::Fenced => fence_closed(source),
            Kind::Other => false,
        }
    }
}

/// Where each top-level block of `text` starts, and its kind.
fn top_level_blocks(text: &str) -> Vec<Block> {
    let mut blocks: Vec<Block> = Vec::new();
    let mut depth = 0usize;
    for (event, range) in Parser::new_ext(text, options()).into_offset_iter() {
        let kind = match &event {
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                continue;
            }
            Event::Start(tag) => {
                depth += 1;
                if depth > 1 {
                    continue;
                }
                match tag {
                    Tag::Paragraph => Kind::Paragraph,
                    Tag::Heading { .. } => Kind::Heading,
                    Tag::CodeBlock(CodeBlockKind::Fenced(_)) => Kind::Fenced,
                    Tag::Table(_) => Kind::Table,
                    _ => Kind::Other,
                }
            }
            Event::Rule if depth == 0 => Kind::Rule,
            _ if depth == 0 => Kind::Other,
            _ => continue,
        };
        let start = line_start(text, range.start);
        if blocks.last().is_none_or(|b| b.start < start) {
            blocks.push(Block {
                start,
                end: range.end.max(start),
                kind,
            });
        }
    }
    blocks
}

/// The start of the line holding `pos`, when only blanks precede `pos` on it.
fn line_start(text: &str, pos: usize) -> usize {
    let pos = pos.min(text.len());
    let Some(before) = text.get(..pos) else {
        return pos;
    };
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    if before[start..].trim().is_empty() {
        start
    } else {
        pos
    }
}

/// The text ends with a line holding only blanks (a paragraph is over).
fn ends_with_blank_line(source: &str) -> bool {
    let Some(body) = source.strip_suffix('\n') else {
        return false;
    };
    match body.rfind('\n') {
        Some(i) => body[i + 1..].trim().is_empty(),
        None => false,
    }
}

/// A fenced code block whose closing fence has been seen (and its line ended).
fn fence_closed(source: &str) -> bool {
    if !source.ends_with('\n') {
        return false;
    }
    let mut lines = source.split_inclusive('\n');
    let Some(open) = lines.next().map(str::trim_start) else {
        return false;
    };
    let Some(fence) = open.chars().next().filter(|c| matches!(c, '`' | '~')) else {
        return false;
    };
    let n = open.chars().take_while(|&c| c == fence).count();
    lines.any(|line| {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let t = line.trim();
        indent <= 3 && t.chars().count() >= n && t.chars().all(|c| c == fence)
    })
}
