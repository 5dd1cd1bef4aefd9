//! Sub-agents (REQ-BED-008/009): the children a parent's `spawn_agents`
//! call starts. A child is a conversation like any other — stored, run by
//! its own actor, attachable, recovered after a crash by the same rules —
//! with a link to its parent (`ConversationRecord::sub_agent`).
//!
//! The core decides; this module carries out what it asks across
//! conversations, in one task of the manager's:
//! - `SpawnSubAgent` (from the parent): the child is created under a
//!   request id made from the parent and the agent id, so asking again
//!   (after a restart) creates nothing twice. A child that has ended is
//!   reported again; one that has started goes on by itself; one that has
//!   not started waits for one of the parent's slots
//!   (`[sub_agents] max_concurrent`), then gets its prompt.
//! - `CancelSubAgents` (from the parent): running children are cancelled
//!   like any conversation (their own end reports "cancelled"); children
//!   still waiting for a slot end at once as cancelled.
//! - `FinishSubAgent` (from the child, after the commit that wrote its
//!   result): the child's slot is freed and the parent gets
//!   `SubAgentFinished`. The parent's core takes each child's end once, so
//!   a report repeated by a restart changes nothing.
//! - `Resume` (from a child found mid-turn at start-up): the child waits
//!   for one of its parent's slots, like a child that starts, then its
//!   recovery goes on; recovered and new children share the limit.

use super::{Manager, NewConversation, NewMessage};
use crate::store::{ConversationRecord, SubAgentEnd, SubAgentLink};
use agentd_core::Mode;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What actors ask of the sub-agent task.
#[derive(Debug)]
pub(crate) enum SubAgentRequest {
    /// Start (or, after a restart, watch) a child of `parent`.
    Spawn(Box<Spawn>),
    /// Cancel children of `parent_id`.
    Cancel {
        parent_id: String,
        agent_ids: Vec<String>,
    },
    /// The child `child_id` ended; its end is durable in its record.
    Finished {
        child_id: String,
        link: Box<SubAgentLink>,
        end: SubAgentEnd,
    },
    /// The child `child_id` of `parent_id` was found mid-turn at start-up:
    /// it goes on once it has a slot.
    Resume { child_id: String, parent_id: String },
    /// A child's event for its parent's clients.
    Report {
        parent_id: String,
        event: Box<super::EventKind>,
    },
}

/// A child to start: what the parent's core asked, and the parent as it
/// is now (the child's settings derive from it).
#[derive(Debug)]
pub(crate) struct Spawn {
    pub parent: ConversationRecord,
    pub agent_id: String,
    pub prompt: String,
    pub description: String,
    pub model: Option<String>,
    pub read_only: bool,
    /// The sub-agent type it names (`None`: the general one).
    pub agent_type: Option<String>,
}

/// The request id a child is created under: one child per parent and
/// agent id, whoever asks and however often.
fn create_key(parent_id: &str, agent_id: &str) -> String {
    format!("sub-agent:{parent_id}:{agent_id}")
}

/// A child that waits for a slot or runs under one.
struct Slotted {
    /// Cancels the wait for a slot.
    cancel: CancellationToken,
    /// Fired when the child ends: its slot is freed.
    done: Option<oneshot::Sender<()>>,
}

/// The sub-agent task's bookkeeping.
#[derive(Default)]
struct Children {
    /// Each parent's slots.
    slots: HashMap<String, Arc<Semaphore>>,
    /// Children started or recovered by this task, by child id.
    slotted: HashMap<String, Slotted>,
}

