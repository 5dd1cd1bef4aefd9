//! A conservative reading of a bash command line, for permission rules.
//!
//! It does not run or expand anything. It finds what bash would execute —
//! every simple command, including those inside `$(…)`, backticks, `<(…)`,
//! `>(…)`, subshells, unquoted here-documents and the bodies of compound
//! commands (`for`, `while`, `until`, `if`, `case`, `{ …; }`, functions) —
//! every arithmetic expression (which can run commands through the values
//! of variables) and every redirection that writes a file. Whatever it
//! cannot read with certainty is an error, and the policy asks rather than
//! allows.
//!
//! Reserved words (`for`, `do`, `done`, `if`, `then`, `fi`, `case`, `{`, …)
//! are read where bash reads them, at the start of a command, and are not
//! commands; the words of a `for` list and the patterns of a `case` are
//! data, but the substitutions in them run. A function's body counts as
//! run where it is defined: the reading may see *more* commands than bash
//! runs, never fewer.
//!
//! Words keep their source text (quotes included, line continuations
//! removed): two words are the same when their text is the same, so
//! `git "status"` is not `git status` for an allow rule. That only ever
//! asks more often.

mod wrappers;

/// How deep substitutions, subshells and compound commands may nest.
const MAX_DEPTH: usize = 32;

/// How many times `((` may turn out not to be arithmetic and be read
/// again as subshells: each retry re-reads what is inside, so nested ones
/// could otherwise take exponential time.
const MAX_REREADS: usize = 64;

/// Redirection targets that write nothing anyone cares about.
const HARMLESS_TARGETS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr"];

/// Commands that change the shell's directory, after which a relative
/// redirection target no longer means what it says.
const CHANGES_DIR: &[&str] = &["cd", "pushd", "popd"];

/// Reserved words that open a compound command.
const COMPOUND_STARTS: &[&str] = &["{", "if", "while", "until", "for", "select", "case", "[["];

/// Reserved words that go on or close a compound command: bash also
/// reads them right after one (`if (true) then …`, `{ (cd x) }`).
const CLOSERS: &[&str] = &["}", "then", "elif", "else", "fi", "do", "done", "esac"];

/// Every reserved word the reading knows (`in` only counts inside `for`
/// and `case`, where those readers look for it).
const RESERVED: &[&str] = &[
    "{", "}", "if", "then", "elif", "else", "fi", "while", "until", "do", "done", "for", "select",
    "case", "esac", "[[", "!", "time", "function",
];

/// `[[ … ]]` operators that evaluate their operands as arithmetic (or, for
/// `-v`, an array subscript): a variable's value can run a command there.
const ARITHMETIC_TESTS: &[&str] = &["-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v"];

/// Lower-case variables programs read from the environment; a loop over
/// one of them changes what the commands in the loop do.
const LOWERCASE_ENVIRONMENT: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "ftp_proxy",
    "no_proxy",
    "all_proxy",
];

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

    /// A word whose text is unknown (a command line held in a variable).
    fn unknown(raw: &str) -> Word {
        Word {
            raw: raw.to_string(),
            literal: None,
        }
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
    /// nested ones included. A `[[ … ]]` test that does arithmetic is one
    /// too, and so is the header of a `for` loop over a variable that
    /// programs read from the environment (`for PATH in …`).
    pub commands: Vec<Vec<Word>>,
    /// Every redirection that writes a file.
    pub writes: Vec<FileWrite>,
    /// Every arithmetic expression, as written: `((i++))`, `$((n + 1))`,
    /// the `((…))` of a `for` loop.
    pub arithmetic: Vec<String>,
    /// Commands that other commands run: `rm x` in `xargs rm x`,
    /// `find . -exec rm {} ;`, `sudo rm x`, `FOO=1 rm x`, `sh -c 'rm x'`.
    /// They are in `commands` already as the command that runs them.
    pub wrapped: Vec<Vec<Word>>,
    /// The file writes of command lines that commands run (`sh -c 'echo >
    /// f'`).
    pub wrapped_writes: Vec<FileWrite>,
    /// The top-level tokens joined by single spaces (comments and line
    /// continuations dropped, newlines as `;`), for exact whole-line rules.
    pub normalized: String,
    /// Some command changes the directory (`cd`, `pushd`, `popd`).
    pub changes_dir: bool,
    /// The line has a compound command (a loop, a test, a group, a
    /// subshell, a function).
    pub compound: bool,
}

