//! Property tests of the sub-agent rows of the transition matrix
//! (REQ-BED-008/009/024): a parent waiting for its children, and a child
//! coming to its end.
//!
//! Parent: a reply asks for `spawn_agents` (1–5 agents), maybe followed by
//! a read. Then the world does random things: children end (in any order),
//! stale and duplicate reports arrive (before and after a cancel), the
//! daemon restarts, users send messages and cancel. Whatever happens:
//! - the spawn call is answered exactly once, in the user message right
//!   after the reply that asked for it;
//! - an answer that is not a cancellation names every child exactly once,
//!   in the order they were asked for, with the result it reported;
//! - a child's report is taken only while the parent waits for it: twice,
//!   late, or after a cancel it is refused;
//! - a cancel cancels exactly the children still running; a restart asks
//!   again for exactly those (and no child is started twice otherwise);
//! - what a child used is counted once, however often its end is
//!   reported, whether the report was taken or (late) refused;
//! - the conversation comes to rest once the world answers what is
//!   outstanding.
//!
//! Child: replies with text, reads, `submit_result` (good or bad input),
//! attempts to nest, failures and cancels. Whatever happens, each stretch
//! of work that comes to rest reports exactly one end (`FinishSubAgent`),
//! and only then; the reminder to call `submit_result` is sent at most once
//! before the text counts as the result.

#![expect(clippy::unwrap_used)]

use agentd_core::effect::{Effect, SubAgentOutcome};
use agentd_core::event::{Event, LlmFailure};
use agentd_core::message::{ContentBlock, Message, Reply, Role, StopReason, Usage};
use agentd_core::state::{
    ContextExhaustionBehavior, ConvContext, ConvState, ErrorKind, SubAgentResult, SubAgentRole,
};
use agentd_core::texts;
use agentd_core::transition::transition;
use agentd_core::{Conversation, SubAgents};
use proptest::prelude::*;
use serde_json::{Value, json};

#[derive(Debug, Clone)]
enum ParentAction {
    /// A running child ends (picked among them).
    Finish {
        pick: u8,
        success: bool,
    },
    /// A report for a child that is not running (ended, cancelled, or an
    /// id never spawned).
    Stale {
        pick: u8,
    },
    Cancel,
    Restart,
    User,
}

fn parent_action() -> impl Strategy<Value = ParentAction> {
    prop_oneof![
        5 => (any::<u8>(), any::<bool>()).prop_map(|(pick, success)| ParentAction::Finish { pick, success }),
        2 => any::<u8>().prop_map(|pick| ParentAction::Stale { pick }),
        1 => Just(ParentAction::Cancel),
        1 => Just(ParentAction::Restart),
        1 => Just(ParentAction::User),
    ]
}

fn reply(content: Vec<ContentBlock>, stop: StopReason) -> Event {
    Event::LlmCompleted {
        reply: Reply {
            content,
            stop_reason: stop,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 10,
                ..Usage::default()
            },
        },
    }
}

fn spawn_input(n: usize) -> Value {
    let agents: Vec<Value> = (1..=n)
        .map(|i| json!({"description": format!("task {i}"), "prompt": format!("do {i}")}))
        .collect();
    json!({ "agents": agents })
}

/// The parent as the runtime drives it.
struct Parent {
    ctx: ConvContext,
    state: ConvState,
    transcript: Vec<Message>,
    /// Children started and not ended, cancelled or reported.
    running: Vec<String>,
    /// Every child ever started (a restart may ask again for running ones).
    spawned: Vec<String>,
    /// Children whose end was reported and taken, with their result text.
    reported: Vec<(String, String, bool)>,
    /// Children cancelled.
    cancelled: Vec<String>,
    /// What the children used, as the conversation counts it.
    sub_agents: SubAgents,
    /// The conversation ids of every child whose end was reported.
    ended: Vec<String>,
    /// The read after the spawn call runs.
    read_running: bool,
    llm_in_flight: bool,
}

