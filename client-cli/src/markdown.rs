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
//! code is highlighted by syntect (its syntax set is loaded once, on the
//! first highlighted block).
//!
//! Nothing here fails: any input, however broken, renders to some text.

use std::sync::LazyLock;

use pulldown_cmark::{Alignment, CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::{SyntaxReference, SyntaxSet};
use syntect::util::LinesWithEndings;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

#[cfg(test)]
mod tests;

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

fn options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS
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

// ---------------------------------------------------------------------------
// One block

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

#[derive(Debug)]
enum Container {
    Quote,
    Item {
        marker: String,
        width: usize,
        used: bool,
    },
}

#[derive(Debug)]
struct TableState {
    aligns: Vec<Alignment>,
    head: Vec<Vec<Piece>>,
    rows: Vec<Vec<Vec<Piece>>>,
    row: Vec<Vec<Piece>>,
}

#[derive(Debug)]
struct Link {
    url: String,
    /// Index in `inline` where the link's text starts.
    from: usize,
    image: bool,
}

/// Renders one block (parsed on its own) into terminal lines.
struct BlockRenderer {
    style: Style,
    out: String,
    containers: Vec<Container>,
    /// Open lists: the next number of an ordered one.
    lists: Vec<Option<u64>>,
    inline: Vec<Piece>,
    look: Look,
    /// Open emphasis-like spans, for the look of new text.
    bold: usize,
    italic: usize,
    strike: usize,
    links: Vec<Link>,
    heading: Option<usize>,
    /// Code (or raw HTML) block being collected: language and text.
    code: Option<(Option<String>, String)>,
    table: Option<TableState>,
    /// A blank line is due before the next line written.
    blank: bool,
}

fn render_block(source: &str, style: Style) -> String {
    let mut r = BlockRenderer {
        style,
        out: String::new(),
        containers: Vec::new(),
        lists: Vec::new(),
        inline: Vec::new(),
        look: Look::default(),
        bold: 0,
        italic: 0,
        strike: 0,
        links: Vec::new(),
        heading: None,
        code: None,
        table: None,
        blank: false,
    };
    for event in Parser::new_ext(source, options()) {
        r.event(event);
    }
    r.flush_inline();
    if let Some((lang, text)) = r.code.take() {
        r.code_block(lang.as_deref(), &text);
    }
    r.out
}

impl BlockRenderer {
    fn plain(&self) -> bool {
        !self.style.color
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => {
                if let Some((_, code)) = &mut self.code {
                    code.push_str(&text);
                } else {
                    self.text(&text);
                }
            }
            Event::Code(code) => {
                if self.plain() {
                    self.text(&format!("`{code}`"));
                } else {
                    let look = Look {
                        fg: Some(CODE),
                        ..self.look
                    };
                    self.inline.push(Piece::Text(clean(&code, " "), look));
                }
            }
            Event::Html(html) => {
                if let Some((_, code)) = &mut self.code {
                    code.push_str(&html);
                } else {
                    self.text(&html);
                }
            }
            Event::InlineHtml(html) | Event::InlineMath(html) | Event::DisplayMath(html) => {
                self.text(&html);
            }
            Event::FootnoteReference(name) => self.text(&format!("[^{name}]")),
            Event::SoftBreak => self.text(" "),
            Event::HardBreak => self.inline.push(Piece::Break),
            Event::Rule => {
                self.flush_inline();
                let width = self.available().min(80);
                let line = paint(self.style, dim(), &"─".repeat(width));
                self.emit(vec![line]);
                self.blank = true;
            }
            Event::TaskListMarker(done) => {
                self.text(if done { "[x] " } else { "[ ] " });
            }
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.flush_inline(),
            Tag::Heading { level, .. } => {
                self.flush_inline();
                let level = heading_level(level);
                self.heading = Some(level);
                if self.plain() {
                    self.text(&format!("{} ", "#".repeat(level)));
                }
                self.restyle();
            }
            Tag::BlockQuote(_) => {
                self.flush_inline();
                self.containers.push(Container::Quote);
            }
            Tag::CodeBlock(kind) => {
                self.flush_inline();
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => info
                        .split(|c: char| c.is_whitespace() || c == ',' || c == '{')
                        .find(|s| !s.is_empty())
                        .map(|s| clean(s, " ")),
                    CodeBlockKind::Indented => None,
                };
                self.code = Some((lang, String::new()));
            }
            Tag::HtmlBlock => {
                self.flush_inline();
                self.code = Some((Some(String::new()), String::new()));
            }
            Tag::List(first) => {
                self.flush_inline();
                self.lists.push(first);
            }
            Tag::Item => {
                self.flush_inline();
                let depth = self.lists.len().saturating_sub(1);
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let marker = format!("{n}.");
                        *n = n.saturating_add(1);
                        marker
                    }
                    _ => ["•", "◦", "▪"][depth % 3].to_string(),
                };
                let width = display_width(&marker) + 1;
                self.containers.push(Container::Item {
                    marker,
                    width,
                    used: false,
                });
            }
            Tag::Table(aligns) => {
                self.flush_inline();
                self.table = Some(TableState {
                    aligns,
                    head: Vec::new(),
                    rows: Vec::new(),
                    row: Vec::new(),
                });
            }
            Tag::TableHead | Tag::TableRow | Tag::TableCell => self.inline.clear(),
            Tag::Emphasis => {
                self.italic += 1;
                self.marker("*");
            }
            Tag::Strong => {
                self.bold += 1;
                self.marker("**");
            }
            Tag::Strikethrough => {
                self.strike += 1;
                self.marker("~~");
            }
            Tag::Link { dest_url, .. } => {
                self.links.push(Link {
                    url: clean(&dest_url, " "),
                    from: self.inline.len(),
                    image: false,
                });
                self.restyle();
            }
            Tag::Image { dest_url, .. } => {
                self.text("[image: ");
                self.links.push(Link {
                    url: clean(&dest_url, " "),
                    from: self.inline.len(),
                    image: true,
                });
            }
            Tag::FootnoteDefinition(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::Superscript
            | Tag::Subscript
            | Tag::MetadataBlock(_) => self.flush_inline(),
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => {
                self.flush_inline();
                self.blank = true;
            }
            TagEnd::Heading(_) => {
                self.flush_inline();
                self.heading = None;
                self.restyle();
                self.blank = true;
            }
            TagEnd::BlockQuote(_) => {
                self.flush_inline();
                self.containers.pop();
                self.blank = true;
            }
            TagEnd::CodeBlock | TagEnd::HtmlBlock => {
                if let Some((lang, text)) = self.code.take() {
                    self.code_block(lang.as_deref(), &text);
                }
                self.blank = true;
            }
            TagEnd::List(_) => {
                self.flush_inline();
                self.lists.pop();
                if self.lists.is_empty() {
                    self.blank = true;
                }
            }
            TagEnd::Item => {
                self.flush_inline();
                if let Some(Container::Item { used: false, .. }) = self.containers.last() {
                    // An empty item still shows its marker.
                    self.emit(vec![String::new()]);
                }
                self.containers.pop();
            }
            TagEnd::TableCell => {
                let cell = std::mem::take(&mut self.inline);
                if let Some(t) = &mut self.table {
                    t.row.push(cell);
                }
            }
            TagEnd::TableHead => {
                if let Some(t) = &mut self.table {
                    t.head = std::mem::take(&mut t.row);
                }
            }
            TagEnd::TableRow => {
                if let Some(t) = &mut self.table {
                    let row = std::mem::take(&mut t.row);
                    t.rows.push(row);
                }
            }
            TagEnd::Table => {
                if let Some(t) = self.table.take() {
                    self.table_block(t);
                }
                self.blank = true;
            }
            TagEnd::Emphasis => {
                self.marker("*");
                self.italic = self.italic.saturating_sub(1);
                self.restyle();
            }
            TagEnd::Strong => {
                self.marker("**");
                self.bold = self.bold.saturating_sub(1);
                self.restyle();
            }
            TagEnd::Strikethrough => {
                self.marker("~~");
                self.strike = self.strike.saturating_sub(1);
                self.restyle();
            }
            TagEnd::Link | TagEnd::Image => self.end_link(),
            TagEnd::FootnoteDefinition
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition
            | TagEnd::Superscript
            | TagEnd::Subscript
            | TagEnd::MetadataBlock(_) => self.flush_inline(),
        }
    }

    /// An emphasis marker: kept as text without colour, a style change with.
    fn marker(&mut self, marker: &str) {
        if self.plain() {
            self.text(marker);
        } else {
            self.restyle();
        }
    }

    /// Recomputes the look of new text from the open spans.
    fn restyle(&mut self) {
        let mut look = Look {
            bold: self.bold > 0,
            italic: self.italic > 0,
            strike: self.strike > 0,
            ..Look::default()
        };
        if self.links.iter().any(|l| !l.image) {
            look.underline = true;
            look.fg = Some(LINK);
        }
        if let Some(level) = self.heading {
            look.bold = true;
            look.fg = Some(HEADING);
            look.underline |= level == 1;
        }
        self.look = look;
    }

    fn text(&mut self, text: &str) {
        self.inline.push(Piece::Text(clean(text, " "), self.look));
    }

    fn end_link(&mut self) {
        let Some(link) = self.links.pop() else {
            return;
        };
        self.restyle();
        if link.image {
            self.text("]");
        }
        let shown: String = self
            .inline
            .get(link.from..)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| match p {
                Piece::Text(t, _) => Some(t.as_str()),
                Piece::Break => None,
            })
            .collect();
        let url = link.url;
        let redundant =
            url.is_empty() || shown == url || url.strip_prefix("mailto:") == Some(shown.as_str());
        if !redundant {
            let look = Look {
                dim: true,
                ..Look::default()
            };
            self.inline.push(Piece::Text(format!(" ({url})"), look));
        }
    }

    // -- Output

    /// Columns left for text inside the containers.
    fn available(&self) -> usize {
        if self.style.width == 0 {
            return usize::MAX / 2;
        }
        let used: usize = self
            .containers
            .iter()
            .map(|c| match c {
                Container::Quote => 2,
                Container::Item { width, .. } => *width,
            })
            .sum();
        self.style.width.saturating_sub(used).max(10)
    }

    /// Writes lines inside the open containers (quote gutters, list markers
    /// on the first line of an item, hanging indents after).
    fn emit(&mut self, lines: Vec<String>) {
        if self.blank && !self.out.is_empty() {
            let mut gutter = String::new();
            for c in &self.containers {
                match c {
                    Container::Quote => gutter.push_str(&paint(self.style, dim(), "│")),
                    Container::Item { width, .. } => gutter.push_str(&" ".repeat(*width)),
                }
                gutter.push(' ');
            }
            self.out.push_str(gutter.trim_end());
            self.out.push('\n');
        }
        self.blank = false;
        let marker_look = Look {
            fg: Some(MARKER),
            ..Look::default()
        };
        for line in lines {
            let mut prefix = String::new();
            for c in &mut self.containers {
                match c {
                    Container::Quote => {
                        prefix.push_str(&paint(self.style, dim(), "│"));
                        prefix.push(' ');
                    }
                    Container::Item {
                        marker,
                        width,
                        used,
                    } => {
                        if *used {
                            prefix.push_str(&" ".repeat(*width));
                        } else {
                            prefix.push_str(&paint(self.style, marker_look, marker));
                            prefix.push(' ');
                            *used = true;
                        }
                    }
                }
            }
            let full = format!("{prefix}{line}");
            self.out.push_str(full.trim_end_matches(' '));
            self.out.push('\n');
        }
    }

    /// Writes the inline text collected so far as a wrapped paragraph.
    fn flush_inline(&mut self) {
        if self.table.is_some() || self.inline.is_empty() {
            return;
        }
        let pieces = std::mem::take(&mut self.inline);
        let lines = wrap(&pieces, self.available(), self.style);
        if !lines.is_empty() {
            self.emit(lines);
        }
    }

    fn code_block(&mut self, lang: Option<&str>, text: &str) {
        let text = text.strip_suffix('\n').unwrap_or(text);
        // Raw HTML blocks are marked by an empty language: shown as they are.
        if lang == Some("") {
            let lines = text.lines().map(|l| clean(l, "    ")).collect();
            self.emit(lines);
            return;
        }
        let fence = paint(
            self.style,
            dim(),
            &format!("```{}", lang.unwrap_or_default()),
        );
        let mut lines = vec![fence];
        let highlighted = match lang {
            Some(lang) if self.style.color => highlight(text, lang, self.style.truecolor),
            _ => None,
        };
        match highlighted {
            Some(code) => lines.extend(code),
            None if text.is_empty() => {}
            None => lines.extend(text.split('\n').map(|l| clean(l, "    "))),
        }
        lines.push(paint(self.style, dim(), "```"));
        self.emit(lines);
    }

    fn table_block(&mut self, t: TableState) {
        let style = self.style;
        let cell_text = |cell: &[Piece], head: bool| -> (String, usize) {
            let pieces: Vec<Piece> = cell
                .iter()
                .map(|p| match p {
                    Piece::Text(text, look) if head => Piece::Text(
                        text.clone(),
                        Look {
                            bold: true,
                            ..*look
                        },
                    ),
                    p => p.clone(),
                })
                .collect();
            one_line(&pieces, style)
        };
        let head: Vec<(String, usize)> = t.head.iter().map(|c| cell_text(c, true)).collect();
        let rows: Vec<Vec<(String, usize)>> = t
            .rows
            .iter()
            .map(|r| r.iter().map(|c| cell_text(c, false)).collect())
            .collect();
        let columns = rows
            .iter()
            .map(Vec::len)
            .chain([head.len(), t.aligns.len()])
            .max()
            .unwrap_or(0);
        if columns == 0 {
            return;
        }
        let mut widths = vec![0usize; columns];
        for row in std::iter::once(&head).chain(&rows) {
            for (w, (_, width)) in widths.iter_mut().zip(row) {
                *w = (*w).max(*width);
            }
        }
        let total: usize = widths
            .iter()
            .map(|w| w + 3)
            .sum::<usize>()
            .saturating_sub(1);
        if total > self.available() {
            // Too wide for the screen: one "header: value" line per cell.
            let mut lines = Vec::new();
            for (i, row) in rows.iter().enumerate() {
                if i > 0 {
                    lines.push(String::new());
                }
                for (c, (text, _)) in row.iter().enumerate() {
                    let name = head.get(c).map_or("", |(h, _)| h.as_str());
                    let line = if name.is_empty() {
                        text.clone()
                    } else {
                        format!("{name}: {text}")
                    };
                    lines.push(line);
                }
            }
            self.emit(lines);
            return;
        }
        let bar = paint(style, dim(), "│");
        let row_line = |row: &[(String, usize)]| -> String {
            let cells: Vec<String> = (0..columns)
                .map(|c| {
                    let (text, width) = row.get(c).map_or(("", 0), |(t, w)| (t.as_str(), *w));
                    let room = widths[c].saturating_sub(width);
                    let (left, right) = match t.aligns.get(c) {
                        Some(Alignment::Right) => (room, 0),
                        Some(Alignment::Center) => (room / 2, room - room / 2),
                        _ => (0, room),
                    };
                    format!(" {}{text}{} ", " ".repeat(left), " ".repeat(right))
                })
                .collect();
            cells.join(&bar)
        };
        let mut lines = vec![row_line(&head)];
        let rule: Vec<String> = widths.iter().map(|w| "─".repeat(w + 2)).collect();
        lines.push(paint(style, dim(), &rule.join("┼")));
        for row in &rows {
            lines.push(row_line(row));
        }
        self.emit(lines);
    }
}

