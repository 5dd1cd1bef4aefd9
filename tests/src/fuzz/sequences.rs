//! The `rpc-sequences` target: a real daemon talking to the crash test's
//! scripted model (multi-tool turns; now and then a round fails once and is
//! retried), conversations that unload when idle (after 300 ms), and
//! several clients sending random sequences of RPCs at once.
//!
//! Each round, [`CLIENTS`] clients each run a random sequence of
//! operations, each on its own connection (which they sometimes drop and
//! open again): create conversations (with or without a prompt, with or
//! without the rules that let every tool run, in several modes), send
//! prompts, cancel, answer permission requests (every decision, both
//! scopes, sometimes with feedback, sometimes a request that does not
//! exist), attach for a while (resuming from a random point, sending,
//! answering and cancelling through the stream) and detach abruptly, read,
//! list and export conversations, import an export back (every id already
//! exists, so nothing may be imported), list, read and kill background
//! shells, and send requests naming conversations that do not exist. Some
//! calls are abandoned after a random few milliseconds (the client
//! disconnects mid-call). One observer per conversation records what it is
//! shown (the crash test's ledger), and is itself disconnected and resumed
//! now and then.
//!
//! Checked while it runs: no RPC fails with `Internal` or `Unknown`; every
//! transcript read is gap-free from 1; an attached client never sees an
//! event number twice or going backwards. After each round the remaining
//! permission requests are answered, everything comes to rest (none
//! stuck, none in Error), and the crash test's invariants hold for every
//! conversation touched: acknowledged messages present and unchanged,
//! sequence numbers gap-free, a valid chain (every tool_use answered
//! exactly once), every turn ended (or left what a cancel or a "deny and
//! stop" leaves), every model request a prefix of the stored transcript,
//! no bash call run twice, every tool recorded as a success left its
//! effect. The daemon must be alive with no panic in its log.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::{FuzzOptions, Progress, Report, Target};
use crate::crash::check;
use crate::crash::ledger::{self, Ledger};
use crate::crash::responder::{self, Tag};
use crate::fake_llm::FakeLlm;
use crate::harness::{TestDaemon, connect_uds};

/// Clients acting at once.
const CLIENTS: usize = 3;
/// Conversations at most; beyond, clients only use the ones there are.
const MAX_CONVERSATIONS: usize = 40;
/// The rules that let every tool run.
const ALLOW_RULES: [&str; 4] = ["bash", "write", "edit", "patch"];
/// How long everything gets to come to rest after a round.
const SETTLE: Duration = Duration::from_secs(60);

/// Runs the target for the budget.
pub async fn run(opts: &FuzzOptions) -> Report {
    let mut report = Report::new(Target::RpcSequences, opts.seed);
    let fake = FakeLlm::start().await;
    fake.set_responder(Some(responder::responder(opts.seed, 0.05)));
    let mut daemon_opts = opts.daemon.clone();
    daemon_opts
        .extra_config
        .push_str("\n[limits]\nidle_unload_ms = 300\n");
    let daemon = TestDaemon::start_with(&fake, daemon_opts).await;
    let mut run = Run {
        shared: Arc::new(Shared {
            state: Mutex::new(State::default()),
            ledger: Arc::new(Ledger::default()),
            work_dir: daemon.work_dir.clone(),
            socket: daemon.socket.clone(),
        }),
        fake,
        daemon,
        rng: StdRng::seed_from_u64(opts.seed),
        observers: HashMap::new(),
        requests_checked: 0,
        log_read: 0,
        stats: Stats::default(),
    };
    let started = Instant::now();
    let result = run.all(opts, &mut report).await;
    if let Err(e) = result {
        report.fail(format!(
            "{e}\n    (seed {}; daemon log: {})",
            opts.seed,
            run.keep_log()
        ));
    }
    let s = &run.stats;
    report.notes.push(format!(
        "{} rounds in {:.0} s; {} RPCs ({} abandoned mid-call, {} refused as expected); \
         {} conversations, {} turns acknowledged, {} cancels, {} permission answers, \
         {} attach sessions, {} observer reconnects, {} shells seen, {} model requests checked",
        s.rounds,
        started.elapsed().as_secs_f64(),
        report.cases,
        s.abandoned,
        s.refused,
        lock(&run.shared.state).convs.len(),
        s.acked,
        s.cancels,
        s.answers,
        s.attaches,
        s.observer_reconnects,
        s.shells,
        run.requests_checked
    ));
    report
}

#[derive(Debug, Default)]
struct Stats {
    rounds: u64,
    abandoned: u64,
    refused: u64,
    acked: u64,
    cancels: u64,
    answers: u64,
    attaches: u64,
    observer_reconnects: u64,
    shells: u64,
}

