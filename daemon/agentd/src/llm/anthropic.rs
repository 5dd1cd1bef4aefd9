//! The Anthropic Messages API, streamed.
//!
//! Requests are built from the core's transcript with three kinds of
//! sanitizing, because the API rejects what a long-lived transcript can
//! contain: empty messages and empty text blocks are dropped, consecutive
//! messages of one role are merged (tool results first, as the API
//! requires), and a tool call whose input is not a JSON object (the raw text
//! of invalid JSON, kept for the tool layer) is sent with `{}`.
//!
//! Prompt caching: the system prompt, the last tool and the last block of
//! the last message each carry an ephemeral `cache_control` breakpoint, so a
//! turn re-reads the whole previous conversation from the cache (3 of the 4
//! breakpoints the API allows).

use agentd_core::{ContentBlock, ImageRef, Message, Reply, Role, StopReason, Usage};
use futures::future::BoxFuture;
use http::HeaderValue;
use reqwest::Url;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::sse::SseEvent;
use super::transport::{self, Flow, StreamParser, Timeouts};
use super::{EncodedPrefix, LlmError, LlmRequest, Provider, StreamEvent, tool_input_from_json};

/// The API version this module speaks.
const API_VERSION: &str = "2023-06-01";

/// The Anthropic provider. Cheap to share: it holds one connection pool.
pub struct AnthropicProvider {
    client: reqwest::Client,
    endpoint: Url,
    /// Marked sensitive, so that even reqwest's own debug output hides it.
    api_key: HeaderValue,
}

impl AnthropicProvider {
    /// A provider for `base_url` (e.g. `https://api.anthropic.com`; a
    /// trailing slash is fine).
    pub fn new(api_key: String, base_url: String) -> Result<Self, LlmError> {
        Self::with_timeouts(api_key, base_url, Timeouts::default())
    }

    pub(crate) fn with_timeouts(
        api_key: String,
        base_url: String,
        timeouts: Timeouts,
    ) -> Result<Self, LlmError> {
        if api_key.trim().is_empty() {
            return Err(LlmError::Config(
                "the Anthropic API key is empty".to_string(),
            ));
        }
        let mut api_key = HeaderValue::from_str(api_key.trim()).map_err(|_| {
            LlmError::Config(
                "the Anthropic API key contains characters not allowed in a header".to_string(),
            )
        })?;
        api_key.set_sensitive(true);
        let endpoint = transport::endpoint(&base_url, "v1/messages")?;
        let client = transport::client(&endpoint, timeouts)?;
        Ok(AnthropicProvider {
            client,
            endpoint,
            api_key,
        })
    }

    async fn attempt(
        &self,
        req: &LlmRequest,
        emit: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<Reply, LlmError> {
        let request = self
            .client
            .post(self.endpoint.clone())
            .header("x-api-key", self.api_key.clone())
            .header("anthropic-version", API_VERSION)
            .header(http::header::ACCEPT, "text/event-stream")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(
                request_body(req)
                    .map_err(|e| LlmError::Config(format!("cannot encode the request: {e}")))?,
            );
        let response = transport::send(request).await?;
        transport::read_stream(response, AnthropicStream::default(), emit).await
    }
}

impl fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("endpoint", &transport::redact(self.endpoint.as_str()))
            .finish_non_exhaustive()
    }
}

impl Provider for AnthropicProvider {
    fn stream<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, LlmError>> {
        Box::pin(transport::run_attempt(
            "anthropic",
            cancel,
            self.attempt(req, on_event),
        ))
    }
}

/// The JSON body of a streaming Messages request, serialized straight from
/// the borrowed transcript (no intermediate `Value` tree: a long transcript
/// is sent every round, so this runs once per model request). Message
/// groups that can no longer change are taken from the conversation's
/// cache and added to it.
fn request_body(req: &LlmRequest) -> Result<Vec<u8>, serde_json::Error> {
    let system = (!req.system.is_empty()).then(|| {
        [WireText {
            kind: "text",
            text: &req.system,
            cache_control: Some(EPHEMERAL),
        }]
    });
    let last_tool = req.tools.len().checked_sub(1);
    let tools = req
        .tools
        .iter()
        .enumerate()
        .map(|(i, t)| WireTool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.input_schema,
            cache_control: (Some(i) == last_tool).then_some(EPHEMERAL),
        })
        .collect();
    let mut body = serde_json::to_vec(&WireRequest {
        model: &req.model,
        max_tokens: req.max_tokens,
        system,
        tools,
    })?;
    // `{...}` → `{...,"messages":[...],"stream":true}`
    body.pop();
    body.extend_from_slice(b",\"messages\":[");
    let groups = message_groups(&req.messages);
    // Every group but the last is followed by one of the other role, so
    // no later message can join it: its encoding is final, and cached.
    let settled = groups.len().saturating_sub(1);
    let mut cache = req.cache.lock();
    let reused = match cache.as_ref() {
        Some(p) if p.groups > 0 && p.groups <= settled && groups[p.groups - 1].end == p.covered => {
            body.extend_from_slice(&p.bytes);
            p.groups
        }
        _ => 0,
    };
    if settled > reused {
        let prefix = match cache.as_mut() {
            Some(p) if reused > 0 => p,
            _ => cache.insert(EncodedPrefix {
                covered: 0,
                groups: 0,
                bytes: Vec::new(),
            }),
        };
        let start = prefix.bytes.len();
        for (i, group) in groups.iter().enumerate().take(settled).skip(reused) {
            if i > 0 {
                prefix.bytes.push(b',');
            }
            serde_json::to_writer(&mut prefix.bytes, &group.encode(false, &req.images))?;
        }
        prefix.covered = groups[settled - 1].end;
        prefix.groups = settled;
        body.extend_from_slice(&prefix.bytes[start..]);
    }
    if let Some(last) = groups.last() {
        if settled > 0 {
            body.push(b',');
        }
        serde_json::to_writer(&mut body, &last.encode(true, &req.images))?;
    }
    drop(cache);
    body.extend_from_slice(b"],\"stream\":true}");
    Ok(body)
}

