//! The runtime: one actor per live conversation, the manager that owns the
//! actors and recovers interrupted conversations at start-up, and the hub
//! (a broadcast channel per actor) that fans events out to attached clients.
//!
//! Reads of persisted data (list, transcript) go straight to the store:
//! every transition is persisted before anyone hears of it, so the store is
//! never behind what clients were told.

mod actor;
pub mod budget;
pub mod clock;
pub mod error;
pub mod events;
pub mod instructions;
pub mod prompt;
mod rewind;
mod sub_agents;

pub use actor::{HUB_CAPACITY, Rings, Subscription};
pub use clock::Clock;
pub use error::RuntimeError;
pub use events::{
    ClientInfo, ConvEvent, EventKind, PermissionView, SnapshotData, SubAgentRef, WireCache,
};
pub use rewind::{RewindRequest, Rewound};

use crate::config::Config;
use crate::llm::Provider;
use crate::store::{ConversationRecord, Store};
use crate::tools::Registry;
use actor::{Actor, Command, Input};
use agentd_core::{ConvState, Decision, Message, Mode, RuleScope, Usage};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{Mutex, mpsc, oneshot};

/// What every actor shares.
#[derive(Debug)]
pub struct Shared {
    pub store: Store,
    /// Effective configuration.
    pub config: Config,
    pub provider: Arc<dyn Provider>,
    pub tools: Arc<Registry>,
    /// Background shells (owned by the daemon, not by a turn or a client).
    pub shells: Arc<crate::shells::ShellManager>,
    /// Daemon-wide notices for people (e.g. a store moved aside at start).
    pub notices: Vec<String>,
    /// Where time comes from (the system's clock, or tokio's in tests).
    pub clock: Clock,
    /// What the daemon tells about itself (`GetDaemonInfo`).
    pub daemon: DaemonInfo,
    /// MCP servers' connections, shared by the conversations.
    pub mcp: Arc<crate::mcp::Hub>,
    /// What files were before tools changed them (`agent rewind`).
    pub checkpoints: Arc<crate::checkpoints::Checkpoints>,
    /// The conversations' fan-out rings, one made ahead.
    pub rings: Arc<Rings>,
}

/// What the daemon is and where its files are, as `GetDaemonInfo` reports
/// it. Holds no key: `credentials` resolves one when asked.
#[derive(Debug, Default)]
pub struct DaemonInfo {
    /// When the daemon started: Unix ms, and the monotonic instant.
    pub started_at_ms: i64,
    pub started: Option<std::time::Instant>,
    pub socket: PathBuf,
    pub data_dir: PathBuf,
    /// Where the daemon's stderr goes, when it is a regular file.
    pub log_file: Option<PathBuf>,
    /// The daemon's executable and arguments (to restart it the same way).
    pub executable: Option<PathBuf>,
    pub args: Vec<String>,
    /// Where the API key comes from.
    pub credentials: Option<Arc<crate::llm::credentials::Sources>>,
    /// The daemon's own files and directories, which no file tool touches.
    pub own_files: Arc<crate::tools::OwnFiles>,
}

/// Parameters of a new conversation.
#[derive(Debug, Clone, Default)]
pub struct NewConversation {
    /// Absolute, existing working directory.
    pub cwd: PathBuf,
    /// Model (empty: the default).
    pub model: String,
    /// Permission mode (None: the configured default).
    pub mode: Option<Mode>,
    pub allow_rules: Vec<String>,
    pub additional_dirs: Vec<PathBuf>,
    /// MCP servers of this conversation besides the configured ones
    /// (checked).
    pub mcp_servers: Vec<crate::mcp::ServerSpec>,
    /// The client's id for this request: a retry with the same id returns
    /// the conversation the first one created and creates nothing.
    pub client_request_id: Option<String>,
    /// The exhausted conversation this one continues.
    pub parent: Option<Parent>,
    /// Set for a sub-agent: its parent and agent id.
    pub sub_agent: Option<crate::store::SubAgentLink>,
}

/// What a continued conversation takes from the one it continues.
#[derive(Debug, Clone, Default)]
pub struct Parent {
    pub id: String,
    /// The parent's place in its chain (the new one's is one more).
    pub hop: u32,
    pub title: String,
    /// The parent's continuation summary.
    pub summary: String,
    /// Its queued user messages (moved to the new conversation), with
    /// their images (already in the store, shared by content).
    pub queued: Vec<(String, Vec<agentd_core::ImageRef>)>,
}

/// The first message of a conversation created with one.
enum First {
    /// The user's prompt and its images.
    Prompt(String, Vec<crate::images::StagedImage>),
    /// A continuation's seed: the parent's summary and queued messages.
    Seed(Parent),
}

