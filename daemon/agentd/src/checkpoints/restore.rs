//! Rewind and rollback: the files the chosen calls changed put back as
//! they were before the first of them, unless someone else changed them
//! since.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::{
    Checkpoints, FileState, Record, RestoreError, Restored, Since, beneath, blobs, git, record_key,
    tracked,
};

impl Checkpoints {
    /// Restores the files the calls `since` changed to their content
    /// before the first of them, and drops those records. Refuses when a
    /// file was changed by someone else since the agent last changed it,
    /// unless `force` (then it is overwritten) or `skip_changed` (then it is
    /// left as it is and reported).
    pub(crate) async fn restore(
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
        let done = crate::tasks::spawn_blocking("checkpoint restore", move || {
            this.apply(chosen, force, skip_changed)
        })
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
        let mut out = Restored::default();
        let (mut files, mut changed) = per_file(&chosen, &mut out);
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
}

/// Folds the chosen calls' records into each file's content before the
/// first call and what the last one left (None: not known), with the
/// files someone else changed between two of the calls.
fn per_file(chosen: &[(u64, Record)], out: &mut Restored) -> (FileStates, Vec<PathBuf>) {
    let mut files = FileStates::new();
    let mut changed = Vec::new();
    for (_, record) in chosen {
        if record.untracked {
            out.untracked_commands += 1;
        }
        for f in &record.files {
            match files.get_mut(&f.path) {
                Some((_, last)) => {
                    // Between two calls of the agent someone else
                    // changed the file: it was not as the first left it
                    // when the second began.
                    if last.as_ref().is_some_and(|l| *l != f.before) && !changed.contains(&f.path) {
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
    (files, changed)
}

/// Per file: its content before the first call, and what the last call
/// left.
type FileStates = BTreeMap<PathBuf, (FileState, Option<FileState>)>;
