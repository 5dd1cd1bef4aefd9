//! The Anthropic Messages streaming format, as `POST /v1/messages` with
//! `"stream": true` sends it: `event: NAME\ndata: JSON\n\n`, compact JSON with
//! `type` first.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Serialize;
use serde_json::json;

use super::plan::{Plan, Step};
use super::script::Block;

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    MessageStart {
        message: MessageHead<'a>,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock<'a>,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta<'a>,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDeltaBody<'a>,
        usage: OutputUsage,
    },
    MessageStop,
    Error {
        error: ErrorBody<'a>,
    },
}

#[derive(Serialize)]
struct MessageHead<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    content: [(); 0],
    model: &'a str,
    stop_reason: Option<&'a str>,
    stop_sequence: Option<&'a str>,
    usage: StartUsage,
}

#[derive(Serialize)]
struct StartUsage {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockHead<'a> {
    Text {
        text: &'static str,
    },
    Thinking {
        thinking: &'static str,
        signature: &'static str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: serde_json::Map<String, serde_json::Value>,
    },
}

/// A block as `content_block_start` carries it: one the encoder writes,
/// or a server tool's, as scripted.
#[derive(Serialize)]
#[serde(untagged)]
enum StartBlock<'a> {
    Known(BlockHead<'a>),
    Server(&'a serde_json::Value),
}

/// The variants are named for their wire `type` (`text_delta`, ...).
#[derive(Serialize)]
#[serde(tag = "type")]
enum Delta<'a> {
    #[serde(rename = "text_delta")]
    Text { text: Cow<'a, str> },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: Cow<'a, str> },
    #[serde(rename = "signature_delta")]
    Signature { signature: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
}

#[derive(Serialize)]
struct MessageDeltaBody<'a> {
    stop_reason: &'a str,
    stop_sequence: Option<&'a str>,
}

#[derive(Serialize)]
struct OutputUsage {
    output_tokens: u64,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: &'a str,
}

/// Exactly what Anthropic sends for a ping (note the space).
const PING: &[u8] = b"event: ping\ndata: {\"type\": \"ping\"}\n\n";
/// An event type no client knows, for tolerance tests.
const UNKNOWN: &[u8] = b"event: fake_future_event\ndata: {\"type\":\"fake_future_event\",\"note\":\"an event type this client does not know\"}\n\n";

/// The message id of the reply to request `seq`.
pub(crate) fn message_id(seq: u64) -> String {
    format!("msg_fake_{seq}")
}

