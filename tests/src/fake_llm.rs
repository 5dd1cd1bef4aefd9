//! A fake LLM provider: a real HTTP server on 127.0.0.1 that answers each
//! request with the next scripted reply and records everything it receives.
//!
//! It speaks two wire formats from the same scripts:
//! - Anthropic Messages: `POST /v1/messages`; with `"stream": true` the reply
//!   is `text/event-stream` with `message_start`, `content_block_*`,
//!   `message_delta`, `message_stop` (and `ping`/`error`) events byte for
//!   byte as Anthropic writes them.
//! - OpenAI chat completions: `POST /v1/chat/completions`; chunks as
//!   `data: {...}` lines ending with `data: [DONE]`. Point a client at
//!   `base_url() + "/v1"` when it expects an OpenAI-style base URL.
//!
//! Every response carries `request-id: req_fake_N`, N counting requests from 1.
//!
//! Extended thinking (Anthropic): a script's [`thinking`](ReplyScript::thinking)
//! block streams as `content_block_start` `{"type":"thinking","thinking":"","signature":""}`,
//! `thinking_delta`s, one `signature_delta`, `content_block_stop`; a
//! [`redacted_thinking`](ReplyScript::redacted_thinking) block as
//! `content_block_start` `{"type":"redacted_thinking","data":…}` and
//! `content_block_stop`, with no delta. A request's thinking is checked as
//! the API checks it (`fake_llm::thinking`): a broken chain is answered 400.
//! On `/v1/chat/completions` thinking streams as `reasoning_content` deltas
//! and redacted blocks are left out.
//!
//! Server tools (Anthropic): a script's [`web_search`](ReplyScript::web_search)
//! streams a `server_tool_use` block (`content_block_start` with `"input":{}`,
//! the `{"query":…}` input as `input_json_delta`s, `content_block_stop`) and
//! a `web_search_tool_result` block that starts whole and stops with no
//! delta, as the API does when it ran a search. `/v1/chat/completions`
//! leaves both out.
//!
//! A request whose first user message contains a marker given to
//! [`push_for`](FakeLlm::push_for) takes the next script queued for that
//! marker: each conversation (a sub-agent's, say) can be scripted on its
//! own, whatever order the daemon's requests arrive in. Any other request
//! takes the next queued script; when the queue is empty, the
//! [responder](FakeLlm::set_responder) (if set) makes one from the request
//! body, else the [default](FakeLlm::set_default) script answers.
//!
//! ```no_run
//! # async fn demo() {
//! use agent_tests::fake_llm::{FakeLlm, ReplyScript, Script};
//! let llm = FakeLlm::start().await;
//! llm.push(ReplyScript::new().tool_use("toolu_1", "read", serde_json::json!({"path": "a.txt"})).into());
//! llm.push(Script::text("Done."));
//! // ... point the daemon at llm.base_url(), drive it ...
//! let requests = llm.wait_for_requests(2, std::time::Duration::from_secs(5)).await;
//! assert_eq!(requests[1].body["messages"][2]["role"], "user");
//! # }
//! ```

mod anthropic;
mod cache;
mod images;
mod openai;
mod plan;
mod script;
mod server;
mod sse;
mod thinking;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use axum::serve::ListenerExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use images::ReceivedImage;
pub use script::{Gate, ReplyScript, Script, error_body};
pub use sse::{SseEvent, parse_sse};

/// Makes the answer to a request from its JSON body when no script is
/// queued (see [`FakeLlm::set_responder`]). Called on the server's task:
/// it must not block.
pub type Responder = Arc<dyn Fn(&serde_json::Value) -> Script + Send + Sync>;

/// One request the fake LLM received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The URI path, e.g. `/v1/messages` (no query string).
    pub path: String,
    /// Every header, names lower-case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; a JSON string of the raw text when it is not JSON.
    pub body: serde_json::Value,
    /// `body` is still to be parsed from `raw_body` (see [`RequestBody`]).
    pub(crate) unparsed: bool,
    /// The body's bytes as they came.
    pub raw_body: bytes::Bytes,
    /// When the request's head had been read (the handler started), before
    /// its body was read and parsed.
    pub arrived_at: SystemTime,
    /// When the body had been read.
    pub received_at: SystemTime,
    /// When the last frame of a streamed reply had been handed to the
    /// connection (`None` for other replies, or while it streams).
    pub replied_at: Option<SystemTime>,
    /// The images the request carried, decoded and checked (see
    /// `fake_llm::images`), in the order of the body.
    pub images: Vec<ReceivedImage>,
    /// What was wrong with an image of the request (it was answered 400).
    pub image_error: Option<String>,
}

