//! One short line describing a call before it runs, for permission prompts
//! and the client's tool lines.

use agentd_core::tools::Tool;
use serde_json::Value;

use super::{handler, patch};

/// One short human line describing a call before it runs ("bash: cargo
/// test", "edit src/main.rs", "grep 'foo' in src"): the tool's own line
/// (its `summary` in [`handler`]).
pub(crate) fn summarize_call(name: &str, input: &Value) -> String {
    let Some(tool) = Tool::from_name(name) else {
        return name.to_string();
    };
    (handler(tool).summary)(tool, input).unwrap_or_else(|| format!("{name} (invalid input)"))
}

// The lines of the tools, for their rows in `handler`; a new tool may use
// one of them or write its own in its file.

fn str_field<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str)
}

fn quoted(s: &str) -> String {
    format!("'{}'", one_line(s, 60))
}

/// " in DIR" for a search's `path`, nothing for the working directory.
fn in_path(input: &Value) -> String {
    match str_field(input, "path") {
        Some(p) if !p.is_empty() && p != "." => format!(" in {}", one_line(p, 60)),
        _ => String::new(),
    }
}

/// Only the tool's name.
pub(super) fn name(tool: Tool, _input: &Value) -> Option<String> {
    Some(tool.to_string())
}

/// The tool and the file at `path` ("edit src/main.rs").
pub(super) fn path(tool: Tool, input: &Value) -> Option<String> {
    str_field(input, "path").map(|p| format!("{tool} {}", one_line(p, 80)))
}

/// The tool, the quoted `pattern` and where it searches.
pub(super) fn pattern(tool: Tool, input: &Value) -> Option<String> {
    str_field(input, "pattern").map(|p| format!("{tool} {}{}", quoted(p), in_path(input)))
}

pub(super) fn bash(tool: Tool, input: &Value) -> Option<String> {
    str_field(input, "command").map(|c| {
        let background = input.get("run_in_background").and_then(Value::as_bool);
        let how = if background == Some(true) {
            format!("{tool} (background)")
        } else {
            tool.to_string()
        };
        format!("{how}: {}", one_line(c, 80))
    })
}

pub(super) fn bash_output(tool: Tool, input: &Value) -> Option<String> {
    str_field(input, "shell_id").map(|id| match str_field(input, "filter") {
        Some(f) => format!("{tool} {} (lines matching {})", one_line(id, 20), quoted(f)),
        None => format!("{tool} {}", one_line(id, 20)),
    })
}

pub(super) fn kill_shell(tool: Tool, input: &Value) -> Option<String> {
    str_field(input, "shell_id").map(|id| format!("{tool} {}", one_line(id, 20)))
}

pub(super) fn read(tool: Tool, input: &Value) -> Option<String> {
    str_field(input, "path").map(|p| {
        let offset = input.get("offset").and_then(Value::as_u64);
        let limit = input.get("limit").and_then(Value::as_u64);
        let range = match (offset, limit) {
            (None, None) => String::new(),
            (o, Some(l)) => {
                let from = o.unwrap_or(1).max(1);
                format!(
                    " (lines {from}-{})",
                    from.saturating_add(l).saturating_sub(1)
                )
            }
            (Some(o), None) => format!(" (from line {o})"),
        };
        format!("{tool} {}{range}", one_line(p, 80))
    })
}

pub(super) fn patch(tool: Tool, input: &Value) -> Option<String> {
    str_field(input, "patch").map(|p| {
        let files = patch::touched_files(p);
        match files.len() {
            0 => tool.to_string(),
            1..=3 => format!("{tool} {}", files.join(", ")),
            n => format!("{tool} {}, … ({n} files)", files[..2].join(", ")),
        }
    })
}

pub(super) fn keyword_search(tool: Tool, input: &Value) -> Option<String> {
    input.get("keywords").and_then(Value::as_array).map(|ks| {
        let words: Vec<&str> = ks.iter().filter_map(Value::as_str).collect();
        format!(
            "{tool} {}{}",
            one_line(&words.join(", "), 80),
            in_path(input)
        )
    })
}

