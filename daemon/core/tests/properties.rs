//! Property tests of the core: random sequences of events, fed through a
//! faithful simulation of the runtime.
//!
//! The simulation does what the runtime does: it calls `transition()`, keeps
//! the new state, and carries out the effects in order — it appends messages
//! to a transcript, keeps track of the model request in flight, the retry
//! timer and the tools that run. The generated actions are things that can
//! happen in the world (a user message, a reply with 0–4 tool calls, a tool
//! finishing, a failure, a cancel, a permission answer, a crash…). Each is
//! turned into the event the runtime would feed, given what is in flight;
//! late and stale reports are fed too, and must be refused.
//!
//! After the actions, the world answers whatever is outstanding — with a
//! model that never ends its turn on its own — until the conversation comes
//! to rest, then a new user turn is driven to rest the same way.
//!
//! Each property is one proptest over the same simulation, checking one
//! invariant (a)–(g). Checks that the simulation itself makes sense (an event
//! the world had every right to send was refused, or the reverse) are
//! reported by every property.

#![expect(clippy::unwrap_used)]

use agentd_core::effect::{Effect, LlmPurpose};
use agentd_core::event::{Event, LlmFailure, RuleScope};
use agentd_core::hooks::{HookMatchers, HookVerdict, stop_continuations};
use agentd_core::loops::LoopLimits;
use agentd_core::message::{
    ContentBlock, Message, Reply, Role, StopReason, ToolCall, ToolResult, Usage,
};
use agentd_core::permission::{Action as RuleAction, Decision, Rule};
use agentd_core::state::{ContextExhaustionBehavior, ConvContext, ConvState, ErrorKind};
use agentd_core::texts;
use agentd_core::tools::is_read_only;
use agentd_core::transition::transition;
use agentd_core::{Conversation, QueuedMessage, ShellNote, ShellNotes};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{FileFailurePersistence, TestRunner};
use serde_json::{Value, json};

/// Cases per property (the brief asks for at least 1,000).
const CASES: u32 = 1_000;
/// Longest generated sequence of actions.
const MAX_ACTIONS: usize = 40;

// ---------------------------------------------------------------------------
// What is generated.
// ---------------------------------------------------------------------------

/// The conversation's configuration.
#[derive(Debug, Clone)]
struct Setup {
    max_attempts: u32,
    max_iterations: u32,
    doom_loop_threshold: usize,
    sub_agent: bool,
    /// 0: no hooks; 1: pre_tool_use hooks on bash; 2: pre_tool_use hooks
    /// on every call and stop hooks (at most 2 continuations per turn).
    hooks: u8,
    /// `[shells] wake_on_exit`.
    wake_on_shell_exit: bool,
}

/// Something that happens in the world.
#[derive(Debug, Clone)]
enum Action {
    /// A user sends a message (one of `USER_TEXTS`).
    User(u8),
    /// The model answers the request in flight.
    Reply(ReplySpec),
    /// The request in flight fails.
    Fail {
        kind: u8,
        retryable: bool,
        retry_after: u8,
        jitter: u16,
        /// A continuation request reports `ContinuationFailed` instead.
        as_continuation_event: bool,
    },
    /// The retry timer fires.
    RetryDue,
    /// A running tool finishes (picked among those running).
    Complete { pick: u8, is_error: bool },
    /// A report nobody is waiting for.
    Stale { what: u8, pick: u8 },
    /// A user cancels.
    Cancel,
    /// The aborted stream reports what it had (`PARTIAL_BLOCKS` indices).
    Abort(Vec<u8>),
    /// A user answers a permission request.
    Answer { decision: u8, id: u8, feedback: u8 },
    /// The daemon is killed and starts again.
    Restart,
    /// The daemon is stopped cleanly (SIGTERM), then starts again.
    Stop,
    /// A user asks for a continuation summary.
    TriggerContinuation,
    /// A user sends a message "queue if busy": queued while a turn runs,
    /// sent as usual otherwise.
    Queue,
    /// The hooks that run answer (pre_tool_use: 0 no decision, 1 allow,
    /// 2 deny, 3 ask; stop: all but 3 continue), or a stale answer comes.
    Hook { decision: u8, rewrite: bool },
    /// Budgets: 0–1 spending reaches the conversation's budget; 2–5
    /// someone raises it enough and answers; 6 someone answers "stop"; 7
    /// someone raises it too little and answers.
    Budget(u8),
    /// A background shell ends (`sh-0`..`sh-3`: the same one may be
    /// reported again, as after a restart).
    ShellEnds(u8),
}

#[derive(Debug, Clone)]
struct ReplySpec {
    /// 0: no text, 1: an empty text block, 2: text.
    text: u8,
    thinking: bool,
    /// (tool, input) indices into `TOOLS` and `inputs()`.
    calls: Vec<(u8, u8)>,
    stop: u8,
    /// Usage over the continuation threshold.
    big: bool,
    /// A continuation request reports `ContinuationCompleted` instead.
    as_continuation_event: bool,
}

const USER_TEXTS: [&str; 6] = [
    "fix the failing test",
    "go on",
    "now the docs",
    "thanks",
    "",
    "  \n",
];
const TOOLS: [&str; 7] = ["read", "grep", "glob", "think", "bash", "write", "edit"];
/// Answers, the usual ones more often (the doom-loop request offers only
/// allow once, deny and deny-and-stop; the rest must be refused).
const DECISIONS: [Decision; 10] = [
    Decision::AllowOnce,
    Decision::AllowOnce,
    Decision::Deny,
    Decision::Deny,
    Decision::DenyAndStop,
    Decision::DenyAndStop,
    Decision::AllowAlways,
    Decision::Never,
    Decision::Background,
    Decision::Cancelled,
];
const KINDS: [ErrorKind; 5] = [
    ErrorKind::RateLimit,
    ErrorKind::Network,
    ErrorKind::Unknown,
    ErrorKind::Auth,
    ErrorKind::InvalidRequest,
];
const RETRY_AFTER: [Option<u64>; 4] = [None, Some(2_000), Some(120_000), Some(600_000)];

fn inputs() -> [Value; 3] {
    [
        json!({"arg": 0}),
        json!({"arg": 1}),
        json!({"path": "src/a.rs", "lines": [1, 20], "note": "ü"}),
    ]
}

fn setup_strategy() -> impl Strategy<Value = Setup> {
    (
        1u32..=4,
        1u32..=8,
        prop::sample::select(vec![0usize, 2, 2, 3]),
        prop::bool::weighted(0.2),
        prop::sample::select(vec![0u8, 0, 0, 0, 1, 2]),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(max_attempts, max_iterations, doom_loop_threshold, sub_agent, hooks, wake)| Setup {
                max_attempts,
                max_iterations,
                doom_loop_threshold,
                sub_agent,
                hooks,
                wake_on_shell_exit: wake,
            },
        )
}

fn reply_strategy() -> impl Strategy<Value = ReplySpec> {
    (
        0u8..3,
        prop::bool::weighted(0.2),
        prop::collection::vec(call_strategy(), 0..=4),
        0u8..16,
        prop::bool::weighted(0.02),
        any::<bool>(),
    )
        .prop_map(
            |(text, thinking, calls, stop, big, as_continuation_event)| ReplySpec {
                text,
                thinking,
                calls,
                stop,
                big,
                as_continuation_event,
            },
        )
}

/// A tool call: often the same `bash` or `read` call again, so that the
/// doom-loop detector asks for permission.
fn call_strategy() -> impl Strategy<Value = (u8, u8)> {
    prop_oneof![
        5 => Just((4u8, 0u8)),
        2 => Just((0u8, 0u8)),
        4 => (0u8..7, 0u8..3),
    ]
}

