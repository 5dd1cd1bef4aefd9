//! The OpenAI chat-completions streaming format, as `POST
//! /v1/chat/completions` with `"stream": true` sends it: `data: CHUNK\n\n`
//! lines ending with `data: [DONE]`.
//!
//! Mapping from a script: text → `content`, thinking → `reasoning_content`
//! (the vLLM/DeepSeek convention; the signature is dropped), tool_use →
//! `tool_calls` deltas, stop reason → `finish_reason`; a usage chunk with
//! empty `choices` always precedes `[DONE]`.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Serialize;
use serde_json::json;

use super::anthropic::stamp_text;
use super::plan::{Plan, Step};
use super::script::Block;

#[derive(Serialize)]
struct Chunk<'a> {
    id: String,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<Choice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    delta: ChunkDelta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize, Default)]
struct ChunkDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCall<'a>; 1]>,
}

#[derive(Serialize)]
struct ToolCall<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

/// OpenAI servers (OpenRouter, for one) send SSE comments as keep-alives.
const PING: &[u8] = b": ping\n\n";
const DONE: &[u8] = b"data: [DONE]\n\n";

fn completion_id(seq: u64) -> String {
    format!("chatcmpl-fake-{seq}")
}

/// The `finish_reason` for an Anthropic-style stop reason.
pub(crate) fn finish_reason(stop_reason: &str) -> &str {
    match stop_reason {
        "end_turn" | "stop_sequence" | "pause_turn" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "refusal" => "content_filter",
        other => other,
    }
}

/// Whether `step` produces a chunk in this format. Block starts of text
/// and thinking, block stops, signatures, the empty first tool fragment
/// and server tools' blocks have no OpenAI counterpart.
pub(crate) fn emits(plan: &Plan, step: &Step) -> bool {
    match step {
        Step::MessageStart
        | Step::Ping
        | Step::Unknown
        | Step::MessageDelta
        | Step::MessageStop => true,
        Step::BlockStart(i) => matches!(plan.script.blocks[*i], Block::ToolUse { .. }),
        Step::Delta { block, range } => match plan.script.blocks[*block] {
            Block::Server { .. } => false,
            Block::ToolUse { .. } => !range.is_empty(),
            _ => true,
        },
        Step::Signature(_) | Step::BlockStop(_) => false,
    }
}

/// Writes the chunk for `step` (call only when [`emits`] is true).
pub(crate) fn encode(plan: &Plan, step: &Step, stamp: Option<u128>) -> Bytes {
    let mut delta = ChunkDelta::default();
    let mut finish = None;
    match step {
        Step::Ping => return Bytes::from_static(PING),
        Step::Unknown => {
            let chunk = json!({
                "id": completion_id(plan.seq),
                "object": "chat.completion.chunk",
                "created": plan.created,
                "model": plan.model,
                "choices": [],
                "fake_future_field": {"note": "a field this client does not know"},
            });
            return data_frame(&chunk, b"");
        }
        Step::MessageStart => {
            delta.role = Some("assistant");
            delta.content = Some(Cow::Borrowed(""));
        }
        Step::BlockStart(i) => {
            if let Block::ToolUse { id, name, .. } = &plan.script.blocks[*i] {
                delta.tool_calls = Some([ToolCall {
                    index: plan.tool_ordinal[*i],
                    id: Some(id),
                    kind: Some("function"),
                    function: Function {
                        name: Some(name),
                        arguments: "",
                    },
                }]);
            }
        }
        Step::Delta { block, range } => {
            let text = plan.delta_text(*block, range);
            match &plan.script.blocks[*block] {
                Block::Text(_) | Block::Deltas { .. } => {
                    delta.content = Some(stamp_text(text, stamp))
                }
                Block::Thinking { .. } | Block::Redacted(_) => {
                    delta.reasoning_content = Some(stamp_text(text, stamp))
                }
                // Never emitted (see `emits`).
                Block::Server { .. } => {}
                Block::ToolUse { .. } => {
                    delta.tool_calls = Some([ToolCall {
                        index: plan.tool_ordinal[*block],
                        id: None,
                        kind: None,
                        function: Function {
                            name: None,
                            arguments: text,
                        },
                    }]);
                }
            }
        }
        Step::MessageDelta => finish = Some(finish_reason(&plan.stop_reason)),
        Step::MessageStop => {
            let chunk = Chunk {
                id: completion_id(plan.seq),
                object: "chat.completion.chunk",
                created: plan.created,
                model: &plan.model,
                choices: Vec::new(),
                usage: Some(usage(plan)),
            };
            return data_frame(&chunk, DONE);
        }
        Step::Signature(_) | Step::BlockStop(_) => {}
    }
    let chunk = Chunk {
        id: completion_id(plan.seq),
        object: "chat.completion.chunk",
        created: plan.created,
        model: &plan.model,
        choices: vec![Choice {
            index: 0,
            delta,
            logprobs: None,
            finish_reason: finish,
        }],
        usage: None,
    };
    data_frame(&chunk, b"")
}

/// A mid-stream error as OpenAI-compatible servers send it.
pub(crate) fn encode_error(error_type: &str, message: &str) -> Bytes {
    let body = json!({"error": {"message": message, "type": error_type, "code": null}});
    data_frame(&body, b"")
}

fn usage(plan: &Plan) -> Usage {
    Usage {
        prompt_tokens: plan.input_tokens,
        completion_tokens: plan.output_tokens,
        total_tokens: plan.input_tokens + plan.output_tokens,
    }
}

/// `data: JSON\n\n` followed by `tail` in the same write.
fn data_frame(value: &impl Serialize, tail: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(160 + tail.len());
    out.extend_from_slice(b"data: ");
    // Serialising these plain structs into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, value);
    out.extend_from_slice(b"\n\n");
    out.extend_from_slice(tail);
    Bytes::from(out)
}

/// The whole completion, for a request without `"stream": true`.
pub(crate) fn full_completion(plan: &Plan) -> serde_json::Value {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    for block in &plan.script.blocks {
        match block {
            Block::Text(text) => content.push_str(text),
            Block::Deltas { n, each } => content.push_str(&each.repeat(*n)),
            Block::Thinking { text, .. } => reasoning.push_str(text),
            // Chat completions have no encrypted reasoning, nor server
            // tools.
            Block::Redacted(_) | Block::Server { .. } => {}
            Block::ToolUse { id, name, raw_json } => tool_calls.push(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": raw_json},
            })),
        }
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    let usage = usage(plan);
    json!({
        "id": completion_id(plan.seq),
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(&plan.stop_reason),
        }],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    })
}
