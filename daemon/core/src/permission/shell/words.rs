//! Reading one word: quoting, array assignments, and the substitutions
//! inside a word (`$(…)`, `${…}`, `$((…))`, backticks) that run commands.

use super::{Lexer, Stop, Word, ends_word, is_assignment};

impl Lexer {
    /// Reads one word (at a character that does not end words, or at `<(`
    /// / `>(`).
    pub(super) fn read_word(&mut self) -> Result<Word, String> {
        let mut raw = String::new();
        while let Some(c) = self.peek() {
            match c {
                '<' | '>' if self.peek_at(1) == Some('(') => {
                    raw.push(c);
                    raw.push('(');
                    self.pos += 2;
                    let start = self.pos;
                    self.nested(true, |l| l.parse_list(Stop::PAREN).map(drop))?;
                    raw.extend(&self.chars[start..self.pos]);
                }
                '(' if raw.ends_with('=') && is_assignment(&raw) => self.array(&mut raw)?,
                c if ends_word(c) => break,
                '\\' => match self.peek_at(1) {
                    Some('\n') => self.pos += 2,
                    Some(n) => {
                        raw.push('\\');
                        raw.push(n);
                        self.pos += 2;
                    }
                    None => {
                        raw.push('\\');
                        self.pos += 1;
                    }
                },
                '\'' => self.single_quoted(&mut raw)?,
                '"' => self.double_quoted(&mut raw)?,
                '`' => self.backticks(&mut raw, false)?,
                '$' => self.dollar(&mut raw, false)?,
                _ => {
                    raw.push(c);
                    self.pos += 1;
                }
            }
        }
        Ok(Word::new(raw))
    }

    /// `NAME=(…)`, at the `(`: the elements are words (their substitutions
    /// run), kept in the assignment's text.
    fn array(&mut self, raw: &mut String) -> Result<(), String> {
        if self.in_array {
            return Err("an array inside an array".to_string());
        }
        self.in_array = true;
        let result = self.array_elements(raw);
        self.in_array = false;
        result
    }

    fn array_elements(&mut self, raw: &mut String) -> Result<(), String> {
        self.pos += 1;
        raw.push('(');
        let mut first = true;
        loop {
            self.skip_blanks();
            match self.peek() {
                None => return Err("unterminated array `(`".to_string()),
                Some('\n') => {
                    self.newline_in_word()?;
                    self.pos += 1;
                }
                Some('#') => self.skip_comment(),
                Some(')') => {
                    self.pos += 1;
                    raw.push(')');
                    return Ok(());
                }
                Some(c) if ends_word(c) && !self.at_process_substitution() => {
                    return Err(format!("unexpected `{c}` in an array"));
                }
                Some(_) => {
                    let element = self.read_word()?;
                    if !first {
                        raw.push(' ');
                    }
                    first = false;
                    raw.push_str(&element.raw);
                }
            }
        }
    }

    /// `'…'`: everything up to the next `'` is data.
    pub(super) fn single_quoted(&mut self, raw: &mut String) -> Result<(), String> {
        raw.push('\'');
        self.pos += 1;
        loop {
            match self.peek() {
                None => return Err("unterminated single quote".to_string()),
                Some('\'') => {
                    raw.push('\'');
                    self.pos += 1;
                    return Ok(());
                }
                Some(c) => self.quoted_char(raw, c)?,
            }
        }
    }

    /// `"…"`: data, except `$(…)`, `${…}` and backticks, which still run.
    pub(super) fn double_quoted(&mut self, raw: &mut String) -> Result<(), String> {
        raw.push('"');
        self.pos += 1;
        loop {
            match self.peek() {
                None => return Err("unterminated double quote".to_string()),
                Some('"') => {
                    raw.push('"');
                    self.pos += 1;
                    return Ok(());
                }
                Some('\\') => self.escaped(raw, "unterminated double quote")?,
                Some('$') => self.dollar(raw, true)?,
                Some('`') => self.backticks(raw, true)?,
                Some(c) => self.quoted_char(raw, c)?,
            }
        }
    }

    /// Keeps one character of a quoted string or a substitution: a
    /// here-document may not start inside one.
    pub(super) fn quoted_char(&mut self, raw: &mut String, c: char) -> Result<(), String> {
        if c == '\n' {
            self.newline_in_word()?;
        }
        raw.push(c);
        self.pos += 1;
        Ok(())
    }

    /// At a `\` that escapes: a line continuation is dropped, any other
    /// character is kept with its backslash; `unterminated` is the error for
    /// a `\` that ends the text.
    pub(super) fn escaped(&mut self, raw: &mut String, unterminated: &str) -> Result<(), String> {
        match self.peek_at(1) {
            Some('\n') => self.pos += 2,
            Some(n) => {
                raw.push('\\');
                raw.push(n);
                self.pos += 2;
            }
            None => return Err(unterminated.to_string()),
        }
        Ok(())
    }

