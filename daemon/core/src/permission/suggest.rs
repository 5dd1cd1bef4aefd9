//! The rule an "allow always" (or "never") answer adds.

use super::paths;
use super::rule::{Action, BashPattern, Rule, bash_pattern};
use super::shell;
use crate::message::ToolCall;
use crate::tools::{Subject, Tool};

/// Programs whose second word names a subcommand: `cargo test -p x` suggests
/// `bash(cargo test:*)`. Other commands get an exact rule, so allowing
/// `rm -rf build` once for ever does not allow `rm -rf /`.
const SUBCOMMAND_PROGRAMS: &[&str] = &[
    "bun", "cargo", "deno", "docker", "dotnet", "git", "go", "gradle", "just", "kubectl", "make",
    "mvn", "npm", "pip", "pip3", "pnpm", "podman", "poetry", "rustup", "uv", "yarn",
];

/// The text of the rule an "allow always" answer to `call` adds, in a
/// conversation working in `cwd`:
/// - bash: `bash(cargo test:*)` for a subcommand of a well-known program
///   with further arguments (`cargo test -p x`); otherwise the exact line
///   (`bash(git status)`, `bash(rm -rf build)`, and compound lines such as
///   `bash(cargo fmt && cargo test)`);
/// - write/edit/patch: `edit(src/**)` for files below a directory of `cwd`
///   (their deepest common one), `edit(notes.md)` for one file at its top,
///   `edit(**)` for several there, and absolute patterns outside it;
/// - web_fetch: `web_fetch(domain:HOST)`, the host of its URL;
/// - anything else: the tool name.
///
/// When no narrow rule can be made (a bash call without a command or with
/// one that cannot be read, a file tool without a path), the tool name: see
/// [`suggest_rule`], which says so.
pub fn suggested_rule(call: &ToolCall, cwd: &str) -> String {
    suggest_rule(call, cwd).map_or_else(|| call.name.clone(), |r| r.to_string())
}

/// The rule [`suggested_rule`] describes, with action allow, or `None` when
/// the only rule would cover every call of a tool that should be scoped
/// (bash, write, edit, patch): then "always" and "never" should not be
/// offered.
pub fn suggest_rule(call: &ToolCall, cwd: &str) -> Option<Rule> {
    let input = |key: &str| call.input.get(key).and_then(serde_json::Value::as_str);
    // File writes get a rule on `edit`: a path rule on any tool that writes
    // files covers them all, and `edit` reads best.
    let edit = Tool::Edit;
    let text = match Tool::from_name(&call.name) {
        None => call.name.clone(),
        Some(tool) => match tool.subject() {
            Subject::CommandLine => format!("{tool}({})", bash_suggestion(input("command")?)?),
            Subject::WrittenFile => {
                format!("{edit}({})", files_suggestion(&[input("path")?], cwd)?)
            }
            Subject::PatchedFiles => {
                let files = paths::patch_paths(input("patch")?);
                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                format!("{edit}({})", files_suggestion(&files, cwd)?)
            }
            Subject::Domain => format!(
                "{tool}({}{})",
                super::domain::DOMAIN_PREFIX,
                super::domain::url_host(input("url")?)?
            ),
            Subject::ReadFile | Subject::SearchedDir | Subject::ShellId | Subject::Nothing => {
                tool.name().to_string()
            }
        },
    };
    Rule::parse(&text, Action::Allow).ok()
}

fn bash_suggestion(command: &str) -> Option<String> {
    let script = shell::parse(command).ok()?;
    if script.is_simple() {
        return match command_suggestion(script.commands.first()?) {
            Suggestion::Prefix(rule) => Some(rule),
            Suggestion::Exact(text) => exact(text, &script),
        };
    }
    one_command_suggestion(&script).or_else(|| exact(script.normalized.clone(), &script))
}

/// The rule for one simple command.
enum Suggestion {
    /// `prog sub:*`, for a subcommand of a well-known program with further
    /// arguments.
    Prefix(String),
    /// The command's words, exactly.
    Exact(String),
}

fn command_suggestion(words: &[shell::Word]) -> Suggestion {
    let raw: Vec<&str> = words.iter().map(|w| w.raw.as_str()).collect();
    let subcommand = words.len() > 2
        && words[0].literal.as_deref() == Some(raw[0])
        && SUBCOMMAND_PROGRAMS.contains(&raw[0])
        && is_plain_subcommand(raw[1]);
    if subcommand {
        Suggestion::Prefix(format!("{} {}:*", raw[0], raw[1]))
    } else {
        Suggestion::Exact(raw.join(" "))
    }
}

/// A compound line whose only parts are runs of one command (`for p in a
/// b; do cargo test -p "$p"; done`, `make && make`): the rule that
/// command alone would get, when the words the rule names have no
/// expansion. (`wc -l "$f"` is not suggested: allowing it everywhere would
/// let `$f` be anything, more than the loop the user saw.)
fn one_command_suggestion(script: &shell::Script) -> Option<String> {
    let compound = script.compound || script.commands.len() > 1;
    if !compound || !script.writes.is_empty() || !script.arithmetic.is_empty() {
        return None;
    }
    let mut rules = script.commands.iter().map(|words| {
        let (rule, named) = match command_suggestion(words) {
            Suggestion::Prefix(rule) => (rule, 2),
            Suggestion::Exact(rule) => (rule, words.len()),
        };
        let literal = words.iter().take(named).all(|w| w.literal.is_some());
        literal.then_some(rule)
    });
    let first = rules.next()??;
    for rule in rules {
        if rule.as_ref() != Some(&first) {
            return None;
        }
    }
    // It must read back as a rule for one simple command.
    match bash_pattern(&first).ok()? {
        BashPattern::Prefix(_) => Some(first),
        BashPattern::Exact(p) if p.is_simple() && !first.ends_with(":*") => Some(first),
        BashPattern::Exact(_) => None,
    }
}

