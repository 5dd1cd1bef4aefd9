//! The runtime on tokio's paused time, for the actor's and the manager's
//! tests: a real store in a temporary directory, a scripted model, and the
//! manager in front, as the gRPC layer drives it. Time moves only when a
//! test lets it (or when everything waits on a timer), so timers and
//! timestamps are exact.

use crate::config::Config;
use crate::llm::{LlmError, LlmRequest, Provider, StreamEvent};
use crate::runtime::{
    Answer, ClientInfo, Clock, ConvEvent, EventKind, Manager, NewConversation, Shared, Subscription,
};
use crate::store::{ConversationRecord, Store};
use agentd_core::{
    ContentBlock, ConvState, Decision, Message, Mode, Reply, RuleScope, StopReason, Usage,
};
use futures::future::BoxFuture;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Far beyond anything a test waits for, in virtual time.
pub(crate) const WAIT: Duration = Duration::from_secs(600);
/// The clock's reading when a test starts.
pub(crate) const T0: i64 = 1_700_000_000_000;

/// One scripted answer of the model.
pub(crate) enum Turn {
    /// Streams `deltas` as text, then replies `content`.
    Reply {
        deltas: Vec<String>,
        content: Vec<ContentBlock>,
        stop: StopReason,
    },
    /// Fails at once.
    Fail(LlmError),
    /// Streams `text`, then waits until cancelled.
    Hang { text: String },
}

pub(crate) fn says(text: &str) -> Turn {
    Turn::Reply {
        deltas: vec![text.to_string()],
        content: vec![ContentBlock::text(text)],
        stop: StopReason::EndTurn,
    }
}

pub(crate) fn calls(tools: &[(&str, &str, Value)]) -> Turn {
    Turn::Reply {
        deltas: Vec::new(),
        content: tools
            .iter()
            .map(|(id, name, input)| ContentBlock::ToolUse {
                id: id.to_string(),
                name: name.to_string(),
                input: input.clone(),
            })
            .collect(),
        stop: StopReason::ToolUse,
    }
}

pub(crate) fn overloaded() -> LlmError {
    LlmError::Http {
        status: 529,
        error_type: Some("overloaded_error".to_string()),
        message: "Overloaded".to_string(),
        retry_after: None,
        should_retry: None,
        request_id: None,
    }
}

/// A model that answers from a script and records what it was asked.
#[derive(Debug, Default)]
pub(crate) struct ScriptedModel {
    turns: Mutex<VecDeque<Turn>>,
    requests: Mutex<Vec<LlmRequest>>,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Turn")
    }
}

impl ScriptedModel {
    pub(crate) fn push(&self, turn: Turn) {
        self.turns.lock().unwrap().push_back(turn);
    }

    pub(crate) fn requests(&self) -> Vec<LlmRequest> {
        self.requests.lock().unwrap().clone()
    }
}

impl Provider for ScriptedModel {
    fn stream<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, LlmError>> {
        Box::pin(async move {
            self.requests.lock().unwrap().push(req.clone());
            let turn = self.turns.lock().unwrap().pop_front();
            match turn {
                None => Err(LlmError::Config("the script has no more turns".into())),
                Some(Turn::Fail(e)) => Err(e),
                Some(Turn::Reply {
                    deltas,
                    content,
                    stop,
                }) => {
                    for text in deltas {
                        on_event(StreamEvent::TextDelta { index: 0, text });
                    }
                    Ok(Reply {
                        content,
                        stop_reason: stop,
                        usage: Usage {
                            input_tokens: 10,
                            output_tokens: 5,
                            ..Usage::default()
                        },
                    })
                }
                Some(Turn::Hang { text }) => {
                    on_event(StreamEvent::TextDelta { index: 0, text });
                    cancel.cancelled().await;
                    Err(LlmError::Cancelled)
                }
            }
        })
    }
}

pub(crate) struct Rig {
    pub(crate) manager: Arc<Manager>,
    pub(crate) model: Arc<ScriptedModel>,
    pub(crate) store: Store,
    pub(crate) dir: tempfile::TempDir,
}

pub(crate) fn rig() -> Rig {
    rig_with(|_| {})
}

