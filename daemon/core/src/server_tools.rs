//! Blocks of the tools a provider runs itself ([`ContentBlock::ServerTool`]):
//! Anthropic's server-side `web_search`. The model calls it
//! (`server_tool_use`), the API runs it and adds the result
//! (`web_search_tool_result`) to the same reply; the daemon only keeps
//! both, byte for byte as JSON, sends them back in later requests (the API
//! requires a reply's blocks unchanged), and tells people what was
//! searched. They are not tool calls of ours: [`Message::tool_calls`]
//! never lists them, so nothing runs them and no `tool_result` answers
//! them.
//!
//! [`Message::tool_calls`]: crate::Message::tool_calls

use serde_json::Value;

use crate::ContentBlock;

/// The `type` of a server tool's call block.
pub const SERVER_TOOL_USE: &str = "server_tool_use";
/// The `type` of a web search's result block.
pub const WEB_SEARCH_RESULT: &str = "web_search_tool_result";

/// Whether a provider's block of type `kind` is a server tool's block
/// the daemon keeps: a call, or the result of a tool (`…_tool_result`).
pub fn is_server_block(kind: &str) -> bool {
    kind == SERVER_TOOL_USE || kind.ends_with("_tool_result") && kind != "tool_result"
}

/// The line people see for the server block `block` of a reply whose
/// blocks are `content`: for a search's result, `searched: QUERY (N
/// results)` (the query read from its call in the same reply), or
/// `search failed: CODE`; `None` for the call itself and anything else.
pub fn line(content: &[ContentBlock], block: &Value) -> Option<String> {
    if block.get("type").and_then(Value::as_str) != Some(WEB_SEARCH_RESULT) {
        return None;
    }
    let id = block.get("tool_use_id").and_then(Value::as_str)?;
    let query = content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ServerTool { block: call }
                if call.get("id").and_then(Value::as_str) == Some(id) =>
            {
                call.pointer("/input/query").and_then(Value::as_str)
            }
            _ => None,
        })
        .unwrap_or("?");
    match block.get("content") {
        Some(Value::Array(results)) => Some(format!(
            "searched: {query} ({} result{})",
            results.len(),
            if results.len() == 1 { "" } else { "s" }
        )),
        Some(error) => Some(format!(
            "search failed: {query} ({})",
            error
                .get("error_code")
                .and_then(Value::as_str)
                .unwrap_or("error")
        )),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_search_reads_as_one_line() {
        let call = json!({"type": "server_tool_use", "id": "srv_1", "name": "web_search",
            "input": {"query": "rust htmd"}});
        let result = json!({"type": "web_search_tool_result", "tool_use_id": "srv_1",
            "content": [{"type": "web_search_result", "url": "https://a"},
                        {"type": "web_search_result", "url": "https://b"}]});
        let failed = json!({"type": "web_search_tool_result", "tool_use_id": "srv_1",
            "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}});
        let content = vec![
            ContentBlock::ServerTool {
                block: call.clone(),
            },
            ContentBlock::ServerTool {
                block: result.clone(),
            },
        ];
        assert_eq!(
            line(&content, &result).as_deref(),
            Some("searched: rust htmd (2 results)")
        );
        assert_eq!(
            line(&content, &failed).as_deref(),
            Some("search failed: rust htmd (max_uses_exceeded)")
        );
        assert_eq!(line(&content, &call), None);
        assert!(is_server_block("server_tool_use"));
        assert!(is_server_block("web_search_tool_result"));
        assert!(is_server_block("web_fetch_tool_result"));
        assert!(!is_server_block("tool_result"));
        assert!(!is_server_block("text"));
        let message = crate::Message {
            role: crate::Role::Assistant,
            content,
            created_at_ms: 0,
            usage: None,
            stop_reason: None,
            interrupted: false,
            kind: crate::MessageKind::Ordinary,
        };
        assert_eq!(message.tool_calls().count(), 0, "never a call of ours");
    }
}
