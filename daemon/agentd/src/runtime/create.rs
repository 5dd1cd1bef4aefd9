//! Creating a conversation: checked, under its client request id (a retry
//! gets the first attempt's conversation), and stored together with its
//! first message by the first transition of its new actor.

use super::actor::{Actor, Command, Input, Subscription};
use super::{
    ClientInfo, Manager, NewConversation, NewMessage, Parent, RuntimeError, too_many_dirs,
};
use crate::store::{ConversationRecord, Setup};
use agentd_core::{ContinuationChain, ConvState, Conversation, Mode};
use tokio::sync::{mpsc, oneshot};

/// The first message of a conversation created with one.
enum First {
    /// The user's prompt, its images and the thinking it asks.
    Prompt(
        String,
        Vec<crate::images::StagedImage>,
        Option<agentd_core::Thinking>,
    ),
    /// A continuation's seed: the parent's summary and queued messages.
    Seed(Parent),
}

/// Where a new conversation's environment comes from.
enum Inherited {
    /// The client sent it.
    Sent(std::collections::BTreeMap<String, String>),
    /// The conversation it continues or serves as a sub-agent has it.
    From(String),
    /// None: it runs in the daemon's.
    Daemon,
}

impl Inherited {
    fn of(new: &NewConversation) -> Inherited {
        let from = new
            .parent
            .as_ref()
            .map(|p| p.id.clone())
            .or_else(|| new.sub_agent.as_ref().map(|l| l.parent_id.clone()));
        match (&new.environment, from) {
            (Some(vars), _) => Inherited::Sent(vars.clone()),
            (None, Some(from)) => Inherited::From(from),
            (None, None) => Inherited::Daemon,
        }
    }
}

/// The id a create goes on with.
enum NewId {
    /// The conversation is to be made under this id.
    Made(String),
    /// A retry: the first attempt made this conversation.
    Created(Box<ConversationRecord>),
}

/// The record of a new conversation `id` made at `now` as `new` asks
/// (with the defaults given), and the conversation it continues.
fn new_record(
    id: String,
    now: i64,
    new: NewConversation,
    default_model: &str,
    default_mode: Mode,
) -> (ConversationRecord, Option<Parent>) {
    let model = if new.model.trim().is_empty() {
        default_model.to_string()
    } else {
        new.model.trim().to_string()
    };
    let parent = new.parent;
    let record = ConversationRecord {
        id,
        title: parent
            .as_ref()
            .map(|p| p.title.clone())
            .or_else(|| new.sub_agent.as_ref().map(|l| l.description.clone()))
            .unwrap_or_default(),
        cwd: new.cwd,
        model,
        created_at_ms: now,
        updated_at_ms: now,
        conversation: Conversation {
            mode: new.mode.unwrap_or(default_mode),
            continuation: parent
                .as_ref()
                .map(|p| ContinuationChain::continuing(p.id.clone(), p.hop))
                .unwrap_or_default(),
            // A continuation's first turn thinks as the work it continues.
            thinking: new.thinking,
            ..Conversation::with_state(ConvState::Idle)
        },
        setup: Setup {
            additional_dirs: new.additional_dirs,
            allow_rules: new.allow_rules,
            mcp_servers: new.mcp_servers,
        },
        sub_agent: new.sub_agent,
        ..ConversationRecord::default()
    };
    (record, parent)
}

/// A fresh record of conversation `id` working in `cwd`, for tests.
#[cfg(test)]
pub(crate) fn test_record(id: &str, cwd: &std::path::Path) -> ConversationRecord {
    let new = NewConversation {
        cwd: cwd.to_path_buf(),
        ..NewConversation::default()
    };
    new_record(id.to_string(), 0, new, "test-model", Mode::Default).0
}