/// What an exhausted conversation hands to its continuation, or the
/// continuation it already has.
#[derive(Debug)]
pub(crate) enum Seed {
    /// Not continued yet: the new conversation is made like this one.
    Exhausted(Box<ConversationRecord>),
    /// Already continued as this conversation.
    Continued(String),
}

/// How long a request's client request id is remembered.
pub const REQUEST_ID_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;
/// How many client request ids a conversation remembers (the newest).
pub const REQUEST_IDS_PER_CONVERSATION: usize = 32;

/// A user message and how its client wants it handled.
#[derive(Debug, Clone, Default)]
pub struct NewMessage {
    pub text: String,
    /// Images sent with it, checked (see `crate::images`); stored when the
    /// message is accepted or queued, not before.
    pub images: Vec<crate::images::StagedImage>,
    /// The client's id for this request: a retry with the same id is
    /// answered with the first outcome and appends nothing.
    pub client_request_id: Option<String>,
    /// The turn the client believes is current; another is refused.
    pub expected_turn: Option<u64>,
    /// While a turn runs, queue the message instead of refusing it.
    pub queue_if_busy: bool,
    /// The attached client that sent it, if it came over an Attach stream.
    pub from: Option<agentd_core::ClientInfo>,
    /// Who sent it, for the audit trail, when it came by a unary call
    /// (`from` names an attached sender).
    pub by: Option<agentd_core::ClientInfo>,
}

/// A change of a conversation's settings; `None` keeps a value.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub mode: Option<Mode>,
    pub model: Option<String>,
    /// Directories to add to the additional ones (canonical).
    pub add_dirs: Vec<PathBuf>,
    /// The client that asks, for the event ("" for scripts).
    pub by: String,
}

/// Additional directories a conversation may have (the record carrying
/// them is written at every commit).
pub const MAX_ADDITIONAL_DIRS: usize = 32;

/// The longest model name accepted.
const MAX_MODEL_NAME: usize = 200;

/// A model name as a client gave it, trimmed; refused when it cannot be
/// one (empty, too long, or with spaces or control characters).
pub fn model_name(name: &str) -> Result<String, RuntimeError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(RuntimeError::InvalidArgument("model name is empty".into()));
    }
    if name.len() > MAX_MODEL_NAME {
        return Err(RuntimeError::InvalidArgument(format!(
            "model name is {} bytes; at most {MAX_MODEL_NAME}",
            name.len()
        )));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(RuntimeError::InvalidArgument(format!(
            "model name {name:?} contains spaces or control characters"
        )));
    }
    Ok(name.to_string())
}

/// Refuses more than [`MAX_ADDITIONAL_DIRS`] additional directories.
fn too_many_dirs(count: usize) -> Result<(), RuntimeError> {
    if count > MAX_ADDITIONAL_DIRS {
        return Err(RuntimeError::InvalidArgument(format!(
            "{count} additional directories; a conversation may have at most {MAX_ADDITIONAL_DIRS}"
        )));
    }
    Ok(())
}

/// Messages a conversation's queue holds at most (it lives in the record,
/// which every commit writes).
pub const MAX_QUEUED: usize = 32;

/// What became of a user message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Appended to the transcript as this message (a turn started).
    Appended(u64),
    /// Queued while a turn runs, under this id (`q<number>`).
    Queued(String),
}

impl Sent {
    /// The message's sequence number in the transcript; 0 while queued.
    pub fn message_seq(&self) -> u64 {
        match self {
            Sent::Appended(seq) => *seq,
            Sent::Queued(_) => 0,
        }
    }
}

/// The registry of live actors, behind the lock every input from outside
/// is sent under.
pub(crate) type Actors = Arc<Mutex<LiveActors>>;

/// A client's answer to a permission request.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The request answered (empty: whichever is pending).
    pub request_id: String,
    pub decision: Decision,
    /// With deny-and-stop: what to do instead, sent as the next message.
    pub feedback: Option<String>,
    /// Where a rule the answer adds applies.
    pub scope: RuleScope,
    /// Who answered.
    pub by: Option<ClientInfo>,
    /// The client's id for this request (see [`NewMessage`]).
    pub client_request_id: Option<String>,
    /// The answer to a plan approval request (then `decision` is the plan
    /// decision it amounts to: approve, reject or edit).
    pub plan: Option<agentd_core::plan::PlanAnswer>,
}

/// An answer to a reached budget.
#[derive(Debug, Clone)]
pub struct BudgetAnswer {
    /// Raise the budget (and send the held request); false stops the turn.
    pub raise: bool,
    /// How much, in the budget's unit as people write it (dollars or
    /// tokens); None: the stop's `raise_by`.
    pub raise_by: Option<f64>,
    /// Who answered.
    pub by: Option<ClientInfo>,
}

