//! Putting conversations away: delete (`agent rm`), archive and rename.
//!
//! A delete takes the conversation and its sub-agents (recursively; a fork
//! or a continuation is a conversation of its own and stays). Under the
//! registry's lock their live actors are taken out and the store's
//! tombstone is written with their records removed (see
//! `store/removal.rs`), so from there no input can load them again (a load
//! that read one before reads it again, and finds it gone) and no reader
//! finds them; the tombstone is flushed. Then each actor is told to
//! stop (it writes nothing more; its attached clients' streams end, and
//! the edge tells them the conversation was deleted), its background
//! shells are killed, its checkpoint records forgotten (the contents other
//! records share stay), and the rest of its keys removed; the tombstone
//! goes last. A crash anywhere after the tombstone leaves it for start-up,
//! which finishes the delete ([`Manager::finish_deletes`]); before it, the
//! conversations are whole.

use super::actor::Input;
use super::{Manager, RuntimeError};
use crate::store::ConversationRecord;
use tokio::sync::oneshot;

/// The longest title a rename accepts, in characters.
const MAX_TITLE_CHARS: usize = 200;

/// A rename and/or an (un)archive.
#[derive(Debug, Clone, Default)]
pub(crate) struct Label {
    pub title: Option<String>,
    pub archived: Option<bool>,
}

/// What a delete removed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Deleted {
    pub id: String,
    /// Deepest first.
    pub sub_agents: Vec<String>,
    /// The conversation's own messages.
    pub messages: u64,
    pub shells_killed: usize,
    /// Its turn was running and was stopped.
    pub stopped: bool,
}

/// A title as a person gave it, trimmed; refused when it cannot be one.
pub(crate) fn title(text: &str) -> Result<String, RuntimeError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(RuntimeError::InvalidArgument("the title is empty".into()));
    }
    if text.chars().count() > MAX_TITLE_CHARS || text.chars().any(char::is_control) {
        return Err(RuntimeError::InvalidArgument(format!(
            "a title is one line of at most {MAX_TITLE_CHARS} characters"
        )));
    }
    Ok(text.to_string())
}

impl Manager {
    /// Renames and/or (un)archives conversation `id` (through its actor,
    /// which owns the record while it is live).
    pub(crate) async fn label(
        &self,
        id: &str,
        label: Label,
    ) -> Result<ConversationRecord, RuntimeError> {
        self.ask(id, |reply| super::actor::Command::Label { label, reply })
            .await?
    }

    /// Deletes conversation `id` and its sub-agents (see the module doc).
    /// A running one is refused unless `force`.
    pub(crate) async fn delete(&self, id: &str, force: bool) -> Result<Deleted, RuntimeError> {
        let record = self.record(id)?;
        let state = &record.conversation.state;
        let stopped = !state.is_at_rest();
        if stopped && !force {
            return Err(RuntimeError::NotAllowed(format!(
                "conversation {id} is running ({}): cancel it first, or delete it with --force, which stops it",
                state.name()
            )));
        }
        // A running parent waits for its sub-agents' ends: a child goes
        // with its parent, or once the parent is at rest.
        if let Some(link) = &record.sub_agent
            && let Ok(parent) = self.record(&link.parent_id)
            && !parent.conversation.state.is_at_rest()
        {
            return Err(RuntimeError::NotAllowed(format!(
                "conversation {id} is a sub-agent of {}, whose turn is running: cancel or delete that one instead",
                link.parent_id
            )));
        }
        let sub_agents = self.sub_agents_of(id)?;
        let mut ids = sub_agents.clone();
        ids.push(id.to_string());
        let actors: Vec<_> = {
            let mut registry = self.actors.lock().await;
            self.shared.store.tombstone(id, &ids)?;
            ids.iter().filter_map(|i| registry.take(i)).collect()
        };
        self.shared.store.flush().await?;
        for tx in actors {
            let (done, stopped) = oneshot::channel();
            if tx.send(Input::Delete { done }).is_ok() {
                let _ = stopped.await;
            }
        }
        let (messages, shells_killed) = self.purge(id, &ids).await?;
        Ok(Deleted {
            id: id.to_string(),
            sub_agents,
            messages,
            shells_killed,
            stopped,
        })
    }

    /// Removes what is left of the conversations `ids` of the delete under
    /// `root`, then its tombstone, and flushes. Idempotent. Returns the
    /// root's messages and the shells killed.
    async fn purge(&self, root: &str, ids: &[String]) -> Result<(u64, usize), RuntimeError> {
        let mut messages = 0;
        let mut shells_killed = 0;
        for id in ids {
            shells_killed += self.shared.shells.forget_conversation(id).await;
            self.shared.checkpoints.forget(id)?;
            self.shared.environments.forget(id)?;
            let n = self.shared.store.purge(id)?;
            if id == root {
                messages = n;
            }
        }
        self.shared.store.clear_tombstone(root)?;
        self.shared.store.flush().await?;
        Ok((messages, shells_killed))
    }

    /// Start-up: finishes the deletes a crash interrupted. Returns how many.
    pub(crate) async fn finish_deletes(&self) -> Result<usize, RuntimeError> {
        let tombstones = self.shared.store.tombstones()?;
        for (root, ids) in &tombstones {
            tracing::info!(conversation = %root, "finishing an interrupted delete");
            self.purge(root, ids).await?;
        }
        Ok(tombstones.len())
    }

    /// Every sub-agent of `id`, and theirs, deepest first.
    fn sub_agents_of(&self, id: &str) -> Result<Vec<String>, RuntimeError> {
        let (all, _) = self
            .shared
            .store
            .conversations_page_where(None, 0, |r| r.sub_agent.is_some())?;
        let mut found: Vec<String> = Vec::new();
        let mut parents = vec![id.to_string()];
        while let Some(parent) = parents.pop() {
            for child in all
                .iter()
                .filter(|r| r.sub_agent.as_ref().is_some_and(|s| s.parent_id == parent))
            {
                if !found.contains(&child.id) {
                    found.push(child.id.clone());
                    parents.push(child.id.clone());
                }
            }
        }
        found.reverse();
        Ok(found)
    }
}
