//! The `grpc-frames` target: a real daemon (`test-agentd` and a fake LLM
//! that answers every request with a short text), and random bytes sent
//! raw on its socket.
//!
//! Each case opens a connection and sends one of:
//! - random bytes, with or without the HTTP/2 preface;
//! - the preface, SETTINGS, then random frames (every type, random flags,
//!   stream ids and lengths, lengths that lie);
//! - the preface, SETTINGS, and requests for real methods (the unary ones,
//!   `Attach`, the streaming ones, health, reflection) with header blocks
//!   encoded several ways (literals, indexed, added to the table and then
//!   referred to, random HPACK), and DATA frames holding gRPC messages:
//!   valid protobuf of the method's request type with random field values
//!   (random ids, texts, modes, rules, imported transcripts), random bytes,
//!   cut messages, lying or huge length prefixes, the compressed flag,
//!   several messages per frame or one message over several frames, and
//!   RST_STREAM, PING, WINDOW_UPDATE or GOAWAY in between.
//!
//! It reads what the daemon answers for a moment, then closes (or, now and
//! then, leaves the connection open for a while). After every batch of
//! cases: the daemon's process is alive, it answers `ListConversations`
//! (on its long-lived connection and, every few batches, on a new one),
//! and its log holds no panic. Its RSS is sampled throughout: it must stay
//! under a generous ceiling and, on runs of a minute or more, not trend
//! upwards (the last quarter's average against the second quarter's).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use prost::Message as _;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tonic::transport::Channel;

use super::{FuzzOptions, Progress, Report, Target};
use crate::bench::procfs;
use crate::fake_llm::{FakeLlm, Script};
use crate::harness::{TestDaemon, connect_uds};

/// The daemon's RSS may never exceed this.
const RSS_CEILING: u64 = 512 * 1024 * 1024;
/// Cases sent at once, each on its own connection.
const BATCH: usize = 4;
/// Connections left open at most (the oldest is closed first).
const MAX_LINGERING: usize = 32;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Runs the target for the budget.
pub async fn run(opts: &FuzzOptions) -> Report {
    let mut report = Report::new(Target::GrpcFrames, opts.seed);
    let fake = FakeLlm::start().await;
    fake.set_default(Some(Script::text("ok")));
    let mut daemon_opts = opts.daemon.clone();
    daemon_opts
        .extra_config
        .push_str("\n[limits]\nidle_unload_ms = 200\n");
    let daemon = TestDaemon::start_with(&fake, daemon_opts).await;
    let mut fuzz = Fuzz {
        rng: StdRng::seed_from_u64(opts.seed),
        ids: Vec::new(),
        log_read: 0,
        daemon,
    };
    if let Err(e) = fuzz.run(opts, &mut report).await {
        report.fail(e);
    }
    report
}

struct Fuzz {
    rng: StdRng,
    /// Ids of conversations that exist (so requests can name real ones).
    ids: Vec<String>,
    /// How much of the daemon's log was scanned for panics.
    log_read: usize,
    daemon: TestDaemon,
}

/// One case: the bytes sent, in the pieces they were written in.
#[derive(Debug, Clone)]
struct Case {
    what: &'static str,
    writes: Vec<Vec<u8>>,
    /// Leave the connection open after the case.
    linger: bool,
}

impl Case {
    fn describe(&self) -> String {
        let all: Vec<u8> = self.writes.concat();
        let shown = &all[..all.len().min(4096)];
        let mut hex = String::new();
        for b in shown {
            let _ = write!(hex, "{b:02x}");
        }
        format!(
            "{} case, {} bytes in {} writes: {hex}{}",
            self.what,
            all.len(),
            self.writes.len(),
            if all.len() > shown.len() { "…" } else { "" }
        )
    }
}

