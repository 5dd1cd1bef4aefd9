//! The body of a chat-completions request: the transcript mapped onto chat
//! messages (see the module docs of `openai`).

use agentd_core::{ContentBlock, Effort, ImageRef, Message, Role, ThinkingParams};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;

use crate::llm::LlmRequest;

/// The JSON body of a streaming chat-completions request. `max_tokens`
/// rather than OpenAI's newer `max_completion_tokens`, because the
/// compatible servers understand only the former.
pub(super) fn request_body(req: &LlmRequest) -> Value {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        messages.push(json!({ "role": "system", "content": &*req.system }));
    }
    for message in req.messages.iter() {
        push_message(&mut messages, message, &req.images);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": { "name": t.name, "description": t.description, "parameters": t.input_schema },
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    // Any thinking asked of this kind of server becomes an effort; the
    // reasoning it streams back is shown, stored and never sent back.
    match req.thinking {
        Some(
            ThinkingParams::Effort(effort)
            | ThinkingParams::Adaptive {
                effort: Some(effort),
            },
        ) => {
            body.insert("reasoning_effort".into(), json!(effort.as_str()));
        }
        Some(ThinkingParams::Budget { budget_tokens }) => {
            body.insert(
                "reasoning_effort".into(),
                json!(Effort::for_budget(budget_tokens).as_str()),
            );
        }
        Some(ThinkingParams::Adaptive { effort: None }) | None => {}
    }
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    Value::Object(body)
}

/// The `content` of a user message with images: its text and images as
/// parts, in the transcript's order, each image an `image_url` part with a
/// `data:` URL (the only way chat completions take inline images).
///
/// Chat completions' tool messages take text only, so the images tool
/// results returned come first, each group after a text part naming its
/// call: the model reads them right after the tool messages they belong to.
fn user_parts(message: &Message, images: &HashMap<String, Arc<str>>) -> Vec<Value> {
    let mut parts: Vec<Value> = Vec::new();
    for block in &message.content {
        if let ContentBlock::ToolResult {
            tool_use_id,
            images: attached,
            ..
        } = block
            && !attached.is_empty()
        {
            parts.push(json!({
                "type": "text",
                "text": format!("The image(s) the tool call {tool_use_id} returned:"),
            }));
            parts.extend(attached.iter().map(|i| image_part(i, images)));
        }
    }
    parts.extend(message.content.iter().filter_map(|b| match b {
        ContentBlock::Text { text } if !text.is_empty() => {
            Some(json!({ "type": "text", "text": text }))
        }
        ContentBlock::Image(image) => Some(image_part(image, images)),
        _ => None,
    }));
    parts
}

/// An `image_url` part with a `data:` URL, or the note sent when the
/// image's bytes are missing.
fn image_part(image: &ImageRef, images: &HashMap<String, Arc<str>>) -> Value {
    match images.get(&image.sha256) {
        Some(data) => json!({
            "type": "image_url",
            "image_url": { "url": format!("data:{};base64,{data}", image.media_type.mime()) },
        }),
        None => json!({ "type": "text", "text": MISSING_IMAGE }),
    }
}

/// Sent in place of an image whose bytes the store no longer has.
const MISSING_IMAGE: &str =
    "[an image was attached here, but its bytes are missing from the daemon's store]";

