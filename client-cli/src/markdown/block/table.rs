//! Tables: the cells collected while the table's events arrive, then laid
//! out in aligned columns, or as "header: value" lines when too wide.

use pulldown_cmark::Alignment;

use super::BlockRenderer;
use crate::markdown::wrap::one_line;
use crate::markdown::{Look, Piece, dim, paint};

#[derive(Debug)]
pub(super) struct TableState {
    pub(super) aligns: Vec<Alignment>,
    pub(super) head: Vec<Vec<Piece>>,
    pub(super) rows: Vec<Vec<Vec<Piece>>>,
    pub(super) row: Vec<Vec<Piece>>,
}

impl BlockRenderer {
    pub(super) fn table_block(&mut self, t: TableState) {
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
