//! Permission rules: `tool` or `tool(pattern)`, with an action.

use super::paths;
use super::shell::{self, Script, Word};
use crate::tools::{Subject, Tool};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a rule (or the doom-loop setting) does to a call it matches.
///
/// Ordered by strength: when several rules match, the strongest wins
/// (deny beats ask beats allow).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Run it without asking.
    Allow,
    /// Ask a user first.
    #[default]
    Ask,
    Deny,
}

impl Action {
    /// The config and wire name: `allow`, `ask`, `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Action {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Action, RuleError> {
        match s.trim() {
            "allow" => Ok(Action::Allow),
            "ask" => Ok(Action::Ask),
            "deny" => Ok(Action::Deny),
            other => Err(RuleError::UnknownAction {
                action: other.to_string(),
            }),
        }
    }
}

/// What the pattern of a rule describes, decided by the rule's tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatternKind {
    /// A bash command line.
    Command,
    /// A glob over files written. A path rule on any tool that writes
    /// files applies to every file write: those tools, and a bash
    /// redirection to a file (`> out.txt`).
    WrittenPath,
    /// A glob over files read or directories searched. A path rule on any
    /// tool that reads applies to all of them.
    ReadPath,
    /// A background shell's id.
    ShellId,
    /// A web host: `domain:HOST` or `domain:*.HOST`.
    Domain,
    /// Nothing the tool's input holds, so the pattern never matches: tools
    /// without a subject, and names the daemon does not have.
    Nothing,
}

impl PatternKind {
    /// The kind of pattern a rule on the tool called `tool` has.
    pub(crate) fn of(tool: &str) -> PatternKind {
        match Tool::from_name(tool).map(Tool::subject) {
            Some(Subject::CommandLine) => PatternKind::Command,
            Some(Subject::WrittenFile | Subject::PatchedFiles) => PatternKind::WrittenPath,
            Some(Subject::ReadFile | Subject::SearchedDir) => PatternKind::ReadPath,
            Some(Subject::ShellId) => PatternKind::ShellId,
            Some(Subject::Domain) => PatternKind::Domain,
            Some(Subject::Nothing) | None => PatternKind::Nothing,
        }
    }

    /// Whether the pattern is a path glob.
    pub(crate) fn is_path(self) -> bool {
        match self {
            PatternKind::WrittenPath | PatternKind::ReadPath => true,
            PatternKind::Command
            | PatternKind::ShellId
            | PatternKind::Domain
            | PatternKind::Nothing => false,
        }
    }
}

/// A permission rule: `tool` matches every call of the tool; `tool(pattern)`
/// matches the calls the pattern describes.
///
/// Patterns by tool:
/// - `bash(git status)`: exactly that command line (whitespace between
///   words does not count, quotes do). A simple command also matches as
///   one part of a compound line; a compound pattern
///   (`bash(cargo fmt && cargo test)`) matches only the whole line.
/// - `bash(cargo test:*)`: simple commands whose first words are
///   `cargo test` (`cargo test -p x`, not `cargo testing`).
/// - `write(src/**)`, `edit(*.md)`, `patch(/tmp/**)`: a glob over the file
///   written, relative to the working directory unless absolute (`*` stays
///   within a directory, `**` crosses them). The three tool names are
///   interchangeable here: a path rule on any of them applies to every
///   file write (write, edit, each file of a patch, a bash redirection).
/// - `read(/etc/**)`, likewise for `glob`, `grep`, `keyword_search`: a glob
///   over the file read or the directory searched.
/// - `kill_shell(sh-1)`, `bash_output(sh-1)`: that shell id.
/// - `web_fetch(domain:docs.rs)`: fetches from that host;
///   `web_fetch(domain:*.rust-lang.org)`: from any host below it.
/// - any other tool: the pattern never matches (its input has nothing
///   the pattern could describe).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    pub tool: String,
    /// What the rule matches within the tool's calls; `None`: every call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    pub action: Action,
}