/// A conversation the run knows.
#[derive(Debug)]
struct Conv {
    id: String,
    label: u64,
    /// The last turn number handed out.
    turns: u64,
    /// Turns a cancel or a "deny and stop" may have ended early.
    cancelled: HashSet<u64>,
    /// Turns handed out this round.
    round_turns: Vec<u64>,
    /// A cancel or a "deny and stop" was sent this round.
    stopped: bool,
    /// Touched this round.
    dirty: bool,
}

#[derive(Debug, Default)]
struct State {
    convs: Vec<Conv>,
    next_label: u64,
    /// Creations not acknowledged (abandoned or refused): label → whether
    /// with a prompt.
    pending: HashMap<u64, bool>,
    /// The first violation seen by a client.
    violation: Option<String>,
    /// Counters the clients keep.
    rpcs: u64,
    abandoned: u64,
    refused: u64,
    acked: u64,
    cancels: u64,
    answers: u64,
    attaches: u64,
    shells: u64,
}

struct Shared {
    state: Mutex<State>,
    ledger: Arc<Ledger>,
    work_dir: std::path::PathBuf,
    socket: std::path::PathBuf,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn violation(&self, v: String) {
        let mut s = self.state();
        if s.violation.is_none() {
            s.violation = Some(v);
        }
    }

    /// Judges a refusal: the expected ones count, `Internal` and `Unknown`
    /// are violations.
    fn refused(&self, what: &str, status: &tonic::Status) {
        use tonic::Code;
        match status.code() {
            Code::Internal | Code::Unknown | Code::DataLoss | Code::Unimplemented => {
                self.violation(format!("{what} failed with {status}"));
            }
            _ => self.state().refused += 1,
        }
    }

    /// A conversation at random: its id and label.
    fn pick(&self, rng: &mut StdRng) -> Option<(String, u64)> {
        let s = self.state();
        s.convs.choose(rng).map(|c| (c.id.clone(), c.label))
    }

    /// The next turn of conversation `label`: its prompt.
    fn next_turn(&self, label: u64, rounds: u32) -> Option<Tag> {
        let mut s = self.state();
        let conv = s.convs.iter_mut().find(|c| c.label == label)?;
        conv.turns += 1;
        conv.round_turns.push(conv.turns);
        conv.dirty = true;
        Some(Tag {
            conv: label,
            turn: conv.turns,
            rounds,
            spawn: 0,
            git: false,
        })
    }