fn action_strategy() -> impl Strategy<Value = Action> {
    prop_oneof![
        30 => (0u8..6).prop_map(Action::User),
        60 => reply_strategy().prop_map(Action::Reply),
        15 => (0u8..5, any::<bool>(), 0u8..4, 0u16..1000, any::<bool>()).prop_map(
            |(kind, retryable, retry_after, jitter, as_continuation_event)| Action::Fail {
                kind,
                retryable,
                retry_after,
                jitter,
                as_continuation_event,
            }
        ),
        12 => Just(Action::RetryDue),
        60 => (any::<u8>(), prop::bool::weighted(0.2))
            .prop_map(|(pick, is_error)| Action::Complete { pick, is_error }),
        12 => (0u8..4, any::<u8>()).prop_map(|(what, pick)| Action::Stale { what, pick }),
        10 => Just(Action::Cancel),
        10 => prop::collection::vec(0u8..6, 0..4).prop_map(Action::Abort),
        30 => (0u8..10, 0u8..4, 0u8..3)
            .prop_map(|(decision, id, feedback)| Action::Answer { decision, id, feedback }),
                8 => Just(Action::Restart),
        4 => Just(Action::Stop),
        1 => Just(Action::TriggerContinuation),
        20 => (0u8..8).prop_map(Action::Budget),
        6 => Just(Action::Queue),
        20 => (0u8..4, prop::bool::weighted(0.3))
            .prop_map(|(decision, rewrite)| Action::Hook { decision, rewrite }),
        3 => (0u8..4).prop_map(Action::ShellEnds),
    ]
}

fn case_strategy() -> impl Strategy<Value = (Setup, Vec<Action>)> {
    (
        setup_strategy(),
        prop::collection::vec(action_strategy(), 0..=MAX_ACTIONS),
    )
}

// ---------------------------------------------------------------------------
// The simulated runtime and world.
// ---------------------------------------------------------------------------

/// The invariant a run checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prop {
    /// (a) tool_use/tool_result pairing at rest and at every request.
    TranscriptValid,
    /// (b) same state + ctx + event -> same result.
    Deterministic,
    /// (c) busy states refuse user messages with the seed's texts; a refusal
    /// changes nothing.
    BusyRejects,
    /// (d) every ExecuteTool is answered in the transcript or aborted.
    ToolsAnswered,
    /// (e) a mutating tool runs alone.
    MutationAlone,
    /// (f) the conversation comes to rest in bounded steps.
    ComesToRest,
    /// (g) the state survives a JSON round trip (it is persisted).
    SerdeRoundTrip,
    /// (h) a queued message reaches the transcript exactly once, in a user
    /// message, and only once delivered; a turn that ends normally leaves
    /// nothing queued.
    QueueDelivered,
    /// The simulation's own expectations; reported by every property.
    World,
}

/// The model request the world is serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Llm {
    None,
    InFlight {
        continuation: bool,
    },
    /// `AbortLlm` was asked; exactly one report (aborted, completed or
    /// failed: the stream may have finished first) is still to come.
    Aborting {
        continuation: bool,
    },
}

/// What a refused event must leave untouched.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    state: ConvState,
    transcript: usize,
    llm: Llm,
    timer: bool,
    running: usize,
    hooks: Hooks,
}

struct Sim {
    prop: Prop,
    max_iterations: u32,
    max_attempts: u32,
    state: ConvState,
    ctx: ConvContext,
    transcript: Vec<Message>,
    next_id: u32,
    llm: Llm,
    timer: bool,
    /// The daemon is stopping: the state may rest on disk as AwaitingLlm.
    stopping: bool,
    /// Tools the world runs now.
    running: Vec<ToolCall>,
    /// Every ExecuteTool, in order.
    started: Vec<String>,
    /// Every id named by AbortTools.
    aborted: Vec<String>,
    /// The hooks the world runs now.
    hooks: Hooks,
    /// Queued texts the core delivered, in order.
    delivered: Vec<String>,
    /// Texts queued and not delivered yet (the conversation's queue, as
    /// the runtime keeps it).
    queued: Vec<String>,
    /// Queued messages so far (they are numbered).
    queued_count: u32,
    /// The ends of background shells, as the conversation keeps them.
    shell_notes: ShellNotes,
    violations: Vec<String>,
}

/// Hooks running in the world.
#[derive(Debug, Clone, PartialEq)]
enum Hooks {
    None,
    /// The pre_tool_use hooks of this call.
    Pre(String),
    Stop,
}

impl Sim {
    fn new(prop: Prop, setup: &Setup) -> Self {
        let ctx = ConvContext {
            now_ms: 1_700_000_000_000,
            max_attempts: setup.max_attempts,
            max_iterations: setup.max_iterations,
            loops: LoopLimits {
                identical: setup.doom_loop_threshold,
                ..LoopLimits::default()
            },
            exhaustion: if setup.sub_agent {
                ContextExhaustionBehavior::IntentionallyUnhandled
            } else {
                ContextExhaustionBehavior::ThresholdBasedContinuation
            },
            hooks: match setup.hooks {
                0 => HookMatchers::default(),
                1 => HookMatchers {
                    pre_tool_use: vec![Some(Rule::parse("bash", RuleAction::Deny).unwrap())],
                    ..HookMatchers::default()
                },
                _ => HookMatchers {
                    pre_tool_use: vec![None],
                    stop: true,
                    max_stop_continuations: 2,
                    stop_continuations: 0,
                },
            },
            wake_on_shell_exit: setup.wake_on_shell_exit,
            ..ConvContext::default()
        };
        Sim {
            prop,
            max_iterations: setup.max_iterations,
            max_attempts: setup.max_attempts,
            state: ConvState::Idle,
            ctx,
            transcript: Vec::new(),
            next_id: 0,
            llm: Llm::None,
            timer: false,
            stopping: false,
            running: Vec::new(),
            started: Vec::new(),
            aborted: Vec::new(),
            hooks: Hooks::None,
            delivered: Vec::new(),
            queued: Vec::new(),
            queued_count: 0,
            shell_notes: ShellNotes::default(),
            violations: Vec::new(),
        }
    }

    fn violate(&mut self, prop: Prop, what: String) {
        if prop == self.prop || prop == Prop::World {
            self.violations
                .push(format!("[{prop:?}] {what}\n    state: {:?}", self.state));
        }
    }

    fn fresh_id(&mut self) -> String {
        self.next_id += 1;
        format!("toolu_{:03}", self.next_id)
    }

    /// The conversation as the runtime would hand it to the core.
    fn conversation(&self) -> Conversation {
        Conversation {
            queue: self.queued.iter().map(QueuedMessage::text).collect(),
            shell_notes: self.shell_notes.clone(),
            ..self.state.clone().into()
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            state: self.state.clone(),
            transcript: self.transcript.len(),
            llm: self.llm,
            timer: self.timer,
            running: self.running.len(),
            hooks: self.hooks.clone(),
        }
    }

    // --- Feeding one event, as the runtime does. ---

