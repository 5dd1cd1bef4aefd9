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
pub mod blobs;
pub mod git;
mod tracked;
mod watch;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentd_core::tools::Tool;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use blobs::BlobStore;

use crate::config::CheckpointsSection;
use crate::store::Store;
use crate::tools::ToolContext;

/// A file's content at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum FileState {
    /// There was no file.
    Absent,
    /// The file held the content with this SHA-256.
    Content { sha256: String },
}

/// One file a call changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
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
pub struct GitSnapshot {
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
pub struct Record {
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
pub struct CallKey {
    pub conversation_id: String,
    /// The sequence number of the user message whose turn this is.
    pub turn: u64,
    pub tool_use_id: String,
    pub at_ms: i64,
}

/// A checkpoint whose call is running.
#[derive(Debug)]
pub struct Pending {
    /// The record's id; None until it is written (a command outside git,
    /// see [`Checkpoints::started`]).
    id: Option<u64>,
    record: Record,
    repo: Option<git::Repo>,
    /// Its work tree's watch and the call's number there.
    tracked: Option<(
        Arc<tokio::sync::Mutex<tracked::WorkTree>>,
        u64,
        tracked::Running,
    )>,
}

impl Pending {
    /// Whether the record waits for [`Checkpoints::started`].
    pub fn unwritten(&self) -> bool {
        self.id.is_none()
    }
}

/// What a rewind (or a rollback) restores.
#[derive(Debug, Clone, Copy)]
pub enum Since {
    /// Every call of the turns of this user message and later.
    Turn(u64),
    /// Every call recorded after this mark (see [`Checkpoints::mark`]).
    Mark(u64),
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
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
pub enum RestoreError {
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
pub struct TurnCheckpoint {
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
pub struct Checkpoints {
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
    pub fn open(
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
    pub fn keep_unreferenced(mut self) -> Checkpoints {
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

    fn locked(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what `name` called with `input` may change, before it runs;
    /// None when it changes no file (or checkpoints are off). A failure is
    /// logged and the call runs without a checkpoint.
    pub async fn before(
        self: &Arc<Self>,
        key: CallKey,
        name: &str,
        input: &Value,
        ctx: &ToolContext,
    ) -> Option<Pending> {
        if !self.config.enabled {
            return None;
        }
        let tool = Tool::from_name(name)?;
        let mut record = Record {
            conversation_id: key.conversation_id,
            turn: key.turn,
            tool_use_id: key.tool_use_id,
            tool: name.to_string(),
            at_ms: key.at_ms,
            files: Vec::new(),
            git: None,
            untracked: false,
        };
        let mut repo = None;
        let mut tracked = None;
        let result = match tool {
            Tool::Write | Tool::Edit | Tool::Patch => {
                let this = self.clone();
                let (name, input, ctx) = (name.to_string(), input.clone(), ctx.clone());
                let files = tokio::task::spawn_blocking(move || {
                    this.keep_before(&crate::tools::planned_paths(&name, &input, &ctx))
                })
                .await
                .map_err(io_err)
                .and_then(|r| r);
                files.map(|files| record.files = files)
            }
            Tool::Bash if input.get("run_in_background").and_then(Value::as_bool) != Some(true) => {
                match self.repo_of(&ctx.cwd).await {
                    Some(found) => {
                        let tree = self.work_tree(&found);
                        let start = tree.lock().await.start(&self.scratch, &**self).await;
                        match start {
                            Ok(tracked::Start::Watched {
                                base,
                                seq,
                                states,
                                running,
                            }) => {
                                record.files = states
                                    .into_iter()
                                    .map(|(path, before)| FileChange {
                                        path: found.top.join(path),
                                        before,
                                        after: None,
                                    })
                                    .collect();
                                record.git = Some(GitSnapshot {
                                    top: found.top.clone(),
                                    before_tree: base,
                                    after_tree: None,
                                    since_base: true,
                                });
                                tracked = Some((tree, seq, running));
                                Ok(())
                            }
                            Ok(tracked::Start::Snapshots) => {
                                match git::snapshot(&found, &self.scratch).await {
                                    Ok(tree) => {
                                        record.git = Some(GitSnapshot {
                                            top: found.top.clone(),
                                            before_tree: tree,
                                            after_tree: None,
                                            since_base: false,
                                        });
                                        repo = Some(found);
                                        Ok(())
                                    }
                                    Err(e) => Err(e),
                                }
                            }
                            Err(e) => Err(e),
                        }
                    }
                    None => {
                        record.untracked = true;
                        Ok(())
                    }
                }
            }
            _ => return None,
        };
        if let Err(e) = result {
            tracing::warn!(conversation = %record.conversation_id, "no checkpoint before {name}: {e}");
            return None;
        }
        if record.files.is_empty() && record.git.is_none() && !record.untracked {
            return None;
        }
        if record.untracked {
            // A command outside git records only that it was not tracked:
            // nothing to restore depends on it, so it is not written (nor
            // flushed) before the command starts; see `started`.
            return Some(Pending {
                id: None,
                record,
                repo,
                tracked,
            });
        }
        // (A failure drops `tracked`: the call no longer counts as running.)
        let id = self.write(&record)?;
        // Durable before the call changes anything.
        if let Err(e) = self.store.flush().await {
            tracing::warn!("checkpoint before {name} not flushed: {e}");
        }
        Some(Pending {
            id: Some(id),
            record,
            repo,
            tracked,
        })
    }

    /// The git work tree `dir` is in (remembered while its `.git` stays).
    async fn repo_of(&self, dir: &Path) -> Option<git::Repo> {
        let known = self
            .repos
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(dir)
            .cloned();
        if let Some(repo) = known
            && repo.top.join(".git").symlink_metadata().is_ok()
        {
            return Some(repo);
        }
        let found = git::repo_of(dir).await;
        let mut repos = self.repos.lock().unwrap_or_else(|p| p.into_inner());
        match &found {
            Some(repo) => {
                repos.insert(dir.to_path_buf(), repo.clone());
            }
            None => {
                repos.remove(dir);
            }
        }
        found
    }

    /// The watched work tree of `repo`; work trees unused for a while are
    /// let go.
    fn work_tree(&self, repo: &git::Repo) -> Arc<tokio::sync::Mutex<tracked::WorkTree>> {
        let mut trees = self.trees.lock().unwrap_or_else(|p| p.into_inner());
        trees.retain(|top, tree| {
            top == &repo.top
                || Arc::strong_count(tree) > 1
                || tree
                    .try_lock()
                    .map_or(true, |t| !t.idle() || t.last_used.elapsed() < IDLE_TREE)
        });
        trees
            .entry(repo.top.clone())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(tracked::WorkTree::new(
                    repo.clone(),
                    &self.scratch,
                )))
            })
            .clone()
    }

