//! Persistence in sled. This is the only module that knows keys and trees.
//!
//! Trees: `conversations` (id → [`ConversationRecord`] JSON), `messages`
//! (id ‖ big-endian seq → [`Message`] JSON), `rules` (scope ‖ rule →
//! [`agentd_core::Rule`] JSON), `shells` (id → `ShellRecord` JSON), `events` (id ‖ big-endian event seq →
//! the durable events of one commit from that seq on, see [`Store::append`]:
//! what a reconnecting client is replayed),
//! `mid_turn` (ids of conversations not at rest, so start-up finds the
//! ones to recover without reading every record), `meta` (schema version,
//! whether `mid_turn` has been built), `images` (SHA-256 hex → the image's
//! bytes: every image once, whatever number of messages refer to it),
//! `tokens` and `audit` (see [`access`]), `checkpoints` (see
//! `crate::checkpoints`), `environments` (see `crate::environment`),
//! `deleting` (see [`removal`]: the tombstones of conversations being
//! deleted).
//! sled 0.34 makes nothing durable until a flush, and its flush is costly
//! (a hand-off to its I/O thread pool and back, and a `sync_file_range`).
//! So every change also goes to the store's journal ([`journal`]), and
//! every write a client is told about goes through [`Store::flush`]: one
//! `write(2)` of the changes since the last flush to the journal file.
//! sled is made durable in the background, and opening the store replays
//! what the journal holds beyond it.

pub(crate) mod access;
mod events;
mod journal;
mod open;
pub(crate) mod persisted;
mod records;
mod removal;
mod usage;

pub(crate) use journal::Tree;
pub(crate) use records::{
    ConversationRecord, FilePin, ForkOrigin, ModelHistory, ModelSwitch, QueuedMessage,
    RememberedRequest, RequestOutcome, RuleScope, Setup, StoredEvent, SubAgentEnd, SubAgentLink,
    SubAgentType, TrustRecord,
};

use agentd_core::Message;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Bumped when the record layout changes incompatibly.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// sled's page cache (`[store] cache_bytes`); its 1 GiB default is far more
/// than a daemon needs. Live conversations keep their transcript in memory,
/// so the cache mostly serves listing, loading a conversation again and
/// start-up, which the operating system's page cache serves nearly as well;
/// a daemon keeps it full once it has written that much. See BENCHMARKS.md
/// (2026-11-24, the store's cache) for what its size costs and buys.
pub(crate) const DEFAULT_CACHE_BYTES: u64 = 8 * 1024 * 1024;
/// The smallest cache `[store] cache_bytes` accepts.
pub(crate) const MIN_CACHE_BYTES: u64 = 256 * 1024;

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store error: {0}")]
    Sled(#[from] sled::Error),
    /// A record could not be (de)serialized.
    #[error("corrupt record {key}: {message}")]
    Corrupt {
        key: String,
        /// The decoder's message.
        message: String,
    },
    /// The data was written by an incompatible version.
    #[error("data directory has schema version {found}, this agentd understands {expected}")]
    Schema {
        /// On disk.
        found: u32,
        expected: u32,
    },
    /// A flush could not finish: its blocking task was dropped (the daemon
    /// is shutting down).
    #[error("store is shutting down")]
    Closed,
    #[error("flush failed: {0}")]
    Flush(String),
}

/// What a flush must survive (`[store] sync` in the config file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sync {
    /// A killed daemon: a flush writes the journal (`write(2)`), so nothing
    /// flushed is lost when the process dies, but the last flushes may be
    /// lost to a power cut or a kernel crash.
    #[default]
    Kill,
    /// A power cut: each flush also calls `fdatasync` on the journal file
    /// before anyone is told it is durable (concurrent flushes share one).
    Power,
}

/// The store.
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    convs: Tree,
    msgs: Tree,
    rules: Tree,
    shells: Tree,
    events: Tree,
    mid_turn: Tree,
    /// Token usage per day and model: `YYYY-MM-DD` NUL model → usage.
    usage_days: Tree,
    /// Raises of the daily budgets, by day (`YYYY-MM-DD`).
    budget_raises: Tree,
    /// Conversations created by requests that carried a client request id:
    /// request id → (conversation id, Unix ms).
    creates: Tree,
    /// Directories whose project hooks run (`agent trust DIR`): the
    /// absolute path, as key.
    trusted: Tree,
    /// Image bytes by their SHA-256 (lower-case hex): content-addressed,
    /// so an image sent many times, or by many conversations, is kept once.
    images: Tree,
    /// Bearer tokens of the TCP listener (see [`access`]).
    tokens: Tree,
    /// Who did what, per conversation (see [`access`]).
    audit: Tree,
    /// What `mid_turn` holds, so a commit writes it only on a change.
    mid_turn_ids: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Every tree's changes, written by [`Store::flush`].
    journal: std::sync::Arc<journal::Journal>,
    /// The `checkpoints` tree (its keys are `crate::checkpoints`' own).
    checkpoints: Tree,
    /// The `environments` tree (its keys are `crate::environment`'s own).
    environments: Tree,
    /// Tombstones: the root id of a delete → every id it deletes (see
    /// [`removal`]).
    deleting: Tree,
    /// Flushes asked for, for tests and benchmarks that count them.
    flushes: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Makes every flush fail, for tests of what a failed write undoes.
    #[cfg(test)]
    fail_flushes: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

