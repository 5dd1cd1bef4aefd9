//! OpenAI-compatible chat completions, streamed: OpenAI itself and the
//! servers that copy its API (Ollama, vLLM, llama.cpp, OpenRouter).
//!
//! The transcript maps onto chat messages as follows: the system prompt
//! becomes the first message; an assistant's tool calls become `tool_calls`
//! (their input as a JSON string); each tool result becomes its own `tool`
//! message, placed before any text of the same user turn because the API
//! wants results right after the calls; reasoning blocks are not sent back,
//! as the API has no place for them.
//!
//! Compatible servers differ in small ways, so the stream parser is lenient
//! where it costs nothing: reasoning arrives as `reasoning_content` or
//! `reasoning`, a tool-call fragment may lack its `index`, `choices` may be
//! empty, null or missing (the usage chunk at the end has none), a blank
//! data line is a keep-alive, and a stream that ends after its
//! `finish_reason` but without `[DONE]` is accepted.
//!
//! How each event of the stream is taken:
//! - `data: [DONE]`: the reply is complete.
//! - A chunk with an `error` member (OpenAI's `{"message", "type", "code"}`,
//!   OpenRouter's numeric `code`, or a plain string), or an event named
//!   `error`: the error it reports, classified like the HTTP error it
//!   stands for (see [`LlmError::stream`]).
//! - Data that is not JSON: a protocol error that names the event.
//! - Any other event is a chunk. The stream defines no event names, so a
//!   server that adds one still means a chunk.

use agentd_core::{ContentBlock, ImageRef, Message, Reply, Role, StopReason, Usage};
use futures::future::BoxFuture;
use http::HeaderValue;
use reqwest::Url;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::sse::SseEvent;
use super::transport::{self, Flow, StreamParser, Timeouts};
use super::{LlmError, LlmRequest, Provider, StreamEvent, tool_input_from_json, wire_index};

/// An OpenAI-compatible provider. Cheap to share: it holds one connection
/// pool.
pub struct OpenAiProvider {
    client: reqwest::Client,
    endpoint: Url,
    /// `Bearer …`, marked sensitive; `None` for servers without auth.
    authorization: Option<HeaderValue>,
}

impl OpenAiProvider {
    /// A provider for `base_url`, with or without its `/v1` suffix (e.g.
    /// `https://api.openai.com/v1` or `http://localhost:11434`).
    pub fn new(api_key: Option<String>, base_url: String) -> Result<Self, LlmError> {
        Self::with_timeouts(api_key, base_url, Timeouts::default())
    }

    pub(crate) fn with_timeouts(
        api_key: Option<String>,
        base_url: String,
        timeouts: Timeouts,
    ) -> Result<Self, LlmError> {
        let authorization = match api_key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    LlmError::Config(
                        "the OpenAI API key contains characters not allowed in a header"
                            .to_string(),
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let base = base_url.trim().trim_end_matches('/');
        let path = if base.ends_with("/v1") {
            "chat/completions"
        } else {
            "v1/chat/completions"
        };
        let endpoint = transport::endpoint(base, path)?;
        let client = transport::client(&endpoint, timeouts)?;
        Ok(OpenAiProvider {
            client,
            endpoint,
            authorization,
        })
    }

    async fn attempt(
        &self,
        req: &LlmRequest,
        emit: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<Reply, LlmError> {
        let mut request = self
            .client
            .post(self.endpoint.clone())
            .header(http::header::ACCEPT, "text/event-stream")
            .json(&request_body(req));
        if let Some(auth) = &self.authorization {
            request = request.header(http::header::AUTHORIZATION, auth.clone());
        }
        let response = transport::send(request).await?;
        transport::read_stream(response, OpenAiStream::default(), emit).await
    }
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("endpoint", &transport::redact(self.endpoint.as_str()))
            .field("authenticated", &self.authorization.is_some())
            .finish_non_exhaustive()
    }
}

impl Provider for OpenAiProvider {
    fn stream<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, LlmError>> {
        Box::pin(transport::run_attempt(
            "openai",
            cancel,
            self.attempt(req, on_event),
        ))
    }
}

/// The JSON body of a streaming chat-completions request. `max_tokens`
/// rather than OpenAI's newer `max_completion_tokens`, because the
/// compatible servers understand only the former.
fn request_body(req: &LlmRequest) -> Value {
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

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
}

#[derive(Deserialize)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl WireUsage {
    /// OpenAI counts cached tokens inside `prompt_tokens`; the core counts
    /// them apart.
    fn to_usage(&self) -> Usage {
        let prompt = self.prompt_tokens.unwrap_or(0);
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0)
            .min(prompt);
        Usage {
            input_tokens: prompt - cached,
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
        }
    }
}