/// The live actors by conversation id.
#[derive(Default)]
pub(crate) struct LiveActors {
    live: HashMap<String, mpsc::UnboundedSender<Input>>,
    /// How many actors have unloaded themselves: a conversation read from
    /// the store while no actor was live is still current if no actor
    /// unloaded since (any actor that wrote to it in between would have
    /// had to unload again).
    unloads: u64,
}

impl LiveActors {
    /// The live actor of `id`.
    fn get(&self, id: &str) -> Option<&mpsc::UnboundedSender<Input>> {
        self.live.get(id).filter(|tx| !tx.is_closed())
    }

    /// Removes the actor of `id` if it is the one `tx` reaches.
    pub(crate) fn remove_if_same(&mut self, id: &str, tx: &mpsc::UnboundedSender<Input>) {
        if self.live.get(id).is_some_and(|t| t.same_channel(tx)) {
            self.live.remove(id);
            self.unloads += 1;
            // What the conversation held is freed as its actor ends: let
            // the threads that held it give their caches back.
            crate::alloc::release_when_idle();
        }
    }
}

/// Owns the actors.
pub struct Manager {
    shared: Arc<Shared>,
    /// The live actors. Every input from outside an actor is sent while
    /// holding this lock, and an idle actor unloads itself under it (see
    /// `Actor::run`), so nothing is ever sent to an actor that is gone.
    actors: Actors,
    next_client: AtomicU64,
    next_id: std::sync::Mutex<ulid::Generator>,
    /// Held through a create that carries a client request id, so a retry
    /// racing its first attempt waits for it instead of creating again.
    creating: Mutex<()>,
    /// Where actors ask for their conversation to be continued by the
    /// daemon (`[context] auto_continue`); a task of the manager's does it.
    auto_continue: mpsc::UnboundedSender<String>,
    /// Where actors ask for sub-agents to be started, cancelled or
    /// reported (a task of the manager's, see `sub_agents`).
    sub_agents: mpsc::UnboundedSender<sub_agents::SubAgentRequest>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager over `shared`; call [`Manager::recover`] next.
    pub fn new(shared: Shared) -> Arc<Manager> {
        let (auto_continue, mut requests) = mpsc::unbounded_channel::<String>();
        let (sub_agents, sub_agent_requests) = mpsc::unbounded_channel();
        let manager = Arc::new(Manager {
            shared: Arc::new(shared),
            actors: Arc::new(Mutex::new(LiveActors::default())),
            next_client: AtomicU64::new(1),
            next_id: std::sync::Mutex::new(ulid::Generator::new()),
            creating: Mutex::new(()),
            auto_continue,
            sub_agents,
        });
        sub_agents::start(Arc::downgrade(&manager), sub_agent_requests);
        // Continuations the daemon makes by itself. The task holds the
        // manager weakly: it ends when the manager is dropped (its sender
        // with it).
        let weak = Arc::downgrade(&manager);
        tokio::spawn(async move {
            while let Some(id) = requests.recv().await {
                let Some(manager) = weak.upgrade() else {
                    return;
                };
                match manager.continue_conversation(&id, true).await {
                    Ok(next) => {
                        tracing::info!(conversation = %id, continued_as = %next.id, hop = next.hop, "continued automatically")
                    }
                    Err(e) => {
                        tracing::warn!(conversation = %id, "automatic continuation failed: {e}")
                    }
                }
            }
        });
        manager
    }

    /// The shared parts (store, config).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// How many conversations are in memory now.
    pub async fn loaded(&self) -> usize {
        let actors = self.actors.lock().await;
        actors.live.values().filter(|tx| !tx.is_closed()).count()
    }

    /// Resumes every conversation the store holds mid-turn. Returns how many.
    pub async fn recover(&self) -> Result<usize, RuntimeError> {
        let horizon = self.shared.clock.now_ms() - REQUEST_ID_WINDOW_MS;
        let forgotten = self.shared.store.forget_creates_before(horizon)?;
        if forgotten > 0 {
            tracing::debug!("forgot {forgotten} create request ids older than a day");
        }
        let mut n = 0;
        for rec in self.shared.store.conversations_mid_turn()? {
            tracing::info!(conversation = %rec.id, state = rec.state.name(), "recovering conversation");
            self.send_input(&rec.id, Input::Recover).await?;
            n += 1;
        }
        Ok(n)
    }

    /// The full id for an id or unique prefix.
    pub fn resolve(&self, prefix: &str) -> Result<String, RuntimeError> {
        let prefix = prefix.trim().to_ascii_uppercase();
        if prefix.is_empty() {
            return Err(RuntimeError::InvalidArgument(
                "conversation id is empty".into(),
            ));
        }
        let ids = self.shared.store.ids_with_prefix(&prefix, 3)?;
        match ids.as_slice() {
            [] => Err(RuntimeError::NotFound(prefix)),
            [one] => Ok(one.clone()),
            [first, second, ..] => {
                if *first == prefix {
                    return Ok(first.clone());
                }
                Err(RuntimeError::Ambiguous {
                    prefix,
                    examples: format!("{first}, {second}, …"),
                })
            }
        }
    }