/// `text` as an exact rule for the line `script`, if it reads back as one
/// (not as a prefix rule, and with the same normalised text).
fn exact(text: String, script: &shell::Script) -> Option<String> {
    if text.ends_with(":*") {
        return None;
    }
    match bash_pattern(&text).ok()? {
        BashPattern::Exact(p) if p.normalized == script.normalized => Some(text),
        BashPattern::Exact(_) | BashPattern::Prefix(_) => None,
    }
}

fn is_plain_subcommand(word: &str) -> bool {
    word.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A glob covering `files` (paths as the model wrote them).
fn files_suggestion(files: &[&str], cwd: &str) -> Option<String> {
    if files.is_empty() {
        return None;
    }
    let absolute: Vec<String> = files
        .iter()
        .map(|f| paths::absolute(f, cwd))
        .collect::<Option<_>>()?;
    let inside: Option<Vec<&str>> = absolute
        .iter()
        .map(|p| paths::relative_to(p, cwd).filter(|r| !r.is_empty()))
        .collect();
    if let Some(relative) = inside {
        let dir = common_dir(relative.iter().map(|r| parent(r)));
        return Some(match (relative.as_slice(), dir.as_str()) {
            ([one], "") => globset::escape(one),
            (_, "") => "**".to_string(),
            (_, dir) => format!("{}/**", globset::escape(dir)),
        });
    }
    if let [one] = absolute.as_slice() {
        return Some(globset::escape(one));
    }
    let dir = common_dir(absolute.iter().map(|p| parent(p)));
    (dir.len() > 1).then(|| format!("{}/**", globset::escape(&dir)))
}

/// The directory part of `path` (`""` for a bare file name).
fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => "",
    }
}

/// The deepest directory containing all of `dirs`.
fn common_dir<'a>(mut dirs: impl Iterator<Item = &'a str>) -> String {
    let Some(first) = dirs.next() else {
        return String::new();
    };
    let mut common: Vec<&str> = first.split('/').collect();
    for dir in dirs {
        let parts: Vec<&str> = dir.split('/').collect();
        let same = common
            .iter()
            .zip(&parts)
            .take_while(|(a, b)| a == b)
            .count();
        common.truncate(same);
    }
    let joined = common.join("/");
    if joined.is_empty() && first.starts_with('/') {
        "/".to_string()
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn suggest(name: &str, input: serde_json::Value) -> String {
        let call = ToolCall {
            id: "t".to_string(),
            name: name.to_string(),
            input,
        };
        suggested_rule(&call, "/w/p")
    }

    #[test]
    fn bash_suggestions() {
        let bash = |c: &str| suggest("bash", json!({ "command": c }));
        assert_eq!(bash("cargo test -p x"), "bash(cargo test:*)");
        assert_eq!(bash("git status"), "bash(git status)");
        assert_eq!(bash("  git   status "), "bash(git status)");
        assert_eq!(bash("git -C x status"), "bash(git -C x status)");
        assert_eq!(bash("rm -rf build"), "bash(rm -rf build)");
        assert_eq!(bash("ls"), "bash(ls)");
        assert_eq!(
            bash("git status && cargo test"),
            "bash(git status && cargo test)"
        );
        assert_eq!(bash("cargo test 2>&1"), "bash(cargo test 2>&1)");
        assert_eq!(bash("echo a:*"), "bash");
        assert_eq!(bash("echo 'unterminated"), "bash");
        assert_eq!(suggest("bash", json!({})), "bash");
    }

    #[test]
    fn file_suggestions() {
        let edit = |p: &str| suggest("edit", json!({ "path": p }));
        assert_eq!(edit("src/a.rs"), "edit(src/**)");
        assert_eq!(edit("src/x/a.rs"), "edit(src/x/**)");
        assert_eq!(edit("/w/p/src/a.rs"), "edit(src/**)");
        assert_eq!(edit("notes.md"), "edit(notes.md)");
        assert_eq!(edit("a[1].md"), "edit(a[[]1[]].md)");
        assert_eq!(edit("/tmp/x.txt"), "edit(/tmp/x.txt)");
        assert_eq!(edit("../q/x.txt"), "edit(/w/q/x.txt)");
        assert_eq!(edit("~/x"), "edit");
        assert_eq!(
            suggest("write", json!({ "path": "src/a.rs" })),
            "edit(src/**)"
        );
        let patch = "--- a/src/x/a.rs\n+++ b/src/x/a.rs\n--- a/src/y/b.rs\n+++ b/src/y/b.rs\n";
        assert_eq!(suggest("patch", json!({ "patch": patch })), "edit(src/**)");
        let patch = "--- a/a.rs\n+++ b/a.rs\n--- a/b.rs\n+++ b/b.rs\n";
        assert_eq!(suggest("patch", json!({ "patch": patch })), "edit(**)");
        assert_eq!(suggest("patch", json!({ "patch": "nothing" })), "patch");
    }

    #[test]
    fn other_tools_suggest_their_name() {
        assert_eq!(suggest("read", json!({ "path": "x" })), "read");
        assert_eq!(
            suggest("kill_shell", json!({ "shell_id": "s1" })),
            "kill_shell"
        );
        assert_eq!(suggest("mcp_tool", json!({})), "mcp_tool");
    }
}