/// Why a rule's text is not a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleError {
    /// Nothing but white space.
    Empty,
    /// `(pattern)` with no tool in front.
    EmptyToolName {
        /// The rule as given.
        rule: String,
    },
    /// A tool name with characters tools do not have.
    InvalidToolName {
        /// The rule as given.
        rule: String,
    },
    /// A `(` without its `)` or the other way round.
    UnbalancedParenthesis {
        /// The rule as given.
        rule: String,
    },
    /// Text after the closing `)`.
    TextAfterPattern {
        /// The rule as given.
        rule: String,
    },
    /// `tool()`.
    EmptyPattern {
        /// The rule as given.
        rule: String,
    },
    /// A pattern the tool cannot use.
    InvalidPattern {
        /// The rule as given.
        rule: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `FromStr` needs `<action> <rule>`.
    MissingAction {
        /// The text as given.
        text: String,
    },
    /// Not one of `allow`, `ask`, `deny`.
    UnknownAction {
        /// The word given.
        action: String,
    },
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleError::Empty => f.write_str("empty rule"),
            RuleError::EmptyToolName { rule } => write!(f, "empty tool name in rule `{rule}`"),
            RuleError::InvalidToolName { rule } => write!(
                f,
                "invalid tool name in rule `{rule}` (letters, digits, `_`, `-` and `.` only)"
            ),
            RuleError::UnbalancedParenthesis { rule } => {
                write!(f, "unbalanced parenthesis in rule `{rule}`")
            }
            RuleError::TextAfterPattern { rule } => {
                write!(f, "unexpected text after `)` in rule `{rule}`")
            }
            RuleError::EmptyPattern { rule } => write!(
                f,
                "empty pattern in rule `{rule}` (write the tool name alone to match every call)"
            ),
            RuleError::InvalidPattern { rule, reason } => {
                write!(f, "invalid pattern in rule `{rule}`: {reason}")
            }
            RuleError::MissingAction { text } => write!(
                f,
                "missing action in rule `{text}`: write `allow {text}`, `ask {text}` or `deny {text}`"
            ),
            RuleError::UnknownAction { action } => write!(
                f,
                "unknown action `{action}` (expected `allow`, `ask` or `deny`)"
            ),
        }
    }
}

impl std::error::Error for RuleError {}

