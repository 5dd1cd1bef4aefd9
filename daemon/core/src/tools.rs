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
