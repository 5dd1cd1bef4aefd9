//! The crash test: SIGKILL a busy daemon again and again and check, after
//! every restart, that nothing acknowledged was lost and nothing is broken.
//!
//! [`run`] starts a [`FakeLlm`] whose [responder](responder) scripts long
//! multi-tool turns, and a daemon. Then, until `kills` SIGKILLs are done:
//!
//! 1. start `conversations` turns at once: new turns in existing
//!    conversations (`SendMessage`) and new conversations (created with a
//!    prompt, or created and then sent one), with attached observers
//!    recording every message they are shown; some turns are cancelled at a
//!    random moment, and some model rounds fail once (529 or a mid-stream
//!    error) so retries are in flight too; some turns spawn two or three
//!    sub-agents (`spawn_agents`), which run tool rounds of their own and
//!    end with `submit_result` (a success or a failure) or without it (they
//!    are reminded once, then their last text counts), at most
//!    `sub_agents_max_concurrent` of a call at once; a cancel then goes to
//!    the parent (every child is cancelled) or to one running child; and
//!    (unless `git` is off) a turn of the git conversation, which works in
//!    a git repository ([`repo`]) whose files its `bash` calls change —
//!    tracked ones appended to, overwritten, deleted and renamed, untracked
//!    ones created — with a sleep between their changes, so that kills land
//!    between a call's checkpoint and its end;
//! 2. wait a random time and SIGKILL the daemon (sometimes again, during
//!    its recovery);
//! 3. restart it, and wait until every conversation in the store is at rest;
//! 4. check: the store opened; every acknowledged message is present and
//!    unchanged; message sequence numbers are gap-free from 1; the chain is
//!    valid (roles alternate, every tool_use answered by exactly one
//!    tool_result in the next message); every turn ended (or left what its
//!    cancel leaves), none stuck or in Error; a conversation created with a
//!    prompt holds it; attached clients never saw an event number twice;
//!    every request the fake LLM received has a valid chain and is a prefix
//!    of the stored transcript (what the model saw was durable); no bash
//!    call ran twice, and every tool recorded as a success left its effect;
//!    and for sub-agents: every `spawn_agents` call answered exactly once,
//!    by each child's result once, in order, as the child's transcript
//!    ends (or by a cancel's text), no child orphaned (each names a spawn
//!    call of an existing parent, holds the task it asked for and has
//!    ended), every child's transcript valid, and each child's usage
//!    counted once in its parent's; and for the git conversation, once
//!    the commands a kill left running have ended: a rewind of its code to
//!    its first message succeeds (nothing is "changed by someone else")
//!    and puts the repository back as it was made, byte for byte, with
//!    every file its commands created removed and the index, HEAD, refs
//!    and stash untouched (its next turn then starts from there).
//!
//! Every random choice comes from the seed; the moment a SIGKILL lands
//! depends on timing too, so a seed reproduces the plan, not the exact
//! interleaving.

pub mod check;
mod deletes;
pub mod ledger;
pub mod repo;
pub mod responder;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use futures::FutureExt as _;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::fake_llm::FakeLlm;
use crate::harness::{DaemonOptions, TestDaemon, connect_uds};
use check::RequestKey;
use ledger::Ledger;
use responder::Tag;

/// Rules that let every mutating tool run without a permission prompt.
const ALLOW_RULES: [&str; 4] = ["bash", "write", "edit", "patch"];

/// How a crash run goes.
#[derive(Debug, Clone)]
pub struct CrashOptions {
    /// SIGKILLs to deliver.
    pub kills: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// Turns started before each kill.
    pub conversations: usize,
    /// Tool rounds per turn are drawn from 2 to this.
    pub max_rounds: u32,
    /// Shortest wait between starting the turns and the kill (one kill in
    /// ten comes sooner, to land among the requests that start turns).
    pub min_delay: Duration,
    /// Longest wait between starting the turns and the kill.
    pub max_delay: Duration,
    /// Chance that a restarted daemon is killed again during recovery.
    pub double_kill: f64,
    /// Chance that a turn is cancelled at a random moment (before or after
    /// the kill).
    pub cancels: f64,
    /// Share of model rounds whose first attempt fails (a 529, or an error
    /// in the middle of the stream), so the daemon retries.
    pub faults: f64,
    /// Share of turns that spawn sub-agents (two or three).
    pub spawns: f64,
    /// `[sub_agents] max_concurrent` of the daemon (below three, so some
    /// children wait for a slot).
    pub sub_agents_max_concurrent: usize,
    /// Whether one conversation works in a git repository, has a turn in
    /// every round and is rewound to its first message after every
    /// restart (see [`repo`]).
    pub git: bool,
    /// How long conversations get to come to rest after a restart.
    pub settle_timeout: Duration,
    /// Chance that a round deletes one conversation (see `deletes`).
    pub deletes: f64,
    /// Print a line per kill.
    pub progress: bool,
    /// Count, instead of failing on, a conversation created with a prompt
    /// whose creation was not acknowledged and which holds no message: a
    /// known daemon bug (`CreateConversation` persists the conversation,
    /// then sends the prompt, so a kill in between leaves it empty).
    pub tolerate_non_atomic_create: bool,
    /// Where to copy the daemon's directory (data, log, work) when a check
    /// fails; the system temporary directory when `None`.
    pub keep_dir: Option<PathBuf>,
    /// Daemon options (e.g. another binary).
    pub daemon: DaemonOptions,
}