    /// Feeds `event`; on success keeps the new state and runs the effects in
    /// order. Returns whether the event was accepted.
    fn feed(&mut self, event: Event) -> bool {
        // The runtime counts the stop hooks' continuations of this turn in
        // the transcript.
        self.ctx.hooks.stop_continuations = stop_continuations(&self.transcript);
        let conv = self.conversation();
        let result = transition(&conv, &self.ctx, event.clone());
        if self.prop == Prop::Deterministic {
            let again = transition(&conv, &self.ctx, event.clone());
            if again != result {
                self.violate(
                    Prop::Deterministic,
                    format!("{event:?} gave {result:?}, then {again:?}"),
                );
            }
        }
        if self.prop == Prop::SerdeRoundTrip {
            // The state as the store holds it decides exactly the same.
            match round_trip(&self.state) {
                Ok(loaded) if loaded == self.state => {
                    let loaded = Conversation {
                        state: loaded,
                        ..conv.clone()
                    };
                    if transition(&loaded, &self.ctx, event.clone()) != result {
                        self.violate(
                            Prop::SerdeRoundTrip,
                            format!("the reloaded state decides {event:?} differently"),
                        );
                    }
                }
                Ok(loaded) => self.violate(
                    Prop::SerdeRoundTrip,
                    format!("state changed in a JSON round trip: {loaded:?}"),
                ),
                Err(e) => self.violate(Prop::SerdeRoundTrip, format!("state JSON round trip: {e}")),
            }
        }
        // The clock moves between events.
        self.ctx.now_ms += 7;
        let rejected = match result {
            Ok(t) => {
                let left: Vec<String> = t
                    .conversation
                    .queue
                    .iter()
                    .map(|q| q.text.clone())
                    .collect();
                if !self.queued.ends_with(&left) {
                    self.violate(
                        Prop::QueueDelivered,
                        format!("{left:?} left queued of {:?}", self.queued),
                    );
                } else {
                    let delivered = self.queued.len() - left.len();
                    let delivered: Vec<String> = self.queued.drain(..delivered).collect();
                    self.delivered.extend(delivered);
                }
                // A note no longer pending was delivered: it is in the
                // transcript once from now on, like a queued message.
                let told = self
                    .shell_notes
                    .pending
                    .iter()
                    .filter(|n| !t.conversation.shell_notes.pending.contains(n))
                    .map(texts::shell_ended);
                self.delivered.extend(told);
                self.shell_notes = t.conversation.shell_notes;
                self.state = t.conversation.state;
                for effect in t.effects {
                    self.run_effect(effect);
                }
                false
            }
            Err(_) => true,
        };
        self.after_event(rejected);
        !rejected
    }

    fn run_effect(&mut self, effect: Effect) {
        match effect {
            Effect::AppendMessage { message } => {
                if self.prop == Prop::SerdeRoundTrip
                    && round_trip(&message).ok() != Some(message.clone())
                {
                    self.violate(
                        Prop::SerdeRoundTrip,
                        format!("message JSON round trip: {message:?}"),
                    );
                }
                self.note_recent_calls(&message);
                self.transcript.push(message);
            }
            Effect::RequestLlm { purpose, attempt } => {
                if let Err(e) = check_transcript(&self.transcript, None) {
                    self.violate(
                        Prop::TranscriptValid,
                        format!(
                            "request (attempt {attempt}) with an invalid transcript: {e}\n{}",
                            dump(&self.transcript)
                        ),
                    );
                }
                if let Err(e) = check_sendable(&self.transcript) {
                    self.violate(
                        Prop::TranscriptValid,
                        format!(
                            "request (attempt {attempt}) the provider would refuse: {e}\n{}",
                            dump(&self.transcript)
                        ),
                    );
                }
                if self.llm != Llm::None {
                    self.violate(
                        Prop::World,
                        format!("a second request while {:?}", self.llm),
                    );
                }
                self.llm = Llm::InFlight {
                    continuation: matches!(purpose, LlmPurpose::Continuation { .. }),
                };
            }
            Effect::AbortLlm => {
                if let Llm::InFlight { continuation } = self.llm {
                    self.llm = Llm::Aborting { continuation };
                }
            }
            Effect::ScheduleRetry { .. } => {
                if self.timer {
                    self.violate(Prop::World, "a second retry timer".to_string());
                }
                self.timer = true;
            }
            Effect::CancelRetry => self.timer = false,
            Effect::ExecuteTool { call, .. } => {
                let names: Vec<&str> = self.running.iter().map(|c| c.name.as_str()).collect();
                if !is_read_only(&call.name) && !self.running.is_empty() {
                    let what = format!("mutating {} started while {names:?} run", call.name);
                    self.violate(Prop::MutationAlone, what);
                } else if self.running.iter().any(|c| !is_read_only(&c.name)) {
                    let what = format!(
                        "{} started while a mutating tool runs: {names:?}",
                        call.name
                    );
                    self.violate(Prop::MutationAlone, what);
                }
                if self.started.contains(&call.id) {
                    self.violate(Prop::ToolsAnswered, format!("{} executed twice", call.id));
                }
                self.started.push(call.id.clone());
                self.running.push(call);
            }
            Effect::AbortTools { tool_use_ids } => {
                self.running.retain(|c| !tool_use_ids.contains(&c.id));
                self.aborted.extend(tool_use_ids);
            }
            Effect::RunPreToolHooks { call } => {
                if self.hooks != Hooks::None {
                    self.violate(
                        Prop::World,
                        format!("hooks of {} while {:?}", call.id, self.hooks),
                    );
                }
                if !self.running.is_empty() {
                    self.violate(
                        Prop::MutationAlone,
                        format!("hooks of {} while tools run", call.id),
                    );
                }
                self.hooks = Hooks::Pre(call.id);
            }
            Effect::RunStopHooks => {
                if self.hooks != Hooks::None {
                    self.violate(Prop::World, format!("stop hooks while {:?}", self.hooks));
                }
                self.hooks = Hooks::Stop;
            }
            Effect::AbortHooks => self.hooks = Hooks::None,
            Effect::AskPermission { .. }
            | Effect::PermissionResolved { .. }
            | Effect::AddRule { .. }
            | Effect::PlanChanged { .. }
            | Effect::MarkCheckpoint { .. }
            | Effect::RestoreCheckpoint { .. }
            | Effect::ContinueInNewConversation
            | Effect::Notify { .. } => {}
            Effect::SpawnSubAgent { agent_id, .. } => {
                self.violate(Prop::World, format!("unexpected sub-agent {agent_id}"));
            }
            Effect::CancelSubAgents { agent_ids } => {
                self.violate(Prop::World, format!("unexpected sub-agents {agent_ids:?}"));
            }
            Effect::FinishSubAgent { outcome } => {
                self.violate(Prop::World, format!("unexpected sub-agent end {outcome:?}"));
            }
            // Messages here are sent past their hooks and never queued.
            Effect::Enqueue | Effect::RunPromptHooks => {
                self.violate(Prop::World, format!("unexpected {effect:?}"));
            }
        }
    }

