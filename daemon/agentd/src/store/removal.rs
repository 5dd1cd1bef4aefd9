//! Deleting conversations, all or nothing across a crash.
//!
//! A delete is first one write: the tombstone (tree `deleting`, the root
//! id → every id the delete takes, the root's sub-agents included). The
//! records are removed next, so from the moment they are gone nothing
//! lists, resolves or loads those conversations; the rest of their keys
//! (messages, events, audit, rules, shells, the create requests that name
//! them, the mid-turn index) go after, and the tombstone last. The store
//! and the journal come back as a prefix of what was written, so a crash
//! leaves either nothing of the delete (the conversations whole) or the
//! tombstone: start-up finds it ([`Store::tombstones`]) and finishes the
//! removal, which may run any number of times.

use super::RuleScope;
use super::{Store, StoreError, decode, encode, message_prefix};

impl Store {
    /// Writes the tombstone of a delete of `ids` under `root` and removes
    /// their records (not yet durable: flush before saying it is done).
    /// From here on the conversations are gone for every reader.
    pub fn tombstone(&self, root: &str, ids: &[String]) -> Result<(), StoreError> {
        self.deleting.insert(root.as_bytes(), encode(root, &ids)?)?;
        for id in ids {
            self.convs.remove(id.as_bytes())?;
        }
        Ok(())
    }

    /// The tombstones left: (root, every id its delete takes).
    pub fn tombstones(&self) -> Result<Vec<(String, Vec<String>)>, StoreError> {
        let mut out = Vec::new();
        for item in self.deleting.iter() {
            let (k, v) = item?;
            out.push((String::from_utf8_lossy(&k).into_owned(), decode(&k, &v)?));
        }
        Ok(out)
    }

    /// Removes every key of conversation `id` this store holds (record,
    /// messages, events, audit, its rules, its shells' records, the create
    /// requests that name it, its mid-turn entry). Idempotent. Not flushed.
    /// Returns how many messages it had.
    pub fn purge(&self, id: &str) -> Result<u64, StoreError> {
        self.convs.remove(id.as_bytes())?;
        let prefix = message_prefix(id);
        let messages = remove_prefix(&self.msgs, &prefix)?;
        remove_prefix(&self.events, &prefix)?;
        remove_prefix(&self.audit, &prefix)?;
        remove_prefix(&self.rules, &RuleScope::Conversation(id.to_string()).key())?;
        for shell in self.shells()? {
            if shell.conversation_id == id {
                self.shells.remove(shell.id.as_bytes())?;
            }
        }
        let mut creates = Vec::new();
        for item in self.creates.iter() {
            let (k, v) = item?;
            let (conv, _at): (String, i64) = decode(&k, &v)?;
            if conv == id {
                creates.push(k);
            }
        }
        for k in creates {
            self.creates.remove(k)?;
        }
        self.mid_turn.remove(id.as_bytes())?;
        self.mid_turn_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        Ok(messages)
    }

    /// Removes the tombstone of a finished delete. Not flushed.
    pub fn clear_tombstone(&self, root: &str) -> Result<(), StoreError> {
        self.deleting.remove(root.as_bytes())?;
        Ok(())
    }