    /// Creates a conversation, with its first user message (text and
    /// checked images) when one is given.
    pub async fn create(
        &self,
        new: NewConversation,
        prompt: Option<(String, Vec<crate::images::StagedImage>)>,
    ) -> Result<ConversationRecord, RuntimeError> {
        Ok(self.create_with(new, prompt, None).await?.0)
    }

    /// Creates a conversation as [`Manager::create`] does and subscribes
    /// `client` to it from its very first event (as `subscribe` with
    /// `after_seq` 0 would right after), before the first turn starts: the
    /// Attach stream's `create` frame. A retried request subscribes to the
    /// conversation the first one made.
    pub async fn create_attached(
        &self,
        new: NewConversation,
        prompt: Option<(String, Vec<crate::images::StagedImage>)>,
        client: ClientInfo,
    ) -> Result<(ConversationRecord, Subscription), RuntimeError> {
        let client = self.numbered(client);
        match self.create_with(new, prompt, Some(client.clone())).await? {
            (record, Some(subscription)) => Ok((record, subscription)),
            (record, None) => {
                let subscription = self.join(&record.id, 0, client).await?;
                Ok((record, subscription))
            }
        }
    }

    /// [`Manager::create`]; with `client`, subscribed before the first
    /// command when this call starts the conversation's actor (None when
    /// the conversation was there already, or starts without a turn).
    async fn create_with(
        &self,
        new: NewConversation,
        prompt: Option<(String, Vec<crate::images::StagedImage>)>,
        client: Option<ClientInfo>,
    ) -> Result<(ConversationRecord, Option<Subscription>), RuntimeError> {
        if new.mode == Some(Mode::Bypass) && !self.shared.config.allow_bypass {
            return Err(RuntimeError::NotAllowed(
                "bypass mode is not allowed: start agentd with --allow-bypass".into(),
            ));
        }
        too_many_dirs(new.additional_dirs.len())?;
        for text in &new.allow_rules {
            agentd_core::Rule::parse(text, agentd_core::Action::Allow).map_err(|e| {
                RuntimeError::InvalidArgument(format!("invalid rule {text:?}: {e}"))
            })?;
        }
        let _serial = match new.client_request_id {
            Some(_) => Some(self.creating.lock().await),
            None => None,
        };
        let now = self.shared.clock.now_ms();
        let remembered = match &new.client_request_id {
            Some(request) => self.shared.store.created_by(request)?,
            None => None,
        };
        let id = match remembered {
            Some(id) => match self.shared.store.conversation(&id)? {
                // A retry: the first attempt's conversation.
                Some(record) => return Ok((record, None)),
                // The first attempt was cut short before its conversation
                // was stored: make it now, under the id it was given.
                None => id,
            },
            None => {
                let id = self.new_id()?;
                if let Some(request) = &new.client_request_id {
                    // Before the conversation, so a stored conversation
                    // always has its request remembered (sled keeps a
                    // prefix of its writes).
                    self.shared.store.remember_create(request, &id, now)?;
                }
                id
            }
        };
        let model = if new.model.trim().is_empty() {
            self.shared.config.model.clone()
        } else {
            new.model.trim().to_string()
        };
        let parent = new.parent;
        let record = ConversationRecord {
            id: id.clone(),
            title: parent
                .as_ref()
                .map(|p| p.title.clone())
                .or_else(|| new.sub_agent.as_ref().map(|l| l.description.clone()))
                .unwrap_or_default(),
            cwd: new.cwd,
            model,
            created_at_ms: now,
            updated_at_ms: now,
            state: ConvState::Idle,
            mode: new.mode.unwrap_or(self.shared.config.default_mode),
            additional_dirs: new.additional_dirs,
            allow_rules: new.allow_rules,
            mcp_servers: new.mcp_servers,
            message_count: 0,
            usage: Usage::default(),
            seq_reserved: 0,
            turns: 0,
            requests: Vec::new(),
            queued: Vec::new(),
            queued_next: 0,
            last_usage: Usage::default(),
            parent_id: parent.as_ref().map(|p| p.id.clone()),
            continued_as: None,
            continued_automatically: false,
            hop: parent.as_ref().map(|p| p.hop + 1).unwrap_or(0),
            continue_pending: false,
            pruned_through: 0,
            budget_raised: Default::default(),
            plan: None,
            sub_agent: new.sub_agent,
            sub_agents_usage: Usage::default(),
            sub_agents_cost_usd: 0.0,
            sub_agents_counted: Vec::new(),
            forked_from: None,
            forked_at: 0,
            corrections: agentd_core::Corrections::default(),
        };
        // A continuation starts its first turn with the parent's summary,
        // written with the conversation in one commit (as a prompt is).
        let first = match (parent, prompt) {
            (Some(p), _) => First::Seed(p),
            (None, Some((text, images))) => {
                if text.trim().is_empty() && images.is_empty() {
                    return Err(RuntimeError::InvalidArgument("prompt is empty".into()));
                }
                First::Prompt(text, images)
            }
            (None, None) => {
                self.shared.store.commit(&record, &[])?;
                self.shared.store.flush().await?;
                return Ok((record, None));
            }
        };
        self.start_with(record, first, client).await
    }

