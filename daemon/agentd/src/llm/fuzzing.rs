//! The entry point the fuzzer (`tests/src/fuzz/sse.rs`) reads model
//! streams through: a response body, cut into chunks, decoded exactly as a
//! provider decodes it (the SSE decoder, then the provider's stream
//! parser), without HTTP; and [`merged`], what a stream says however its
//! deltas were batched, which the fuzzer and the providers' unit tests
//! compare. Nothing in the daemon calls them.

use agentd_core::Reply;
use bytes::Bytes;

use super::StreamEvent;
use super::anthropic::AnthropicStream;
use super::openai::OpenAiStream;
use super::transport::parse_body;

/// Which provider's stream format to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Anthropic Messages (`event:` names, `message_stop`).
    Anthropic,
    /// OpenAI-compatible chat completions (`data:` chunks, `[DONE]`).
    OpenAi,
}

/// Reads a response body that arrives as `chunks` (each chunk one read
/// from the network). Returns the stream events passed on, in order, and
/// the reply or the error (as its message).
pub async fn read_body(
    wire: Wire,
    chunks: Vec<Bytes>,
) -> (Vec<StreamEvent>, Result<Reply, String>) {
    let body = futures::stream::iter(chunks.into_iter().map(Ok));
    let mut events = Vec::new();
    let mut emit = |e: StreamEvent| events.push(e);
    let reply = match wire {
        Wire::Anthropic => parse_body(body, AnthropicStream::default(), &mut emit).await,
        Wire::OpenAi => parse_body(body, OpenAiStream::default(), &mut emit).await,
    };
    (events, reply.map_err(|e| e.to_string()))
}

/// `events` with every run of consecutive deltas of one block merged into
/// one: what a stream looks like however its deltas were batched (deltas
/// that arrive in one read are passed on as one).
pub fn merged(events: Vec<StreamEvent>) -> Vec<StreamEvent> {
    let mut out: Vec<StreamEvent> = Vec::new();
    for event in events {
        let appended = match (out.last_mut(), &event) {
            (
                Some(StreamEvent::TextDelta { index, text }),
                StreamEvent::TextDelta {
                    index: next,
                    text: more,
                },
            )
            | (
                Some(StreamEvent::ThinkingDelta { index, text }),
                StreamEvent::ThinkingDelta {
                    index: next,
                    text: more,
                },
            )
            | (
                Some(StreamEvent::ToolInputDelta {
                    index,
                    partial_json: text,
                }),
                StreamEvent::ToolInputDelta {
                    index: next,
                    partial_json: more,
                },
            ) if index == next => {
                text.push_str(more);
                true
            }
            _ => false,
        };
        if !appended {
            out.push(event);
        }
    }
    out
}