/// A block being assembled; its position in `OpenAiStream::blocks` is its
/// stream index.
#[derive(Debug)]
enum Block {
    Prose(Prose, String),
    ToolUse {
        id: String,
        name: String,
        arguments: String,
    },
}

/// The two kinds of streamed prose, which accumulate alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prose {
    Text,
    Thinking,
}

/// Assembles one streamed reply.
#[derive(Debug, Default)]
pub(crate) struct OpenAiStream {
    blocks: Vec<Block>,
    /// Blocks whose `BlockEnd` was emitted.
    closed: Vec<bool>,
    /// The prose block that further prose of its kind extends, while
    /// nothing else began.
    open_prose: Option<(Prose, usize)>,
    /// The block of each tool call, by the server's tool-call index.
    tool_calls: HashMap<u32, usize>,
    finish_reason: Option<StopReason>,
    usage: Usage,
}

impl OpenAiStream {
    /// Adds a block. Prose that was being extended is complete once
    /// something else begins; tool calls stay open to the end, since their
    /// fragments may interleave.
    fn open(&mut self, block: Block, emit: &mut dyn FnMut(StreamEvent)) -> usize {
        if let Some((_, i)) = self.open_prose.take() {
            self.close(i, emit);
        }
        self.blocks.push(block);
        self.closed.push(false);
        self.blocks.len() - 1
    }

    fn close(&mut self, i: usize, emit: &mut dyn FnMut(StreamEvent)) {
        if let Some(closed) = self.closed.get_mut(i)
            && !*closed
        {
            *closed = true;
            emit(StreamEvent::BlockEnd {
                index: wire_index(i),
            });
        }
    }

    fn prose(&mut self, kind: Prose, more: String, emit: &mut dyn FnMut(StreamEvent)) {
        if more.is_empty() {
            return;
        }
        let i = match self.open_prose {
            Some((open, i)) if open == kind => i,
            _ => {
                let i = self.open(Block::Prose(kind, String::new()), emit);
                self.open_prose = Some((kind, i));
                i
            }
        };
        if let Some(Block::Prose(_, all)) = self.blocks.get_mut(i) {
            all.push_str(&more);
        }
        let index = wire_index(i);
        emit(match kind {
            Prose::Text => StreamEvent::TextDelta { index, text: more },
            Prose::Thinking => StreamEvent::ThinkingDelta { index, text: more },
        });
    }

    /// One tool-call fragment. `position` is its place in the chunk's
    /// `tool_calls`, standing in for a missing `index`; a fragment that
    /// brings a different id under a known index starts a new call, which is
    /// how servers that send whole calls without an index look.
    fn tool_call(
        &mut self,
        position: usize,
        call: WireToolCall,
        emit: &mut dyn FnMut(StreamEvent),
    ) {
        let key = call.index.unwrap_or_else(|| wire_index(position));
        let id = call.id.filter(|id| !id.is_empty());
        let (name, arguments) = match call.function {
            Some(f) => (f.name.unwrap_or_default(), f.arguments.unwrap_or_default()),
            None => (String::new(), String::new()),
        };
        let known = self
            .tool_calls
            .get(&key)
            .copied()
            .filter(|&i| match (&self.blocks[i], &id) {
                (Block::ToolUse { id: current, .. }, Some(new)) => current == new,
                _ => true,
            });
        let i = match known {
            Some(i) => {
                if let Block::ToolUse { name: current, .. } = &mut self.blocks[i]
                    && current.is_empty()
                {
                    current.push_str(&name);
                }
                i
            }
            None => {
                let id = id.unwrap_or_else(|| format!("call_{}", self.blocks.len()));
                let block = Block::ToolUse {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                };
                let i = self.open(block, emit);
                emit(StreamEvent::ToolUseBegin {
                    index: wire_index(i),
                    id,
                    name,
                });
                self.tool_calls.insert(key, i);
                i
            }
        };
        if !arguments.is_empty() {
            if let Block::ToolUse { arguments: all, .. } = &mut self.blocks[i] {
                all.push_str(&arguments);
            }
            emit(StreamEvent::ToolInputDelta {
                index: wire_index(i),
                partial_json: arguments,
            });
        }
    }
}