    /// At a `$`: `$(…)`, `${…}`, and outside double quotes `$'…'` and
    /// `$"…"`; anything else is a plain `$`.
    pub(super) fn dollar(
        &mut self,
        raw: &mut String,
        in_double_quotes: bool,
    ) -> Result<(), String> {
        match self.peek_at(1) {
            Some('(') => {
                if self.peek_at(2) == Some('(') {
                    let start = self.pos;
                    self.pos += 3;
                    if let Some(text) = self.arithmetic_text()? {
                        let expression = format!("$(({text}))");
                        raw.push_str(&expression);
                        self.arithmetic.push(expression);
                        return Ok(());
                    }
                    // `$((a); (b))`: a command substitution after all.
                    self.pos = start;
                }
                raw.push_str("$(");
                self.pos += 2;
                let start = self.pos;
                self.nested(true, |l| l.parse_list(Stop::PAREN).map(drop))?;
                raw.extend(&self.chars[start..self.pos]);
                Ok(())
            }
            Some('{') => {
                raw.push_str("${");
                self.pos += 2;
                self.nested(true, |l| l.braced_parameter(raw))
            }
            Some('\'') if !in_double_quotes => {
                // ANSI-C quoting: a backslash escapes the next character,
                // `\'` included.
                raw.push_str("$'");
                self.pos += 2;
                loop {
                    match self.peek() {
                        None => return Err("unterminated $'…' quote".to_string()),
                        Some('\\') => {
                            let Some(n) = self.peek_at(1) else {
                                return Err("unterminated $'…' quote".to_string());
                            };
                            if n == '\n' {
                                self.newline_in_word()?;
                            }
                            raw.push('\\');
                            raw.push(n);
                            self.pos += 2;
                        }
                        Some('\'') => {
                            raw.push('\'');
                            self.pos += 1;
                            return Ok(());
                        }
                        Some(c) => self.quoted_char(raw, c)?,
                    }
                }
            }
            Some('"') if !in_double_quotes => {
                raw.push('$');
                self.pos += 1;
                self.double_quoted(raw)
            }
            _ => {
                raw.push('$');
                self.pos += 1;
                Ok(())
            }
        }
    }

    /// The inside of `${…}` (after the `${`). Quotes, backslashes,
    /// backticks and braces inside are refused: how bash pairs them there
    /// depends on the operator, and guessing wrong could hide a command.
    fn braced_parameter(&mut self, raw: &mut String) -> Result<(), String> {
        loop {
            match self.peek() {
                None => return Err("unterminated ${…}".to_string()),
                Some('}') => {
                    raw.push('}');
                    self.pos += 1;
                    return Ok(());
                }
                Some('$') => self.dollar(raw, true)?,
                Some(c @ ('\'' | '"' | '\\' | '`' | '{' | '\n')) => {
                    return Err(format!(
                        "`{}` inside ${{…}} is not supported",
                        c.escape_default()
                    ));
                }
                Some(c) => {
                    raw.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// `` `…` ``: the text up to the next unescaped backtick is a command
    /// line of its own.
    pub(super) fn backticks(
        &mut self,
        raw: &mut String,
        in_double_quotes: bool,
    ) -> Result<(), String> {
        raw.push('`');
        self.pos += 1;
        let mut inner = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated backtick".to_string()),
                Some('`') => {
                    raw.push('`');
                    self.pos += 1;
                    break;
                }
                Some('\\') => {
                    let Some(n) = self.peek_at(1) else {
                        return Err("unterminated backtick".to_string());
                    };
                    if n == '"' && in_double_quotes {
                        // bash removes this backslash, so the quote counts
                        // inside; refuse rather than model it.
                        return Err("`\\\"` inside a backtick substitution in double quotes is not supported".to_string());
                    }
                    raw.push('\\');
                    raw.push(n);
                    self.pos += 2;
                    if matches!(n, '\\' | '`' | '$') {
                        inner.push(n);
                    } else {
                        inner.push('\\');
                        inner.push(n);
                    }
                }
                Some(c) => {
                    if c == '\n' {
                        self.newline_in_word()?;
                    }
                    raw.push(c);
                    inner.push(c);
                    self.pos += 1;
                }
            }
        }
        self.check_depth()?;
        let mut sub = Lexer::new(&inner, self.depth + self.compound_depth + 1);
        sub.parse_list(Stop::TEXT)?;
        self.absorb(sub);
        Ok(())
    }
}