    fn stopped(&self, label: u64) {
        let mut s = self.state();
        if let Some(c) = s.convs.iter_mut().find(|c| c.label == label) {
            c.stopped = true;
            c.dirty = true;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Run {
    shared: Arc<Shared>,
    fake: FakeLlm,
    daemon: TestDaemon,
    rng: StdRng,
    /// The observer of each conversation.
    observers: HashMap<String, JoinHandle<()>>,
    requests_checked: usize,
    log_read: usize,
    stats: Stats,
}

impl Run {
    async fn all(&mut self, opts: &FuzzOptions, report: &mut Report) -> Result<(), String> {
        let deadline = Instant::now() + opts.budget;
        let mut progress = Progress::new(Target::RpcSequences, opts.progress);
        let pid = self.daemon.pid();
        let rss = || crate::bench::procfs::status_bytes(pid, "VmRSS").unwrap_or(0);
        let mut samples = vec![rss()];
        loop {
            self.round().await?;
            samples.push(rss());
            self.stats.rounds += 1;
            report.cases = self.shared.state().rpcs;
            progress.tick(report.cases, || {
                format!(
                    ", {} rounds, {} conversations",
                    self.stats.rounds,
                    self.shared.state().convs.len()
                )
            });
            if Instant::now() >= deadline {
                break;
            }
        }
        // RSS before the first round and after each quarter of the rounds.
        let at = |k: usize| samples[(samples.len() - 1) * k / 4] as f64 / 1048576.0;
        report.notes.push(format!(
            "daemon RSS: {:.1} MiB before; {:.1}, {:.1}, {:.1}, {:.1} MiB after each quarter of the rounds",
            at(0),
            at(1),
            at(2),
            at(3),
            at(4)
        ));
        let s = self.shared.state();
        self.stats.abandoned = s.abandoned;
        self.stats.refused = s.refused;
        self.stats.acked = s.acked;
        self.stats.cancels = s.cancels;
        self.stats.answers = s.answers;
        self.stats.attaches = s.attaches;
        self.stats.shells = s.shells;
        Ok(())
    }

    async fn round(&mut self) -> Result<(), String> {
        let mut clients = Vec::new();
        for i in 0..CLIENTS {
            let seed = self.rng.random::<u64>() ^ i as u64;
            let shared = self.shared.clone();
            let ops = self.rng.random_range(4..16);
            clients.push(tokio::spawn(client(shared, seed, ops)));
        }
        // Observers come and go meanwhile.
        let until = Instant::now() + Duration::from_millis(self.rng.random_range(50..400));
        while Instant::now() < until {
            self.observe_new().await;
            if self.rng.random_bool(0.3) {
                self.reconnect_observer().await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for c in clients {
            c.await.map_err(|e| format!("a client task failed: {e}"))?;
        }
        self.observe_new().await;
        if let Some(v) = self.shared.state().violation.take() {
            return Err(v);
        }
        // Calls abandoned mid-way may still land; let them.
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.adopt().await?;
        self.settle().await?;
        self.observe_new().await;
        self.check().await?;
        self.healthy()?;
        let mut s = self.shared.state();
        for c in &mut s.convs {
            if c.stopped {
                c.cancelled.extend(c.round_turns.iter().copied());
            }
            c.stopped = false;
            c.round_turns.clear();
        }
        Ok(())
    }

    async fn client(&self) -> Result<AgentServiceClient<Channel>, String> {
        connect_uds(&self.daemon.socket)
            .await
            .map(AgentServiceClient::new)
            .map_err(|e| format!("cannot connect to the daemon: {e}"))
    }

    /// Starts an observer for each conversation without one.
    async fn observe_new(&mut self) {
        let ids: Vec<String> = self
            .shared
            .state()
            .convs
            .iter()
            .map(|c| c.id.clone())
            .collect();
        for id in ids {
            let running = self.observers.get(&id).is_some_and(|h| !h.is_finished());
            if !running && let Ok(client) = self.client().await {
                let handle = tokio::spawn(ledger::observe(
                    client,
                    id.clone(),
                    self.shared.ledger.clone(),
                ));
                self.observers.insert(id, handle);
            }
        }
    }

    /// Drops one observer's connection; it resumes after the last event it
    /// saw next time [`Run::observe_new`] runs.
    async fn reconnect_observer(&mut self) {
        let ids: Vec<String> = self.observers.keys().cloned().collect();
        let Some(id) = ids.choose(&mut self.rng) else {
            return;
        };
        if let Some(handle) = self.observers.remove(id) {
            handle.abort();
            let _ = handle.await;
            self.stats.observer_reconnects += 1;
        }
    }

    /// Takes in conversations whose creation was not acknowledged but
    /// happened: their working directory names their label.
    async fn adopt(&mut self) -> Result<(), String> {
        let mut client = self.client().await?;
        let all = list_all(&mut client).await?;
        let mut s = self.shared.state();
        for c in all {
            if s.convs.iter().any(|k| k.id == c.id) {
                continue;
            }
            let label = Path::new(&c.cwd)
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix('c'))
                .and_then(|n| n.parse::<u64>().ok());
            let Some(label) = label.filter(|l| s.pending.contains_key(l)) else {
                return Err(format!(
                    "conversation {} (in {}) appeared, but no creation of it is pending",
                    c.id, c.cwd
                ));
            };
            let with_prompt = s.pending.remove(&label).unwrap_or(false);
            if with_prompt && c.message_count == 0 {
                return Err(format!(
                    "conversation {} was created with a prompt (the call was abandoned), but holds no message",
                    c.id
                ));
            }
            s.convs.push(Conv {
                id: c.id,
                label,
                turns: 1,
                cancelled: HashSet::new(),
                round_turns: vec![1],
                stopped: false,
                dirty: true,
            });
        }
        s.pending.clear();
        Ok(())
    }

    /// Answers what still waits for permission until everything is at rest.
    async fn settle(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + SETTLE;
        let mut client = self.client().await?;
        let mut quiet = 0;
        loop {
            let all = list_all(&mut client).await?;
            let mut busy = Vec::new();
            for c in &all {
                let state = c.state.clone().unwrap_or_default();
                match pb::StateKind::try_from(state.kind) {
                    Ok(pb::StateKind::Idle) => {}
                    Ok(pb::StateKind::Error) => {
                        return Err(format!(
                            "conversation {} ended in Error ({:?}): {}",
                            c.id,
                            pb::ErrorKind::try_from(state.error_kind),
                            state.error_message
                        ));
                    }
                    Ok(pb::StateKind::AwaitingPermission) => {
                        let decision = if self.rng.random_bool(0.5) {
                            pb::PermissionDecision::AllowOnce
                        } else {
                            pb::PermissionDecision::Deny
                        };
                        let r = client
                            .answer_permission(pb::AnswerPermissionRequest {
                                conversation_id: c.id.clone(),
                                decision: decision as i32,
                                client_name: "fuzz settler".into(),
                                ..Default::default()
                            })
                            .await;
                        if let Err(status) = r {
                            self.shared.refused("AnswerPermission (settling)", &status);
                        }
                        busy.push(c.id.clone());
                    }
                    kind => busy.push(format!("{} in {kind:?} {state:?}", c.id)),
                }
            }
            if let Some(v) = self.shared.state().violation.take() {
                return Err(v);
            }
            if busy.is_empty() {
                quiet += 1;
                if quiet >= 2 {
                    return Ok(());
                }
            } else {
                quiet = 0;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "stuck: {} conversation(s) not at rest {SETTLE:?} after the round: {}",
                    busy.len(),
                    busy.join("; ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The crash test's invariants, for every conversation touched this
    /// round and every new model request.
    async fn check(&mut self) -> Result<(), String> {
        let ledger = self.shared.ledger.clone();
        if let Some(v) = ledger.violation() {
            return Err(v);
        }
        let mut client = self.client().await?;
        let convs: Vec<(String, u64, HashSet<u64>, bool)> = {
            let s = self.shared.state();
            s.convs
                .iter()
                .map(|c| {
                    let mut cancelled = c.cancelled.clone();
                    if c.stopped {
                        cancelled.extend(c.round_turns.iter().copied());
                    }
                    (c.id.clone(), c.label, cancelled, c.dirty)
                })
                .collect()
        };
        let requests = self.fake.requests();
        let mut needed: HashSet<u64> = HashSet::new();
        for req in requests.iter().skip(self.requests_checked) {
            if let Some(label) = check::request_conv(&req.body) {
                needed.insert(label);
            }
        }
        let mut transcripts: HashMap<u64, (String, Vec<pb::Message>)> = HashMap::new();
        for (id, label, cancelled, dirty) in &convs {
            if !dirty && !needed.contains(label) {
                continue;
            }
            let r = client
                .get_conversation(pb::GetConversationRequest {
                    conversation_id: id.clone(),
                })
                .await
                .map_err(|e| format!("GetConversation {id} failed: {e}"))?
                .into_inner();
            let summary = r.conversation.unwrap_or_default();
            check::transcript(id, &summary, &r.messages, cancelled)?;
            ledger.check(id, &r.messages)?;
            if let Some(l) = check::transcript_conv(&r.messages)
                && l != *label
            {
                return Err(format!(
                    "conversation {id} (label {label}) holds the prompts of label {l}"
                ));
            }
            let cwd = self.daemon.work_dir.join(format!("c{label}"));
            check::effects(id, &cwd, &without_background(&r.messages))?;
            transcripts.insert(*label, (id.clone(), r.messages));
        }
        for (n, req) in requests.iter().enumerate().skip(self.requests_checked) {
            let Some(label) = check::request_conv(&req.body) else {
                return Err(format!(
                    "model request #{} has no tagged first message: {}",
                    n + 1,
                    req.body["messages"]
                ));
            };
            let Some((id, stored)) = transcripts.get(&label) else {
                return Err(format!(
                    "model request #{} belongs to conversation label {label}, which is unknown",
                    n + 1
                ));
            };
            check::request(n + 1, &req.body, stored, id)?;
        }
        self.requests_checked = requests.len();
        let mut s = self.shared.state();
        for c in &mut s.convs {
            c.dirty = false;
        }
        Ok(())
    }

    /// The daemon lives and logged no panic.
    fn healthy(&mut self) -> Result<(), String> {
        if let Some(status) = self.daemon.exit_status() {
            return Err(format!("the daemon exited ({status})"));
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

    /// Copies the daemon's log somewhere that outlives the run.
    fn keep_log(&self) -> String {
        let dest = std::env::temp_dir().join(format!(
            "agent-fuzz-rpc-sequences-{}.log",
            std::process::id()
        ));
        match std::fs::copy(&self.daemon.log_path, &dest) {
            Ok(_) => format!("kept at {}", dest.display()),
            Err(e) => format!("could not be kept: {e}"),
        }
    }
}

/// Every conversation in the store.
async fn list_all(
    client: &mut AgentServiceClient<Channel>,
) -> Result<Vec<pb::ConversationSummary>, String> {
    let mut out = Vec::new();
    let mut before_id = String::new();
    loop {
        let r = client
            .list_conversations(pb::ListConversationsRequest {
                limit: 100,
                before_id: before_id.clone(),
                archived: false,
            })
            .await
            .map_err(|e| format!("ListConversations failed: {e}"))?
            .into_inner();
        let n = r.conversations.len();
        out.extend(r.conversations);
        if r.next_before_id.is_empty() || n == 0 {
            return Ok(out);
        }
        before_id = r.next_before_id;
    }
}

/// The transcript with the results of calls moved to a background shell
/// counted as failures: their command may still run, or have been killed,
/// so their effect is not owed.
fn without_background(messages: &[pb::Message]) -> Vec<pb::Message> {
    use pb::content_block::Block as B;
    let mut out = messages.to_vec();
    for m in &mut out {
        for b in &mut m.content {
            if let Some(B::ToolResult(r)) = &mut b.block
                && (r.content.starts_with("started background shell")
                    || r.content.starts_with("moved to background shell"))
            {
                r.is_error = true;
            }
        }
    }
    out
}

/// Whether a transcript's sequence numbers run 1..=n.
fn gap_free(id: &str, messages: &[pb::Message]) -> Result<(), String> {
    for (i, m) in messages.iter().enumerate() {
        if m.seq != i as u64 + 1 {
            let seqs: Vec<u64> = messages.iter().map(|m| m.seq).collect();
            return Err(format!(
                "conversation {id}: a transcript read while it ran is not gap-free from 1: {seqs:?}"
            ));
        }
    }
    Ok(())
}

/// One client: `ops` random operations.
async fn client(shared: Arc<Shared>, seed: u64, ops: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut conn: Option<AgentServiceClient<Channel>> = None;
    for _ in 0..ops {
        if shared.state().violation.is_some() {
            return;
        }
        if conn.is_none() || rng.random_bool(0.1) {
            // A new connection (the old one, if any, is dropped).
            conn = connect_uds(&shared.socket)
                .await
                .ok()
                .map(AgentServiceClient::new);
        }
        let Some(c) = conn.clone() else {
            shared.violation("cannot connect to the daemon".into());
            return;
        };
        shared.state().rpcs += 1;
        // Now and then a call is abandoned after a few milliseconds.
        let abandon = rng
            .random_bool(0.1)
            .then(|| Duration::from_millis(rng.random_range(0..30)));
        let op_seed = rng.random::<u64>();
        let op = operation(shared.clone(), c, op_seed);
        match abandon {
            Some(after) => {
                if tokio::time::timeout(after, op).await.is_err() {
                    shared.state().abandoned += 1;
                }
            }
            None => op.await,
        }
    }
}

/// One random operation.
async fn operation(shared: Arc<Shared>, mut c: AgentServiceClient<Channel>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (count, pending) = {
        let s = shared.state();
        (s.convs.len(), s.pending.len())
    };
    let roll = if count == 0 {
        0
    } else {
        rng.random_range(0..100)
    };
    match roll {
        0..=9 if count + pending < MAX_CONVERSATIONS => create(&shared, &mut c, &mut rng).await,
        0..=29 => send(&shared, &mut c, &mut rng).await,
        30..=37 => cancel(&shared, &mut c, &mut rng).await,
        38..=52 => answer(&shared, &mut c, &mut rng).await,
        53..=67 => attach(&shared, &mut c, &mut rng).await,
        68..=75 => read(&shared, &mut c, &mut rng).await,
        76..=80 => export_import(&shared, &mut c, &mut rng).await,
        81..=87 => shells(&shared, &mut c, &mut rng).await,
        _ => nowhere(&shared, &mut c, &mut rng).await,
    }
}

async fn create(shared: &Shared, c: &mut AgentServiceClient<Channel>, rng: &mut StdRng) {
    let label = {
        let mut s = shared.state();
        s.next_label += 1;
        s.next_label
    };
    let cwd = shared.work_dir.join(format!("c{label}"));
    if let Err(e) = std::fs::create_dir_all(&cwd) {
        shared.violation(format!("cannot create {}: {e}", cwd.display()));
        return;
    }
    let with_prompt = rng.random_bool(0.5);
    shared.state().pending.insert(label, with_prompt);
    let tag = Tag {
        conv: label,
        turn: 1,
        rounds: rng.random_range(1..=4),
        spawn: 0,
        git: false,
    };
    let mode = *[
        pb::PermissionMode::Default,
        pb::PermissionMode::Default,
        pb::PermissionMode::AcceptEdits,
        pb::PermissionMode::ReadOnly,
        pb::PermissionMode::Plan,
        pb::PermissionMode::Unspecified,
    ]
    .choose(rng)
    .unwrap_or(&pb::PermissionMode::Default);
    let allow = if rng.random_bool(0.6) {
        ALLOW_RULES.iter().map(|r| r.to_string()).collect()
    } else {
        Vec::new()
    };
    let request = pb::CreateConversationRequest {
        cwd: cwd.display().to_string(),
        prompt: if with_prompt {
            tag.prompt()
        } else {
            String::new()
        },
        allow_rules: allow,
        mode: mode as i32,
        ..Default::default()
    };
    match c.create_conversation(request).await {
        Ok(r) => {
            let Some(conv) = r.into_inner().conversation else {
                shared.violation("CreateConversation answered without a conversation".into());
                return;
            };
            let mut s = shared.state();
            s.pending.remove(&label);
            let turns = u64::from(with_prompt);
            s.convs.push(Conv {
                id: conv.id.clone(),
                label,
                turns,
                cancelled: HashSet::new(),
                round_turns: if with_prompt { vec![1] } else { Vec::new() },
                stopped: false,
                dirty: true,
            });
            if with_prompt {
                s.acked += 1;
                drop(s);
                shared.ledger.sent(&conv.id, 1, &tag.prompt());
            }
        }
        Err(status) => shared.refused("CreateConversation", &status),
    }
}

async fn send(shared: &Shared, c: &mut AgentServiceClient<Channel>, rng: &mut StdRng) {
    let Some((id, label)) = shared.pick(rng) else {
        return;
    };
    let Some(tag) = shared.next_turn(label, rng.random_range(1..=4)) else {
        return;
    };
    let text = tag.prompt();
    let request = pb::SendMessageRequest {
        conversation_id: id.clone(),
        text: text.clone(),
        ..Default::default()
    };
    match c.send_message(request).await {
        Ok(r) => {
            shared.state().acked += 1;
            shared.ledger.sent(&id, r.into_inner().message_seq, &text);
        }
        Err(status) => shared.refused("SendMessage", &status),
    }
}

async fn cancel(shared: &Shared, c: &mut AgentServiceClient<Channel>, rng: &mut StdRng) {
    let Some((id, label)) = shared.pick(rng) else {
        return;
    };
    shared.stopped(label);
    shared.state().cancels += 1;
    let r = c
        .cancel_conversation(pb::CancelConversationRequest {
            conversation_id: id,
            ..Default::default()
        })
        .await;
    if let Err(status) = r {
        shared.refused("CancelConversation", &status);
    }
}

fn decision(rng: &mut StdRng) -> pb::PermissionDecision {
    use pb::PermissionDecision as D;
    *[
        D::AllowOnce,
        D::AllowOnce,
        D::AllowAlways,
        D::Deny,
        D::Deny,
        D::DenyAndStop,
        D::Never,
        D::Background,
        D::Unspecified,
    ]
    .choose(rng)
    .unwrap_or(&D::Deny)
}

async fn answer(shared: &Shared, c: &mut AgentServiceClient<Channel>, rng: &mut StdRng) {
    let Some((id, label)) = shared.pick(rng) else {
        return;
    };
    let pending = match c
        .get_conversation(pb::GetConversationRequest {
            conversation_id: id.clone(),
        })
        .await
    {
        Ok(r) => r.into_inner().pending_permission,
        Err(status) => {
            shared.refused("GetConversation", &status);
            return;
        }
    };
    let request_id = match (&pending, rng.random_range(0..10)) {
        (_, 0) => "no-such-request".to_string(),
        (_, 1) => String::new(),
        (Some(p), _) => p.request_id.clone(),
        (None, _) => return,
    };
    let d = decision(rng);
    if d == pb::PermissionDecision::DenyAndStop {
        shared.stopped(label);
    }
    shared.state().answers += 1;
    let r = c
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: id,
            request_id,
            decision: d as i32,
            feedback: if rng.random_bool(0.2) {
                "do something else".into()
            } else {
                String::new()
            },
            client_name: "fuzz".into(),
            scope: *[
                pb::RuleScope::Unspecified,
                pb::RuleScope::Conversation,
                pb::RuleScope::Project,
            ]
            .choose(rng)
            .unwrap_or(&pb::RuleScope::Unspecified) as i32,
            ..Default::default()
        })
        .await;
    if let Err(status) = r {
        shared.refused("AnswerPermission", &status);
    }
}

/// Attaches for a while: subscribes from a random point, maybe sends,
/// answers or cancels through the stream, reads, then drops it.
async fn attach(shared: &Shared, c: &mut AgentServiceClient<Channel>, rng: &mut StdRng) {
    use pb::attach_request::Frame;
    use pb::attach_response::Event;
    let Some((id, label)) = shared.pick(rng) else {
        return;
    };
    shared.state().attaches += 1;
    let last = shared.ledger.last_event(&id);
    let after_seq = match rng.random_range(0..4) {
        0 => 0,
        1 => last,
        2 => last.saturating_sub(rng.random_range(0..20)),
        _ => last + rng.random_range(0..1000),
    };
    let (tx, rx) = mpsc::channel(8);
    let subscribe = Frame::Subscribe(pb::Subscribe {
        conversation_id: id.clone(),
        after_seq,
        client_name: "fuzz attach".into(),
        ..Default::default()
    });
    if tx
        .send(pb::AttachRequest {
            frame: Some(subscribe),
        })
        .await
        .is_err()
    {
        return;
    }
    let mut stream = match c.attach(ReceiverStream::new(rx)).await {
        Ok(r) => r.into_inner(),
        Err(status) => {
            shared.refused("Attach", &status);
            return;
        }
    };
    let mut seen = 0u64;
    let mut pending_request: Option<String> = None;
    let until = tokio::time::Instant::now() + Duration::from_millis(rng.random_range(0..600));
    let mut acts = rng.random_range(0..3);
    loop {
        let frame = match tokio::time::timeout_at(until, stream.message()).await {
            Err(_) | Ok(Ok(None)) => break,
            Ok(Err(status)) => {
                shared.refused("Attach stream", &status);
                break;
            }
            Ok(Ok(Some(frame))) => frame,
        };
        let snapshot = matches!(frame.event, Some(Event::Snapshot(_)));
        if frame.seq != 0 {
            if frame.seq < seen || (frame.seq == seen && !snapshot) {
                shared.violation(format!(
                    "conversation {id}: an attached client got event {} after event {seen} (subscribed after {after_seq})",
                    frame.seq
                ));
                return;
            }
            seen = frame.seq;
        }
        match &frame.event {
            Some(Event::Snapshot(s)) => {
                if let Err(e) = gap_free(&id, &s.messages) {
                    shared.violation(format!("{e} (in a snapshot)"));
                    return;
                }
                pending_request = s.pending_permission.as_ref().map(|p| p.request_id.clone());
            }
            Some(Event::PermissionRequested(p)) => {
                pending_request = p.request.as_ref().map(|r| r.request_id.clone());
            }
            Some(Event::PermissionResolved(_)) => pending_request = None,
            _ => {}
        }
        if acts > 0 && rng.random_bool(0.3) {
            acts -= 1;
            let frame = match rng.random_range(0..3) {
                0 => {
                    let Some(tag) = shared.next_turn(label, rng.random_range(1..=3)) else {
                        break;
                    };
                    Frame::Send(pb::SendMessageFrame {
                        text: tag.prompt(),
                        ..Default::default()
                    })
                }
                1 => {
                    let d = decision(rng);
                    if d == pb::PermissionDecision::DenyAndStop {
                        shared.stopped(label);
                    }
                    shared.state().answers += 1;
                    Frame::Answer(pb::AnswerPermissionFrame {
                        request_id: pending_request.clone().unwrap_or_default(),
                        decision: d as i32,
                        feedback: String::new(),
                        scope: 0,
                        ..Default::default()
                    })
                }
                _ => {
                    shared.stopped(label);
                    shared.state().cancels += 1;
                    Frame::Cancel(pb::CancelFrame {
                        ..Default::default()
                    })
                }
            };
            if tx
                .send(pb::AttachRequest { frame: Some(frame) })
                .await
                .is_err()
            {
                break;
            }
        }
    }
    // Dropped abruptly, or with our half closed first.
    if rng.random_bool(0.5) {
        drop(tx);
        let _ = tokio::time::timeout(Duration::from_millis(20), stream.message()).await;
    }
}

async fn read(shared: &Shared, c: &mut AgentServiceClient<Channel>, rng: &mut StdRng) {
    if rng.random_bool(0.3) {
        let r = c
            .list_conversations(pb::ListConversationsRequest {
                limit: rng.random_range(0..10),
                ..Default::default()
            })
            .await;
        if let Err(status) = r {
            shared.refused("ListConversations", &status);
        }
        return;
    }
    let Some((id, _)) = shared.pick(rng) else {
        return;
    };
    // A unique prefix names it too.
    let name = if rng.random_bool(0.3) {
        id[..id.len().min(rng.random_range(20..26))].to_string()
    } else {
        id.clone()
    };
    match c
        .get_conversation(pb::GetConversationRequest {
            conversation_id: name,
        })
        .await
    {
        Ok(r) => {
            let r = r.into_inner();
            if let Err(e) = gap_free(&id, &r.messages) {
                shared.violation(e);
            }
            let count = r.conversation.map_or(0, |c| c.message_count);
            if count != r.messages.len() as u64 {
                shared.violation(format!(
                    "conversation {id}: GetConversation counts {count} messages but holds {}",
                    r.messages.len()
                ));
            }
        }
        Err(status) => shared.refused("GetConversation", &status),
    }
}

async fn export_import(shared: &Shared, c: &mut AgentServiceClient<Channel>, rng: &mut StdRng) {
    let ids: Vec<String> = {
        let s = shared.state();
        let n = rng.random_range(1..=3);
        (0..n)
            .filter_map(|_| s.convs.choose(rng).map(|c| c.id.clone()))
            .collect()
    };
    let mut stream = match c
        .export_conversations(pb::ExportConversationsRequest {
            conversation_ids: ids,
        })
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => {
            shared.refused("ExportConversations", &status);
            return;
        }
    };
    let mut exported = Vec::new();
    loop {
        match stream.message().await {
            Ok(Some(e)) => {
                let id = e
                    .conversation
                    .as_ref()
                    .map(|c| c.id.clone())
                    .unwrap_or_default();
                if let Err(v) = gap_free(&id, &e.messages) {
                    shared.violation(format!("{v} (exported)"));
                }
                exported.push(e);
            }
            Ok(None) => break,
            Err(status) => {
                shared.refused("ExportConversations stream", &status);
                return;
            }
        }
    }
    if exported.is_empty() || rng.random_bool(0.5) {
        return;
    }
    let n = exported.len();
    match c.import_conversations(tokio_stream::iter(exported)).await {
        Ok(r) => {
            let r = r.into_inner();
            if r.imported != 0 || r.skipped_ids.len() != n {
                shared.violation(format!(
                    "importing {n} conversations that exist imported {} and skipped {:?}",
                    r.imported, r.skipped_ids
                ));
            }
        }
        Err(status) => shared.refused("ImportConversations", &status),
    }
}

async fn shells(shared: &Shared, c: &mut AgentServiceClient<Channel>, rng: &mut StdRng) {
    let Some((id, _)) = shared.pick(rng) else {
        return;
    };
    let list = match c
        .list_shells(pb::ListShellsRequest {
            conversation_id: id,
        })
        .await
    {
        Ok(r) => r.into_inner().shells,
        Err(status) => {
            shared.refused("ListShells", &status);
            return;
        }
    };
    let Some(shell) = list.choose(rng) else {
        return;
    };
    shared.state().shells += 1;
    if rng.random_bool(0.3) {
        if let Err(status) = c
            .kill_shell(pb::KillShellRequest {
                shell_id: shell.id.clone(),
            })
            .await
        {
            shared.refused("KillShell", &status);
        }
        return;
    }
    let follow = rng.random_bool(0.3);
    let r = c
        .read_shell_output(pb::ReadShellOutputRequest {
            shell_id: shell.id.clone(),
            offset: if rng.random_bool(0.8) {
                0
            } else {
                rng.random_range(0..1 << 20)
            },
            follow,
        })
        .await;
    let mut stream = match r {
        Ok(r) => r.into_inner(),
        Err(status) => {
            shared.refused("ReadShellOutput", &status);
            return;
        }
    };
    let until = tokio::time::Instant::now() + Duration::from_millis(300);
    while let Ok(Ok(Some(_))) = tokio::time::timeout_at(until, stream.message()).await {}
}

/// Requests naming conversations, requests and shells that do not exist.
async fn nowhere(shared: &Shared, c: &mut AgentServiceClient<Channel>, rng: &mut StdRng) {
    let id = format!("nope-{}", rng.random::<u32>());
    let r = match rng.random_range(0..5) {
        0 => c
            .send_message(pb::SendMessageRequest {
                conversation_id: id,
                text: "hello".into(),
                ..Default::default()
            })
            .await
            .map(|_| ()),
        1 => c
            .cancel_conversation(pb::CancelConversationRequest {
                conversation_id: id,
                ..Default::default()
            })
            .await
            .map(|_| ()),
        2 => c
            .answer_permission(pb::AnswerPermissionRequest {
                conversation_id: id,
                decision: pb::PermissionDecision::AllowOnce as i32,
                ..Default::default()
            })
            .await
            .map(|_| ()),
        3 => c
            .kill_shell(pb::KillShellRequest { shell_id: id })
            .await
            .map(|_| ()),
        _ => c
            .get_conversation(pb::GetConversationRequest {
                conversation_id: id,
            })
            .await
            .map(|_| ()),
    };
    match r {
        Ok(()) => shared.violation("a request naming nothing that exists succeeded".into()),
        Err(status) => shared.refused("a request naming nothing", &status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash::check::Block;

    #[test]
    fn background_results_are_not_owed_an_effect() {
        use pb::content_block::Block as B;
        let m = pb::Message {
            seq: 1,
            content: vec![pb::ContentBlock {
                block: Some(B::ToolResult(pb::ToolResultBlock {
                    images: Vec::new(),
                    tool_use_id: "a".into(),
                    content: "started background shell sh-1".into(),
                    is_error: false,
                })),
            }],
            ..Default::default()
        };
        let out = without_background(&[m]);
        assert!(matches!(
            check::blocks_of(&out[0])[0],
            Block::ToolResult { is_error: true, .. }
        ));
        assert!(gap_free("x", &out).is_ok());
        let mut two = out.clone();
        two.push(out[0].clone());
        assert!(gap_free("x", &two).is_err());
    }
}