fn heading_level(level: HeadingLevel) -> usize {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

/// Inline content on one line (table cells): painted text and its width.
fn one_line(pieces: &[Piece], style: Style) -> (String, usize) {
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
fn wrap(pieces: &[Piece], width: usize, style: Style) -> Vec<String> {
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

// ---------------------------------------------------------------------------
// Highlighting

/// The bundled syntaxes, loaded on first use (tens of milliseconds).
static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(SyntaxSet::load_defaults_newlines);

/// The theme: readable on the dark backgrounds most terminals have.
static THEME: LazyLock<Option<Theme>> =
    LazyLock::new(|| ThemeSet::load_defaults().themes.remove("base16-ocean.dark"));

/// Code bigger than this is shown unhighlighted (highlighting is linear but
/// not fast, and a huge block is seldom read in a terminal).
const HIGHLIGHT_MAX_BYTES: usize = 256 * 1024;

fn syntax_for(lang: &str) -> Option<&'static SyntaxReference> {
    let lang = lang.to_ascii_lowercase();
    let token = match lang.as_str() {
        "shell" | "console" | "zsh" | "sh" | "shellsession" => "bash",
        "ts" | "tsx" | "typescript" | "jsx" | "mjs" => "js",
        "jsonc" | "json5" => "json",
        "c++" => "cpp",
        other => other,
    };
    SYNTAXES.find_syntax_by_token(token)
}

/// `code` highlighted as `lang`, one string per line; `None` for a language
/// not known (the caller shows it plain).
fn highlight(code: &str, lang: &str, truecolor: bool) -> Option<Vec<String>> {
    if code.len() > HIGHLIGHT_MAX_BYTES || lang.is_empty() {
        return None;
    }
    let syntax = syntax_for(lang)?;
    let theme = THEME.as_ref()?;
    let mut highlighter = HighlightLines::new(syntax, theme);
    let mut lines = Vec::new();
    for line in LinesWithEndings::from(code) {
        let ranges = highlighter.highlight_line(line, &SYNTAXES).ok()?;
        let mut out = String::new();
        for (style, text) in ranges {
            let text = clean(text.trim_end_matches(['\n', '\r']), "    ");
            if text.is_empty() {
                continue;
            }
            let c = style.foreground;
            let code = if truecolor {
                format!("38;2;{};{};{}", c.r, c.g, c.b)
            } else {
                format!("38;5;{}", ansi256(c.r, c.g, c.b))
            };
            out.push_str(&format!("\x1b[{code}m{text}\x1b[0m"));
        }
        lines.push(out);
    }
    if code.ends_with('\n') {
        lines.push(String::new());
    }
    Some(lines)
}

/// The nearest colour of the xterm 256-colour palette (its 6×6×6 cube or
/// its grey ramp).
fn ansi256(r: u8, g: u8, b: u8) -> u8 {
    const LEVELS: [u8; 6] = [0, 95, 135, 175, 215, 255];
    let nearest = |v: u8| -> u8 {
        let mut best = 0u8;
        for (i, level) in LEVELS.iter().enumerate() {
            if v.abs_diff(*level) < v.abs_diff(LEVELS[best as usize]) {
                best = i as u8;
            }
        }
        best
    };
    let (ri, gi, bi) = (nearest(r), nearest(g), nearest(b));
    let cube = (
        LEVELS[ri as usize],
        LEVELS[gi as usize],
        LEVELS[bi as usize],
    );
    let distance = |(x, y, z): (u8, u8, u8)| -> u32 {
        let d = |a: u8, b: u8| u32::from(a.abs_diff(b)).pow(2);
        d(x, r) + d(y, g) + d(z, b)
    };
    let avg = (u32::from(r) + u32::from(g) + u32::from(b)) / 3;
    let grey_index = (avg.saturating_sub(3) / 10).min(23) as u8;
    let grey_level = 8 + 10 * grey_index;
    if distance((grey_level, grey_level, grey_level)) < distance(cube) {
        232 + grey_index
    } else {
        16 + 36 * ri + 6 * gi + bi
    }
}
