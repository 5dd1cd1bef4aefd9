//! Syntax highlighting of fenced code with syntect, to ANSI colours
//! (24-bit or the nearest of the 256-colour palette). Its syntaxes and theme
//! are loaded once, at start (see [`load`]).

use std::sync::LazyLock;

use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::{SyntaxReference, SyntaxSet};
use syntect::util::LinesWithEndings;

/// The bundled syntaxes, loaded on first use (tens of milliseconds).
static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(SyntaxSet::load_defaults_newlines);

/// The theme: readable on the dark backgrounds most terminals have.
static THEME: LazyLock<Option<Theme>> =
    LazyLock::new(|| ThemeSet::load_defaults().themes.remove("base16-ocean.dark"));

/// Code bigger than this is shown unhighlighted (highlighting is linear but
/// not fast, and a huge block is seldom read in a terminal). The client
/// checks the same bound before it asks.
pub(crate) const HIGHLIGHT_MAX_BYTES: usize = 256 * 1024;

/// Loads the syntaxes and the theme now, so that the first request does not
/// wait for them when the client started this program ahead of need.
pub(crate) fn load() {
    LazyLock::force(&SYNTAXES);
    LazyLock::force(&THEME);
}

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
/// not known, an empty one or code too big (the caller shows it plain).
///
/// Each line is the code's line, without its line break, with colours
/// added and nothing else changed: making text safe for a terminal (tabs,
/// control characters) is the client's part, done before it asks.
pub(crate) fn highlight(code: &str, lang: &str, truecolor: bool) -> Option<Vec<String>> {
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
            let text = text.trim_end_matches(['\n', '\r']);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi256_maps_to_the_cube_and_the_grey_ramp() {
        assert_eq!(ansi256(0, 0, 0), 16);
        assert_eq!(ansi256(255, 255, 255), 231);
        assert_eq!(ansi256(255, 0, 0), 196);
        assert_eq!(ansi256(128, 128, 128), 244);
    }

    #[test]
    fn rust_is_coloured_in_either_palette_and_keeps_its_text() {
        let lines = highlight("fn main() {}\nlet x = 1;", "rust", false).unwrap_or_default();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("\x1b[38;5;"), "{lines:?}");
        assert!(lines[0].contains("fn"), "{lines:?}");
        let truecolor = highlight("fn main() {}", "Rust", true).unwrap_or_default();
        assert!(truecolor[0].contains("\x1b[38;2;"), "{truecolor:?}");
        // A final line break gives a last, empty line, as splitting would.
        assert_eq!(highlight("x\n", "rust", false).map(|l| l.len()), Some(2));
    }

    #[test]
    fn aliases_reach_their_syntaxes() {
        for lang in ["sh", "shell", "ts", "jsonc", "c++", "py"] {
            assert!(syntax_for(lang).is_some(), "{lang}");
        }
    }

    #[test]
    fn unknown_empty_or_too_big_is_not_highlighted() {
        assert_eq!(highlight("x = 1", "nosuchlang", false), None);
        assert_eq!(highlight("x = 1", "", false), None);
        let big = "x".repeat(HIGHLIGHT_MAX_BYTES + 1);
        assert_eq!(highlight(&big, "rust", false), None);
    }
}