    /// A new conversation id (a ULID, increasing within the millisecond).
    fn new_id(&self) -> Result<String, RuntimeError> {
        let mut generator = self
            .next_id
            .lock()
            .map_err(|_| RuntimeError::ShuttingDown)?;
        Ok(generator
            .generate()
            .map_err(|e| RuntimeError::InvalidArgument(format!("cannot make an id: {e}")))?
            .to_string())
    }

    /// Starts the actor of a conversation not stored yet with its first
    /// command (a prompt or a continuation's seed), whose transition stores
    /// both: a crash leaves neither or both, never an empty conversation.
    async fn start_with(
        &self,
        record: ConversationRecord,
        first: First,
        client: Option<ClientInfo>,
    ) -> Result<(ConversationRecord, Option<Subscription>), RuntimeError> {
        let id = record.id.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        let actor = Actor::new(
            self.shared.clone(),
            self.actors.clone(),
            record.clone(),
            Vec::new(),
            (tx.clone(), rx),
            false,
            self.auto_continue.clone(),
            self.sub_agents.clone(),
        );
        let (reply, done) = oneshot::channel();
        let first = match first {
            First::Prompt(text, images) => Command::Send {
                message: NewMessage {
                    text,
                    images,
                    ..NewMessage::default()
                },
                reply,
            },
            First::Seed(p) => {
                let (texts, images) = p.queued.into_iter().unzip();
                Command::Seed {
                    parent_id: p.id,
                    summary: p.summary,
                    texts,
                    images,
                    reply,
                }
            }
        };
        let subscribed = {
            let mut actors = self.actors.lock().await;
            actors.live.insert(id.clone(), tx.clone());
            tokio::spawn(actor.run());
            // The actor takes its commands in order: the client is there
            // for every event of the first turn.
            let subscribed = client.map(|client| {
                let (reply, subscribed) = oneshot::channel();
                let _ = tx.send(Input::Command(Command::Subscribe {
                    after_seq: 0,
                    client,
                    reply,
                }));
                subscribed
            });
            tx.send(Input::Command(first))
                .map_err(|_| RuntimeError::ShuttingDown)?;
            subscribed
        };
        let subscription = match subscribed {
            Some(subscribed) => Some(subscribed.await.map_err(|_| RuntimeError::ShuttingDown)?),
            None => None,
        };
        match done.await.map_err(|_| RuntimeError::ShuttingDown)? {
            Ok(_) => Ok((self.record(&id)?, subscription)),
            Err(e) => {
                if let Some(subscription) = &subscription {
                    // Nobody will read it: the conversation was not made.
                    let _ = tx.send(Input::Command(Command::Detach {
                        client_id: subscription.client.id.clone(),
                    }));
                }
                self.actors.lock().await.live.remove(&id);
                Err(e)
            }
        }
    }

    /// Asks for a continuation summary now (REQ-BED-023): the conversation
    /// must be idle. Returns the record once the request is under way.
    pub async fn compact(&self, id: &str) -> Result<ConversationRecord, RuntimeError> {
        self.ask(id, |reply| Command::Compact { reply }).await??;
        self.record(id)
    }

    /// Continues the exhausted conversation `id` in a new one (see
    /// [`Parent`]); `automatic` when the daemon does it by itself. Asked
    /// again, it returns the continuation made the first time: the new
    /// conversation is created under a request id derived from the old
    /// one, so even a crash between creating it and marking the old one
    /// creates nothing twice.
    pub async fn continue_conversation(
        &self,
        id: &str,
        automatic: bool,
    ) -> Result<ConversationRecord, RuntimeError> {
        let old = match self.ask(id, |reply| Command::TakeSeed { reply }).await?? {
            Seed::Continued(next) => return self.record(&next),
            Seed::Exhausted(record) => *record,
        };
        let summary = match &old.state {
            ConvState::ContextExhausted { summary, .. } => summary.clone(),
            _ => String::new(),
        };
        let new = NewConversation {
            cwd: old.cwd.clone(),
            model: old.model.clone(),
            mode: Some(old.mode),
            allow_rules: old.allow_rules.clone(),
            additional_dirs: old.additional_dirs.clone(),
            // The servers a client gave go on with the work.
            mcp_servers: old.mcp_servers.clone(),
            client_request_id: Some(format!("continue:{}", old.id)),
            parent: Some(Parent {
                id: old.id.clone(),
                hop: old.hop,
                title: old.title.clone(),
                summary,
                queued: old
                    .queued
                    .iter()
                    .map(|q| (q.text.clone(), q.images.clone()))
                    .collect(),
            }),
            // A sub-agent fails when its context is exhausted: only a
            // user's conversation is continued.
            sub_agent: None,
        };
        let next = self.create(new, None).await?;
        let taken: Vec<String> = old.queued.iter().map(|q| q.id.clone()).collect();
        self.ask(id, |reply| Command::MarkContinued {
            next: next.id.clone(),
            hop: next.hop,
            automatic,
            taken,
            reply,
        })
        .await??;
        Ok(next)
    }

