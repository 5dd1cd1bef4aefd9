//! The conversation's audit trail: which client sent a message or answered
//! a permission request, and when. Separate from the event log: it names
//! people, and is kept however the conversation goes on.

use crate::runtime::{Clock, NewMessage};
use crate::store::Store;
use crate::store::access::{AUDIT_TEXT_CHARS, AuditAction, AuditRecord};
use agentd_core::ClientInfo;

/// Writes one conversation's audit entries.
pub(super) struct Audit {
    store: Store,
    conversation_id: String,
    clock: Clock,
}

/// Who sent `message` (for the trail) and its text: the client of a unary
/// call, else the attached client it came from.
pub(super) fn sender(message: &NewMessage) -> Option<(ClientInfo, String)> {
    (message.by.clone())
        .or_else(|| message.from.clone())
        .map(|c| (c, message.text.clone()))
}

impl Audit {
    pub(super) fn new(store: Store, conversation_id: String, clock: Clock) -> Audit {
        Audit {
            store,
            conversation_id,
            clock,
        }
    }

    /// Adds an entry, made durable by the next flush (the caller's commit
    /// or event, which follows at once).
    pub(super) fn record(&self, client: ClientInfo, action: AuditAction) {
        let record = AuditRecord {
            at_ms: self.clock.now_ms(),
            client,
            action,
        };
        if let Err(e) = self.store.put_audit(&self.conversation_id, &record) {
            tracing::error!(conversation = %self.conversation_id, "cannot write the audit trail: {e}");
        }
    }

    /// Records who sent a message that was accepted (appended, or queued
    /// as `queued_id`), durably: the message itself already is.
    pub(super) async fn message_sent(
        &self,
        client: ClientInfo,
        text: &str,
        queued_id: Option<String>,
    ) {
        self.record(
            client,
            AuditAction::MessageSent {
                text: text.chars().take(AUDIT_TEXT_CHARS).collect(),
                queued_id,
            },
        );
        if let Err(e) = self.store.flush().await {
            tracing::error!(conversation = %self.conversation_id, "cannot flush the audit trail: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn client(name: &str) -> ClientInfo {
        ClientInfo::local("c1", name, agentd_core::ClientRole::Driver)
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_is_audited_with_its_sender_its_time_and_the_start_of_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let audit = Audit::new(store.clone(), "conv".into(), Clock::virtual_at(7_000));
        tokio::time::advance(Duration::from_millis(300)).await;
        let long = "x".repeat(AUDIT_TEXT_CHARS + 50);
        audit
            .message_sent(client("ann"), &long, Some("q2".into()))
            .await;
        let trail = store.audit("conv").unwrap();
        assert_eq!(trail.len(), 1);
        assert_eq!(trail[0].at_ms, 7_300);
        assert_eq!(trail[0].client.name, "ann");
        match &trail[0].action {
            AuditAction::MessageSent { text, queued_id } => {
                assert_eq!(text.chars().count(), AUDIT_TEXT_CHARS);
                assert_eq!(queued_id.as_deref(), Some("q2"));
            }
            other => panic!("{other:?}"),
        }
        assert!(store.audit("other").unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_sender_is_the_unary_caller_before_the_attached_client() {
        let mut message = NewMessage {
            text: "hi".into(),
            from: Some(client("attached")),
            ..NewMessage::default()
        };
        assert_eq!(sender(&message).unwrap().0.name, "attached");
        message.by = Some(client("caller"));
        let (who, text) = sender(&message).unwrap();
        assert_eq!((who.name.as_str(), text.as_str()), ("caller", "hi"));
        assert!(sender(&NewMessage::default()).is_none(), "nobody to name");
    }
}