/// The body without its messages and `stream` (added by hand after them).
#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<[WireText<'a>; 1]>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
}

/// `{"type": "ephemeral"}`: a prompt-cache breakpoint.
#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize)]
struct WireText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
struct WireMessageOut<'a> {
    role: &'static str,
    content: Vec<WireBlockOut<'a>>,
}

/// A content block as sent; `cache_control` marks the end of the cached
/// prefix (set on one block at most).
#[derive(Serialize)]
struct WireBlockOut<'a> {
    #[serde(flatten)]
    block: BlockOut<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockOut<'a> {
    Text {
        text: &'a str,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: ToolInput<'a>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ToolResultOut<'a>,
        is_error: bool,
    },
    /// `{"type":"image","source":{"type":"base64","media_type":…,"data":…}}`
    Image {
        source: ImageSource<'a>,
    },
}

/// A tool result's content: its text, or (when the tool returned images)
/// a text block and the image blocks.
#[derive(Serialize)]
#[serde(untagged)]
enum ToolResultOut<'a> {
    Text(&'a str),
    Blocks(Vec<BlockOut<'a>>),
}

/// Where an image block's bytes are: inline, base64.
#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'static str,
    data: &'a str,
}

/// Sent in place of an image whose bytes the store no longer has, so the
/// model is told rather than silently shown less.
const MISSING_IMAGE: &str =
    "[an image was attached here, but its bytes are missing from the daemon's store]";

/// A tool call's input; one that is not a JSON object (the raw text of
/// invalid JSON) is sent as `{}`, which the API accepts.
struct ToolInput<'a>(&'a Value);

impl Serialize for ToolInput<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => map.serialize(s),
            _ => s.serialize_map(Some(0))?.end(),
        }
    }
}

impl<'a> BlockOut<'a> {
    /// An image block, or the note sent when its bytes are missing.
    fn image(image: &'a ImageRef, images: &'a HashMap<String, Arc<str>>) -> Self {
        match images.get(&image.sha256) {
            Some(data) => BlockOut::Image {
                source: ImageSource {
                    kind: "base64",
                    media_type: image.media_type.mime(),
                    data,
                },
            },
            None => BlockOut::Text {
                text: MISSING_IMAGE,
            },
        }
    }

    fn of(block: &'a ContentBlock, images: &'a HashMap<String, Arc<str>>) -> Self {
        match block {
            ContentBlock::Image(image) => BlockOut::image(image, images),
            ContentBlock::Text { text } => BlockOut::Text { text },
            ContentBlock::Thinking {
                thinking,
                signature,
            } => BlockOut::Thinking {
                thinking,
                signature,
            },
            ContentBlock::RedactedThinking { data } => BlockOut::RedactedThinking { data },
            ContentBlock::ToolUse { id, name, input } => BlockOut::ToolUse {
                id,
                name,
                input: ToolInput(input),
            },
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                images: attached,
            } => BlockOut::ToolResult {
                tool_use_id,
                // A text-only result keeps the plain string form, so the
                // bytes of every request without images stay as they were
                // (the cached prefix).
                content: if attached.is_empty() {
                    ToolResultOut::Text(content)
                } else {
                    let mut blocks = Vec::with_capacity(attached.len() + 1);
                    if !content.is_empty() {
                        blocks.push(BlockOut::Text { text: content });
                    }
                    blocks.extend(attached.iter().map(|i| BlockOut::image(i, images)));
                    ToolResultOut::Blocks(blocks)
                },
                is_error: *is_error,
            },
        }
    }

    /// Thinking blocks cannot carry a cache breakpoint.
    fn cacheable(&self) -> bool {
        matches!(
            self,
            BlockOut::Text { .. }
                | BlockOut::ToolUse { .. }
                | BlockOut::ToolResult { .. }
                | BlockOut::Image { .. }
        )
    }
}

/// Consecutive messages of one role, merged, as the API accepts them (see
/// the module docs); `end` is the index after its last message in the
/// transcript.
struct Group<'a> {
    role: Role,
    blocks: Vec<&'a ContentBlock>,
    end: usize,
}

impl<'a> Group<'a> {
    /// The message as sent; the last one of a request carries the
    /// breakpoint that ends the cached prefix.
    fn encode(&self, last: bool, images: &'a HashMap<String, Arc<str>>) -> WireMessageOut<'a> {
        let mut blocks = self.blocks.clone();
        if self.role == Role::User {
            // Stable: the results keep their order, and so does the rest.
            blocks.sort_by_key(|b| !matches!(b, ContentBlock::ToolResult { .. }));
        }
        let mut content: Vec<WireBlockOut<'a>> = blocks
            .into_iter()
            .map(|b| WireBlockOut {
                block: BlockOut::of(b, images),
                cache_control: None,
            })
            .collect();
        if last && let Some(block) = content.iter_mut().rev().find(|b| b.block.cacheable()) {
            block.cache_control = Some(EPHEMERAL);
        }
        let role = match self.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        WireMessageOut { role, content }
    }
}

/// The transcript in groups as the API accepts it: empty messages and
/// blocks dropped, runs of one role merged.
fn message_groups(messages: &[Message]) -> Vec<Group<'_>> {
    let mut merged: Vec<Group<'_>> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let blocks = message.content.iter().filter(|b| is_sendable(b));
        match merged.last_mut() {
            Some(group) if group.role == message.role => {
                group.blocks.extend(blocks);
                group.end = i + 1;
            }
            _ => {
                let run: Vec<&ContentBlock> = blocks.collect();
                if !run.is_empty() {
                    merged.push(Group {
                        role: message.role,
                        blocks: run,
                        end: i + 1,
                    });
                }
            }
        }
    }
    merged
}