/// Appends the chat messages for one transcript message; empty ones vanish.
fn push_message(out: &mut Vec<Value>, message: &Message, images: &HashMap<String, Arc<str>>) {
    let text: Vec<&str> = message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let text = text.join("\n");
    match message.role {
        Role::User => {
            for block in &message.content {
                if let ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    ..
                } = block
                {
                    out.push(
                        json!({ "role": "tool", "tool_call_id": tool_use_id, "content": content }),
                    );
                }
            }
            if message.images().next().is_some() {
                let parts = user_parts(message, images);
                out.push(json!({ "role": "user", "content": parts }));
            } else if !text.is_empty() {
                out.push(json!({ "role": "user", "content": text }));
            }
        }
        Role::Assistant => {
            let calls: Vec<Value> = message
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { id, name, input } => {
                        // Input that is not an object is the raw text of
                        // invalid JSON; servers that parse the arguments
                        // would reject the whole request over it.
                        let arguments = if input.is_object() {
                            input.to_string()
                        } else {
                            "{}".to_string()
                        };
                        Some(json!({
                            "id": id,
                            "type": "function",
                            "function": { "name": name, "arguments": arguments },
                        }))
                    }
                    _ => None,
                })
                .collect();
            if text.is_empty() && calls.is_empty() {
                return;
            }
            let mut m = Map::new();
            m.insert("role".into(), json!("assistant"));
            // An empty string rather than null: some compatible servers
            // reject a null content even next to tool calls.
            m.insert("content".into(), json!(text));
            if !calls.is_empty() {
                m.insert("tool_calls".into(), Value::Array(calls));
            }
            out.push(Value::Object(m));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::llm::testkit::message;
    use agentd_core::ToolSpec;

    pub(crate) fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> LlmRequest {
        LlmRequest {
            thinking: None,
            model: "gpt-test".into(),
            system: "Be brief.".into(),
            messages: Arc::new(messages),
            tools: tools.into(),
            cache: Default::default(),
            images: Default::default(),
            web_search: None,
            max_tokens: 512,
        }
    }

    #[test]
    fn body_maps_the_transcript_onto_chat_messages() {
        let messages = vec![
            Message::user(vec![ContentBlock::text("list files")], 0),
            message(
                Role::Assistant,
                vec![
                    ContentBlock::Thinking {
                        thinking: "hm".into(),
                        signature: "s".into(),
                    },
                    ContentBlock::text("Looking."),
                    ContentBlock::ToolUse {
                        id: "call_1".into(),
                        name: "glob".into(),
                        input: json!({ "pattern": "*" }),
                    },
                    ContentBlock::ToolUse {
                        id: "call_2".into(),
                        name: "glob".into(),
                        input: Value::String("{bad".into()),
                    },
                ],
            ),
            Message::user(
                vec![
                    ContentBlock::text("and hurry"),
                    ContentBlock::tool_result("call_1", "a.rs", false),
                    ContentBlock::tool_result("call_2", "invalid input", true),
                ],
                0,
            ),
            message(
                Role::Assistant,
                vec![ContentBlock::RedactedThinking { data: "x".into() }],
            ),
        ];
        let tools = vec![ToolSpec {
            name: "glob".into(),
            description: "find files".into(),
            input_schema: json!({ "type": "object" }),
        }];
        assert_eq!(
            request_body(&request(messages, tools)),
            json!({
                "model": "gpt-test",
                "messages": [
                    { "role": "system", "content": "Be brief." },
                    { "role": "user", "content": "list files" },
                    { "role": "assistant", "content": "Looking.", "tool_calls": [
                        { "id": "call_1", "type": "function", "function": { "name": "glob", "arguments": "{\"pattern\":\"*\"}" } },
                        { "id": "call_2", "type": "function", "function": { "name": "glob", "arguments": "{}" } },
                    ] },
                    { "role": "tool", "tool_call_id": "call_1", "content": "a.rs" },
                    { "role": "tool", "tool_call_id": "call_2", "content": "invalid input" },
                    { "role": "user", "content": "and hurry" },
                ],
                "max_tokens": 512,
                "tools": [{ "type": "function", "function": {
                    "name": "glob", "description": "find files", "parameters": { "type": "object" } } }],
                "stream": true,
                "stream_options": { "include_usage": true },
            })
        );
    }

    #[test]
    fn thinking_becomes_a_reasoning_effort() {
        use agentd_core::Effort;
        let mut req = request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![],
        );
        assert!(request_body(&req).get("reasoning_effort").is_none());
        for (params, effort) in [
            (ThinkingParams::Effort(Effort::Low), "low"),
            (
                ThinkingParams::Budget {
                    budget_tokens: 20_000,
                },
                "high",
            ),
            (
                ThinkingParams::Adaptive {
                    effort: Some(Effort::Medium),
                },
                "medium",
            ),
        ] {
            req.thinking = Some(params);
            assert_eq!(request_body(&req)["reasoning_effort"], json!(effort));
        }
    }

    #[test]
    fn empty_system_and_tools_are_omitted() {
        let mut req = request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![],
        );
        req.system = "".into();
        let body = request_body(&req);
        assert!(body.get("tools").is_none());
        assert_eq!(
            body["messages"],
            json!([{ "role": "user", "content": "hi" }])
        );
    }
}