impl Fuzz {
    async fn run(&mut self, opts: &FuzzOptions, report: &mut Report) -> Result<(), String> {
        let pid = self.daemon.pid();
        let mut client = self.connect().await?;
        for _ in 0..3 {
            let r = client
                .create_conversation(pb::CreateConversationRequest {
                    cwd: self.daemon.work_dir.display().to_string(),
                    prompt: "hello".into(),
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("CreateConversation failed before fuzzing: {e}"))?;
            if let Some(c) = r.into_inner().conversation {
                self.ids.push(c.id);
            }
        }
        let rss_start = rss(pid)?;
        let deadline = Instant::now() + opts.budget;
        let mut progress = Progress::new(Target::GrpcFrames, opts.progress);
        let mut samples: Vec<u64> = vec![rss_start];
        let mut last_sample = Instant::now();
        let mut lingering: VecDeque<UnixStream> = VecDeque::new();
        let mut answered = 0u64;
        let mut batches = 0u64;
        while Instant::now() < deadline && !report.full() {
            let cases: Vec<Case> = (0..BATCH).map(|_| self.case()).collect();
            let runs = cases
                .iter()
                .map(|c| send(self.daemon.socket.clone(), c.clone()));
            let results = futures::future::join_all(runs).await;
            for (case, result) in cases.iter().zip(results) {
                report.cases += 1;
                match result {
                    Ok((n, stream)) => {
                        answered += u64::from(n > 0);
                        if let Some(stream) = stream {
                            lingering.push_back(stream);
                            if lingering.len() > MAX_LINGERING {
                                lingering.pop_front();
                            }
                        }
                    }
                    Err(e) => {
                        // Refused or reset connections are the daemon's
                        // right; only the checks below judge it.
                        let _ = (e, case);
                    }
                }
            }
            batches += 1;
            let fresh = batches.is_multiple_of(8);
            if let Err(e) = self.healthy(&mut client, fresh).await {
                let described: Vec<String> = cases.iter().map(Case::describe).collect();
                report.fail(format!(
                    "{e}\n    after one of these cases (seed {}):\n    {}",
                    opts.seed,
                    described.join("\n    ")
                ));
                break;
            }
            if last_sample.elapsed() >= Duration::from_millis(500) {
                last_sample = Instant::now();
                let now = rss(pid)?;
                samples.push(now);
                if now > RSS_CEILING {
                    report.fail(format!(
                        "the daemon's RSS is {} MiB, above the ceiling of {} MiB",
                        now >> 20,
                        RSS_CEILING >> 20
                    ));
                    break;
                }
            }
            progress.tick(report.cases, || {
                format!(
                    ", RSS {} MiB, {} connections open",
                    samples.last().copied().unwrap_or(0) >> 20,
                    lingering.len()
                )
            });
        }
        lingering.clear();
        // What the last connections held is let go.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.healthy(&mut client, true).await?;
        let rss_end = rss(pid)?;
        samples.push(rss_end);
        let peak = samples.iter().copied().max().unwrap_or(0);
        let stored = client
            .list_conversations(pb::ListConversationsRequest {
                limit: 1000,
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().conversations.len())
            .unwrap_or(0);
        report.notes.push(format!(
            "{stored} conversations in the store at the end (created and imported by the cases)"
        ));
        report.notes.push(format!(
            "daemon RSS: {:.1} MiB before, {:.1} MiB after, peak {:.1} MiB ({} samples); {answered} cases got an answer",
            mib(rss_start),
            mib(rss_end),
            mib(peak),
            samples.len()
        ));
        if opts.budget >= Duration::from_secs(60) && samples.len() >= 8 {
            let q = samples.len() / 4;
            let avg = |s: &[u64]| s.iter().sum::<u64>() / s.len().max(1) as u64;
            let (second, last) = (avg(&samples[q..2 * q]), avg(&samples[3 * q..]));
            report.notes.push(format!(
                "RSS trend: second quarter {:.1} MiB, last quarter {:.1} MiB",
                mib(second),
                mib(last)
            ));
            if last > second + second / 2 + (32 << 20) {
                report.fail(format!(
                    "the daemon's RSS trends upwards: {:.1} MiB on average in the second quarter of the run, {:.1} MiB in the last",
                    mib(second),
                    mib(last)
                ));
            }
        }
        Ok(())
    }

    async fn connect(&self) -> Result<AgentServiceClient<Channel>, String> {
        connect_uds(&self.daemon.socket)
            .await
            .map(AgentServiceClient::new)
            .map_err(|e| format!("cannot connect to the daemon: {e}"))
    }

    /// The daemon lives, answers, and logged no panic.
    async fn healthy(
        &mut self,
        client: &mut AgentServiceClient<Channel>,
        fresh: bool,
    ) -> Result<(), String> {
        if let Some(status) = self.daemon.exit_status() {
            return Err(format!(
                "the daemon exited ({status}); its log ends:\n{}",
                tail(&self.daemon.log(), 3000)
            ));
        }
        let list = |mut c: AgentServiceClient<Channel>| async move {
            tokio::time::timeout(
                Duration::from_secs(10),
                c.list_conversations(pb::ListConversationsRequest::default()),
            )
            .await
        };
        match list(client.clone()).await {
            Ok(Ok(r)) => {
                for c in r.into_inner().conversations {
                    if !self.ids.contains(&c.id) && self.ids.len() < 64 {
                        self.ids.push(c.id);
                    }
                }
            }
            Ok(Err(e)) => return Err(format!("ListConversations failed: {e}")),
            Err(_) => return Err("ListConversations did not answer within 10 s".into()),
        }
        if fresh {
            let c = self.connect().await?;
            match list(c).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Err(format!("ListConversations on a new connection failed: {e}"));
                }
                Err(_) => {
                    return Err(
                        "ListConversations on a new connection did not answer within 10 s".into(),
                    );
                }
            }
        }
        let log = std::fs::read(&self.daemon.log_path).unwrap_or_default();
        let new = &log[self.log_read.min(log.len())..];
        self.log_read = log.len();
        let text = String::from_utf8_lossy(new);
        if let Some(at) = text.find("panicked") {
            let from = text[..at].rfind('\n').map_or(0, |n| n + 1);
            return Err(format!(
                "the daemon's log shows a panic:\n{}",
                text[from..].chars().take(3000).collect::<String>()
            ));
        }
        Ok(())
    }

