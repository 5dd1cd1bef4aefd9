//! What the fake LLM answers: one [`Script`] per request.
//!
//! A script is format-neutral. The same [`ReplyScript`] is streamed as
//! Anthropic Messages events on `/v1/messages` and as OpenAI chat-completion
//! chunks on `/v1/chat/completions`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::sync::Notify;

/// The answer to one request.
#[derive(Debug, Clone)]
pub enum Script {
    /// A `200 OK` reply, streamed when the request says `"stream": true`.
    Reply(ReplyScript),
    /// A non-200 answer with a JSON body, e.g. 429, 500, 529 or 401.
    Status {
        /// The HTTP status code.
        code: u16,
        /// The `retry-after` header, when set.
        retry_after: Option<String>,
        /// More response headers (e.g. `x-should-retry`).
        headers: Vec<(String, String)>,
        body: serde_json::Value,
    },
    /// Accept the request, read its body, and never answer.
    Hang,
}

impl Script {
    /// A reply with one text block and `stop_reason: end_turn`.
    pub fn text(s: &str) -> Script {
        Script::Reply(ReplyScript::new().text(s))
    }

    /// An error status with the body Anthropic sends for that code
    /// (`{"type":"error","error":{"type":"rate_limit_error",...}}`).
    pub fn status(code: u16) -> Script {
        let (error_type, message) = anthropic_error_for(code);
        Script::Status {
            code,
            retry_after: None,
            headers: Vec::new(),
            body: error_body(error_type, message),
        }
    }

    /// A 429 `rate_limit_error`. Without `retry_after` a client should treat
    /// it as a spend cap rather than retry.
    pub fn rate_limited(retry_after: Option<&str>) -> Script {
        Script::Status {
            code: 429,
            retry_after: retry_after.map(str::to_string),
            headers: Vec::new(),
            body: error_body(
                "rate_limit_error",
                "Number of request tokens has exceeded your rate limit (fake).",
            ),
        }
    }

    /// A 529 with Anthropic's `overloaded_error` body.
    pub fn overloaded() -> Script {
        Script::status(529)
    }

    /// A 401 with Anthropic's `authentication_error` body.
    pub fn unauthorized() -> Script {
        Script::status(401)
    }

    /// Adds a response header to a `Status` script (other scripts are
    /// returned unchanged), e.g. `("x-should-retry", "false")`.
    pub fn with_header(mut self, name: &str, value: &str) -> Script {
        if let Script::Status { headers, .. } = &mut self {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }
}

impl From<ReplyScript> for Script {
    fn from(reply: ReplyScript) -> Script {
        Script::Reply(reply)
    }
}

/// Anthropic's JSON error envelope.
pub fn error_body(error_type: &str, message: &str) -> serde_json::Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}})
}

/// The Anthropic error type and a message for an HTTP status code.
fn anthropic_error_for(code: u16) -> (&'static str, &'static str) {
    match code {
        400 => (
            "invalid_request_error",
            "There was an issue with the format or content of your request (fake).",
        ),
        401 => ("authentication_error", "invalid x-api-key"),
        403 => (
            "permission_error",
            "Your API key does not have permission to use the specified resource (fake).",
        ),
        404 => (
            "not_found_error",
            "The requested resource was not found (fake).",
        ),
        413 => (
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes (fake).",
        ),
        429 => (
            "rate_limit_error",
            "Number of request tokens has exceeded your rate limit (fake).",
        ),
        529 => ("overloaded_error", "Overloaded"),
        500..=599 => ("api_error", "Internal server error (fake)."),
        _ => ("api_error", "Unexpected error (fake)."),
    }
}

/// One content block of a reply.
#[derive(Debug, Clone)]
pub(crate) enum Block {
    /// Streamed in pieces chosen by `chunk_chars`.
    Text(String),
    /// `n` deltas of exactly `each`; never materialised as one string.
    Deltas {
        n: usize,
        each: String,
    },
    Thinking {
        text: String,
        signature: String,
    },
    /// `redacted_thinking`: its data comes whole in `content_block_start`.
    Redacted(String),
    /// `raw_json` is streamed verbatim as `input_json_delta` fragments.
    ToolUse {
        id: String,
        name: String,
        raw_json: String,
    },
    /// A server tool's block (`server_tool_use`, `web_search_tool_result`):
    /// `head` is its `content_block_start` block; a non-empty `raw_json`
    /// (a call's input) follows as `input_json_delta` fragments. Not sent
    /// on `/v1/chat/completions`.
    Server {
        head: serde_json::Value,
        raw_json: String,
    },
}

/// What ends a reply early.
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// An `event: error` (Anthropic) or `data: {"error":...}` (OpenAI), then
    /// the response ends normally.
    Error { error_type: String, message: String },
    /// The connection is closed without finishing the response.
    Drop,
    /// These bytes are written verbatim, then the response ends normally:
    /// an error event in a shape the encoders do not make.
    Raw(String),
}

