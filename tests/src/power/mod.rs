//! The power-cut test: the daemon's data directory on a layer that loses
//! every write not yet synced when the power goes ([`layer`]), cut at
//! random points of a workload, then checked against what `[store] sync`
//! promises (README, "Crash safety").
//!
//! [`run`] starts a [`FakeLlm`] with the crash test's responder (multi-tool
//! turns: `bash`, `write`, `read`, `think`) and a daemon with
//! `[store] sync` set and the shim preloaded. Then, `cuts` times:
//!
//! 1. start `conversations` turns at once: prompts to existing
//!    conversations and new conversations (created with a prompt, or
//!    created and then sent one); every acknowledgement (a `SendMessage`
//!    answer with its sequence number, a `CreateConversation` answer) is
//!    noted;
//! 2. wait a random time, SIGKILL the daemon and undo every write the
//!    layer logged that no `fsync`/`fdatasync` covered (the power cut);
//! 3. restart the daemon on what is left (sometimes cutting the power
//!    again during its recovery, which replays the journal into sled,
//!    makes sled durable and removes the journal files), wait until every
//!    conversation is at rest;
//! 4. check. Always: a conversation appears only if its creation was
//!    asked for; each transcript is valid (sequence numbers gap-free from
//!    1, a valid chain, every turn ended), no conversation in Error or
//!    stuck. With `sync = "power"`: the store opened as it was (no
//!    quarantine), every conversation whose creation was acknowledged
//!    exists, every acknowledged prompt is present at its sequence
//!    number, every message seen at rest after the previous restart is
//!    present unchanged, every message an attached client was shown is
//!    present unchanged and no event number reached a client twice (the
//!    crash test's observers and ledger), every model request is a prefix
//!    of the stored transcript, and the tools' effects match (no `bash`
//!    call ran twice).
//!    With `sync = "kill"`: what README allows — the store comes back
//!    consistent, only older (or, had it not opened, quarantined, which
//!    is counted): losses are the last messages of a conversation, never a
//!    hole (an acknowledged prompt that survived has everything before it),
//!    and they are counted.
//!
//! After each check the messages at rest become the expectation for the
//! next cut.

pub mod layer;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use futures::FutureExt as _;
use nix::sys::signal::{self, Signal};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::crash::check::{self, RequestKey};
use crate::crash::ledger::{self, Ledger};
use crate::crash::responder::{self, Tag};
use crate::crash::{copy_dir, lock, panic_text, unexplained};
use crate::fake_llm::FakeLlm;
use crate::harness::{DaemonOptions, TestDaemon, connect_uds};

/// Rules that let every mutating tool run without a permission prompt.
const ALLOW_RULES: [&str; 4] = ["bash", "write", "edit", "patch"];

/// `[store] sync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// `fdatasync` of the journal at every flush.
    Power,
    /// The journal is written, not synced.
    Kill,
}

impl SyncMode {
    pub fn name(self) -> &'static str {
        match self {
            SyncMode::Power => "power",
            SyncMode::Kill => "kill",
        }
    }
}

/// How a power-cut run goes.
#[derive(Debug, Clone)]
pub struct PowerOptions {
    /// Power cuts to make.
    pub cuts: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// The daemon's `[store] sync`.
    pub sync: SyncMode,
    /// Turns started before each cut.
    pub conversations: usize,
    /// Tool rounds per turn are drawn from 1 to this.
    pub max_rounds: u32,
    /// Shortest wait between starting the turns and the cut.
    pub min_delay: Duration,
    /// Longest wait between starting the turns and the cut.
    pub max_delay: Duration,
    /// Chance that the restarted daemon loses the power again within
    /// 300 ms, during its recovery.
    pub double_cut: f64,
    /// No new cut is started after this long (the run then ends with the
    /// cuts made, and says so).
    pub budget: Option<Duration>,
    /// How long the daemon is left idle after each check, before the next
    /// turns start. `None`: a second with `sync = "kill"`, so sled's own
    /// timed flush (every 500 ms, with an `fsync`) makes the state the
    /// checks saw durable and each cut can lose only its own turns (with no
    /// rest, a cut in the first half second loses everything since the
    /// previous one, and the workload never grows); none with `"power"`.
    pub rest: Option<Duration>,
    /// How long conversations get to come to rest after a restart.
    pub settle_timeout: Duration,
    /// Print a line per cut.
    pub progress: bool,
    /// Where to copy the daemon's directory when a check fails; the
    /// system temporary directory when `None`.
    pub keep_dir: Option<PathBuf>,
}