impl Rule {
    /// Parses `tool` or `tool(pattern)` and checks the pattern suits the
    /// tool. The action comes separately (config files list rules under
    /// `allow`/`ask`/`deny`; answers know theirs).
    pub fn parse(text: &str, action: Action) -> Result<Rule, RuleError> {
        let rule = text.trim();
        if rule.is_empty() {
            return Err(RuleError::Empty);
        }
        let own = || rule.to_string();
        let (tool, pattern) = match rule.find('(') {
            None => {
                if rule.contains(')') {
                    return Err(RuleError::UnbalancedParenthesis { rule: own() });
                }
                (rule, None)
            }
            Some(open) => {
                let Some(close) = rule.rfind(')').filter(|c| *c > open) else {
                    return Err(RuleError::UnbalancedParenthesis { rule: own() });
                };
                if close + 1 != rule.len() {
                    return Err(RuleError::TextAfterPattern { rule: own() });
                }
                (rule[..open].trim_end(), Some(rule[open + 1..close].trim()))
            }
        };
        if tool.is_empty() {
            return Err(RuleError::EmptyToolName { rule: own() });
        }
        // `mcp__github__*`: every tool of a server (or, `mcp__*`, of all
        // servers). The `*` may only end a name of MCP tools.
        let plain = match tool.strip_suffix('*') {
            Some(prefix) if prefix.starts_with(crate::tools::MCP_PREFIX) => prefix,
            _ => tool,
        };
        if !plain
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(RuleError::InvalidToolName { rule: own() });
        }
        if let Some(pattern) = pattern {
            if pattern.is_empty() {
                return Err(RuleError::EmptyPattern { rule: own() });
            }
            if PatternKind::of(tool) != PatternKind::Command && !parens_balance(pattern) {
                return Err(RuleError::UnbalancedParenthesis { rule: own() });
            }
        }
        let rule = Rule {
            tool: tool.to_string(),
            pattern: pattern.map(str::to_string),
            action,
        };
        rule.validate()?;
        Ok(rule)
    }

    /// Whether the rule is about the tool called `tool`: the same name, or
    /// for a rule on `mcp__SERVER__*` (`mcp__*`), any MCP tool whose name
    /// starts with what comes before the `*`.
    pub fn names(&self, tool: &str) -> bool {
        match self.tool.strip_suffix('*') {
            Some(prefix) if prefix.starts_with(crate::tools::MCP_PREFIX) => {
                crate::tools::mcp_parts(tool).is_some() && tool.starts_with(prefix)
            }
            _ => self.tool == tool,
        }
    }

    /// Checks that the pattern suits the tool (rules built field by field,
    /// or read back from storage, can be checked with this).
    pub fn validate(&self) -> Result<(), RuleError> {
        let Some(pattern) = &self.pattern else {
            return Ok(());
        };
        let invalid = |reason: String| RuleError::InvalidPattern {
            rule: self.to_string(),
            reason,
        };
        if pattern.trim().is_empty() {
            return Err(RuleError::EmptyPattern {
                rule: self.to_string(),
            });
        }
        match self.kind() {
            PatternKind::Command => {
                bash_pattern(pattern).map_err(|reason| {
                    if reason.contains("unbalanced") || reason.contains("unterminated `(`") {
                        RuleError::UnbalancedParenthesis {
                            rule: self.to_string(),
                        }
                    } else {
                        invalid(reason)
                    }
                })?;
            }
            PatternKind::WrittenPath | PatternKind::ReadPath => {
                paths::check_pattern(pattern).map_err(invalid)?;
            }
            PatternKind::Domain => super::domain::check_pattern(pattern).map_err(invalid)?,
            PatternKind::ShellId | PatternKind::Nothing => {}
        }
        Ok(())
    }

    /// The rule with its action, as `FromStr` reads it: `allow bash(git status)`.
    pub fn spec(&self) -> String {
        format!("{} {self}", self.action)
    }

    /// What the rule's pattern describes (whether it has one or not).
    pub(crate) fn kind(&self) -> PatternKind {
        PatternKind::of(&self.tool)
    }

    /// A path rule: a pattern on a tool that writes or reads files.
    pub(crate) fn is_path_rule(&self) -> bool {
        self.pattern.is_some() && self.kind().is_path()
    }
}

/// `tool` or `tool(pattern)`: the text [`Rule::parse`] reads.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Some(p) => write!(f, "{}({p})", self.tool),
            None => f.write_str(&self.tool),
        }
    }
}

/// Reads `<action> <rule>`, e.g. `deny bash(rm:*)`: the text of
/// [`Rule::spec`]. Use [`Rule::parse`] when the action is known apart.
impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Rule, RuleError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(RuleError::Empty);
        }
        let Some((action, rest)) = s.split_once(char::is_whitespace) else {
            return Err(if s.parse::<Action>().is_ok() {
                RuleError::Empty
            } else {
                RuleError::MissingAction {
                    text: s.to_string(),
                }
            });
        };
        let action = match action.parse::<Action>() {
            Ok(a) => a,
            // `bash(git status)` and `bash(git status) ` have no action word.
            Err(_) if action.contains('(') || Rule::parse(s, Action::Ask).is_ok() => {
                return Err(RuleError::MissingAction {
                    text: s.to_string(),
                });
            }
            Err(e) => return Err(e),
        };
        Rule::parse(rest, action)
    }
}

/// Whether the parentheses of `s` pair up.
fn parens_balance(s: &str) -> bool {
    let mut depth: i64 = 0;
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => {}
        }
    }
    depth == 0
}

/// A bash rule's pattern, read.
#[derive(Debug, Clone)]
pub(crate) enum BashPattern {
    /// `words:*`: simple commands starting with these words.
    Prefix(Vec<Word>),
    /// The whole command line, exactly (normalised).
    Exact(Script),
}