impl Default for CrashOptions {
    fn default() -> Self {
        CrashOptions {
            kills: 20,
            seed: 0,
            conversations: 4,
            max_rounds: 6,
            min_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(400),
            double_kill: 0.2,
            cancels: 0.1,
            faults: 0.05,
            spawns: 0.3,
            sub_agents_max_concurrent: 2,
            git: true,
            settle_timeout: Duration::from_secs(60),
            deletes: 0.3,
            progress: true,
            tolerate_non_atomic_create: false,
            keep_dir: None,
            daemon: DaemonOptions::default(),
        }
    }
}

/// A seed from the clock, for runs that should differ (and print it).
pub fn seed_from_clock() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    responder::mix(&[nanos as u64, u64::from(std::process::id())]) % 1_000_000_000
}

/// What a passing run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// SIGKILLs delivered.
    pub kills: usize,
    /// Of which during a recovery.
    pub recovery_kills: usize,
    pub seed: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Conversations in the store at the end.
    pub conversations: usize,
    /// Turns started (prompts sent).
    pub turns_started: usize,
    /// Turns whose prompt was acknowledged before the kill.
    pub turns_acknowledged: usize,
    /// Messages in the store at the end, all checked.
    pub messages: usize,
    /// Acknowledged messages checked at the end.
    pub acknowledged: usize,
    /// Model requests received and checked.
    pub requests: usize,
    /// Requests that repeated an earlier one (re-issued after a kill, or
    /// retried after a fault).
    pub reissued: usize,
    /// Cancels delivered.
    pub cancels: usize,
    /// Replies the daemon stopped reading (streams cut by a kill).
    pub cut_streams: usize,
    /// Tool results "agentd restarted while this tool was running…".
    pub restarted_tools: usize,
    /// Tool results "Skipped: agentd restarted before this tool ran".
    pub skipped_tools: usize,
    /// Frames the attached observers received.
    pub frames: u64,
    /// Sub-agents in the store at the end, all checked.
    pub sub_agents: usize,
    /// `spawn_agents` calls answered with their children's results.
    pub spawns_answered: usize,
    /// Cancels sent to one running sub-agent.
    pub child_cancels: usize,
    /// Conversations created with a prompt that hold no message (counted
    /// when tolerated, see [`CrashOptions::tolerate_non_atomic_create`]).
    pub empty_creations: usize,
    /// Rewinds of the git conversation checked.
    pub git_rewinds: usize,
    /// Files those rewinds put back or removed.
    pub git_files: usize,
    /// Calls of the git conversation that were running when the daemon
    /// was killed.
    pub git_interrupted: usize,
    /// Deletes asked for, and acknowledged.
    pub deletes: usize,
    pub deletes_acknowledged: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "crash-test: {} kills, seed {}, all checks passed in {:.1} s",
            self.kills,
            self.seed,
            self.elapsed.as_secs_f64()
        )
    }
}

impl Summary {
    /// The counters, one line.
    pub fn details(&self) -> String {
        format!(
            "{} kills ({} during recovery); {} conversations, {} turns started ({} acknowledged), \
             {} cancelled, {} sub-agents ({} spawn calls answered, {} sub-agents cancelled alone), \
             {} messages ({} acknowledged to clients), \
             {} model requests ({} repeated, {} streams cut), \
             {} tools interrupted, {} skipped, {} attach frames, \
             {} deletes ({} acknowledged){}{}",
            self.kills,
            self.recovery_kills,
            self.conversations,
            self.turns_started,
            self.turns_acknowledged,
            self.cancels,
            self.sub_agents,
            self.spawns_answered,
            self.child_cancels,
            self.messages,
            self.acknowledged,
            self.requests,
            self.reissued,
            self.cut_streams,
            self.restarted_tools,
            self.skipped_tools,
            self.frames,
            self.deletes,
            self.deletes_acknowledged,
            if self.git_rewinds > 0 {
                format!(
                    "; git conversation: {} rewinds checked ({} files put back or removed), \
                     {} of its calls interrupted by a kill",
                    self.git_rewinds, self.git_files, self.git_interrupted
                )
            } else {
                String::new()
            },
            if self.empty_creations > 0 {
                format!(
                    "; KNOWN BUG tolerated: {} conversation(s) created with a prompt hold no message",
                    self.empty_creations
                )
            } else {
                String::new()
            }
        )
    }
}