/// Whether the API would accept the block: it rejects empty text blocks,
/// and a thinking block without its signature cannot be verified (such
/// blocks come from other providers or from an interrupted stream).
fn is_sendable(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Text { text } => !text.is_empty(),
        ContentBlock::Thinking { signature, .. } => !signature.is_empty(),
        ContentBlock::RedactedThinking { .. }
        | ContentBlock::Image(_)
        | ContentBlock::ToolUse { .. }
        | ContentBlock::ToolResult { .. } => true,
    }
}

// The data of each event the parser reads. Events are told apart by their
// SSE event name (see `AnthropicStream::on_event`), so these do not read the
// `type` field the data repeats it in.

#[derive(Deserialize)]
struct MessageStart {
    message: WireMessage,
}

#[derive(Deserialize)]
struct ContentBlockStart {
    index: u32,
    content_block: WireBlock,
}

#[derive(Deserialize)]
struct ContentBlockDelta {
    index: u32,
    delta: WireDelta,
}

#[derive(Deserialize)]
struct ContentBlockStop {
    index: u32,
}

#[derive(Deserialize)]
struct MessageDelta {
    #[serde(default)]
    delta: WireMessageDelta,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// The `type` of an event that came without an event name.
#[derive(Deserialize)]
struct Typed {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        #[serde(default)]
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct WireMessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// Usage as sent: every field may be missing or null, and a later snapshot
/// only overrides the fields it carries.
#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    fn apply_to(&self, usage: &mut Usage) {
        let fields = [
            (self.input_tokens, &mut usage.input_tokens),
            (self.output_tokens, &mut usage.output_tokens),
            (
                self.cache_creation_input_tokens,
                &mut usage.cache_creation_input_tokens,
            ),
            (
                self.cache_read_input_tokens,
                &mut usage.cache_read_input_tokens,
            ),
        ];
        for (new, field) in fields {
            if let Some(n) = new {
                *field = n;
            }
        }
    }
}

/// A block being assembled.
#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    /// A block type this version does not know (server tools, citations…):
    /// its events are ignored and it is left out of the reply.
    Ignored,
}

#[derive(Debug)]
struct Slot {
    block: Block,
    open: bool,
}

/// Assembles one streamed reply.
#[derive(Debug, Default)]
pub(crate) struct AnthropicStream {
    blocks: BTreeMap<u32, Slot>,
    usage: Usage,
    stop_reason: Option<StopReason>,
}

