//! Remote access as stored: the TCP listener's bearer tokens and the audit
//! trail of who did what in a conversation.
//!
//! Trees: `tokens` (token id → [`TokenRecord`] JSON; the token's text is
//! never stored, only its SHA-256), `audit` (conversation id ‖ NUL ‖
//! big-endian sled-generated id → [`AuditRecord`] JSON, so a
//! conversation's entries read back in the order they were written).

use super::{Store, StoreError, decode, encode, message_key, message_prefix};
use agentd_core::{ClientInfo, ClientRole, Decision};
use serde::{Deserialize, Serialize};

/// A bearer token as the daemon keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Short id, shown in listings and used to revoke it.
    pub id: String,
    /// For people: shown in presence and the audit trail.
    pub name: String,
    pub role: ClientRole,
    /// SHA-256 of the token's text.
    pub hash: [u8; 32],
    /// Unix ms.
    pub created_at_ms: i64,
    /// Unix ms; `None`: never expires.
    pub expires_at_ms: Option<i64>,
    /// Unix ms; `None`: not revoked.
    pub revoked_at_ms: Option<i64>,
    /// Unix ms of the last call made with it.
    #[serde(default)]
    pub last_used_at_ms: Option<i64>,
}

/// Who did something in a conversation, and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Unix ms.
    pub at_ms: i64,
    pub client: ClientInfo,
    pub action: AuditAction,
}

/// What a client did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum AuditAction {
    /// Sent a user message (at most its first [`AUDIT_TEXT_CHARS`]
    /// characters are kept).
    MessageSent {
        text: String,
        /// Its queued id, when it was queued while a turn ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queued_id: Option<String>,
    },
    /// Answered a permission request.
    PermissionAnswered {
        request_id: String,
        decision: Decision,
        /// The tool that asked, and what it wanted, for people.
        tool: String,
        summary: String,
    },
}

/// How much of a message's text the audit trail keeps.
pub(crate) const AUDIT_TEXT_CHARS: usize = 200;

impl Store {
    /// Writes a token (new, or changed). Not flushed.
    pub fn put_token(&self, token: &TokenRecord) -> Result<(), StoreError> {
        self.tokens
            .insert(token.id.as_bytes(), encode(&token.id, token)?)?;
        Ok(())
    }

    /// Every token, by id.
    pub fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.tokens.iter() {
            let (k, v) = item?;
            out.push(decode(&k, &v)?);
        }
        Ok(out)
    }

    /// Appends an entry to a conversation's audit trail. Not flushed.
    pub fn put_audit(&self, conv_id: &str, record: &AuditRecord) -> Result<(), StoreError> {
        // Above the conversation's last entry too: sled's generator can
        // hand out an id again after a daemon killed before sled saved
        // its counter, and an entry would replace an older one.
        let generated = self.db.generate_id()?;
        let last = match self.audit.scan_prefix(message_prefix(conv_id)).next_back() {
            Some(item) => {
                let (key, _) = item?;
                key.len()
                    .checked_sub(8)
                    .and_then(|tail| key.get(tail..))
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(u64::from_be_bytes)
                    .unwrap_or(0)
            }
            None => 0,
        };
        let n = generated.max(last.saturating_add(1));
        self.audit
            .insert(message_key(conv_id, n), encode(conv_id, record)?)?;
        Ok(())
    }

    /// A conversation's audit trail, oldest first.
    pub fn audit(&self, conv_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.audit.scan_prefix(message_prefix(conv_id)) {
            let (k, v) = item?;
            out.push(decode(&k, &v)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_audit_entries_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let token = TokenRecord {
            id: "t1".into(),
            name: "laptop".into(),
            role: ClientRole::Approver,
            hash: [7; 32],
            created_at_ms: 1,
            expires_at_ms: Some(2),
            revoked_at_ms: None,
            last_used_at_ms: None,
        };
        store.put_token(&token).unwrap();
        assert_eq!(store.tokens().unwrap(), vec![token]);
        let entry = |text: &str| AuditRecord {
            at_ms: 5,
            client: ClientInfo::local("c1", "al@box", ClientRole::Driver),
            action: AuditAction::MessageSent {
                text: text.into(),
                queued_id: None,
            },
        };
        // Two conversations whose ids share a prefix stay apart.
        store.put_audit("A1", &entry("one")).unwrap();
        store.put_audit("A", &entry("other")).unwrap();
        store.put_audit("A1", &entry("two")).unwrap();
        assert_eq!(store.audit("A1").unwrap(), vec![entry("one"), entry("two")]);
        // An entry numbered above what the generator hands out now (as
        // after a kill before sled saved its counter): the next one still
        // comes after it and replaces nothing.
        let ahead = u64::MAX / 2;
        store
            .audit
            .insert(
                message_key("A1", ahead),
                encode("A1", &entry("ahead")).unwrap(),
            )
            .unwrap();
        store.put_audit("A1", &entry("three")).unwrap();
        assert_eq!(
            store.audit("A1").unwrap(),
            vec![entry("one"), entry("two"), entry("ahead"), entry("three")]
        );
        assert_eq!(store.audit("A").unwrap(), vec![entry("other")]);
    }
}
