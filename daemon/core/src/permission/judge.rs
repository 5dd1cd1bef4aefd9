//! How rules hold a part: each rule's pattern read once, matched against a
//! part (quotes and spellings seen through for deny and ask rules), and the
//! outcome of a part from the strongest rule holding it, or the default.

use super::parts::Part;
use super::paths::PathGlob;
use super::rule::{self, BashPattern, PatternKind};
use super::shell::Word;
use super::{Action, Mode, Policy, Rule};
use crate::message::ToolCall;
use crate::tools::{Subject, Tool};

/// How strongly rules hold a part. `Maybe…`: a deny or ask rule that might
/// match, but the part cannot be read well enough to tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Strength {
    Allow,
    MaybeAsk,
    Ask,
    MaybeDeny,
    Deny,
}

/// A rule with its pattern read once per evaluation.
#[derive(Debug)]
pub(super) enum Compiled {
    Bare,
    Bash(BashPattern),
    Path(PathGlob),
    Text(String),
    /// A pattern that does not read (a rule built without `Rule::parse`):
    /// allows nothing, and a deny or ask rule might match anything.
    Invalid,
}

/// How one part fares.
#[derive(Debug)]
pub(super) enum Outcome {
    Allow,
    Ask(String),
    Deny(String),
}

/// Whether a pattern matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Match {
    No,
    Yes,
    /// Cannot tell (an expansion, an unknown path).
    Maybe,
}

impl Policy {
    pub(super) fn compile(&self, rule: &Rule) -> Compiled {
        let Some(pattern) = &rule.pattern else {
            return Compiled::Bare;
        };
        if rule.validate().is_err() {
            return Compiled::Invalid;
        }
        match rule.kind() {
            PatternKind::Command => match rule::bash_pattern(pattern) {
                Ok(p) => Compiled::Bash(p),
                Err(_) => Compiled::Invalid,
            },
            PatternKind::WrittenPath | PatternKind::ReadPath => {
                Compiled::Path(PathGlob::new(pattern, &self.cwd))
            }
            PatternKind::ShellId | PatternKind::Domain | PatternKind::Nothing => {
                Compiled::Text(pattern.trim().to_string())
            }
        }
    }

    /// How `rule` (compiled as `c`) holds `part`, if it matches it.
    pub(super) fn part_hit(&self, rule: &Rule, c: &Compiled, part: &Part) -> Option<Strength> {
        let applies = match part {
            Part::Wrapped(inner) => {
                return if rule.action == Action::Allow {
                    None
                } else {
                    self.part_hit(rule, c, inner)
                };
            }
            Part::Command(_) => rule.kind() == PatternKind::Command,
            Part::File { write: true, .. } => rule.kind() == PatternKind::WrittenPath,
            Part::File { write: false, .. } => rule.kind() == PatternKind::ReadPath,
            Part::ShellId(_) => rule.kind() == PatternKind::ShellId,
            Part::Domain(_) => rule.kind() == PatternKind::Domain,
            // Only rules on the whole line (`bash`, an exact line) hold it.
            Part::Arithmetic(_) => false,
        };
        if !applies {
            return None;
        }
        let strict = rule.action == Action::Allow;
        let found = match (c, part) {
            (Compiled::Bare, _) => return None, // held as a whole instead
            (Compiled::Invalid, _) => Match::Maybe,
            (Compiled::Bash(BashPattern::Prefix(prefix)), Part::Command(words)) => {
                match_words(prefix, words, false, strict)
            }
            (Compiled::Bash(BashPattern::Exact(script)), Part::Command(words)) => {
                if script.is_simple() {
                    let pattern = script.commands.first().map(Vec::as_slice).unwrap_or(&[]);
                    match_words(pattern, words, true, strict)
                } else {
                    Match::No
                }
            }
            (
                Compiled::Path(glob),
                Part::File {
                    path, search_root, ..
                },
            ) => match path {
                None => Match::Maybe,
                Some(path) => {
                    let inside = !glob.relative || self.is_inside_roots(path);
                    if glob.matches(path, *search_root) && (inside || !strict) {
                        Match::Yes
                    } else {
                        Match::No
                    }
                }
            },
            (Compiled::Text(text), Part::ShellId(id)) => {
                if text == id {
                    Match::Yes
                } else {
                    Match::No
                }
            }
            (Compiled::Text(pattern), Part::Domain(host)) => {
                if super::domain::matches(pattern, host) {
                    Match::Yes
                } else {
                    Match::No
                }
            }
            _ => Match::No,
        };
        match found {
            Match::No => None,
            Match::Yes => Some(strength(rule.action, false)),
            Match::Maybe if strict => None,
            Match::Maybe => Some(strength(rule.action, true)),
        }
    }

