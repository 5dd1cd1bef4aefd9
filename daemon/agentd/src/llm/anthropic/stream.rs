//! Decoding a streamed Messages reply: the SSE events by name, and the
//! content blocks they assemble into a [`Reply`].

use agentd_core::{ContentBlock, Reply, StopReason, Usage};
use serde::Deserialize;
use std::collections::BTreeMap;

use crate::llm::sse::SseEvent;
use crate::llm::transport::{self, Flow, StreamParser};
use crate::llm::{LlmError, StreamEvent, tool_input_from_json};

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
    content_block: serde_json::Value,
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
    /// A server tool's block (`agentd_core::server_tools`): kept as it
    /// came, with the input its `input_json_delta`s bring (a call's).
    Server {
        block: serde_json::Value,
        json: String,
    },
    /// A block type this version does not know: its events are ignored
    /// and it is left out of the reply.
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
        raw: serde_json::Value,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<(), LlmError> {
        if self.blocks.contains_key(&index) {
            return Err(LlmError::decode(format!(
                "content block {index} started twice"
            )));
        }
        let kind = raw.get("type").and_then(serde_json::Value::as_str);
        if kind.is_some_and(agentd_core::server_tools::is_server_block) {
            let block = Block::Server {
                block: raw,
                json: String::new(),
            };
            self.blocks.insert(index, Slot { block, open: true });
            return Ok(());
        }
        let block: WireBlock = serde_json::from_value(raw)
            .map_err(|e| LlmError::decode(format!("content block {index} cannot be read: {e}")))?;
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
            (Block::Server { json, .. }, WireDelta::InputJsonDelta { partial_json }) => {
                json.push_str(&partial_json);
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
        Block::Server { .. } => "server tool",
        Block::Ignored => "unknown",
    }
}

fn close(index: u32, slot: &mut Slot, emit: &mut dyn FnMut(StreamEvent)) {
    if slot.open && !matches!(slot.block, Block::Ignored | Block::Server { .. }) {
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
                Block::Server { block, json } => Some(server_block(block, &json)),
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

/// A server tool's block as it goes into the transcript: as it started,
/// with the input its deltas streamed (a search's query) in place of the
/// empty one it started with.
fn server_block(mut block: serde_json::Value, json: &str) -> ContentBlock {
    if !json.trim().is_empty()
        && let Some(fields) = block.as_object_mut()
    {
        fields.insert("input".to_string(), tool_input_from_json(json));
    }
    ContentBlock::ServerTool { block }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::llm::testkit;
    use agentd_core::ErrorKind;
    use serde_json::{Value, json};

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
        "data: {\"type\":\"content_block_start\",\"index\":4,\"content_block\":{\"type\":\"mystery_block\",\"id\":\"m_1\"}}\n\n",
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

    pub(crate) fn full_reply() -> Reply {
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

    pub(crate) fn full_events() -> Vec<StreamEvent> {
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

    /// A web search the API ran: its call (input streamed as JSON deltas)
    /// and its result are kept as they came, and are no calls of ours.
    #[tokio::test]
    async fn server_tool_blocks_are_kept_as_they_came() {
        let stream = concat!(
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_1\",\"name\":\"web_search\",\"input\":{}}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"query\\\": \\\"htmd\"}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\" crate\\\"}\"}}\n\n",
            "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"web_search_tool_result\",\"tool_use_id\":\"srvtoolu_1\",\"content\":[{\"type\":\"web_search_result\",\"title\":\"htmd\",\"url\":\"https://docs.rs/htmd\",\"encrypted_content\":\"EqgfCioIARgB\",\"page_age\":null}]}}\n\n",
            "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"Found it.\"}}\n\n",
            "data: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n",
            "data: {\"type\":\"message_stop\"}\n\n",
        );
        let (events, reply) = testkit::parse(AnthropicStream::default(), stream, 64).await;
        let reply = reply.unwrap();
        assert_eq!(
            reply.content,
            vec![
                ContentBlock::ServerTool {
                    block: json!({"type": "server_tool_use", "id": "srvtoolu_1",
                        "name": "web_search", "input": {"query": "htmd crate"}}),
                },
                ContentBlock::ServerTool {
                    block: json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                        "content": [{"type": "web_search_result", "title": "htmd",
                            "url": "https://docs.rs/htmd", "encrypted_content": "EqgfCioIARgB",
                            "page_age": null}]}),
                },
                ContentBlock::text("Found it."),
            ]
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolUseBegin { .. })),
            "{events:?}"
        );
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
    pub(crate) fn after_start(tail: &str) -> String {
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
}