impl Script {
    /// Whether the line is one simple command with no redirection, no
    /// substitution and no arithmetic: its words are all there is to it.
    pub fn is_simple(&self) -> bool {
        match self.commands.as_slice() {
            [only] => {
                self.writes.is_empty()
                    && self.arithmetic.is_empty()
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
    parse_at(command, 0)
}

/// Reads `command` found `depth` levels deep (inside `sh -c '…'`, say).
fn parse_at(command: &str, depth: usize) -> Result<Script, String> {
    if depth >= MAX_DEPTH {
        return Err("the command nests too deeply".to_string());
    }
    let mut lexer = Lexer::new(command, depth);
    lexer.parse_list(Stop::TEXT)?;
    Ok(lexer.finish())
}

/// The parts of a shell command line that permission rules judge, as
/// text: each simple command (its words joined by single spaces), then
/// each redirection that writes a file as `<operator> <target>` (e.g.
/// `> out.txt`), then each arithmetic expression. Commands inside `$(…)`,
/// backticks, `<(…)`, `>(…)`, subshells, unquoted here-documents and
/// compound commands are included; reserved words (`for`, `do`, `done`,
/// …) are not commands and are not listed. An error when the line cannot
/// be read with certainty (unbalanced quotes, an unterminated substitution
/// or loop, …).
pub fn split_compound(command: &str) -> Result<Vec<String>, String> {
    let script = parse(command)?;
    let mut parts: Vec<String> = script.commands.iter().map(|w| join_words(w)).collect();
    parts.extend(
        script
            .writes
            .iter()
            .map(|w| format!("{} {}", w.op, w.target.raw)),
    );
    parts.extend(script.arithmetic.iter().cloned());
    Ok(parts)
}

/// The words of a command joined by single spaces.
pub(crate) fn join_words(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| w.raw.as_str())
        .collect::<Vec<_>>()
        .join(" ")
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

/// What ends a list of commands.
#[derive(Debug, Clone, Copy)]
struct Stop {
    /// A `)` closes it (a subshell, `$(…)`, `<(…)`, `>(…)`).
    paren: bool,
    /// Reserved words that end it (`done`, `fi`, …) when they start a
    /// command.
    words: &'static [&'static str],
    /// `;;`, `;&` and `;;&` end it (a clause of a `case`).
    case_clause: bool,
}

impl Stop {
    /// The whole text.
    const TEXT: Stop = Stop {
        paren: false,
        words: &[],
        case_clause: false,
    };
    /// Up to the `)` that closes a subshell or substitution.
    const PAREN: Stop = Stop {
        paren: true,
        words: &[],
        case_clause: false,
    };

    /// Up to one of `words`.
    fn words(words: &'static [&'static str]) -> Stop {
        Stop {
            paren: false,
            words,
            case_clause: false,
        }
    }
}

/// How a list of commands ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Text,
    Paren,
    Word(&'static str),
    CaseClause,
}

/// The simple command being read.
#[derive(Debug, Default)]
struct Cmd {
    words: Vec<Word>,
    /// A redirection was read: a reserved word is an ordinary word now.
    redirected: bool,
    /// A compound command ended here: only redirections may follow.
    compound: bool,
}

impl Cmd {
    /// Whether the next word starts the command (where reserved words
    /// count).
    fn at_start(&self) -> bool {
        self.words.is_empty() && !self.redirected && !self.compound
    }
}

/// Where the reading stands, to go back to when `((` turns out not to be
/// arithmetic.
#[derive(Debug, Clone, Copy)]
struct Mark {
    pos: usize,
    commands: usize,
    writes: usize,
    arithmetic: usize,
    tokens: usize,
    heredocs: usize,
    changes_dir: bool,
}

#[derive(Debug)]
struct Lexer {
    chars: Vec<char>,
    pos: usize,
    /// Nesting of substitutions and subshells (here-documents must end on
    /// the level they were opened on).
    depth: usize,
    /// Nesting of compound commands (for the recursion limit only).
    compound_depth: usize,
    /// Non-zero while reading inside a word: tokens are not recorded then.
    in_word: usize,
    /// Reading the elements of an array assignment.
    in_array: bool,
    heredocs: Vec<Heredoc>,
    commands: Vec<Vec<Word>>,
    writes: Vec<FileWrite>,
    arithmetic: Vec<String>,
    tokens: Vec<String>,
    changes_dir: bool,
    compound: bool,
    /// `((` read again as subshells so far.
    rereads: usize,
    /// A newline here ends a command (it is not right after `;`, `&&`,
    /// `do`, … or at the start).
    line_open: bool,
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

/// The reserved word `raw` is, if it is one (unquoted, exactly).
fn reserved(raw: &str) -> Option<&'static str> {
    RESERVED.iter().copied().find(|r| *r == raw)
}

/// A shell variable name.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether a word is a variable assignment (`NAME=…`, `NAME+=…`,
/// `NAME[i]=…`).
pub(crate) fn is_assignment(raw: &str) -> bool {
    let Some(eq) = raw.find('=') else {
        return false;
    };
    let name = raw[..eq].strip_suffix('+').unwrap_or(&raw[..eq]);
    let name = match name.find('[') {
        Some(open) if name.ends_with(']') => &name[..open],
        Some(_) => return false,
        None => name,
    };
    is_name(name)
}

/// Whether a loop over the variable `name` changes what programs see in
/// their environment (`PATH`, `LD_PRELOAD`, `http_proxy`, …): variables
/// with a capital letter are taken as possibly exported.
fn is_environment_name(name: &str) -> bool {
    name.chars().any(|c| c.is_ascii_uppercase()) || LOWERCASE_ENVIRONMENT.contains(&name)
}

impl Lexer {
    fn new(text: &str, depth: usize) -> Lexer {
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

    fn finish(mut self) -> Script {
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

    /// Whether the text goes on with the word `word` (followed by a
    /// character that ends words, or by nothing).
    fn at_word(&self, word: &str) -> bool {
        self.starts_with(word) && self.peek_at(word.chars().count()).is_none_or(ends_word)
    }

    /// Records a token after which a newline ends a command (a word, a
    /// redirection, a closing `done`).
    fn token(&mut self, t: &str) {
        if self.in_word == 0 {
            self.tokens.push(t.to_string());
            self.line_open = true;
        }
    }

    /// Records a token after which a newline adds nothing (`;`, `&&`,
    /// `do`, `then`, `{`, `(`).
    fn sep_token(&mut self, t: &str) {
        if self.in_word == 0 {
            self.tokens.push(t.to_string());
            self.line_open = false;
        }
    }

    /// Records a reserved word read at the start of a command.
    fn reserved_token(&mut self, word: &str) {
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

    fn mark(&self) -> Mark {
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

    fn back_to(&mut self, m: Mark) {
        self.pos = m.pos;
        self.commands.truncate(m.commands);
        self.writes.truncate(m.writes);
        self.arithmetic.truncate(m.arithmetic);
        self.tokens.truncate(m.tokens);
        self.heredocs.truncate(m.heredocs);
        self.changes_dir = m.changes_dir;
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

    /// Skips a comment, up to (not including) the end of its line.
    fn skip_comment(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.pos += 1;
        }
    }

    /// Skips blanks, comments and newlines (reading the here-documents
    /// that start after them), where the grammar allows line breaks.
    fn skip_space(&mut self) -> Result<(), String> {
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

    fn push_command(&mut self, words: Vec<Word>) {
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
    fn check_depth(&self) -> Result<(), String> {
        if self.depth + self.compound_depth >= MAX_DEPTH {
            Err("the command nests too deeply".to_string())
        } else {
            Ok(())
        }
    }

    /// Runs `f` one nesting level deeper.
    fn nested(
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
    fn newline_in_word(&self) -> Result<(), String> {
        if self.heredocs.is_empty() {
            Ok(())
        } else {
            Err("a here-document starts inside a quoted string or substitution".to_string())
        }
    }

    /// Reads commands up to what `stop` names (consumed) or the end of
    /// the text.
    fn parse_list(&mut self, stop: Stop) -> Result<End, String> {
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
    fn list_until(&mut self, words: &'static [&'static str]) -> Result<&'static str, String> {
        match self.parse_list(Stop::words(words))? {
            End::Word(w) => Ok(w),
            // Not reached: the other ends are errors for this stop.
            End::Text | End::Paren | End::CaseClause => Err(format!(
                "unterminated compound command: `{}` expected",
                words.join("`, `")
            )),
        }
    }

    /// The compound command that `word` (its token recorded) opens.
    fn compound(&mut self, word: &str) -> Result<(), String> {
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
                Some(c)
                    if ends_word(c)
                        && !(matches!(c, '<' | '>') && self.peek_at(1) == Some('(')) =>
                {
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
                '\\' => match self.peek_at(1) {
                    Some('\n') => self.pos += 2,
                    Some(n) => {
                        raw.push('\\');
                        raw.push(n);
                        self.pos += 2;
                    }
                    None => return Err("unterminated `[[`: `]]` expected".to_string()),
                },
                '\'' => self.single_quoted(&mut raw)?,
                '"' => self.double_quoted(&mut raw)?,
                '$' => self.dollar(&mut raw, false)?,
                '`' => self.backticks(&mut raw, false)?,
                c => {
                    if c == '\n' {
                        self.newline_in_word()?;
                    }
                    raw.push(c);
                    self.pos += 1;
                }
            }
        }
        if raw.is_empty() {
            return Err("`=~` needs a pattern".to_string());
        }
        Ok(Word::new(raw))
    }

    /// At a `(` that starts a command: `((…))` arithmetic, or a subshell.
    fn paren_compound(&mut self) -> Result<(), String> {
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
    fn arithmetic_text(&mut self) -> Result<Option<String>, String> {
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
    fn is_function_parens(&self, cmd: &Cmd) -> bool {
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
    fn function_definition(&mut self, cmd: &mut Cmd) -> Result<(), String> {
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
    fn function_keyword(&mut self) -> Result<(), String> {
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
            self.sep_token(&format!("{body}{}", heredoc.delimiter));
            if heredoc.expands {
                let mut sub = Lexer::new(&body, self.depth + self.compound_depth + 1);
                sub.scan_expansions()?;
                self.absorb(sub);
            }
        }
        Ok(())
    }

    /// Finds the substitutions in text where quotes are plain characters (a
    /// here-document body).
    fn scan_expansions(&mut self) -> Result<(), String> {
        self.check_depth()?;
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
        self.arithmetic.extend(sub.arithmetic);
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
                Some(c)
                    if ends_word(c)
                        && !(matches!(c, '<' | '>') && self.peek_at(1) == Some('(')) =>
                {
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
        self.check_depth()?;
        let mut sub = Lexer::new(&inner, self.depth + self.compound_depth + 1);
        sub.parse_list(Stop::TEXT)?;
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
            '[' if chars.clone().any(|c| c == ']') => return None,
            '$' | '`' | '*' | '?' | '{' => return None,
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

/// A function name this reading accepts: plain text, no `=` or `/`, not a
/// reserved word.
fn is_function_name(name: &str) -> bool {
    !name.is_empty()
        && reserved(name).is_none()
        && literal_text(name).as_deref() == Some(name)
        && !name.contains(['=', '/'])
}

#[cfg(test)]
mod tests;