impl Default for PowerOptions {
    fn default() -> Self {
        PowerOptions {
            cuts: 20,
            seed: 0,
            sync: SyncMode::Power,
            conversations: 3,
            max_rounds: 4,
            min_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(1500),
            double_cut: 0.25,
            budget: None,
            rest: None,
            settle_timeout: Duration::from_secs(60),
            progress: true,
            keep_dir: None,
        }
    }
}

/// What a passing run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub seed: u64,
    pub sync: Option<SyncMode>,
    /// Power cuts made.
    pub cuts: usize,
    /// Of which during a recovery.
    pub recovery_cuts: usize,
    /// Whether the time budget ended the run before `cuts`.
    pub budget_reached: bool,
    pub elapsed: Duration,
    /// Turns started (prompts sent).
    pub turns_started: usize,
    /// Prompts acknowledged to a client before a cut.
    pub prompts_acked: usize,
    /// Conversations whose creation was acknowledged before a cut.
    pub creations_acked: usize,
    /// Expected messages (acknowledged prompts and messages seen at rest)
    /// checked after the cuts, summed over the cuts.
    pub checked: usize,
    /// Of which gone after the cut (only `sync = "kill"` may lose any).
    pub lost: usize,
    /// Acknowledged prompts among them.
    pub lost_prompts: usize,
    /// Cuts that lost something.
    pub lossy_cuts: usize,
    /// Conversations whose creation was acknowledged and that a cut lost.
    pub lost_conversations: usize,
    /// Restarts that found the store unreadable and moved it aside.
    pub quarantines: usize,
    /// Writes the layer logged / undid, over all cuts.
    pub writes: usize,
    pub undone: usize,
    /// Model requests checked against the stored transcripts.
    pub requests: usize,
    /// Frames the attached observers received (`sync = "power"`).
    pub frames: u64,
    /// Conversations at the end.
    pub conversations: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "power-cut: {} cuts{}, sync = {:?}, seed {}, all checks passed in {:.1} s",
            self.cuts,
            if self.budget_reached {
                " (time budget reached)"
            } else {
                ""
            },
            self.sync.map_or("?", SyncMode::name),
            self.seed,
            self.elapsed.as_secs_f64()
        )
    }
}

impl Summary {
    /// The counters, one line.
    pub fn details(&self) -> String {
        format!(
            "{} cuts ({} during recovery); {} turns started, {} prompts and {} creations acknowledged; \
             {} conversations; {} expected messages checked after the cuts, {} lost \
             ({} acknowledged prompts, {} acknowledged conversations) in {} cuts; \
             {} quarantined stores; layer: {} writes logged, {} undone; {} model requests checked; \
             {} attach frames",
            self.cuts,
            self.recovery_cuts,
            self.turns_started,
            self.prompts_acked,
            self.creations_acked,
            self.conversations,
            self.checked,
            self.lost,
            self.lost_prompts,
            self.lost_conversations,
            self.lossy_cuts,
            self.quarantines,
            self.writes,
            self.undone,
            self.requests,
            self.frames
        )
    }
}

/// What a check expects at a sequence number.
#[derive(Debug, Clone)]
enum Expect {
    /// An acknowledged prompt: a user message with this text.
    Prompt(String),
    /// A message seen at rest after the previous restart.
    Message(pb::Message),
}

impl Expect {
    fn holds(&self, m: &pb::Message) -> bool {
        match self {
            Expect::Prompt(text) => {
                m.role == pb::Role::User as i32
                    && check::blocks_of(m)
                        .iter()
                        .any(|b| matches!(b, check::Block::Text(t) if t == text))
            }
            Expect::Message(want) => m == want,
        }
    }
}

#[derive(Debug)]
struct Conv {
    id: String,
    label: u64,
    turns: u64,
    /// Whether its creation was acknowledged.
    acked: bool,
    expect: BTreeMap<u64, Expect>,
}

#[derive(Debug)]
enum Kind {
    Send { conv: usize },
    Create { cwd: PathBuf, with_prompt: bool },
}