    /// Writes the record of a command outside git once the command has
    /// started (its caller polls the command first), so that the write is
    /// not on the path to its start. The conversation's next commit
    /// flushes it, as it would have flushed a record written before.
    pub fn started(&self, pending: &mut Pending) {
        if pending.id.is_none() {
            pending.id = self.write(&pending.record);
        }
    }

    /// Stores `record` under a new id; a failure is logged (the call runs
    /// without a checkpoint).
    fn write(&self, record: &Record) -> Option<u64> {
        let written = self
            .next_id()
            .map_err(io_err)
            .and_then(|id| self.put(id, record).map(|()| id));
        match written {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::warn!(conversation = %record.conversation_id, "no checkpoint before {}: {e}", record.tool);
                None
            }
        }
    }

    /// Stores the current content of each of `paths`; their changes with
    /// `after` unknown.
    fn keep_before(&self, paths: &[PathBuf]) -> Result<Vec<FileChange>, String> {
        let _guard = self.locked();
        let mut files = Vec::new();
        for path in paths {
            if files.iter().any(|f: &FileChange| &f.path == path) {
                continue;
            }
            let before = self.keep(path)?;
            files.push(FileChange {
                path: path.clone(),
                before,
                after: None,
            });
        }
        Ok(files)
    }

    /// Stores `path`'s content now; the caller holds the lock.
    fn keep(&self, path: &Path) -> Result<FileState, String> {
        match read_state(path)? {
            (state, Some(bytes)) => {
                let (_, written) = self.blobs.put(&bytes).map_err(io_err)?;
                self.bytes.fetch_add(written, Ordering::Relaxed);
                Ok(state)
            }
            (state, None) => Ok(state),
        }
    }

