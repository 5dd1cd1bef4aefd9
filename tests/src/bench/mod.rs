//! The benchmark programs behind the `agent-bench` binary: each scenario
//! starts a release `test-agentd` against the in-process [`FakeLlm`] (which
//! answers instantly), measures, and returns a [`stats::Report`].
//!
//! Nothing here asserts a time: scenarios measure and report; targets are
//! shown as met or not met.

pub mod durability;
pub mod early_tools;
pub mod fanout;
pub mod floor;
pub mod ls_ab;
pub mod many;
pub mod memory;
pub mod procfs;
pub mod request_bytes;
pub mod search;
pub mod startup;
pub mod stats;
pub mod tool_rounds;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::fake_llm::FakeLlm;
use crate::harness::{DaemonOptions, TestDaemon, connect_uds};

/// Errors of the benchmark itself (a daemon that misbehaves, a timeout).
pub type BenchResult<T> = Result<T, String>;

/// Adds what was being done to an error.
pub trait Context<T> {
    /// The value, or an error naming `what`.
    fn ctx(self, what: &str) -> BenchResult<T>;
}

impl<T, E: std::fmt::Display> Context<T> for Result<T, E> {
    fn ctx(self, what: &str) -> BenchResult<T> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

impl<T> Context<T> for Option<T> {
    fn ctx(self, what: &str) -> BenchResult<T> {
        self.ok_or_else(|| format!("{what}: nothing"))
    }
}

/// How the scenarios run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Runs per measurement (medians are over these).
    pub runs: usize,
    /// Smaller sizes, for trying the bench out (numbers are not comparable).
    pub quick: bool,
    /// The tree the search scenario walks.
    pub search_tree: Option<PathBuf>,
    /// Only this part of a scenario that has parts (`--part`).
    pub part: Option<String>,
    /// The client binaries `ls-ab` compares (`--client`, twice).
    pub clients: Vec<PathBuf>,
}

impl Settings {
    /// Whether the part `name` of a scenario runs.
    pub fn runs_part(&self, name: &str) -> bool {
        self.part.as_deref().is_none_or(|p| p == name)
    }

    /// `full` normally, `quick` with `--quick`.
    pub fn size(&self, full: usize, quick: usize) -> usize {
        if self.quick { quick } else { full }
    }
}

/// The configuration every bench daemon gets on top of the harness's:
/// enough model rounds per user message for the longest scripted turn.
pub const BENCH_CONFIG: &str = "[limits]\nmax_iterations = 1000\n";

/// Whether bench daemons run with `[store] sync = "power"` (`--sync power`).
static POWER_SYNC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every bench daemon started from now on sync for power loss.
pub fn use_power_sync() {
    POWER_SYNC.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// `[store] cache_bytes` of bench daemons (`--cache-bytes N`); 0: the
/// daemon's default.
static CACHE_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Gives every bench daemon started from now on a store cache of `bytes`.
pub fn use_cache_bytes(bytes: u64) {
    CACHE_BYTES.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// The `[store]` section bench daemons run with.
pub fn store_section() -> String {
    let mut section = format!("[store]\nsync = \"{}\"\n", store_sync());
    match CACHE_BYTES.load(std::sync::atomic::Ordering::Relaxed) {
        0 => {}
        bytes => section.push_str(&format!("cache_bytes = {bytes}\n")),
    }
    section
}

/// The `[store] sync` bench daemons run with.
pub fn store_sync() -> &'static str {
    if POWER_SYNC.load(std::sync::atomic::Ordering::Relaxed) {
        "power"
    } else {
        "kill"
    }
}

/// Starts a release daemon (the `test-agentd` next to this binary) pointed
/// at `fake`, logging at the daemon's default level (`agentd=info`; the
/// harness's `debug` would be measured too).
pub async fn start_daemon(fake: &FakeLlm) -> TestDaemon {
    TestDaemon::start_with(
        fake,
        DaemonOptions {
            extra_config: format!("{BENCH_CONFIG}{}", store_section()),
            env: vec![("RUST_LOG".to_string(), "agentd=info".to_string())],
            ..DaemonOptions::default()
        },
    )
    .await
}

/// A client on its own connection, with room for large answers (a list of
/// 10,000 conversations, a snapshot holding a long reply).
pub async fn client(socket: &Path) -> BenchResult<AgentServiceClient<Channel>> {
    let channel = connect_uds(socket)
        .await
        .map_err(|e| format!("cannot connect to {}: {e:?}", socket.display()))?;
    Ok(AgentServiceClient::new(channel)
        .max_decoding_message_size(512 * 1024 * 1024)
        .max_encoding_message_size(512 * 1024 * 1024))
}

/// Creates a conversation; `prompt` may be empty (no turn starts).
pub async fn create(
    client: &mut AgentServiceClient<Channel>,
    cwd: &Path,
    prompt: &str,
    allow: &[&str],
) -> BenchResult<String> {
    let response = client
        .create_conversation(pb::CreateConversationRequest {
            cwd: cwd.display().to_string(),
            prompt: prompt.to_string(),
            allow_rules: allow.iter().map(|r| r.to_string()).collect(),
            ..Default::default()
        })
        .await
        .ctx("CreateConversation")?
        .into_inner();
    Ok(response.conversation.ctx("CreateConversation")?.id)
}

/// Sends a user message (starts a turn).
pub async fn send(
    client: &mut AgentServiceClient<Channel>,
    id: &str,
    text: &str,
) -> BenchResult<()> {
    client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.to_string(),
            text: text.to_string(),
            ..Default::default()
        })
        .await
        .ctx("SendMessage")?;
    Ok(())
}