impl Recorded {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A running fake LLM server. Clones share the server; it stops when the
/// last clone is dropped.
#[derive(Clone)]
pub struct FakeLlm {
    shared: Arc<Shared>,
    _life: Arc<Lifetime>,
}

impl std::fmt::Debug for FakeLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeLlm")
            .field("addr", &self.shared.addr)
            .finish_non_exhaustive()
    }
}

/// State shared by the handles and the request handler.
pub(crate) struct Shared {
    addr: SocketAddr,
    // std Mutexes: nothing async happens while any of them is held.
    scripts: Mutex<VecDeque<Script>>,
    /// Scripts by marker (see [`FakeLlm::push_for`]), markers in the order
    /// first given.
    routed: Mutex<Vec<(String, VecDeque<Script>)>>,
    default: Mutex<Option<Script>>,
    responder: Mutex<Option<Responder>>,
    /// Set by [`FakeLlm::emulate_prompt_cache`].
    pub(crate) prompt_cache: Mutex<Option<cache::PromptCache>>,
    requests: Mutex<Vec<Recorded>>,
    disconnects: AtomicUsize,
    /// Woken when a request arrives or a client goes away.
    changed: Notify,
    seq: AtomicU64,
    pub(crate) shutdown: CancellationToken,
}

/// Held only by the handles, so dropping the last one stops the server
/// (the handler's `Arc<Shared>` would keep it alive otherwise).
struct Lifetime {
    shutdown: CancellationToken,
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Records a request; its index, for [`Shared::replied`].
    pub(crate) fn record(&self, request: Recorded) -> usize {
        let index = {
            let mut requests = lock(&self.requests);
            requests.push(request);
            requests.len() - 1
        };
        self.changed.notify_waiters();
        index
    }

    /// Notes when the streamed reply to request `index` was all written.
    pub(crate) fn replied(&self, index: usize, at: SystemTime) {
        if let Some(request) = lock(&self.requests).get_mut(index) {
            request.replied_at = Some(at);
        }
    }

    pub(crate) fn note_disconnect(&self) {
        self.disconnects.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// The queued script, else the responder's answer to `body`, else the
    /// default.
    pub(crate) fn next_script(&self, body: &mut RequestBody) -> Option<Script> {
        {
            let mut routed = lock(&self.routed);
            if !routed.is_empty() {
                let first = first_user_text(body.tree());
                if let Some((_, queue)) = routed
                    .iter_mut()
                    .find(|(marker, _)| first.contains(marker.as_str()))
                {
                    return queue.pop_front().or_else(|| lock(&self.default).clone());
                }
            }
        }
        if let Some(queued) = lock(&self.scripts).pop_front() {
            return Some(queued);
        }
        // Cloned out so the responder runs without any lock held.
        let responder = lock(&self.responder).clone();
        match responder {
            Some(respond) => Some(respond(body.tree())),
            None => lock(&self.default).clone(),
        }
    }
}

impl FakeLlm {
    /// Starts a server on 127.0.0.1 on a free port.
    ///
    /// # Panics
    /// When it cannot bind, which only a broken test machine causes.
    pub async fn start() -> FakeLlm {
        match FakeLlm::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await {
            Ok(llm) => llm,
            Err(e) => panic!("fake LLM: cannot listen on 127.0.0.1:0: {e}"),
        }
    }