    fn put(&self, id: u64, record: &Record) -> Result<(), String> {
        let bytes = serde_json::to_vec(record).map_err(io_err)?;
        self.tree
            .insert(record_key(&record.conversation_id, id), bytes)
            .map_err(io_err)?;
        Ok(())
    }

    /// Completes the checkpoint of a call that ended: what it left in each
    /// file. A call that changed nothing leaves no record. Made durable by
    /// the commit of the call's result, which follows.
    pub async fn after(self: &Arc<Self>, pending: Pending) {
        let Pending {
            id,
            mut record,
            repo,
            tracked,
        } = pending;
        let Some(id) = id else {
            // Never written (`started` was not reached, or failed).
            return;
        };
        if record.untracked && record.files.is_empty() && record.git.is_none() {
            // A command outside git: `started` wrote all there is to say,
            // and no file was read or stored that could need a sweep.
            return;
        }
        let conv = record.conversation_id.clone();
        if let Some((tree, seq, running)) = tracked {
            let (ended, due) = {
                let mut work_tree = tree.lock().await;
                // No longer running: nothing can start while the lock is
                // held, and the history `seq` refers to stays until it is
                // released.
                drop(running);
                let ended = work_tree.end(seq, &self.scratch, &**self).await;
                (ended, work_tree.base_due())
            };
            if due {
                let this = self.clone();
                tokio::spawn(async move {
                    let mut tree = tree.lock().await;
                    if let Err(e) = tree.refresh(&this.scratch, &*this).await {
                        tracing::debug!("checkpoints: no new base: {e}");
                    }
                });
            }
            match ended {
                Ok(files) => {
                    record.git = None;
                    record.files = files;
                }
                Err(e) => {
                    // The record stays as written before the call: a
                    // rewind compares with the work tree, as after a crash.
                    tracing::warn!(conversation = %conv, "checkpoint after bash: {e}");
                    return;
                }
            }
        } else if let (Some(snap), Some(repo)) = (record.git.as_mut(), repo.as_ref()) {
            match self.git_changes(repo, &snap.before_tree).await {
                Ok((tree, changes)) => {
                    snap.after_tree = Some(tree);
                    record.files = changes;
                }
                Err(e) => {
                    tracing::warn!(conversation = %conv, "checkpoint after bash: {e}");
                    return;
                }
            }
        }
        let reads = record.files.iter().any(|f| f.after.is_none());
        let mut finish = move |this: &Checkpoints| {
            for file in &mut record.files {
                if file.after.is_none() {
                    file.after = Some(read_state(&file.path)?.0);
                }
            }
            record.files.retain(|f| f.after.as_ref() != Some(&f.before));
            if record.files.is_empty() && !record.untracked {
                this.tree
                    .remove(record_key(&record.conversation_id, id))
                    .map_err(io_err)?;
                return Ok(());
            }
            this.put(id, &record)
        };
        let done = if reads {
            let this = self.clone();
            tokio::task::spawn_blocking(move || finish(&this))
                .await
                .map_err(io_err)
                .and_then(|r| r)
        } else {
            // No file to read: only the record to write (or drop).
            finish(self)
        };
        if let Err(e) = done {
            tracing::warn!(conversation = %conv, "checkpoint after a call: {e}");
        }
        if self.bytes.load(Ordering::Relaxed) > self.config.max_bytes {
            let this = self.clone();
            let now = record_now_ms();
            let _ = tokio::task::spawn_blocking(move || this.prune(now)).await;
        }
    }

