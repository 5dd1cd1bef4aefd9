//! One block, parsed on its own, rendered into terminal lines: the
//! pulldown-cmark events of each element family turned into styled text
//! inside the open containers (quote gutters, list markers). Tables are
//! laid out in `table`.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Parser, Tag, TagEnd};

use super::highlight::highlight;
use super::wrap::wrap;
use super::{
    CODE, HEADING, LINK, Look, MARKER, Piece, Style, clean, dim, display_width, options, paint,
};

mod table;

use table::TableState;

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

pub(super) fn render_block(source: &str, style: Style) -> String {
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