    fn case(&mut self) -> Case {
        let rng = &mut self.rng;
        let linger = rng.random_bool(0.05);
        let kind = rng.random_range(0..20);
        let (what, mut bytes): (&'static str, Vec<u8>) = match kind {
            0 => ("random bytes", random_bytes(rng, 0..2048)),
            1 => {
                let mut b = PREFACE.to_vec();
                b.extend(random_bytes(rng, 0..2048));
                ("preface then random bytes", b)
            }
            2..=4 => ("random frames", random_frames(rng)),
            _ => {
                let ids = self.ids.clone();
                ("requests", requests(rng, &ids))
            }
        };
        // Requests carry damage of their own; a third of them get more.
        let damage = kind < 5 || rng.random_bool(0.3);
        if damage && !bytes.is_empty() && rng.random_bool(0.2) {
            let at = rng.random_range(0..bytes.len());
            bytes.truncate(at);
        }
        if damage && !bytes.is_empty() && rng.random_bool(0.1) {
            for _ in 0..rng.random_range(1..8) {
                let at = rng.random_range(0..bytes.len());
                bytes[at] = rng.random();
            }
        }
        // Written in random pieces, as a network would deliver them.
        let mut writes = Vec::new();
        let mut rest = bytes.as_slice();
        while !rest.is_empty() {
            let n = if rng.random_bool(0.7) {
                rest.len()
            } else {
                rng.random_range(1..=rest.len())
            };
            writes.push(rest[..n].to_vec());
            rest = &rest[n..];
        }
        Case {
            what,
            writes,
            linger,
        }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn rss(pid: u32) -> Result<u64, String> {
    procfs::status_bytes(pid, "VmRSS").ok_or_else(|| format!("cannot read the RSS of {pid}"))
}

fn tail(s: &str, n: usize) -> String {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    s[start..].to_string()
}

/// Sends a case on a new connection and reads the answer for a moment.
/// Returns how many bytes came back, and the connection if it is to stay
/// open.
async fn send(
    socket: std::path::PathBuf,
    case: Case,
) -> Result<(usize, Option<UnixStream>), std::io::Error> {
    let mut stream = UnixStream::connect(&socket).await?;
    let mut read = 0;
    let mut buf = vec![0u8; 16 * 1024];
    for piece in &case.writes {
        stream.write_all(piece).await?;
        // Whatever the daemon says meanwhile, so it never blocks on us.
        while let Ok(Ok(n)) = tokio::time::timeout(Duration::ZERO, stream.read(&mut buf)).await {
            if n == 0 {
                return Ok((read, None));
            }
            read += n;
        }
    }
    if case.linger {
        return Ok((read, Some(stream)));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(150);
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(n)) => read += n,
            Ok(Err(e)) => return Err(e),
        }
    }
    Ok((read, None))
}

fn random_bytes(rng: &mut StdRng, len: std::ops::Range<usize>) -> Vec<u8> {
    let n = rng.random_range(len);
    (0..n).map(|_| rng.random()).collect()
}

