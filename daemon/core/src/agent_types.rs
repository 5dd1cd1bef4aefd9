//! Custom sub-agent types (issue 42 point 6): a Markdown file whose front
//! matter names the type and whose body is the child's system prompt, as
//! Claude Code writes its subagents:
//!
//! ```text
//! ---
//! name: reviewer
//! description: Reviews a change for bugs; read-only.
//! tools: read, grep, glob
//! model: claude-haiku-4-5
//! ---
//! You review code. Report problems with file and line.
//! ```
//!
//! The front matter is read by a small subset of YAML, enough for these
//! files and documented here rather than a YAML crate: one `key: value`
//! per line; a value is plain (a ` #` starts a comment), single- or
//! double-quoted (`\"`, `\\`, `\n` in double quotes), a flow list
//! `[a, b]`, a block list (the key alone, then indented `- item` lines) or
//! a block scalar (`|` keeps line breaks, `>` folds them) of indented
//! lines. Blank lines and `#` comments are skipped. Keys: `name`
//! (required: lowercase letters, digits, `-` and `_`), `description`
//! (required), `tools` (a comma list or a list; absent: the parent's
//! tools), `model` (absent or `inherit`: the parent's). Any other key
//! (Claude Code's `color`, say) is left out with a warning naming its
//! line, so a file written for Claude Code still loads; anything this
//! reading cannot follow is an error naming the file and the line.
//!
//! The daemon finds, trusts and caches the files; this module only reads
//! their text, and never panics on any.

use crate::tools::Tool;

/// One sub-agent type, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentType {
    pub name: String,
    pub description: String,
    /// The tools its children may use (with `submit_result`), as written;
    /// `None`: the parent's.
    pub tools: Option<Vec<String>>,
    /// Its model; `None`: the parent's.
    pub model: Option<String>,
    /// The body: added to the child's system prompt.
    pub prompt: String,
}

/// A file read: the type and what was left out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub agent: AgentType,
    /// `FILE:LINE: ...` for each key that was left out.
    pub warnings: Vec<String>,
}

/// A value of the front matter.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Text(String),
    List(Vec<String>),
}

/// Reads the type in `text`, the content of `file` (named in messages).
/// The error is `FILE:LINE: what is wrong`.
pub fn parse(file: &str, text: &str) -> Result<Parsed, String> {
    let at = |line: usize, what: &str| format!("{file}:{line}: {what}");
    let lines: Vec<&str> = text.trim_start_matches('\u{feff}').lines().collect();
    if lines.first().map(|l| l.trim_end()) != Some("---") {
        return Err(at(
            1,
            "expected front matter: a first line `---`, then `name:`, `description:`…, then `---`",
        ));
    }
    let Some(end) = lines.iter().skip(1).position(|l| l.trim_end() == "---") else {
        return Err(at(1, "the front matter is not closed by a line `---`"));
    };
    let end = end + 1;
    let mut entries: Vec<(String, usize, Value)> = Vec::new();
    let mut i = 1;
    while i < end {
        let (line, no) = (lines[i], i + 1);
        i += 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) || trimmed.starts_with('-') {
            return Err(at(no, "an indented line or list item belongs to no key"));
        }
        let Some((key, rest)) = trimmed.split_once(':') else {
            return Err(at(no, &format!("expected `key: value`, found {trimmed:?}")));
        };
        let key = key.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(at(no, &format!("{key:?} is not a key")));
        }
        if entries.iter().any(|(k, _, _)| k == key) {
            return Err(at(no, &format!("`{key}` is given twice")));
        }
        let block: Vec<&str> = lines[i..end]
            .iter()
            .take_while(|l| l.trim().is_empty() || l.starts_with([' ', '\t']))
            .copied()
            .collect();
        let (value, used) = value(rest.trim(), &block).map_err(|e| at(no, &e))?;
        i += used;
        entries.push((key.to_string(), no, value));
    }
    let prompt = lines[end + 1..].join("\n").trim().to_string();
    build(file, entries, prompt)
}

/// A key's value: `rest` is what follows its colon, `block` the indented
/// lines after it. Returns the value and how many of those lines it took.
fn value(rest: &str, block: &[&str]) -> Result<(Value, usize), String> {
    // Blank lines at the end of a block belong to what follows.
    let used = block
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .map_or(0, |p| p + 1);
    let block = &block[..used];
    match rest {
        "" if block.is_empty() => Ok((Value::Text(String::new()), 0)),
        "" => {
            let mut items = Vec::new();
            for l in block.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
                let Some(item) = l.strip_prefix('-') else {
                    return Err(format!(
                        "expected `- item` lines under the key, found {l:?}"
                    ));
                };
                items.push(scalar(item.trim())?);
            }
            Ok((Value::List(items), used))
        }
        "|" | "|-" | ">" | ">-" => {
            let lines: Vec<&str> = block.iter().map(|l| l.trim()).collect();
            let sep = if rest.starts_with('|') { "\n" } else { " " };
            let text = lines.join(sep);
            Ok((Value::Text(text.trim().to_string()), used))
        }
        _ if !block.is_empty() => Err("a value on the key's line takes no indented lines".into()),
        _ if rest.starts_with('[') => {
            let inner = rest
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .ok_or("a list opened with `[` must close with `]` on the same line")?;
            let items = inner
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(scalar)
                .collect::<Result<Vec<_>, _>>()?;
            Ok((Value::List(items), 0))
        }
        _ => Ok((Value::Text(scalar(rest)?), 0)),
    }
}