/// Every conversation's state kind.
pub async fn list_states(
    client: &mut AgentServiceClient<Channel>,
) -> BenchResult<Vec<(String, pb::StateKind)>> {
    let list = client
        .list_conversations(pb::ListConversationsRequest::default())
        .await
        .ctx("ListConversations")?
        .into_inner();
    Ok(list
        .conversations
        .into_iter()
        .map(|c| {
            let kind = c
                .state
                .and_then(|s| pb::StateKind::try_from(s.kind).ok())
                .unwrap_or(pb::StateKind::Unspecified);
            (c.id, kind)
        })
        .collect())
}

/// A running daemon with `n` conversations whose one turn ended ("ok"),
/// and its fake (answering nothing by default again): what `agent ls`
/// lists in the start-up scenarios.
pub async fn daemon_with_conversations(n: usize) -> BenchResult<(FakeLlm, TestDaemon)> {
    let fake = FakeLlm::start().await;
    let daemon = start_daemon(&fake).await;
    let mut client = client(&daemon.socket).await?;
    fake.set_default(Some(crate::fake_llm::Script::text("ok")));
    for i in 0..n {
        create(&mut client, &daemon.work_dir, &format!("task {i}"), &[]).await?;
    }
    wait_all_at_rest(&mut client, n, Duration::from_secs(30)).await?;
    fake.set_default(None);
    Ok((fake, daemon))
}

/// Polls the list until no conversation is busy; returns how many are in
/// the error state.
pub async fn wait_all_at_rest(
    client: &mut AgentServiceClient<Channel>,
    expected: usize,
    timeout: Duration,
) -> BenchResult<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        let states = list_states(client).await?;
        let busy = states
            .iter()
            .filter(|(_, k)| !matches!(k, pb::StateKind::Idle | pb::StateKind::Error))
            .count();
        if states.len() >= expected && busy == 0 {
            return Ok(states
                .iter()
                .filter(|(_, k)| *k == pb::StateKind::Error)
                .count());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{busy} of {} conversations still busy after {timeout:?}",
                states.len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One attached client on its own connection.
pub struct Attached {
    /// Frames to the daemon.
    pub tx: mpsc::Sender<pb::AttachRequest>,
    /// Frames from the daemon.
    pub rx: tonic::Streaming<pb::AttachResponse>,
}

impl Attached {
    /// Attaches to `id` and reads the initial snapshot.
    pub async fn open(socket: &Path, id: &str, name: &str) -> BenchResult<Attached> {
        let mut client = client(socket).await?;
        let (tx, rx) = mpsc::channel(16);
        tx.send(pb::AttachRequest {
            frame: Some(pb::attach_request::Frame::Subscribe(pb::Subscribe {
                conversation_id: id.to_string(),
                after_seq: 0,
                client_name: name.to_string(),
                ..Default::default()
            })),
        })
        .await
        .ctx("subscribe")?;
        let rx = client
            .attach(ReceiverStream::new(rx))
            .await
            .ctx("Attach")?
            .into_inner();
        let mut attached = Attached { tx, rx };
        let first = attached.next(Duration::from_secs(30)).await?;
        if !matches!(first.event, Some(pb::attach_response::Event::Snapshot(_))) {
            return Err("Attach: the first frame is not a snapshot".to_string());
        }
        Ok(attached)
    }

    /// The next frame.
    pub async fn next(&mut self, timeout: Duration) -> BenchResult<pb::AttachResponse> {
        match tokio::time::timeout(timeout, self.rx.message()).await {
            Ok(Ok(Some(m))) => Ok(m),
            Ok(Ok(None)) => Err("the attach stream ended".to_string()),
            Ok(Err(s)) => Err(format!("the attach stream failed: {s}")),
            Err(_) => Err(format!("no attach frame within {timeout:?}")),
        }
    }

    /// Reads frames until the conversation is at rest again (idle, or an
    /// error, which is returned as one); calls `each` on every frame with
    /// the instant it arrived.
    pub async fn until_at_rest(
        &mut self,
        timeout: Duration,
        mut each: impl FnMut(&pb::AttachResponse, Instant),
    ) -> BenchResult<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.next(left).await?;
            each(&m, Instant::now());
            match state_of(&m) {
                Some(pb::StateKind::Idle) => return Ok(()),
                Some(pb::StateKind::Error) => {
                    return Err(format!("the turn failed: {:?}", m.event));
                }
                Some(pb::StateKind::AwaitingPermission) => {
                    return Err("the turn asks for a permission".to_string());
                }
                _ => {}
            }
        }
    }
}

