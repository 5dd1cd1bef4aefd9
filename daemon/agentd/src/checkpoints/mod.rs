//! Checkpoints: what files were before the agent changed them, so a person
//! can rewind a conversation's code to the start of one of its turns.
//!
//! Before a tool that changes files runs (`write`, `edit`, `patch`, and
//! `bash` in the foreground), the tool runner asks [`Checkpoints::before`]
//! to record what the call may change:
//! - `write`, `edit`, `patch`: the files they will change, their content
//!   kept in the content-addressed [`BlobStore`] (or the fact that a file
//!   did not exist);
//! - `bash` in a git work tree: what the paths changed since the work
//!   tree's base (a snapshot as a git tree object, see [`git`], taken at
//!   most once per turn) held when the command started; when it ends, the
//!   work tree's inotify watch names the files it changed, whose earlier
//!   contents are in the store already (see `tracked.rs`). The user's
//!   index, branches, refs and stash are left alone. Where the work tree
//!   cannot be watched, a snapshot before and after the command are
//!   compared instead;
//! - `bash` elsewhere: nothing can be known; the record only says that a
//!   command ran, so a rewind can say its changes are not undone.
//!
//! After the call, [`Checkpoints::after`] records what the agent left in
//! each file (its SHA-256). A rewind refuses, unless forced, when a file's
//! content now differs from that: someone else changed it since.
//!
//! Records live in sled (tree `checkpoints`), keyed by conversation and a
//! number from sled's id generator, so they keep their order across
//! restarts; each names the user message whose turn made it (its sequence
//! number) and the tool call. The record of a call is durable before the
//! call runs. Calls that changed nothing leave no record. Retention
//! (`[checkpoints] max_bytes`, `max_age_days`) drops the oldest records and
//! then the contents no record refers to.

mod beneath;
pub(crate) mod blobs;
mod call;
pub(crate) mod git;
mod restore;
mod retention;
mod tracked;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

pub(crate) use blobs::BlobStore;
use retention::record_now_ms;

use crate::config::CheckpointsSection;
use crate::store::Store;

/// A file's content at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum FileState {
    /// There was no file.
    Absent,
    /// The file held the content with this SHA-256.
    Content { sha256: String },
}

/// One file a call changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileChange {
    /// Absolute.
    pub path: PathBuf,
    /// Before the call (its content is in the blob store).
    pub before: FileState,
    /// What the call left (only its hash is kept); None until the call has
    /// ended, and for good when the daemon stopped while it ran.
    #[serde(default)]
    pub after: Option<FileState>,
}

/// The work-tree snapshots around a `bash` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GitSnapshot {
    /// The top of the work tree.
    pub top: PathBuf,
    /// The tree before the command.
    pub before_tree: String,
    /// The tree after it; None until it ended (for good when the daemon
    /// stopped while it ran: a rewind then compares with the work tree).
    #[serde(default)]
    pub after_tree: Option<String>,
    /// `before_tree` is the work tree's base, not a snapshot taken when
    /// the call started: the record's `files` say what the paths changed
    /// since the base held then (see `tracked.rs`). Only a call the
    /// daemon stopped during keeps this; an ended call's record names
    /// its files and no snapshot.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub since_base: bool,
}

/// The checkpoint of one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub conversation_id: String,
    /// The sequence number of the user message whose turn made the call.
    pub turn: u64,
    pub tool_use_id: String,
    pub tool: String,
    pub at_ms: i64,
    /// The files it changed.
    #[serde(default)]
    pub files: Vec<FileChange>,
    /// `bash` in a git work tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSnapshot>,
    /// `bash` outside a git work tree: what it changed is not known.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untracked: bool,
}

/// Which call a checkpoint is for.
#[derive(Debug, Clone)]
pub(crate) struct CallKey {
    pub conversation_id: String,
    /// The sequence number of the user message whose turn this is.
    pub turn: u64,
    pub tool_use_id: String,
    pub at_ms: i64,
}

/// A checkpoint whose call is running.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The record's id; None until it is written (a command outside git,
    /// see [`Checkpoints::started`]).
    id: Option<u64>,
    record: Record,
    repo: Option<git::Repo>,
    /// Its work tree's watch and the call's number there.
    tracked: Option<Tracked>,
}

/// A running call's work tree, its number there, and its count as running.
type Tracked = (
    Arc<tokio::sync::Mutex<tracked::WorkTree>>,
    u64,
    tracked::Running,
);

impl Pending {
    /// Whether the record waits for [`Checkpoints::started`].
    pub(crate) fn unwritten(&self) -> bool {
        self.id.is_none()
    }
}

