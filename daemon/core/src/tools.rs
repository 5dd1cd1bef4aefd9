//! What the core knows about tools: which ones only read.

/// Tools that never change anything outside the daemon's own bookkeeping.
/// Consecutive calls of these may run concurrently.
pub const READ_ONLY_TOOLS: &[&str] = &[
    "read",
    "glob",
    "grep",
    "keyword_search",
    "think",
    "bash_output",
];

/// Every tool the daemon has. A call to any other name cannot run: the
/// tool layer answers it with an error, so it needs no permission.
pub const KNOWN_TOOLS: &[&str] = &[
    "bash",
    "read",
    "write",
    "edit",
    "patch",
    "glob",
    "grep",
    "keyword_search",
    "think",
    "bash_output",
    "kill_shell",
    "request_mode_upgrade",
];

/// Whether the daemon has a tool called `name`.
pub fn is_known(name: &str) -> bool {
    KNOWN_TOOLS.contains(&name)
}

/// Whether `name` is a read-only tool.
pub fn is_read_only(name: &str) -> bool {
    READ_ONLY_TOOLS.contains(&name)
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does and when to use it.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: serde_json::Value,
}

/// The spec of `request_mode_upgrade`, offered only in the restricted modes
/// (REQ-BED-015). The core answers it itself: it is never executed.
pub fn request_mode_upgrade_spec() -> ToolSpec {
    ToolSpec {
        name: crate::permission::REQUEST_MODE_UPGRADE.to_string(),
        description: "Ask the user to leave read-only mode so that write tools (bash, write, edit, patch) become available. Use only when the task needs changes.".to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["reason"],
            "properties": {
                "reason": {"type": "string", "description": "Why write access is needed"}
            }
        }),
    }
}
