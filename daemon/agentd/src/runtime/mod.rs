//! The runtime: one actor per live conversation, the manager that owns the
//! actors and recovers interrupted conversations at start-up, and the hub
//! (a broadcast channel per actor) that fans events out to attached clients.
//!
//! Reads of persisted data (list, transcript) go straight to the store:
//! every transition is persisted before anyone hears of it, so the store is
//! never behind what clients were told.

mod actor;
mod agent_types;
mod archive;
pub(crate) mod budget;
pub(crate) mod clock;
mod commands;
mod create;
mod delete;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod instructions;
mod params;
pub(crate) mod prompt;
mod registry;
mod rewind;
mod sub_agents;
#[cfg(test)]
mod test_rig;
#[cfg(test)]
mod tests;

pub(crate) use actor::{Rings, Subscription};
pub(crate) use clock::Clock;
#[cfg(test)]
pub(crate) use create::test_record;
pub(crate) use delete::{Label, title};
pub(crate) use error::RuntimeError;
pub(crate) use events::{
    ClientInfo, ConvEvent, EventKind, PermissionView, SnapshotData, SubAgentRef,
};
pub(crate) use params::{
    Answer, BudgetAnswer, MAX_QUEUED, NewConversation, NewMessage, Parent, REQUEST_ID_WINDOW_MS,
    REQUEST_IDS_PER_CONVERSATION, Sent, Settings, model_name,
};
pub(crate) use params::{Seed, too_many_dirs};
pub(crate) use registry::{Actors, LiveActors};
pub(crate) use rewind::RewindRequest;

use crate::config::Config;
use crate::llm::Provider;
use crate::store::{ConversationRecord, Store};
use crate::tools::Registry;
use actor::Input;
use agentd_core::{Message, Usage};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use tokio::sync::{Mutex, mpsc};

/// What every actor shares.
#[derive(Debug)]
pub(crate) struct Shared {
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
    /// The conversations' environments (the user's, per conversation).
    pub environments: crate::environment::Environments,
    /// The sub-agent type files, as last read.
    pub agent_types: Arc<crate::agent_types::Catalog>,
}

/// What the daemon is and where its files are, as `GetDaemonInfo` reports
/// it. Holds no key: `credentials` resolves one when asked.
#[derive(Debug, Default)]
pub(crate) struct DaemonInfo {
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
    /// The sandbox commands run in (`[sandbox]`).
    pub sandboxes: Arc<crate::process::sandbox::Sandboxes>,
}

/// Owns the actors.
pub(crate) struct Manager {
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
    pub(crate) fn new(shared: Shared) -> Arc<Manager> {
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
        crate::tasks::spawn_until_stopped("automatic continuations", async move {
            while let Some(id) = requests.recv().await {
                let Some(manager) = weak.upgrade() else {
                    return;
                };
                match manager.continue_conversation(&id, true, None).await {
                    Ok(next) => {
                        tracing::info!(conversation = %id, continued_as = %next.id, hop = next.conversation.continuation.hop, "continued automatically")
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
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Resumes every conversation the store holds mid-turn. Returns how many.
    pub(crate) async fn recover(&self) -> Result<usize, RuntimeError> {
        let horizon = self.shared.clock.now_ms() - REQUEST_ID_WINDOW_MS;
        let forgotten = self.shared.store.forget_creates_before(horizon)?;
        if forgotten > 0 {
            tracing::debug!("forgot {forgotten} create request ids older than a day");
        }
        let finished = self.finish_deletes().await?;
        if finished > 0 {
            tracing::info!("finished {finished} deletes a stop interrupted");
        }
        let mut n = 0;
        for rec in self.shared.store.conversations_mid_turn()? {
            tracing::info!(conversation = %rec.id, state = rec.conversation.state.name(), "recovering conversation");
            self.send_input(&rec.id, Input::Recover).await?;
            n += 1;
        }
        Ok(n)
    }

    /// The full id for an id or unique prefix.
    pub(crate) fn resolve(&self, prefix: &str) -> Result<String, RuntimeError> {
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

    /// The daily usage ledger of the last `days` days (UTC, today
    /// included): (day, model, usage), by day then model.
    pub(crate) fn daily_usage(
        &self,
        days: u32,
    ) -> Result<Vec<(String, String, Usage)>, RuntimeError> {
        let now = self.shared.clock.now_ms();
        let first = now - i64::from(days.max(1) - 1) * 86_400_000;
        Ok(self
            .shared
            .store
            .daily_usage(&prompt::civil_date(first), &prompt::civil_date(now))?)
    }

    /// The record of a conversation.
    pub(crate) fn record(&self, id: &str) -> Result<ConversationRecord, RuntimeError> {
        self.shared
            .store
            .conversation(id)?
            .ok_or_else(|| RuntimeError::NotFound(id.to_string()))
    }

    /// Conversations newest first, older than `before` when given, at most
    /// `limit` (0: all), the archived ones or the others; and whether older
    /// ones remain.
    pub(crate) fn list(
        &self,
        before: Option<&str>,
        limit: usize,
        archived: bool,
    ) -> Result<(Vec<ConversationRecord>, bool), RuntimeError> {
        Ok(self
            .shared
            .store
            .conversations_page_where(before, limit, |r| r.archived == archived)?)
    }

    /// Every conversation id, newest first.
    pub(crate) fn ids(&self) -> Result<Vec<String>, RuntimeError> {
        Ok(self.shared.store.conversation_ids()?)
    }

    /// The transcript of a conversation as of its record.
    pub(crate) fn messages(
        &self,
        record: &ConversationRecord,
    ) -> Result<Vec<(u64, Message)>, RuntimeError> {
        Ok(self.shared.store.transcript(record)?)
    }
}