impl Manager {
    /// Creates a conversation, with its first user message (text and
    /// checked images) when one is given.
    pub(crate) async fn create(
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
    pub(crate) async fn create_attached(
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
        self.check_new(&new)?;
        let _serial = match new.client_request_id {
            Some(_) => Some(self.creating.lock().await),
            None => None,
        };
        let now = self.shared.clock.now_ms();
        let id = match self.id_for(new.client_request_id.as_deref(), now)? {
            NewId::Made(id) => id,
            // A retry: the first attempt's conversation.
            NewId::Created(record) => return Ok((*record, None)),
        };
        let environment = Inherited::of(&new);
        let config = &self.shared.config;
        let thinking = new.thinking;
        let (record, parent) = new_record(id, now, new, &config.model, config.default_mode);
        // A continuation starts its first turn with the parent's summary,
        // written with the conversation in one commit (as a prompt is).
        let first = match (parent, prompt) {
            (Some(p), _) => First::Seed(p),
            (None, Some((text, images))) => {
                // The core's rule, before anything is written.
                if agentd_core::message::says_nothing(&text, images.len()) {
                    return Err(RuntimeError::InvalidArgument(
                        agentd_core::Rejected::EmptyMessage.to_string(),
                    ));
                }
                First::Prompt(text, images, thinking)
            }
            (None, None) => {
                self.give_environment(&record.id, environment, now)?;
                self.shared.store.commit(&record, &[])?;
                self.shared.store.flush().await?;
                return Ok((record, None));
            }
        };
        self.give_environment(&record.id, environment, now)?;
        self.start_with(record, first, client).await
    }

    /// Gives the new conversation `id` the environment `new` brings, or
    /// the one of the conversation it continues or serves as a sub-agent.
    /// Written before the conversation, whose commit flushes it: a
    /// conversation never runs without the environment it was made with.
    fn give_environment(
        &self,
        id: &str,
        environment: Inherited,
        now: i64,
    ) -> Result<(), RuntimeError> {
        let envs = &self.shared.environments;
        match environment {
            Inherited::Sent(vars) => envs.receive(id, vars, now)?,
            Inherited::From(from) => envs.copy(&from, id)?,
            Inherited::Daemon => {}
        }
        Ok(())
    }

    /// Sets conversation `id`'s environment to `vars`, as a client sent
    /// them now (`agent set --env-from-here`, `/env`): its next command runs
    /// in it. Durable when this returns.
    pub(crate) async fn set_environment(
        &self,
        id: &str,
        vars: std::collections::BTreeMap<String, String>,
    ) -> Result<(), RuntimeError> {
        self.record(id)?;
        let now = self.shared.clock.now_ms();
        self.shared.environments.receive(id, vars, now)?;
        self.shared.store.flush().await?;
        Ok(())
    }

    /// Refuses a conversation this daemon may not make: bypass mode when
    /// not allowed, too many directories, a rule that does not parse.
    fn check_new(&self, new: &NewConversation) -> Result<(), RuntimeError> {
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
        Ok(())
    }

    /// The id of a conversation created as the request `request` (if any):
    /// a new one (remembered for the request before the conversation is
    /// stored, so a stored conversation always has its request remembered:
    /// sled keeps a prefix of its writes), the one the first attempt gave
    /// when it was cut short before storing it, or that attempt's
    /// conversation.
    fn id_for(&self, request: Option<&str>, now: i64) -> Result<NewId, RuntimeError> {
        let remembered = match request {
            Some(request) => self.shared.store.created_by(request)?,
            None => None,
        };
        if let Some(id) = remembered {
            return Ok(match self.shared.store.conversation(&id)? {
                Some(record) => NewId::Created(Box::new(record)),
                None => NewId::Made(id),
            });
        }
        let id = self.new_id()?;
        if let Some(request) = request {
            self.shared.store.remember_create(request, &id, now)?;
        }
        Ok(NewId::Made(id))
    }

    /// A new conversation id (a ULID, increasing within the millisecond).
    pub(super) fn new_id(&self) -> Result<String, RuntimeError> {
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
            First::Prompt(text, images, thinking) => Command::Send {
                message: NewMessage {
                    text,
                    images,
                    thinking,
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
            crate::tasks::spawn("conversation actor", actor.run());
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
}