#[derive(Debug, Default)]
struct Outcome {
    created: Option<String>,
    /// The acknowledged prompt's sequence number.
    acked: Option<u64>,
    violation: Option<String>,
}

struct Run {
    opts: PowerOptions,
    rng: StdRng,
    fake: FakeLlm,
    daemon: TestDaemon,
    log: PathBuf,
    client: Option<AgentServiceClient<Channel>>,
    convs: Vec<Conv>,
    next_label: u64,
    /// Labels of conversations whose creation was not acknowledged: they
    /// may appear (with their prompt, or without one) or not.
    unacked: HashSet<u64>,
    requests_checked: usize,
    quarantined: usize,
    /// What clients were shown (attached observers, `sync = "power"`).
    ledger: Arc<Ledger>,
    observers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    summary: Summary,
}

/// Runs the power-cut test. `Err` describes the first violation (and where
/// the daemon's directory was kept).
pub async fn run(opts: PowerOptions) -> Result<Summary, String> {
    let started = Instant::now();
    let fake = FakeLlm::start().await;
    fake.set_responder(Some(responder::responder(opts.seed, 0.0)));
    let daemon_opts = DaemonOptions {
        extra_config: format!("\n[store]\nsync = \"{}\"\n", opts.sync.name()),
        // The daemon runs in <dir>/work: the data directory is <dir>/data,
        // the undo log goes beside it.
        env: layer::env(Path::new("../data"), Path::new("../powercut.log")),
        ..DaemonOptions::default()
    };
    let daemon = AssertUnwindSafe(TestDaemon::start_with(&fake, daemon_opts))
        .catch_unwind()
        .await
        .map_err(|p| format!("the daemon did not start: {}", panic_text(&p)))?;
    let log = daemon.dir.path().join("powercut.log");
    let mut run = Run {
        rng: StdRng::seed_from_u64(opts.seed),
        opts,
        fake,
        daemon,
        log,
        client: None,
        convs: Vec::new(),
        next_label: 1,
        unacked: HashSet::new(),
        requests_checked: 0,
        quarantined: 0,
        ledger: Arc::new(Ledger::default()),
        observers: Arc::default(),
        summary: Summary::default(),
    };
    run.summary.seed = run.opts.seed;
    run.summary.sync = Some(run.opts.sync);
    match run.all(started).await {
        Ok(()) => {
            run.summary.elapsed = started.elapsed();
            run.summary.conversations = run.convs.len();
            run.summary.frames = run.ledger.frames();
            Ok(run.summary)
        }
        Err(e) => Err(format!(
            "power-cut FAILED (sync = {}, seed {}, at cut {}): {e}\n{}",
            run.opts.sync.name(),
            run.opts.seed,
            run.summary.cuts,
            run.keep()
        )),
    }
}

impl Run {
    async fn all(&mut self, started: Instant) -> Result<(), String> {
        self.connect().await?;
        while self.summary.cuts < self.opts.cuts {
            if self.opts.budget.is_some_and(|b| started.elapsed() >= b) {
                self.summary.budget_reached = true;
                break;
            }
            self.round().await?;
        }
        Ok(())
    }

    async fn connect(&mut self) -> Result<(), String> {
        let channel = connect_uds(&self.daemon.socket)
            .await
            .map_err(|e| format!("cannot connect to the daemon: {e}"))?;
        self.client = Some(AgentServiceClient::new(channel));
        Ok(())
    }

    fn client(&self) -> Result<AgentServiceClient<Channel>, String> {
        self.client
            .clone()
            .ok_or_else(|| "no connection to the daemon".to_string())
    }