/// What a rewind (or a rollback) restores.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Since {
    /// Every call of the turns of this user message and later.
    Turn(u64),
    /// Every call recorded after this mark (see [`Checkpoints::mark`]).
    Mark(u64),
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    /// Files written back to their earlier content.
    pub restored: Vec<PathBuf>,
    /// Files the agent created, removed.
    pub removed: Vec<PathBuf>,
    /// Files changed by someone else since, left as they are (a rollback
    /// that may not overwrite them).
    pub skipped: Vec<PathBuf>,
    /// `bash` ran outside a git work tree in those turns: its changes are
    /// not undone.
    pub untracked_commands: usize,
}

/// Why a restore did nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RestoreError {
    /// Files changed by someone other than the agent since it last changed
    /// them.
    #[error("changed since by someone other than the agent: {}", list(.0))]
    ChangedSince(Vec<PathBuf>),
    /// A stored content or a record could not be read, or a file not
    /// written.
    #[error("{0}")]
    Io(String),
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A checkpointed turn, for listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TurnCheckpoint {
    /// The user message's sequence number.
    pub turn: u64,
    /// Calls recorded.
    pub calls: u32,
    /// Files changed, each once, in the order first changed.
    pub files: Vec<PathBuf>,
    /// `bash` calls outside a git work tree (not tracked).
    pub untracked_commands: u32,
    /// When the first call ran.
    pub at_ms: i64,
}

/// The daemon's checkpoints (one for all conversations).
pub(crate) struct Checkpoints {
    tree: crate::store::Tree,
    store: Store,
    blobs: BlobStore,
    /// Temporary indexes of git snapshots.
    scratch: PathBuf,
    config: CheckpointsSection,
    /// Held while contents are written and records changed, and while
    /// retention sweeps: a sweep never removes a content a record is about
    /// to refer to.
    lock: std::sync::Mutex<()>,
    /// Bytes in the blob store (approximately: what was written since the
    /// last count).
    bytes: AtomicU64,
    /// How old an unreferenced content must be before a sweep removes it.
    sweep_grace: std::time::Duration,
    /// Whether retention removes contents no record refers to: not while a
    /// store moved aside at start may be put back (see
    /// [`Checkpoints::keep_unreferenced`]).
    sweep: bool,
    /// The git work tree of each directory commands ran in.
    repos: std::sync::Mutex<HashMap<PathBuf, git::Repo>>,
    /// The highest record or mark id in use (see [`Checkpoints::next_id`]).
    last_id: AtomicU64,
    /// The watched work trees, by top.
    trees: std::sync::Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<tracked::WorkTree>>>>,
}

/// A watched work tree no call used for this long is let go (its watches
/// freed); the next call there starts with a new base.
const IDLE_TREE: std::time::Duration = std::time::Duration::from_secs(600);

impl tracked::Keep for Checkpoints {
    fn keep_bytes(&self, bytes: &[u8]) -> Result<String, String> {
        let _guard = self.locked();
        let (sha256, written) = self.blobs.put(bytes).map_err(io_err)?;
        self.bytes.fetch_add(written, Ordering::Relaxed);
        Ok(sha256)
    }
}

impl std::fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoints")
            .field("blobs", &self.blobs)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

const RECORD: u8 = b'c';
const MARK: u8 = b'm';

fn prefix(kind: u8, conv: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(conv.len() + 2);
    key.push(kind);
    key.extend_from_slice(conv.as_bytes());
    key.push(0);
    key
}

