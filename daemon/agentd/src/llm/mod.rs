//! Model providers: one streaming request in, stream events and a complete
//! [`Reply`] out.
//!
//! - [`AnthropicProvider`]: the Messages API with `stream: true`, the primary
//!   provider, with prompt caching of the system prompt, the tools and the
//!   conversation tail.
//!
//! A provider call is exactly one attempt. Retrying belongs to the state
//! machine, which must show "retrying (2/3)" and must be able to cancel a
//! scheduled retry; the provider's part is to classify the failure
//! ([`LlmError::to_failure`]). Cancellation drops the HTTP stream at once.
//!
//! Layout: `sse` decodes event streams, `transport` holds the HTTP plumbing
//! both providers share, `retry` reads retry hints from headers, `error`
//! classifies failures.

mod anthropic;
mod error;
mod retry;
pub mod sse;
mod transport;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod testkit;

pub use anthropic::AnthropicProvider;
pub use error::LlmError;

use agentd_core::{Message, Reply, ToolSpec, Usage};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One request to a model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmRequest {
    /// The provider's model name.
    pub model: String,
    /// The system prompt; empty for none.
    pub system: String,
    /// The transcript. Providers sanitize it on the way out (see each
    /// provider), so it may contain empty messages or same-role runs.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Upper bound on the reply's output tokens.
    pub max_tokens: u32,
}

/// Something the model produced, as it streams. `index` identifies a block
/// within the reply: all events of one block carry its index, blocks appear
/// in the final [`Reply`] in index order, and a block ends with
/// [`StreamEvent::BlockEnd`]. (Indices may skip numbers: blocks of a type
/// this version does not know are left out.)
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// More text of a text block (the first delta also begins the block).
    TextDelta {
        /// The block.
        index: u32,
        /// The new text.
        text: String,
    },
    /// More reasoning of a thinking block.
    ThinkingDelta {
        /// The block.
        index: u32,
        /// The new reasoning text.
        text: String,
    },
    /// The model began a tool call.
    ToolUseBegin {
        /// The block.
        index: u32,
        /// The tool_use id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's input JSON (concatenate the fragments).
    ToolInputDelta {
        /// The block.
        index: u32,
        /// The next fragment of the JSON text.
        partial_json: String,
    },
    /// A block is complete.
    BlockEnd {
        /// The block.
        index: u32,
    },
    /// The reply's token usage so far (a snapshot, not an increment).
    Usage(Usage),
}

/// A model provider.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// Streams one reply. Each stream event is passed to `on_event` as it
    /// arrives. Returns the complete reply, or an error; returns
    /// `Err(LlmError::Cancelled)` promptly when `cancel` fires, dropping the
    /// HTTP stream at once.
    fn stream<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, LlmError>>;
}

/// A tool call's input from the JSON text the model streamed. No text means
/// no arguments (`{}`); text that is not valid JSON is kept verbatim as a
/// JSON string, so that the tool layer can tell the model what was wrong.
fn tool_input_from_json(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn tool_input_parsing() {
        assert_eq!(tool_input_from_json(""), serde_json::json!({}));
        assert_eq!(
            tool_input_from_json("{\"a\":1}"),
            serde_json::json!({"a": 1})
        );
        assert_eq!(
            tool_input_from_json("{\"a\":"),
            Value::String("{\"a\":".into())
        );
    }
}
