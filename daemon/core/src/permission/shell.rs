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
//!
//! This file holds what the reading produces and the lexer's state; the
//! lexer's reading is split by grammar: `list.rs` (command lists and
//! simple commands), `compound.rs` (compound commands, arithmetic,
//! functions), `redirects.rs` (operators, redirections, here-documents),
//! `words.rs` (one word and its substitutions), and `wrappers.rs` (the
//! commands other commands run).

mod compound;
mod list;
mod redirects;
mod words;
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
    pub(super) fn is_simple(&self) -> bool {
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
