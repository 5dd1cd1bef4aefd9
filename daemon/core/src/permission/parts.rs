//! What a call is cut into for the rules: the commands, redirections and
//! arithmetic of a bash line, the files a tool reads or writes, a shell id.

use super::judge::Outcome;
use super::shell::{FileWrite, Script, Word};
use super::{OUTSIDE_WORKING_DIRECTORY, Policy, input_str, patch_paths, paths, searched_dir};
use crate::message::ToolCall;
use crate::tools::Subject;
use std::fmt;

/// One thing a call does, that rules judge separately.
#[derive(Debug)]
pub(super) enum Part {
    /// A simple command of a bash line.
    Command(Vec<Word>),
    /// A file read, searched or written. `path`: absolute and canonical,
    /// `None` when it cannot be known without running anything.
    File {
        shown: String,
        path: Option<String>,
        write: bool,
        search_root: bool,
    },
    /// A background shell's id.
    ShellId(String),
    /// The host a web read fetches from (as `domain::url_host` reads it).
    Domain(String),
    /// An arithmetic expression of a bash line (`((i++))`, `$((n + 1))`):
    /// a variable's value can run a command there.
    Arithmetic(String),
    /// A command (or file write) that a command of the bash line runs:
    /// only deny and ask rules judge it.
    Wrapped(Box<Part>),
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Command(words) => {
                let text: Vec<&str> = words.iter().map(|w| w.raw.as_str()).collect();
                write!(f, "`{}`", text.join(" "))
            }
            Part::File { shown, .. } => f.write_str(shown),
            Part::ShellId(id) | Part::Domain(id) => f.write_str(id),
            Part::Arithmetic(text) => write!(f, "the arithmetic `{text}`"),
            Part::Wrapped(inner) => inner.fmt(f),
        }
    }
}

impl Policy {
    /// The absolute canonical form of a path the model wrote.
    fn resolve(&self, raw: &str) -> Option<String> {
        match self.resolved_paths.get(raw) {
            Some(resolved) => paths::normalize(resolved),
            None => paths::absolute(raw, &self.cwd),
        }
    }

    /// Whether an absolute path is inside the working or an additional
    /// directory.
    pub(super) fn is_inside_roots(&self, path: &str) -> bool {
        std::iter::once(&self.cwd)
            .chain(&self.additional_dirs)
            .any(|dir| paths::is_inside(path, dir))
    }

    /// `path` as people read it: relative to the working directory when
    /// inside it.
    fn shown(&self, raw: &str, path: Option<&str>) -> String {
        match path.and_then(|p| paths::relative_to(p, &self.cwd)) {
            Some("") => ".".to_string(),
            Some(rel) => rel.to_string(),
            None => path.unwrap_or(raw).to_string(),
        }
    }

    fn file(&self, raw: &str, write: bool, search_root: bool) -> Part {
        let path = self.resolve(raw);
        Part::File {
            shown: self.shown(raw, path.as_deref()),
            path,
            write,
            search_root,
        }
    }

    /// The part a redirection of `script` that writes a file is.
    fn redirection(&self, w: &FileWrite, script: &Script) -> Part {
        let shown = format!("{} {}", w.op, w.target.raw);
        // After a `cd`, a relative target is relative to who knows where.
        let path = w
            .target
            .literal
            .as_deref()
            .filter(|t| t.starts_with('/') || !script.changes_dir)
            .and_then(|t| self.resolve(t));
        Part::File {
            shown: format!("the redirection `{shown}`"),
            path,
            write: true,
            search_root: false,
        }
    }

    /// An ask about a file written outside the working and additional
    /// directories says so, with the path it really goes to: people
    /// approve a write to `../x` without noticing where that is.
    pub(super) fn note_outside(&self, part: &Part, outcome: Outcome) -> Outcome {
        match (outcome, part) {
            (
                Outcome::Ask(reason),
                Part::File {
                    write: true,
                    path: Some(path),
                    ..
                },
            ) if !self.is_inside_roots(path) => {
                Outcome::Ask(format!("{reason}; {OUTSIDE_WORKING_DIRECTORY}{path}"))
            }
            (outcome, _) => outcome,
        }
    }

    /// The parts of `call` (whose tool has `subject`) that rules judge.
    pub(super) fn parts(
        &self,
        call: &ToolCall,
        subject: Option<Subject>,
        script: Option<&Script>,
    ) -> Vec<Part> {
        match subject {
            Some(Subject::CommandLine) => {
                let Some(script) = script else {
                    return Vec::new();
                };
                let mut parts: Vec<Part> = script
                    .commands
                    .iter()
                    .map(|words| Part::Command(words.clone()))
                    .collect();
                parts.extend(script.writes.iter().map(|w| self.redirection(w, script)));
                parts.extend(script.arithmetic.iter().cloned().map(Part::Arithmetic));
                parts.extend(
                    script
                        .wrapped
                        .iter()
                        .map(|words| Part::Wrapped(Box::new(Part::Command(words.clone())))),
                );
                parts.extend(
                    script
                        .wrapped_writes
                        .iter()
                        .map(|w| Part::Wrapped(Box::new(self.redirection(w, script)))),
                );
                parts
            }
            Some(Subject::WrittenFile) => input_str(call, "path")
                .map(|p| vec![self.file(p, true, false)])
                .unwrap_or_default(),
            Some(Subject::PatchedFiles) => input_str(call, "patch")
                .map(|patch| {
                    patch_paths(patch)
                        .iter()
                        .map(|p| self.file(p, true, false))
                        .collect()
                })
                .unwrap_or_default(),
            Some(Subject::ReadFile) => input_str(call, "path")
                .map(|p| vec![self.file(p, false, false)])
                .unwrap_or_default(),
            Some(Subject::SearchedDir) => {
                let dir = searched_dir(call).unwrap_or(".".into());
                vec![self.file(&dir, false, true)]
            }
            Some(Subject::ShellId) => input_str(call, "shell_id")
                .map(|id| vec![Part::ShellId(id.to_string())])
                .unwrap_or_default(),
            Some(Subject::Domain) => input_str(call, "url")
                .and_then(super::domain::url_host)
                .map(|host| vec![Part::Domain(host)])
                .unwrap_or_default(),
            Some(Subject::Nothing) | None => Vec::new(),
        }
    }
}