impl Parent {
    fn apply(&mut self, event: Event) -> Result<(), String> {
        let conv = Conversation {
            sub_agents: self.sub_agents.clone(),
            ..self.state.clone().into()
        };
        let t = transition(&conv, &self.ctx, event.clone()).map_err(|e| e.to_string())?;
        let again = transition(&conv, &self.ctx, event).map_err(|e| e.to_string())?;
        assert_eq!(t, again, "transition is not deterministic");
        self.sub_agents = t.conversation.sub_agents;
        let restarting = matches!(self.state, ConvState::AwaitingSubAgents { .. });
        let before_pending = match &self.state {
            ConvState::AwaitingSubAgents { pending_ids, .. } => pending_ids.clone(),
            _ => Vec::new(),
        };
        self.state = t.conversation.state;
        for effect in t.effects {
            match effect {
                Effect::AppendMessage { message } => self.transcript.push(message),
                Effect::SpawnSubAgent { agent_id, .. } => {
                    if self.spawned.contains(&agent_id) {
                        // Only a restart asks again, and only for a child
                        // the parent still waits for.
                        assert!(
                            restarting && before_pending.contains(&agent_id),
                            "{agent_id} started twice"
                        );
                        assert!(
                            self.running.contains(&agent_id),
                            "{agent_id} is not running"
                        );
                    } else {
                        self.spawned.push(agent_id.clone());
                        self.running.push(agent_id);
                    }
                }
                Effect::CancelSubAgents { agent_ids } => {
                    let mut a = agent_ids.clone();
                    let mut b = self.running.clone();
                    a.sort();
                    b.sort();
                    assert_eq!(a, b, "cancel must name exactly the running children");
                    self.cancelled.extend(agent_ids);
                    self.running.clear();
                }
                Effect::ExecuteTool { call, .. } => {
                    assert_eq!(call.name, "read");
                    self.read_running = true;
                }
                Effect::AbortTools { .. } => self.read_running = false,
                Effect::RequestLlm { .. } => self.llm_in_flight = true,
                Effect::AbortLlm => self.llm_in_flight = false,
                Effect::FinishSubAgent { .. } => panic!("a parent is not a sub-agent"),
                _ => {}
            }
        }
        Ok(())
    }

    fn finish(&mut self, agent: &str, success: bool) -> Result<(), String> {
        let result = format!("result of {agent}");
        let child = format!("conv-{agent}");
        let used = Usage {
            input_tokens: 10,
            ..Usage::default()
        };
        let r = self.apply(Event::SubAgentFinished {
            result: SubAgentResult {
                agent_id: agent.to_string(),
                result: result.clone(),
                success,
                conversation_id: child.clone(),
            },
            usage: used,
            cost_usd: 0.5,
        });
        if r.is_ok() {
            self.running.retain(|a| a != agent);
            self.reported.push((agent.to_string(), result, success));
        } else {
            // A late end is counted by the runtime, as the core counts.
            self.sub_agents.count(&child, &used, 0.5);
        }
        self.ended.push(child);
        r
    }

    /// Answers what is outstanding until the conversation is at rest.
    fn settle(&mut self) {
        for _ in 0..50 {
            if self.state.is_at_rest() {
                return;
            }
            if let Some(agent) = self.running.first().cloned() {
                self.finish(&agent, true).unwrap();
            } else if self.read_running {
                self.read_running = false;
                self.apply(Event::ToolCompleted {
                    result: agentd_core::ToolResult::new("t2", "contents", false),
                })
                .unwrap();
            } else if self.llm_in_flight {
                self.llm_in_flight = false;
                self.apply(reply(vec![ContentBlock::text("ok")], StopReason::EndTurn))
                    .unwrap();
            } else {
                panic!("busy with nothing outstanding: {:?}", self.state.name());
            }
        }
        panic!("did not come to rest");
    }
}