/// Reads a bash rule's pattern.
pub(crate) fn bash_pattern(pattern: &str) -> Result<BashPattern, String> {
    let pattern = pattern.trim();
    if let Some(prefix) = pattern.strip_suffix(":*") {
        let script = shell::parse(prefix)?;
        if script.commands.is_empty() {
            return Err("a prefix rule needs a command before `:*`".to_string());
        }
        if !script.is_simple() {
            return Err(
                "a prefix rule (`…:*`) must be one simple command, without `;`, `&&`, `|`, \
                 redirections or substitutions"
                    .to_string(),
            );
        }
        let words = script.commands.into_iter().next().unwrap_or_default();
        return Ok(BashPattern::Prefix(words));
    }
    let script = shell::parse(pattern)?;
    if script.commands.is_empty() && script.writes.is_empty() && script.arithmetic.is_empty() {
        return Err("the pattern has no command".to_string());
    }
    Ok(BashPattern::Exact(script))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match Rule::parse(text, Action::Allow) {
            Ok(r) => format!("parsed as {r:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_and_displays_back() {
        for text in [
            "bash",
            "bash(git status)",
            "bash(cargo test:*)",
            "write(src/**)",
            "edit(*.md)",
            "read(/etc/**)",
            "kill_shell(sh-1)",
            "web_fetch(domain:docs.rs)",
            "web_fetch(domain:*.rust-lang.org)",
            "mcp__github.create_issue",
            "bash(echo \"a && b\")",
            "bash(echo \")\")",
            "bash(cargo fmt && cargo test)",
        ] {
            let rule = Rule::parse(text, Action::Deny).unwrap();
            assert_eq!(rule.to_string(), text);
            assert_eq!(rule.action, Action::Deny);
            assert_eq!(rule.spec().parse::<Rule>().unwrap(), rule);
        }
        let r = Rule::parse("  bash ( git status )  ", Action::Ask).unwrap();
        assert_eq!(r.to_string(), "bash(git status)");
        assert_eq!(r.tool, "bash");
        assert_eq!(r.pattern.as_deref(), Some("git status"));
    }

    #[test]
    fn clear_errors() {
        assert_eq!(err(""), "empty rule");
        assert_eq!(err("(x)"), "empty tool name in rule `(x)`");
        assert_eq!(err("bash(x"), "unbalanced parenthesis in rule `bash(x`");
        assert_eq!(err("bash)"), "unbalanced parenthesis in rule `bash)`");
        assert_eq!(
            err("bash(echo $(x)"),
            "unbalanced parenthesis in rule `bash(echo $(x)`"
        );
        assert_eq!(
            err("write(a(b)"),
            "unbalanced parenthesis in rule `write(a(b)`"
        );
        assert_eq!(
            err("bash(x)y"),
            "unexpected text after `)` in rule `bash(x)y`"
        );
        assert!(err("bash()").starts_with("empty pattern in rule `bash()`"));
        assert!(err("ba sh").starts_with("invalid tool name in rule `ba sh`"));
        assert!(err("bash(a && b:*)").contains("must be one simple command"));
        assert!(err("bash(echo 'a)").contains("unterminated single quote"));
        assert!(err("write(../x/**)").contains("`..`"));
        assert!(err("write(~/x)").contains("`~`"));
        assert!(err("web_fetch(docs.rs)").contains("`domain:HOST`"));
        assert!(err("write(src/[a)").starts_with("invalid pattern in rule `write(src/[a)`"));
        assert_eq!(
            "bash(git status)".parse::<Rule>().unwrap_err().to_string(),
            "missing action in rule `bash(git status)`: write `allow bash(git status)`, \
             `ask bash(git status)` or `deny bash(git status)`"
        );
        assert_eq!(
            "permit bash".parse::<Rule>().unwrap_err().to_string(),
            "unknown action `permit` (expected `allow`, `ask` or `deny`)"
        );
    }

    #[test]
    fn actions_order_by_strength() {
        assert!(Action::Deny > Action::Ask && Action::Ask > Action::Allow);
        assert_eq!(serde_json::to_string(&Action::Deny).unwrap(), "\"deny\"");
        assert_eq!("ask".parse::<Action>().unwrap(), Action::Ask);
        assert_eq!(Action::default(), Action::Ask);
    }
}