pub(super) fn propose_plan(tool: Tool, input: &Value) -> Option<String> {
    str_field(input, "intent").map(|i| {
        let steps = input
            .get("steps")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        format!("{tool}: {} ({steps} steps)", one_line(i, 60))
    })
}

pub(super) fn update_plan(tool: Tool, input: &Value) -> Option<String> {
    input.get("steps").and_then(Value::as_array).map(|ups| {
        let parts: Vec<String> = ups
            .iter()
            .map(|u| {
                // A plan step by its id, a todo item by its title.
                let id = match (u.get("id"), u.get("title").and_then(Value::as_str)) {
                    (Some(Value::String(s)), _) => one_line(s, 10),
                    (None, Some(title)) => one_line(title, 24),
                    (Some(other), _) => one_line(&other.to_string(), 10),
                    (None, None) => "?".to_string(),
                };
                let status = u.get("status").and_then(Value::as_str).unwrap_or("?");
                format!("{id} {}", one_line(status, 12))
            })
            .collect();
        format!("{tool}: {}", parts.join(", "))
    })
}

pub(super) fn spawn_agents(tool: Tool, input: &Value) -> Option<String> {
    input.get("agents").and_then(Value::as_array).map(|agents| {
        let labels: Vec<&str> = agents
            .iter()
            .filter_map(|a| a.get("description").and_then(Value::as_str))
            .collect();
        format!(
            "{tool}: {} agent(s): {}",
            agents.len(),
            one_line(&labels.join(", "), 80)
        )
    })
}

/// The first line of `s`, clipped to `max` characters.
pub(crate) fn one_line(s: &str, max: usize) -> String {
    let first = s.trim_start().lines().next().unwrap_or("");
    let clipped: String = first.chars().take(max).collect();
    let more_lines = s.trim().lines().nth(1).is_some();
    if clipped.len() < first.len() || more_lines {
        format!("{}…", clipped.trim_end())
    } else {
        clipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summaries_are_short_and_specific() {
        assert_eq!(
            summarize_call("bash", &json!({"command": "cargo test"})),
            "bash: cargo test"
        );
        assert_eq!(
            summarize_call("edit", &json!({"path": "src/main.rs"})),
            "edit src/main.rs"
        );
        assert_eq!(
            summarize_call("grep", &json!({"pattern": "foo", "path": "src"})),
            "grep 'foo' in src"
        );
        assert_eq!(
            summarize_call("read", &json!({"path": "a.rs", "offset": 10, "limit": 5})),
            "read a.rs (lines 10-14)"
        );
        assert_eq!(
            summarize_call(
                "patch",
                &json!({"patch": "--- a/x.rs\n+++ b/x.rs\n@@ -1 +1 @@\n-a\n+b\n"})
            ),
            "patch x.rs"
        );
        assert_eq!(
            summarize_call("bash", &json!("garbage")),
            "bash (invalid input)"
        );
        assert_eq!(
            summarize_call("bash", &json!({"command": "a\nb"})),
            "bash: a…"
        );
        assert_eq!(
            summarize_call(
                "bash",
                &json!({"command": "npm run dev", "run_in_background": true})
            ),
            "bash (background): npm run dev"
        );
        assert_eq!(
            summarize_call("bash_output", &json!({"shell_id": "sh-abc234"})),
            "bash_output sh-abc234"
        );
        assert_eq!(
            summarize_call(
                "bash_output",
                &json!({"shell_id": "sh-abc234", "filter": "ERROR"})
            ),
            "bash_output sh-abc234 (lines matching 'ERROR')"
        );
        assert_eq!(
            summarize_call("kill_shell", &json!({"shell_id": "sh-abc234"})),
            "kill_shell sh-abc234"
        );
        assert_eq!(
            summarize_call("kill_shell", &json!({})),
            "kill_shell (invalid input)"
        );
    }
}