/// Runs the crash test. `Err` describes the first violation (and where the
/// daemon's directory was kept).
pub async fn run(mut opts: CrashOptions) -> Result<Summary, String> {
    let started = Instant::now();
    opts.daemon.extra_config.push_str(&format!(
        "\n[sub_agents]\nmax_concurrent = {}\n",
        opts.sub_agents_max_concurrent.max(1)
    ));
    let fake = FakeLlm::start().await;
    fake.set_responder(Some(responder::responder(opts.seed, opts.faults)));
    let daemon = AssertUnwindSafe(TestDaemon::start_with(&fake, opts.daemon.clone()))
        .catch_unwind()
        .await
        .map_err(|p| format!("the daemon did not start: {}", panic_text(&p)))?;
    let mut run = Run {
        rng: StdRng::seed_from_u64(opts.seed),
        opts,
        fake,
        daemon,
        client: None,
        ledger: Arc::new(Ledger::default()),
        convs: Vec::new(),
        next_label: 1,
        requests_checked: 0,
        seen_requests: HashMap::new(),
        observers: Arc::default(),
        unacked_creations: HashMap::new(),
        git: None,
        summary: Summary::default(),
    };
    run.summary.seed = run.opts.seed;
    let result = run.all().await;
    match result {
        Ok(()) => {
            run.summary.elapsed = started.elapsed();
            run.summary.cut_streams = run.fake.disconnects();
            run.summary.frames = run.ledger.frames();
            Ok(run.summary)
        }
        Err(e) => Err(format!(
            "crash-test FAILED (seed {}, after {} kills): {e}\n{}",
            run.opts.seed,
            run.summary.kills,
            run.keep()
        )),
    }
}

/// A conversation the run knows.
#[derive(Debug)]
struct Conv {
    id: String,
    label: u64,
    /// Turns started.
    turns: u64,
    /// Turns after which it is left alone.
    life: u64,
    /// Touched since the last check.
    dirty: bool,
    /// Turns a cancel was sent for (they may end early).
    cancelled: HashSet<u64>,
    /// Messages whose tools' effects a rewind undid (the first ones): the
    /// effects are checked in those after them.
    effects_from: usize,
    /// Set once its delete is asked for.
    deletion: Option<deletes::Deletion>,
}

/// The conversation that works in a git repository.
#[derive(Debug)]
struct GitConv {
    /// Its index in `convs`.
    conv: usize,
    /// The repository (its working directory).
    dir: PathBuf,
    /// The repository as it was made: what every rewind gives back.
    made: repo::RepoState,
}

/// One turn to start.
#[derive(Debug)]
struct Action {
    kind: Kind,
    tag: Tag,
    /// When to cancel the turn, counted from its acknowledgement.
    cancel_after: Option<Duration>,
    /// Whether the cancel goes to one of the turn's running sub-agents
    /// rather than the turn.
    cancel_child: bool,
}

#[derive(Debug)]
enum Kind {
    /// A prompt to an existing conversation (index into `convs`).
    Send { conv: usize },
    /// A new conversation; the prompt goes with the creation, or after it.
    Create { cwd: PathBuf, with_prompt: bool },
    /// A delete of a conversation (index into `convs`), after a while.
    Delete { conv: usize, after: Duration },
}

/// What became of an action.
#[derive(Debug, Default)]
struct Outcome {
    /// The id of a conversation that was created.
    created: Option<String>,
    /// Whether the prompt was acknowledged.
    acked: bool,
    /// Whether a cancel was acknowledged.
    cancelled: bool,
    /// Whether a cancel of a sub-agent was acknowledged.
    child_cancelled: bool,
    /// A refusal no kill explains.
    violation: Option<String>,
}

struct Run {
    opts: CrashOptions,
    rng: StdRng,
    fake: FakeLlm,
    daemon: TestDaemon,
    client: Option<AgentServiceClient<Channel>>,
    ledger: Arc<Ledger>,
    convs: Vec<Conv>,
    next_label: u64,
    /// Requests checked so far (a prefix of the fake's list).
    requests_checked: usize,
    /// (conversation label, messages in the request) of requests seen, to
    /// count re-issued ones.
    seen_requests: HashMap<(RequestKey, usize), usize>,
    /// The attached observers of the running daemon.
    observers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// Labels of conversations whose creation with a prompt was not
    /// acknowledged (they may exist; if so, with their prompt).
    unacked_creations: HashMap<u64, bool>,
    /// The git conversation, when there is one.
    git: Option<GitConv>,
    summary: Summary,
}

impl Run {
    async fn all(&mut self) -> Result<(), String> {
        self.connect().await?;
        if self.opts.git {
            self.start_git().await?;
        }
        while self.summary.kills < self.opts.kills {
            self.round().await?;
        }
        self.final_check().await
    }

    /// One kill (or two) and the checks after it.
    async fn round(&mut self) -> Result<(), String> {
        let kill_no = self.summary.kills + 1;
        let actions = self.plan();
        let n_actions = actions.len();
        let mut tasks = Vec::with_capacity(actions.len());
        for action in actions {
            tasks.push(self.start(action)?);
        }
        let delay = if self.rng.random_bool(0.1) {
            self.rng.random_range(Duration::ZERO..=self.opts.min_delay)
        } else {
            self.rng
                .random_range(self.opts.min_delay..=self.opts.max_delay)
        };
        tokio::time::sleep(delay).await;
        self.kill();
        let mut acked = 0;
        for (action, task) in tasks {
            let outcome = task
                .await
                .map_err(|e| format!("a client task failed: {e}"))?;
            if let Some(v) = outcome.violation {
                return Err(v);
            }
            acked += usize::from(outcome.acked && !matches!(action.kind, Kind::Delete { .. }));
            self.record(action, outcome);
        }
        self.check_deleted_keys()?;
        self.summary.turns_acknowledged += acked;
        let mut kills = format!("kill {kill_no}");
        let mut again = String::new();
        if self.summary.kills < self.opts.kills && self.rng.random_bool(self.opts.double_kill) {
            let delay = self.rng.random_range(0..=150);
            self.restart().await?;
            tokio::time::sleep(Duration::from_millis(delay)).await;
            self.kill();
            self.check_deleted_keys()?;
            self.summary.recovery_kills += 1;
            kills = format!("kills {kill_no}-{}", kill_no + 1);
            again = format!(", again {delay} ms into recovery");
        }
        self.restart().await?;
        let settle = Instant::now();
        self.settle().await?;
        let settled = settle.elapsed();
        self.check_deletes(&mut self.client()?).await?;
        let (convs, requests) = self.check().await?;
        self.check_git().await?;
        if self.opts.progress {
            println!(
                "{kills}/{}: {n_actions} turns started ({acked} acknowledged), killed after {} ms{again}; \
                 at rest {:.2} s after restart; checked {convs} conversations, {requests} requests",
                self.opts.kills,
                delay.as_millis(),
                settled.as_secs_f64()
            );
        }
        Ok(())
    }