    /// One cut and the checks after it.
    async fn round(&mut self) -> Result<(), String> {
        let n = self.summary.cuts + 1;
        let actions = self.plan();
        let started = actions.len();
        let mut tasks = Vec::with_capacity(actions.len());
        for (kind, tag) in actions {
            tasks.push(self.start(kind, tag)?);
        }
        let delay = self
            .rng
            .random_range(self.opts.min_delay..=self.opts.max_delay.max(self.opts.min_delay));
        tokio::time::sleep(delay).await;
        let cut = self.cut()?;
        let mut acked = 0;
        for (kind, tag, task) in tasks {
            let outcome = task
                .await
                .map_err(|e| format!("a client task failed: {e}"))?;
            if let Some(v) = outcome.violation {
                return Err(v);
            }
            acked += usize::from(outcome.acked.is_some());
            self.record(kind, tag, outcome);
        }
        self.stop_observers().await;
        self.restart().await?;
        let mut again = String::new();
        if self.summary.cuts < self.opts.cuts && self.rng.random_bool(self.opts.double_cut) {
            let delay = self.rng.random_range(0..=300);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let second = self.cut()?;
            self.summary.recovery_cuts += 1;
            again = format!(
                ", again {delay} ms into recovery ({} writes logged, {} undone in {})",
                second.writes,
                second.undone,
                names(&second.files, &self.daemon.data_dir)
            );
            self.restart().await?;
        }
        let quarantined = self.quarantine()?;
        let settle = Instant::now();
        self.adopt().await?;
        self.settle().await?;
        let settled = settle.elapsed();
        let (checked, lost) = self.check(quarantined).await?;
        self.start_observers()?;
        let rest = self.opts.rest.unwrap_or(match self.opts.sync {
            SyncMode::Kill => Duration::from_secs(1),
            SyncMode::Power => Duration::ZERO,
        });
        tokio::time::sleep(rest).await;
        if self.opts.progress {
            println!(
                "cut {n}/{}: {started} turns started ({acked} prompts acknowledged), power cut after {} ms: \
                 {} writes logged, {} undone in {} ({} bytes cut off){again}; at rest {:.2} s after restart; \
                 {} conversations, {checked} expected messages checked, {lost} lost{}",
                self.opts.cuts,
                delay.as_millis(),
                cut.writes,
                cut.undone,
                names(&cut.files, &self.daemon.data_dir),
                cut.truncated,
                settled.as_secs_f64(),
                self.convs.len(),
                if quarantined {
                    "; the store was quarantined"
                } else {
                    ""
                }
            );
        }
        Ok(())
    }

    /// New turns in existing conversations, and new conversations.
    fn plan(&mut self) -> Vec<(Kind, Tag)> {
        let mut candidates: Vec<usize> = (0..self.convs.len()).collect();
        let mut actions = Vec::new();
        for _ in 0..self.opts.conversations.max(1) {
            let rounds = self.rng.random_range(1..=self.opts.max_rounds.max(1));
            if !candidates.is_empty() && self.rng.random_bool(0.65) {
                let i = candidates.swap_remove(self.rng.random_range(0..candidates.len()));
                let conv = &mut self.convs[i];
                conv.turns += 1;
                let tag = Tag {
                    conv: conv.label,
                    turn: conv.turns,
                    rounds,
                    spawn: 0,
                    git: false,
                };
                actions.push((Kind::Send { conv: i }, tag));
            } else {
                let label = self.next_label;
                self.next_label += 1;
                let cwd = self.daemon.work_dir.join(format!("c{label}"));
                let tag = Tag {
                    conv: label,
                    turn: 1,
                    rounds,
                    spawn: 0,
                    git: false,
                };
                let with_prompt = self.rng.random_bool(0.5);
                actions.push((Kind::Create { cwd, with_prompt }, tag));
            }
        }
        self.summary.turns_started += actions.len();
        actions
    }

    /// The power goes: the daemon and every process it started stop at
    /// once, and the disk keeps only what was synced.
    fn cut(&mut self) -> Result<layer::Cut, String> {
        // Frozen first, so no process of the tree starts another while the
        // tree is read; then all killed. (Killing only the daemon would let
        // a command it was starting outlive the "power" holding the data
        // directory's lock, whose file no longer names a writer: the
        // daemon refuses to start, which no real power cut can cause.)
        let root = nix::unistd::Pid::from_raw(self.daemon.pid() as i32);
        let _ = signal::kill(root, Signal::SIGSTOP);
        let mut tree = Vec::new();
        for _ in 0..3 {
            for pid in descendants(root) {
                if !tree.contains(&pid) {
                    let _ = signal::kill(pid, Signal::SIGSTOP);
                    tree.push(pid);
                }
            }
        }
        for pid in tree {
            let _ = signal::kill(pid, Signal::SIGKILL);
        }
        self.daemon.kill9();
        self.client = None;
        let cut = layer::cut(&self.log)?;
        self.summary.cuts += 1;
        self.summary.writes += cut.writes;
        self.summary.undone += cut.undone;
        Ok(cut)
    }