fn record_key(conv: &str, id: u64) -> Vec<u8> {
    let mut key = prefix(RECORD, conv);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

fn mark_key(conv: &str, name: &str) -> Vec<u8> {
    let mut key = prefix(MARK, conv);
    key.extend_from_slice(name.as_bytes());
    key
}

fn id_of(key: &[u8]) -> u64 {
    let tail = key.len().saturating_sub(8);
    key.get(tail..)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

/// The highest id of the records and marks in `tree` (0: none).
fn highest_id(tree: &crate::store::Tree) -> u64 {
    let mut highest = 0;
    for item in tree.iter() {
        let Ok((key, value)) = item else { continue };
        let id = match key.first() {
            Some(&RECORD) => id_of(&key),
            Some(&MARK) => <[u8; 8]>::try_from(value.as_ref())
                .map(u64::from_be_bytes)
                .unwrap_or(0),
            _ => 0,
        };
        highest = highest.max(id);
    }
    highest
}

/// A file's content now, hashed; and its bytes.
fn read_state(path: &Path) -> Result<(FileState, Option<Vec<u8>>), String> {
    match std::fs::read(path) {
        Ok(bytes) => Ok((
            FileState::Content {
                sha256: blobs::sha256_hex(&bytes),
            },
            Some(bytes),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((FileState::Absent, None)),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn io_err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Checkpoints {
    /// Opens the checkpoints: records in `store`, contents and scratch
    /// files under `dir` (`<data dir>/checkpoints`).
    pub(crate) fn open(
        store: &Store,
        dir: &Path,
        config: CheckpointsSection,
    ) -> Result<Checkpoints, String> {
        let blobs = BlobStore::open(&dir.join("blobs"))
            .map_err(|e| format!("{}: {e}", dir.join("blobs").display()))?;
        let scratch = dir.join("scratch");
        // Temporary indexes a crash left behind.
        let _ = std::fs::remove_dir_all(&scratch);
        let bytes = blobs.total_bytes().unwrap_or(0);
        let tree = store.checkpoints_tree();
        let last_id = highest_id(&tree);
        Ok(Checkpoints {
            tree,
            store: store.clone(),
            blobs,
            scratch,
            config,
            lock: std::sync::Mutex::new(()),
            bytes: AtomicU64::new(bytes),
            sweep_grace: std::time::Duration::from_secs(600),
            sweep: true,
            repos: std::sync::Mutex::new(HashMap::new()),
            last_id: AtomicU64::new(last_id),
            trees: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Keeps every stored content, referred to or not, for this daemon's
    /// life: the store these checkpoints are recorded in is not the one
    /// the contents were stored for (an unreadable store was moved aside
    /// at start, and the user may put it back).
    pub(crate) fn keep_unreferenced(mut self) -> Checkpoints {
        self.sweep = false;
        self
    }

    /// A new id for a record or a mark, above every one in use. The
    /// store's generator alone can hand out an id again after a daemon
    /// killed before sled saved its counter; a rewind would then take a
    /// newer record for an older one (or one would replace the other).
    fn next_id(&self) -> Result<u64, crate::store::StoreError> {
        let generated = self.store.next_id()?;
        let mut last = self.last_id.load(Ordering::Acquire);
        loop {
            let id = generated.max(last.saturating_add(1));
            match self
                .last_id
                .compare_exchange(last, id, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(id),
                Err(now) => last = now,
            }
        }
    }

    /// Stores `record` under `id` (a new record, or one completed).
    fn put(&self, id: u64, record: &Record) -> Result<(), String> {
        let bytes = serde_json::to_vec(record).map_err(io_err)?;
        self.tree
            .insert(record_key(&record.conversation_id, id), bytes)
            .map_err(io_err)?;
        Ok(())
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers where `name` (a plan step) started: a rollback restores
    /// what was recorded after it.
    pub(crate) fn mark(&self, conversation_id: &str, name: &str) -> Result<u64, String> {
        let id = self.next_id().map_err(io_err)?;
        self.tree
            .insert(mark_key(conversation_id, name), id.to_be_bytes().to_vec())
            .map_err(io_err)?;
        Ok(id)
    }

    /// Where `name` started, if it was marked.
    pub(crate) fn mark_of(&self, conversation_id: &str, name: &str) -> Option<u64> {
        let value = self.tree.get(mark_key(conversation_id, name)).ok()??;
        <[u8; 8]>::try_from(value.as_ref())
            .ok()
            .map(u64::from_be_bytes)
    }

    /// Every record of a conversation, oldest first, with its id.
    pub(crate) fn records(&self, conversation_id: &str) -> Result<Vec<(u64, Record)>, String> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(prefix(RECORD, conversation_id)) {
            let (k, v) = item.map_err(io_err)?;
            let record: Record = serde_json::from_slice(&v)
                .map_err(|e| format!("corrupt checkpoint record: {e}"))?;
            out.push((id_of(&k), record));
        }
        Ok(out)
    }

    /// The last turn whose calls changed files the checkpoints can put
    /// back (a `bash` call in a git work tree the daemon stopped during may
    /// have): what a code rewind with no message named goes back to. A
    /// turn of untracked commands alone changed nothing it could restore.
    pub(crate) fn last_changed_turn(&self, conversation_id: &str) -> Result<Option<u64>, String> {
        Ok(self
            .records(conversation_id)?
            .into_iter()
            .filter(|(_, r)| !r.files.is_empty() || r.git.is_some())
            .map(|(_, r)| r.turn)
            .max())
    }

    /// The turns of a conversation that have checkpoints, oldest first.
    pub(crate) fn turns(&self, conversation_id: &str) -> Result<Vec<TurnCheckpoint>, String> {
        let mut turns: BTreeMap<u64, TurnCheckpoint> = BTreeMap::new();
        for (_, record) in self.records(conversation_id)? {
            let entry = turns.entry(record.turn).or_insert(TurnCheckpoint {
                turn: record.turn,
                calls: 0,
                files: Vec::new(),
                untracked_commands: 0,
                at_ms: record.at_ms,
            });
            entry.calls += 1;
            if record.untracked {
                entry.untracked_commands += 1;
            }
            for f in record.files {
                if !entry.files.contains(&f.path) {
                    entry.files.push(f.path);
                }
            }
        }
        Ok(turns.into_values().collect())
    }
}

#[cfg(test)]
mod tests;