    /// The trees that hold a key of conversation `id` (its record, its
    /// messages, events, audit, rules, checkpoints, shells, create
    /// requests, mid-turn entry, environment): none once a delete of it is done. The
    /// crash test reads it from a stopped daemon's store. The
    /// `checkpoints` tree is read by the one thing its keys share with the
    /// store's: a conversation's begin with one kind byte, then its id and
    /// a NUL.
    pub fn keys_of(&self, id: &str) -> Result<Vec<&'static str>, StoreError> {
        let prefix = message_prefix(id);
        let mut out = Vec::new();
        if self.convs.contains_key(id.as_bytes())? {
            out.push("conversations");
        }
        for (name, tree) in [
            ("messages", &self.msgs),
            ("events", &self.events),
            ("audit", &self.audit),
        ] {
            if tree.scan_prefix(&prefix).next().is_some() {
                out.push(name);
            }
        }
        let mut checkpoints = false;
        for key in self.checkpoints.iter().keys() {
            checkpoints |= key?.get(1..).is_some_and(|k| k.starts_with(&prefix));
        }
        if checkpoints {
            out.push("checkpoints");
        }
        let rules = RuleScope::Conversation(id.to_string()).key();
        if self.rules.scan_prefix(rules).next().is_some() {
            out.push("rules");
        }
        if self.mid_turn.contains_key(id.as_bytes())? {
            out.push("mid_turn");
        }
        if self.environments.contains_key(id.as_bytes())? {
            out.push("environments");
        }
        if self.shells()?.iter().any(|s| s.conversation_id == id) {
            out.push("shells");
        }
        for item in self.creates.iter() {
            let (k, v) = item?;
            let (conv, _at): (String, i64) = decode(&k, &v)?;
            if conv == id {
                out.push("creates");
                break;
            }
        }
        Ok(out)
    }
}

/// Removes every key of `tree` that starts with `prefix`; returns how many.
fn remove_prefix(tree: &super::Tree, prefix: &[u8]) -> Result<u64, StoreError> {
    let keys: Vec<sled::IVec> = tree.scan_prefix(prefix).keys().collect::<Result<_, _>>()?;
    for k in &keys {
        tree.remove(k)?;
    }
    Ok(keys.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ConversationRecord, StoredEvent};
    use agentd_core::Message;

    fn record(id: &str) -> ConversationRecord {
        ConversationRecord {
            id: id.to_string(),
            message_count: 2,
            ..ConversationRecord::default()
        }
    }

    fn stored(store: &Store, id: &str) {
        let m = Message::user(vec![agentd_core::ContentBlock::text("hi")], 1);
        store
            .commit_with_events(
                &record(id),
                &[(1, &m), (2, &m)],
                &[(
                    1,
                    StoredEvent::MessageAppended {
                        at_ms: 1,
                        message_seq: 1,
                    },
                )],
            )
            .unwrap();
        store
            .add_rule(
                &RuleScope::Conversation(id.to_string()),
                &agentd_core::Rule::parse("read", agentd_core::Action::Allow).unwrap(),
            )
            .unwrap();
        store.remember_create(&format!("req-{id}"), id, 1).unwrap();
    }

    #[test]
    fn a_purge_leaves_no_key_of_the_conversation_and_every_key_of_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        stored(&store, "01A");
        stored(&store, "01AB");
        store.tombstone("01A", &["01A".to_string()]).unwrap();
        assert!(
            store.conversation("01A").unwrap().is_none(),
            "hidden at once"
        );
        assert_eq!(store.purge("01A").unwrap(), 2);
        assert_eq!(store.purge("01A").unwrap(), 0, "idempotent");
        assert_eq!(store.keys_of("01A").unwrap(), Vec::<&str>::new());
        assert_eq!(
            store.keys_of("01AB").unwrap().len(),
            5,
            "the other's keys stay"
        );
        assert!(
            store
                .rules(&RuleScope::Conversation("01A".into()))
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.created_by("req-01A").unwrap(), None);
        assert_eq!(store.tombstones().unwrap().len(), 1);
        store.clear_tombstone("01A").unwrap();
        assert!(store.tombstones().unwrap().is_empty());
        // The other conversation, whose id starts the same, is whole.
        let other = store.conversation("01AB").unwrap().unwrap();
        assert_eq!(store.transcript(&other).unwrap().len(), 2);
        assert_eq!(
            store.created_by("req-01AB").unwrap().as_deref(),
            Some("01AB")
        );
        assert_eq!(
            store
                .rules(&RuleScope::Conversation("01AB".into()))
                .unwrap()
                .len(),
            1
        );
    }
}