    async fn restart(&mut self) -> Result<(), String> {
        AssertUnwindSafe(self.daemon.restart())
            .catch_unwind()
            .await
            .map_err(|p| format!("the daemon did not restart: {}", panic_text(&p)))?;
        self.connect().await
    }

    /// Attaches an observer to every conversation (with `sync = "power"`,
    /// where everything a client is shown must survive).
    fn start_observers(&mut self) -> Result<(), String> {
        if self.opts.sync != SyncMode::Power {
            return Ok(());
        }
        let client = self.client()?;
        let mut observers = lock(&self.observers);
        for conv in &self.convs {
            observers.push(tokio::spawn(ledger::observe(
                client.clone(),
                conv.id.clone(),
                self.ledger.clone(),
            )));
        }
        Ok(())
    }

    /// The observers end when the daemon dies; give them a moment to read
    /// what was already sent, then stop them regardless.
    async fn stop_observers(&mut self) {
        let observers: Vec<_> = lock(&self.observers).drain(..).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        for handle in observers {
            let abort = handle.abort_handle();
            if tokio::time::timeout_at(deadline, handle).await.is_err() {
                abort.abort();
            }
        }
    }

    fn start(&mut self, kind: Kind, tag: Tag) -> Result<(Kind, Tag, JoinHandle<Outcome>), String> {
        let mut client = self.client()?;
        let text = tag.prompt();
        let observe = (self.opts.sync == SyncMode::Power)
            .then(|| (self.ledger.clone(), self.observers.clone()));
        let task = match &kind {
            Kind::Send { conv } => {
                let id = self.convs[*conv].id.clone();
                tokio::spawn(async move {
                    let mut outcome = Outcome::default();
                    send(&mut client, &id, &text, &mut outcome).await;
                    outcome
                })
            }
            Kind::Create { cwd, with_prompt } => {
                std::fs::create_dir_all(cwd)
                    .map_err(|e| format!("cannot create {}: {e}", cwd.display()))?;
                let cwd = cwd.clone();
                let with_prompt = *with_prompt;
                tokio::spawn(async move {
                    let mut outcome = Outcome::default();
                    let request = pb::CreateConversationRequest {
                        cwd: cwd.display().to_string(),
                        prompt: if with_prompt {
                            text.clone()
                        } else {
                            String::new()
                        },
                        allow_rules: ALLOW_RULES.iter().map(|r| r.to_string()).collect(),
                        mode: pb::PermissionMode::Default as i32,
                        ..Default::default()
                    };
                    let id = match client.create_conversation(request).await {
                        Ok(r) => r.into_inner().conversation.map(|c| c.id),
                        Err(status) => {
                            outcome.violation = unexplained(&status, "CreateConversation");
                            return outcome;
                        }
                    };
                    let Some(id) = id else {
                        outcome.violation =
                            Some("CreateConversation answered without a conversation".into());
                        return outcome;
                    };
                    outcome.created = Some(id.clone());
                    if let Some((ledger, observers)) = observe {
                        let observer =
                            tokio::spawn(ledger::observe(client.clone(), id.clone(), ledger));
                        lock(&observers).push(observer);
                    }
                    if with_prompt {
                        outcome.acked = Some(1);
                    } else {
                        send(&mut client, &id, &text, &mut outcome).await;
                    }
                    outcome
                })
            }
        };
        Ok((kind, tag, task))
    }

    /// Takes note of what was acknowledged.
    fn record(&mut self, kind: Kind, tag: Tag, outcome: Outcome) {
        let conv = match kind {
            Kind::Send { conv } => conv,
            Kind::Create { .. } => {
                let Some(id) = outcome.created else {
                    self.unacked.insert(tag.conv);
                    return;
                };
                self.summary.creations_acked += 1;
                self.convs.push(Conv {
                    id,
                    label: tag.conv,
                    turns: 1,
                    acked: true,
                    expect: BTreeMap::new(),
                });
                self.convs.len() - 1
            }
        };
        if let Some(seq) = outcome.acked {
            self.summary.prompts_acked += 1;
            self.convs[conv]
                .expect
                .insert(seq, Expect::Prompt(tag.prompt()));
        }
    }