    fn client(&self) -> Result<AgentServiceClient<Channel>, String> {
        self.client
            .clone()
            .ok_or_else(|| "no connection to the daemon".to_string())
    }

    async fn connect(&mut self) -> Result<(), String> {
        let channel = connect_uds(&self.daemon.socket)
            .await
            .map_err(|e| format!("cannot connect to the daemon: {e}"))?;
        self.client = Some(AgentServiceClient::new(channel));
        Ok(())
    }

    /// Which turns to start: new turns in conversations that are still in
    /// use, and new conversations.
    fn plan(&mut self) -> Vec<Action> {
        let git = self.git.as_ref().map(|g| g.conv);
        let mut candidates: Vec<usize> = (0..self.convs.len())
            .filter(|&i| {
                self.convs[i].turns < self.convs[i].life
                    && Some(i) != git
                    && self.convs[i].deletion.is_none()
            })
            .collect();
        let crowded = candidates.len() > 3 * self.opts.conversations;
        let mut actions = Vec::new();
        for _ in 0..self.opts.conversations {
            let rounds = self.rng.random_range(2..=self.opts.max_rounds.max(2));
            let mut cancel_after = self.rng.random_bool(self.opts.cancels).then(|| {
                self.rng.random_range(
                    Duration::ZERO..=self.opts.max_delay.max(Duration::from_millis(1)),
                )
            });
            let spawn = if self.rng.random_bool(self.opts.spawns.clamp(0.0, 1.0)) {
                self.rng.random_range(2..=3)
            } else {
                0
            };
            let mut cancel_child = spawn > 0 && cancel_after.is_some() && self.rng.random_bool(0.5);
            if spawn > 0 && cancel_after.is_none() && self.rng.random_bool(self.opts.cancels * 2.0)
            {
                // More cancels of one child: they are what a fan-out adds.
                cancel_after = Some(self.rng.random_range(
                    Duration::from_millis(50)..=self.opts.max_delay.max(Duration::from_millis(50)),
                ));
                cancel_child = true;
            }
            if !candidates.is_empty() && (crowded || self.rng.random_bool(0.65)) {
                let i = candidates.swap_remove(self.rng.random_range(0..candidates.len()));
                let conv = &mut self.convs[i];
                conv.turns += 1;
                conv.dirty = true;
                let tag = Tag {
                    conv: conv.label,
                    turn: conv.turns,
                    rounds,
                    spawn,
                    git: false,
                };
                if cancel_after.is_some() && !cancel_child {
                    conv.cancelled.insert(tag.turn);
                }
                actions.push(Action {
                    kind: Kind::Send { conv: i },
                    tag,
                    cancel_after,
                    cancel_child,
                });
            } else {
                let label = self.next_label;
                self.next_label += 1;
                let cwd = self.daemon.work_dir.join(format!("c{label}"));
                let tag = Tag {
                    conv: label,
                    turn: 1,
                    rounds,
                    spawn,
                    git: false,
                };
                let with_prompt = self.rng.random_bool(0.5);
                actions.push(Action {
                    kind: Kind::Create { cwd, with_prompt },
                    tag,
                    cancel_after,
                    cancel_child,
                });
            }
        }
        if let Some(i) = git {
            // A turn of the git conversation in every round (never with
            // sub-agents: they would change its files in their own
            // conversations, which its rewind does not undo).
            let rounds = self.rng.random_range(2..=self.opts.max_rounds.max(2));
            let cancel_after = self.rng.random_bool(self.opts.cancels).then(|| {
                self.rng.random_range(
                    Duration::ZERO..=self.opts.max_delay.max(Duration::from_millis(1)),
                )
            });
            let conv = &mut self.convs[i];
            conv.turns += 1;
            conv.dirty = true;
            let tag = Tag {
                conv: conv.label,
                turn: conv.turns,
                rounds,
                spawn: 0,
                git: true,
            };
            if cancel_after.is_some() {
                conv.cancelled.insert(tag.turn);
            }
            actions.push(Action {
                kind: Kind::Send { conv: i },
                tag,
                cancel_after,
                cancel_child: false,
            });
        }
        self.summary.turns_started += actions.len();
        if let Some(delete) = self.plan_delete(&actions) {
            actions.push(delete);
        }
        actions
    }