    /// The daily usage ledger of the last `days` days (UTC, today
    /// included): (day, model, usage), by day then model.
    pub fn daily_usage(&self, days: u32) -> Result<Vec<(String, String, Usage)>, RuntimeError> {
        let now = self.shared.clock.now_ms();
        let first = now - i64::from(days.max(1) - 1) * 86_400_000;
        Ok(self
            .shared
            .store
            .daily_usage(&prompt::civil_date(first), &prompt::civil_date(now))?)
    }

    /// The record of a conversation.
    pub fn record(&self, id: &str) -> Result<ConversationRecord, RuntimeError> {
        self.shared
            .store
            .conversation(id)?
            .ok_or_else(|| RuntimeError::NotFound(id.to_string()))
    }

    /// `record` as it may run under this daemon: one stored in bypass mode
    /// by a daemon that allowed it (or brought in some other way) goes
    /// back to the default mode when this one was started without
    /// `--allow-bypass`, and is stored so.
    fn held_to_bypass_rule(
        &self,
        mut record: ConversationRecord,
    ) -> Result<ConversationRecord, RuntimeError> {
        let config = &self.shared.config;
        if record.mode == Mode::Bypass && !config.allow_bypass {
            tracing::warn!(
                conversation = %record.id,
                "bypass mode turned off: agentd runs without --allow-bypass; the mode is now {}",
                config.default_mode.as_str()
            );
            record.mode = config.default_mode;
            self.shared.store.commit(&record, &[])?;
        }
        Ok(record)
    }

    /// Conversations newest first, older than `before` when given, at most
    /// `limit` (0: all); and whether older ones remain.
    pub fn list(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<ConversationRecord>, bool), RuntimeError> {
        Ok(self.shared.store.conversations_page(before, limit)?)
    }

    /// Every conversation id, newest first.
    pub fn ids(&self) -> Result<Vec<String>, RuntimeError> {
        Ok(self.shared.store.conversation_ids()?)
    }

    /// The transcript of a conversation as of its record.
    pub fn messages(
        &self,
        record: &ConversationRecord,
    ) -> Result<Vec<(u64, Message)>, RuntimeError> {
        Ok(self.shared.store.transcript(record)?)
    }

    /// Sends an input to a conversation's actor, loading the conversation
    /// first if it is not live. The store is read without holding the
    /// registry's lock, so a slow read of one transcript holds up no other
    /// conversation.
    async fn send_input(&self, id: &str, input: Input) -> Result<(), RuntimeError> {
        loop {
            let unloads = {
                let actors = self.actors.lock().await;
                if let Some(tx) = actors.get(id) {
                    return tx.send(input).map_err(|_| RuntimeError::ShuttingDown);
                }
                actors.unloads
            };
            let record = self.held_to_bypass_rule(self.record(id)?)?;
            let transcript = self
                .shared
                .store
                .transcript(&record)?
                .into_iter()
                .map(|(_, m)| m)
                .collect();
            let mut actors = self.actors.lock().await;
            if let Some(tx) = actors.get(id) {
                // Loaded by someone else meanwhile.
                return tx.send(input).map_err(|_| RuntimeError::ShuttingDown);
            }
            if actors.unloads != unloads {
                // An actor may have written the conversation after it was
                // read and unloaded since: read it again.
                continue;
            }
            let (tx, rx) = mpsc::unbounded_channel();
            let actor = Actor::new(
                self.shared.clone(),
                self.actors.clone(),
                record,
                transcript,
                (tx.clone(), rx),
                true,
                self.auto_continue.clone(),
                self.sub_agents.clone(),
            );
            tokio::spawn(actor.run());
            actors.live.insert(id.to_string(), tx.clone());
            return tx.send(input).map_err(|_| RuntimeError::ShuttingDown);
        }
    }