/// A frame: 24-bit length, type, flags, stream id, payload.
fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len())
        .unwrap_or(u32::MAX)
        .min(0xff_ffff);
    out.extend(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
}

fn settings(rng: &mut StdRng, out: &mut Vec<u8>) {
    let mut payload = Vec::new();
    if rng.random_bool(0.3) {
        for _ in 0..rng.random_range(0..6) {
            let id: u16 = if rng.random_bool(0.7) {
                rng.random_range(1..=6)
            } else {
                rng.random()
            };
            let value: u32 = match rng.random_range(0..4) {
                0 => 0,
                1 => u32::MAX,
                2 => rng.random_range(0..100_000),
                _ => rng.random(),
            };
            payload.extend(id.to_be_bytes());
            payload.extend(value.to_be_bytes());
        }
    }
    frame(out, 0x4, 0, 0, &payload);
}

fn random_frames(rng: &mut StdRng) -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    if rng.random_bool(0.8) {
        settings(rng, &mut out);
    }
    for _ in 0..rng.random_range(1..12) {
        let kind = if rng.random_bool(0.9) {
            rng.random_range(0..=9)
        } else {
            rng.random()
        };
        let stream = match rng.random_range(0..5) {
            0 => 0,
            1 => 1,
            2 => rng.random_range(1..20) * 2 + 1,
            3 => rng.random_range(1..20) * 2,
            _ => rng.random(),
        };
        let payload = random_bytes(rng, 0..600);
        if rng.random_bool(0.1) {
            // A length that lies.
            let len: u32 = rng.random_range(0..0x100_0000);
            out.extend(&len.to_be_bytes()[1..]);
            out.push(kind);
            out.push(rng.random());
            out.extend(u32::to_be_bytes(stream));
            out.extend(&payload);
        } else {
            frame(&mut out, kind, rng.random(), stream, &payload);
        }
    }
    out
}

/// The methods a request may call, with whether the client streams.
const METHODS: &[&str] = &[
    "/agent.v1.AgentService/CreateConversation",
    "/agent.v1.AgentService/ListConversations",
    "/agent.v1.AgentService/GetConversation",
    "/agent.v1.AgentService/SendMessage",
    "/agent.v1.AgentService/CancelConversation",
    "/agent.v1.AgentService/AnswerPermission",
    "/agent.v1.AgentService/ListShells",
    "/agent.v1.AgentService/ReadShellOutput",
    "/agent.v1.AgentService/KillShell",
    "/agent.v1.AgentService/Attach",
    "/agent.v1.AgentService/Attach",
    "/agent.v1.AgentService/ExportConversations",
    "/agent.v1.AgentService/ImportConversations",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/agent.v1.AgentService/NoSuchMethod",
    "/nope",
];

/// Header fields of a gRPC request for `path`, with some variations.
fn headers(rng: &mut StdRng, path: &str, intact: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut h: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b":method".to_vec(), b"POST".to_vec()),
        (b":scheme".to_vec(), b"http".to_vec()),
        (b":path".to_vec(), path.as_bytes().to_vec()),
    ];
    let authority: &[u8] = [
        &b"localhost"[..],
        b"%2Frun%2Fagentd.sock",
        b"/tmp/a b.sock",
        b"",
        b"\xff\xfe",
        b"[::1",
    ]
    .choose(rng)
    .copied()
    .unwrap_or(b"localhost");
    if intact || rng.random_bool(0.9) {
        h.push((b":authority".to_vec(), authority.to_vec()));
    }
    h.push((b"content-type".to_vec(), b"application/grpc".to_vec()));
    h.push((b"te".to_vec(), b"trailers".to_vec()));
    if intact {
        return h;
    }
    if rng.random_bool(0.1) {
        h.push((b"grpc-encoding".to_vec(), b"gzip".to_vec()));
    }
    if rng.random_bool(0.1) {
        h.push((b"grpc-timeout".to_vec(), b"1m".to_vec()));
    }
    if rng.random_bool(0.05) {
        h.push((b"x-big".to_vec(), vec![b'a'; rng.random_range(0..40_000)]));
    }
    if rng.random_bool(0.1) {
        let at = rng.random_range(0..h.len());
        h.swap(0, at);
    }
    if rng.random_bool(0.05) {
        let at = rng.random_range(0..h.len());
        h.remove(at);
    }
    h
}