/// The texts of the answers to `id` in the transcript, and whether each is
/// in the user message right after the assistant message that asked.
fn answers(transcript: &[Message], id: &str) -> Vec<(String, bool)> {
    let asked = transcript.iter().position(|m| {
        m.role == Role::Assistant
            && m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolUse { id: i, .. } if i == id))
    });
    let mut out = Vec::new();
    for (i, m) in transcript.iter().enumerate() {
        for b in &m.content {
            if let ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } = b
                && tool_use_id == id
            {
                let next = asked.is_some_and(|a| a + 1 == i) && m.role == Role::User;
                out.push((content.clone(), next));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_parent_answers_its_spawn_call_exactly_once(
        n in 1usize..=5,
        with_read in any::<bool>(),
        actions in prop::collection::vec(parent_action(), 0..30),
    ) {
        let mut p = Parent {
            ctx: ConvContext { now_ms: 1, ..ConvContext::default() },
            state: ConvState::LlmRequesting { attempt: 1, iteration: 1, retry: None, early: Default::default() },
            transcript: vec![Message::user(vec![ContentBlock::text("go")], 1)],
            running: Vec::new(),
            spawned: Vec::new(),
            reported: Vec::new(),
            cancelled: Vec::new(),
            sub_agents: SubAgents::default(),
            ended: Vec::new(),
            read_running: false,
            llm_in_flight: true,
        };
        let mut content = vec![ContentBlock::ToolUse {
            id: "t1".into(),
            name: "spawn_agents".into(),
            input: spawn_input(n),
        }];
        if with_read {
            content.push(ContentBlock::ToolUse {
                id: "t2".into(),
                name: "read".into(),
                input: json!({"path": "a"}),
            });
        }
        p.llm_in_flight = false;
        p.apply(reply(content, StopReason::ToolUse)).unwrap();
        prop_assert_eq!(p.running.len(), n);
        for action in actions {
            let waiting = matches!(p.state, ConvState::AwaitingSubAgents { .. });
            match action {
                ParentAction::Finish { pick, success } => {
                    if p.running.is_empty() { continue; }
                    let agent = p.running[pick as usize % p.running.len()].clone();
                    let r = p.finish(&agent, success);
                    prop_assert!(r.is_ok() == waiting, "running child's end: {:?} in {}", r, p.state.name());
                }
                ParentAction::Stale { pick } => {
                    let mut stale: Vec<String> = p.reported.iter().map(|r| r.0.clone()).collect();
                    stale.extend(p.cancelled.iter().cloned());
                    stale.push("agent_9_t1".to_string());
                    let agent = stale[pick as usize % stale.len()].clone();
                    let before = p.state.clone();
                    let r = p.finish(&agent, true);
                    prop_assert!(r.is_err(), "stale report of {} taken", agent);
                    prop_assert_eq!(&p.state, &before);
                }
                ParentAction::Cancel => {
                    p.llm_in_flight = false;
                    let r = p.apply(Event::UserCancel);
                    prop_assert!(r.is_ok());
                    if let ConvState::Cancelling { .. } = p.state {
                        p.apply(Event::LlmAborted { partial: Vec::new() }).unwrap();
                    }
                }
                ParentAction::Restart => {
                    if p.llm_in_flight || p.read_running {
                        continue;
                    }
                    p.apply(Event::DaemonRestarted).unwrap();
                }
                ParentAction::User => {
                    let r = p.apply(Event::UserMessage { text: "more".into(), images: Vec::new(), sending: Default::default() });
                    if waiting {
                        prop_assert_eq!(r.unwrap_err(), texts::AGENT_IS_BUSY);
                    }
                }
            }
        }
        p.settle();
        // Exactly one answer, right after the reply that asked.
        let spawn = answers(&p.transcript, "t1");
        prop_assert_eq!(spawn.len(), 1, "spawn answered {:?}", spawn);
        prop_assert!(spawn[0].1, "the answer is not in the next user message");
        let text = &spawn[0].0;
        if text == texts::CANCELLED_BY_USER {
            prop_assert!(!p.cancelled.is_empty(), "cancelled with no child running");
        } else {
            // Every child once, in the order asked, with its result.
            prop_assert!(text.starts_with("synthesis_t1: "));
            let mut last = 0;
            for k in 1..=n {
                let agent = format!("agent_{k}_t1");
                let head = format!("## {agent} (conversation conv-{agent})");
                prop_assert_eq!(text.matches(&head).count(), 1, "{} in {}", agent, text);
                let at = text.find(&head).unwrap();
                prop_assert!(at > last, "results out of order: {}", text);
                last = at;
                let (_, result, _) = p.reported.iter().find(|r| r.0 == agent).unwrap();
                prop_assert!(text[at..].contains(result.as_str()));
            }
        }
        if with_read {
            prop_assert_eq!(answers(&p.transcript, "t2").len(), 1);
        }
        // After a cancel, late reports of the cancelled children are refused.
        for agent in p.cancelled.clone() {
            prop_assert!(p.finish(&agent, true).is_err());
        }
        // Every child that ended is counted, once.
        let mut ended = p.ended.clone();
        ended.sort();
        ended.dedup();
        let mut counted = p.sub_agents.counted.clone();
        counted.sort();
        prop_assert_eq!(&counted, &ended);
        prop_assert_eq!(p.sub_agents.usage.input_tokens, 10 * ended.len() as u64);
        prop_assert_eq!(p.sub_agents.cost_usd, 0.5 * ended.len() as f64);
    }
}

#[derive(Debug, Clone)]
enum ChildAction {
    Text,
    Read,
    Submit { good: bool },
    Nest,
    Huge,
    Fail,
    Cancel,
}

fn child_action() -> impl Strategy<Value = ChildAction> {
    prop_oneof![
        3 => Just(ChildAction::Text),
        2 => Just(ChildAction::Read),
        2 => any::<bool>().prop_map(|good| ChildAction::Submit { good }),
        1 => Just(ChildAction::Nest),
        1 => Just(ChildAction::Huge),
        1 => Just(ChildAction::Fail),
        1 => Just(ChildAction::Cancel),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_child_reports_one_end_per_stretch_of_work(
        actions in prop::collection::vec(child_action(), 1..40),
    ) {
        let mut ctx = ConvContext {
            now_ms: 1,
            exhaustion: ContextExhaustionBehavior::IntentionallyUnhandled,
            sub_agent: Some(SubAgentRole::default()),
            ..ConvContext::default()
        };
        let mut state = ConvState::Idle;
        let mut transcript: Vec<Message> = Vec::new();
        let mut ends: Vec<SubAgentOutcome> = Vec::new();
        let mut next_id = 0;
        for action in actions {
            // A stretch of work begins with a user message (its task).
            if state.is_at_rest() {
                let t = transition(&state.clone().into(), &ctx, Event::UserMessage { text: "task".into(), images: Vec::new(), sending: Default::default() });
                let Ok(t) = t else { break };
                state = t.conversation.state;
                for e in t.effects {
                    if let Effect::AppendMessage { message } = e { transcript.push(message) }
                }
                ends.clear();
            }
            next_id += 1;
            let id = format!("t{next_id}");
            let event = match (&state, &action) {
                (ConvState::ToolExecuting(run), _) if !run.running.is_empty() => match action {
                    ChildAction::Cancel => Event::UserCancel,
                    _ => Event::ToolCompleted {
                        result: agentd_core::ToolResult::new(run.running[0].clone(), "ok", false),
                    },
                },
                (_, ChildAction::Cancel) => Event::UserCancel,
                (_, ChildAction::Fail) => Event::LlmFailed {
                    failure: LlmFailure {
                        kind: ErrorKind::Auth,
                        retryable: false,
                        message: "denied".into(),
                        retry_after_ms: None,
                    },
                    jitter_permille: 0,
                },
                (_, ChildAction::Text) => reply(vec![ContentBlock::text("thinking")], StopReason::EndTurn),
                (_, ChildAction::Read) => reply(
                    vec![ContentBlock::ToolUse { id, name: "read".into(), input: json!({"path": "a"}) }],
                    StopReason::ToolUse,
                ),
                (_, ChildAction::Submit { good }) => reply(
                    vec![ContentBlock::ToolUse {
                        id,
                        name: "submit_result".into(),
                        input: if *good { json!({"result": "r"}) } else { json!({"result": 3}) },
                    }],
                    StopReason::ToolUse,
                ),
                (_, ChildAction::Nest) => reply(
                    vec![ContentBlock::ToolUse { id, name: "spawn_agents".into(), input: spawn_input(1) }],
                    StopReason::ToolUse,
                ),
                (_, ChildAction::Huge) => Event::LlmCompleted {
                    reply: Reply {
                        content: vec![ContentBlock::text("big")],
                        stop_reason: StopReason::EndTurn,
                        usage: Usage { input_tokens: 199_000, ..Usage::default() },
                    },
                },
            };
            let was_busy = !state.is_at_rest();
            let Ok(t) = transition(&state.clone().into(), &ctx, event) else { continue };
            let mut finished = Vec::new();
            for e in t.effects {
                match e {
                    Effect::AppendMessage { message } => transcript.push(message),
                    Effect::FinishSubAgent { outcome } => finished.push(outcome),
                    Effect::SpawnSubAgent { .. } | Effect::CancelSubAgents { .. } => {
                        prop_assert!(false, "a sub-agent started or cancelled sub-agents");
                    }
                    _ => {}
                }
            }
            if let ConvState::Cancelling { .. } = t.conversation.state {
                state = t.conversation.state;
                let t = transition(&state.clone().into(), &ctx, Event::LlmAborted { partial: Vec::new() }).unwrap();
                for e in t.effects {
                    match e {
                        Effect::AppendMessage { message } => transcript.push(message),
                        Effect::FinishSubAgent { outcome } => finished.push(outcome),
                        _ => {}
                    }
                }
                state = t.conversation.state;
            } else {
                state = t.conversation.state;
            }
            // One end exactly when the work comes to rest.
            let at_rest = state.is_at_rest();
            prop_assert_eq!(finished.len(), usize::from(was_busy && at_rest), "ends {:?} in {}", finished, state.name());
            ends.extend(finished);
            prop_assert!(ends.len() <= 1);
            // The runtime tells the core whether the reminder was sent.
            let reminders = transcript
                .iter()
                .filter(|m| m.role == Role::User && m.text() == texts::SUBMIT_RESULT_REMINDER)
                .count();
            prop_assert!(reminders <= 1, "reminded {} times", reminders);
            ctx.sub_agent = Some(SubAgentRole { reminded: reminders > 0 });
            if let Some(SubAgentOutcome::LastText) = ends.first() {
                prop_assert_eq!(reminders, 1, "the last text counts only after the reminder");
            }
        }
    }
}
