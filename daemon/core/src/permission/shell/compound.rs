//! Compound commands: `if`, loops, `case`, `[[ … ]]`, subshells and groups,
//! arithmetic `((…))`, and function definitions.

use super::{
    ARITHMETIC_TESTS, COMPOUND_STARTS, Cmd, End, Lexer, MAX_REREADS, Stop, Word, ends_word,
    is_blank, is_environment_name, is_function_name, is_name, reserved,
};

impl Lexer {
    /// The compound command that `word` (its token recorded) opens.
    pub(super) fn compound(&mut self, word: &str) -> Result<(), String> {
        self.check_depth()?;
        self.compound = true;
        self.compound_depth += 1;
        let result = match word {
            "{" => self.list_until(&["}"]).map(drop),
            "if" => self.if_clause(),
            "while" | "until" => self
                .list_until(&["do"])
                .and_then(|_| self.list_until(&["done"]))
                .map(drop),
            "for" | "select" => self.for_clause(word),
            "case" => self.case_clause(),
            _ => self.conditional(),
        };
        self.compound_depth -= 1;
        result
    }

    /// `if` (read): `list; then list; [elif list; then list;]… [else
    /// list;] fi`.
    fn if_clause(&mut self) -> Result<(), String> {
        self.list_until(&["then"])?;
        loop {
            match self.list_until(&["elif", "else", "fi"])? {
                "elif" => {
                    self.list_until(&["then"])?;
                }
                "else" => {
                    self.list_until(&["fi"])?;
                    return Ok(());
                }
                _ => return Ok(()),
            }
        }
    }

    /// `for` or `select` (read): `NAME [in WORDS]; do list; done`, or
    /// `for ((…; …; …)); do list; done`.
    fn for_clause(&mut self, keyword: &str) -> Result<(), String> {
        self.skip_blanks();
        if keyword == "for" && self.starts_with("((") {
            self.pos += 2;
            let Some(text) = self.arithmetic_text()? else {
                return Err("unterminated `((` in a `for` loop".to_string());
            };
            let expression = format!("(({text}))");
            self.token(&expression);
            self.arithmetic.push(expression);
            self.skip_blanks();
            if self.peek() == Some(';') && !self.starts_with(";;") {
                self.pos += 1;
                self.sep_token(";");
            }
        } else {
            let name = self.read_word()?;
            if !is_name(&name.raw) {
                return Err(format!("`{keyword}` needs a variable name"));
            }
            self.token(&name.raw);
            self.skip_space()?;
            let mut listed: Vec<Word> = Vec::new();
            if self.at_word("in") {
                self.pos += 2;
                self.sep_token("in");
                self.for_list(keyword, &mut listed)?;
            } else if self.peek() == Some(';') && !self.starts_with(";;") {
                self.pos += 1;
                self.sep_token(";");
            }
            if is_environment_name(&name.raw) {
                // Each pass sets a variable programs may read: the loop
                // header itself needs permission.
                let mut header = vec![Word::new(keyword.to_string()), name];
                header.push(Word::new("in".to_string()));
                header.extend(listed);
                self.push_command(header);
            }
        }
        self.skip_space()?;
        if !self.at_word("do") {
            return Err(format!("`{keyword}` needs `do`"));
        }
        self.pos += 2;
        self.sep_token("do");
        self.list_until(&["done"]).map(drop)
    }

    /// The words after `for NAME in`, up to and including the `;` or
    /// newline that ends them.
    fn for_list(&mut self, keyword: &str, listed: &mut Vec<Word>) -> Result<(), String> {
        loop {
            self.skip_blanks();
            match self.peek() {
                None => return Err(format!("`{keyword}` needs `do`")),
                Some(';') if !self.starts_with(";;") => {
                    self.pos += 1;
                    self.sep_token(";");
                    return Ok(());
                }
                Some('\n') => {
                    self.pos += 1;
                    self.sep_token(";");
                    return self.read_heredocs();
                }
                Some('#') => self.skip_comment(),
                Some(c) if ends_word(c) && !self.at_process_substitution() => {
                    return Err(format!("unexpected `{c}` in a `{keyword}` list"));
                }
                Some(_) => {
                    let word = self.read_word()?;
                    self.token(&word.raw);
                    listed.push(word);
                }
            }
        }
    }

