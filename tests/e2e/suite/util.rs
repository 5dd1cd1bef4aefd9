//! Helpers several areas share.

use agent_tests::fake_llm::{ReplyScript, Script};
use serde_json::Value;

/// A reply that is one tool call.
pub fn tool(id: &str, name: &str, input: Value) -> Script {
    Script::Reply(ReplyScript::new().tool_use(id, name, input))
}

/// Pids of the processes whose command line contains `needle`.
pub fn processes_matching(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd)
                .replace('\0', " ")
                .contains(needle)
        {
            out.push(pid);
        }
    }
    out
}
