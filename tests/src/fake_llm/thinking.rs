//! What the Anthropic API checks of the extended thinking in a request,
//! which the fake checks the same way (answering 400
//! `invalid_request_error` with the API's kind of message), so a daemon
//! that breaks the chain of a tool loop fails a test as it would fail in
//! production:
//!
//! - every `thinking` block sent back carries its `signature`, every
//!   `redacted_thinking` block its `data`;
//! - `thinking: {"type": "enabled", "budget_tokens": N}` needs N ≥ 1024
//!   and `max_tokens` > N, and no `temperature` or `top_k` beside it;
//! - with thinking enabled, in a tool loop (the last message is a user's
//!   tool results) the last assistant message starts with a `thinking` or
//!   `redacted_thinking` block.

use serde_json::Value;

/// Whether a body may carry anything this module checks (read without
/// parsing it).
pub(crate) fn may_concern(raw: &[u8]) -> bool {
    raw.windows(10).any(|w| w == b"\"thinking\"") || raw.windows(9).any(|w| w == b"redacted_")
}

/// The API's objection to `body`, if it has one.
pub(crate) fn check(body: &Value) -> Result<(), String> {
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            let empty = |key: &str| b[key].as_str().is_none_or(str::is_empty);
            match b["type"].as_str() {
                Some("thinking") if empty("signature") => {
                    return Err(format!(
                        "messages.{i}.content.{j}.thinking.signature: Field required"
                    ));
                }
                Some("redacted_thinking") if empty("data") => {
                    return Err(format!(
                        "messages.{i}.content.{j}.redacted_thinking.data: Field required"
                    ));
                }
                _ => {}
            }
        }
    }
    let thinking = &body["thinking"];
    if thinking["type"] != "enabled" {
        return Ok(());
    }
    let budget = thinking["budget_tokens"].as_u64().unwrap_or(0);
    if budget < 1024 {
        return Err(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024".into(),
        );
    }
    if body["max_tokens"].as_u64().unwrap_or(0) <= budget {
        return Err("`max_tokens` must be greater than `thinking.budget_tokens`".into());
    }
    if body.get("temperature").is_some() || body.get("top_k").is_some() {
        return Err("`temperature` and `top_k` may not be set while thinking is enabled".into());
    }
    let in_tool_loop = messages.last().is_some_and(|m| {
        m["role"] == "user"
            && m["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
    });
    let last_assistant = messages.iter().rev().find(|m| m["role"] == "assistant");
    if let (true, Some(a)) = (in_tool_loop, last_assistant) {
        let first = a["content"][0]["type"].as_str().unwrap_or("");
        if first != "thinking" && first != "redacted_thinking" {
            return Err(format!(
                "messages.{}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. \
                 When `thinking` is enabled, a final `assistant` message must start with a thinking block",
                messages.len() - 2
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(assistant: Value) -> Value {
        json!({
            "max_tokens": 4096,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {"role": "assistant", "content": assistant},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            ],
        })
    }

    #[test]
    fn a_valid_chain_passes_and_a_broken_one_is_refused() {
        let tool = json!({"type": "tool_use", "id": "t1", "name": "read", "input": {}});
        let signed = json!({"type": "thinking", "thinking": "hm", "signature": "s"});
        let redacted = json!({"type": "redacted_thinking", "data": "ZW5j"});
        assert_eq!(check(&body(json!([signed, redacted, tool]))), Ok(()));
        assert_eq!(check(&body(json!([redacted, tool]))), Ok(()));
        let unsigned = json!({"type": "thinking", "thinking": "hm", "signature": ""});
        assert!(
            check(&body(json!([unsigned, tool])))
                .unwrap_err()
                .contains("signature")
        );
        assert!(
            check(&body(json!([tool])))
                .unwrap_err()
                .contains("must start with a thinking block")
        );
        let mut b = body(json!([signed, tool]));
        b["max_tokens"] = json!(2048);
        assert!(check(&b).unwrap_err().contains("max_tokens"));
        b["max_tokens"] = json!(4096);
        b["temperature"] = json!(0.5);
        assert!(check(&b).is_err());
        // Without thinking, a reply without thinking is fine.
        let mut b = body(json!([tool]));
        b.as_object_mut().unwrap().remove("thinking");
        assert_eq!(check(&b), Ok(()));
        assert!(may_concern(br#"{"thinking":{}}"#) && !may_concern(br#"{"text":"x"}"#));
    }
}