/// Writes the SSE event for `step`; `stamp` (unix nanos) prefixes text and
/// thinking deltas when timestamps are on.
pub(crate) fn encode(plan: &Plan, step: &Step, stamp: Option<u128>) -> Bytes {
    let event = match step {
        Step::Ping => return Bytes::from_static(PING),
        Step::Unknown => return Bytes::from_static(UNKNOWN),
        Step::MessageStart => Event::MessageStart {
            message: MessageHead {
                id: message_id(plan.seq),
                kind: "message",
                role: "assistant",
                content: [],
                model: &plan.model,
                stop_reason: None,
                stop_sequence: None,
                usage: StartUsage {
                    input_tokens: plan.input_tokens,
                    cache_creation_input_tokens: plan.cache_creation_tokens,
                    cache_read_input_tokens: plan.cache_read_tokens,
                    output_tokens: 1,
                },
            },
        },
        Step::BlockStart(i) => Event::ContentBlockStart {
            index: *i,
            content_block: StartBlock::Known(match &plan.script.blocks[*i] {
                Block::Text(_) | Block::Deltas { .. } => BlockHead::Text { text: "" },
                Block::Thinking { .. } => BlockHead::Thinking {
                    thinking: "",
                    signature: "",
                },
                Block::Redacted(data) => BlockHead::RedactedThinking { data },
                Block::ToolUse { id, name, .. } => BlockHead::ToolUse {
                    id,
                    name,
                    input: serde_json::Map::new(),
                },
                Block::Server { head, .. } => return frame_start(*i, head),
            }),
        },
        Step::Delta { block, range } => {
            let text = plan.delta_text(*block, range);
            let stamped = || stamp_text(text, stamp);
            Event::ContentBlockDelta {
                index: *block,
                delta: match &plan.script.blocks[*block] {
                    Block::Text(_) | Block::Deltas { .. } => Delta::Text { text: stamped() },
                    Block::Thinking { .. } | Block::Redacted(_) => Delta::Thinking {
                        thinking: stamped(),
                    },
                    Block::ToolUse { .. } | Block::Server { .. } => {
                        Delta::InputJson { partial_json: text }
                    }
                },
            }
        }
        Step::Signature(i) => Event::ContentBlockDelta {
            index: *i,
            delta: Delta::Signature {
                signature: match &plan.script.blocks[*i] {
                    Block::Thinking { signature, .. } => signature,
                    _ => "",
                },
            },
        },
        Step::BlockStop(i) => Event::ContentBlockStop { index: *i },
        Step::MessageDelta => Event::MessageDelta {
            delta: MessageDeltaBody {
                stop_reason: &plan.stop_reason,
                stop_sequence: None,
            },
            usage: OutputUsage {
                output_tokens: plan.output_tokens,
            },
        },
        Step::MessageStop => Event::MessageStop,
    };
    let name = match &event {
        Event::MessageStart { .. } => "message_start",
        Event::ContentBlockStart { .. } => "content_block_start",
        Event::ContentBlockDelta { .. } => "content_block_delta",
        Event::ContentBlockStop { .. } => "content_block_stop",
        Event::MessageDelta { .. } => "message_delta",
        Event::MessageStop => "message_stop",
        Event::Error { .. } => "error",
    };
    frame(name, &event)
}

/// The `content_block_start` of a server tool's block, as scripted.
fn frame_start(index: usize, head: &serde_json::Value) -> Bytes {
    let event = Event::ContentBlockStart {
        index,
        content_block: StartBlock::Server(head),
    };
    frame("content_block_start", &event)
}

/// The mid-stream `event: error` (after an HTTP 200).
pub(crate) fn encode_error(error_type: &str, message: &str) -> Bytes {
    let event = Event::Error {
        error: ErrorBody {
            kind: error_type,
            message,
        },
    };
    frame("error", &event)
}

/// `"⟨t=NANOS⟩text"` when a stamp is given.
pub(crate) fn stamp_text(text: &str, stamp: Option<u128>) -> Cow<'_, str> {
    match stamp {
        Some(nanos) => Cow::Owned(format!("⟨t={nanos}⟩{text}")),
        None => Cow::Borrowed(text),
    }
}

fn frame(name: &str, event: &impl Serialize) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // Serialising these plain structs into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, event);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The whole message, for a request without `"stream": true`.
pub(crate) fn full_message(plan: &Plan) -> serde_json::Value {
    let content: Vec<serde_json::Value> = plan
        .script
        .blocks
        .iter()
        .map(|block| match block {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::Deltas { n, each } => json!({"type": "text", "text": each.repeat(*n)}),
            Block::Thinking { text, signature } => {
                json!({"type": "thinking", "thinking": text, "signature": signature})
            }
            Block::Redacted(data) => json!({"type": "redacted_thinking", "data": data}),
            Block::ToolUse { id, name, raw_json } => {
                let input = serde_json::from_str::<serde_json::Value>(raw_json)
                    .unwrap_or_else(|_| serde_json::Value::String(raw_json.clone()));
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
            Block::Server { head, raw_json } => {
                let mut block = head.clone();
                if let Ok(input) = serde_json::from_str::<serde_json::Value>(raw_json) {
                    block["input"] = input;
                }
                block
            }
        })
        .collect();
    json!({
        "id": message_id(plan.seq),
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": content,
        "stop_reason": plan.stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": plan.input_tokens,
            "cache_creation_input_tokens": plan.cache_creation_tokens,
            "cache_read_input_tokens": plan.cache_read_tokens,
            "output_tokens": plan.output_tokens,
        },
    })
}