/// Runs the sub-agent task until the manager is gone.
pub(crate) fn start(
    manager: Weak<Manager>,
    mut requests: mpsc::UnboundedReceiver<SubAgentRequest>,
) {
    crate::tasks::spawn_until_stopped("sub-agent requests", async move {
        let children = Arc::new(std::sync::Mutex::new(Children::default()));
        while let Some(request) = requests.recv().await {
            let Some(m) = manager.upgrade() else {
                return;
            };
            match request {
                SubAgentRequest::Spawn(spawn) => {
                    let parent_id = spawn.parent.id.clone();
                    let agent_id = spawn.agent_id.clone();
                    if let Err(e) = spawn_child(&m, &children, *spawn).await {
                        tracing::error!(conversation = %parent_id, agent = %agent_id, "cannot start the sub-agent: {e}");
                        // The parent must not wait for a child that never
                        // runs: it gets the failure as the child's result.
                        m.deliver(
                            &parent_id,
                            agentd_core::SubAgentResult {
                                agent_id,
                                result: format!("The sub-agent could not be started: {e}"),
                                success: false,
                                conversation_id: String::new(),
                            },
                            agentd_core::Usage::default(),
                            0.0,
                        )
                        .await;
                    }
                }
                SubAgentRequest::Cancel {
                    parent_id,
                    agent_ids,
                } => {
                    for agent_id in agent_ids {
                        cancel_child(&m, &children, &parent_id, &agent_id).await;
                    }
                }
                SubAgentRequest::Resume {
                    child_id,
                    parent_id,
                } => resume_child(&m, &children, child_id, &parent_id),
                SubAgentRequest::Finished {
                    child_id,
                    link,
                    end,
                } => {
                    let slotted = lock(&children).slotted.remove(&child_id);
                    if let Some(mut s) = slotted
                        && let Some(done) = s.done.take()
                    {
                        let _ = done.send(());
                    }
                    m.deliver(
                        &link.parent_id,
                        agentd_core::SubAgentResult {
                            agent_id: link.agent_id,
                            result: end.result,
                            success: end.success,
                            conversation_id: child_id,
                        },
                        end.usage,
                        end.cost_usd,
                    )
                    .await;
                }
                SubAgentRequest::Report { parent_id, event } => {
                    m.report_to_parent(&parent_id, *event).await;
                }
            }
        }
    });
}

fn lock(children: &std::sync::Mutex<Children>) -> std::sync::MutexGuard<'_, Children> {
    children
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The child's mode: the parent's, or read-only when asked; never wider
/// than the parent's.
fn child_mode(parent: Mode, read_only: bool) -> Mode {
    if read_only || parent == Mode::ReadOnly {
        Mode::ReadOnly
    } else {
        parent
    }
}

async fn spawn_child(
    m: &Arc<Manager>,
    children: &Arc<std::sync::Mutex<Children>>,
    spawn: Spawn,
) -> Result<(), super::RuntimeError> {
    let key = create_key(&spawn.parent.id, &spawn.agent_id);
    let child = create_child(m, &spawn, &key).await?;
    let Spawn {
        parent,
        agent_id,
        prompt,
        ..
    } = spawn;
    if let Some(link) = &child.sub_agent
        && let Some(end) = &link.result
    {
        // Ended before a restart: the parent may not have heard.
        m.deliver(
            &parent.id,
            agentd_core::SubAgentResult {
                agent_id,
                result: end.result.clone(),
                success: end.success,
                conversation_id: child.id.clone(),
            },
            end.usage,
            end.cost_usd,
        )
        .await;
        return Ok(());
    }
    if child.message_count > 0 || lock(children).slotted.contains_key(&child.id) {
        // Started already: it reports its end by itself.
        return Ok(());
    }
    let slots = slots_of(m, children, &parent.id);
    let cancel = CancellationToken::new();
    let (done, ended) = oneshot::channel();
    lock(children).slotted.insert(
        child.id.clone(),
        Slotted {
            cancel: cancel.clone(),
            done: Some(done),
        },
    );
    let waiting = Waiting {
        m: Arc::clone(m),
        children: Arc::clone(children),
        child,
        prompt,
        key,
        cancel,
    };
    crate::tasks::spawn_until_stopped("sub-agent wait", waiting.run(slots, ended));
    Ok(())
}