    /// Starts a server on `addr` (the `fake-llm` binary uses a fixed port).
    pub async fn bind(addr: SocketAddr) -> std::io::Result<FakeLlm> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            addr,
            scripts: Mutex::new(VecDeque::new()),
            routed: Mutex::new(Vec::new()),
            default: Mutex::new(None),
            responder: Mutex::new(None),
            prompt_cache: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            disconnects: AtomicUsize::new(0),
            changed: Notify::new(),
            seq: AtomicU64::new(0),
            shutdown: shutdown.clone(),
        });
        // Latency benchmarks run against this server: no Nagle delay.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(Arc::clone(&shared));
        let stop = shutdown.clone().cancelled_owned();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await;
        });
        Ok(FakeLlm {
            shared,
            _life: Arc::new(Lifetime { shutdown }),
        })
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Queues a script; each request to a model endpoint takes the next one.
    pub fn push(&self, script: Script) {
        lock(&self.shared.scripts).push_back(script);
    }

    /// Queues a script for the requests whose first user message contains
    /// `marker` (Anthropic or OpenAI form): they take these scripts in
    /// order and never the general queue; once these run out, the default
    /// answers them.
    pub fn push_for(&self, marker: &str, script: Script) {
        let mut routed = lock(&self.shared.routed);
        match routed.iter_mut().find(|(m, _)| m == marker) {
            Some((_, queue)) => queue.push_back(script),
            None => routed.push((marker.to_string(), VecDeque::from([script]))),
        }
    }

    /// Queues several scripts in order.
    pub fn push_all(&self, scripts: impl IntoIterator<Item = Script>) {
        lock(&self.shared.scripts).extend(scripts);
    }

    /// The script used (cloned) whenever the queue is empty. With `None`,
    /// such requests get a 500 whose message is "fake LLM: no script left".
    pub fn set_default(&self, script: Option<Script>) {
        *lock(&self.shared.default) = script;
    }

    /// A function that answers each request the queue does not: it gets
    /// the request's JSON body (e.g. to reply according to the transcript
    /// it carries) and returns the script to play. It takes precedence over
    /// [`set_default`](Self::set_default); `None` removes it.
    ///
    /// ```no_run
    /// # async fn demo() {
    /// use agent_tests::fake_llm::{FakeLlm, Script};
    /// use std::sync::Arc;
    /// let llm = FakeLlm::start().await;
    /// llm.set_responder(Some(Arc::new(|body: &serde_json::Value| {
    ///     let n = body["messages"].as_array().map_or(0, Vec::len);
    ///     Script::text(&format!("you sent {n} messages"))
    /// })));
    /// # }
    /// ```
    pub fn set_responder(&self, responder: Option<Responder>) {
        *lock(&self.shared.responder) = responder;
    }

    /// From now on, Anthropic replies report the input usage a server with
    /// a prompt cache would (see `fake_llm/cache.rs`): tokens read from the
    /// cache, written to it, and the rest, instead of a script's fixed
    /// input tokens.
    pub fn emulate_prompt_cache(&self) {
        lock(&self.shared.prompt_cache).get_or_insert_with(Default::default);
    }

    /// How many queued scripts no request has taken yet.
    pub fn scripts_left(&self) -> usize {
        lock(&self.shared.scripts).len()
    }

    /// How many requests have arrived so far (without copying them).
    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        let mut requests = lock(&self.shared.requests);
        for request in requests.iter_mut().filter(|r| r.unparsed) {
            request.body = parse_body(&request.raw_body);
            request.unparsed = false;
        }
        requests.clone()
    }

    /// Waits until at least `n` requests have arrived and returns them all.
    ///
    /// # Panics
    /// On timeout, listing what did arrive.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let done = self.wait_until(timeout, || self.request_count() >= n).await;
        let requests = self.requests();
        if !done {
            let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
            panic!(
                "fake LLM: expected {n} request(s) within {timeout:?}, got {}: {paths:?}",
                requests.len()
            );
        }
        requests
    }

    /// How many replies lost their client before they were complete: a
    /// stream the client stopped reading (e.g. a cancelled turn), a `Hang`
    /// or a held reply it gave up on. Scripted faults do not count.
    pub fn disconnects(&self) -> usize {
        self.shared.disconnects.load(Ordering::SeqCst)
    }

    /// Waits until [`disconnects`](Self::disconnects) reaches `n`.
    ///
    /// # Panics
    /// On timeout.
    pub async fn wait_for_disconnects(&self, n: usize, timeout: Duration) {
        if !self.wait_until(timeout, || self.disconnects() >= n).await {
            panic!(
                "fake LLM: expected {n} client disconnect(s) within {timeout:?}, saw {}",
                self.disconnects()
            );
        }
    }

    /// Re-checks `ready` whenever a request arrives or a client leaves;
    /// false on timeout.
    async fn wait_until(&self, timeout: Duration, ready: impl Fn() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Register before looking, so a change in between still wakes us.
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if ready() {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return ready();
            }
        }
    }
}

