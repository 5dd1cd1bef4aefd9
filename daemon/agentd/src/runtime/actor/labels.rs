//! What a person calls a conversation and whether it is put away: its
//! title and its archived mark, written before anyone hears of them.

use super::Actor;
use crate::runtime::Label;
use crate::runtime::error::RuntimeError;
use crate::runtime::events::EventKind;
use crate::store::ConversationRecord;

impl Actor {
    /// Renames and/or (un)archives the conversation; every client is told.
    pub(super) async fn label(&mut self, label: Label) -> Result<ConversationRecord, RuntimeError> {
        let saved = self.record.clone();
        let mut said = Vec::new();
        if let Some(title) = label.title.filter(|t| *t != self.record.title) {
            said.push(format!("renamed to {title:?}"));
            self.record.title = title;
        }
        if let Some(archived) = label.archived.filter(|a| *a != self.record.archived) {
            said.push(if archived { "archived" } else { "unarchived" }.to_string());
            self.record.archived = archived;
        }
        if said.is_empty() {
            return Ok(self.record.clone());
        }
        self.record.updated_at_ms = self.now_ms();
        if let Err(e) = self.write_record().await {
            tracing::error!(conversation = %self.record.id, "persisting a label failed: {e}");
            self.record = saved;
            return Err(RuntimeError::Store(e));
        }
        tracing::info!(conversation = %self.record.id, "{}", said.join(", "));
        self.emit(EventKind::info(format!(
            "conversation {}",
            said.join(" and ")
        )));
        Ok(self.record.clone())
    }
}
