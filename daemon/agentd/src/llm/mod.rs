//! Model providers: one streaming request in, stream events and a complete
//! [`Reply`] out.
//!
//! - [`AnthropicProvider`]: the Messages API with `stream: true`, the primary
//!   provider, with prompt caching of the system prompt, the tools and the
//!   conversation tail.
//! - [`OpenAiProvider`]: OpenAI-compatible chat completions (OpenAI, Ollama,
//!   vLLM, llama.cpp, OpenRouter).
//! - [`KeyedProvider`]: what the daemon runs with: resolves the API key for
//!   every request (`credentials`: config file, credentials file,
//!   environment) and builds one of the two for it.
//!
//! A provider call is exactly one attempt. Retrying belongs to the state
//! machine, which must show "retrying (2/3)" and must be able to cancel a
//! scheduled retry; the provider's part is to classify the failure
//! ([`LlmError::to_failure`]). Cancellation drops the HTTP stream at once.
//!
//! Layout: `sse` decodes event streams, `transport` holds the HTTP plumbing
//! both providers share, `retry` reads retry hints from headers, `error`
//! classifies failures, `partial` keeps what a cancelled stream produced;
//! `fuzzing` lets the fuzzer read bodies the way providers do.

mod anthropic;
pub(crate) mod credentials;
mod error;
pub mod fuzzing;
mod openai;
mod partial;
mod retry;
pub mod sse;
mod transport;

#[cfg(test)]
mod testkit;

pub(crate) use anthropic::AnthropicProvider;
pub(crate) use credentials::KeyedProvider;
pub(crate) use error::LlmError;
pub(crate) use openai::OpenAiProvider;
pub(crate) use partial::PartialReply;

use agentd_core::{Message, Reply, ToolSpec, Usage};
use futures::future::BoxFuture;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One request to a model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LlmRequest {
    /// The provider's model name.
    pub model: String,
    /// The system prompt; empty for none. Shared: it changes once a day.
    pub system: Arc<str>,
    /// The transcript. Providers sanitize it on the way out (see each
    /// provider), so it may contain empty messages or same-role runs.
    /// Shared with the conversation, which copies it only if it must append
    /// while this request still holds it.
    pub messages: Arc<Vec<Message>>,
    /// The tools the model may call (shared: the same for every request of
    /// a mode).
    pub tools: Arc<[ToolSpec]>,
    /// Upper bound on the reply's output tokens (thinking included: above
    /// a thinking budget).
    pub max_tokens: u32,
    /// The thinking this request asks for (see `agentd_core::thinking`).
    pub thinking: Option<agentd_core::ThinkingParams>,
    /// The encoded start of the transcript from this conversation's
    /// earlier requests, which a provider may reuse (the transcript only
    /// grows; the conversation replaces the cache if it ever shrinks).
    pub cache: RequestCache,
    /// The base64 of the images the transcript refers to, by SHA-256 (an
    /// image not found here is sent as a note saying so).
    pub images: crate::images::ImageData,
    /// Offer the provider's own web search, at most this many searches a
    /// reply (`[web] search`; Anthropic only, others ignore it).
    pub web_search: Option<u32>,
}

/// Encoded transcript prefix shared by the requests of one conversation.
#[derive(Clone, Default)]
pub(crate) struct RequestCache(Arc<std::sync::Mutex<Option<EncodedPrefix>>>);

/// The first `groups` messages as sent (after merging), covering the first
/// `covered` transcript messages, encoded and joined by commas.
#[derive(Debug)]
pub(crate) struct EncodedPrefix {
    pub covered: usize,
    pub groups: usize,
    pub bytes: Vec<u8>,
}

impl RequestCache {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Option<EncodedPrefix>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for RequestCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestCache")
    }
}

/// A cache is not part of what a request asks.
impl PartialEq for RequestCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
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
        index: u32,
        text: String,
    },
    /// More reasoning of a thinking block.
    ThinkingDelta {
        index: u32,
        text: String,
    },
    /// The model began a tool call.
    ToolUseBegin {
        index: u32,
        /// The tool_use id.
        id: String,
        name: String,
    },
    /// More of a tool call's input JSON (concatenate the fragments).
    ToolInputDelta {
        index: u32,
        /// The next fragment of the JSON text.
        partial_json: String,
    },
    BlockEnd {
        index: u32,
    },
    /// The reply's token usage so far (a snapshot, not an increment).
    Usage(Usage),
}

/// A model provider.
pub(crate) trait Provider: Send + Sync + std::fmt::Debug {
    /// Streams one reply. Each stream event is passed to `on_event` as it
    /// arrives; consecutive deltas of one block that arrive together (in
    /// one read from the network) are passed as one delta with their
    /// concatenated text. Returns the complete reply, or an error; returns
    /// `Err(LlmError::Cancelled)` promptly when `cancel` fires, dropping the
    /// HTTP stream at once.
    fn stream<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, LlmError>>;
}

/// Which provider to talk to, and how (built from `config::Config`). Its
/// `Debug` output never shows a key.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum ProviderConfig {
    /// The Anthropic Messages API.
    Anthropic {
        api_key: String,
        /// E.g. `https://api.anthropic.com`.
        base_url: String,
    },
    /// An OpenAI-compatible chat-completions server.
    OpenAi {
        /// The bearer token; local servers often need none.
        api_key: Option<String>,
        /// E.g. `https://api.openai.com/v1` or `http://localhost:11434`.
        base_url: String,
    },
}

impl ProviderConfig {
    /// Builds the provider.
    pub(crate) fn build(&self) -> Result<Arc<dyn Provider>, LlmError> {
        Ok(match self {
            ProviderConfig::Anthropic { api_key, base_url } => {
                Arc::new(AnthropicProvider::new(api_key.clone(), base_url.clone())?)
            }
            ProviderConfig::OpenAi { api_key, base_url } => {
                Arc::new(OpenAiProvider::new(api_key.clone(), base_url.clone())?)
            }
        })
    }
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderConfig::Anthropic { base_url, .. } => f
                .debug_struct("Anthropic")
                .field("api_key", &"<redacted>")
                .field("base_url", &transport::redact(base_url))
                .finish(),
            ProviderConfig::OpenAi { api_key, base_url } => f
                .debug_struct("OpenAi")
                .field("api_key", &api_key.as_ref().map(|_| "<redacted>"))
                .field("base_url", &transport::redact(base_url))
                .finish(),
        }
    }
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

/// A block index as stream events carry it. Replies have a handful of
/// blocks, so the saturation is never reached in practice.
fn wire_index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_debug_hides_keys() {
        let c = ProviderConfig::Anthropic {
            api_key: "sk-ant-secret".into(),
            base_url: "https://u:pw-secret@example.com".into(),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("secret"), "{shown}");
        let provider = c.build().unwrap();
        let shown = format!("{provider:?}");
        assert!(!shown.contains("secret"), "{shown}");
        let c = ProviderConfig::OpenAi {
            api_key: Some("sk-secret".into()),
            base_url: crate::config::OPENAI_DEFAULT_BASE_URL.into(),
        };
        assert!(!format!("{c:?}").contains("secret"));
        assert!(!format!("{:?}", c.build().unwrap()).contains("secret"));
    }

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
