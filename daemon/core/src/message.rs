//! The transcript: messages, content blocks, usage and stop reasons, in the
//! provider-neutral shape the core reasons about.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::image::ImageRef;

/// Who wrote a message. Tool results travel back to the model as `User`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A person, or the tool results sent back to the model.
    User,
    /// The model.
    Assistant,
}

/// One block of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text { text: String },
    /// The model's reasoning; the signature must be sent back unchanged.
    Thinking { thinking: String, signature: String },
    /// Reasoning the provider encrypted; sent back unchanged.
    RedactedThinking { data: String },
    /// A tool call. `input` is the parsed JSON; when the model produced
    /// invalid JSON it holds the raw text as a JSON string, and the tool
    /// layer answers with an error result.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// An image a user sent; the bytes are kept elsewhere, by its SHA-256.
    Image(ImageRef),
    /// The answer to a tool call.
    ToolResult {
        tool_use_id: String,
        content: String,
        is_error: bool,
        /// Images the tool returned with its text (`read` of an image
        /// file, an MCP tool's image content); the bytes are kept like a
        /// user's images.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImageRef>,
    },
    /// A block of a tool the provider runs itself (Anthropic's server
    /// tools: a `server_tool_use` call, a `web_search_tool_result`), as the
    /// provider sent it. It is no tool call of ours: nothing runs it and
    /// no result answers it; it is stored and sent back unchanged (see
    /// `crate::server_tools`).
    ServerTool { block: Value },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// A tool result block.
    pub fn tool_result(
        tool_use_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> Self {
        ContentBlock::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: content.into(),
            is_error,
            images: Vec::new(),
        }
    }
}

/// Token usage of one reply, or a sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens neither read from nor written to the cache.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Every token of the context window this reply occupied.
    pub fn context_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.cache_read_input_tokens)
            .saturating_add(self.output_tokens)
    }

    /// What `self` has beyond `other`, field by field (0 where `other`
    /// has more).
    pub fn minus(&self, other: &Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_sub(other.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(other.output_tokens),
            cache_creation_input_tokens: self
                .cache_creation_input_tokens
                .saturating_sub(other.cache_creation_input_tokens),
            cache_read_input_tokens: self
                .cache_read_input_tokens
                .saturating_sub(other.cache_read_input_tokens),
        }
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .saturating_add(other.cache_creation_input_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .saturating_add(other.cache_read_input_tokens);
    }
}

/// Why the model stopped. The parity spec's set plus `pause_turn`, `refusal`
/// and `model_context_window_exceeded`; anything else is kept as `Other`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its turn.
    EndTurn,
    /// The model wants tools run; the loop continues.
    ToolUse,
    /// The reply hit `max_tokens`.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The provider filtered the content.
    ContentFiltered,
    GuardrailIntervened,
    /// A long turn was paused by the provider; it continues as-is.
    PauseTurn,
    Refusal,
    /// The context window was exceeded.
    ModelContextWindowExceeded,
    /// A stop reason this version does not know; tolerated.
    Other(String),
}

impl StopReason {
    /// Parses the provider's wire name.
    pub fn from_wire(s: &str) -> Self {
        match s {
            "end_turn" => StopReason::EndTurn,
            "tool_use" => StopReason::ToolUse,
            "max_tokens" => StopReason::MaxTokens,
            "stop_sequence" => StopReason::StopSequence,
            "content_filtered" => StopReason::ContentFiltered,
            "guardrail_intervened" => StopReason::GuardrailIntervened,
            "pause_turn" => StopReason::PauseTurn,
            "refusal" => StopReason::Refusal,
            "model_context_window_exceeded" => StopReason::ModelContextWindowExceeded,
            other => StopReason::Other(other.to_string()),
        }
    }

    /// The provider's wire name.
    pub fn as_wire(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::ContentFiltered => "content_filtered",
            StopReason::GuardrailIntervened => "guardrail_intervened",
            StopReason::PauseTurn => "pause_turn",
            StopReason::Refusal => "refusal",
            StopReason::ModelContextWindowExceeded => "model_context_window_exceeded",
            StopReason::Other(s) => s,
        }
    }
}