pub(crate) fn rig_with(configure: impl FnOnce(&mut Config)) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db")).unwrap();
    let mut config = Config::load(None, &|_| None, None).unwrap();
    config.system_prompt = Some("You are a test.".to_string());
    config.limits.idle_unload_ms = 3_600_000;
    configure(&mut config);
    let model = Arc::new(ScriptedModel::default());
    let (events, _) = tokio::sync::broadcast::channel(16);
    let shells = crate::shells::ShellManager::new(
        dir.path().join("shells"),
        crate::shells::ShellLimits::default(),
        Box::new(|_| {}),
        events,
    );
    let manager = Manager::new(Shared {
        environments: crate::environment::Environments::new(
            store.environments_tree(),
            config.shell.clone(),
        ),
        store: store.clone(),
        config,
        provider: model.clone(),
        tools: Arc::new(crate::tools::Registry::new()),
        shells,
        notices: Vec::new(),
        clock: Clock::virtual_at(T0),
        daemon: Default::default(),
        mcp: Arc::new(crate::mcp::Hub::new(Vec::new())),
        checkpoints: Arc::new(
            crate::checkpoints::Checkpoints::open(
                &store,
                &dir.path().join("checkpoints"),
                Default::default(),
            )
            .unwrap(),
        ),
        rings: Default::default(),
        agent_types: Default::default(),
    });
    std::fs::create_dir_all(dir.path().join("work")).unwrap();
    Rig {
        manager,
        model,
        store,
        dir,
    }
}

impl Rig {
    pub(crate) fn cwd(&self) -> std::path::PathBuf {
        self.dir.path().join("work")
    }

    pub(crate) async fn conversation(&self, mode: Mode) -> String {
        let new = NewConversation {
            cwd: self.cwd(),
            mode: Some(mode),
            ..NewConversation::default()
        };
        self.manager.create(new, None).await.unwrap().id
    }

    pub(crate) async fn attach(&self, id: &str) -> Subscription {
        self.manager.subscribe(id, 0, client("test")).await.unwrap()
    }

    pub(crate) fn record(&self, id: &str) -> ConversationRecord {
        self.store.conversation(id).unwrap().unwrap()
    }

    pub(crate) fn transcript(&self, id: &str) -> Vec<Message> {
        let record = self.record(id);
        self.store
            .transcript(&record)
            .unwrap()
            .into_iter()
            .map(|(_, m)| m)
            .collect()
    }

    pub(crate) async fn answer(&self, id: &str, decision: Decision, scope: RuleScope) {
        self.manager
            .answer(
                id,
                Answer {
                    plan: None,
                    request_id: String::new(),
                    decision,
                    feedback: None,
                    scope,
                    by: Some(client("ann@laptop")),
                    client_request_id: None,
                },
            )
            .await
            .unwrap();
    }
}

pub(crate) fn client(name: &str) -> ClientInfo {
    ClientInfo::local("c9", name, agentd_core::ClientRole::Driver)
}

/// The next live event that `pick` accepts (others are skipped).
pub(crate) async fn next<T>(
    sub: &mut Subscription,
    mut pick: impl FnMut(&ConvEvent) -> Option<T>,
) -> (Arc<ConvEvent>, T) {
    tokio::time::timeout(WAIT, async {
        loop {
            let event = sub.live.recv().await.unwrap();
            if let Some(found) = pick(&event) {
                return (event, found);
            }
        }
    })
    .await
    .unwrap()
}

pub(crate) async fn until_state(
    sub: &mut Subscription,
    want: impl Fn(&ConvState) -> bool,
) -> ConvState {
    next(sub, |e| match &e.kind {
        EventKind::StateChanged { state, .. } if want(state) => Some(state.clone()),
        _ => None,
    })
    .await
    .1
}

pub(crate) async fn until_idle(sub: &mut Subscription) {
    until_state(sub, |s| matches!(s, ConvState::Idle)).await;
}

pub(crate) async fn until_asked(sub: &mut Subscription) -> String {
    next(sub, |e| match &e.kind {
        EventKind::PermissionRequested(view) => Some(view.ask.tool_name.clone()),
        _ => None,
    })
    .await
    .1
}

pub(crate) fn tool_results(message: &Message) -> Vec<String> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

pub(crate) fn offered(request: &LlmRequest) -> Vec<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}