    /// A new snapshot and the files that differ from `before_tree`, their
    /// earlier contents stored (what is in them now is left for the caller
    /// to read).
    async fn git_changes(
        self: &Arc<Self>,
        repo: &git::Repo,
        before_tree: &str,
    ) -> Result<(String, Vec<FileChange>), String> {
        let after_tree = git::snapshot(repo, &self.scratch).await?;
        let changes = git::changes(repo, before_tree, &after_tree).await?;
        let mut files = Vec::new();
        for change in changes {
            let before = if change.existed {
                let bytes = git::content(repo, before_tree, &change.path).await?;
                let _guard = self.locked();
                let (sha256, written) = self.blobs.put(&bytes).map_err(io_err)?;
                self.bytes.fetch_add(written, Ordering::Relaxed);
                FileState::Content { sha256 }
            } else {
                FileState::Absent
            };
            files.push(FileChange {
                path: repo.top.join(&change.path),
                before,
                after: None,
            });
        }
        Ok((after_tree, files))
    }

    /// Remembers where `name` (a plan step) started: a rollback restores
    /// what was recorded after it.
    pub fn mark(&self, conversation_id: &str, name: &str) -> Result<u64, String> {
        let id = self.next_id().map_err(io_err)?;
        self.tree
            .insert(mark_key(conversation_id, name), id.to_be_bytes().to_vec())
            .map_err(io_err)?;
        Ok(id)
    }

    /// Where `name` started, if it was marked.
    pub fn mark_of(&self, conversation_id: &str, name: &str) -> Option<u64> {
        let value = self.tree.get(mark_key(conversation_id, name)).ok()??;
        <[u8; 8]>::try_from(value.as_ref())
            .ok()
            .map(u64::from_be_bytes)
    }

    /// Every record of a conversation, oldest first, with its id.
    pub fn records(&self, conversation_id: &str) -> Result<Vec<(u64, Record)>, String> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(prefix(RECORD, conversation_id)) {
            let (k, v) = item.map_err(io_err)?;
            let record: Record = serde_json::from_slice(&v)
                .map_err(|e| format!("corrupt checkpoint record: {e}"))?;
            out.push((id_of(&k), record));
        }
        Ok(out)
    }