    /// The runtime keeps the last few tool calls for the doom-loop detector:
    /// a reply's calls count once their results are written.
    fn note_recent_calls(&mut self, message: &Message) {
        let answers = message
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }));
        if message.role != Role::User || !answers {
            return;
        }
        if !self.transcript.is_empty() {
            let mut transcript = self.transcript.clone();
            transcript.push(message.clone());
            self.ctx.recent_calls = agentd_core::loops::recent_calls(&transcript, &[], 6);
        }
    }

    /// Checks that hold after every event, accepted or not.
    /// (h): each delivered text is in exactly one user text block; a text
    /// still queued is in none.
    fn check_queue(&mut self) {
        let count = |text: &str, transcript: &[Message]| {
            transcript
                .iter()
                .flat_map(|m| m.content.iter().map(move |b| (m.role, b)))
                .filter(|(role, b)| {
                    matches!(b, ContentBlock::Text { text: t } if t == text) && *role == Role::User
                })
                .count()
        };
        let mut wrong = Vec::new();
        for text in &self.delivered {
            let n = count(text, &self.transcript);
            if n != 1 {
                wrong.push(format!("delivered {text:?} is in the transcript {n} times"));
            }
        }
        let pending = self.shell_notes.pending.iter().map(texts::shell_ended);
        for text in self.queued.iter().cloned().chain(pending) {
            let n = count(&text, &self.transcript);
            if n != 0 {
                wrong.push(format!("queued {text:?} is in the transcript {n} times"));
            }
        }
        for w in wrong {
            self.violate(Prop::QueueDelivered, w);
        }
    }

    fn after_event(&mut self, rejected: bool) {
        self.check_queue();
        let at_rest = self.state.is_at_rest();
        // (a): at rest every tool_use is answered; otherwise only the reply
        // whose tools run now may be waiting for its results.
        let trailing = match &self.state {
            ConvState::ToolExecuting(run) => Some(run.calls.iter().map(|c| c.id.clone()).collect()),
            _ => None,
        };
        if let Err(e) = check_transcript(&self.transcript, trailing.as_ref()) {
            let when = if at_rest { "at rest" } else { "meanwhile" };
            self.violate(
                Prop::TranscriptValid,
                format!("transcript invalid {when}: {e}\n{}", dump(&self.transcript)),
            );
        }
        // (d): at rest every tool that ran is answered or was aborted.
        if at_rest {
            self.check_tools_answered();
        }
        // (e): the state's running tools are the world's.
        let mut in_state: Vec<String> = match &self.state {
            ConvState::ToolExecuting(run) => run.running.clone(),
            _ => Vec::new(),
        };
        let mut in_world: Vec<String> = self.running.iter().map(|c| c.id.clone()).collect();
        in_state.sort();
        in_world.sort();
        if in_state != in_world {
            self.violate(
                Prop::MutationAlone,
                format!("state runs {in_state:?}, the world runs {in_world:?}"),
            );
        }
        // (f): a busy state always has something outstanding that will
        // move it on.
        let waiting = match &self.state {
            ConvState::Idle
            | ConvState::Error { .. }
            | ConvState::ContextExhausted { .. }
            | ConvState::BudgetStopped { .. } => Ok(()),
            ConvState::LlmRequesting { retry: None, .. } => expect(
                self.llm
                    == Llm::InFlight {
                        continuation: false,
                    },
                "a model request in flight",
            ),
            ConvState::LlmRequesting { retry: Some(_), .. } => expect(
                self.timer && self.llm == Llm::None,
                "a retry timer and no request",
            ),
            ConvState::Cancelling { .. } => expect(
                self.llm
                    == Llm::Aborting {
                        continuation: false,
                    },
                "an abort report",
            ),
            ConvState::AwaitingContinuation { .. } => expect(
                self.llm == Llm::InFlight { continuation: true } || self.timer,
                "a continuation request or its retry timer",
            ),
            ConvState::ToolExecuting(run) => expect(
                !run.running.is_empty()
                    || run.permission.is_some()
                    || (run.hooking.is_some()
                        && self.hooks == Hooks::Pre(run.hooking.clone().unwrap_or_default())),
                "a running tool, a permission request or running hooks",
            ),
            ConvState::StopHooks { .. } => expect(self.hooks == Hooks::Stop, "stop hooks running"),
            ConvState::AwaitingLlm { .. } if self.stopping => Ok(()),
            ConvState::AwaitingLlm { .. } | ConvState::AwaitingSubAgents { .. } => {
                Err("a state the live loop never enters".to_string())
            }
        };
        if let Err(what) = waiting {
            self.violate(
                Prop::ComesToRest,
                format!(
                    "busy without {what} (llm {:?}, timer {})",
                    self.llm, self.timer
                ),
            );
        }
        // Hooks run only while the state waits for them.
        let hooks_expected = match &self.state {
            ConvState::ToolExecuting(run) => run.hooking.clone().map_or(Hooks::None, Hooks::Pre),
            ConvState::StopHooks { .. } => Hooks::Stop,
            _ => Hooks::None,
        };
        if self.hooks != hooks_expected && !(self.stopping && self.hooks == Hooks::None) {
            self.violate(
                Prop::World,
                format!(
                    "the world runs hooks {:?}, the state waits for {hooks_expected:?}",
                    self.hooks
                ),
            );
        }
        // (c): probe with a user message.
        if self.prop == Prop::BusyRejects && !rejected {
            self.probe_user_message();
        }
    }

    fn check_tools_answered(&mut self) {
        let answered: Vec<String> = self
            .transcript
            .iter()
            .flat_map(|m| m.content.iter())
            .filter_map(|b| match b {
                ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.clone()),
                _ => None,
            })
            .collect();
        let missing: Vec<String> = self
            .started
            .iter()
            .filter(|id| !answered.contains(id) && !self.aborted.contains(id))
            .cloned()
            .collect();
        if !missing.is_empty() {
            self.violate(
                Prop::ToolsAnswered,
                format!("at rest, executed but never answered: {missing:?}"),
            );
        }
    }

    /// (c): what a user message would do now, without keeping it.
    fn probe_user_message(&mut self) {
        let result = transition(
            &self.conversation(),
            &self.ctx,
            Event::UserMessage {
                text: "probe".to_string(),
                images: vec![],
                sending: Default::default(),
            },
        );
        match (expected_refusal(&self.state), result) {
            (None, Ok(t)) => {
                // A new turn asks the model, or is held at a reached budget.
                let held = budget_reached(&self.ctx);
                if !matches!(
                    (&t.conversation.state, held),
                    (
                        ConvState::LlmRequesting {
                            attempt: 1,
                            iteration: 1,
                            ..
                        },
                        false
                    ) | (ConvState::BudgetStopped { iteration: 1, .. }, true)
                ) {
                    self.violate(
                        Prop::BusyRejects,
                        format!("a user message at rest led to {:?}", t.conversation.state),
                    );
                }
            }
            (None, Err(r)) => self.violate(
                Prop::BusyRejects,
                format!("a user message at rest was refused: {r}"),
            ),
            (Some(text), Ok(_)) => self.violate(
                Prop::BusyRejects,
                format!("a user message was accepted (expected {text:?})"),
            ),
            (Some(text), Err(r)) => {
                if r.to_string() != text {
                    self.violate(
                        Prop::BusyRejects,
                        format!("refused with {:?}, expected {text:?}", r.to_string()),
                    );
                }
            }
        }
    }

    // --- Turning actions into events. ---

    fn act(&mut self, action: &Action) {
        match action {
            Action::User(k) => self.user_message(USER_TEXTS[usize::from(*k) % USER_TEXTS.len()]),
            Action::Reply(spec) => self.reply(spec),
            Action::Fail {
                kind,
                retryable,
                retry_after,
                jitter,
                as_continuation_event,
            } => {
                let failure = LlmFailure {
                    kind: KINDS[usize::from(*kind) % KINDS.len()],
                    retryable: *retryable,
                    message: "HTTP 529 overloaded".to_string(),
                    retry_after_ms: RETRY_AFTER[usize::from(*retry_after) % RETRY_AFTER.len()],
                };
                let event = Event::LlmFailed {
                    failure,
                    jitter_permille: *jitter,
                };
                match self.llm {
                    Llm::InFlight { continuation } | Llm::Aborting { continuation } => {
                        self.llm = Llm::None;
                        if continuation && *as_continuation_event {
                            let ok = matches!(self.state, ConvState::AwaitingContinuation { .. });
                            let event = Event::ContinuationFailed {
                                error: "HTTP 500".to_string(),
                            };
                            self.feed_expecting(event, ok);
                        } else {
                            let ok = self.takes_llm_report();
                            self.feed_expecting(event, ok);
                        }
                    }
                    Llm::None => self.stale_llm_report(event),
                }
            }
            Action::RetryDue => {
                if self.timer {
                    self.timer = false;
                    let ok = matches!(
                        self.state,
                        ConvState::LlmRequesting { retry: Some(_), .. }
                            | ConvState::AwaitingContinuation { .. }
                    );
                    self.feed_expecting(Event::RetryDue, ok);
                } else if !matches!(self.state, ConvState::AwaitingContinuation { .. }) {
                    // A timer nobody set (the continuation state cannot
                    // tell; the world never sends one there).
                    self.feed_expecting(Event::RetryDue, false);
                }
            }
            Action::Complete { pick, is_error } => {
                if self.running.is_empty() {
                    self.stale_completion(*pick);
                } else {
                    let call = self.running.remove(usize::from(*pick) % self.running.len());
                    let content = if *is_error {
                        format!("Error: {} failed", call.name)
                    } else {
                        format!("output of {}", call.id)
                    };
                    let result = ToolResult::new(&call.id, content, *is_error);
                    self.feed_expecting(Event::ToolCompleted { result }, true);
                }
            }
            Action::Stale { what, pick } => match what % 4 {
                0 => self.stale_completion(*pick),
                1 => {
                    if self.llm == Llm::None {
                        let reply = Reply {
                            content: vec![ContentBlock::text("late")],
                            stop_reason: StopReason::EndTurn,
                            usage: small_usage(),
                        };
                        self.stale_llm_report(Event::LlmCompleted { reply });
                    }
                }
                2 => {
                    if self.llm == Llm::None {
                        let failure = LlmFailure {
                            kind: ErrorKind::Network,
                            retryable: true,
                            message: "late".to_string(),
                            retry_after_ms: None,
                        };
                        self.stale_llm_report(Event::LlmFailed {
                            failure,
                            jitter_permille: 0,
                        });
                    }
                }
                _ => {
                    if !matches!(self.llm, Llm::Aborting { .. }) {
                        let partial = vec![ContentBlock::text("late")];
                        self.feed_expecting(Event::LlmAborted { partial }, false);
                    }
                }
            },
            Action::Cancel => self.feed_expecting(Event::UserCancel, true),
            Action::Abort(blocks) => {
                let partial: Vec<ContentBlock> =
                    blocks.iter().map(|k| self.partial_block(*k)).collect();
                if let Llm::Aborting { .. } = self.llm {
                    self.llm = Llm::None;
                    let ok = matches!(self.state, ConvState::Cancelling { .. });
                    self.feed_expecting(Event::LlmAborted { partial }, ok);
                } else {
                    self.feed_expecting(Event::LlmAborted { partial }, false);
                }
            }
            Action::Answer {
                decision,
                id,
                feedback,
            } => self.answer(*decision, *id, *feedback),
            Action::Restart => self.restart(),
            Action::Stop => self.stop(),
            Action::Queue => {
                self.queued_count += 1;
                let text = format!("queued note {}", self.queued_count);
                match expected_refusal(&self.state) {
                    Some("agent is busy" | "cancellation in progress") => self.queued.push(text),
                    // Not busy: the runtime sends it as usual (or the
                    // state refuses it, e.g. an exhausted context).
                    _ => self.user_message(&text),
                }
            }
            Action::TriggerContinuation => {
                let ok = self.state == ConvState::Idle;
                self.feed_expecting(Event::UserTriggerContinuation, ok);
            }
            Action::Hook { decision, rewrite } => self.hook_answer(*decision, *rewrite),
            Action::Budget(what) => self.budget(*what),
            Action::ShellEnds(k) => {
                let note = ShellNote {
                    shell_id: format!("sh-{k}"),
                    command: "make watch".to_string(),
                    status: "exit code 0".to_string(),
                    tail: format!("built {k}"),
                };
                let new = !self.shell_notes.noted.contains(&note.shell_id);
                self.feed_expecting(Event::ShellEnded { note }, new);
            }
        }
    }

    /// Budgets: spending reaches the conversation's $1 budget, or someone
    /// answers a held turn (raising the budget first, enough or not).
    fn budget(&mut self, what: u8) {
        let budget = &mut self.ctx.budget;
        budget.configured.per_conversation_usd = Some(1_000_000);
        let spent = budget.spent.per_conversation_usd.unwrap_or(0);
        let limit = 1_000_000 + budget.raised.per_conversation_usd.unwrap_or(0);
        let held = matches!(self.state, ConvState::BudgetStopped { .. });
        match what {
            0 | 1 => budget.spent.per_conversation_usd = Some(limit.max(spent) + 250_000),
            2..=5 | 7 => {
                if what != 7 && limit <= spent {
                    // Room for the held request: the limit just over what
                    // was spent.
                    budget.raised.per_conversation_usd = Some(spent + 1 - 1_000_000);
                }
                self.feed_expecting(Event::BudgetAnswered { raise: true }, held);
            }
            _ => {
                self.feed_expecting(Event::BudgetAnswered { raise: false }, held);
            }
        }
    }

    /// The hooks that run answer; with none running, a stale answer comes
    /// and must be refused.
    fn hook_answer(&mut self, decision: u8, rewrite: bool) {
        match std::mem::replace(&mut self.hooks, Hooks::None) {
            Hooks::Pre(id) => {
                let verdict = match decision % 4 {
                    0 => HookVerdict::None,
                    1 => HookVerdict::Allow,
                    2 => HookVerdict::Deny("not on a Friday".to_string()),
                    _ => HookVerdict::Ask("a hook wants a person".to_string()),
                };
                let new_input = rewrite.then(|| json!({"arg": 9, "rewritten": true}));
                let event = Event::PreToolHooksDecided {
                    tool_use_id: id,
                    verdict,
                    new_input,
                };
                self.feed_expecting(event, true);
            }
            Hooks::Stop => {
                let continue_with = (decision % 4 != 3).then(|| "the tests still fail".to_string());
                self.feed_expecting(Event::StopHooksDecided { continue_with }, true);
            }
            Hooks::None => {
                let id = self
                    .started
                    .last()
                    .cloned()
                    .unwrap_or_else(|| "toolu_ghost".to_string());
                let event = if decision.is_multiple_of(2) {
                    Event::PreToolHooksDecided {
                        tool_use_id: id,
                        verdict: HookVerdict::Allow,
                        new_input: None,
                    }
                } else {
                    Event::StopHooksDecided {
                        continue_with: Some("late".to_string()),
                    }
                };
                self.feed_expecting(event, false);
            }
        }
    }

    /// Feeds an event the world sends and checks that the core accepts or
    /// refuses it as a faithful runtime expects.
    fn feed_expecting(&mut self, event: Event, accept: bool) {
        let name = event.name();
        let state = self.state.name();
        let before = self.snapshot();
        let accepted = self.feed(event);
        if accepted != accept {
            let what = if accepted { "accepted" } else { "refused" };
            self.violate(Prop::World, format!("{name} {what} in {state}"));
        }
        if !accepted && self.snapshot() != before {
            self.violate(
                Prop::BusyRejects,
                format!("a refused {name} changed something"),
            );
        }
    }

    /// Whether the state takes the report of the request in flight.
    fn takes_llm_report(&self) -> bool {
        matches!(
            self.state,
            ConvState::LlmRequesting { retry: None, .. }
                | ConvState::Cancelling { .. }
                | ConvState::AwaitingContinuation { .. }
        )
    }

    /// A model report with no request in flight: refused wherever the state
    /// can tell (the continuation state cannot; the world never sends one).
    fn stale_llm_report(&mut self, event: Event) {
        if !matches!(self.state, ConvState::AwaitingContinuation { .. }) {
            self.feed_expecting(event, false);
        }
    }

    fn stale_completion(&mut self, pick: u8) {
        let mut candidates: Vec<String> = self.started.clone();
        candidates.extend(self.aborted.iter().cloned());
        if let ConvState::ToolExecuting(run) = &self.state {
            candidates.extend(run.pending_ids());
        }
        candidates.push("toolu_ghost".to_string());
        candidates.retain(|id| !self.running.iter().any(|c| c.id == *id));
        let id = candidates[usize::from(pick) % candidates.len()].clone();
        let result = ToolResult::new(id, "late", false);
        self.feed_expecting(Event::ToolCompleted { result }, false);
    }

    fn user_message(&mut self, text: &str) {
        let before = self.snapshot();
        let refusal = if text.trim().is_empty() {
            Some("message text is empty")
        } else {
            expected_refusal(&self.state)
        };
        let state = self.state.name();
        let result = transition(
            &self.conversation(),
            &self.ctx,
            Event::UserMessage {
                text: text.to_string(),
                images: vec![],
                sending: Default::default(),
            },
        );
        let refused_with = result.as_ref().err().map(ToString::to_string);
        let accepted = self.feed(Event::UserMessage {
            text: text.to_string(),
            images: vec![],
            sending: Default::default(),
        });
        match (refusal, accepted) {
            (None, true) => {}
            (None, false) => self.violate(
                Prop::BusyRejects,
                format!("user message refused in {state}: {refused_with:?}"),
            ),
            (Some(r), true) => self.violate(
                Prop::BusyRejects,
                format!("user message accepted in {state} (expected {r:?})"),
            ),
            (Some(r), false) => {
                if refused_with.as_deref() != Some(r) {
                    self.violate(
                        Prop::BusyRejects,
                        format!("refused with {refused_with:?}, expected {r:?}"),
                    );
                }
                if self.snapshot() != before {
                    self.violate(
                        Prop::BusyRejects,
                        "a refused user message changed something".to_string(),
                    );
                }
            }
        }
    }

    fn reply(&mut self, spec: &ReplySpec) {
        let (Llm::InFlight { continuation } | Llm::Aborting { continuation }) = self.llm else {
            let reply = self.make_reply(spec);
            return self.stale_llm_report(Event::LlmCompleted { reply });
        };
        self.llm = Llm::None;
        let reply = self.make_reply(spec);
        if continuation && spec.as_continuation_event {
            let ok = matches!(self.state, ConvState::AwaitingContinuation { .. });
            let event = Event::ContinuationCompleted {
                summary: "Task: fix the test. Next: run it.".to_string(),
                usage: reply.usage,
            };
            self.feed_expecting(event, ok);
        } else {
            let ok = self.takes_llm_report();
            self.feed_expecting(Event::LlmCompleted { reply }, ok);
        }
    }

    fn make_reply(&mut self, spec: &ReplySpec) -> Reply {
        let mut content = Vec::new();
        if spec.thinking {
            content.push(ContentBlock::Thinking {
                thinking: "Let me look.".to_string(),
                signature: "sig".to_string(),
            });
        }
        match spec.text {
            0 => {}
            1 => content.push(ContentBlock::text("")),
            _ => content.push(ContentBlock::text("Working on it.")),
        }
        for (tool, input) in &spec.calls {
            let id = self.fresh_id();
            content.push(ContentBlock::ToolUse {
                id,
                name: TOOLS[usize::from(*tool) % TOOLS.len()].to_string(),
                input: inputs()[usize::from(*input) % 3].clone(),
            });
        }
        let stop = if spec.calls.is_empty() {
            match spec.stop {
                0..=5 | 15 => StopReason::EndTurn,
                6 | 7 => StopReason::PauseTurn,
                8 => StopReason::MaxTokens,
                9 => StopReason::Refusal,
                10 => StopReason::Other("brand_new_reason".to_string()),
                11 => StopReason::StopSequence,
                12 => StopReason::ToolUse,
                13 => StopReason::ModelContextWindowExceeded,
                _ => StopReason::ContentFiltered,
            }
        } else {
            match spec.stop {
                0..=9 => StopReason::ToolUse,
                10 => StopReason::EndTurn,
                11 => StopReason::MaxTokens,
                12 => StopReason::PauseTurn,
                13 => StopReason::Refusal,
                14 => StopReason::Other("brand_new_reason".to_string()),
                _ => StopReason::StopSequence,
            }
        };
        let usage = if spec.big {
            Usage {
                input_tokens: 150_000,
                cache_read_input_tokens: 30_000,
                output_tokens: 2_000,
                ..Usage::default()
            }
        } else {
            small_usage()
        };
        Reply {
            content,
            stop_reason: stop,
            usage,
        }
    }

    fn partial_block(&mut self, k: u8) -> ContentBlock {
        match k % 6 {
            0 => ContentBlock::text("I'll start by"),
            1 => ContentBlock::text(""),
            2 => ContentBlock::Thinking {
                thinking: "hmm".to_string(),
                signature: "sig".to_string(),
            },
            3 => ContentBlock::Thinking {
                thinking: "cut off".to_string(),
                signature: String::new(),
            },
            4 => ContentBlock::RedactedThinking {
                data: "xyz".to_string(),
            },
            _ => ContentBlock::ToolUse {
                id: self.fresh_id(),
                name: "bash".to_string(),
                input: json!("{\"cmd\": \"car"),
            },
        }
    }

    fn answer(&mut self, decision: u8, id: u8, feedback: u8) {
        let decision = DECISIONS[usize::from(decision) % DECISIONS.len()];
        let feedback = match feedback % 3 {
            0 => None,
            1 => Some("try a smaller change first".to_string()),
            _ => Some("  ".to_string()),
        };
        let pending = self.state.pending_permission().cloned();
        let request_id = match (id % 4, &pending) {
            (1, _) => String::new(),
            (2, _) | (_, None) => "perm-ghost".to_string(),
            (_, Some(ask)) => ask.request_id.clone(),
        };
        let ok = match &pending {
            Some(ask) => {
                (request_id.is_empty() || request_id == ask.request_id)
                    && ask.options.contains(&decision)
            }
            None => false,
        };
        self.feed_expecting(
            Event::PermissionAnswered {
                request_id,
                decision,
                feedback,
                scope: RuleScope::Conversation,
                by: None,
            },
            ok,
        );
    }

    /// The daemon dies: the request in flight, the timer and the tools die
    /// with it (their reports never come). It starts again and feeds
    /// `DaemonRestarted`.
    fn restart(&mut self) {
        self.llm = Llm::None;
        self.timer = false;
        self.running.clear();
        self.hooks = Hooks::None;
        self.feed_expecting(Event::DaemonRestarted, true);
    }

    /// A clean stop: `DaemonStopping` is fed while the work is still there
    /// (its effects abort the tools); then the daemon is gone and starts
    /// again as after a kill.
    fn stop(&mut self) {
        self.stopping = true;
        self.feed_expecting(Event::DaemonStopping, true);
        self.stopping = false;
        self.restart();
    }

    // --- The world answers until the conversation rests. ---

    /// Answers everything outstanding, with a model that never ends its turn
    /// by itself (it always asks for tools or pauses); the iteration guard
    /// must end it. Reports (f) if rest is not reached in a bounded number
    /// of steps.
    fn drain(&mut self, phase: &str) {
        // Leftovers: up to 4 calls (each may ask first), an abort, retries;
        // then at most 3 steps per model round.
        // Hooks answer once per call (2 per round) and continue a turn at
        // most twice (a round each).
        let mut bound = 16 + 2 * self.max_attempts + 6 * self.max_iterations;
        // Messages queued now may start one more turn when this one ends.
        if !self.queued.is_empty() {
            bound += 16 + 2 * self.max_attempts + 6 * self.max_iterations;
        }
        let mut steps = 0;
        while !self.state.is_at_rest() {
            if steps == bound {
                let state = self.state.clone();
                self.violate(
                    Prop::ComesToRest,
                    format!("{phase}: not at rest after {bound} steps: {state:?}"),
                );
                return;
            }
            steps += 1;
            match self.llm {
                Llm::Aborting { .. } => {
                    self.llm = Llm::None;
                    let partial = vec![ContentBlock::text("partial")];
                    self.feed(Event::LlmAborted { partial });
                }
                Llm::InFlight { continuation: true } => {
                    self.llm = Llm::None;
                    self.feed(Event::ContinuationCompleted {
                        summary: "summary".to_string(),
                        usage: small_usage(),
                    });
                }
                Llm::InFlight {
                    continuation: false,
                } => {
                    self.llm = Llm::None;
                    let reply = self.endless_reply(steps);
                    self.feed(Event::LlmCompleted { reply });
                }
                Llm::None if self.timer => {
                    self.timer = false;
                    self.feed(Event::RetryDue);
                }
                Llm::None if self.hooks != Hooks::None => {
                    // Hooks that allow, and stop hooks that always want more:
                    // the cap on continuations must end the turn.
                    self.hook_answer(if steps.is_multiple_of(2) { 1 } else { 0 }, false);
                }
                Llm::None if !self.running.is_empty() => {
                    let call = self.running.remove(0);
                    let result = ToolResult::new(&call.id, "ok", false);
                    self.feed(Event::ToolCompleted { result });
                }
                Llm::None => match self.state.pending_permission().cloned() {
                    Some(ask) => {
                        self.feed(Event::PermissionAnswered {
                            request_id: ask.request_id,
                            decision: Decision::AllowOnce,
                            feedback: None,
                            scope: RuleScope::Conversation,
                            by: None,
                        });
                    }
                    None => {
                        let state = self.state.clone();
                        self.violate(
                            Prop::ComesToRest,
                            format!("{phase}: stuck, nothing outstanding in {state:?}"),
                        );
                        return;
                    }
                },
            }
        }
    }

    fn endless_reply(&mut self, step: u32) -> Reply {
        let content = if step.is_multiple_of(3) {
            vec![ContentBlock::text("Still going.")]
        } else {
            let read = self.fresh_id();
            let bash = self.fresh_id();
            vec![
                ContentBlock::ToolUse {
                    id: read,
                    name: "read".to_string(),
                    input: json!({"step": step}),
                },
                ContentBlock::ToolUse {
                    id: bash,
                    name: "bash".to_string(),
                    input: json!({"step": step}),
                },
            ]
        };
        let stop = if step.is_multiple_of(3) {
            // With stop hooks (which always want more here), the model
            // ends its turn: the cap on continuations must end it.
            if self.ctx.hooks.stop {
                StopReason::EndTurn
            } else {
                StopReason::PauseTurn
            }
        } else {
            StopReason::ToolUse
        };
        Reply {
            content,
            stop_reason: stop,
            usage: small_usage(),
        }
    }
}