/// One message of a transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// Its blocks, in order.
    pub content: Vec<ContentBlock>,
    /// When it was appended (Unix ms, from the context's clock reading).
    pub created_at_ms: i64,
    /// Assistant replies: token usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Assistant replies: why the model stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// The reply was cut short by a cancel.
    #[serde(default)]
    pub interrupted: bool,
    /// What the message is in the conversation's life (most are ordinary).
    #[serde(default, skip_serializing_if = "MessageKind::is_ordinary")]
    pub kind: MessageKind,
}

/// What a message is besides its role (seed: message type `continuation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// A user message, a reply or tool results.
    #[default]
    Ordinary,
    /// The continuation summary of a conversation whose context filled up
    /// (or the fallback text when it could not be made).
    Continuation,
    /// The first message of a conversation continued from another one: it
    /// carries the other's summary to the model.
    Continued,
}

impl MessageKind {
    /// Whether this is an ordinary message (the serialised default).
    pub fn is_ordinary(&self) -> bool {
        *self == MessageKind::Ordinary
    }
}

impl Message {
    /// A user message with the given blocks.
    pub fn user(content: Vec<ContentBlock>, created_at_ms: i64) -> Self {
        Message {
            role: Role::User,
            content,
            created_at_ms,
            usage: None,
            stop_reason: None,
            interrupted: false,
            kind: MessageKind::Ordinary,
        }
    }

    /// The images a user attached to this message, in order (not those
    /// of its tool results).
    pub fn attached_images(&self) -> impl Iterator<Item = &ImageRef> + '_ {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::Image(image) => Some(image),
            _ => None,
        })
    }

    /// Every image this message refers to, in order: attached ones and
    /// those its tool results carry.
    pub fn images(&self) -> impl Iterator<Item = &ImageRef> + '_ {
        self.content.iter().flat_map(|b| match b {
            ContentBlock::Image(image) => std::slice::from_ref(image),
            ContentBlock::ToolResult { images, .. } => images.as_slice(),
            _ => &[],
        })
    }

    /// The tool calls of this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = ToolCall> + '_ {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                id: id.clone(),
                name: name.clone(),
                input: input.clone(),
            }),
            _ => None,
        })
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in &self.content {
            if let ContentBlock::Text { text } = b {
                out.push_str(text);
            }
        }
        out
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's tool_use id.
    pub id: String,
    pub name: String,
    /// Its input (see [`ContentBlock::ToolUse`]).
    pub input: Value,
}

/// What a tool produced, as it goes into the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The tool_use id it answers.
    pub tool_use_id: String,
    /// The output, or why it failed.
    pub content: String,
    /// Failed, denied, cancelled or skipped.
    pub is_error: bool,
    /// Images that go with the text (see [`ContentBlock::ToolResult`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageRef>,
}

impl ToolResult {
    /// A result for `tool_use_id`.
    pub fn new(tool_use_id: impl Into<String>, content: impl Into<String>, is_error: bool) -> Self {
        ToolResult {
            tool_use_id: tool_use_id.into(),
            content: content.into(),
            is_error,
            images: Vec::new(),
        }
    }

    /// The same result with `images`.
    pub fn with_images(mut self, images: Vec<ImageRef>) -> Self {
        self.images = images;
        self
    }

    /// As a content block.
    pub fn to_block(&self) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: self.tool_use_id.clone(),
            content: self.content.clone(),
            is_error: self.is_error,
            images: self.images.clone(),
        }
    }
}

/// A complete reply from the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub content: Vec<ContentBlock>,
    pub stop_reason: StopReason,
    pub usage: Usage,
}

/// Whether a user message says nothing: no text but white space, and no
/// image. The one rule; the edges apply it early (before loading a
/// conversation for it) through this function, the core at every message.
pub fn says_nothing(text: &str, images: usize) -> bool {
    text.trim().is_empty() && images == 0
}