    /// Whether this restart moved an unreadable store aside.
    fn quarantine(&mut self) -> Result<bool, String> {
        let dir = &self.daemon.data_dir;
        let aside = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("db.unreadable-")
            })
            .count();
        let new = aside > self.quarantined;
        self.quarantined = aside;
        if new {
            self.summary.quarantines += 1;
            if self.opts.sync == SyncMode::Power {
                return Err(format!(
                    "the store could not be opened after the cut and was moved aside. Log:\n{}",
                    tail(&self.daemon.log(), 40)
                ));
            }
        }
        Ok(new)
    }

    /// Conversations in the store that the run did not know: created, but
    /// the answer was lost to the cut.
    async fn adopt(&mut self) -> Result<(), String> {
        let mut client = self.client()?;
        let all = list(&mut client).await?;
        for c in all {
            if self.convs.iter().any(|k| k.id == c.id) {
                continue;
            }
            let label = Path::new(&c.cwd)
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix('c'))
                .and_then(|n| n.parse::<u64>().ok());
            let Some(label) = label.filter(|l| self.unacked.remove(l)) else {
                return Err(format!(
                    "conversation {} (in {}) appeared, but no creation of it is pending",
                    c.id, c.cwd
                ));
            };
            self.convs.push(Conv {
                id: c.id,
                label,
                turns: 1,
                acked: false,
                expect: BTreeMap::new(),
            });
        }
        // Creations still pending were lost for good.
        self.unacked.clear();
        Ok(())
    }

    /// Waits until every conversation is at rest.
    async fn settle(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + self.opts.settle_timeout;
        let mut client = self.client()?;
        loop {
            let mut busy = Vec::new();
            for c in list(&mut client).await? {
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
                    kind => busy.push(format!("{} in {kind:?}", c.id)),
                }
            }
            if busy.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "stuck: {} conversation(s) not at rest {:?} after the restart: {}",
                    busy.len(),
                    self.opts.settle_timeout,
                    busy.join("; ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Checks every conversation against what was expected of it; returns
    /// how many expected messages were checked and how many were lost.
    async fn check(&mut self, quarantined: bool) -> Result<(usize, usize), String> {
        let power = self.opts.sync == SyncMode::Power;
        if let Some(v) = self.ledger.violation() {
            return Err(v);
        }
        let mut client = self.client()?;
        let (mut checked, mut lost, mut lost_prompts) = (0, 0, 0);
        let mut transcripts: HashMap<u64, (String, Vec<pb::Message>)> = HashMap::new();
        let mut gone = Vec::new();
        for (i, conv) in self.convs.iter().enumerate() {
            let id = &conv.id;
            let r = match client
                .get_conversation(pb::GetConversationRequest {
                    conversation_id: id.clone(),
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(status) if status.code() == tonic::Code::NotFound => {
                    if power && conv.acked {
                        return Err(format!(
                            "conversation {id} (label {}) was created and acknowledged, but is gone after the cut",
                            conv.label
                        ));
                    }
                    checked += conv.expect.len();
                    lost += conv.expect.len();
                    lost_prompts += conv
                        .expect
                        .values()
                        .filter(|e| matches!(e, Expect::Prompt(_)))
                        .count();
                    self.summary.lost_conversations += usize::from(conv.acked);
                    gone.push(i);
                    continue;
                }
                Err(status) => return Err(format!("GetConversation {id} failed: {status}")),
            };
            let summary = r.conversation.unwrap_or_default();
            let messages = r.messages;
            check::transcript(id, &summary, &messages, &HashSet::new())?;
            let present = |seq: u64, e: &Expect| {
                usize::try_from(seq)
                    .ok()
                    .and_then(|s| s.checked_sub(1))
                    .and_then(|s| messages.get(s))
                    .is_some_and(|m| e.holds(m))
            };
            let mut first_missing: Option<u64> = None;
            for (&seq, e) in &conv.expect {
                checked += 1;
                let prompt = matches!(e, Expect::Prompt(_));
                if present(seq, e) {
                    if let (Some(missing), true) = (first_missing, prompt) {
                        return Err(format!(
                            "conversation {id}: acknowledged prompt {seq} survived the cut, but message {missing} before it is gone or changed: \
                             not the older state README promises but a hole"
                        ));
                    }
                    continue;
                }
                if power {
                    let stored = usize::try_from(seq)
                        .ok()
                        .and_then(|s| s.checked_sub(1))
                        .and_then(|s| messages.get(s));
                    return Err(format!(
                        "conversation {id}: {} {seq} is gone or changed after the power cut with sync = \"power\" \
                         (the store holds {} messages)\n  expected: {e:?}\n  stored:   {:?}",
                        if prompt {
                            "acknowledged prompt"
                        } else {
                            "message seen at rest"
                        },
                        messages.len(),
                        stored.map(check::blocks_of)
                    ));
                }
                first_missing.get_or_insert(seq);
                lost += 1;
                lost_prompts += usize::from(prompt);
            }
            if power {
                let cwd = self.daemon.work_dir.join(format!("c{}", conv.label));
                check::effects(id, &cwd, &messages)?;
                self.ledger.check(id, &messages)?;
            }
            transcripts.insert(conv.label, (id.clone(), messages));
        }
        for i in gone.into_iter().rev() {
            self.convs.remove(i);
        }
        if quarantined && lost == 0 && checked > 0 {
            return Err("the store was quarantined, yet nothing was lost".into());
        }
        // What the model saw was durable (with sync = "power").
        let requests = self.fake.requests();
        if power {
            for (n, req) in requests.iter().enumerate().skip(self.requests_checked) {
                let n = n + 1;
                let Some(RequestKey::Conv(label)) = check::request_key(&req.body) else {
                    return Err(format!("request #{n} has no tagged first message"));
                };
                let Some((id, stored)) = transcripts.get(&label) else {
                    return Err(format!(
                        "request #{n} belongs to conversation label {label}, which is gone after the cut"
                    ));
                };
                check::request(n, &req.body, stored, id)?;
            }
            self.summary.requests += requests.len() - self.requests_checked.min(requests.len());
        }
        self.requests_checked = requests.len();
        // What is at rest now is what the next cut must keep.
        for conv in &mut self.convs {
            if let Some((_, messages)) = transcripts.get(&conv.label) {
                conv.expect = messages
                    .iter()
                    .map(|m| (m.seq, Expect::Message(m.clone())))
                    .collect();
            }
        }
        self.summary.checked += checked;
        self.summary.lost += lost;
        self.summary.lost_prompts += lost_prompts;
        self.summary.lossy_cuts += usize::from(lost > 0);
        Ok((checked, lost))
    }

    /// Copies the daemon's directory somewhere that outlives the run.
    fn keep(&self) -> String {
        let base = self
            .opts
            .keep_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let dest = base.join(format!(
            "agentd-power-{}-seed{}-{stamp}",
            self.opts.sync.name(),
            self.opts.seed
        ));
        match copy_dir(self.daemon.dir.path(), &dest) {
            Ok(()) => format!(
                "the daemon's directory (data/, daemon.log, work/) was kept at {}",
                dest.display()
            ),
            Err(e) => format!(
                "could not keep the daemon's directory at {}: {e}",
                dest.display()
            ),
        }
    }
}

/// The processes below `root` (children, theirs, …), from `/proc`.
fn descendants(root: nix::unistd::Pid) -> Vec<nix::unistd::Pid> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if let Some(ppid) = ppid {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root.as_raw()];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for &(pid, ppid) in &parent_of {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
            }
        }
        i += 1;
    }
    found[1..]
        .iter()
        .map(|&p| nix::unistd::Pid::from_raw(p))
        .collect()
}

async fn list(
    client: &mut AgentServiceClient<Channel>,
) -> Result<Vec<pb::ConversationSummary>, String> {
    Ok(client
        .list_conversations(pb::ListConversationsRequest::default())
        .await
        .map_err(|e| format!("ListConversations failed: {e}"))?
        .into_inner()
        .conversations)
}

async fn send(
    client: &mut AgentServiceClient<Channel>,
    id: &str,
    text: &str,
    outcome: &mut Outcome,
) {
    let request = pb::SendMessageRequest {
        conversation_id: id.to_string(),
        text: text.to_string(),
        ..Default::default()
    };
    match client.send_message(request).await {
        Ok(r) => outcome.acked = Some(r.into_inner().message_seq),
        Err(status) => outcome.violation = unexplained(&status, "SendMessage"),
    }
}

/// File names under `dir`, for a progress line.
fn names(files: &std::collections::BTreeSet<PathBuf>, dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let names: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(&dir).unwrap_or(f).display().to_string())
        .collect();
    if names.is_empty() {
        "no file".to_string()
    } else {
        names.join(", ")
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