    /// The turns of a conversation that have checkpoints, oldest first.
    pub fn turns(&self, conversation_id: &str) -> Result<Vec<TurnCheckpoint>, String> {
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

    /// Restores the files the calls `since` changed to their content
    /// before the first of them, and drops those records. Refuses when a
    /// file was changed by someone else since the agent last changed it,
    /// unless `force` (then it is overwritten) or `skip_changed` (then it is
    /// left as it is and reported).
    pub async fn restore(
        self: &Arc<Self>,
        conversation_id: &str,
        since: Since,
        force: bool,
        skip_changed: bool,
    ) -> Result<Restored, RestoreError> {
        let all = self.records(conversation_id).map_err(RestoreError::Io)?;
        let mut chosen: Vec<(u64, Record)> = all
            .into_iter()
            .filter(|(id, r)| match since {
                Since::Turn(turn) => r.turn >= turn,
                Since::Mark(mark) => *id > mark,
            })
            .collect();
        // A bash call the daemon stopped during: compare with now.
        for (_, record) in &mut chosen {
            let Some(snap) = &record.git else { continue };
            if snap.after_tree.is_some() {
                continue;
            }
            if snap.since_base {
                let found = match git::repo_of(&snap.top).await {
                    Some(repo) => {
                        tracked::interrupted(
                            &repo,
                            &snap.before_tree,
                            &record.files,
                            &self.scratch,
                            &**self,
                        )
                        .await
                    }
                    None => Ok(Vec::new()),
                };
                record.files = found.map_err(RestoreError::Io)?;
                continue;
            }
            if let Some(repo) = git::repo_of(&snap.top).await {
                let before_tree = snap.before_tree.clone();
                match self.git_changes(&repo, &before_tree).await {
                    Ok((_, files)) => record.files = files,
                    Err(e) => return Err(RestoreError::Io(e)),
                }
            }
        }
        let this = self.clone();
        let done = tokio::task::spawn_blocking(move || this.apply(chosen, force, skip_changed))
            .await
            .map_err(|e| RestoreError::Io(e.to_string()))??;
        // The used records' removal, durably.
        if let Err(e) = self.store.flush().await {
            tracing::warn!("checkpoints not flushed after a restore: {e}");
        }
        Ok(done)
    }

    fn apply(
        &self,
        chosen: Vec<(u64, Record)>,
        force: bool,
        skip_changed: bool,
    ) -> Result<Restored, RestoreError> {
        let _guard = self.locked();
        // Per file: its content before the first call, and what the last
        // call left (None: not known).
        let mut files: BTreeMap<PathBuf, (FileState, Option<FileState>)> = BTreeMap::new();
        let mut out = Restored::default();
        let mut changed = Vec::new();
        for (_, record) in &chosen {
            if record.untracked {
                out.untracked_commands += 1;
            }
            for f in &record.files {
                match files.get_mut(&f.path) {
                    Some((_, last)) => {
                        // Between two calls of the agent someone else
                        // changed the file: it was not as the first left it
                        // when the second began.
                        if last.as_ref().is_some_and(|l| *l != f.before)
                            && !changed.contains(&f.path)
                        {
                            changed.push(f.path.clone());
                        }
                        *last = f.after.clone();
                    }
                    None => {
                        files.insert(f.path.clone(), (f.before.clone(), f.after.clone()));
                    }
                }
            }
        }
        // Where a link now stands on a file's path nothing is written.
        let mut unusable = Vec::new();
        for (path, (_, last)) in &files {
            let now = match beneath::read(path).map_err(RestoreError::Io)? {
                beneath::Found::Absent => FileState::Absent,
                beneath::Found::File(bytes) => FileState::Content {
                    sha256: blobs::sha256_hex(&bytes),
                },
                beneath::Found::Other(why) => {
                    unusable.push((path.clone(), why));
                    continue;
                }
            };
            if last.as_ref().is_some_and(|last| &now != last) && !changed.contains(path) {
                changed.push(path.clone());
            }
        }
        if !unusable.is_empty() && !skip_changed {
            let why: Vec<String> = unusable.into_iter().map(|(_, why)| why).collect();
            return Err(RestoreError::Io(format!(
                "nothing was restored: {}",
                why.join("; ")
            )));
        }
        for (path, _) in unusable {
            // A rollback leaves such a file alone, as one changed since.
            files.remove(&path);
            out.skipped.push(path);
        }
        if !changed.is_empty() && !force && !skip_changed {
            return Err(RestoreError::ChangedSince(changed));
        }
        // Every content is read before any file is written: a missing one
        // stops the restore before it changed anything.
        let mut plan = Vec::new();
        for (path, (before, _)) in files {
            if skip_changed && !force && changed.contains(&path) {
                out.skipped.push(path);
                continue;
            }
            let content = match &before {
                FileState::Absent => None,
                FileState::Content { sha256 } => Some(self.blobs.get(sha256).map_err(|e| {
                    RestoreError::Io(format!(
                        "the earlier content of {} is gone ({e}); nothing was restored",
                        path.display()
                    ))
                })?),
            };
            plan.push((path, content));
        }
        for (path, content) in plan {
            match content {
                Some(bytes) => {
                    beneath::write(&path, &bytes).map_err(RestoreError::Io)?;
                    out.restored.push(path);
                }
                None => {
                    if beneath::remove(&path).map_err(RestoreError::Io)? {
                        out.removed.push(path);
                    }
                }
            }
        }
        for (id, record) in &chosen {
            let _ = self.tree.remove(record_key(&record.conversation_id, *id));
        }
        Ok(out)
    }

    /// Retention: drops records older than `max_age_days`, then the oldest
    /// while the stored contents exceed `max_bytes`, then every content no
    /// record refers to. Returns the records dropped.
    ///
    /// Unreferenced contents stay when no record at all was found: an empty
    /// record tree next to stored contents is a store that was replaced
    /// (moved aside, or a fresh one), not contents nobody needs.
    pub fn prune(&self, now_ms: i64) -> Result<usize, String> {
        let _guard = self.locked();
        let max_age_ms =
            i64::try_from(self.config.max_age_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
        let mut records = Vec::new();
        for item in self.tree.scan_prefix([RECORD]) {
            let (k, v) = item.map_err(io_err)?;
            match serde_json::from_slice::<Record>(&v) {
                Ok(r) => records.push((k, r)),
                Err(_) => {
                    self.tree.remove(&k).map_err(io_err)?;
                }
            }
        }
        let any_records = !records.is_empty();
        records.sort_by_key(|(k, r)| (r.at_ms, id_of(k)));
        let sizes = |r: &Record| -> Vec<String> {
            r.files
                .iter()
                .filter_map(|f| match &f.before {
                    FileState::Content { sha256 } => Some(sha256.clone()),
                    FileState::Absent => None,
                })
                .collect()
        };
        let mut dropped = 0;
        let mut kept: Vec<(sled::IVec, Record)> = Vec::new();
        for (k, r) in records {
            if now_ms.saturating_sub(r.at_ms) > max_age_ms {
                self.tree.remove(&k).map_err(io_err)?;
                dropped += 1;
            } else {
                kept.push((k, r));
            }
        }
        // Bytes each content takes, counted once.
        let mut total = 0u64;
        let mut size_of = std::collections::HashMap::new();
        for (_, r) in &kept {
            for sha in sizes(r) {
                if let std::collections::hash_map::Entry::Vacant(e) = size_of.entry(sha.clone()) {
                    let len = self.blobs.get(&sha).map(|b| b.len() as u64).unwrap_or(0);
                    total += len;
                    e.insert(len);
                }
            }
        }
        let mut first = 0;
        while total > self.config.max_bytes && first < kept.len() {
            let (k, r) = &kept[first];
            self.tree.remove(k).map_err(io_err)?;
            dropped += 1;
            first += 1;
            let still: HashSet<String> = kept[first..].iter().flat_map(|(_, r)| sizes(r)).collect();
            for sha in sizes(r) {
                if !still.contains(&sha)
                    && let Some(len) = size_of.remove(&sha)
                {
                    total = total.saturating_sub(len);
                }
            }
        }
        let mut keep: HashSet<String> = kept[first..].iter().flat_map(|(_, r)| sizes(r)).collect();
        // The watched work trees' histories name contents a later call's
        // record will refer to; a tree busy now is swept next time.
        let live = self.live_contents();
        if let Some(live) = &live {
            keep.extend(live.iter().cloned());
        }
        // Contents younger than a few minutes may belong to a call that is
        // still running, whose record does not name them yet.
        if self.sweep && any_records && live.is_some() {
            self.blobs.sweep(&keep, self.sweep_grace).map_err(io_err)?;
        }
        self.bytes.store(total, Ordering::Relaxed);
        Ok(dropped)
    }
}

impl Checkpoints {
    /// Every content the watched work trees' histories refer to; None
    /// when one of them is in use.
    fn live_contents(&self) -> Option<HashSet<String>> {
        let trees = self.trees.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = HashSet::new();
        for tree in trees.values() {
            let tree = tree.try_lock().ok()?;
            out.extend(tree.contents().map(str::to_string));
        }
        Some(out)
    }
}

/// Unix ms now, for retention (the only clock read here; retention is no
/// part of a conversation's state).
fn record_now_ms() -> i64 {
    crate::runtime::Clock::System.now_ms()
}

#[cfg(test)]
mod tests;
