//! Decoding a streamed chat-completions reply: chunks, errors and `[DONE]`,
//! and the blocks they assemble into a [`Reply`].

use agentd_core::{ContentBlock, Reply, StopReason, Usage};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;

use crate::llm::sse::SseEvent;
use crate::llm::transport::{self, Flow, StreamParser};
use crate::llm::{LlmError, StreamEvent, tool_input_from_json, wire_index};

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
pub(crate) mod tests {
    use super::*;
    use crate::llm::testkit;
    use agentd_core::ErrorKind;
    use serde_json::json;

    pub(crate) const FULL_STREAM: &str = concat!(
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

    pub(crate) fn full_reply() -> Reply {
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
    async fn openrouters_reasoning_spelling_is_thinking_too() {
        let stream = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"Hm, \"},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"yes.\"},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Yes.\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (events, reply) = testkit::parse(OpenAiStream::default(), stream, 7).await;
        let reply = reply.unwrap();
        assert_eq!(
            reply.content[0],
            ContentBlock::Thinking {
                thinking: "Hm, yes.".into(),
                signature: String::new(),
            }
        );
        // Shown like thinking, and (unsigned) never sent back.
        assert!(matches!(&events[0], StreamEvent::ThinkingDelta { text, .. } if text == "Hm, "));
        assert!(!agentd_core::thinking::goes_back(&reply.content[0]));
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
}