    /// Starts an action on its own task.
    fn start(&mut self, action: Action) -> Result<(Action, JoinHandle<Outcome>), String> {
        let mut client = self.client()?;
        let ledger = self.ledger.clone();
        let text = action.tag.prompt();
        let cancel_after = action.cancel_after;
        let cancel_child = action.cancel_child;
        let task = match &action.kind {
            Kind::Send { conv } => {
                let id = self.convs[*conv].id.clone();
                tokio::spawn(async move {
                    let mut outcome = Outcome::default();
                    send(&mut client, &ledger, &id, &text, &mut outcome).await;
                    if outcome.acked {
                        cancel(&mut client, &id, cancel_after, cancel_child, &mut outcome).await;
                    }
                    outcome
                })
            }
            Kind::Create { cwd, with_prompt } => {
                std::fs::create_dir_all(cwd)
                    .map_err(|e| format!("cannot create {}: {e}", cwd.display()))?;
                let cwd = cwd.clone();
                let with_prompt = *with_prompt;
                let observers = self.observers.clone();
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
                    let created = match client.create_conversation(request).await {
                        Ok(r) => r.into_inner().conversation.map(|c| c.id),
                        Err(status) => {
                            outcome.violation = unexplained(&status, "CreateConversation");
                            return outcome;
                        }
                    };
                    let Some(id) = created else {
                        outcome.violation =
                            Some("CreateConversation answered without a conversation".into());
                        return outcome;
                    };
                    outcome.created = Some(id.clone());
                    // Watch it from now on (before the prompt, when it is
                    // sent separately).
                    let observer =
                        tokio::spawn(ledger::observe(client.clone(), id.clone(), ledger.clone()));
                    lock(&observers).push(observer);
                    if with_prompt {
                        ledger.sent(&id, 1, &text);
                        outcome.acked = true;
                    } else {
                        send(&mut client, &ledger, &id, &text, &mut outcome).await;
                    }
                    if outcome.acked {
                        cancel(&mut client, &id, cancel_after, cancel_child, &mut outcome).await;
                    }
                    outcome
                })
            }
            Kind::Delete { conv, after } => {
                let id = self.convs[*conv].id.clone();
                let after = *after;
                tokio::spawn(async move {
                    let mut outcome = Outcome::default();
                    deletes::delete(&mut client, &id, after, &mut outcome).await;
                    outcome
                })
            }
        };
        Ok((action, task))
    }

    /// Takes note of what an action achieved.
    fn record(&mut self, action: Action, outcome: Outcome) {
        self.summary.cancels += usize::from(outcome.cancelled);
        self.summary.child_cancels += usize::from(outcome.child_cancelled);
        if let Kind::Delete { conv, .. } = action.kind {
            self.record_delete(conv, &outcome);
            return;
        }
        let Kind::Create { with_prompt, .. } = action.kind else {
            return;
        };
        let Some(id) = outcome.created else {
            self.unacked_creations.insert(action.tag.conv, with_prompt);
            return;
        };
        let life = self.rng.random_range(1..=8);
        let mut cancelled = HashSet::new();
        if action.cancel_after.is_some() && !action.cancel_child {
            cancelled.insert(1);
        }
        self.convs.push(Conv {
            id,
            label: action.tag.conv,
            turns: 1,
            life,
            dirty: true,
            cancelled,
            effects_from: 0,
            deletion: None,
        });
    }

    /// SIGKILLs the daemon; the observers' streams end with it.
    fn kill(&mut self) {
        self.daemon.kill9();
        self.summary.kills += 1;
        self.client = None;
    }

    /// Starts the daemon again, reconnects, adopts conversations whose
    /// creation was never acknowledged, and re-attaches the observers.
    async fn restart(&mut self) -> Result<(), String> {
        // They end when the daemon dies; give them a moment to read what
        // was already sent, then stop them regardless.
        let observers: Vec<_> = lock(&self.observers).drain(..).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        for handle in observers {
            let abort = handle.abort_handle();
            if tokio::time::timeout_at(deadline, handle).await.is_err() {
                abort.abort();
            }
        }
        if let Some(git) = &self.git {
            // A command the kill left running changes files until it
            // ends: before the daemon is back, or a rewind would take its
            // late changes for someone else's.
            let left = repo::wait_until_quiet(&git.dir, Duration::from_secs(10)).await;
            if !left.is_empty() {
                return Err(format!(
                    "processes {left:?} still run in {} 10 s after the kill",
                    git.dir.display()
                ));
            }
        }
        AssertUnwindSafe(self.daemon.restart())
            .catch_unwind()
            .await
            .map_err(|p| format!("the daemon did not restart: {}", panic_text(&p)))?;
        self.connect().await?;
        let mut client = self.client()?;
        let all = client
            .list_conversations(pb::ListConversationsRequest::default())
            .await
            .map_err(|e| format!("ListConversations failed after the restart: {e}"))?
            .into_inner()
            .conversations;
        for c in all {
            // Sub-agents are checked with their parents.
            if self.convs.iter().any(|k| k.id == c.id) || !c.sub_agent_parent_id.is_empty() {
                continue;
            }
            // Created, but the answer was lost to the kill: its working
            // directory names its label.
            let label = Path::new(&c.cwd)
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix('c'))
                .and_then(|n| n.parse::<u64>().ok());
            let Some(with_prompt) = label.and_then(|l| self.unacked_creations.remove(&l)) else {
                return Err(format!(
                    "conversation {} (in {}) appeared, but no creation of it is pending",
                    c.id, c.cwd
                ));
            };
            if with_prompt && c.message_count == 0 && self.opts.tolerate_non_atomic_create {
                self.summary.empty_creations += 1;
            } else if with_prompt && c.message_count == 0 {
                return Err(format!(
                    "conversation {} was created with a prompt, but holds no message: \
                     CreateConversation is not atomic (the kill fell between the creation and the prompt)",
                    c.id
                ));
            }
            self.convs.push(Conv {
                id: c.id,
                label: label.unwrap_or_default(),
                turns: 1,
                life: 0,
                dirty: true,
                cancelled: HashSet::new(),
                effects_from: 0,
                deletion: None,
            });
        }
        if self.summary.kills > 0 {
            // Creations still pending were lost for good.
            self.unacked_creations.clear();
        }
        let mut observers = lock(&self.observers);
        for conv in &self.convs {
            if (conv.turns < conv.life || conv.dirty) && conv.deletion.is_none() {
                observers.push(tokio::spawn(ledger::observe(
                    client.clone(),
                    conv.id.clone(),
                    self.ledger.clone(),
                )));
            }
        }
        Ok(())
    }

    /// Waits until every conversation in the store is at rest.
    async fn settle(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + self.opts.settle_timeout;
        let mut client = self.client()?;
        loop {
            let all = client
                .list_conversations(pb::ListConversationsRequest::default())
                .await
                .map_err(|e| format!("ListConversations failed: {e}"))?
                .into_inner()
                .conversations;
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
                    kind => busy.push(format!("{} in {kind:?} {state:?}", c.id)),
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

    /// Checks the conversations touched since the last check, and the new
    /// model requests. Returns how many of each.
    async fn check(&mut self) -> Result<(usize, usize), String> {
        if let Some(v) = self.ledger.violation() {
            return Err(v);
        }
        let mut client = self.client()?;
        let mut transcripts: HashMap<RequestKey, (String, Vec<pb::Message>)> = HashMap::new();
        let all = self.listing(&mut client).await?;
        let dirty: Vec<usize> = (0..self.convs.len())
            .filter(|&i| self.convs[i].dirty && self.convs[i].deletion.is_none())
            .collect();
        for &i in &dirty {
            let (id, messages) = self.check_conv(&mut client, i).await?;
            let (children, _) = self.check_family(&mut client, i, &messages, &all).await?;
            for c in children {
                if let Some(t) = check::transcript_sub_tag(&c.messages) {
                    transcripts.insert(
                        RequestKey::Child(t.conv, t.turn, t.agent),
                        (c.summary.id, c.messages),
                    );
                }
            }
            transcripts.insert(RequestKey::Conv(self.convs[i].label), (id, messages));
            self.convs[i].dirty = false;
        }
        let requests = self.fake.requests();
        let new = requests.len() - self.requests_checked.min(requests.len());
        for (n, req) in requests.iter().enumerate().skip(self.requests_checked) {
            let n = n + 1;
            let Some(key) = check::request_key(&req.body) else {
                return Err(format!(
                    "request #{n} has no tagged first message: {}",
                    req.body["messages"]
                ));
            };
            let (RequestKey::Conv(label) | RequestKey::Child(label, ..)) = key;
            if self.deleted_label(label) {
                continue;
            }
            if let Entry::Vacant(slot) = transcripts.entry(key) {
                let RequestKey::Conv(label) = key else {
                    return Err(format!(
                        "request #{n} belongs to sub-agent {key:?}, which is not a child of a conversation checked now"
                    ));
                };
                let Some(i) = self.convs.iter().position(|c| c.label == label) else {
                    return Err(format!(
                        "request #{n} belongs to conversation label {label}, which is unknown"
                    ));
                };
                slot.insert(self.check_conv(&mut client, i).await?);
            }
            let (id, stored) = &transcripts[&key];
            check::request(n, &req.body, stored, id)?;
            let len = req.body["messages"].as_array().map_or(0, Vec::len);
            let seen = self.seen_requests.entry((key, len)).or_insert(0);
            *seen += 1;
            if *seen > 1 {
                self.summary.reissued += 1;
            }
        }
        self.requests_checked = requests.len();
        Ok((dirty.len(), new))
    }

    /// Checks one conversation at rest; returns its id and transcript.
    async fn check_conv(
        &mut self,
        client: &mut AgentServiceClient<Channel>,
        i: usize,
    ) -> Result<(String, Vec<pb::Message>), String> {
        let id = self.convs[i].id.clone();
        let r = client
            .get_conversation(pb::GetConversationRequest {
                conversation_id: id.clone(),
            })
            .await
            .map_err(|e| format!("GetConversation {id} failed: {e}"))?
            .into_inner();
        let summary = r.conversation.unwrap_or_default();
        let state = summary.state.clone().unwrap_or_default();
        if state.kind != pb::StateKind::Idle as i32 {
            return Err(format!(
                "conversation {id} is not Idle after settling: {state:?}"
            ));
        }
        check::transcript(&id, &summary, &r.messages, &self.convs[i].cancelled)?;
        self.ledger.check(&id, &r.messages)?;
        if let Some(label) = check::transcript_conv(&r.messages)
            && label != self.convs[i].label
        {
            return Err(format!(
                "conversation {id} (label {}) holds the prompts of label {label}",
                self.convs[i].label
            ));
        }
        let cwd = self
            .daemon
            .work_dir
            .join(format!("c{}", self.convs[i].label));
        let from = self.convs[i].effects_from.min(r.messages.len());
        check::effects(&id, &cwd, &r.messages[from..])?;
        Ok((id, r.messages))
    }

    /// Every conversation in the store; a violation when a sub-agent's
    /// parent is not one of the run's conversations (an orphan).
    async fn listing(
        &self,
        client: &mut AgentServiceClient<Channel>,
    ) -> Result<Vec<pb::ConversationSummary>, String> {
        let all = client
            .list_conversations(pb::ListConversationsRequest::default())
            .await
            .map_err(|e| format!("ListConversations failed: {e}"))?
            .into_inner()
            .conversations;
        for c in &all {
            let parent = &c.sub_agent_parent_id;
            if !parent.is_empty()
                && !self
                    .convs
                    .iter()
                    .any(|k| k.id == *parent && k.deletion.is_none())
            {
                return Err(format!(
                    "sub-agent {} ({}) is an orphan: its parent {parent} is not a conversation of the run",
                    c.id, c.agent_id
                ));
            }
        }
        Ok(all)
    }

    /// Checks conversation `i` (its transcript `messages` checked) with
    /// its sub-agents: each at rest with a valid transcript and the tools'
    /// effects, and the family's invariants ([`check::family`]). Returns
    /// the children and how many spawn calls their results answered.
    async fn check_family(
        &self,
        client: &mut AgentServiceClient<Channel>,
        i: usize,
        messages: &[pb::Message],
        all: &[pb::ConversationSummary],
    ) -> Result<(Vec<check::Child>, usize), String> {
        let id = self.convs[i].id.clone();
        let Some(parent) = all.iter().find(|c| c.id == id) else {
            return Err(format!("conversation {id} is not listed"));
        };
        let cwd = self
            .daemon
            .work_dir
            .join(format!("c{}", self.convs[i].label));
        let mut children = Vec::new();
        for k in all.iter().filter(|c| c.sub_agent_parent_id == id) {
            let r = client
                .get_conversation(pb::GetConversationRequest {
                    conversation_id: k.id.clone(),
                })
                .await
                .map_err(|e| format!("GetConversation {} failed: {e}", k.id))?
                .into_inner();
            let summary = r.conversation.unwrap_or_default();
            let state = summary.state.clone().unwrap_or_default();
            if state.kind != pb::StateKind::Idle as i32 {
                return Err(format!(
                    "sub-agent {} of {id} is not Idle after settling: {state:?}",
                    k.id
                ));
            }
            check::effects(&k.id, &cwd, &r.messages)?;
            self.ledger.check(&k.id, &r.messages)?;
            children.push(check::Child {
                summary,
                messages: r.messages,
            });
        }
        let answered = check::family(parent, messages, &children)?;
        Ok((children, answered))
    }

    /// Every conversation once more, and the totals.
    async fn final_check(&mut self) -> Result<(), String> {
        if let Some(v) = self.ledger.violation() {
            return Err(v);
        }
        let mut client = self.client()?;
        let all = self.listing(&mut client).await?;
        for i in 0..self.convs.len() {
            if self.convs[i].deletion.is_some() {
                continue;
            }
            let (id, messages) = self.check_conv(&mut client, i).await?;
            let (children, answered) = self.check_family(&mut client, i, &messages, &all).await?;
            self.summary.sub_agents += children.len();
            self.summary.spawns_answered += answered;
            self.summary.messages += messages.len();
            self.summary.acknowledged += self.ledger.acknowledged(&id);
            let git = self.git.as_ref().is_some_and(|g| g.conv == i);
            for m in &messages {
                for b in check::blocks_of(m) {
                    if let check::Block::ToolResult { content, .. } = b {
                        if content == check::texts::RESTARTED_WHILE_RUNNING {
                            self.summary.restarted_tools += 1;
                            self.summary.git_interrupted += usize::from(git);
                        } else if content == check::texts::SKIPPED_DUE_TO_RESTART {
                            self.summary.skipped_tools += 1;
                        }
                    }
                }
            }
        }
        self.summary.conversations = self.convs.iter().filter(|c| c.deletion.is_none()).count();
        self.summary.requests = self.requests_checked;
        Ok(())
    }

    /// Makes the git conversation's repository and creates the
    /// conversation (without a prompt: its turns come with the rounds).
    async fn start_git(&mut self) -> Result<(), String> {
        let label = self.next_label;
        self.next_label += 1;
        let dir = self.daemon.work_dir.join(format!("c{label}"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let made = repo::create(&dir, self.opts.seed)?;
        let mut client = self.client()?;
        let request = pb::CreateConversationRequest {
            cwd: dir.display().to_string(),
            allow_rules: ALLOW_RULES.iter().map(|r| r.to_string()).collect(),
            mode: pb::PermissionMode::Default as i32,
            ..Default::default()
        };
        let id = client
            .create_conversation(request)
            .await
            .map_err(|e| format!("cannot create the git conversation: {e}"))?
            .into_inner()
            .conversation
            .map(|c| c.id)
            .ok_or("CreateConversation answered without a conversation")?;
        lock(&self.observers).push(tokio::spawn(ledger::observe(
            client,
            id.clone(),
            self.ledger.clone(),
        )));
        self.convs.push(Conv {
            id,
            label,
            turns: 0,
            life: u64::MAX,
            dirty: false,
            cancelled: HashSet::new(),
            effects_from: 0,
            deletion: None,
        });
        self.git = Some(GitConv {
            conv: self.convs.len() - 1,
            dir,
            made,
        });
        Ok(())
    }

    /// Rewinds the git conversation's code to its first message and checks
    /// that its repository is as it was made (the conversation at rest).
    async fn check_git(&mut self) -> Result<(), String> {
        let Some(git) = &self.git else {
            return Ok(());
        };
        let (i, dir, made) = (git.conv, git.dir.clone(), git.made.clone());
        let id = self.convs[i].id.clone();
        let left = repo::wait_until_quiet(&dir, Duration::from_secs(10)).await;
        if !left.is_empty() {
            return Err(format!(
                "processes {left:?} still run in {} after the conversations came to rest",
                dir.display()
            ));
        }
        let mut client = self.client()?;
        let messages = client
            .get_conversation(pb::GetConversationRequest {
                conversation_id: id.clone(),
            })
            .await
            .map_err(|e| format!("GetConversation {id} failed: {e}"))?
            .into_inner()
            .messages
            .len();
        self.rewind_git(&mut client, &id, messages).await?;
        if let Some(why) = repo::difference(&made, &repo::state(&dir)?) {
            return Err(format!(
                "the git conversation {id}: after a rewind to its first message its repository {} \
                 is not as it was made: {why}",
                dir.display()
            ));
        }
        // The effects of the calls so far are undone; those of the next
        // turns are checked.
        self.convs[i].effects_from = messages;
        Ok(())
    }

    /// Rewinds the git conversation's code (of `messages` messages) to its
    /// first message; checks what the daemon says it did.
    async fn rewind_git(
        &mut self,
        client: &mut AgentServiceClient<Channel>,
        id: &str,
        messages: usize,
    ) -> Result<(), String> {
        if messages == 0 {
            return Ok(());
        }
        let rewound = client
            .rewind(pb::RewindRequest {
                conversation_id: id.to_string(),
                message_seq: 1,
                code: true,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                format!(
                    "the git conversation {id}: its code could not be rewound to its first message: {}",
                    e.message()
                )
            })?
            .into_inner()
            .code
            .unwrap_or_default();
        if rewound.untracked_commands > 0 || !rewound.skipped.is_empty() {
            return Err(format!(
                "the git conversation {id}: its rewind says {} command(s) ran outside git and skipped {:?}",
                rewound.untracked_commands, rewound.skipped
            ));
        }
        self.summary.git_rewinds += 1;
        self.summary.git_files += rewound.restored.len() + rewound.removed.len();
        Ok(())
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
        let dest = base.join(format!("agentd-crash-seed{}-{stamp}", self.opts.seed));
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

/// Sends a prompt and records the acknowledgement.
async fn send(
    client: &mut AgentServiceClient<Channel>,
    ledger: &Ledger,
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
        Ok(r) => {
            ledger.sent(id, r.into_inner().message_seq, text);
            outcome.acked = true;
        }
        Err(status) => outcome.violation = unexplained(&status, "SendMessage"),
    }
}

/// Cancels the turn of `id` after `after` (if set); with `child`, one of
/// its sub-agents that is running then instead (if any is).
async fn cancel(
    client: &mut AgentServiceClient<Channel>,
    id: &str,
    after: Option<Duration>,
    child: bool,
    outcome: &mut Outcome,
) {
    let Some(after) = after else {
        return;
    };
    tokio::time::sleep(after).await;
    let mut target = id.to_string();
    if child {
        let listed = match client
            .list_conversations(pb::ListConversationsRequest::default())
            .await
        {
            Ok(r) => r.into_inner().conversations,
            Err(status) => {
                outcome.violation = unexplained(&status, "ListConversations");
                return;
            }
        };
        let running = listed
            .into_iter()
            .filter(|c| {
                c.sub_agent_parent_id == id
                    && c.state.as_ref().map(|s| s.kind) != Some(pb::StateKind::Idle as i32)
            })
            .min_by(|a, b| a.agent_id.cmp(&b.agent_id));
        let Some(running) = running else {
            return;
        };
        target = running.id;
    }
    let request = pb::CancelConversationRequest {
        conversation_id: target,
        ..Default::default()
    };
    match client.cancel_conversation(request).await {
        Ok(_) if child => outcome.child_cancelled = true,
        Ok(_) => outcome.cancelled = true,
        Err(status) => outcome.violation = unexplained(&status, "CancelConversation"),
    }
}

/// A refusal a dying daemon does not explain (a broken connection does).
pub(crate) fn unexplained(status: &tonic::Status, what: &str) -> Option<String> {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Internal => None,
        _ => Some(format!("{what} was refused: {status}")),
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn panic_text(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(a panic without a message)".to_string())
}

pub(crate) fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