fn small_usage() -> Usage {
    Usage {
        input_tokens: 2_000,
        output_tokens: 300,
        ..Usage::default()
    }
}

/// Whether a request boundary now would be held at a budget.
fn budget_reached(ctx: &ConvContext) -> bool {
    agentd_core::budget::check(&ctx.budget).is_some()
}

fn expect(ok: bool, what: &str) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what.to_string()) }
}

/// The seed's refusal text for a user message in `state`, or None where a
/// user message is taken.
fn expected_refusal(state: &ConvState) -> Option<&'static str> {
    match state {
        ConvState::Idle | ConvState::Error { .. } | ConvState::BudgetStopped { .. } => None,
        ConvState::Cancelling { .. } => Some("cancellation in progress"),
        ConvState::ContextExhausted { .. } => Some("context exhausted"),
        ConvState::AwaitingLlm { .. }
        | ConvState::LlmRequesting { .. }
        | ConvState::ToolExecuting(_)
        | ConvState::StopHooks { .. }
        | ConvState::AwaitingSubAgents { .. }
        | ConvState::AwaitingContinuation { .. } => Some("agent is busy"),
    }
}

fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(
    value: &T,
) -> Result<T, serde_json::Error> {
    serde_json::from_str(&serde_json::to_string(value)?)
}