impl AnthropicStream {
    fn start_block(
        &mut self,
        index: u32,
        block: WireBlock,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<(), LlmError> {
        if self.blocks.contains_key(&index) {
            return Err(LlmError::decode(format!(
                "content block {index} started twice"
            )));
        }
        let block = match block {
            WireBlock::Text { text } => {
                if !text.is_empty() {
                    emit(StreamEvent::TextDelta {
                        index,
                        text: text.clone(),
                    });
                }
                Block::Text(text)
            }
            WireBlock::Thinking {
                thinking,
                signature,
            } => {
                if !thinking.is_empty() {
                    emit(StreamEvent::ThinkingDelta {
                        index,
                        text: thinking.clone(),
                    });
                }
                Block::Thinking {
                    thinking,
                    signature,
                }
            }
            WireBlock::RedactedThinking { data } => Block::Redacted(data),
            WireBlock::ToolUse { id, name } => {
                emit(StreamEvent::ToolUseBegin {
                    index,
                    id: id.clone(),
                    name: name.clone(),
                });
                Block::ToolUse {
                    id,
                    name,
                    json: String::new(),
                }
            }
            WireBlock::Other => {
                tracing::debug!(
                    index,
                    "ignoring an Anthropic content block of an unknown type"
                );
                Block::Ignored
            }
        };
        self.blocks.insert(index, Slot { block, open: true });
        Ok(())
    }

    fn delta(
        &mut self,
        index: u32,
        delta: WireDelta,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<(), LlmError> {
        let slot = self.slot(index, "delta")?;
        match (&mut slot.block, delta) {
            (Block::Text(text), WireDelta::TextDelta { text: more }) => {
                text.push_str(&more);
                emit(StreamEvent::TextDelta { index, text: more });
            }
            (Block::Thinking { thinking, .. }, WireDelta::ThinkingDelta { thinking: more }) => {
                thinking.push_str(&more);
                emit(StreamEvent::ThinkingDelta { index, text: more });
            }
            (Block::Thinking { signature, .. }, WireDelta::SignatureDelta { signature: more }) => {
                signature.push_str(&more);
            }
            (Block::ToolUse { json, .. }, WireDelta::InputJsonDelta { partial_json }) => {
                json.push_str(&partial_json);
                emit(StreamEvent::ToolInputDelta {
                    index,
                    partial_json,
                });
            }
            (Block::Ignored, _) => {}
            (_, WireDelta::Other) => {
                tracing::debug!(index, "ignoring an Anthropic delta of an unknown type");
            }
            (block, _) => {
                return Err(LlmError::decode(format!(
                    "content block {index} ({}) got a delta of another kind",
                    block_kind(block)
                )));
            }
        }
        Ok(())
    }

    fn stop_block(
        &mut self,
        index: u32,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<(), LlmError> {
        let slot = self.slot(index, "stop")?;
        close(index, slot, emit);
        Ok(())
    }

    /// The block an event of kind `what` refers to, which must have started.
    fn slot(&mut self, index: u32, what: &str) -> Result<&mut Slot, LlmError> {
        self.blocks.get_mut(&index).ok_or_else(|| {
            LlmError::decode(format!(
                "{what} for content block {index}, which never started"
            ))
        })
    }
}

fn block_kind(block: &Block) -> &'static str {
    match block {
        Block::Text(_) => "text",
        Block::Thinking { .. } => "thinking",
        Block::Redacted(_) => "redacted_thinking",
        Block::ToolUse { .. } => "tool_use",
        Block::Ignored => "unknown",
    }
}

fn close(index: u32, slot: &mut Slot, emit: &mut dyn FnMut(StreamEvent)) {
    if slot.open && !matches!(slot.block, Block::Ignored) {
        emit(StreamEvent::BlockEnd { index });
    }
    slot.open = false;
}

impl StreamParser for AnthropicStream {
    /// Handles one event by its SSE event name, as Anthropic's streaming
    /// docs tell clients to: the names are the protocol, and the data of
    /// some events (the legacy `error` shape, events of older APIs) has no
    /// `type` field. So an event whose name this version does not know is
    /// ignored whatever its data; an `error` event is classified like the
    /// HTTP error it stands for (see [`LlmError::error_event`]); and the data
    /// of a known event must be JSON of its shape. Only an event without a
    /// name (which SSE calls `message`, a name the API never uses) is
    /// named by the `type` in its data.
    fn on_event(
        &mut self,
        event: &SseEvent,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<Flow, LlmError> {
        let data = event.data.as_str();
        let typed;
        let name = match event.event.as_str() {
            "message" => {
                typed = transport::event_data::<Typed>("message", data)?.kind;
                typed.as_deref().unwrap_or("")
            }
            name => name,
        };
        match name {
            "message_start" => {
                let MessageStart { message } = transport::event_data(name, data)?;
                if let Some(usage) = message.usage {
                    usage.apply_to(&mut self.usage);
                }
                emit(StreamEvent::Usage(self.usage));
            }
            "content_block_start" => {
                let ContentBlockStart {
                    index,
                    content_block,
                } = transport::event_data(name, data)?;
                self.start_block(index, content_block, emit)?;
            }
            "content_block_delta" => {
                let ContentBlockDelta { index, delta } = transport::event_data(name, data)?;
                self.delta(index, delta, emit)?;
            }
            "content_block_stop" => {
                let ContentBlockStop { index } = transport::event_data(name, data)?;
                self.stop_block(index, emit)?;
            }
            "message_delta" => {
                let MessageDelta { delta, usage } = transport::event_data(name, data)?;
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(StopReason::from_wire(&reason));
                }
                if let Some(usage) = usage {
                    usage.apply_to(&mut self.usage);
                    emit(StreamEvent::Usage(self.usage));
                }
            }
            "message_stop" => {
                transport::event_data::<serde::de::IgnoredAny>(name, data)?;
                return Ok(Flow::Done);
            }
            // A keep-alive: nothing in it is read.
            "ping" => {}
            "error" => return Err(LlmError::error_event(data)),
            _ => {
                tracing::debug!(
                    event = name,
                    "ignoring an Anthropic stream event this version does not know"
                );
            }
        }
        Ok(Flow::Continue)
    }

    fn finish(
        mut self,
        completed: bool,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, LlmError> {
        if !completed {
            return Err(LlmError::connection("the stream ended before message_stop"));
        }
        for (index, slot) in &mut self.blocks {
            close(*index, slot, emit);
        }
        let content = self
            .blocks
            .into_values()
            .filter_map(|slot| match slot.block {
                Block::Text(text) => Some(ContentBlock::Text { text }),
                Block::Thinking {
                    thinking,
                    signature,
                } => Some(ContentBlock::Thinking {
                    thinking,
                    signature,
                }),
                Block::Redacted(data) => Some(ContentBlock::RedactedThinking { data }),
                Block::ToolUse { id, name, json } => Some(ContentBlock::ToolUse {
                    id,
                    name,
                    input: tool_input_from_json(&json),
                }),
                Block::Ignored => None,
            })
            .collect();
        let stop_reason = self.stop_reason.unwrap_or_else(|| {
            tracing::debug!("Anthropic stream completed without a stop reason; taking end_turn");
            StopReason::EndTurn
        });
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
    use crate::llm::testkit::{self, Step, TestServer, message};
    use serde_json::json;

    /// The body as JSON, to compare with `json!`.
    fn request_body(req: &LlmRequest) -> Value {
        serde_json::from_slice(&super::request_body(req).unwrap()).unwrap()
    }
    use agentd_core::{ErrorKind, ToolSpec};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn tool_use(id: &str, input: Value) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "read".into(),
            input,
        }
    }

    fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> LlmRequest {
        LlmRequest {
            model: "claude-test".into(),
            system: "You are terse.".into(),
            messages: Arc::new(messages),
            tools: tools.into(),
            cache: Default::default(),
            images: Default::default(),
            max_tokens: 1024,
        }
    }

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} things"),
            input_schema: json!({ "type": "object", "properties": {} }),
        }
    }

    #[test]
    fn body_has_system_tools_and_stream_with_cache_breakpoints() {
        let req = request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![spec("read"), spec("write")],
        );
        let body = request_body(&req);
        assert_eq!(
            body,
            json!({
                "model": "claude-test",
                "max_tokens": 1024,
                "system": [{ "type": "text", "text": "You are terse.", "cache_control": { "type": "ephemeral" } }],
                "tools": [
                    { "name": "read", "description": "read things", "input_schema": { "type": "object", "properties": {} } },
                    { "name": "write", "description": "write things", "input_schema": { "type": "object", "properties": {} },
                      "cache_control": { "type": "ephemeral" } },
                ],
                "messages": [
                    { "role": "user", "content": [{ "type": "text", "text": "hi", "cache_control": { "type": "ephemeral" } }] },
                ],
                "stream": true,
            })
        );
    }

    #[test]
    fn empty_tools_and_system_are_omitted() {
        let mut req = request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![],
        );
        req.system = "".into();
        let body = request_body(&req);
        assert!(body.get("tools").is_none());
        assert!(body.get("system").is_none());
    }

    #[test]
    fn transcript_is_sanitized_merged_and_cached_at_the_tail() {
        let messages = vec![
            Message::user(vec![ContentBlock::text("first")], 0),
            Message::user(vec![ContentBlock::text("")], 0),
            Message::user(vec![ContentBlock::text("second")], 0),
            message(
                Role::Assistant,
                vec![
                    ContentBlock::Thinking {
                        thinking: "hmm".into(),
                        signature: "sig".into(),
                    },
                    ContentBlock::Thinking {
                        thinking: "unsigned".into(),
                        signature: String::new(),
                    },
                    ContentBlock::text("calling"),
                    tool_use("t1", json!({ "path": "a" })),
                ],
            ),
            message(Role::Assistant, vec![]),
            message(
                Role::Assistant,
                vec![tool_use("t2", Value::String("{\"path\":".into()))],
            ),
            Message::user(vec![ContentBlock::text("also this")], 0),
            Message::user(
                vec![
                    ContentBlock::tool_result("t1", "contents", false),
                    ContentBlock::tool_result("t2", "bad input", true),
                ],
                0,
            ),
        ];
        let body = request_body(&request(messages, vec![]));
        assert_eq!(
            body["messages"],
            json!([
                { "role": "user", "content": [
                    { "type": "text", "text": "first" },
                    { "type": "text", "text": "second" },
                ] },
                { "role": "assistant", "content": [
                    { "type": "thinking", "thinking": "hmm", "signature": "sig" },
                    { "type": "text", "text": "calling" },
                    { "type": "tool_use", "id": "t1", "name": "read", "input": { "path": "a" } },
                    { "type": "tool_use", "id": "t2", "name": "read", "input": {} },
                ] },
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "t1", "content": "contents", "is_error": false },
                    { "type": "tool_result", "tool_use_id": "t2", "content": "bad input", "is_error": true },
                    { "type": "text", "text": "also this", "cache_control": { "type": "ephemeral" } },
                ] },
            ])
        );
    }

    proptest::proptest! {
        /// The encoding reused from earlier requests of a conversation is
        /// byte for byte what encoding the whole transcript gives, however
        /// the transcript grew (merged runs, empty messages, results).
        #[test]
        fn the_cached_prefix_changes_no_byte(
            steps in proptest::collection::vec((0u8..6, 1usize..4), 1..40),
        ) {
            let shared = request(vec![], vec![spec("read")]);
            let mut transcript = Vec::new();
            for (n, (kind, grow)) in steps.into_iter().enumerate() {
                for k in 0..grow {
                    let id = format!("t{n}_{k}");
                    transcript.push(match kind {
                        0 => Message::user(vec![ContentBlock::text(format!("u{n}"))], 0),
                        1 => Message::user(vec![ContentBlock::tool_result(id, "r", k == 1)], 0),
                        2 => message(Role::Assistant, vec![ContentBlock::text(format!("a{n}"))]),
                        3 => message(Role::Assistant, vec![tool_use(&id, json!({ "n": n }))]),
                        4 => message(Role::Assistant, vec![]),
                        _ => Message::user(vec![ContentBlock::text("")], 0),
                    });
                }
                let mut cached = shared.clone();
                cached.messages = Arc::new(transcript.clone());
                let mut fresh = cached.clone();
                fresh.cache = Default::default();
                let a = super::request_body(&cached).unwrap();
                let b = super::request_body(&fresh).unwrap();
                proptest::prop_assert_eq!(
                    String::from_utf8_lossy(&a),
                    String::from_utf8_lossy(&b)
                );
                let parsed: Value = serde_json::from_slice(&a).unwrap();
                proptest::prop_assert_eq!(&parsed["stream"], &json!(true));
            }
        }
    }

    #[test]
    fn a_cache_from_another_transcript_shape_is_not_reused() {
        let u = |t: &str| Message::user(vec![ContentBlock::text(t)], 0);
        let a = |t: &str| message(Role::Assistant, vec![ContentBlock::text(t)]);
        let mut req = request(vec![u("one"), a("two"), u("three")], vec![]);
        super::request_body(&req).unwrap();
        // Two settled groups again, but ending elsewhere in the transcript.
        req.messages = Arc::new(vec![u("x"), u("y"), a("z"), u("w")]);
        let reused = super::request_body(&req).unwrap();
        req.cache = Default::default();
        assert_eq!(reused, super::request_body(&req).unwrap());
    }

    #[test]
    fn tail_breakpoint_skips_thinking_blocks() {
        let messages = vec![message(
            Role::Assistant,
            vec![
                ContentBlock::text("partial"),
                ContentBlock::RedactedThinking { data: "xyz".into() },
            ],
        )];
        let body = request_body(&request(messages, vec![]));
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                { "type": "text", "text": "partial", "cache_control": { "type": "ephemeral" } },
                { "type": "redacted_thinking", "data": "xyz" },
            ])
        );
    }

    /// A complete stream: thinking, text, two tool calls (the second with
    /// invalid JSON), a ping, an unknown event and an unknown block type.
    pub(crate) const FULL_STREAM: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-test\",\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1,\"cache_creation_input_tokens\":200,\"cache_read_input_tokens\":3000}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
        "event: ping\n",
        "data: {\"type\":\"ping\"}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me \"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"look.\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c2lnbmF0dXJl\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Reading \"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"both ✓\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": \\\"a\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\".rs\\\"}\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
        "event: brand_new_event\n",
        "data: {\"type\":\"brand_new_event\",\"whatever\":[1,2]}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"grep\",\"input\":{}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"pattern\\\": \"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":3}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":4,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srv_1\",\"name\":\"web_search\",\"input\":{}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":4,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":4}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":87}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );

    fn full_usage(output_tokens: u64) -> Usage {
        Usage {
            input_tokens: 10,
            output_tokens,
            cache_creation_input_tokens: 200,
            cache_read_input_tokens: 3000,
        }
    }

    fn full_reply() -> Reply {
        Reply {
            content: vec![
                ContentBlock::Thinking {
                    thinking: "Let me look.".into(),
                    signature: "c2lnbmF0dXJl".into(),
                },
                ContentBlock::text("Reading both ✓"),
                ContentBlock::ToolUse {
                    id: "toolu_1".into(),
                    name: "read".into(),
                    input: json!({ "path": "a.rs" }),
                },
                ContentBlock::ToolUse {
                    id: "toolu_2".into(),
                    name: "grep".into(),
                    input: Value::String("{\"pattern\": ".into()),
                },
            ],
            stop_reason: StopReason::ToolUse,
            usage: full_usage(87),
        }
    }

    fn full_events() -> Vec<StreamEvent> {
        use StreamEvent::*;
        vec![
            Usage(full_usage(1)),
            ThinkingDelta {
                index: 0,
                text: "Let me ".into(),
            },
            ThinkingDelta {
                index: 0,
                text: "look.".into(),
            },
            BlockEnd { index: 0 },
            TextDelta {
                index: 1,
                text: "Reading ".into(),
            },
            TextDelta {
                index: 1,
                text: "both ✓".into(),
            },
            BlockEnd { index: 1 },
            ToolUseBegin {
                index: 2,
                id: "toolu_1".into(),
                name: "read".into(),
            },
            ToolInputDelta {
                index: 2,
                partial_json: String::new(),
            },
            ToolInputDelta {
                index: 2,
                partial_json: "{\"path\": \"a".into(),
            },
            ToolInputDelta {
                index: 2,
                partial_json: ".rs\"}".into(),
            },
            BlockEnd { index: 2 },
            ToolUseBegin {
                index: 3,
                id: "toolu_2".into(),
                name: "grep".into(),
            },
            ToolInputDelta {
                index: 3,
                partial_json: "{\"pattern\": ".into(),
            },
            BlockEnd { index: 3 },
            Usage(full_usage(87)),
        ]
    }

    #[tokio::test]
    async fn full_stream_becomes_a_reply() {
        let (events, reply) = testkit::parse(AnthropicStream::default(), FULL_STREAM, 11).await;
        assert_eq!(reply.unwrap(), full_reply());
        assert_eq!(events, full_events());
    }

    #[tokio::test]
    async fn unclosed_blocks_are_closed_at_message_stop() {
        let stream = concat!(
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"think\"}}\n\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"brand_new_reason\"}}\n\n",
            "data: {\"type\":\"message_stop\"}\n\n",
        );
        let (events, reply) = testkit::parse(AnthropicStream::default(), stream, 5).await;
        let reply = reply.unwrap();
        assert_eq!(reply.content, vec![tool_use_named("t", "think", json!({}))]);
        assert_eq!(
            reply.stop_reason,
            StopReason::Other("brand_new_reason".into())
        );
        assert_eq!(events.last(), Some(&StreamEvent::BlockEnd { index: 0 }));
    }

    fn tool_use_named(id: &str, name: &str, input: Value) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
        }
    }

    #[tokio::test]
    async fn error_event_after_200_is_a_stream_error() {
        let stream = concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
            "event: error\n",
            "data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        );
        let (_, reply) = testkit::parse(AnthropicStream::default(), stream, 3).await;
        let err = reply.unwrap_err();
        assert!(
            matches!(&err, LlmError::Stream { error_type, .. } if error_type == "overloaded_error")
        );
        assert!(err.is_retryable());
        assert_eq!(
            err.to_string(),
            "stream error (overloaded_error): Overloaded"
        );
    }

    #[tokio::test]
    async fn truncated_or_malformed_streams() {
        let cut = &FULL_STREAM[..FULL_STREAM.find("event: message_delta").unwrap()];
        let (_, reply) = testkit::parse(AnthropicStream::default(), cut, 64).await;
        let err = reply.unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }), "{err}");
        assert!(err.is_retryable());

        let bad = "data: {\"type\":\"content_block_delta\",\"index\":9,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
        let (_, reply) = testkit::parse(AnthropicStream::default(), bad, 64).await;
        assert!(matches!(reply, Err(LlmError::Decode { .. })));

        let (_, reply) =
            testkit::parse(AnthropicStream::default(), "data: {not json\n\n", 64).await;
        let err = reply.unwrap_err();
        assert!(matches!(err, LlmError::Decode { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("malformed stream: event \"message\" has data that is not JSON: "),
            "{err}"
        );
    }

    /// The start of a reply, then `tail`.
    fn after_start(tail: &str) -> String {
        format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"usage\":{{\"input_tokens\":1,\"output_tokens\":1}}}}}}\n\n\
             event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
             {tail}"
        )
    }

    /// Every shape of `error` event, byte for byte, and how it is taken:
    /// (data, retryable, kind, message).
    #[tokio::test]
    async fn error_events_are_classified_whatever_their_shape() {
        use ErrorKind::*;
        let table: &[(&str, bool, ErrorKind, &str)] = &[
            // As the Messages streaming docs show it.
            (
                r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
                true,
                Unknown,
                "stream error (overloaded_error): Overloaded",
            ),
            // The legacy shape: no top-level `type`.
            (
                r#"{"error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
                true,
                Unknown,
                "stream error (overloaded_error): Overloaded",
            ),
            (
                r#"{"error": {"type": "api_error", "message": "Internal server error"}}"#,
                true,
                Unknown,
                "stream error (api_error): Internal server error",
            ),
            // A bare error object.
            (
                r#"{"type":"overloaded_error","message":"Overloaded"}"#,
                true,
                Unknown,
                "stream error (overloaded_error): Overloaded",
            ),
            (
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}"#,
                false,
                InvalidRequest,
                "stream error (invalid_request_error): max_tokens: too large",
            ),
            (
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"Slow down"}}"#,
                false,
                RateLimit,
                "stream error (rate_limit_error): Slow down",
            ),
            (
                r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
                false,
                Auth,
                "stream error (authentication_error): invalid x-api-key",
            ),
            (
                r#"{"type":"error","error":{"type":"brand_new_error","message":"Something new"}}"#,
                false,
                Unknown,
                "stream error (brand_new_error): Something new",
            ),
            (
                r#"{"error": "Overloaded"}"#,
                false,
                Unknown,
                "stream error (error): Overloaded",
            ),
            (
                "the upstream went away",
                false,
                Unknown,
                "stream error (error): the upstream went away",
            ),
            ("", false, Unknown, "stream error (error): no message"),
        ];
        for (data, retryable, kind, message) in table {
            let stream = after_start(&format!("event: error\ndata: {data}\n\n"));
            let (events, reply) = testkit::parse(AnthropicStream::default(), &stream, 7).await;
            let err = reply.unwrap_err();
            assert!(matches!(err, LlmError::Stream { .. }), "{data}: {err}");
            let failure = err.to_failure();
            assert_eq!(
                (failure.retryable, failure.kind, failure.message.as_str()),
                (*retryable, *kind, *message),
                "{data}"
            );
            assert_eq!(
                events.len(),
                1,
                "only the usage of message_start: {events:?}"
            );
        }
    }

    #[tokio::test]
    async fn events_are_taken_by_name_and_unknown_names_are_ignored() {
        let stream = after_start(concat!(
            // The legacy Text Completions event: no `type`.
            "event: completion\n",
            "data: {\"completion\": \" Hello\", \"stop_reason\": null, \"model\": \"claude-2.0\"}\n\n",
            // A future event whose data is not even JSON.
            "event: brand_new_event\n",
            "data: <b>not json</b>\n\n",
            "event: ping\n",
            "data: {\"type\": \"ping\"}\n\n",
            // Data without `type`: the event name says what it is.
            "event: content_block_delta\n",
            "data: {\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"by name\"}}\n\n",
            // No event name: the data's `type` names it, and an unknown or
            // missing one is ignored like an unknown name.
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\", by type\"}}\n\n",
            "data: {\"type\":\"brand_new_event\"}\n\n",
            "data: {\"no\":\"type\"}\n\n",
            "event: content_block_stop\n",
            "data: {\"index\":0}\n\n",
            "event: message_delta\n",
            "data: {\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4}}\n\n",
            "event: message_stop\n",
            "data: {}\n\n",
        ));
        for chunk in [1, 5, 64] {
            let (events, reply) = testkit::parse(AnthropicStream::default(), &stream, chunk).await;
            let reply = reply.unwrap();
            assert_eq!(reply.content, vec![ContentBlock::text("by name, by type")]);
            assert_eq!(reply.stop_reason, StopReason::EndTurn);
            assert_eq!(reply.usage.output_tokens, 4);
            assert_eq!(
                events.last(),
                Some(&StreamEvent::Usage(reply.usage)),
                "{events:?}"
            );
        }
    }

    #[tokio::test]
    async fn data_that_is_not_json_is_an_error_naming_the_event() {
        let table: &[(&str, &str)] = &[
            (
                "event: content_block_delta\ndata: upstream connect error or disconnect/reset before headers\n\n",
                "malformed stream: event \"content_block_delta\" has data that is not JSON: \
                 expected value at line 1 column 1, in \"upstream connect error or disconnect/reset before headers\"",
            ),
            // A line cut short is not JSON either.
            (
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0\n\n",
                "malformed stream: event \"content_block_delta\" has data that is not JSON: \
                 EOF while parsing an object at line 1 column 39, in \"{\\\"type\\\":\\\"content_block_delta\\\",\\\"index\\\":0\"",
            ),
            (
                "event: message_stop\ndata: done\n\n",
                "malformed stream: event \"message_stop\" has data that is not JSON: \
                 expected value at line 1 column 1, in \"done\"",
            ),
            // JSON of another shape is told apart.
            (
                "event: content_block_delta\ndata: {\"index\":\"zero\",\"delta\":{}}\n\n",
                "malformed stream: event \"content_block_delta\" has unexpected data: \
                 invalid type: string \"zero\", expected u32 at line 1 column 15",
            ),
        ];
        for (tail, message) in table {
            let (_, reply) =
                testkit::parse(AnthropicStream::default(), &after_start(tail), 3).await;
            let err = reply.unwrap_err();
            assert!(matches!(err, LlmError::Decode { .. }), "{err}");
            assert!(!err.is_retryable());
            assert_eq!(err.to_string(), *message);
        }

        // Long data is quoted only in part.
        let long = format!(
            "event: content_block_delta\ndata: <html>{}</html>\n\n",
            "x".repeat(5000)
        );
        let (_, reply) = testkit::parse(AnthropicStream::default(), &after_start(&long), 64).await;
        let message = reply.unwrap_err().to_string();
        assert!(message.ends_with("xxx…\""), "{message}");
        assert!(message.len() < 300, "{message}");
    }

    // End-to-end over HTTP against a canned local server.

    fn provider(server: &TestServer) -> AnthropicProvider {
        AnthropicProvider::new("sk-ant-test-key".into(), format!("{}/", server.base_url)).unwrap()
    }

    fn simple_request() -> LlmRequest {
        request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![spec("read")],
        )
    }

    #[tokio::test]
    async fn http_streaming_success() {
        let mut server = TestServer::start(testkit::sse_response(FULL_STREAM)).await;
        let provider = provider(&server);
        let mut events = Vec::new();
        let mut on_event = |e: StreamEvent| events.push(e);
        let reply = provider
            .stream(&simple_request(), &mut on_event, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(reply, full_reply());
        // Deltas that arrive in one read are passed on merged.
        assert_eq!(testkit::merged(events), testkit::merged(full_events()));

        let seen = server.request().await;
        assert_eq!(seen.request_line, "POST /v1/messages HTTP/1.1");
        assert_eq!(seen.header("x-api-key"), Some("sk-ant-test-key"));
        assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(seen.header("content-type"), Some("application/json"));
        assert_eq!(seen.json(), request_body(&simple_request()));
    }

    #[tokio::test]
    async fn http_401_is_auth_and_not_retried() {
        let server = TestServer::start(testkit::json_response(
            "401 Unauthorized",
            &[("request-id", "req_401")],
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        ))
        .await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        let failure = err.to_failure();
        assert_eq!(failure.kind, ErrorKind::Auth);
        assert!(!failure.retryable);
        assert_eq!(
            failure.message,
            "HTTP 401 (authentication_error): invalid x-api-key [request-id req_401]"
        );
        assert!(!failure.message.contains("sk-ant-test-key"));
    }

    #[tokio::test]
    async fn http_429_with_retry_after() {
        let server = TestServer::start(testkit::json_response(
            "429 Too Many Requests",
            &[("retry-after", "3")],
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        ))
        .await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        let failure = err.to_failure();
        assert_eq!(
            (failure.kind, failure.retryable, failure.retry_after_ms),
            (ErrorKind::RateLimit, true, Some(3000))
        );
    }

    #[tokio::test]
    async fn http_mid_stream_error_event() {
        let stream = concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
            "event: error\n",
            "data: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n\n",
        );
        let server = TestServer::start(testkit::sse_response(stream)).await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(
            err.to_string(),
            "stream error (api_error): Internal server error [request-id req_test]"
        );
    }

    #[tokio::test]
    async fn http_legacy_error_event_is_retryable_and_names_the_request() {
        let stream = after_start(concat!(
            "event: error\n",
            "data: {\"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n",
        ));
        let server = TestServer::start(testkit::sse_response(&stream)).await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(
            err.to_string(),
            "stream error (overloaded_error): Overloaded [request-id req_test]"
        );
    }

    #[tokio::test]
    async fn http_dropped_connection_before_message_stop() {
        let cut = &FULL_STREAM[..FULL_STREAM.find("event: message_delta").unwrap()];
        // The socket closes without the final chunk: a broken body.
        let mut steps = vec![testkit::sse_head()];
        steps.extend(testkit::chunks(cut));
        let server = TestServer::start(steps).await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }), "{err}");
        assert!(err.is_retryable());
        assert_eq!(err.kind(), ErrorKind::Network);
        assert_eq!(err.request_id(), Some("req_test"));

        // The body ends cleanly, but before message_stop.
        let server = TestServer::start(testkit::sse_response(cut)).await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }), "{err}");
        assert!(err.to_string().contains("before message_stop"), "{err}");
    }

    #[tokio::test]
    async fn http_cancel_returns_promptly_and_drops_the_connection() {
        let first = &FULL_STREAM[..FULL_STREAM.find("event: content_block_stop").unwrap()];
        let mut steps = vec![testkit::sse_head()];
        steps.extend(testkit::chunks(first));
        steps.push(Step::HoldOpen);
        let server = TestServer::start(steps).await;
        let provider = provider(&server);

        let cancel = CancellationToken::new();
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let mut first_tx = Some(first_tx);
        let mut on_event = move |e: StreamEvent| {
            if matches!(e, StreamEvent::ThinkingDelta { .. })
                && let Some(tx) = first_tx.take()
            {
                let _ = tx.send(());
            }
        };
        let canceller = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                let _ = first_rx.await;
                cancel.cancel();
                Instant::now()
            })
        };
        let req = simple_request();
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            provider.stream(&req, &mut on_event, cancel),
        )
        .await
        .expect("stream() must return once cancelled");
        let returned = Instant::now();
        assert!(matches!(result, Err(LlmError::Cancelled)), "{result:?}");
        let cancelled_at = canceller.await.unwrap();
        assert!(returned.duration_since(cancelled_at) < Duration::from_millis(500));
        assert!(
            server.peer_closed().await,
            "the HTTP connection must be dropped"
        );
    }

    #[tokio::test]
    async fn already_cancelled_token_sends_nothing() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let provider = AnthropicProvider::new("k".into(), "http://127.0.0.1:9".into()).unwrap();
        let result = provider
            .stream(&simple_request(), &mut |_| {}, cancel)
            .await;
        assert!(matches!(result, Err(LlmError::Cancelled)));
    }

    #[tokio::test]
    async fn stalled_stream_times_out_as_a_connection_error() {
        let mut steps = vec![testkit::sse_head()];
        steps.extend(testkit::chunks(
            "event: ping\ndata: {\"type\":\"ping\"}\n\n",
        ));
        steps.push(Step::HoldOpen);
        let server = TestServer::start(steps).await;
        let timeouts = Timeouts {
            connect: Duration::from_secs(5),
            read: Duration::from_millis(300),
        };
        let provider =
            AnthropicProvider::with_timeouts("k".into(), server.base_url.clone(), timeouts)
                .unwrap();
        let err = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }), "{err}");
        assert!(err.is_retryable());
    }

    #[tokio::test]
    async fn refused_connection_is_a_retryable_network_error() {
        // Bind and drop a listener to find a port nobody listens on.
        let port = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let provider =
            AnthropicProvider::new("k".into(), format!("http://127.0.0.1:{port}")).unwrap();
        let err = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }), "{err}");
        assert_eq!(err.kind(), ErrorKind::Network);
        assert!(err.is_retryable());
    }

    #[test]
    fn bad_configuration() {
        assert!(matches!(
            AnthropicProvider::new(String::new(), "https://api.anthropic.com".into()),
            Err(LlmError::Config(_))
        ));
        assert!(matches!(
            AnthropicProvider::new("k\n".into(), "https://api.anthropic.com".into()).map(|_| ()),
            Ok(())
        ));
        assert!(matches!(
            AnthropicProvider::new("bad\u{1}key".into(), "https://api.anthropic.com".into()),
            Err(LlmError::Config(_))
        ));
        assert!(matches!(
            AnthropicProvider::new("k".into(), "api.anthropic.com".into()),
            Err(LlmError::Config(_))
        ));
    }
}