/// Creates (or, asked again, finds) the child `spawn` asks for, under the
/// request id `key`.
async fn create_child(
    m: &Manager,
    spawn: &Spawn,
    key: &str,
) -> Result<ConversationRecord, super::RuntimeError> {
    let parent = &spawn.parent;
    // A type is resolved once, here: the record keeps it (a restart finds
    // the child created and does not come here).
    let child_type = match &spawn.agent_type {
        Some(name) => Some(m.child_type(&parent.cwd, name)?),
        None => None,
    };
    // The call's model, else the type's, else the parent's.
    let model = match (
        &spawn.model,
        child_type.as_ref().and_then(|t| t.model.clone()),
    ) {
        (Some(name), _) => super::model_name(name)?,
        (None, Some(of_type)) => of_type,
        (None, None) => parent.model.clone(),
    };
    let new = NewConversation {
        cwd: parent.cwd.clone(),
        model,
        mode: Some(child_mode(parent.conversation.mode, spawn.read_only)),
        allow_rules: parent.setup.allow_rules.clone(),
        additional_dirs: parent.setup.additional_dirs.clone(),
        mcp_servers: parent.setup.mcp_servers.clone(),
        client_request_id: Some(key.to_string()),
        parent: None,
        sub_agent: Some(SubAgentLink {
            parent_id: parent.id.clone(),
            agent_id: spawn.agent_id.clone(),
            description: spawn.description.clone(),
            result: None,
            agent_type: child_type.map(|t| t.kind),
        }),
        // The parent's (see `Manager::give_environment`).
        environment: None,
        // A child's task is no message of a person: its model's own.
        thinking: None,
    };
    m.create(new, None).await
}

/// A child that has not started: it waits for one of its parent's slots,
/// then gets its task.
struct Waiting {
    m: Arc<Manager>,
    children: Arc<std::sync::Mutex<Children>>,
    child: ConversationRecord,
    prompt: String,
    /// The request id it was created under.
    key: String,
    /// Cancels the wait (and the child, once its task is sent).
    cancel: CancellationToken,
}

impl Waiting {
    async fn run(self, slots: Arc<Semaphore>, ended: oneshot::Receiver<()>) {
        let Waiting {
            m,
            children,
            child,
            prompt,
            key,
            cancel,
        } = self;
        let permit = tokio::select! {
            permit = slots.acquire_owned() => permit.ok(),
            () = cancel.cancelled() => None,
        };
        let Some(permit) = permit else {
            // Cancelled while waiting: it ends without having run.
            lock(&children).slotted.remove(&child.id);
            m.end_unstarted(&child.id).await;
            return;
        };
        let sent = m
            .send_message(
                &child.id,
                NewMessage {
                    text: prompt,
                    client_request_id: Some(format!("{key}:prompt")),
                    ..NewMessage::default()
                },
            )
            .await;
        if let Err(e) = sent {
            tracing::error!(conversation = %child.id, "cannot send the sub-agent its task: {e}");
            lock(&children).slotted.remove(&child.id);
            drop(permit);
            m.end_unstarted(&child.id).await;
            return;
        }
        if let Some(me) = super::SubAgentRef::of(&child) {
            m.report_to_parent(&me_parent(&child), super::EventKind::SubAgentStarted(me))
                .await;
        }
        if cancel.is_cancelled() {
            // The cancel came while the task was being sent.
            if let Err(e) = m.cancel(&child.id).await {
                tracing::warn!(conversation = %child.id, "cancelling the sub-agent failed: {e}");
            }
        }
        // The slot is held until the child ends (or the manager goes).
        let _ = ended.await;
        drop(permit);
    }
}

/// The slots of `parent_id`'s children.
fn slots_of(m: &Manager, children: &std::sync::Mutex<Children>, parent_id: &str) -> Arc<Semaphore> {
    let max = m.shared.config.sub_agents.max_concurrent;
    lock(children)
        .slots
        .entry(parent_id.to_string())
        .or_insert_with(|| Arc::new(Semaphore::new(max)))
        .clone()
}

/// A child found mid-turn at start-up waits for a slot, then goes on; it
/// holds the slot until it ends. Cancelled meanwhile (its cancel recovers
/// it at once) or ended, it stops waiting.
fn resume_child(
    m: &Arc<Manager>,
    children: &Arc<std::sync::Mutex<Children>>,
    child_id: String,
    parent_id: &str,
) {
    let slots = slots_of(m, children, parent_id);
    let cancel = CancellationToken::new();
    let (done, ended) = oneshot::channel();
    {
        let mut c = lock(children);
        if c.slotted.contains_key(&child_id) {
            // Waiting or running under a slot already.
            return;
        }
        c.slotted.insert(
            child_id.clone(),
            Slotted {
                cancel: cancel.clone(),
                done: Some(done),
            },
        );
    }
    let m = Arc::clone(m);
    let children = Arc::clone(children);
    crate::tasks::spawn_until_stopped("sub-agent recovery slot", async move {
        let mut ended = ended;
        let permit = tokio::select! {
            permit = slots.acquire_owned() => permit.ok(),
            () = cancel.cancelled() => None,
            _ = &mut ended => None,
        };
        let Some(permit) = permit else {
            lock(&children).slotted.remove(&child_id);
            return;
        };
        m.grant_recovery_slot(&child_id).await;
        // The slot is held until the child ends (or the manager goes).
        let _ = ended.await;
        drop(permit);
    });
}

