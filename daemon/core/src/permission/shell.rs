//! A conservative reading of a bash command line, for permission rules.
//!
//! It does not run or expand anything. It finds what bash would execute —
//! every simple command, including those inside `$(…)`, backticks, `<(…)`,
//! `>(…)`, subshells and unquoted here-documents — and every redirection
//! that writes a file. Whatever it cannot read with certainty is an error,
//! and the policy asks rather than allows.
//!
//! The reading may see *more* commands than bash runs (a `{ …; }` group, an
//! `if`, a `case` are read as plain words and separators), never fewer: the
//! text of a quoted string is only taken as data where bash takes it so.
//!
//! Words keep their source text (quotes included, line continuations
//! removed): two words are the same when their text is the same, so
//! `git "status"` is not `git status` for an allow rule. That only ever
//! asks more often.

/// How deep `$(…)`, backticks and subshells may nest.
const MAX_DEPTH: usize = 32;

/// Redirection targets that write nothing anyone cares about.
const HARMLESS_TARGETS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr"];

/// Commands that change the shell's directory, after which a relative
/// redirection target no longer means what it says.
const CHANGES_DIR: &[&str] = &["cd", "pushd", "popd"];

/// One word of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The source text, quotes included, line continuations removed.
    pub raw: String,
    /// The text after quote removal, when the word has no expansion
    /// (`$…`, backticks, globs, braces, a leading `~`); `None` otherwise.
    pub literal: Option<String>,
}

impl Word {
    fn new(raw: String) -> Word {
        let literal = literal_text(&raw);
        Word { raw, literal }
    }
}

/// A redirection that writes a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileWrite {
    /// The operator, with its file descriptor (`>`, `2>>`, `&>`, `<>`, …).
    pub op: String,
    /// The target as written.
    pub target: Word,
}

/// What a command line would execute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Script {
    /// Every simple command (redirections removed), in source order;
    /// nested ones included.
    pub commands: Vec<Vec<Word>>,
    /// Every redirection that writes a file.
    pub writes: Vec<FileWrite>,
    /// The top-level tokens joined by single spaces (comments and line
    /// continuations dropped, newlines as `;`), for exact whole-line rules.
    pub normalized: String,
    /// Some command changes the directory (`cd`, `pushd`, `popd`).
    pub changes_dir: bool,
}

