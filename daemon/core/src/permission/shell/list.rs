//! The lexer's cursor and the reading of command lists: tokens, separators,
//! simple commands, and the reserved words that open or close compound ones.

use super::{
    CHANGES_DIR, CLOSERS, COMPOUND_STARTS, Cmd, End, Lexer, MAX_DEPTH, Mark, Script, Stop, Word,
    ends_word, is_blank, reserved, wrappers,
};

impl Lexer {
    pub(super) fn new(text: &str, depth: usize) -> Lexer {
        Lexer {
            chars: text.chars().collect(),
            pos: 0,
            depth,
            compound_depth: 0,
            in_word: 0,
            in_array: false,
            heredocs: Vec::new(),
            commands: Vec::new(),
            writes: Vec::new(),
            arithmetic: Vec::new(),
            tokens: Vec::new(),
            changes_dir: false,
            compound: false,
            rereads: 0,
            line_open: false,
        }
    }

    pub(super) fn finish(mut self) -> Script {
        // A trailing `;` or newline changes nothing.
        while self.tokens.last().is_some_and(|t| t == ";") {
            self.tokens.pop();
        }
        let wrapped = wrappers::find(&self.commands, self.depth);
        Script {
            commands: self.commands,
            writes: self.writes,
            arithmetic: self.arithmetic,
            wrapped: wrapped.commands,
            wrapped_writes: wrapped.writes,
            normalized: self.tokens.join(" "),
            changes_dir: self.changes_dir,
            compound: self.compound,
        }
    }

    pub(super) fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    pub(super) fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    /// At `<(` or `>(`: a process substitution, which starts a word though
    /// `<` and `>` end one.
    pub(super) fn at_process_substitution(&self) -> bool {
        matches!(self.peek(), Some('<' | '>')) && self.peek_at(1) == Some('(')
    }

    pub(super) fn starts_with(&self, s: &str) -> bool {
        s.chars()
            .enumerate()
            .all(|(i, c)| self.peek_at(i) == Some(c))
    }

    /// Whether the text goes on with the word `word` (followed by a
    /// character that ends words, or by nothing).
    pub(super) fn at_word(&self, word: &str) -> bool {
        self.starts_with(word) && self.peek_at(word.chars().count()).is_none_or(ends_word)
    }

    /// Records a token after which a newline ends a command (a word, a
    /// redirection, a closing `done`).
    pub(super) fn token(&mut self, t: &str) {
        if self.in_word == 0 {
            self.tokens.push(t.to_string());
            self.line_open = true;
        }
    }

    /// Records a token after which a newline adds nothing (`;`, `&&`,
    /// `do`, `then`, `{`, `(`).
    pub(super) fn sep_token(&mut self, t: &str) {
        if self.in_word == 0 {
            self.tokens.push(t.to_string());
            self.line_open = false;
        }
    }

    /// Records a reserved word read at the start of a command.
    pub(super) fn reserved_token(&mut self, word: &str) {
        if matches!(word, "}" | "done" | "fi" | "esac") {
            self.token(word);
        } else {
            self.sep_token(word);
        }
    }

    /// A newline ends a command like `;`; blank lines and a leading
    /// newline add nothing to the normalised text.
    fn newline_token(&mut self) {
        if self.line_open {
            self.sep_token(";");
        }
    }

    pub(super) fn mark(&self) -> Mark {
        Mark {
            pos: self.pos,
            commands: self.commands.len(),
            writes: self.writes.len(),
            arithmetic: self.arithmetic.len(),
            tokens: self.tokens.len(),
            heredocs: self.heredocs.len(),
            changes_dir: self.changes_dir,
        }
    }

    pub(super) fn back_to(&mut self, m: Mark) {
        self.pos = m.pos;
        self.commands.truncate(m.commands);
        self.writes.truncate(m.writes);
        self.arithmetic.truncate(m.arithmetic);
        self.tokens.truncate(m.tokens);
        self.heredocs.truncate(m.heredocs);
        self.changes_dir = m.changes_dir;
    }

    /// Skips blanks and line continuations.
    pub(super) fn skip_blanks(&mut self) {
        loop {
            match self.peek() {
                Some(c) if is_blank(c) => self.pos += 1,
                Some('\\') if self.peek_at(1) == Some('\n') => self.pos += 2,
                _ => return,
            }
        }
    }