/// A scripted `200 OK` reply; a builder.
///
/// Event counts (`hold_after`, `raw_after`, `error_after`, `drop_after`)
/// count the SSE events actually written for the request's format:
/// Anthropic events on `/v1/messages` (including `message_start` and
/// pings), chunks on `/v1/chat/completions`; raw blocks are not counted.
/// `n = 0` acts before the first event. At one count, holds wait first,
/// then raw blocks are written in the order they were added, then the
/// fault ends the reply.
#[derive(Debug, Clone, Default)]
pub struct ReplyScript {
    pub(crate) blocks: Vec<Block>,
    pub(crate) stop_reason: Option<String>,
    pub(crate) usage: Option<(u64, u64)>,
    pub(crate) pace: Duration,
    pub(crate) holds: Vec<(usize, Gate)>,
    pub(crate) fault: Option<(usize, Fault)>,
    pub(crate) raws: Vec<(usize, String)>,
    pub(crate) ping: bool,
    pub(crate) unknown_event: bool,
    pub(crate) chunk_chars: Option<usize>,
    pub(crate) json_chunk_chars: Option<usize>,
    pub(crate) timestamps: bool,
}

/// Input and output tokens reported when `usage` is not set.
pub(crate) const DEFAULT_USAGE: (u64, u64) = (10, 5);
/// Size of the `input_json_delta` fragments when not set.
pub(crate) const DEFAULT_JSON_CHUNK_CHARS: usize = 10;

impl ReplyScript {
    /// An empty reply (no blocks, `end_turn`).
    pub fn new() -> Self {
        Self::default()
    }

    /// A text block, streamed as several `text_delta`s: word by word, or in
    /// groups of `chunk_chars` characters when that is set.
    pub fn text(mut self, s: &str) -> Self {
        self.blocks.push(Block::Text(s.to_string()));
        self
    }

    /// A thinking block: `thinking_delta`s, then one `signature_delta`.
    pub fn thinking(mut self, s: &str, signature: &str) -> Self {
        self.blocks.push(Block::Thinking {
            text: s.to_string(),
            signature: signature.to_string(),
        });
        self
    }

    /// A `redacted_thinking` block: `content_block_start` carries its
    /// `data`, then `content_block_stop` (no delta).
    pub fn redacted_thinking(mut self, data: &str) -> Self {
        self.blocks.push(Block::Redacted(data.to_string()));
        self
    }

    /// A `tool_use` block; the input is streamed as `input_json_delta`
    /// fragments (an empty one first, as Anthropic does).
    pub fn tool_use(self, id: &str, name: &str, input: serde_json::Value) -> Self {
        let raw = input.to_string();
        self.raw_tool_use(id, name, &raw)
    }

    /// A `tool_use` block whose input is `raw_json` verbatim, which need not
    /// be valid JSON (for malformed-input tests).
    pub fn raw_tool_use(mut self, id: &str, name: &str, raw_json: &str) -> Self {
        self.blocks.push(Block::ToolUse {
            id: id.to_string(),
            name: name.to_string(),
            raw_json: raw_json.to_string(),
        });
        self
    }

    /// A web search the API ran, as Anthropic streams it: a
    /// `server_tool_use` block `{"type":"server_tool_use","id":ID,
    /// "name":"web_search","input":{}}` whose input `{"query":QUERY}` comes
    /// as `input_json_delta`s, then a `web_search_tool_result` block that
    /// starts whole (`{"tool_use_id":ID,"content":[{"type":
    /// "web_search_result","url":…,"title":…,"encrypted_content":…,
    /// "page_age":null}]}`) and stops with no delta. Neither changes the
    /// default stop reason (they are no calls for the client).
    pub fn web_search(mut self, id: &str, query: &str, results: &[(&str, &str)]) -> Self {
        self.blocks.push(Block::Server {
            head: json!({"type": "server_tool_use", "id": id, "name": "web_search", "input": {}}),
            raw_json: json!({ "query": query }).to_string(),
        });
        let content: Vec<serde_json::Value> = results
            .iter()
            .enumerate()
            .map(|(i, (url, title))| {
                json!({"type": "web_search_result", "url": url, "title": title,
                       "encrypted_content": format!("RW5jcnlwdGVk{i}"), "page_age": null})
            })
            .collect();
        self.blocks.push(Block::Server {
            head: json!({"type": "web_search_tool_result", "tool_use_id": id, "content": content}),
            raw_json: String::new(),
        });
        self
    }

    /// The stop reason; by default `tool_use` when the reply has a tool_use
    /// block, else `end_turn`.
    pub fn stop_reason(mut self, r: &str) -> Self {
        self.stop_reason = Some(r.to_string());
        self
    }

    /// Token usage: `input` in `message_start`, `output` in `message_delta`.
    /// Default: 10 in, 5 out.
    pub fn usage(mut self, input: u64, output: u64) -> Self {
        self.usage = Some((input, output));
        self
    }

    /// Waits this long before writing each event (slow tokens).
    pub fn pace(mut self, per_event: Duration) -> Self {
        self.pace = per_event;
        self
    }