    async fn ask<T>(
        &self,
        id: &str,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, RuntimeError> {
        let (reply, rx) = oneshot::channel();
        self.send_input(id, Input::Command(make(reply))).await?;
        rx.await.map_err(|_| RuntimeError::ShuttingDown)
    }

    /// Sends a user message; returns its message sequence number once durable.
    pub async fn send(&self, id: &str, text: String) -> Result<u64, RuntimeError> {
        self.send_message(
            id,
            NewMessage {
                text,
                ..NewMessage::default()
            },
        )
        .await
        .map(|sent| sent.message_seq())
    }

    /// Sends a user message with its request id and turn guard; says what
    /// became of it (appended or queued) once that is durable.
    pub async fn send_message(&self, id: &str, message: NewMessage) -> Result<Sent, RuntimeError> {
        if message.text.trim().is_empty() {
            return Err(RuntimeError::InvalidArgument(
                "message text is empty".into(),
            ));
        }
        self.ask(id, |reply| Command::Send { message, reply })
            .await?
    }

    /// Answers the budget that holds conversation `id`; returns the
    /// record as it is now.
    pub async fn answer_budget(
        &self,
        id: &str,
        answer: BudgetAnswer,
    ) -> Result<ConversationRecord, RuntimeError> {
        if let Some(by) = answer.raise_by
            && !(by.is_finite() && by > 0.0 && by < 1e12)
        {
            return Err(RuntimeError::InvalidArgument(format!(
                "raise_by must be a positive amount, got {by}"
            )));
        }
        self.ask(id, |reply| Command::AnswerBudget { answer, reply })
            .await??;
        self.record(id)
    }

    /// Changes a conversation's mode and/or model; returns the record as it
    /// is now.
    pub async fn update(
        &self,
        id: &str,
        settings: Settings,
    ) -> Result<ConversationRecord, RuntimeError> {
        if settings.mode == Some(Mode::Bypass) && !self.shared.config.allow_bypass {
            return Err(RuntimeError::NotAllowed(
                "bypass mode is not allowed: start agentd with --allow-bypass".into(),
            ));
        }
        let settings = Settings {
            model: settings.model.as_deref().map(model_name).transpose()?,
            ..settings
        };
        self.ask(id, |reply| Command::Update { settings, reply })
            .await?
    }

    /// Drops the queued message `queued_id` (every queued message when
    /// empty); returns what is still queued.
    pub async fn drop_queued(
        &self,
        id: &str,
        queued_id: String,
    ) -> Result<Vec<crate::store::QueuedMessage>, RuntimeError> {
        self.ask(id, |reply| Command::DropQueued { queued_id, reply })
            .await?
    }

    /// Gives a parent the end of one of its sub-agents.
    async fn deliver(
        &self,
        parent_id: &str,
        result: agentd_core::SubAgentResult,
        usage: Usage,
        cost_usd: f64,
    ) {
        if let Err(e) = self
            .send_input(
                parent_id,
                Input::SubAgentFinished {
                    result,
                    usage,
                    cost_usd,
                },
            )
            .await
        {
            tracing::error!(conversation = %parent_id, "cannot report a sub-agent's end: {e}");
        }
    }

    /// Ends a sub-agent that never ran (cancelled while it waited for a
    /// slot): it records its end and reports it like any other.
    async fn end_unstarted(&self, child_id: &str) {
        if let Err(e) = self
            .send_input(child_id, Input::Command(Command::EndUnstarted))
            .await
        {
            tracing::error!(conversation = %child_id, "cannot end the sub-agent: {e}");
        }
    }

    /// Lets a sub-agent found mid-turn at start-up go on: it has a slot.
    async fn grant_recovery_slot(&self, child_id: &str) {
        if let Err(e) = self.send_input(child_id, Input::RecoverySlotGranted).await {
            tracing::error!(conversation = %child_id, "cannot resume the sub-agent: {e}");
        }
    }

    /// Cancels the turn; returns whether anything was running.
    pub async fn cancel(&self, id: &str) -> Result<bool, RuntimeError> {
        self.cancel_request(id, None).await
    }

    /// Cancels the turn as the request `client_request_id` (a retry gets
    /// the first outcome); returns whether anything was running.
    pub async fn cancel_request(
        &self,
        id: &str,
        client_request_id: Option<String>,
    ) -> Result<bool, RuntimeError> {
        self.ask(id, |reply| Command::Cancel {
            client_request_id,
            reply,
        })
        .await?
    }

    /// Answers the pending permission request.
    /// A conversation waiting for its sub-agents passes the answer to the
    /// child whose request it names.
    pub async fn answer(&self, id: &str, answer: Answer) -> Result<(), RuntimeError> {
        let target = self.answer_target(id, &answer.request_id)?;
        self.ask(&target, |reply| Command::Answer { answer, reply })
            .await?
    }

    /// Attaches a client.
    pub async fn subscribe(
        &self,
        id: &str,
        after_seq: u64,
        client: ClientInfo,
    ) -> Result<Subscription, RuntimeError> {
        self.join(id, after_seq, self.numbered(client)).await
    }

    /// `client` with the next client id (an attached client's, or that of
    /// a unary call that answers: every resolution names its client).
    pub fn numbered(&self, client: ClientInfo) -> ClientInfo {
        ClientInfo {
            id: format!("c{}", self.next_client.fetch_add(1, Ordering::Relaxed)),
            ..client
        }
    }

    /// Subscribes a numbered client.
    async fn join(
        &self,
        id: &str,
        after_seq: u64,
        client: ClientInfo,
    ) -> Result<Subscription, RuntimeError> {
        self.ask(id, |reply| Command::Subscribe {
            after_seq,
            client,
            reply,
        })
        .await
    }

    /// Detaches a client (it went away).
    pub async fn detach(&self, id: &str, client_id: String) {
        if let Some(tx) = self.actors.lock().await.get(id) {
            let _ = tx.send(Input::Command(Command::Detach { client_id }));
        }
    }

    /// A fresh snapshot for a client that fell behind.
    pub async fn resync(
        &self,
        id: &str,
        client_id: String,
    ) -> Result<Arc<ConvEvent>, RuntimeError> {
        self.ask(id, |reply| Command::Resync { client_id, reply })
            .await
    }

    /// Stores an imported conversation. Returns false when the id exists.
    pub async fn import(
        &self,
        record: ConversationRecord,
        messages: Vec<Message>,
        images: Vec<crate::images::StagedImage>,
    ) -> Result<bool, RuntimeError> {
        if self.shared.store.conversation(&record.id)?.is_some() {
            return Ok(false);
        }
        // Every image a message refers to must come with the export (or be
        // here already): a transcript is never stored without its images.
        for image in messages.iter().flat_map(Message::images) {
            let carried = images.iter().any(|s| s.image.sha256 == image.sha256);
            if !carried && self.shared.store.image(&image.sha256)?.is_none() {
                return Err(RuntimeError::InvalidArgument(format!(
                    "conversation {}: image {} is referred to but not in the export",
                    record.id, image.sha256
                )));
            }
        }
        // Before the messages that refer to them (sled keeps a prefix).
        for staged in &images {
            self.shared
                .store
                .put_image(&staged.image.sha256, &staged.bytes)?;
        }
        let numbered: Vec<(u64, &Message)> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| (i as u64 + 1, m))
            .collect();
        self.shared.store.commit(&record, &numbered)?;
        self.shared.store.flush().await?;
        Ok(true)
    }

