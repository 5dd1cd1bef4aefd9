//! The registry of live actors and the way in to them: every input from
//! outside is sent under the registry's lock, loading the conversation
//! first when its actor is not live, and an idle actor unloads itself
//! under the same lock, so nothing is ever sent to an actor that is gone.

use super::actor::{Actor, Command, Input};
use super::{Manager, RuntimeError};
use crate::store::ConversationRecord;
use agentd_core::Mode;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc, oneshot};

/// The registry of live actors, behind the lock every input from outside
/// is sent under.
pub(crate) type Actors = Arc<Mutex<LiveActors>>;

/// The live actors by conversation id.
#[derive(Default)]
pub(crate) struct LiveActors {
    pub(super) live: HashMap<String, mpsc::UnboundedSender<Input>>,
    /// How many actors have unloaded themselves: a conversation read from
    /// the store while no actor was live is still current if no actor
    /// unloaded since (any actor that wrote to it in between would have
    /// had to unload again).
    unloads: u64,
    /// The daemon is stopping: no conversation is loaded any more (a
    /// shell killed by the shutdown would otherwise start an actor that
    /// nobody stops; its end is told at the next start).
    stopping: bool,
}

impl LiveActors {
    /// The live actor of `id`.
    pub(super) fn get(&self, id: &str) -> Option<&mpsc::UnboundedSender<Input>> {
        self.live.get(id).filter(|tx| !tx.is_closed())
    }

    /// Takes the actor of `id` out (a delete stops it), and makes a load
    /// that read the conversation before read it again (it is gone).
    pub(super) fn take(&mut self, id: &str) -> Option<mpsc::UnboundedSender<Input>> {
        self.unloads += 1;
        self.live.remove(id)
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

impl Manager {
    /// How many conversations are in memory now.
    pub(crate) async fn loaded(&self) -> usize {
        let actors = self.actors.lock().await;
        actors.live.values().filter(|tx| !tx.is_closed()).count()
    }

    /// Sends an input to a conversation's actor, loading the conversation
    /// first if it is not live. The store is read without holding the
    /// registry's lock, so a slow read of one transcript holds up no other
    /// conversation.
    pub(super) async fn send_input(&self, id: &str, input: Input) -> Result<(), RuntimeError> {
        loop {
            let unloads = {
                let actors = self.actors.lock().await;
                if let Some(tx) = actors.get(id) {
                    return tx.send(input).map_err(|_| RuntimeError::ShuttingDown);
                }
                if actors.stopping {
                    return Err(RuntimeError::ShuttingDown);
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
            if actors.stopping {
                return Err(RuntimeError::ShuttingDown);
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
            crate::tasks::spawn("conversation actor", actor.run());
            actors.live.insert(id.to_string(), tx.clone());
            return tx.send(input).map_err(|_| RuntimeError::ShuttingDown);
        }
    }

    pub(super) async fn ask<T>(
        &self,
        id: &str,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, RuntimeError> {
        let (reply, rx) = oneshot::channel();
        self.send_input(id, Input::Command(make(reply))).await?;
        rx.await.map_err(|_| RuntimeError::ShuttingDown)
    }

    /// Detaches a client (it went away).
    pub(crate) async fn detach(&self, id: &str, client_id: String) {
        if let Some(tx) = self.actors.lock().await.get(id) {
            let _ = tx.send(Input::Command(Command::Detach { client_id }));
        }
    }

    /// Tells the conversation that owns a background shell that it started
    /// or ended (its attached clients see it). An end the model is still to
    /// hear of loads the conversation if it is not live.
    pub(crate) async fn shell_event(&self, event: crate::shells::ShellEvent) {
        let (id, to_tell) = match &event {
            crate::shells::ShellEvent::Started(r) => (r.conversation_id.clone(), false),
            crate::shells::ShellEvent::Exited(r) => (r.conversation_id.clone(), r.report_pending),
        };
        if to_tell {
            let shell_id = match &event {
                crate::shells::ShellEvent::Started(r) | crate::shells::ShellEvent::Exited(r) => {
                    r.id.clone()
                }
            };
            match self.send_input(&id, Input::Shell(event)).await {
                Ok(()) => {}
                // Nobody is left to tell.
                Err(RuntimeError::NotFound(_)) => self.shared.shells.mark_reported(&shell_id),
                // Told at the next start.
                Err(RuntimeError::ShuttingDown) => {}
                Err(e) => {
                    tracing::warn!(conversation = %id, "cannot tell the end of shell {shell_id}: {e}");
                }
            }
        } else if let Some(tx) = self.actors.lock().await.get(&id) {
            let _ = tx.send(Input::Shell(event));
        }
    }

    /// Tells each conversation the ends of its shells it has not taken yet:
    /// they ended, or were lost, while the daemon was down, or before the
    /// note was taken.
    pub(crate) async fn tell_shell_ends(&self) {
        for record in self.shared.shells.unreported() {
            self.shell_event(crate::shells::ShellEvent::Exited(record))
                .await;
        }
    }

    /// Stops every actor: in-flight work is cancelled, persisted state is
    /// kept for recovery, and every client stream ends. Waits for each to
    /// say it stopped until `deadline` (the daemon's one shutdown
    /// deadline), and names those that did not.
    pub(crate) async fn shutdown(&self, deadline: tokio::time::Instant) {
        let actors: Vec<_> = {
            let mut registry = self.actors.lock().await;
            registry.stopping = true;
            registry.live.drain().collect()
        };
        // All at once: each actor records its interrupted tools in parallel.
        let mut waiting = Vec::new();
        for (id, tx) in actors {
            let (done, rx) = oneshot::channel();
            if tx.send(Input::Shutdown { done }).is_ok() {
                waiting.push((id, rx));
            }
        }
        for (id, rx) in waiting {
            if tokio::time::timeout_at(deadline, rx).await.is_err() {
                tracing::warn!(conversation = %id, "actor did not stop in time");
            }
        }
    }

    /// `record` as it may run under this daemon: one stored in bypass mode
    /// by a daemon that allowed it (or brought in some other way) goes
    /// back to the default mode when this one was started without
    /// `--allow-bypass`, and is stored so.
    pub(super) fn held_to_bypass_rule(
        &self,
        mut record: ConversationRecord,
    ) -> Result<ConversationRecord, RuntimeError> {
        let config = &self.shared.config;
        if record.conversation.mode == Mode::Bypass && !config.allow_bypass {
            tracing::warn!(
                conversation = %record.id,
                "bypass mode turned off: agentd runs without --allow-bypass; the mode is now {}",
                config.default_mode.as_str()
            );
            record.conversation.mode = config.default_mode;
            self.shared.store.commit(&record, &[])?;
        }
        Ok(record)
    }
}