/// The state a frame announces (a state change, or a later snapshot).
pub fn state_of(m: &pb::AttachResponse) -> Option<pb::StateKind> {
    use pb::attach_response::Event;
    let kind = match &m.event {
        Some(Event::StateChanged(s)) => s.state.as_ref()?.kind,
        Some(Event::Snapshot(s)) => s.conversation.as_ref()?.state.as_ref()?.kind,
        _ => return None,
    };
    pb::StateKind::try_from(kind).ok()
}

/// Unix time in nanoseconds (the clock the fake stamps deltas with).
pub fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The stamp `⟨t=NANOS⟩` the fake puts in front of a delta's text.
pub fn parse_stamp(text: &str) -> Option<u128> {
    let start = text.find("⟨t=")? + "⟨t=".len();
    let end = start + text[start..].find('⟩')?;
    text[start..end].parse().ok()
}

/// Seconds between two wall-clock instants (negative when `b` is earlier).
pub fn secs_between(a: SystemTime, b: SystemTime) -> f64 {
    match b.duration_since(a) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// A plain HTTP/1.1 keep-alive client for the fake LLM, to time how long
/// the fake itself takes to serve a request of a given body (request
/// written → last byte of the streamed reply read, loopback included).
pub struct FakeTimer {
    stream: tokio::net::TcpStream,
    host: String,
    buf: Vec<u8>,
}

impl FakeTimer {
    /// Connects to `fake`.
    pub async fn connect(fake: &FakeLlm) -> BenchResult<FakeTimer> {
        let stream = tokio::net::TcpStream::connect(fake.addr())
            .await
            .ctx("connecting to the fake LLM")?;
        stream.set_nodelay(true).ctx("TCP_NODELAY")?;
        Ok(FakeTimer {
            stream,
            host: fake.addr().to_string(),
            buf: Vec::with_capacity(64 * 1024),
        })
    }

    /// Posts `body` to `/v1/messages` and reads the whole streamed reply;
    /// returns the time taken. The caller queues the script it answers with.
    pub async fn time(&mut self, body: &[u8]) -> BenchResult<Duration> {
        let head = messages_request_head(&self.host, body.len());
        let started = Instant::now();
        self.stream
            .write_all(head.as_bytes())
            .await
            .ctx("writing to the fake")?;
        self.stream
            .write_all(body)
            .await
            .ctx("writing to the fake")?;
        self.buf.clear();
        let mut chunk = [0u8; 16 * 1024];
        // A chunked body ends with an empty chunk; SSE data has no '\r'.
        while !self.buf.ends_with(b"\r\n0\r\n\r\n") {
            let n = self
                .stream
                .read(&mut chunk)
                .await
                .ctx("reading from the fake")?;
            if n == 0 {
                return Err("the fake closed the connection".to_string());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        Ok(started.elapsed())
    }
}

/// The head of an HTTP/1.1 `POST /v1/messages` to the fake at `host` with
/// a body of `len` bytes (keep-alive), as the bench's own clients send it.
pub fn messages_request_head(host: &str, len: usize) -> String {
    format!(
        "POST /v1/messages HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         x-api-key: test-key\r\nanthropic-version: 2023-06-01\r\ncontent-length: {len}\r\n\r\n"
    )
}

/// Milliseconds in a duration, as a float.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