async fn cancel_child(
    m: &Arc<Manager>,
    children: &Arc<std::sync::Mutex<Children>>,
    parent_id: &str,
    agent_id: &str,
) {
    let key = create_key(parent_id, agent_id);
    let child_id = match m.shared.store.created_by(&key) {
        Ok(Some(id)) => id,
        Ok(None) => return,
        Err(e) => {
            tracing::error!(conversation = %parent_id, "cannot find sub-agent {agent_id}: {e}");
            return;
        }
    };
    let slotted = lock(children)
        .slotted
        .get(&child_id)
        .map(|s| s.cancel.clone());
    if let Some(token) = slotted {
        // A child waiting for its slot ends without running; one whose
        // task is being sent is cancelled once it is.
        token.cancel();
    }
    if let Err(e) = m.cancel(&child_id).await {
        tracing::warn!(conversation = %child_id, "cancelling the sub-agent failed: {e}");
    }
}

/// The parent of a child record ("" for none).
fn me_parent(child: &ConversationRecord) -> String {
    child
        .sub_agent
        .as_ref()
        .map(|l| l.parent_id.clone())
        .unwrap_or_default()
}

impl Manager {
    /// Whether conversation `id` is a sub-agent of `parent_id` (false when
    /// it cannot be read).
    pub(crate) fn is_sub_agent_of(&self, id: &str, parent_id: &str) -> bool {
        match self.shared.store.conversation(id) {
            Ok(Some(r)) => r.sub_agent.is_some_and(|l| l.parent_id == parent_id),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(conversation = %id, "cannot read the conversation: {e}");
                false
            }
        }
    }

    /// Gives a parent an event of one of its children. A permission
    /// request loads the parent if it is not live (its clients must be
    /// able to answer, after a restart too); anything else only reaches a
    /// live parent (nobody watches one that is not).
    async fn report_to_parent(&self, parent_id: &str, event: super::EventKind) {
        let load = matches!(event, super::EventKind::PermissionRequested(_));
        let input = super::actor::Input::FromSubAgent(event);
        if load {
            if let Err(e) = self.send_input(parent_id, input).await {
                tracing::warn!(conversation = %parent_id, "cannot show a sub-agent's request: {e}");
            }
        } else if let Some(tx) = self.actors.lock().await.get(parent_id) {
            let _ = tx.send(input);
        }
    }

    /// The conversation an answer sent to `id` is for: `id` itself, or,
    /// while `id` waits for its sub-agents, the child whose pending request
    /// it names (with no request named: the only child asking).
    pub(super) fn answer_target(
        &self,
        id: &str,
        request_id: &str,
    ) -> Result<String, super::RuntimeError> {
        let record = self.record(id)?;
        let agentd_core::ConvState::AwaitingSubAgents { pending_ids, .. } =
            &record.conversation.state
        else {
            return Ok(id.to_string());
        };
        let mut asking = Vec::new();
        for agent_id in pending_ids {
            let Some(child_id) = self.shared.store.created_by(&create_key(id, agent_id))? else {
                continue;
            };
            let Some(child) = self.shared.store.conversation(&child_id)? else {
                continue;
            };
            if let Some(ask) = child.conversation.state.pending_permission()
                && (request_id.is_empty() || ask.request_id == request_id)
            {
                asking.push((child_id, ask.request_id.clone()));
            }
        }
        match asking.len() {
            0 => Ok(id.to_string()),
            1 => Ok(asking.remove(0).0),
            _ => Err(super::RuntimeError::InvalidArgument(format!(
                "{} sub-agents of conversation {id} are asking for permission; name the request to answer ({})",
                asking.len(),
                asking
                    .iter()
                    .map(|(_, r)| r.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}