/// The replies of a script file, for `fake-llm --script` and the offline
/// demo (`tests/demo/session.json`): a JSON array whose items are
/// `{"text": "…"}`, `{"tool": "NAME", "input": {…}}`, or both (the text,
/// then the call).
pub fn script_file(path: &str) -> Result<Vec<Script>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let items: Vec<serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| format!("{path}: not a JSON array: {e}"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let mut reply = ReplyScript::new();
            let mut any = false;
            if let Some(text) = item.get("text") {
                let text = text
                    .as_str()
                    .ok_or_else(|| format!("{path}: reply {i}: \"text\" is not a string"))?;
                reply = reply.text(text);
                any = true;
            }
            if let Some(tool) = item.get("tool") {
                let tool = tool
                    .as_str()
                    .ok_or_else(|| format!("{path}: reply {i}: \"tool\" is not a string"))?;
                let input = item
                    .get("input")
                    .cloned()
                    .unwrap_or_else(|| serde_json::json!({}));
                reply = reply.tool_use(&format!("toolu_script_{i}"), tool, input);
                any = true;
            }
            if !any {
                return Err(format!(
                    "{path}: reply {i} has neither \"text\" nor \"tool\""
                ));
            }
            Ok(Script::Reply(reply))
        })
        .collect()
}

/// A request's body, parsed into a JSON tree only when something reads
/// it: a route, a responder, the prompt cache, an image check, or a test
/// through [`FakeLlm::requests`]. agentd's bodies carry about 8 KB of tool
/// schemas that a reply does not depend on; building their tree before
/// every answer cost the fake some 60 µs a request, which the benchmarks
/// counted as agentd's time.
pub(crate) struct RequestBody {
    raw: bytes::Bytes,
    tree: Option<serde_json::Value>,
}

impl RequestBody {
    pub(crate) fn new(raw: bytes::Bytes) -> RequestBody {
        RequestBody { raw, tree: None }
    }

    /// The whole body as JSON (see [`Recorded::body`]).
    pub(crate) fn tree(&mut self) -> &serde_json::Value {
        self.tree.get_or_insert_with(|| parse_body(&self.raw))
    }

    /// Whether the request asked for a stream, and its model: read without
    /// building the tree when the body is well-formed.
    pub(crate) fn stream_and_model(&mut self) -> (bool, String) {
        #[derive(serde::Deserialize)]
        struct Head<'a> {
            stream: Option<bool>,
            #[serde(borrow)]
            model: Option<std::borrow::Cow<'a, str>>,
        }
        // An object only: serde would also read a struct from an array.
        let object = self.raw.trim_ascii_start().first() == Some(&b'{');
        if self.tree.is_none()
            && object
            && let Ok(head) = serde_json::from_slice::<Head>(&self.raw)
        {
            let model = head.model.as_deref().unwrap_or(DEFAULT_MODEL);
            return (head.stream == Some(true), model.to_string());
        }
        let tree = self.tree();
        let stream = tree.get("stream").and_then(serde_json::Value::as_bool) == Some(true);
        let model = tree
            .get("model")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(DEFAULT_MODEL);
        (stream, model.to_string())
    }

    /// Whether the body may carry an image block: a block's type is the
    /// JSON string `"image"` (Anthropic) or `"image_url"` (OpenAI), which
    /// only an escape (`\u…`) could hide from a look at the bytes.
    pub(crate) fn may_carry_images(&self) -> bool {
        let has = |needle: &[u8]| self.raw.windows(needle.len()).any(|w| w == needle);
        has(b"\"image\"") || has(b"\"image_url\"") || has(b"\\u")
    }

    /// The tree if something built it; else `raw` is parsed when read.
    pub(crate) fn into_record(self) -> (serde_json::Value, bool) {
        match self.tree {
            Some(tree) => (tree, false),
            None => (serde_json::Value::Null, true),
        }
    }
}

/// The model a reply names when the request named none.
const DEFAULT_MODEL: &str = "claude-fake";

/// A body as JSON; a JSON string of the raw text when it is not JSON.
fn parse_body(raw: &[u8]) -> serde_json::Value {
    serde_json::from_slice(raw)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(raw).into_owned()))
}

/// The text of the first user message of a request body (Anthropic: a
/// string or text blocks; OpenAI: the first `user` message's content).
fn first_user_text(body: &serde_json::Value) -> String {
    let Some(messages) = body.get("messages").and_then(serde_json::Value::as_array) else {
        return String::new();
    };
    let Some(first) = messages.iter().find(|m| m["role"] == "user") else {
        return String::new();
    };
    match &first["content"] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