    /// `case` (read): `WORD in [(]PATTERN[|PATTERN]…) list ;; … esac`.
    fn case_clause(&mut self) -> Result<(), String> {
        self.skip_blanks();
        if self.peek().is_none_or(ends_word) {
            return Err("`case` needs a word".to_string());
        }
        let subject = self.read_word()?;
        self.token(&subject.raw);
        self.skip_space()?;
        if !self.at_word("in") {
            return Err("`case` needs `in`".to_string());
        }
        self.pos += 2;
        self.sep_token("in");
        loop {
            self.skip_space()?;
            if self.peek().is_none() {
                return Err("unterminated compound command: `esac` expected".to_string());
            }
            if self.at_word("esac") {
                self.pos += 4;
                self.token("esac");
                return Ok(());
            }
            if self.peek() == Some('(') {
                self.pos += 1;
                self.sep_token("(");
            }
            loop {
                self.skip_blanks();
                match self.peek() {
                    Some(c) if !ends_word(c) => {
                        let pattern = self.read_word()?;
                        self.token(&pattern.raw);
                    }
                    _ => return Err("a `case` pattern is missing".to_string()),
                }
                self.skip_blanks();
                match self.peek() {
                    Some('|') => {
                        self.pos += 1;
                        self.sep_token("|");
                    }
                    Some(')') => {
                        self.pos += 1;
                        self.sep_token(")");
                        break;
                    }
                    _ => return Err("a `case` pattern needs `)`".to_string()),
                }
            }
            let stop = Stop {
                paren: false,
                words: &["esac"],
                case_clause: true,
            };
            if self.parse_list(stop)? != End::CaseClause {
                return Ok(());
            }
        }
    }

    /// `[[` (read): a test up to `]]`. Operators are not redirections or
    /// separators there. Only a test that does arithmetic is a command
    /// that needs permission; the substitutions in any test run.
    fn conditional(&mut self) -> Result<(), String> {
        let mut words = vec![Word::new("[[".to_string())];
        let mut arithmetic = false;
        loop {
            self.skip_space()?;
            let Some(c) = self.peek() else {
                return Err("unterminated `[[`: `]]` expected".to_string());
            };
            let word = match c {
                '&' | '|' if self.peek_at(1) == Some(c) => {
                    self.pos += 2;
                    Word::new(format!("{c}{c}"))
                }
                '(' | ')' => {
                    self.pos += 1;
                    Word::new(c.to_string())
                }
                '<' | '>' if self.peek_at(1) != Some('(') => {
                    self.pos += 1;
                    Word::new(c.to_string())
                }
                '<' | '>' => self.read_word()?,
                c if ends_word(c) => return Err(format!("unexpected `{c}` inside `[[ … ]]`")),
                _ => self.read_word()?,
            };
            self.token(&word.raw);
            let done = word.raw == "]]";
            let regex = word.raw == "=~";
            arithmetic |= ARITHMETIC_TESTS.contains(&word.raw.as_str());
            words.push(word);
            if done {
                break;
            }
            if regex {
                self.skip_blanks();
                let pattern = self.regex_word()?;
                self.token(&pattern.raw);
                words.push(pattern);
            }
        }
        if arithmetic {
            self.push_command(words);
        }
        Ok(())
    }

    /// The pattern after `=~`: parentheses and `|` are part of it; it ends
    /// at a blank outside parentheses.
    fn regex_word(&mut self) -> Result<Word, String> {
        let mut raw = String::new();
        let mut depth = 0usize;
        while let Some(c) = self.peek() {
            match c {
                c if (is_blank(c) || c == '\n') && depth == 0 => break,
                '(' => {
                    depth += 1;
                    raw.push(c);
                    self.pos += 1;
                }
                ')' if depth == 0 => break,
                ')' => {
                    depth -= 1;
                    raw.push(c);
                    self.pos += 1;
                }
                '\\' => self.escaped(&mut raw, "unterminated `[[`: `]]` expected")?,
                '\'' => self.single_quoted(&mut raw)?,
                '"' => self.double_quoted(&mut raw)?,
                '$' => self.dollar(&mut raw, false)?,
                '`' => self.backticks(&mut raw, false)?,
                c => self.quoted_char(&mut raw, c)?,
            }
        }
        if raw.is_empty() {
            return Err("`=~` needs a pattern".to_string());
        }
        Ok(Word::new(raw))
    }

    /// At a `(` that starts a command: `((…))` arithmetic, or a subshell.
    pub(super) fn paren_compound(&mut self) -> Result<(), String> {
        if self.starts_with("((") {
            let mark = self.mark();
            self.pos += 2;
            if let Some(text) = self.arithmetic_text()? {
                let expression = format!("(({text}))");
                self.token(&expression);
                self.arithmetic.push(expression);
                return Ok(());
            }
            // `((a); (b))`: two subshells in one, as bash reads it too.
            self.back_to(mark);
        }
        self.compound = true;
        self.pos += 1;
        self.sep_token("(");
        self.nested(false, |l| l.parse_list(Stop::PAREN).map(drop))?;
        self.token(")");
        Ok(())
    }