    /// The outcome of one part (`None`: the call has no parts) given the
    /// strongest rule holding it.
    pub(super) fn settle(
        &self,
        call: &ToolCall,
        part: Option<&Part>,
        held: Option<(Strength, &Rule)>,
    ) -> Outcome {
        let tool = call.name.as_str();
        let about = part.map(|p| format!(" ({p})")).unwrap_or_default();
        let subject = part.map_or_else(|| format!("this {tool} call"), |p| p.to_string());
        match held {
            Some((Strength::Deny, rule)) => Outcome::Deny(denied_by(tool, rule, &about)),
            Some((Strength::MaybeDeny, rule)) => Outcome::Ask(format!(
                "{subject} cannot be checked against the rule `{}`",
                rule.spec()
            )),
            _ if self.mode == Mode::Bypass => Outcome::Allow,
            Some((Strength::Ask, rule)) => {
                Outcome::Ask(format!("the rule `{}` asks about {subject}", rule.spec()))
            }
            Some((Strength::MaybeAsk, rule)) => Outcome::Ask(format!(
                "{subject} cannot be checked against the rule `{}`",
                rule.spec()
            )),
            Some((Strength::Allow, _)) => Outcome::Allow,
            None => self.default_outcome(call, part),
        }
    }

    /// What a part no rule holds gets.
    fn default_outcome(&self, call: &ToolCall, part: Option<&Part>) -> Outcome {
        let tool = call.name.as_str();
        let known = Tool::from_name(tool);
        // A web read is a read, but what it reads is anyone's: a host no
        // rule allows asks (the request names the host, so "always" can
        // allow it).
        if let Some(p @ Part::Domain(_)) = part {
            return Outcome::Ask(format!("{tool} from {p} needs permission"));
        }
        if self.is_read_only(tool) || self.runs_sandboxed_unasked(call) {
            return Outcome::Allow;
        }
        match part {
            Some(Part::File {
                write: true,
                path: Some(path),
                ..
            }) if self.accepts_edits() && self.is_inside_roots(path) => Outcome::Allow,
            Some(Part::File {
                write: true, path, ..
            }) if self.accepts_edits() => {
                let p = part.map(ToString::to_string).unwrap_or_default();
                Outcome::Ask(match path {
                    Some(_) => format!("{p} is outside the working directories"),
                    None => format!("where {p} writes cannot be known in advance"),
                })
            }
            Some(Part::File { write: true, .. })
                if known.map(Tool::subject) == Some(Subject::CommandLine) =>
            {
                Outcome::Ask(format!(
                    "{} writes a file",
                    part.map(ToString::to_string).unwrap_or_default()
                ))
            }
            Some(Part::File { .. }) => Outcome::Ask(format!(
                "{tool} {} needs permission",
                part.map(ToString::to_string).unwrap_or_default()
            )),
            Some(p @ Part::Arithmetic(_)) => Outcome::Ask(format!(
                "{tool} {p} needs permission (a variable's value can run commands there)"
            )),
            Some(p) => Outcome::Ask(format!("{tool} {p} needs permission")),
            None => Outcome::Ask(format!("{tool} needs permission")),
        }
    }
}

impl Policy {
    /// Whether file edits inside the working directories run unasked.
    fn accepts_edits(&self) -> bool {
        matches!(self.mode, Mode::AcceptEdits | Mode::Auto)
    }
}

/// The tool result of a call a rule denies: the seed's denial text, the
/// rule, and what it denied (`about`, may be empty).
pub(super) fn denied_by(tool: &str, rule: &Rule, about: &str) -> String {
    format!(
        "{} by the rule `{}`{about}",
        crate::texts::permission_denied(tool),
        rule.spec()
    )
}

/// Orders rule hits by strength; among equals, by the rule's text, so the
/// reason given does not depend on the order of the rules.
pub(super) fn strongest(a: &(Strength, &Rule), b: &(Strength, &Rule)) -> std::cmp::Ordering {
    a.0.cmp(&b.0)
        .then_with(|| (&b.1.tool, &b.1.pattern).cmp(&(&a.1.tool, &a.1.pattern)))
}

pub(super) fn strength(action: Action, maybe: bool) -> Strength {
    match (action, maybe) {
        (Action::Allow, _) => Strength::Allow,
        (Action::Ask, false) => Strength::Ask,
        (Action::Ask, true) => Strength::MaybeAsk,
        (Action::Deny, false) => Strength::Deny,
        (Action::Deny, true) => Strength::MaybeDeny,
    }
}

/// Whether `words` start with (`exact`: are) the `pattern` words.
///
/// `strict` (for allow rules): the words' text must be the same, quotes
/// included. Otherwise (deny and ask rules, which must not be dodged by
/// spelling): quotes are removed, the command is compared by its file name
/// (`/bin/rm` is `rm`), and a word with an expansion might be anything.
fn match_words(pattern: &[Word], words: &[Word], exact: bool, strict: bool) -> Match {
    if strict {
        let same = |(p, w): (&Word, &Word)| p.raw == w.raw;
        let ok = if exact {
            pattern.len() == words.len() && pattern.iter().zip(words).all(same)
        } else {
            pattern.len() <= words.len() && pattern.iter().zip(words).all(same)
        };
        return if ok { Match::Yes } else { Match::No };
    }
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    for (i, p) in pattern.iter().enumerate() {
        let Some(w) = words.get(i) else {
            return Match::No;
        };
        let Some(lit) = &w.literal else {
            return Match::Maybe;
        };
        let want = p.literal.as_deref().unwrap_or(&p.raw);
        let same = if i == 0 {
            base(lit) == base(want)
        } else {
            lit == want
        };
        if !same {
            return Match::No;
        }
    }
    if exact && words.len() > pattern.len() {
        // An expansion may come out empty; literal extra words do not.
        return if words[pattern.len()..].iter().any(|w| w.literal.is_none()) {
            Match::Maybe
        } else {
            Match::No
        };
    }
    Match::Yes
}