    /// Skips a comment, up to (not including) the end of its line.
    pub(super) fn skip_comment(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.pos += 1;
        }
    }

    /// Skips blanks, comments and newlines (reading the here-documents
    /// that start after them), where the grammar allows line breaks.
    pub(super) fn skip_space(&mut self) -> Result<(), String> {
        loop {
            self.skip_blanks();
            match self.peek() {
                Some('\n') => {
                    self.pos += 1;
                    self.read_heredocs()?;
                }
                Some('#') => self.skip_comment(),
                _ => return Ok(()),
            }
        }
    }

    /// Ends the simple command being read, if it has words.
    fn end_command(&mut self, cmd: &mut Cmd) {
        let words = std::mem::take(cmd).words;
        self.push_command(words);
    }

    pub(super) fn push_command(&mut self, words: Vec<Word>) {
        if words.is_empty() {
            return;
        }
        if words.iter().any(|w| {
            w.literal
                .as_deref()
                .is_some_and(|l| CHANGES_DIR.contains(&l))
        }) {
            self.changes_dir = true;
        }
        self.commands.push(words);
    }

    /// Fails when nesting one level deeper would pass the limit.
    pub(super) fn check_depth(&self) -> Result<(), String> {
        if self.depth + self.compound_depth >= MAX_DEPTH {
            Err("the command nests too deeply".to_string())
        } else {
            Ok(())
        }
    }

    /// Runs `f` one nesting level deeper.
    pub(super) fn nested(
        &mut self,
        in_word: bool,
        f: impl FnOnce(&mut Lexer) -> Result<(), String>,
    ) -> Result<(), String> {
        self.check_depth()?;
        self.depth += 1;
        self.in_word += usize::from(in_word);
        let result = f(self);
        self.depth -= 1;
        self.in_word -= usize::from(in_word);
        result
    }

    /// A newline inside a quoted string or a substitution: fine, unless a
    /// here-document body would start there (then the reading is unsure).
    pub(super) fn newline_in_word(&self) -> Result<(), String> {
        if self.heredocs.is_empty() {
            Ok(())
        } else {
            Err("a here-document starts inside a quoted string or substitution".to_string())
        }
    }

    /// Reads commands up to what `stop` names (consumed) or the end of
    /// the text.
    pub(super) fn parse_list(&mut self, stop: Stop) -> Result<End, String> {
        let mut cmd = Cmd::default();
        loop {
            self.skip_blanks();
            let Some(c) = self.peek() else {
                self.end_command(&mut cmd);
                return self.end_of_text(stop);
            };
            match c {
                '\n' => {
                    self.pos += 1;
                    self.end_command(&mut cmd);
                    self.newline_token();
                    self.read_heredocs()?;
                }
                '#' => self.skip_comment(),
                ';' if self.starts_with(";;") || self.starts_with(";&") => {
                    if !stop.case_clause {
                        return Err("`;;` outside a `case`".to_string());
                    }
                    let op = self.operator();
                    self.end_command(&mut cmd);
                    self.sep_token(&op);
                    return Ok(End::CaseClause);
                }
                ';' | '|' => {
                    let op = self.operator();
                    self.end_command(&mut cmd);
                    self.sep_token(&op);
                }
                '&' if self.peek_at(1) != Some('>') => {
                    let op = self.operator();
                    self.end_command(&mut cmd);
                    self.sep_token(&op);
                }
                '(' => {
                    if cmd.at_start() {
                        self.paren_compound()?;
                        cmd.compound = true;
                    } else if self.is_function_parens(&cmd) {
                        self.function_definition(&mut cmd)?;
                    } else {
                        return Err("unexpected `(`".to_string());
                    }
                }
                ')' => {
                    if !stop.paren {
                        return Err("unbalanced `)`".to_string());
                    }
                    self.pos += 1;
                    self.end_command(&mut cmd);
                    return Ok(End::Paren);
                }
                '<' | '>' if self.peek_at(1) == Some('(') => {
                    let word = self.read_word()?;
                    self.push_word(&mut cmd, word)?;
                }
                '<' | '>' | '&' => {
                    self.redirect(String::new())?;
                    cmd.redirected = true;
                }
                _ => {
                    let word = self.read_word()?;
                    let is_fd =
                        !word.raw.is_empty() && word.raw.chars().all(|c| c.is_ascii_digit());
                    if is_fd
                        && matches!(self.peek(), Some('<' | '>'))
                        && self.peek_at(1) != Some('(')
                    {
                        self.redirect(word.raw)?;
                        cmd.redirected = true;
                        continue;
                    }
                    if let Some(word) = reserved(&word.raw)
                        && (cmd.at_start() || cmd.compound && CLOSERS.contains(&word))
                    {
                        self.reserved_token(word);
                        if let Some(end) = self.reserved_word(word, stop, &mut cmd)? {
                            return Ok(end);
                        }
                        continue;
                    }
                    self.push_word(&mut cmd, word)?;
                }
            }
        }
    }

    /// The end of the text, where `stop` wanted something else or not.
    fn end_of_text(&self, stop: Stop) -> Result<End, String> {
        if stop.paren {
            return Err("unterminated `(`, `$(`, `<(` or `>(`".to_string());
        }
        if !stop.words.is_empty() {
            return Err(format!(
                "unterminated compound command: `{}` expected",
                stop.words.join("`, `")
            ));
        }
        if let Some(h) = self.heredocs.first() {
            return Err(format!(
                "the here-document ending with `{}` is not terminated",
                h.delimiter
            ));
        }
        Ok(End::Text)
    }

    fn push_word(&mut self, cmd: &mut Cmd, word: Word) -> Result<(), String> {
        if cmd.compound {
            return Err(format!(
                "unexpected `{}` after a compound command",
                word.raw
            ));
        }
        self.token(&word.raw);
        cmd.words.push(word);
        Ok(())
    }

    /// A reserved word at the start of a command (its token recorded).
    /// `Some` when it ends the list being read.
    fn reserved_word(
        &mut self,
        word: &'static str,
        stop: Stop,
        cmd: &mut Cmd,
    ) -> Result<Option<End>, String> {
        match word {
            "!" => {}
            "time" => {
                self.skip_blanks();
                if self.at_word("-p") {
                    self.pos += 2;
                    self.sep_token("-p");
                }
            }
            "function" => {
                self.function_keyword()?;
                cmd.compound = true;
            }
            w if COMPOUND_STARTS.contains(&w) => {
                self.compound(w)?;
                cmd.compound = true;
            }
            w if stop.words.contains(&w) => return Ok(Some(End::Word(w))),
            w => return Err(format!("unexpected `{w}`")),
        }
        Ok(None)
    }

    /// Reads commands up to one of `words`, and says which ended them.
    pub(super) fn list_until(
        &mut self,
        words: &'static [&'static str],
    ) -> Result<&'static str, String> {
        match self.parse_list(Stop::words(words))? {
            End::Word(w) => Ok(w),
            // Not reached: the other ends are errors for this stop.
            End::Text | End::Paren | End::CaseClause => Err(format!(
                "unterminated compound command: `{}` expected",
                words.join("`, `")
            )),
        }
    }
}