fn tool_use_ids(m: &Message) -> Vec<&str> {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

fn tool_result_ids(m: &Message) -> Vec<&str> {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect()
}

/// (a): every assistant tool_use is answered by exactly one tool_result with
/// the same id in the next message, whose role is user (in the model's
/// order), and no tool_result answers anything else. `trailing`: the ids of
/// a last assistant message allowed to wait for its results.
fn check_transcript(transcript: &[Message], trailing: Option<&Vec<String>>) -> Result<(), String> {
    for (i, m) in transcript.iter().enumerate() {
        let uses = tool_use_ids(m);
        let results = tool_result_ids(m);
        if m.role == Role::Assistant && !results.is_empty() {
            return Err(format!("message {i}: tool_result in an assistant message"));
        }
        if m.role == Role::User && !uses.is_empty() {
            return Err(format!("message {i}: tool_use in a user message"));
        }
        if !uses.is_empty() {
            match transcript.get(i + 1) {
                None => {
                    let waiting = trailing
                        .is_some_and(|t| t.iter().map(String::as_str).eq(uses.iter().copied()));
                    if !waiting {
                        return Err(format!("message {i}: tool_use {uses:?} never answered"));
                    }
                }
                Some(next) => {
                    if next.role != Role::User {
                        return Err(format!(
                            "message {i}: tool_use {uses:?} followed by an assistant message"
                        ));
                    }
                    let answers = tool_result_ids(next);
                    if answers != uses {
                        return Err(format!(
                            "message {i}: tool_use {uses:?} answered by {answers:?}"
                        ));
                    }
                }
            }
        }
        if !results.is_empty() {
            let asked = i.checked_sub(1).map(|j| tool_use_ids(&transcript[j]));
            if asked.as_ref() != Some(&results) {
                return Err(format!(
                    "message {i}: tool_result {results:?} answers {asked:?}"
                ));
            }
        }
    }
    Ok(())
}

/// What the provider refuses outright in a request: an empty message or an
/// empty text block ("text content blocks must be non-empty").
fn check_sendable(transcript: &[Message]) -> Result<(), String> {
    for (i, m) in transcript.iter().enumerate() {
        if m.content.is_empty() {
            return Err(format!("message {i} is empty"));
        }
        if m.content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text { text } if text.is_empty()))
        {
            return Err(format!("message {i} has an empty text block"));
        }
    }
    Ok(())
}