/// A quoted or plain scalar.
fn scalar(text: &str) -> Result<String, String> {
    if let Some(inner) = text.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => {
                    let after = chars.as_str().trim();
                    if !after.is_empty() && !after.starts_with('#') {
                        return Err(format!("unexpected {after:?} after a quoted value"));
                    }
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(c @ ('"' | '\\')) => out.push(c),
                    other => {
                        return Err(format!("unknown escape `\\{}`", other.unwrap_or(' ')));
                    }
                },
                c => out.push(c),
            }
        }
        return Err("a double quote is not closed on its line".into());
    }
    if let Some(inner) = text.strip_prefix('\'') {
        let Some(close) = inner.find('\'') else {
            return Err("a single quote is not closed on its line".into());
        };
        return Ok(inner[..close].to_string());
    }
    let plain = match text.find(" #") {
        Some(at) => &text[..at],
        None => text,
    };
    Ok(plain.trim().to_string())
}

/// The type the entries of `file` describe.
fn build(
    file: &str,
    entries: Vec<(String, usize, Value)>,
    prompt: String,
) -> Result<Parsed, String> {
    let at = |line: usize, what: &str| format!("{file}:{line}: {what}");
    let mut agent = AgentType {
        name: String::new(),
        description: String::new(),
        tools: None,
        model: None,
        prompt,
    };
    let mut warnings = Vec::new();
    for (key, no, value) in entries {
        match (key.as_str(), value) {
            ("name", Value::Text(name)) => {
                if !is_name(&name) {
                    return Err(at(
                        no,
                        &format!(
                            "name {name:?}: use lowercase letters, digits, `-` and `_` (at most 64)"
                        ),
                    ));
                }
                agent.name = name;
            }
            ("description", Value::Text(d)) => agent.description = d,
            ("model", Value::Text(m)) => {
                agent.model = (!m.is_empty() && m != "inherit").then_some(m);
            }
            // `tools:` with nothing after it is YAML's null: not given.
            ("tools", Value::Text(t)) if t.is_empty() => agent.tools = None,
            ("tools", Value::Text(t)) => {
                agent.tools = Some(
                    t.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect(),
                );
            }
            ("tools", Value::List(items)) => agent.tools = Some(items),
            ("name" | "description" | "model", Value::List(_)) => {
                return Err(at(no, &format!("`{key}` must be text, not a list")));
            }
            (other, _) => warnings.push(at(no, &format!("unknown key `{other}` is ignored"))),
        }
    }
    if agent.name.is_empty() {
        return Err(at(1, "the front matter has no `name`"));
    }
    if agent.description.is_empty() {
        return Err(at(1, "the front matter has no `description`"));
    }
    if agent.prompt.is_empty() {
        return Err(at(
            1,
            "no system prompt: write it after the front matter's closing `---`",
        ));
    }
    Ok(Parsed { agent, warnings })
}

/// Whether `name` may name a type.
pub fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The tools a type's list names, as the daemon calls them, and a
/// problem for each name left out. Claude Code's names (`Read`,
/// `WebFetch`) read as ours (`read`, `web_fetch`); MCP tools
/// (`mcp__server__tool`) are kept as written; the tools no sub-agent has
/// (`spawn_agents`, `request_mode_upgrade`) and unknown names are left
/// out. `submit_result` is every child's and need not be listed.
pub fn tool_names(listed: &[String]) -> (Vec<String>, Vec<String>) {
    let mut names: Vec<String> = Vec::new();
    let mut problems = Vec::new();
    for raw in listed {
        let raw = raw.trim();
        let name = if raw.starts_with("mcp__") {
            Some(raw.to_string())
        } else {
            let snake = snake_case(raw);
            match Tool::from_name(&snake) {
                Some(Tool::SpawnAgents | Tool::RequestModeUpgrade) => {
                    problems.push(format!("tool `{raw}` is not available to sub-agents"));
                    None
                }
                Some(Tool::SubmitResult) => None,
                Some(tool) => Some(tool.name().to_string()),
                None => {
                    problems.push(format!("unknown tool `{raw}` is left out"));
                    None
                }
            }
        };
        if let Some(name) = name
            && !names.contains(&name)
        {
            names.push(name);
        }
    }
    (names, problems)
}

/// `WebFetch` → `web_fetch`; `read` stays `read`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a child of a type limited to `allowed` may call `name`.
pub fn allows(allowed: &[String], name: &str) -> bool {
    name == Tool::SubmitResult.name() || allowed.iter().any(|a| a == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_names_read_as_ours() {
        assert_eq!(snake_case("WebFetch"), "web_fetch");
        assert_eq!(snake_case("read"), "read");
        assert_eq!(snake_case("BashOutput"), "bash_output");
    }
}