    /// After `n_events` events, writes nothing more until `gate` is opened.
    /// Several holds may be set.
    pub fn hold_after(mut self, n_events: usize, gate: Gate) -> Self {
        self.holds.push((n_events, gate));
        self
    }

    /// After `n_events` events, sends a mid-stream error event of
    /// `error_type` (e.g. `overloaded_error`) and ends the response.
    /// Replaces an earlier `error_after`/`raw_error_after`/`drop_after`.
    pub fn error_after(mut self, n_events: usize, error_type: &str, message: &str) -> Self {
        let fault = Fault::Error {
            error_type: error_type.to_string(),
            message: message.to_string(),
        };
        self.fault = Some((n_events, fault));
        self
    }

    /// After `n_events` events, writes `raw` verbatim and ends the response
    /// normally, as [`error_after`](Self::error_after) does with an error
    /// event it encodes itself: for error events in other shapes, such as
    /// Anthropic's legacy `event: error` whose data has no `type`
    /// (`{"error": {"type": "overloaded_error", ...}}`). `raw` should end
    /// with a blank line. Without `"stream": true` the body is cut, as with
    /// [`drop_after`](Self::drop_after). Replaces an earlier
    /// `error_after`/`raw_error_after`/`drop_after`.
    pub fn raw_error_after(mut self, n_events: usize, raw: &str) -> Self {
        self.fault = Some((n_events, Fault::Raw(raw.to_string())));
        self
    }

    /// After `n_events` events, writes `raw` verbatim, uncounted, and goes
    /// on with the reply: for byte-faithful transcripts of what the
    /// encoders never make (an event name no client knows, data that is
    /// not JSON, a legacy event). Several may be set. Ignored without
    /// `"stream": true`.
    pub fn raw_after(mut self, n_events: usize, raw: &str) -> Self {
        self.raws.push((n_events, raw.to_string()));
        self
    }

    /// After `n_events` events, closes the connection without finishing the
    /// chunked body. Replaces an earlier `error_after`/`raw_error_after`/`drop_after`.
    pub fn drop_after(mut self, n_events: usize) -> Self {
        self.fault = Some((n_events, Fault::Drop));
        self
    }

    /// Sends a `ping` event after the first `content_block_start` (after
    /// `message_start` when there is no block). On the OpenAI path: an SSE
    /// comment line.
    pub fn with_ping(mut self) -> Self {
        self.ping = true;
        self
    }

    /// Sends an event of a type no client knows right after `message_start`
    /// (OpenAI: a chunk with an unknown field and no choices).
    pub fn with_unknown_event(mut self) -> Self {
        self.unknown_event = true;
        self
    }

    /// A text block made of `n` `text_delta`s, each exactly `each`. No
    /// per-delta string is built up front: each event is encoded when it is
    /// written, one buffer per event, with no sleep unless `pace` is set.
    pub fn deltas(mut self, n: usize, each: &str) -> Self {
        self.blocks.push(Block::Deltas {
            n,
            each: each.to_string(),
        });
        self
    }

    /// Splits text and thinking into groups of `n` characters instead of
    /// words (`n = 0` restores word splitting).
    pub fn chunk_chars(mut self, n: usize) -> Self {
        self.chunk_chars = (n > 0).then_some(n);
        self
    }

    /// Size in characters of the `input_json_delta` fragments (default 10;
    /// `n = 0` restores the default).
    pub fn json_chunk_chars(mut self, n: usize) -> Self {
        self.json_chunk_chars = (n > 0).then_some(n);
        self
    }

    /// Prefixes each text and thinking delta with `⟨t=UNIX_NANOS⟩`, the time
    /// the event was encoded and handed to the HTTP server, for latency
    /// measurements. Without `pace` the server may coalesce several ready
    /// events into one socket write (and a slow reader makes events queue),
    /// so measure latency with a pace and throughput without.
    pub fn timestamps(mut self) -> Self {
        self.timestamps = true;
        self
    }

    /// The stop reason that will be sent.
    pub(crate) fn effective_stop_reason(&self) -> &str {
        match &self.stop_reason {
            Some(r) => r,
            None if self
                .blocks
                .iter()
                .any(|b| matches!(b, Block::ToolUse { .. })) =>
            {
                "tool_use"
            }
            None => "end_turn",
        }
    }
}

/// A latch a test opens to release replies held by
/// [`ReplyScript::hold_after`]. Once open it stays open.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    inner: Arc<GateInner>,
}

#[derive(Debug, Default)]
struct GateInner {
    open: AtomicBool,
    notify: Notify,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens the gate and wakes every reply waiting on it.
    pub fn open(&self) {
        self.inner.open.store(true, Ordering::SeqCst);
        self.inner.notify.notify_waiters();
    }

    /// Whether [`Gate::open`] was called.
    pub fn is_open(&self) -> bool {
        self.inner.open.load(Ordering::SeqCst)
    }

    /// Resolves once the gate is open.
    pub async fn wait(&self) {
        loop {
            // Register before checking the flag so an `open` between the
            // check and the await cannot be missed.
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_open() {
                return;
            }
            notified.await;
        }
    }
}