fn message_key(conv_id: &str, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(conv_id.len() + 9);
    key.extend_from_slice(conv_id.as_bytes());
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn message_prefix(conv_id: &str) -> Vec<u8> {
    let mut key = conv_id.as_bytes().to_vec();
    key.push(0);
    key
}

fn decode<T: for<'de> Deserialize<'de>>(key: &[u8], bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        message: e.to_string(),
    })
}

fn encode<T: Serialize>(key: &str, value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Corrupt {
        key: key.to_string(),
        message: e.to_string(),
    })
}

impl Store {
    /// Makes every write so far durable. Concurrent callers share one flush.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        #[cfg(test)]
        if self.fail_flushes.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::Flush("injected failure".to_string()));
        }
        match self.journal.sync() {
            // One write(2) of a few kilobytes: cheaper than any hand-off.
            Sync::Kill => self.journal.write_pending(),
            Sync::Power => {
                let journal = self.journal.clone();
                // Under paused time (the runtime's unit tests) the blocking
                // task also holds tokio's clock still.
                crate::tasks::spawn_blocking("journal write", move || journal.write_pending())
                    .await
                    .map_err(|_| StoreError::Closed)?
            }
        }
    }

    /// How many flushes were asked for since the store was opened.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes every later flush fail (or work again).
    #[cfg(test)]
    pub(crate) fn fail_flushes(&self, fail: bool) {
        self.fail_flushes
            .store(fail, std::sync::atomic::Ordering::Relaxed);
    }

    /// Writes a conversation record and new messages (not yet durable:
    /// call [`Store::flush`]). See [`Store::commit_with_events`] for why a
    /// crash cannot tear it.
    pub fn commit(
        &self,
        record: &ConversationRecord,
        messages: &[(u64, &Message)],
    ) -> Result<(), StoreError> {
        self.commit_with_events(record, messages, &[])
    }

    /// Like [`Store::commit`], and first the durable events clients are
    /// told about these writes (in ascending sequence order), under one
    /// key: conversation ‖ the first event's seq (see [`Store::append`]).
    ///
    /// No sled transaction: a transaction makes sled write its log in
    /// three pieces, each synced on its own, which tripled the cost of
    /// every flush. Atomicity comes from order instead. sled's log, and the
    /// journal replayed over it, are recovered as a prefix (each
    /// stops at the first write that did not make it), so writing the events, then the messages, then the
    /// record means that after a crash the record is either the old one or
    /// the new one with everything it refers to. Messages beyond the
    /// record's `message_count` are the torn tail of a commit that never
    /// became durable: readers bound the transcript by the record (see
    /// [`Store::transcript`]) and the next commit overwrites them. An event
    /// whose record write was lost is harmless: its sequence number was
    /// never handed out (the actor announces only after the flush).
    pub fn commit_with_events(
        &self,
        record: &ConversationRecord,
        messages: &[(u64, &Message)],
        events: &[(u64, StoredEvent)],
    ) -> Result<(), StoreError> {
        let rec = encode(&record.id, record)?;
        self.append(&record.id, messages, events)?;
        // The mid-turn index is written before a record that enters a turn
        // and after one that leaves it, so a crash can leave an extra entry
        // (skipped and dropped at recovery) but never miss one.
        let mid_turn = record.needs_recovery();
        let mut ids = self.mid_turn_ids.lock().unwrap_or_else(|p| p.into_inner());
        if mid_turn && !ids.contains(&record.id) {
            self.mid_turn.insert(record.id.as_bytes(), &[])?;
            ids.insert(record.id.clone());
        }
        self.convs.insert(record.id.as_bytes(), rec)?;
        if !mid_turn && ids.remove(&record.id) {
            self.mid_turn.remove(record.id.as_bytes())?;
        }
        Ok(())
    }

    /// The first half of [`Store::commit_with_events`]: events and
    /// messages without the record, for a commit whose record a later
    /// commit before the same flush writes. Until then the messages are a
    /// tail no reader sees.
    ///
    /// The events (in ascending sequence order) go under one key,
    /// conversation ‖ the first one's seq: one sled insert and one journal
    /// record per commit instead of one per event (issue 44). A single
    /// event is stored alone, as every event was before; several as a
    /// batch (see [`stored_events`] for how readers tell them apart).
    pub fn append(
        &self,
        conv_id: &str,
        messages: &[(u64, &Message)],
        events: &[(u64, StoredEvent)],
    ) -> Result<(), StoreError> {
        let mut encoded = Vec::with_capacity(messages.len());
        for (seq, m) in messages {
            encoded.push((message_key(conv_id, *seq), encode(conv_id, m)?));
        }
        let batch = match events {
            [] => None,
            [(seq, event)] => Some((*seq, encode(conv_id, event)?)),
            [(first, _), ..] => {
                if !events.windows(2).all(|w| w[0].0 < w[1].0) {
                    return Err(StoreError::Corrupt {
                        key: conv_id.to_string(),
                        message: "a commit's events are not in sequence order".to_string(),
                    });
                }
                Some((*first, encode(conv_id, &events)?))
            }
        };
        if let Some((first, value)) = batch {
            self.events.insert(message_key(conv_id, first), value)?;
        }
        for (k, v) in encoded {
            self.msgs.insert(k, v)?;
        }
        Ok(())
    }

    /// Stores an image's bytes under their SHA-256 (not yet durable: the
    /// commit of the message that refers to it is flushed after it, so the
    /// message never survives a crash without its image). Idempotent: an
    /// image already stored is not written again.
    pub fn put_image(&self, sha256: &str, bytes: &[u8]) -> Result<(), StoreError> {
        if !self.images.contains_key(sha256.as_bytes())? {
            self.images.insert(sha256.as_bytes(), bytes)?;
        }
        Ok(())
    }

    /// An image's bytes, by SHA-256.
    pub fn image(&self, sha256: &str) -> Result<Option<sled::IVec>, StoreError> {
        Ok(self.images.get(sha256.as_bytes())?)
    }

    /// How many distinct images are stored.
    pub fn image_count(&self) -> usize {
        self.images.len()
    }

    /// One conversation record.
    pub fn conversation(&self, id: &str) -> Result<Option<ConversationRecord>, StoreError> {
        match self.convs.get(id.as_bytes())? {
            Some(v) => Ok(Some(decode(id.as_bytes(), &v)?)),
            None => Ok(None),
        }
    }

    /// The records of conversations that are not at rest (a turn was in
    /// flight when the daemon stopped), found through the `mid_turn` index:
    /// start-up reads only these, however many conversations there are.
    pub fn conversations_mid_turn(&self) -> Result<Vec<ConversationRecord>, StoreError> {
        let ids: Vec<String> = self
            .mid_turn_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        let mut out = Vec::new();
        for id in ids {
            match self.conversation(&id)? {
                Some(record) if record.needs_recovery() => out.push(record),
                // Left by a crash between a record and its index entry.
                _ => {
                    self.mid_turn.remove(id.as_bytes())?;
                    self.mid_turn_ids
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&id);
                }
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Records newest first (ULID order), older than `before` when given,
    /// at most `limit` of them (0: all); only those are decoded. The flag
    /// says whether older ones remain.
    pub fn conversations_page(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<ConversationRecord>, bool), StoreError> {
        self.conversations_page_where(before, limit, |_| true)
    }

    /// Like [`Store::conversations_page`], of the records `keep` keeps.
    pub fn conversations_page_where(
        &self,
        before: Option<&str>,
        limit: usize,
        keep: impl Fn(&ConversationRecord) -> bool,
    ) -> Result<(Vec<ConversationRecord>, bool), StoreError> {
        let iter = match before {
            Some(b) => self.convs.range(..b.as_bytes()),
            None => self.convs.iter(),
        };
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut out = Vec::new();
        for item in iter.rev() {
            let (k, v) = item?;
            let record: ConversationRecord = decode(&k, &v)?;
            if !keep(&record) {
                continue;
            }
            if out.len() == limit {
                return Ok((out, true));
            }
            out.push(record);
        }
        Ok((out, false))
    }

    /// Every conversation id, newest first, without decoding the records.
    pub fn conversation_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for key in self.convs.iter().keys().rev() {
            out.push(String::from_utf8_lossy(&key?).into_owned());
        }
        Ok(out)
    }

    /// Ids starting with `prefix`, at most `limit` of them.
    pub fn ids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for item in self.convs.scan_prefix(prefix.as_bytes()).keys().take(limit) {
            out.push(String::from_utf8_lossy(&item?).into_owned());
        }
        Ok(out)
    }

    /// A conversation's transcript as its record knows it: messages
    /// 1..=`message_count` (anything beyond is the torn tail of a commit a
    /// crash cut short; see [`Store::commit_with_events`]).
    pub fn transcript(
        &self,
        record: &ConversationRecord,
    ) -> Result<Vec<(u64, Message)>, StoreError> {
        self.messages_between(&record.id, 0, record.message_count)
    }

    /// Messages after `after` up to and including `upto`, in order.
    fn messages_between(
        &self,
        conv_id: &str,
        after: u64,
        upto: u64,
    ) -> Result<Vec<(u64, Message)>, StoreError> {
        if after >= upto {
            return Ok(Vec::new());
        }
        let start = message_key(conv_id, after.saturating_add(1));
        let prefix = message_prefix(conv_id);
        let mut out = Vec::new();
        for item in self.msgs.range(start..) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            let seq_bytes: [u8; 8] =
                k[prefix.len()..]
                    .try_into()
                    .map_err(|_| StoreError::Corrupt {
                        key: String::from_utf8_lossy(&k).into_owned(),
                        message: "bad message key".to_string(),
                    })?;
            let seq = u64::from_be_bytes(seq_bytes);
            if seq > upto {
                break;
            }
            out.push((seq, decode(&k, &v)?));
        }
        Ok(out)
    }

    /// The conversation a create request with this client request id made
    /// (or was about to make), if it is remembered.
    pub fn created_by(&self, request_id: &str) -> Result<Option<String>, StoreError> {
        match self.creates.get(request_id.as_bytes())? {
            Some(v) => {
                let (id, _at_ms): (String, i64) = decode(request_id.as_bytes(), &v)?;
                Ok(Some(id))
            }
            None => Ok(None),
        }
    }

    /// Remembers that the create request `request_id` makes conversation
    /// `conv_id` (not yet durable). Written before the conversation, so a
    /// stored conversation always has its request remembered.
    pub fn remember_create(
        &self,
        request_id: &str,
        conv_id: &str,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        self.creates.insert(
            request_id.as_bytes(),
            encode(request_id, &(conv_id, at_ms))?,
        )?;
        Ok(())
    }

    /// Forgets create requests remembered before `at_ms`; returns how many.
    pub fn forget_creates_before(&self, at_ms: i64) -> Result<usize, StoreError> {
        let mut old = Vec::new();
        for item in self.creates.iter() {
            let (k, v) = item?;
            let (_, at): (String, i64) = decode(&k, &v)?;
            if at < at_ms {
                old.push(k);
            }
        }
        for k in &old {
            self.creates.remove(k)?;
        }
        Ok(old.len())
    }

    /// Trusts `dir` (absolute, canonical) with the project hooks files
    /// found under it now (`pinned`): each file's hooks run while it is as
    /// pinned. Trusting again pins the files as they are now.
    /// Not flushed. Returns whether anything changed.
    pub fn trust_dir(&self, dir: &Path, pinned: Vec<FilePin>) -> Result<bool, StoreError> {
        let key = dir.as_os_str().as_encoded_bytes();
        let value = encode("trusted", &TrustRecord { pinned })?;
        let old = self.trusted.insert(key, value.as_slice())?;
        Ok(old.is_none_or(|old| *old != *value))
    }

    /// No longer trusts `dir`. Not flushed. Returns whether it was trusted.
    pub fn untrust_dir(&self, dir: &Path) -> Result<bool, StoreError> {
        let key = dir.as_os_str().as_encoded_bytes();
        Ok(self.trusted.remove(key)?.is_some())
    }

    /// The trusted directories, in path order, each with what was pinned
    /// when it was trusted. A directory trusted before files were pinned
    /// (an empty value) has no pin.
    pub fn trusted_dirs(&self) -> Result<Vec<(PathBuf, TrustRecord)>, StoreError> {
        use std::os::unix::ffi::OsStrExt;
        let mut out = Vec::new();
        for entry in self.trusted.iter() {
            let (key, value) = entry?;
            let record = if value.is_empty() {
                TrustRecord::default()
            } else {
                decode(&key, &value)?
            };
            out.push((PathBuf::from(std::ffi::OsStr::from_bytes(&key)), record));
        }
        Ok(out)
    }

    pub fn add_rule(&self, scope: &RuleScope, rule: &agentd_core::Rule) -> Result<(), StoreError> {
        let mut key = scope.key();
        key.extend_from_slice(rule.spec().as_bytes());
        self.rules.insert(key, encode("rule", rule)?)?;
        Ok(())
    }

    /// The rules of a scope.
    pub fn rules(&self, scope: &RuleScope) -> Result<Vec<agentd_core::Rule>, StoreError> {
        let mut out = Vec::new();
        for item in self.rules.scan_prefix(scope.key()) {
            let (k, v) = item?;
            out.push(decode(&k, &v)?);
        }
        Ok(out)
    }

    /// Writes a background shell's record (not yet durable).
    pub fn put_shell(&self, shell: &persisted::ShellRecord) -> Result<(), StoreError> {
        self.shells
            .insert(shell.id.as_bytes(), encode(&shell.id, shell)?)?;
        Ok(())
    }

    /// Every background shell record.
    pub fn shells(&self) -> Result<Vec<persisted::ShellRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.shells.iter() {
            let (k, v) = item?;
            out.push(decode(&k, &v)?);
        }
        Ok(out)
    }

    /// The tree the checkpoints keep their records in (`checkpoints`; the
    /// layout of its keys is `crate::checkpoints`' own).
    pub(crate) fn checkpoints_tree(&self) -> Tree {
        self.checkpoints.clone()
    }

    /// The tree the conversations' environments are kept in
    /// (`environments`; the layout is `crate::environment`'s own).
    pub(crate) fn environments_tree(&self) -> Tree {
        self.environments.clone()
    }

    /// A number larger than every one handed out before (sled's id
    /// generator) — but not across a daemon killed before sled saved its
    /// counter: callers that order by it keep their own floor (see
    /// `Checkpoints::next_id`, `put_audit`).
    pub(crate) fn next_id(&self) -> Result<u64, StoreError> {
        Ok(self.db.generate_id()?)
    }

    /// Bytes the database occupies on disk (approximate).
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_core::{ContentBlock, ConvState, Message, Mode, Usage};

    fn record(id: &str) -> ConversationRecord {
        ConversationRecord {
            id: id.to_string(),
            title: "t".into(),
            cwd: "/".into(),
            model: "m".into(),
            created_at_ms: 1,
            updated_at_ms: 1,
            conversation: agentd_core::Conversation {
                state: ConvState::Idle,
                mode: Mode::Default,
                ..agentd_core::Conversation::default()
            },
            ..ConversationRecord::default()
        }
    }

    /// A record as the version before the groups wrote it: one flat
    /// object, every field at the top. Users' stores hold these.
    const FLAT_RECORD: &str = r#"{
        "id": "01FLAT", "title": "t", "cwd": "/w", "model": "m",
        "created_at_ms": 1, "updated_at_ms": 2, "state": {"state": "idle"},
        "mode": "accept_edits", "additional_dirs": ["/extra"], "allow_rules": ["read"],
        "message_count": 3, "usage": {"input_tokens": 5, "output_tokens": 6},
        "seq_reserved": 7, "turns": 1, "requests": [], "queued": [], "queued_next": 4,
        "last_usage": {"input_tokens": 5, "output_tokens": 6},
        "parent_id": "01PARENT", "continued_as": "01NEXT", "continued_automatically": true,
        "hop": 2, "continue_pending": true, "pruned_through": 1,
        "sub_agents_usage": {"input_tokens": 8, "output_tokens": 9},
        "sub_agents_cost_usd": 0.5, "sub_agents_counted": ["a1"],
        "forked_from": "01OLD", "forked_at": 3
    }"#;

    #[test]
    fn a_record_written_flat_by_the_previous_version_still_loads_and_is_written_flat() {
        let record: ConversationRecord = decode(b"c/01FLAT", FLAT_RECORD.as_bytes()).unwrap();
        assert_eq!(record.setup.additional_dirs, [PathBuf::from("/extra")]);
        assert_eq!(record.setup.allow_rules, ["read"]);
        assert_eq!(
            record.conversation.continuation.parent_id.as_deref(),
            Some("01PARENT")
        );
        assert_eq!(
            record.conversation.continuation.continued_as.as_deref(),
            Some("01NEXT")
        );
        assert!(
            record.conversation.continuation.continued_automatically
                && record.conversation.continuation.pending
        );
        assert_eq!(record.conversation.continuation.hop, 2);
        assert_eq!(record.conversation.sub_agents.usage.output_tokens, 9);
        assert_eq!(record.conversation.sub_agents.cost_usd, 0.5);
        assert_eq!(record.conversation.sub_agents.counted, ["a1"]);
        assert_eq!(record.fork.forked_from.as_deref(), Some("01OLD"));
        assert_eq!(record.fork.forked_at, 3);
        assert_eq!(
            (record.conversation.mode, record.queued_next),
            (Mode::AcceptEdits, 4)
        );
        // Written again, it is the same flat object: an older daemon reads it.
        let written: serde_json::Value =
            serde_json::from_slice(&encode("c/01FLAT", &record).unwrap()).unwrap();
        let old: serde_json::Value = serde_json::from_str(FLAT_RECORD).unwrap();
        for (key, value) in old.as_object().unwrap() {
            // Usage objects gain their zero cache counts.
            if !value.is_object() {
                assert_eq!(written.get(key), Some(value), "{key}");
            }
        }
        let minimal = r#"{"id": "01MIN", "title": "", "cwd": "/", "model": "m",
            "created_at_ms": 0, "updated_at_ms": 0, "state": {"state": "idle"}, "message_count": 0}"#;
        let record: ConversationRecord = decode(b"c/01MIN", minimal.as_bytes()).unwrap();
        assert_eq!(
            record.conversation.continuation,
            agentd_core::ContinuationChain::default(),
            "groups missing: defaults"
        );
    }

    /// Records as the daemon wrote them (its serializer's output) before
    /// the chain of continuations and the sub-agents' usage moved into the
    /// core's `Conversation`: one with every group set, one all defaults.
    const WRITTEN_FULL: &str = r#"{"id":"01REC","title":"t","cwd":"/w","model":"m","created_at_ms":1,"updated_at_ms":2,"state":{"state":"context_exhausted","summary":"s","final_usage":{"input_tokens":1,"output_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"mode":"accept_edits","queued":[{"id":"q1","text":"later","at_ms":1,"from":null}],"additional_dirs":["/extra"],"allow_rules":["read"],"message_count":30,"usage":{"input_tokens":50,"output_tokens":60,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"seq_reserved":70,"turns":10,"requests":[{"id":"r1","at_ms":1,"outcome":{"kind":"answered"}}],"queued_next":4,"last_usage":{"input_tokens":51,"output_tokens":61,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"parent_id":"01PARENT","continued_as":"01NEXT","continued_automatically":true,"hop":2,"continue_pending":true,"pruned_through":1,"budget_raised":{"per_day_usd":5},"sub_agent":{"parent_id":"01P","agent_id":"a","description":"d"},"sub_agents_usage":{"input_tokens":8,"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"sub_agents_cost_usd":0.5,"sub_agents_counted":["a1"],"forked_from":"01OLDER","forked_at":3}"#;
    const WRITTEN_DEFAULTS: &str = r#"{"id":"01MIN","title":"","cwd":"","model":"","created_at_ms":0,"updated_at_ms":0,"state":{"state":"idle"},"mode":"default","queued":[],"additional_dirs":[],"allow_rules":[],"message_count":0,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"seq_reserved":0,"turns":0,"requests":[],"queued_next":0,"last_usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"hop":0,"sub_agents_usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"sub_agents_cost_usd":0.0}"#;

    #[test]
    fn a_record_written_before_the_chain_and_the_sub_agents_moved_into_the_conversation_reads_and_writes_the_same()
     {
        for (key, json) in [("c/01REC", WRITTEN_FULL), ("c/01MIN", WRITTEN_DEFAULTS)] {
            let record: ConversationRecord = decode(key.as_bytes(), json.as_bytes()).unwrap();
            let written: serde_json::Value =
                serde_json::from_slice(&encode(key, &record).unwrap()).unwrap();
            let old: serde_json::Value = serde_json::from_str(json).unwrap();
            // The same object: every key, value and absence (the order of
            // its keys, which no reader depends on, aside).
            assert_eq!(written, old, "{key}");
        }
        let record: ConversationRecord = decode(b"c/01REC", WRITTEN_FULL.as_bytes()).unwrap();
        assert_eq!(
            record.conversation.continuation,
            agentd_core::ContinuationChain {
                parent_id: Some("01PARENT".to_string()),
                continued_as: Some("01NEXT".to_string()),
                continued_automatically: true,
                hop: 2,
                pending: true,
            }
        );
        assert_eq!(
            record.conversation.sub_agents,
            agentd_core::SubAgents {
                usage: Usage {
                    input_tokens: 8,
                    output_tokens: 9,
                    ..Usage::default()
                },
                cost_usd: 0.5,
                counted: vec!["a1".to_string()],
            }
        );
        assert!(record.needs_recovery(), "a continuation is owed");
    }

    #[tokio::test]
    async fn a_power_safe_store_flushes_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open_with(dir.path(), Sync::Power, DEFAULT_CACHE_BYTES).unwrap();
            store.commit(&record("c1"), &[]).unwrap();
            store.flush().await.unwrap();
            assert_eq!(store.flushes(), 1);
        }
        let store = Store::open_with(dir.path(), Sync::Power, DEFAULT_CACHE_BYTES).unwrap();
        assert_eq!(store.conversation("c1").unwrap().unwrap().title, "t");
    }

    #[tokio::test]
    async fn messages_are_ordered_and_isolated_per_conversation() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let m = |t: &str| Message::user(vec![ContentBlock::text(t)], 0);
        let (a1, a2, b1) = (m("a1"), m("a2"), m("b1"));
        store.commit(&record("A"), &[(1, &a1), (2, &a2)]).unwrap();
        store.commit(&record("AB"), &[(1, &b1)]).unwrap();
        store.flush().await.unwrap();
        let got = store.messages_between("A", 0, u64::MAX).unwrap();
        assert_eq!(
            got.iter().map(|(s, m)| (*s, m.text())).collect::<Vec<_>>(),
            vec![(1, "a1".into()), (2, "a2".into())]
        );
        assert_eq!(store.messages_between("A", 1, u64::MAX).unwrap().len(), 1);
        assert_eq!(
            store.ids_with_prefix("A", 5).unwrap(),
            vec!["A".to_string(), "AB".to_string()]
        );
    }

    #[tokio::test]
    async fn the_transcript_ends_where_the_record_says() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let m = |t: &str| Message::user(vec![ContentBlock::text(t)], 0);
        let mut rec = record("A");
        rec.message_count = 2;
        store
            .commit(&rec, &[(1, &m("one")), (2, &m("two"))])
            .unwrap();
        // The torn tail of a later commit whose record write was lost.
        store
            .msgs
            .insert(message_key("A", 3), encode("A", &m("torn")).unwrap())
            .unwrap();
        let texts: Vec<String> = store
            .transcript(&rec)
            .unwrap()
            .into_iter()
            .map(|(_, m)| m.text())
            .collect();
        assert_eq!(texts, ["one", "two"]);
        // The next commit overwrites the tail.
        rec.message_count = 3;
        store.commit(&rec, &[(3, &m("three"))]).unwrap();
        let last = store.transcript(&rec).unwrap().pop().unwrap();
        assert_eq!((last.0, last.1.text()), (3, "three".to_string()));
        rec.message_count = 0;
        assert!(store.transcript(&rec).unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_mid_turn_index_follows_commits_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let busy = |id: &str| {
            let mut r = record(id);
            r.conversation.state = ConvState::AwaitingLlm { iteration: 1 };
            r
        };
        let ids = |store: &Store| -> Vec<String> {
            store
                .conversations_mid_turn()
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect()
        };
        {
            let store = Store::open(dir.path()).unwrap();
            store.commit(&busy("A"), &[]).unwrap();
            store.commit(&busy("B"), &[]).unwrap();
            store.commit(&record("C"), &[]).unwrap();
            assert_eq!(ids(&store), ["A", "B"]);
            store.commit(&record("B"), &[]).unwrap();
            assert_eq!(ids(&store), ["A"]);
            // An entry a crash left behind (the record came to rest).
            store.mid_turn.insert("C", &[]).unwrap();
            store.flush().await.unwrap();
        }
        {
            let store = Store::open(dir.path()).unwrap();
            assert_eq!(ids(&store), ["A"]);
            assert!(store.mid_turn.get("C").unwrap().is_none());
            // A store from before the index gets it built at open.
            store.mid_turn.clear().unwrap();
            store
                .db
                .open_tree("meta")
                .unwrap()
                .remove("mid_turn_index")
                .unwrap();
            store.flush().await.unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(ids(&store), ["A"]);
    }

    #[tokio::test]
    async fn an_owed_continuation_is_in_the_mid_turn_index_until_it_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let exhausted = |pending: bool| {
            let mut r = record("X");
            r.conversation.state = ConvState::ContextExhausted {
                summary: "s".into(),
                final_usage: Usage::default(),
            };
            r.conversation.continuation.pending = pending;
            r
        };
        let ids = |store: &Store| -> Vec<String> {
            store
                .conversations_mid_turn()
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect()
        };
        {
            let store = Store::open(dir.path()).unwrap();
            store.commit(&exhausted(false), &[]).unwrap();
            assert!(ids(&store).is_empty(), "exhausted is at rest");
            store.commit(&exhausted(true), &[]).unwrap();
            assert_eq!(ids(&store), ["X"]);
            store.flush().await.unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(ids(&store), ["X"], "a restart finds it");
        store.commit(&exhausted(false), &[]).unwrap();
        assert!(ids(&store).is_empty());
    }

    #[tokio::test]
    async fn conversations_come_newest_first_a_page_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for id in ["01A", "01B", "01C", "01D", "01E"] {
            store.commit(&record(id), &[]).unwrap();
        }
        let ids = |page: &[ConversationRecord]| -> Vec<String> {
            page.iter().map(|r| r.id.clone()).collect()
        };
        let (page, more) = store.conversations_page(None, 2).unwrap();
        assert_eq!((ids(&page), more), (vec!["01E".into(), "01D".into()], true));
        let (page, more) = store.conversations_page(Some("01D"), 2).unwrap();
        assert_eq!((ids(&page), more), (vec!["01C".into(), "01B".into()], true));
        let (page, more) = store.conversations_page(Some("01B"), 2).unwrap();
        assert_eq!((ids(&page), more), (vec!["01A".into()], false));
        let (page, more) = store.conversations_page(None, 5).unwrap();
        assert_eq!((page.len(), more), (5, false));
        let (page, more) = store.conversations_page(None, 0).unwrap();
        assert_eq!((page.len(), more), (5, false));
        assert_eq!(
            store.conversation_ids().unwrap(),
            ["01E", "01D", "01C", "01B", "01A"]
        );
    }

    fn appended(at_ms: i64, message_seq: u64) -> StoredEvent {
        StoredEvent::MessageAppended { at_ms, message_seq }
    }

    fn state(at_ms: i64) -> StoredEvent {
        StoredEvent::StateChanged {
            at_ms,
            state: ConvState::Idle,
        }
    }

    /// The seqs of the events after `seq` (all of them: no limit).
    fn seqs_after(store: &Store, conv_id: &str, seq: u64) -> Vec<u64> {
        store
            .events_after(conv_id, seq, usize::MAX)
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    #[tokio::test]
    async fn a_commits_events_are_one_key_and_a_resume_inside_it_gets_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let m = Message::user(vec![ContentBlock::text("hi")], 0);
        {
            let store = Store::open(dir.path()).unwrap();
            let mut rec = record("A");
            rec.message_count = 1;
            // Seq 6 went to an ephemeral event (the reply's usage).
            let first = [(5, appended(10, 1)), (7, state(11)), (8, appended(12, 1))];
            store.commit_with_events(&rec, &[(1, &m)], &first).unwrap();
            assert_eq!(store.events.len(), 1, "one key for the commit's events");
            store
                .commit_with_events(&record("AB"), &[], &[(6, state(1)), (9, state(2))])
                .unwrap();
            store
                .commit_with_events(&rec, &[], &[(10, state(13))])
                .unwrap();
            store.flush().await.unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.events.len(), 3);
        for (after, expected) in [
            (0, vec![5, 7, 8, 10]),
            (4, vec![5, 7, 8, 10]),
            (5, vec![7, 8, 10]),
            (6, vec![7, 8, 10]),
            (7, vec![8, 10]),
            (8, vec![10]),
            (9, vec![10]),
            (10, vec![]),
        ] {
            assert_eq!(seqs_after(&store, "A", after), expected, "after {after}");
        }
        assert_eq!(
            seqs_after(&store, "AB", 6),
            [9],
            "another conversation's batch"
        );
        let got = store.events_after("A", 5, 10).unwrap().unwrap();
        assert_eq!(got[0], (7, state(11)), "the events themselves come back");
        assert_eq!(got[1], (8, appended(12, 1)));
        // The log reaches back to its first key.
        assert!(!store.events_cover("A", 4).unwrap());
        assert!(store.events_cover("A", 5).unwrap());
        assert!(store.events_cover("A", 7).unwrap());
        // The limit counts events, not keys.
        assert_eq!(store.events_after("A", 4, 4).unwrap().unwrap().len(), 4);
        assert!(store.events_after("A", 4, 3).unwrap().is_none());
        assert_eq!(store.events_after("A", 5, 3).unwrap().unwrap().len(), 3);
        assert!(store.events_after("A", 5, 2).unwrap().is_none());
    }

    #[tokio::test]
    async fn events_an_earlier_agentd_stored_one_per_key_are_still_read() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let mut rec = record("A");
            rec.message_count = 1;
            store.commit(&rec, &[]).unwrap();
            // What agentd wrote before issue 44: each event under its own
            // key, the event's JSON alone.
            for (seq, json) in [
                (
                    1,
                    r#"{"kind":"message_appended","at_ms":100,"message_seq":1}"#,
                ),
                (
                    2,
                    r#"{"kind":"state_changed","at_ms":101,"state":{"state":"idle"}}"#,
                ),
                (
                    4,
                    r#"{"kind":"message_appended","at_ms":102,"message_seq":2}"#,
                ),
            ] {
                store
                    .events
                    .insert(message_key("A", seq), json.as_bytes())
                    .unwrap();
            }
            store.flush().await.unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        // This version goes on with batches after them.
        store
            .commit_with_events(&record("A"), &[], &[(5, state(103)), (6, appended(104, 3))])
            .unwrap();
        let all = store.events_after("A", 0, 100).unwrap().unwrap();
        assert_eq!(
            all,
            [
                (1, appended(100, 1)),
                (2, state(101)),
                (4, appended(102, 2)),
                (5, state(103)),
                (6, appended(104, 3)),
            ]
        );
        assert_eq!(seqs_after(&store, "A", 2), [4, 5, 6]);
        assert_eq!(seqs_after(&store, "A", 3), [4, 5, 6]);
        assert_eq!(seqs_after(&store, "A", 5), [6]);
        assert!(store.events_cover("A", 1).unwrap());
        assert!(!store.events_cover("A", 0).unwrap());
    }

    #[tokio::test]
    async fn numbers_of_a_failed_commit_taken_again_follow_the_later_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store
            .commit_with_events(&record("A"), &[], &[(1, state(1))])
            .unwrap();
        // A commit whose flush failed: its numbers are handed out again.
        store
            .commit_with_events(&record("A"), &[], &[(2, state(2)), (4, state(2))])
            .unwrap();
        // The next commit numbered its first durable event 3 (2 went to an
        // ephemeral event): the failed batch's 4 is not replayed.
        store
            .commit_with_events(&record("A"), &[], &[(3, state(3)), (5, state(3))])
            .unwrap();
        let all = store.events_after("A", 0, 100).unwrap().unwrap();
        assert_eq!(
            all.iter().map(|(s, e)| (*s, e.clone())).collect::<Vec<_>>(),
            [(1, state(1)), (2, state(2)), (3, state(3)), (5, state(3))]
        );
        // The same commit again at the same first number replaces it.
        store
            .commit_with_events(&record("A"), &[], &[(3, state(4))])
            .unwrap();
        assert_eq!(seqs_after(&store, "A", 2), [3]);
        // Events out of order are refused, not stored.
        assert!(
            store
                .commit_with_events(&record("A"), &[], &[(9, state(5)), (8, state(5))])
                .is_err()
        );
        assert_eq!(seqs_after(&store, "A", 3), Vec::<u64>::new());
    }

    #[tokio::test]
    async fn data_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            store.commit(&record("X"), &[]).unwrap();
            store.flush().await.unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.conversation("X").unwrap(), Some(record("X")));
    }
}