/// An HPACK integer with a `prefix`-bit prefix under `flags`.
fn hpack_int(out: &mut Vec<u8>, flags: u8, prefix: u8, mut value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A header block: each field as a literal (without indexing, never
/// indexed, or added to the table), indexed from the static table when it
/// is there, or referring to an entry an earlier field added.
fn header_block(rng: &mut StdRng, fields: &[(Vec<u8>, Vec<u8>)], intact: bool) -> Vec<u8> {
    const STATIC: &[(&[u8], &[u8], usize)] = &[
        (b":method", b"POST", 3),
        (b":scheme", b"http", 6),
        (b"te", b"trailers", 0),
    ];
    let mut out = Vec::new();
    if rng.random_bool(0.05) {
        let size = if intact {
            4096
        } else {
            rng.random_range(0..8192)
        };
        hpack_int(&mut out, 0x20, 5, size);
    }
    let mut added = 0usize;
    for (name, value) in fields {
        if let Some((_, _, index)) = STATIC
            .iter()
            .find(|(n, v, i)| *i > 0 && n == name && v == value)
            && rng.random_bool(0.5)
        {
            hpack_int(&mut out, 0x80, 7, *index);
            continue;
        }
        let (flags, prefix) = match rng.random_range(0..3) {
            0 => (0x00, 4),
            1 => (0x10, 4),
            _ => (0x40, 6),
        };
        hpack_int(&mut out, flags, prefix, 0);
        hpack_int(&mut out, 0, 7, name.len());
        out.extend(name);
        hpack_int(&mut out, 0, 7, value.len());
        out.extend(value);
        if flags == 0x40 {
            added += 1;
        }
    }
    if intact {
        return out;
    }
    if added > 0 && rng.random_bool(0.3) {
        // Refer to the newest dynamic entry again, or to one past the end.
        let index = 62 + rng.random_range(0..added + 2);
        hpack_int(&mut out, 0x80, 7, index);
    }
    if rng.random_bool(0.05) {
        out.extend(random_bytes(rng, 1..40));
    }
    out
}

/// Writes a header block as HEADERS (and CONTINUATION) frames.
fn headers_frames(
    rng: &mut StdRng,
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
) {
    let pieces = if block.len() > 1 && rng.random_bool(0.2) {
        let at = rng.random_range(1..block.len());
        vec![&block[..at], &block[at..]]
    } else {
        vec![block]
    };
    for (i, piece) in pieces.iter().enumerate() {
        let last = i + 1 == pieces.len();
        let mut flags = if last { 0x4 } else { 0 };
        if i == 0 && end_stream {
            flags |= 0x1;
        }
        let kind = if i == 0 { 0x1 } else { 0x9 };
        if i == 0 && rng.random_bool(0.1) {
            // Padded, with priority.
            let pad = rng.random_range(0..20u8);
            let mut payload = vec![pad];
            payload.extend([0, 0, 0, 0, 16]);
            payload.extend(*piece);
            payload.extend(std::iter::repeat_n(0, usize::from(pad)));
            frame(out, kind, flags | 0x8 | 0x20, stream, &payload);
        } else {
            frame(out, kind, flags, stream, piece);
        }
    }
}

/// A gRPC message: flag, 32-bit length, body; with damage now and then.
fn grpc_message(rng: &mut StdRng, body: &[u8], intact: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if intact {
        out.push(0);
        out.extend(u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend(body);
        return out;
    }
    let compressed = u8::from(rng.random_bool(0.03));
    out.push(if rng.random_bool(0.02) {
        rng.random()
    } else {
        compressed
    });
    let len = match rng.random_range(0..40) {
        0 => u32::MAX,
        1 => 0x7fff_ffff,
        2 => 5 * 1024 * 1024,
        3 => u32::try_from(body.len())
            .unwrap_or(0)
            .saturating_add(rng.random_range(1..100)),
        _ => u32::try_from(body.len()).unwrap_or(u32::MAX),
    };
    out.extend(len.to_be_bytes());
    out.extend(body);
    out
}

fn text(rng: &mut StdRng) -> String {
    match rng.random_range(0..8) {
        0 => String::new(),
        1 => "x".repeat(rng.random_range(0..70_000)),
        2 => "héllo ✓ \u{0} \u{202e}".to_string(),
        3 => (0..rng.random_range(0..40))
            .map(|_| rng.random::<char>())
            .collect(),
        _ => ["ls", "hello", "do it", "..", "/", "/etc", "*", "a b"]
            .choose(rng)
            .unwrap_or(&"x")
            .to_string(),
    }
}

fn id(rng: &mut StdRng, ids: &[String]) -> String {
    match rng.random_range(0..6) {
        0 => String::new(),
        1 => text(rng),
        2 => ids
            .choose(rng)
            .map(|i| i[..rng.random_range(0..=i.len())].to_string())
            .unwrap_or_default(),
        _ => ids.choose(rng).cloned().unwrap_or_default(),
    }
}

fn enum_value(rng: &mut StdRng) -> i32 {
    match rng.random_range(0..5) {
        0 => -1,
        1 => i32::MAX,
        _ => rng.random_range(0..7),
    }
}

fn number(rng: &mut StdRng) -> u64 {
    match rng.random_range(0..4) {
        0 => 0,
        1 => u64::MAX,
        _ => rng.random_range(0..100),
    }
}

fn imported(rng: &mut StdRng, ids: &[String]) -> pb::ExportedConversation {
    use pb::content_block::Block;
    let messages = (0..rng.random_range(0..6))
        .map(|i| pb::Message {
            seq: if rng.random_bool(0.8) {
                i + 1
            } else {
                number(rng)
            },
            role: enum_value(rng),
            content: (0..rng.random_range(0..3))
                .map(|_| pb::ContentBlock {
                    block: match rng.random_range(0..5) {
                        0 => None,
                        1 => Some(Block::Text(pb::TextBlock { text: text(rng) })),
                        2 => Some(Block::Thinking(pb::ThinkingBlock {
                            thinking: text(rng),
                            signature: text(rng),
                            redacted_data: text(rng),
                        })),
                        3 => Some(Block::ToolUse(pb::ToolUseBlock {
                            id: text(rng),
                            name: ["bash", "read", "nope"]
                                .choose(rng)
                                .unwrap_or(&"bash")
                                .to_string(),
                            input_json: ["{}", "{\"command\":\"ls\"}", "[", "null"]
                                .choose(rng)
                                .unwrap_or(&"{}")
                                .to_string(),
                            ..Default::default()
                        })),
                        _ => Some(Block::ToolResult(pb::ToolResultBlock {
                            images: Vec::new(),
                            tool_use_id: text(rng),
                            content: text(rng),
                            is_error: rng.random(),
                        })),
                    },
                })
                .collect(),
            created_at_ms: rng.random(),
            usage: None,
            stop_reason: text(rng),
            interrupted: rng.random(),
            kind: enum_value(rng),
        })
        .collect();
    let state = pb::ConversationState {
        kind: enum_value(rng),
        attempt: rng.random(),
        error_message: text(rng),
        running_tool_ids: vec![text(rng)],
        ..Default::default()
    };
    pb::ExportedConversation {
        images: Vec::new(),
        conversation: rng.random_bool(0.9).then(|| pb::ConversationSummary {
            id: if rng.random_bool(0.5) {
                ulid_like(rng)
            } else {
                id(rng, ids)
            },
            title: text(rng),
            cwd: ["/tmp", "", "relative", "/nonexistent/x"]
                .choose(rng)
                .unwrap_or(&"/tmp")
                .to_string(),
            model: text(rng),
            state: rng.random_bool(0.5).then_some(state),
            created_at_ms: rng.random(),
            updated_at_ms: rng.random(),
            message_count: number(rng),
            mode: enum_value(rng),
            usage: None,
            last_seq: number(rng),
            ..Default::default()
        }),
        messages,
    }
}

fn ulid_like(rng: &mut StdRng) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    (0..26)
        .map(|_| char::from(*ALPHABET.choose(rng).unwrap_or(&b'0')))
        .collect()
}

/// A request body of the method at `path`, valid protobuf with random
/// field values.
fn body(rng: &mut StdRng, path: &str, ids: &[String], intact: bool) -> Vec<u8> {
    use pb::attach_request::Frame;
    let method = path.rsplit('/').next().unwrap_or("");
    // Intact requests name real conversations and sensible values, so
    // that they get past validation to the deeper paths.
    if intact {
        let real = ids.choose(rng).cloned().unwrap_or_default();
        match method {
            "CreateConversation" => {
                return pb::CreateConversationRequest {
                    cwd: "/tmp".into(),
                    prompt: if rng.random_bool(0.5) {
                        text(rng)
                    } else {
                        String::new()
                    },
                    mode: rng.random_range(0..=4),
                    allow_rules: if rng.random_bool(0.5) {
                        vec!["bash".into(), "write(*.txt)".into()]
                    } else {
                        Vec::new()
                    },
                    ..Default::default()
                }
                .encode_to_vec();
            }
            "SendMessage" => {
                return pb::SendMessageRequest {
                    conversation_id: real,
                    text: text(rng),
                    ..Default::default()
                }
                .encode_to_vec();
            }
            "Attach" if rng.random_bool(0.5) => {
                let frame = Frame::Subscribe(pb::Subscribe {
                    conversation_id: real,
                    after_seq: number(rng),
                    client_name: text(rng),
                    ..Default::default()
                });
                return pb::AttachRequest { frame: Some(frame) }.encode_to_vec();
            }
            _ => {}
        }
    }
    let cwd = ["/tmp", "/tmp", "/", "", "relative", "/nonexistent"]
        .choose(rng)
        .unwrap_or(&"/tmp")
        .to_string();
    match method {
        "CreateConversation" => pb::CreateConversationRequest {
            cwd,
            model: text(rng),
            prompt: if rng.random_bool(0.5) {
                String::new()
            } else {
                text(rng)
            },
            mode: enum_value(rng),
            allow_rules: (0..rng.random_range(0..3)).map(|_| text(rng)).collect(),
            additional_dirs: (0..rng.random_range(0..2)).map(|_| text(rng)).collect(),
            ..Default::default()
        }
        .encode_to_vec(),
        "ListConversations" => pb::ListConversationsRequest {
            limit: rng.random(),
            before_id: id(rng, ids),
            archived: rng.random(),
        }
        .encode_to_vec(),
        "GetConversation" => pb::GetConversationRequest {
            conversation_id: id(rng, ids),
        }
        .encode_to_vec(),
        "SendMessage" => pb::SendMessageRequest {
            conversation_id: id(rng, ids),
            text: text(rng),
            ..Default::default()
        }
        .encode_to_vec(),
        "CancelConversation" => pb::CancelConversationRequest {
            conversation_id: id(rng, ids),
            ..Default::default()
        }
        .encode_to_vec(),
        "AnswerPermission" => pb::AnswerPermissionRequest {
            conversation_id: id(rng, ids),
            request_id: text(rng),
            decision: enum_value(rng),
            feedback: text(rng),
            client_name: text(rng),
            scope: enum_value(rng),
            ..Default::default()
        }
        .encode_to_vec(),
        "ListShells" => pb::ListShellsRequest {
            conversation_id: id(rng, ids),
        }
        .encode_to_vec(),
        "ReadShellOutput" => pb::ReadShellOutputRequest {
            shell_id: text(rng),
            offset: number(rng),
            follow: rng.random(),
        }
        .encode_to_vec(),
        "KillShell" => pb::KillShellRequest {
            shell_id: text(rng),
        }
        .encode_to_vec(),
        "Attach" => {
            let frame = match rng.random_range(0..6) {
                0 | 1 => Some(Frame::Subscribe(pb::Subscribe {
                    conversation_id: id(rng, ids),
                    after_seq: number(rng),
                    client_name: text(rng),
                    ..Default::default()
                })),
                2 => Some(Frame::Send(pb::SendMessageFrame {
                    text: text(rng),
                    ..Default::default()
                })),
                3 => Some(Frame::Answer(pb::AnswerPermissionFrame {
                    request_id: text(rng),
                    decision: enum_value(rng),
                    feedback: text(rng),
                    scope: enum_value(rng),
                    ..Default::default()
                })),
                4 => Some(Frame::Cancel(pb::CancelFrame {
                    ..Default::default()
                })),
                _ => None,
            };
            pb::AttachRequest { frame }.encode_to_vec()
        }
        "ExportConversations" => pb::ExportConversationsRequest {
            conversation_ids: (0..rng.random_range(0..3)).map(|_| id(rng, ids)).collect(),
        }
        .encode_to_vec(),
        "ImportConversations" => imported(rng, ids).encode_to_vec(),
        _ => random_bytes(rng, 0..64),
    }
}

/// The preface, SETTINGS, and one to three requests with their messages,
/// with other frames in between.
fn requests(rng: &mut StdRng, ids: &[String]) -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    settings(rng, &mut out);
    let mut stream = 1u32;
    for _ in 0..rng.random_range(1..=3) {
        let path = *METHODS.choose(rng).unwrap_or(&METHODS[0]);
        let intact = rng.random_bool(0.5);
        let fields = headers(rng, path, intact);
        let block = header_block(rng, &fields, intact);
        let no_body = !intact && rng.random_bool(0.05);
        headers_frames(rng, &mut out, stream, &block, no_body);
        if !no_body {
            let mut data = Vec::new();
            for _ in 0..rng.random_range(1..=3) {
                let message = match rng.random_range(0..10) {
                    _ if intact => body(rng, path, ids, true),
                    0 => random_bytes(rng, 0..200),
                    1 => {
                        let b = body(rng, path, ids, false);
                        b[..rng.random_range(0..=b.len())].to_vec()
                    }
                    _ => body(rng, path, ids, false),
                };
                data.extend(grpc_message(rng, &message, intact));
            }
            // In one DATA frame or several; END_STREAM on the last (not
            // always: a client may leave its side open).
            let end = intact || rng.random_bool(0.8);
            let mut rest = data.as_slice();
            while !rest.is_empty() {
                let n = if rng.random_bool(0.7) {
                    rest.len().min(16_384)
                } else {
                    rng.random_range(1..=rest.len().min(16_384))
                };
                let last = n == rest.len();
                frame(
                    &mut out,
                    0x0,
                    if last && end { 0x1 } else { 0 },
                    stream,
                    &rest[..n],
                );
                rest = &rest[n..];
                if !intact && rng.random_bool(0.05) {
                    interlude(rng, &mut out, stream);
                }
            }
        }
        if !intact && rng.random_bool(0.1) {
            interlude(rng, &mut out, stream);
        }
        stream += 2;
    }
    out
}

/// A control frame: RST_STREAM, PING, WINDOW_UPDATE (sometimes of zero),
/// GOAWAY, PRIORITY.
fn interlude(rng: &mut StdRng, out: &mut Vec<u8>, stream: u32) {
    match rng.random_range(0..5) {
        0 => frame(out, 0x3, 0, stream, &[0, 0, 0, 8]),
        1 => frame(out, 0x6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]),
        2 => {
            let inc: u32 = if rng.random_bool(0.2) {
                0
            } else {
                rng.random_range(1..1 << 20)
            };
            let target = if rng.random_bool(0.5) { 0 } else { stream };
            frame(out, 0x8, 0, target, &inc.to_be_bytes());
        }
        3 => frame(out, 0x7, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0]),
        _ => frame(out, 0x2, 0, stream, &[0, 0, 0, 0, 16]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request exactly as the cases build them, undamaged: the daemon
    /// must serve it, or the target would only ever test refusals.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_undamaged_request_is_served() {
        let fake = FakeLlm::start().await;
        fake.set_default(Some(Script::text("ok")));
        let daemon = TestDaemon::start(&fake).await;
        let path = "/agent.v1.AgentService/CreateConversation";
        let fields: Vec<(Vec<u8>, Vec<u8>)> = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "%2Frun%2Fagentd.sock"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
        let mut rng = StdRng::seed_from_u64(7);
        let mut bytes = PREFACE.to_vec();
        frame(&mut bytes, 0x4, 0, 0, &[]);
        for stream in [1u32, 3] {
            let block = header_block(&mut rng, &fields[..], true);
            headers_frames(&mut rng, &mut bytes, stream, &block, false);
            let body = pb::CreateConversationRequest {
                cwd: daemon.work_dir.display().to_string(),
                ..Default::default()
            }
            .encode_to_vec();
            let mut message = vec![0];
            message.extend(u32::try_from(body.len()).unwrap().to_be_bytes());
            message.extend(body);
            frame(&mut bytes, 0x0, 0x1, stream, &message);
        }
        let case = Case {
            what: "undamaged",
            writes: vec![bytes],
            linger: false,
        };
        let (answered, _) = send(daemon.socket.clone(), case).await.unwrap();
        assert!(answered > 0);
        let mut client = daemon.client().await;
        let list = client
            .list_conversations(pb::ListConversationsRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(list.conversations.len(), 2, "{list:?}\n{}", daemon.log());
    }
}