impl Script {
    /// Whether the line is one simple command with no redirection and no
    /// substitution: its words are all there is to it.
    pub fn is_simple(&self) -> bool {
        match self.commands.as_slice() {
            [only] => {
                self.writes.is_empty()
                    && self.normalized
                        == only
                            .iter()
                            .map(|w| w.raw.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
            }
            _ => false,
        }
    }
}

/// Reads `command`. An error says why it cannot be read with certainty.
pub(crate) fn parse(command: &str) -> Result<Script, String> {
    let mut lexer = Lexer::new(command, 0);
    lexer.parse_list(false)?;
    Ok(lexer.finish())
}

/// The simple commands of a shell command line, each as its words joined by
/// single spaces, then each redirection that writes a file as
/// `<operator> <target>` (e.g. `> out.txt`). Commands inside `$(…)`,
/// backticks, `<(…)`, `>(…)`, subshells and unquoted here-documents are
/// included. An error when the line cannot be read with certainty
/// (unbalanced quotes, an unterminated substitution, …).
pub fn split_compound(command: &str) -> Result<Vec<String>, String> {
    let script = parse(command)?;
    let mut parts: Vec<String> = script
        .commands
        .iter()
        .map(|words| {
            words
                .iter()
                .map(|w| w.raw.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    parts.extend(
        script
            .writes
            .iter()
            .map(|w| format!("{} {}", w.op, w.target.raw)),
    );
    Ok(parts)
}

/// A here-document whose body starts after the current line.
#[derive(Debug)]
struct Heredoc {
    delimiter: String,
    strip_tabs: bool,
    /// Unquoted delimiter: `$(…)`, backticks and `${…}` in the body expand.
    expands: bool,
    /// The nesting level whose newline ends the line it was opened on.
    level: usize,
}

#[derive(Debug)]
struct Lexer {
    chars: Vec<char>,
    pos: usize,
    /// Nesting of substitutions and subshells (for the recursion limit).
    depth: usize,
    /// Non-zero while reading inside a word: tokens are not recorded then.
    in_word: usize,
    heredocs: Vec<Heredoc>,
    commands: Vec<Vec<Word>>,
    writes: Vec<FileWrite>,
    tokens: Vec<String>,
    changes_dir: bool,
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Characters that end an unquoted word.
fn ends_word(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>'
    )
}

impl Lexer {
    fn new(text: &str, depth: usize) -> Lexer {
        Lexer {
            chars: text.chars().collect(),
            pos: 0,
            depth,
            in_word: 0,
            heredocs: Vec::new(),
            commands: Vec::new(),
            writes: Vec::new(),
            tokens: Vec::new(),
            changes_dir: false,
        }
    }

    fn finish(self) -> Script {
        Script {
            commands: self.commands,
            writes: self.writes,
            normalized: self.tokens.join(" "),
            changes_dir: self.changes_dir,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars()
            .enumerate()
            .all(|(i, c)| self.peek_at(i) == Some(c))
    }

    fn token(&mut self, t: &str) {
        if self.in_word == 0 {
            self.tokens.push(t.to_string());
        }
    }

    /// Skips blanks and line continuations.
    fn skip_blanks(&mut self) {
        loop {
            match self.peek() {
                Some(c) if is_blank(c) => self.pos += 1,
                Some('\\') if self.peek_at(1) == Some('\n') => self.pos += 2,
                _ => return,
            }
        }
    }

    /// Ends the simple command being read, if it has words.
    fn end_command(&mut self, words: &mut Vec<Word>) {
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
        self.commands.push(std::mem::take(words));
    }

    /// Runs `f` one nesting level deeper.
    fn nested(
        &mut self,
        in_word: bool,
        f: impl FnOnce(&mut Lexer) -> Result<(), String>,
    ) -> Result<(), String> {
        if self.depth >= MAX_DEPTH {
            return Err("the command nests too deeply".to_string());
        }
        self.depth += 1;
        self.in_word += usize::from(in_word);
        let result = f(self);
        self.depth -= 1;
        self.in_word -= usize::from(in_word);
        result
    }

    /// A newline inside a quoted string or a substitution: fine, unless a
    /// here-document body would start there (then the reading is unsure).
    fn newline_in_word(&self) -> Result<(), String> {
        if self.heredocs.is_empty() {
            Ok(())
        } else {
            Err("a here-document starts inside a quoted string or substitution".to_string())
        }
    }

    /// Reads commands up to the end of the text, or (when `close`) up to and
    /// including the `)` that closes the list.
    fn parse_list(&mut self, close: bool) -> Result<(), String> {
        let mut words: Vec<Word> = Vec::new();
        loop {
            self.skip_blanks();
            let Some(c) = self.peek() else {
                self.end_command(&mut words);
                if close {
                    return Err("unterminated `(`, `$(`, `<(` or `>(`".to_string());
                }
                if let Some(h) = self.heredocs.first() {
                    return Err(format!(
                        "the here-document ending with `{}` is not terminated",
                        h.delimiter
                    ));
                }
                return Ok(());
            };
            match c {
                '\n' => {
                    self.pos += 1;
                    self.end_command(&mut words);
                    self.token(";");
                    self.read_heredocs()?;
                }
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                ';' | '|' => {
                    let op = self.operator();
                    self.end_command(&mut words);
                    self.token(&op);
                }
                '&' if self.peek_at(1) != Some('>') => {
                    let op = self.operator();
                    self.end_command(&mut words);
                    self.token(&op);
                }
                '(' => {
                    self.pos += 1;
                    self.end_command(&mut words);
                    self.token("(");
                    self.nested(false, |l| l.parse_list(true))?;
                    self.token(")");
                }
                ')' => {
                    if !close {
                        return Err("unbalanced `)`".to_string());
                    }
                    self.pos += 1;
                    self.end_command(&mut words);
                    return Ok(());
                }
                '<' | '>' if self.peek_at(1) == Some('(') => {
                    let word = self.read_word()?;
                    self.token(&word.raw);
                    words.push(word);
                }
                '<' | '>' | '&' => self.redirect(String::new())?,
                _ => {
                    let word = self.read_word()?;
                    let is_fd =
                        !word.raw.is_empty() && word.raw.chars().all(|c| c.is_ascii_digit());
                    if is_fd
                        && matches!(self.peek(), Some('<' | '>'))
                        && self.peek_at(1) != Some('(')
                    {
                        self.redirect(word.raw)?;
                    } else {
                        self.token(&word.raw);
                        words.push(word);
                    }
                }
            }
        }
    }

    /// A control operator: `;`, `;;`, `;&`, `;;&`, `&`, `&&`, `|`, `||`, `|&`.
    fn operator(&mut self) -> String {
        for op in [";;&", ";;", ";&", "&&", "||", "|&", ";", "&", "|"] {
            if self.starts_with(op) {
                self.pos += op.chars().count();
                return op.to_string();
            }
        }
        // Not reached: called on one of the characters above.
        self.pos += 1;
        String::new()
    }

    /// A redirection; `fd` is its file-descriptor prefix (may be empty).
    fn redirect(&mut self, fd: String) -> Result<(), String> {
        const OPS: [&str; 12] = [
            "&>>", "&>", ">>", ">|", ">&", "<<<", "<<-", "<<", "<&", "<>", ">", "<",
        ];
        let Some(op) = OPS.iter().find(|op| self.starts_with(op)) else {
            return Err("unexpected `&`".to_string());
        };
        self.pos += op.chars().count();
        let op_text = format!("{fd}{op}");
        self.skip_blanks();
        match self.peek() {
            None => return Err(format!("`{op_text}` has no target")),
            Some('<' | '>') if self.peek_at(1) == Some('(') => {}
            Some(c) if ends_word(c) => return Err(format!("`{op_text}` has no target")),
            Some(_) => {}
        }
        let target = self.read_word()?;
        if target.raw.starts_with(['<', '>']) {
            self.token(&format!("{op_text} {}", target.raw));
        } else {
            self.token(&format!("{op_text}{}", target.raw));
        }
        let is_fd_dup = |t: &str| {
            let t = t.strip_suffix('-').unwrap_or(t);
            t.chars().all(|c| c.is_ascii_digit())
        };
        let writes = match *op {
            "<" | "<<<" | "<&" => false,
            ">&" => !is_fd_dup(&target.raw),
            "<<" | "<<-" => {
                let expands = !target.raw.contains(['\'', '"', '\\']);
                let delimiter = unquote(&target.raw);
                self.heredocs.push(Heredoc {
                    delimiter,
                    strip_tabs: *op == "<<-",
                    expands,
                    level: self.depth,
                });
                false
            }
            _ => true,
        };
        let harmless = target
            .literal
            .as_deref()
            .is_some_and(|t| HARMLESS_TARGETS.contains(&t));
        if writes && !harmless {
            self.writes.push(FileWrite {
                op: op_text,
                target,
            });
        }
        Ok(())
    }

    /// Reads the bodies of the here-documents opened on the line just ended.
    fn read_heredocs(&mut self) -> Result<(), String> {
        if self.heredocs.iter().any(|h| h.level != self.depth) {
            return Err("a here-document spans a substitution".to_string());
        }
        for heredoc in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            loop {
                if self.pos >= self.chars.len() {
                    return Err(format!(
                        "the here-document ending with `{}` is not terminated",
                        heredoc.delimiter
                    ));
                }
                let start = self.pos;
                while self.peek().is_some_and(|c| c != '\n') {
                    self.pos += 1;
                }
                let line: String = self.chars[start..self.pos].iter().collect();
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
                let compared = if heredoc.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line.as_str()
                };
                if compared == heredoc.delimiter {
                    break;
                }
                if heredoc.expands && line.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1
                {
                    // bash joins this line with the next before looking for
                    // the delimiter; refuse rather than model it.
                    return Err(
                        "a line continuation inside a here-document is not supported".to_string(),
                    );
                }
                body.push_str(&line);
                body.push('\n');
            }
            self.token(&format!("{body}{}", heredoc.delimiter));
            if heredoc.expands {
                let mut sub = Lexer::new(&body, self.depth + 1);
                sub.scan_expansions()?;
                self.absorb(sub);
            }
        }
        Ok(())
    }

    /// Finds the substitutions in text where quotes are plain characters (a
    /// here-document body).
    fn scan_expansions(&mut self) -> Result<(), String> {
        if self.depth >= MAX_DEPTH {
            return Err("the command nests too deeply".to_string());
        }
        let mut sink = String::new();
        while let Some(c) = self.peek() {
            match c {
                '\\' => self.pos += 2,
                '$' => self.dollar(&mut sink, true)?,
                '`' => self.backticks(&mut sink, false)?,
                _ => self.pos += 1,
            }
        }
        Ok(())
    }

    /// Takes over what a sub-lexer found (its tokens stay inside a word).
    fn absorb(&mut self, sub: Lexer) {
        self.commands.extend(sub.commands);
        self.writes.extend(sub.writes);
        self.changes_dir |= sub.changes_dir;
    }

    /// Reads one word (at a character that does not end words, or at `<(`
    /// / `>(`).
    fn read_word(&mut self) -> Result<Word, String> {
        let mut raw = String::new();
        while let Some(c) = self.peek() {
            match c {
                '<' | '>' if self.peek_at(1) == Some('(') => {
                    raw.push(c);
                    raw.push('(');
                    self.pos += 2;
                    let start = self.pos;
                    self.nested(true, |l| l.parse_list(true))?;
                    raw.extend(&self.chars[start..self.pos]);
                }
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

    /// `'…'`: everything up to the next `'` is data.
    fn single_quoted(&mut self, raw: &mut String) -> Result<(), String> {
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
                Some(c) => {
                    if c == '\n' {
                        self.newline_in_word()?;
                    }
                    raw.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// `"…"`: data, except `$(…)`, `${…}` and backticks, which still run.
    fn double_quoted(&mut self, raw: &mut String) -> Result<(), String> {
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
                Some('\\') => match self.peek_at(1) {
                    Some('\n') => self.pos += 2,
                    Some(n) => {
                        raw.push('\\');
                        raw.push(n);
                        self.pos += 2;
                    }
                    None => return Err("unterminated double quote".to_string()),
                },
                Some('$') => self.dollar(raw, true)?,
                Some('`') => self.backticks(raw, true)?,
                Some(c) => {
                    if c == '\n' {
                        self.newline_in_word()?;
                    }
                    raw.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// At a `$`: `$(…)`, `${…}`, and outside double quotes `$'…'` and
    /// `$"…"`; anything else is a plain `$`.
    fn dollar(&mut self, raw: &mut String, in_double_quotes: bool) -> Result<(), String> {
        match self.peek_at(1) {
            Some('(') => {
                raw.push_str("$(");
                self.pos += 2;
                let start = self.pos;
                self.nested(true, |l| l.parse_list(true))?;
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
                        Some(c) => {
                            if c == '\n' {
                                self.newline_in_word()?;
                            }
                            raw.push(c);
                            self.pos += 1;
                        }
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
    fn backticks(&mut self, raw: &mut String, in_double_quotes: bool) -> Result<(), String> {
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
        if self.depth >= MAX_DEPTH {
            return Err("the command nests too deeply".to_string());
        }
        let mut sub = Lexer::new(&inner, self.depth + 1);
        sub.parse_list(false)?;
        self.absorb(sub);
        Ok(())
    }
}

/// The text of `raw` after quote removal, when it has no expansion.
fn literal_text(raw: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    if raw.starts_with('~') {
        return None;
    }
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next().unwrap_or('\\')),
            '\'' => {
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    out.push(c);
                }
            }
            '"' => loop {
                match chars.next() {
                    None | Some('"') => break,
                    Some('$' | '`') => return None,
                    Some('\\') => match chars.next() {
                        Some(n @ ('$' | '`' | '"' | '\\')) => out.push(n),
                        Some(n) => {
                            out.push('\\');
                            out.push(n);
                        }
                        None => out.push('\\'),
                    },
                    Some(c) => out.push(c),
                }
            },
            '$' | '`' | '*' | '?' | '[' | '{' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// A here-document delimiter after quote removal (quotes only mark it as
/// not expanding; `$` stays as written).
fn unquote(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '\'' | '"' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(command: &str) -> Vec<String> {
        match split_compound(command) {
            Ok(parts) => parts,
            Err(e) => vec![format!("ERROR: {e}")],
        }
    }

    #[test]
    fn separators_split_commands() {
        assert_eq!(parts("git status"), ["git status"]);
        assert_eq!(parts("  git   status  "), ["git status"]);
        assert_eq!(
            parts("a && b || c; d | e |& f & g"),
            ["a", "b", "c", "d", "e", "f", "g"]
        );
        assert_eq!(parts("a\nb"), ["a", "b"]);
        assert_eq!(parts("a;;b"), ["a", "b"]);
        assert_eq!(parts("git status;"), ["git status"]);
        assert_eq!(parts("(a; b) && c"), ["a", "b", "c"]);
        assert_eq!(parts(""), Vec::<String>::new());
    }

    #[test]
    fn quotes_keep_operators_as_data() {
        assert_eq!(parts("echo \"a && b\""), ["echo \"a && b\""]);
        assert_eq!(parts("echo 'a; b | c'"), ["echo 'a; b | c'"]);
        assert_eq!(parts("echo a\\;b"), ["echo a\\;b"]);
        assert_eq!(parts("echo \\\"a && b\\\""), ["echo \\\"a", "b\\\""]);
        assert_eq!(parts("echo \"it's\" && x"), ["echo \"it's\"", "x"]);
    }

    #[test]
    fn substitutions_are_commands() {
        assert_eq!(parts("echo $(rm -rf x)"), ["rm -rf x", "echo $(rm -rf x)"]);
        assert_eq!(
            parts("echo \"$(rm -rf x)\""),
            ["rm -rf x", "echo \"$(rm -rf x)\""]
        );
        assert_eq!(parts("echo `rm -rf x`"), ["rm -rf x", "echo `rm -rf x`"]);
        assert_eq!(
            parts("echo \"`rm -rf x`\""),
            ["rm -rf x", "echo \"`rm -rf x`\""]
        );
        assert_eq!(parts("echo '$(not run)'"), ["echo '$(not run)'"]);
        assert_eq!(
            parts("diff <(ls a) >(wc)"),
            ["ls a", "wc", "diff <(ls a) >(wc)"]
        );
        assert_eq!(parts("echo ${x:-$(id)}"), ["id", "echo ${x:-$(id)}"]);
        assert_eq!(parts("echo $(a $(b))"), ["b", "a $(b)", "echo $(a $(b))"]);
    }

    #[test]
    fn ansi_c_quotes_escape_their_quote() {
        // bash: `$'\''` is the word `'`; the rm runs.
        assert_eq!(parts("echo $'\\''\nrm -rf x"), ["echo $'\\''", "rm -rf x"]);
        assert_eq!(parts("echo $'a;b'"), ["echo $'a;b'"]);
    }

    #[test]
    fn comments_end_at_the_line() {
        assert_eq!(parts("git status #&& rm"), ["git status"]);
        assert_eq!(parts("git status#&& rm"), ["git status#", "rm"]);
        assert_eq!(parts("git status # x\nrm y"), ["git status", "rm y"]);
    }

    #[test]
    fn redirections() {
        assert_eq!(parts("cargo test 2>&1"), ["cargo test"]);
        assert_eq!(parts("cargo test >/dev/null 2>&1"), ["cargo test"]);
        assert_eq!(parts("echo hi > out.txt"), ["echo hi", "> out.txt"]);
        assert_eq!(parts("echo hi>>out.txt"), ["echo hi", ">> out.txt"]);
        assert_eq!(parts("make 2> err.log"), ["make", "2> err.log"]);
        assert_eq!(parts("make &> all.log"), ["make", "&> all.log"]);
        assert_eq!(parts("make >& all.log"), ["make", ">& all.log"]);
        assert_eq!(parts("cat < in.txt"), ["cat"]);
        assert_eq!(parts("exec 3<> f"), ["exec", "3<> f"]);
        assert_eq!(parts("echo 2>x"), ["echo", "2> x"]);
        assert_eq!(parts("echo a2>x"), ["echo a2", "> x"]);
        assert!(parts("echo >").join("").starts_with("ERROR"));
    }

    #[test]
    fn heredocs() {
        assert_eq!(
            parts("cat <<EOF\nrm -rf x\nEOF\necho done"),
            ["cat", "echo done"]
        );
        assert_eq!(parts("cat <<EOF\n$(rm -rf x)\nEOF"), ["cat", "rm -rf x"]);
        assert_eq!(parts("cat <<'EOF'\n$(rm -rf x)\nEOF"), ["cat"]);
        assert_eq!(parts("cat <<-EOF\n\tit's\n\tEOF\nls"), ["cat", "ls"]);
        assert!(parts("cat <<EOF\nno end").join("").starts_with("ERROR"));
        // bash would join `x\` with `EOF` and read on to the second EOF.
        assert!(
            parts("cat <<EOF\nx\\\nEOF\nit's\nEOF\nrm -rf y\necho '")
                .join("")
                .starts_with("ERROR")
        );
        assert_eq!(parts("cat <<'EOF'\nx\\\nEOF\nls"), ["cat", "ls"]);
        assert_eq!(parts("cat <<EOF\nx\\\\\nEOF\nls"), ["cat", "ls"]);
    }

    #[test]
    fn unreadable_lines_are_errors() {
        for bad in [
            "echo 'a",
            "echo \"a",
            "echo $(a",
            "echo `a",
            "echo a)",
            "echo ${x:-'a'}",
            "echo $'a",
            "echo \"`echo \\\"x\\\"`\"",
        ] {
            assert!(
                split_compound(bad).is_err(),
                "{bad:?} should not be readable"
            );
        }
    }

    #[test]
    fn line_continuations_join_words() {
        assert_eq!(parts("cargo \\\n  test"), ["cargo test"]);
        assert_eq!(parts("car\\\ngo test"), ["cargo test"]);
    }

    #[test]
    fn literal_text_removes_quotes() {
        assert_eq!(literal_text("'a b'"), Some("a b".to_string()));
        assert_eq!(literal_text("\"a\\\"b\""), Some("a\"b".to_string()));
        assert_eq!(literal_text("r''m"), Some("rm".to_string()));
        assert_eq!(literal_text("\\rm"), Some("rm".to_string()));
        assert_eq!(literal_text("$x"), None);
        assert_eq!(literal_text("\"$x\""), None);
        assert_eq!(literal_text("'$x'"), Some("$x".to_string()));
        assert_eq!(literal_text("*.rs"), None);
        assert_eq!(literal_text("~/x"), None);
    }

    #[test]
    fn normalized_form_and_simplicity() {
        let s = parse("git   status").unwrap();
        assert!(s.is_simple());
        assert_eq!(s.normalized, "git status");
        let s = parse("git status\n  ls   -l # hi\n").unwrap();
        assert_eq!(s.normalized, "git status ; ls -l ;");
        assert!(!parse("a && b").unwrap().is_simple());
        assert!(!parse("a 2>&1").unwrap().is_simple());
        assert!(!parse("echo $(a)").unwrap().is_simple());
        assert!(parse("cd src && ls").unwrap().changes_dir);
    }
}