fn stop_reason(finish_reason: &str) -> StopReason {
    match finish_reason {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::ContentFiltered,
        other => StopReason::Other(other.to_string()),
    }
}

impl StreamParser for OpenAiStream {
    fn on_event(
        &mut self,
        event: &SseEvent,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<Flow, LlmError> {
        if event.event == "error" {
            return Err(LlmError::error_event(&event.data));
        }
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let chunk: WireChunk = transport::event_data(&event.event, data)?;
        if let Some(error) = chunk.error {
            return Err(LlmError::stream(&error));
        }
        // Only the first choice is ever requested (`n` is left at 1).
        if let Some(choice) = chunk.choices.into_iter().flatten().next() {
            if let Some(delta) = choice.delta {
                if let Some(reasoning) = delta.reasoning_content.or(delta.reasoning) {
                    self.prose(Prose::Thinking, reasoning, emit);
                }
                if let Some(content) = delta.content {
                    self.prose(Prose::Text, content, emit);
                }
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    self.tool_call(position, call, emit);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(stop_reason(&reason));
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = usage.to_usage();
            emit(StreamEvent::Usage(self.usage));
        }
        Ok(Flow::Continue)
    }

    fn finish(
        mut self,
        completed: bool,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, LlmError> {
        if !completed && self.finish_reason.is_none() {
            return Err(LlmError::connection("the stream ended before [DONE]"));
        }
        for i in 0..self.blocks.len() {
            self.close(i, emit);
        }
        let has_calls = self
            .blocks
            .iter()
            .any(|b| matches!(b, Block::ToolUse { .. }));
        let stop_reason = self.finish_reason.unwrap_or(if has_calls {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        let content = self
            .blocks
            .into_iter()
            .map(|b| match b {
                Block::Prose(Prose::Text, text) => ContentBlock::Text { text },
                // No signature: the Anthropic provider will not send it back.
                Block::Prose(Prose::Thinking, thinking) => ContentBlock::Thinking {
                    thinking,
                    signature: String::new(),
                },
                Block::ToolUse {
                    id,
                    name,
                    arguments,
                } => ContentBlock::ToolUse {
                    id,
                    name,
                    input: tool_input_from_json(&arguments),
                },
            })
            .collect();
        Ok(Reply {
            content,
            stop_reason,
            usage: self.usage,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::testkit::{self, TestServer, message};
    use agentd_core::{ErrorKind, ToolSpec};
    use std::sync::Arc;

    fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> LlmRequest {
        LlmRequest {
            model: "gpt-test".into(),
            system: "Be brief.".into(),
            messages: Arc::new(messages),
            tools: tools.into(),
            cache: Default::default(),
            images: Default::default(),
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

    const FULL_STREAM: &str = concat!(
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Think \"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"first.\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Héllo \"},\"finish_reason\":null}]}\n\n",
        ": keep-alive\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"there\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"a.rs\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"grep\",\"arguments\":\"{oops\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":30,\"total_tokens\":150,\"prompt_tokens_details\":{\"cached_tokens\":100}}}\n\n",
        "data: [DONE]\n\n",
    );

    fn full_usage() -> Usage {
        Usage {
            input_tokens: 20,
            output_tokens: 30,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 100,
        }
    }

    fn full_reply() -> Reply {
        Reply {
            content: vec![
                ContentBlock::Thinking {
                    thinking: "Think first.".into(),
                    signature: String::new(),
                },
                ContentBlock::text("Héllo there"),
                ContentBlock::ToolUse {
                    id: "call_a".into(),
                    name: "read".into(),
                    input: json!({ "path": "a.rs" }),
                },
                ContentBlock::ToolUse {
                    id: "call_b".into(),
                    name: "grep".into(),
                    input: Value::String("{oops".into()),
                },
            ],
            stop_reason: StopReason::ToolUse,
            usage: full_usage(),
        }
    }

    #[tokio::test]
    async fn full_stream_becomes_a_reply() {
        use StreamEvent::*;
        let (events, reply) = testkit::parse(OpenAiStream::default(), FULL_STREAM, 13).await;
        assert_eq!(reply.unwrap(), full_reply());
        assert_eq!(
            events,
            vec![
                ThinkingDelta {
                    index: 0,
                    text: "Think ".into()
                },
                ThinkingDelta {
                    index: 0,
                    text: "first.".into()
                },
                BlockEnd { index: 0 },
                TextDelta {
                    index: 1,
                    text: "Héllo ".into()
                },
                TextDelta {
                    index: 1,
                    text: "there".into()
                },
                BlockEnd { index: 1 },
                ToolUseBegin {
                    index: 2,
                    id: "call_a".into(),
                    name: "read".into()
                },
                ToolInputDelta {
                    index: 2,
                    partial_json: "{\"path\":".into()
                },
                ToolInputDelta {
                    index: 2,
                    partial_json: "\"a.rs\"}".into()
                },
                ToolUseBegin {
                    index: 3,
                    id: "call_b".into(),
                    name: "grep".into()
                },
                ToolInputDelta {
                    index: 3,
                    partial_json: "{oops".into()
                },
                Usage(full_usage()),
                BlockEnd { index: 2 },
                BlockEnd { index: 3 },
            ]
        );
    }

    #[tokio::test]
    async fn finish_reasons() {
        for (wire, want) in [
            ("stop", StopReason::EndTurn),
            ("tool_calls", StopReason::ToolUse),
            ("length", StopReason::MaxTokens),
            ("content_filter", StopReason::ContentFiltered),
            ("eos", StopReason::Other("eos".into())),
        ] {
            let stream = format!(
                "data: {{\"choices\":[{{\"delta\":{{\"content\":\"x\"}},\"finish_reason\":\"{wire}\"}}]}}\n\ndata: [DONE]\n\n"
            );
            let (_, reply) = testkit::parse(OpenAiStream::default(), &stream, 7).await;
            assert_eq!(reply.unwrap().stop_reason, want, "{wire}");
        }
    }

    #[tokio::test]
    async fn whole_tool_calls_without_index() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"read\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"b\",\"function\":{\"name\":\"glob\",\"arguments\":\"{\\\"p\\\":1}\"}}]}}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (_, reply) = testkit::parse(OpenAiStream::default(), stream, 64).await;
        let reply = reply.unwrap();
        assert_eq!(reply.stop_reason, StopReason::ToolUse);
        assert_eq!(
            reply.content,
            vec![
                ContentBlock::ToolUse {
                    id: "a".into(),
                    name: "read".into(),
                    input: json!({})
                },
                ContentBlock::ToolUse {
                    id: "b".into(),
                    name: "glob".into(),
                    input: json!({ "p": 1 })
                },
            ]
        );
    }

    #[tokio::test]
    async fn endings_and_errors() {
        // Finished but no [DONE]: accepted.
        let stream =
            "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n";
        let (_, reply) = testkit::parse(OpenAiStream::default(), stream, 5).await;
        assert_eq!(reply.unwrap().content, vec![ContentBlock::text("x")]);

        // Cut before finishing: a retryable connection error.
        let stream = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
        let (_, reply) = testkit::parse(OpenAiStream::default(), stream, 5).await;
        let err = reply.unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }) && err.is_retryable());

        // An error chunk after HTTP 200.
        let stream =
            "data: {\"error\":{\"message\":\"upstream overloaded\",\"type\":\"server_error\"}}\n\n";
        let (_, reply) = testkit::parse(OpenAiStream::default(), stream, 5).await;
        let err = reply.unwrap_err();
        assert_eq!(
            err.to_string(),
            "stream error (server_error): upstream overloaded"
        );
        assert!(err.is_retryable());

        let stream = "data: {\"error\":\"model crashed\"}\n\n";
        let (_, reply) = testkit::parse(OpenAiStream::default(), stream, 5).await;
        assert_eq!(
            reply.unwrap_err().to_string(),
            "stream error (error): model crashed"
        );
    }

    #[tokio::test]
    async fn done_usage_only_and_missing_choices() {
        let stream = concat!(
            // Azure's first chunk: no choices yet.
            "data: {\"choices\":[],\"prompt_filter_results\":[{\"prompt_index\":0}]}\n\n",
            "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n",
            // No `choices` at all, and a null one.
            "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\"}\n\n",
            "data: {\"choices\":null,\"usage\":null}\n\n",
            // A blank data line: a keep-alive.
            "data:\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            // The usage-only chunk `include_usage` asks for.
            "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"total_tokens\":10}}\n\n",
            "data: [DONE]\n\n",
            // Nothing after [DONE] is read.
            "data: {not json\n\n",
        );
        for chunk in [1, 7, 500] {
            let (events, reply) = testkit::parse(OpenAiStream::default(), stream, chunk).await;
            let reply = reply.unwrap();
            assert_eq!(reply.content, vec![ContentBlock::text("x")]);
            assert_eq!(reply.stop_reason, StopReason::EndTurn);
            assert_eq!(
                (reply.usage.input_tokens, reply.usage.output_tokens),
                (9, 1)
            );
            assert_eq!(
                events,
                vec![
                    StreamEvent::TextDelta {
                        index: 0,
                        text: "x".into()
                    },
                    StreamEvent::Usage(reply.usage),
                    StreamEvent::BlockEnd { index: 0 },
                ]
            );
        }
    }

    /// Mid-stream errors as servers send them, byte for byte, and how each
    /// is taken: (stream, retryable, kind, message).
    #[tokio::test]
    async fn mid_stream_errors_are_classified() {
        use ErrorKind::*;
        let text = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n";
        let table: &[(&str, bool, ErrorKind, &str)] = &[
            (
                "data: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
                true,
                Unknown,
                "stream error (server_error): The server had an error while processing your request.",
            ),
            // OpenRouter: an HTTP status as the code, next to a choice.
            (
                "data: {\"id\":\"gen-1\",\"object\":\"chat.completion.chunk\",\"provider\":\"x\",\"error\":{\"code\":502,\"message\":\"Provider returned error\"},\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\"}]}\n\n",
                true,
                Unknown,
                "stream error (502): Provider returned error",
            ),
            (
                "data: {\"error\":{\"code\":\"server_error\",\"message\":\"Provider disconnected unexpectedly\"}}\n\n",
                true,
                Unknown,
                "stream error (server_error): Provider disconnected unexpectedly",
            ),
            // vLLM: the status as the code, and words that say the context is full.
            (
                "data: {\"error\":{\"object\":\"error\",\"message\":\"This model's maximum context length is 4096 tokens.\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}}\n\n",
                false,
                ContextExhausted,
                "stream error (400): This model's maximum context length is 4096 tokens.",
            ),
            (
                "data: {\"error\":{\"message\":\"Invalid prompt\",\"type\":\"BadRequestError\",\"code\":400}}\n\n",
                false,
                InvalidRequest,
                "stream error (400): Invalid prompt",
            ),
            (
                "data: {\"error\":{\"message\":\"Rate limit reached for requests\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}\n\n",
                false,
                RateLimit,
                "stream error (rate_limit_exceeded): Rate limit reached for requests",
            ),
            (
                "data: {\"error\":{\"message\":\"too long\",\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"}}\n\n",
                false,
                ContextExhausted,
                "stream error (context_length_exceeded): too long",
            ),
            (
                "data: {\"error\":\"model crashed\"}\n\n",
                false,
                Unknown,
                "stream error (error): model crashed",
            ),
            // An event named `error`, with JSON or without.
            (
                "event: error\ndata: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n",
                true,
                Unknown,
                "stream error (server_error): boom",
            ),
            (
                "event: error\ndata: worker died\n\n",
                false,
                Unknown,
                "stream error (error): worker died",
            ),
        ];
        for (tail, retryable, kind, message) in table {
            let stream = format!("{text}{tail}data: [DONE]\n\n");
            let (events, reply) = testkit::parse(OpenAiStream::default(), &stream, 5).await;
            let err = reply.unwrap_err();
            assert!(matches!(err, LlmError::Stream { .. }), "{tail}: {err}");
            let failure = err.to_failure();
            assert_eq!(
                (failure.retryable, failure.kind, failure.message.as_str()),
                (*retryable, *kind, *message),
                "{tail}"
            );
            assert_eq!(
                events,
                vec![StreamEvent::TextDelta {
                    index: 0,
                    text: "partial".into()
                }]
            );
        }
    }

    #[tokio::test]
    async fn data_that_is_not_json_is_an_error_naming_the_event() {
        let table: &[(&str, &str)] = &[
            (
                "data: <html>502 Bad Gateway</html>\n\n",
                "malformed stream: event \"message\" has data that is not JSON: \
                 expected value at line 1 column 1, in \"<html>502 Bad Gateway</html>\"",
            ),
            (
                "event: chunk\ndata: {\"choices\":[\n\n",
                "malformed stream: event \"chunk\" has data that is not JSON: \
                 EOF while parsing a list at line 1 column 12, in \"{\\\"choices\\\":[\"",
            ),
            (
                "data: {\"choices\":\"none\"}\n\n",
                "malformed stream: event \"message\" has unexpected data: \
                 invalid type: string \"none\", expected a sequence at line 1 column 17",
            ),
        ];
        for (stream, message) in table {
            let (_, reply) = testkit::parse(OpenAiStream::default(), stream, 4).await;
            let err = reply.unwrap_err();
            assert!(matches!(err, LlmError::Decode { .. }), "{err}");
            assert!(!err.is_retryable());
            assert_eq!(err.to_string(), *message);
        }
    }

    fn simple_request() -> LlmRequest {
        request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![],
        )
    }

    #[tokio::test]
    async fn http_streaming_success_with_bearer_auth() {
        let mut server = TestServer::start(testkit::sse_response(FULL_STREAM)).await;
        let provider =
            OpenAiProvider::new(Some("sk-test".into()), format!("{}/v1/", server.base_url))
                .unwrap();
        let mut events = Vec::new();
        let mut on_event = |e: StreamEvent| events.push(e);
        let reply = provider
            .stream(&simple_request(), &mut on_event, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(reply, full_reply());
        // The 14 events of `full_stream_becomes_a_reply`; deltas that
        // arrive in one read are passed on merged.
        let (expected, _) = testkit::parse(OpenAiStream::default(), FULL_STREAM, 13).await;
        assert_eq!(expected.len(), 14);
        assert_eq!(testkit::merged(events), testkit::merged(expected));
        let seen = server.request().await;
        assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
        assert_eq!(seen.header("authorization"), Some("Bearer sk-test"));
        assert_eq!(seen.json(), request_body(&simple_request()));
    }

    #[tokio::test]
    async fn http_without_key_sends_no_authorization() {
        let mut server = TestServer::start(testkit::sse_response("data: [DONE]\n\n")).await;
        let provider = OpenAiProvider::new(None, server.base_url.clone()).unwrap();
        let reply = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(reply.content, vec![]);
        assert_eq!(reply.stop_reason, StopReason::EndTurn);
        let seen = server.request().await;
        assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
        assert_eq!(seen.header("authorization"), None);
    }

    #[tokio::test]
    async fn http_error_status() {
        let server = TestServer::start(testkit::json_response(
            "401 Unauthorized",
            &[("x-request-id", "req_oa")],
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        ))
        .await;
        let provider =
            OpenAiProvider::new(Some("sk-test".into()), server.base_url.clone()).unwrap();
        let err = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth);
        assert!(!err.is_retryable());
        assert_eq!(
            err.to_string(),
            "HTTP 401 (invalid_api_key): Incorrect API key provided [request-id req_oa]"
        );
    }

    #[tokio::test]
    async fn http_json_instead_of_a_stream_is_reported() {
        let server = TestServer::start(testkit::json_response(
            "200 OK",
            &[],
            r#"{"error":"streaming unsupported"}"#,
        ))
        .await;
        let provider = OpenAiProvider::new(None, server.base_url.clone()).unwrap();
        let err = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Decode { .. }), "{err}");
        assert!(err.to_string().contains("streaming unsupported"), "{err}");
    }
}