fn dump(transcript: &[Message]) -> String {
    let mut out = String::new();
    for (i, m) in transcript.iter().enumerate() {
        let blocks: Vec<String> = m
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::Text { text } => format!("text {text:?}"),
                ContentBlock::Thinking { .. } => "thinking".to_string(),
                ContentBlock::RedactedThinking { .. } => "redacted".to_string(),
                ContentBlock::ServerTool { block } => format!("server {block}"),
                ContentBlock::Image(image) => format!("image {}", image.sha256),
                ContentBlock::ToolUse { id, name, .. } => format!("tool_use {id} {name}"),
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    ..
                } => {
                    format!("result {tool_use_id} {content:?}")
                }
            })
            .collect();
        out.push_str(&format!(
            "      {i:>2} {:?}: {}\n",
            m.role,
            blocks.join(" | ")
        ));
    }
    out
}

/// Runs one case, checking `prop`; returns the violations.
fn simulate(prop: Prop, setup: &Setup, actions: &[Action]) -> Vec<String> {
    let mut sim = Sim::new(prop, setup);
    sim.user_message("fix the failing test");
    for action in actions {
        sim.act(action);
    }
    sim.drain("after the actions");
    // A new user turn, driven to rest by the endless model.
    if matches!(sim.state, ConvState::Idle | ConvState::Error { .. }) {
        sim.user_message("one more thing");
        sim.drain("a new turn");
        // (h): that turn took whatever was queued, and ended normally or
        // failed; a normal end leaves nothing queued.
        if matches!(sim.state, ConvState::Idle) && !sim.queued.is_empty() {
            let left = sim.queued.clone();
            sim.violate(
                Prop::QueueDelivered,
                format!("still queued after a turn ended: {left:?}"),
            );
        }
    }
    sim.check_tools_answered();
    sim.violations
}