    /// After `((` (or `$((`): the arithmetic text up to the matching
    /// `))`, consumed; `None`, with nothing consumed, when the parentheses
    /// do not close as `))` or the text is not arithmetic bash would read
    /// (then it is a subshell or a command substitution).
    pub(super) fn arithmetic_text(&mut self) -> Result<Option<String>, String> {
        self.check_depth()?;
        let mark = self.mark();
        self.depth += 1;
        self.in_word += 1;
        let text = self.arithmetic_body();
        self.depth -= 1;
        self.in_word -= 1;
        match text? {
            Some(text) => Ok(Some(text)),
            None => {
                self.back_to(mark);
                self.rereads += 1;
                if self.rereads > MAX_REREADS {
                    return Err("the command has too many `((` to read".to_string());
                }
                Ok(None)
            }
        }
    }

    fn arithmetic_body(&mut self) -> Result<Option<String>, String> {
        let mut text = String::new();
        let mut depth = 0usize;
        loop {
            let Some(c) = self.peek() else {
                return Ok(None);
            };
            match c {
                '(' => {
                    depth += 1;
                    text.push('(');
                    self.pos += 1;
                }
                ')' if depth > 0 => {
                    depth -= 1;
                    text.push(')');
                    self.pos += 1;
                }
                ')' => {
                    if self.peek_at(1) != Some(')') {
                        return Ok(None);
                    }
                    self.pos += 2;
                    return Ok(Some(text));
                }
                '$' => self.dollar(&mut text, true)?,
                '`' => self.backticks(&mut text, true)?,
                '\\' => {
                    let Some(n) = self.peek_at(1) else {
                        return Ok(None);
                    };
                    self.pos += 2;
                    if n != '\n' {
                        text.push('\\');
                        text.push(n);
                    }
                }
                '\'' => return Ok(None),
                c => {
                    if c == '\n' && !self.heredocs.is_empty() {
                        return Ok(None);
                    }
                    text.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// Whether a `(` here makes `NAME ()` a function definition.
    pub(super) fn is_function_parens(&self, cmd: &Cmd) -> bool {
        if cmd.words.len() != 1 || cmd.redirected || cmd.compound {
            return false;
        }
        let mut i = 1;
        while self.peek_at(i).is_some_and(is_blank) {
            i += 1;
        }
        self.peek_at(i) == Some(')')
    }

    /// `NAME ()` at a `(`: the name is not a command; the body follows.
    pub(super) fn function_definition(&mut self, cmd: &mut Cmd) -> Result<(), String> {
        let name = cmd.words.pop().map(|w| w.raw).unwrap_or_default();
        if !is_function_name(&name) {
            return Err(format!(
                "`{name}` is not a function name this reading accepts"
            ));
        }
        self.pos += 1;
        self.skip_blanks();
        self.pos += 1;
        self.sep_token("()");
        self.function_body()?;
        cmd.compound = true;
        Ok(())
    }

    /// `function` (read): `NAME [()] body`.
    pub(super) fn function_keyword(&mut self) -> Result<(), String> {
        self.skip_blanks();
        let name = if self.peek().is_none_or(ends_word) {
            String::new()
        } else {
            self.read_word()?.raw
        };
        if !is_function_name(&name) {
            return Err(format!(
                "`{name}` is not a function name this reading accepts"
            ));
        }
        self.token(&name);
        self.skip_blanks();
        if self.peek() == Some('(') {
            self.pos += 1;
            self.skip_blanks();
            if self.peek() != Some(')') {
                return Err("`function` needs `()` or its body".to_string());
            }
            self.pos += 1;
            self.sep_token("()");
        }
        self.function_body()
    }

    /// A function's body: a compound command. Its commands count as run.
    fn function_body(&mut self) -> Result<(), String> {
        self.skip_space()?;
        if self.peek() == Some('(') {
            return self.paren_compound();
        }
        let word = if self.peek().is_none_or(ends_word) {
            None
        } else {
            Some(self.read_word()?)
        };
        match word.as_ref().and_then(|w| reserved(&w.raw)) {
            Some(w) if COMPOUND_STARTS.contains(&w) => {
                self.reserved_token(w);
                self.compound(w)
            }
            _ => Err("a function body must be a compound command".to_string()),
        }
    }
}