    /// The images `messages` refer to, each once, with their bytes (for an
    /// export). An image the store lacks is an error: an export without it
    /// could not be imported.
    pub fn images_of<'a>(
        &self,
        messages: impl Iterator<Item = &'a Message>,
    ) -> Result<Vec<(agentd_core::ImageRef, Vec<u8>)>, RuntimeError> {
        let mut out: Vec<(agentd_core::ImageRef, Vec<u8>)> = Vec::new();
        for message in messages {
            for image in message.images() {
                if out.iter().any(|(i, _)| i.sha256 == image.sha256) {
                    continue;
                }
                let bytes = self.shared.store.image(&image.sha256)?.ok_or_else(|| {
                    RuntimeError::InvalidArgument(format!(
                        "image {} is missing from the store",
                        image.sha256
                    ))
                })?;
                out.push((image.clone(), bytes.to_vec()));
            }
        }
        Ok(out)
    }

    /// Tells the conversation that owns a background shell that it started
    /// or ended (its attached clients see it).
    pub async fn shell_event(&self, event: crate::shells::ShellEvent) {
        let id = match &event {
            crate::shells::ShellEvent::Started(r) | crate::shells::ShellEvent::Exited(r) => {
                r.conversation_id.clone()
            }
        };
        if let Some(tx) = self.actors.lock().await.get(&id) {
            let _ = tx.send(Input::Shell(event));
        }
    }

    /// Stops every actor: in-flight work is cancelled, persisted state is
    /// kept for recovery, and every client stream ends.
    pub async fn shutdown(&self) {
        let actors: Vec<_> = self.actors.lock().await.live.drain().collect();
        // All at once: each actor records its interrupted tools in parallel.
        let mut waiting = Vec::new();
        for (id, tx) in actors {
            let (done, rx) = oneshot::channel();
            if tx.send(Input::Shutdown { done }).is_ok() {
                waiting.push((id, rx));
            }
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        for (id, rx) in waiting {
            if tokio::time::timeout_at(deadline, rx).await.is_err() {
                tracing::warn!(conversation = %id, "actor did not stop in time");
            }
        }
    }
}