fn report(violations: &[String]) -> String {
    violations
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------
// The properties.
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig {
        cases: CASES,
        // Integration tests have no lib.rs beside them: keep regressions
        // next to this file.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    /// (a) At rest and at every request, every assistant tool_use is answered
    /// by exactly one tool_result with the same id in the next message, whose
    /// role is user, and no tool_result answers nothing.
    #[test]
    fn a_transcript_is_valid_at_rest_and_at_every_request((setup, actions) in case_strategy()) {
        let v = simulate(Prop::TranscriptValid, &setup, &actions);
        prop_assert!(v.is_empty(), "{}", report(&v));
    }

    /// (b) The same state, context and event give the same result.
    #[test]
    fn b_transition_is_deterministic((setup, actions) in case_strategy()) {
        let v = simulate(Prop::Deterministic, &setup, &actions);
        prop_assert!(v.is_empty(), "{}", report(&v));
    }

    /// (c) Busy states refuse user messages with the seed's texts, and a
    /// refused event changes nothing.
    #[test]
    fn c_busy_states_refuse_user_messages((setup, actions) in case_strategy()) {
        let v = simulate(Prop::BusyRejects, &setup, &actions);
        prop_assert!(v.is_empty(), "{}", report(&v));
    }

    /// (d) Every ExecuteTool is eventually answered by a result in the
    /// transcript, or named by an AbortTools.
    #[test]
    fn d_every_executed_tool_is_answered((setup, actions) in case_strategy()) {
        let v = simulate(Prop::ToolsAnswered, &setup, &actions);
        prop_assert!(v.is_empty(), "{}", report(&v));
    }

    /// (e) At most one mutating tool runs at a time, and never alongside
    /// another tool.
    #[test]
    fn e_a_mutating_tool_runs_alone((setup, actions) in case_strategy()) {
        let v = simulate(Prop::MutationAlone, &setup, &actions);
        prop_assert!(v.is_empty(), "{}", report(&v));
    }

    /// (f) When the world answers, the conversation comes to rest within a
    /// bounded number of steps — even with a model that never stops.
    #[test]
    fn f_the_conversation_comes_to_rest((setup, actions) in case_strategy()) {
        let v = simulate(Prop::ComesToRest, &setup, &actions);
        prop_assert!(v.is_empty(), "{}", report(&v));
    }

    /// (g) Every state survives a JSON round trip and, reloaded, decides the
    /// next event the same way.
    #[test]
    fn g_state_round_trips_through_json((setup, actions) in case_strategy()) {
        let v = simulate(Prop::SerdeRoundTrip, &setup, &actions);
        prop_assert!(v.is_empty(), "{}", report(&v));
    }

    /// (h) A message queued while a turn runs reaches the transcript once,
    /// in a user message, when the core says it delivered it, and not
    /// before; a turn that ends normally leaves nothing queued.
    #[test]
    fn h_queued_messages_are_delivered_once((setup, actions) in case_strategy()) {
        let v = simulate(Prop::QueueDelivered, &setup, &actions);
        prop_assert!(v.is_empty(), "{}", report(&v));
    }
}

/// The generator must reach the interesting places, or the properties hold
/// vacuously. Counts, over a fixed sample, how many cases got there.
#[test]
fn the_generated_cases_reach_the_interesting_places() {
    /// Cases sampled (the queue action made some places rarer per case).
    const SAMPLE: usize = 400;
    #[derive(Default, Debug)]
    struct Seen {
        tools_ran: u32,
        concurrent_reads: u32,
        permission_asked: u32,
        cancelled_tools: u32,
        cancelled_stream: u32,
        retried: u32,
        restarted_busy: u32,
        iteration_guard: u32,
        deny_and_stop: u32,
        continuation: u32,
        error: u32,
        hooks_decided: u32,
        stop_hook_continued: u32,
        queue_delivered: u32,
        queue_kept: u32,
        budget_held: u32,
        budget_raised: u32,
    }
    let mut seen = Seen::default();
    let mut runner = TestRunner::deterministic();
    for _ in 0..SAMPLE {
        let (setup, actions) = case_strategy().new_tree(&mut runner).unwrap().current();
        let mut sim = Sim::new(Prop::World, &setup);
        sim.user_message("fix the failing test");
        let mut flags = [false; 17];
        for action in &actions {
            let busy = !sim.state.is_at_rest();
            let before = sim.state.clone();
            sim.act(action);
            let after = &sim.state;
            flags[0] |= !sim.started.is_empty();
            flags[1] |= sim.running.len() >= 2;
            flags[2] |= after.pending_permission().is_some();
            flags[3] |=
                matches!(action, Action::Cancel) && matches!(before, ConvState::ToolExecuting(_));
            flags[4] |= matches!(after, ConvState::Cancelling { .. });
            flags[5] |= matches!(after, ConvState::LlmRequesting { retry: Some(_), .. });
            flags[6] |= matches!(action, Action::Restart) && busy;
            flags[7] |= matches!(after, ConvState::Error { message, .. } if message == texts::ERR_MAX_ITERATIONS);
            flags[8] |= sim.transcript.last().is_some_and(|m| {
                m.content.iter().any(|b| matches!(b, ContentBlock::ToolResult { content, .. } if content.starts_with(texts::INTERRUPT_TOOL)))
            });
            // A deny-and-stop with feedback goes on with the feedback.
            flags[8] |= matches!(action, Action::Answer { decision, .. }
                if DECISIONS[usize::from(*decision) % DECISIONS.len()] == Decision::DenyAndStop)
                && before.pending_permission().is_some()
                && after.pending_permission().is_none();
            flags[9] |= matches!(after, ConvState::ContextExhausted { .. });
            flags[10] |= matches!(after, ConvState::Error { .. });
            flags[11] |= matches!(action, Action::Hook { .. })
                && matches!(&before, ConvState::ToolExecuting(run) if run.hooking.is_some());
            // A turn held at a budget mid-turn (after tool results), and
            // one sent on by a raise.
            flags[15] |=
                matches!(after, ConvState::BudgetStopped { iteration, .. } if *iteration > 1);
            flags[16] |= matches!(before, ConvState::BudgetStopped { .. })
                && matches!(after, ConvState::LlmRequesting { .. });
        }
        // The drain's stop hooks always want more: the cap ends the turn.
        sim.drain("coverage");
        flags[12] |= sim
            .transcript
            .iter()
            .any(|m| m.role == Role::User && m.text().starts_with(texts::STOP_HOOK_PREFIX));
        flags[13] |= !sim.delivered.is_empty();
        // Queued messages that waited out a cancel or a failure.
        flags[14] |= !sim.queued.is_empty();
        let counters = [
            &mut seen.tools_ran,
            &mut seen.concurrent_reads,
            &mut seen.permission_asked,
            &mut seen.cancelled_tools,
            &mut seen.cancelled_stream,
            &mut seen.retried,
            &mut seen.restarted_busy,
            &mut seen.iteration_guard,
            &mut seen.deny_and_stop,
            &mut seen.continuation,
            &mut seen.error,
            &mut seen.hooks_decided,
            &mut seen.stop_hook_continued,
            &mut seen.queue_delivered,
            &mut seen.queue_kept,
            &mut seen.budget_held,
            &mut seen.budget_raised,
        ];
        for (counter, flag) in counters.into_iter().zip(flags) {
            *counter += u32::from(flag);
        }
        assert!(sim.violations.is_empty(), "{}", report(&sim.violations));
    }
    println!("{seen:?}");
    let Seen {
        tools_ran,
        concurrent_reads,
        permission_asked,
        cancelled_tools,
        cancelled_stream,
        retried,
        restarted_busy,
        iteration_guard,
        deny_and_stop,
        continuation,
        error,
        hooks_decided,
        stop_hook_continued,
        queue_delivered,
        queue_kept,
        budget_held,
        budget_raised,
    } = seen;
    for (what, n) in [
        ("tools ran", tools_ran),
        ("reads ran together", concurrent_reads),
        ("a permission was asked", permission_asked),
        ("running tools were cancelled", cancelled_tools),
        ("a stream was cancelled", cancelled_stream),
        ("a request was retried", retried),
        ("a busy daemon restarted", restarted_busy),
        ("the iteration guard stopped a turn", iteration_guard),
        ("a user denied and stopped", deny_and_stop),
        ("the context was exhausted", continuation),
        ("a turn failed", error),
        ("pre_tool_use hooks decided", hooks_decided),
        ("a stop hook continued a turn", stop_hook_continued),
        ("queued messages were delivered", queue_delivered),
        ("queued messages waited out a cancel or failure", queue_kept),
        ("a budget held a turn after a tool round", budget_held),
        ("a raise sent a held request", budget_raised),
    ] {
        assert!(n >= 5, "only {n} of {SAMPLE} cases: {what}");
    }
}
