//! A call's checkpoint: what it may change is recorded before it runs
//! ([`Checkpoints::before`], durable first), what it left after it ends
//! ([`Checkpoints::after`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use agentd_core::tools::Tool;
use serde_json::Value;

use super::{
    CallKey, Checkpoints, FileChange, FileState, GitSnapshot, IDLE_TREE, Pending, Record, Tracked,
    git, io_err, read_state, record_key, record_now_ms, tracked,
};
use crate::tools::ToolContext;

impl Checkpoints {
    /// Records what `name` called with `input` may change, before it runs;
    /// None when it changes no file (or checkpoints are off). A failure is
    /// logged and the call runs without a checkpoint.
    pub(crate) async fn before(
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
                let files = crate::tasks::spawn_blocking("checkpoint snapshot", move || {
                    this.keep_before(&crate::tools::planned_paths(&name, &input, &ctx))
                })
                .await
                .map_err(io_err)
                .and_then(|r| r);
                files.map(|files| record.files = files)
            }
            Tool::Bash if input.get("run_in_background").and_then(Value::as_bool) != Some(true) => {
                self.bash_before(&ctx.cwd, &mut record)
                    .await
                    .map(|(found, watched)| {
                        repo = found;
                        tracked = watched;
                    })
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

    /// What a foreground `bash` call's record starts with: in a watched
    /// work tree the base and what the paths changed since held now; in
    /// one that cannot be watched a snapshot; outside git, that the
    /// command is not tracked. Returns the repository to compare with
    /// after the call (snapshots) or the call's place in the watch.
    async fn bash_before(
        &self,
        cwd: &Path,
        record: &mut Record,
    ) -> Result<(Option<git::Repo>, Option<Tracked>), String> {
        let Some(found) = self.repo_of(cwd).await else {
            record.untracked = true;
            return Ok((None, None));
        };
        let tree = self.work_tree(&found);
        let start = tree.lock().await.start(&self.scratch, self).await?;
        match start {
            tracked::Start::Watched {
                base,
                seq,
                states,
                running,
            } => {
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
                Ok((None, Some((tree, seq, running))))
            }
            tracked::Start::Snapshots => {
                let tree = git::snapshot(&found, &self.scratch).await?;
                record.git = Some(GitSnapshot {
                    top: found.top.clone(),
                    before_tree: tree,
                    after_tree: None,
                    since_base: false,
                });
                Ok((Some(found), None))
            }
        }
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
    pub(crate) fn started(&self, pending: &mut Pending) {
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

    /// Completes the checkpoint of a call that ended: what it left in each
    /// file. A call that changed nothing leaves no record. Made durable by
    /// the commit of the call's result, which follows.
    pub(crate) async fn after(self: &Arc<Self>, pending: Pending) {
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
                crate::tasks::spawn("checkpoint refresh", async move {
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
            crate::tasks::spawn_blocking("checkpoint finish", move || finish(&this))
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
            let _ =
                crate::tasks::spawn_blocking("checkpoint retention", move || this.prune(now)).await;
        }
    }

    /// A new snapshot and the files that differ from `before_tree`, their
    /// earlier contents stored (what is in them now is left for the caller
    /// to read).
    pub(super) async fn git_changes(
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
}
