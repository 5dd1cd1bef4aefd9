//! What `bash` calls change in a git work tree, at the cost of the paths
//! they change rather than of the work tree.
//!
//! A [`WorkTree`] is shared by every conversation working in one work
//! tree. It keeps:
//! - a **base**: a snapshot of the work tree (a git tree, see [`git`]),
//!   taken by the first call, and again by a call that starts alone when
//!   the history has grown past [`MAX_HISTORY`] paths, the base is older
//!   than [`MAX_BASE_AGE`] or the watch missed changes;
//! - an inotify **watch** of its directories ([`DirWatch`]), which names
//!   the paths that changed without walking;
//! - the **history** of every path changed since the base: its content in
//!   the base, then each later content it was seen with, numbered by a
//!   sequence that grows at each look. Every content in it is kept in the
//!   checkpoint store.
//!
//! A call looks at the watch when it starts (changes since the last look
//! are someone else's: their contents are kept as they are now) and when
//! it ends (changes since it started are its own). What a file was when
//! the call started is its last content seen at or before the call's
//! number, or its content in the base. So a round reads only the files
//! that changed and runs no git at all when none did.
//!
//! When inotify cannot say (its queue overflowed, a directory moved, too
//! many directories to watch), a call ends by comparing a new snapshot with
//! the base instead, and the next call that starts alone takes a new base.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::watch::{DirWatch, Drained};
use super::{FileChange, FileState, git};

/// More paths than this in the history, and the next call that starts
/// alone takes a new base (the history is written with every call's
/// record).
const MAX_HISTORY: usize = 64;

/// A base older than this is taken again by the next call that starts
/// alone: its objects are unreferenced in the repository, and `git gc`
/// prunes such objects (after two weeks by default, at once with
/// `--prune=now`).
const MAX_BASE_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Where contents go: the checkpoint store.
pub(super) trait Keep {
    /// Stores `bytes`; their SHA-256.
    fn keep_bytes(&self, bytes: &[u8]) -> Result<String, String>;
}

/// A regular file's state and bytes (None: absent).
type Found = (FileState, Option<Vec<u8>>);

/// A path's content now: None when it is not a regular file (a directory,
/// a symbolic link: not tracked, as git snapshots do not).
fn now_state(path: &Path) -> Result<Option<Found>, String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Some((FileState::Absent, None)));
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some((
            FileState::Content {
                sha256: super::blobs::sha256_hex(&bytes),
            },
            Some(bytes),
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Some((FileState::Absent, None))),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// A call counted as running until this is dropped (also when its task
/// is aborted).
#[derive(Debug)]
pub(super) struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a call's changes are found.
#[derive(Debug)]
pub(super) enum Start {
    /// From the watch: the base, the call's number and what each path
    /// changed since the base was when it started.
    Watched {
        base: String,
        seq: u64,
        states: Vec<(String, FileState)>,
        running: Running,
    },
    /// The work tree cannot be watched now: a snapshot before and after
    /// the call, as without a watch.
    Snapshots,
}

/// One work tree's base, watch and history.
#[derive(Debug)]
pub(super) struct WorkTree {
    pub repo: git::Repo,
    watch: Option<DirWatch>,
    /// Watching failed (the limit of watches): every call takes snapshots.
    unwatchable: bool,
    base: Option<String>,
    seq: u64,
    history: BTreeMap<String, Vec<(u64, FileState)>>,
    /// Paths seen to be ignored since the base.
    ignored: HashSet<String>,
    /// The watch missed changes since the base.
    lost: bool,
    /// Calls running.
    active: Arc<AtomicUsize>,
    /// When the base was taken.
    base_at: std::time::Instant,

    /// When a call last started or ended.
    pub last_used: std::time::Instant,
    /// The index the base was written from, kept to write the next one
    /// (in the daemon's scratch directory; removed with the work tree).
    index: PathBuf,
}

impl Drop for WorkTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.index);
    }
}

impl WorkTree {
    pub(super) fn new(repo: git::Repo, scratch: &Path) -> WorkTree {
        let index = scratch.join(format!("base-{}", ulid::Ulid::new()));
        WorkTree {
            repo,
            watch: None,
            unwatchable: false,
            base: None,
            seq: 0,
            history: BTreeMap::new(),
            ignored: HashSet::new(),
            lost: false,
            active: Arc::new(AtomicUsize::new(0)),
            base_at: std::time::Instant::now(),

            last_used: std::time::Instant::now(),
            index,
        }
    }

    /// Whether no call is running.
    pub(super) fn idle(&self) -> bool {
        self.running() == 0
    }

    fn running(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Every content the history refers to (kept from retention's sweep).
    pub(super) fn contents(&self) -> impl Iterator<Item = &str> {
        self.history
            .values()
            .flatten()
            .filter_map(|(_, state)| match state {
                FileState::Content { sha256 } => Some(sha256.as_str()),
                FileState::Absent => None,
            })
    }

    /// A call starts.
    pub(super) async fn start(
        &mut self,
        scratch: &Path,
        keep: &(dyn Keep + Sync),
    ) -> Result<Start, String> {
        self.last_used = std::time::Instant::now();
        if self.watch.is_none() && !self.unwatchable {
            self.rewatch().await;
        }
        if self.unwatchable || (self.lost && self.running() > 0) {
            return Ok(Start::Snapshots);
        }
        self.look_or_lose(keep).await?;
        let stale = self.stale();
        if stale {
            if self.running() > 0 {
                // The running calls' numbers refer to this base.
                if self.base.is_none() || self.lost {
                    return Ok(Start::Snapshots);
                }
            } else {
                self.rebase(scratch, keep).await?;
            }
        }
        let Some(base) = self.base.clone() else {
            return Ok(Start::Snapshots);
        };
        self.active.fetch_add(1, Ordering::AcqRel);
        Ok(Start::Watched {
            base,
            seq: self.seq,
            states: self.states_at(self.seq),
            running: Running(self.active.clone()),
        })
    }

    /// The call that started with number `seq` ended: what it changed.
    pub(super) async fn end(
        &mut self,
        seq: u64,
        scratch: &Path,
        keep: &(dyn Keep + Sync),
    ) -> Result<Vec<FileChange>, String> {
        self.last_used = std::time::Instant::now();
        self.look_or_lose(keep).await?;
        let Some(base) = self.base.clone() else {
            return Err("the work tree's base is gone".to_string());
        };
        let candidates: BTreeSet<String> = if self.lost {
            // Every path that differs from the base, and every one seen
            // since, read again.
            let now = git::snapshot(&self.repo, scratch).await?;
            let changed = git::changes(&self.repo, &base, &now).await?;
            let paths: BTreeSet<String> = changed
                .into_iter()
                .map(|c| c.path)
                .chain(self.history.keys().cloned())
                .collect();
            self.observe(paths.iter().cloned().collect(), keep).await?;
            paths
        } else {
            self.history
                .iter()
                .filter(|(_, seen)| seen.last().is_some_and(|(at, _)| *at > seq))
                .map(|(path, _)| path.clone())
                .collect()
        };
        let mut changes = Vec::new();
        for path in candidates {
            let Some(seen) = self.history.get(&path) else {
                continue;
            };
            let Some(before) = state_at(seen, seq) else {
                continue;
            };
            let Some(now) = seen.last().map(|(_, state)| state.clone()) else {
                continue;
            };
            if before != now {
                changes.push(FileChange {
                    path: self.repo.top.join(&path),
                    before,
                    after: Some(now),
                });
            }
        }
        Ok(changes)
    }

    /// Whether the next call should take a new base.
    fn stale(&self) -> bool {
        self.base.is_none()
            || self.lost
            || self.history.len() > MAX_HISTORY
            || self.base_at.elapsed() > MAX_BASE_AGE
    }

    /// Whether a new base is due and can be taken now (no call running):
    /// the caller takes it after a call ended, while the model answers,
    /// rather than on the next call's path.
    pub(super) fn base_due(&self) -> bool {
        !self.unwatchable && self.watch.is_some() && self.idle() && self.stale()
    }

    /// Takes the new base [`WorkTree::base_due`] said is due.
    pub(super) async fn refresh(
        &mut self,
        scratch: &Path,
        keep: &(dyn Keep + Sync),
    ) -> Result<(), String> {
        if !self.base_due() {
            return Ok(());
        }
        self.look_or_lose(keep).await?;
        self.rebase(scratch, keep).await
    }

    /// A new watch of the work tree; failing, the work tree is not
    /// watched again (every call takes snapshots).
    async fn rewatch(&mut self) {
        self.watch = None;
        let top = self.repo.top.clone();
        // A walk of the work tree's directories.
        let made = crate::tasks::spawn_blocking("directory watch", move || DirWatch::new(&top))
            .await
            .map_err(|e| e.to_string())
            .and_then(|made| made);
        match made {
            Ok(watch) => {
                tracing::debug!(
                    top = %self.repo.top.display(),
                    directories = watch.watched(),
                    "watching a work tree"
                );
                self.watch = Some(watch);
                // What changed before this watch is not known.
                self.base = None;
            }
            Err(e) => {
                tracing::warn!(
                    top = %self.repo.top.display(),
                    "checkpoints take two snapshots per command in this work tree: {e}"
                );
                self.unwatchable = true;
            }
        }
    }

    /// A new base: the work tree as it is now, and an empty history.
    async fn rebase(&mut self, scratch: &Path, keep: &(dyn Keep + Sync)) -> Result<(), String> {
        if !self.lost
            && self.watch.is_some()
            && let Some(base) = self.base.take()
        {
            // The history names every path that changed since the base
            // (the caller has just looked): the new base is the old one's
            // index with only those paths read again.
            let paths: Vec<&str> = self.history.keys().map(String::as_str).collect();
            match git::update(&self.repo, &self.index, &paths).await {
                Ok(tree) => {
                    self.base = Some(tree);
                    self.base_at = std::time::Instant::now();
                    self.history.clear();
                    self.ignored.clear();
                    return self.look(keep).await;
                }
                Err(e) => tracing::debug!("checkpoints: a new base from {base} failed: {e}"),
            }
        }
        if self.lost || self.watch.is_none() {
            self.lost = false;
            self.rewatch().await;
            if self.unwatchable {
                return Ok(());
            }
        }
        self.base = None;
        self.history.clear();
        self.ignored.clear();
        // Changes already queued are in the snapshot.
        if let Some(watch) = self.watch.as_mut() {
            watch.drain();
        }
        std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        self.base = Some(git::snapshot_into(&self.repo, &self.index).await?);
        self.base_at = std::time::Instant::now();
        // A change while the snapshot ran may or may not be in it: what
        // such a file holds now is seen, as any later change.
        self.look(keep).await
    }

    /// [`WorkTree::look`]; a failure (git could not read the base, a file
    /// could not be read) leaves the history unsure, so the next call that
    /// starts alone takes a new base.
    async fn look_or_lose(&mut self, keep: &(dyn Keep + Sync)) -> Result<(), String> {
        let looked = self.look(keep).await;
        if looked.is_err() {
            self.lost = true;
        }
        looked
    }

    /// Reads the watch: every path changed since the last look gets its
    /// content now.
    async fn look(&mut self, keep: &(dyn Keep + Sync)) -> Result<(), String> {
        let Some(watch) = self.watch.as_mut() else {
            return Ok(());
        };
        let Drained {
            mut paths,
            new_dirs,
            lost,
        } = watch.drain();
        if lost {
            self.lost = true;
        }
        if !new_dirs.is_empty() {
            let named: Vec<String> = new_dirs.iter().map(|d| format!("{d}/")).collect();
            let refs: Vec<&str> = named.iter().map(String::as_str).collect();
            let ignored = git::ignored(&self.repo, &refs).await?;
            for dir in new_dirs {
                if ignored.contains(&format!("{dir}/")) || ignored.contains(&dir) {
                    continue;
                }
                if let Some(watch) = self.watch.as_mut() {
                    match watch.add_tree(&dir) {
                        Ok(files) => paths.extend(files),
                        Err(e) => {
                            tracing::warn!("checkpoints: {e}");
                            self.lost = true;
                        }
                    }
                }
            }
        }
        if self.base.is_none() {
            return Ok(());
        }
        self.observe(paths.into_iter().collect(), keep).await
    }

    /// Records what each of `paths` holds now (new in the history: with
    /// its content in the base first; ignored ones left out).
    async fn observe(
        &mut self,
        paths: Vec<String>,
        keep: &(dyn Keep + Sync),
    ) -> Result<(), String> {
        let paths: Vec<String> = paths
            .into_iter()
            .filter(|p| !self.ignored.contains(p))
            .collect();
        if paths.is_empty() {
            return Ok(());
        }
        let Some(base) = self.base.clone() else {
            return Ok(());
        };
        let new: Vec<&str> = paths
            .iter()
            .filter(|p| !self.history.contains_key(*p))
            .map(String::as_str)
            .collect();
        if !new.is_empty() {
            let in_base = git::existing(&self.repo, &base, &new).await?;
            let absent: Vec<&str> = new
                .iter()
                .copied()
                .filter(|p| !in_base.contains(*p))
                .collect();
            let ignored = git::ignored(&self.repo, &absent).await?;
            let kept: Vec<&str> = new
                .iter()
                .copied()
                .filter(|p| in_base.contains(*p))
                .collect();
            let contents = git::contents(&self.repo, &base, &kept).await?;
            let mut first: Vec<(String, FileState)> = Vec::new();
            for (path, bytes) in kept.iter().zip(contents) {
                let sha256 = keep.keep_bytes(&bytes)?;
                first.push((path.to_string(), FileState::Content { sha256 }));
            }
            for path in absent {
                if ignored.contains(path) {
                    self.ignored.insert(path.to_string());
                } else {
                    first.push((path.to_string(), FileState::Absent));
                }
            }
            for (path, state) in first {
                self.history.insert(path, vec![(0, state)]);
            }
        }
        self.seq += 1;
        for path in paths {
            let Some(seen) = self.history.get_mut(&path) else {
                continue;
            };
            let Some((state, bytes)) = now_state(&self.repo.top.join(&path))? else {
                continue;
            };
            if let Some(bytes) = bytes {
                keep.keep_bytes(&bytes)?;
            }
            if seen.last().map(|(_, s)| s) != Some(&state) {
                seen.push((self.seq, state));
            }
        }
        Ok(())
    }

    /// What each path of the history held at number `seq`.
    fn states_at(&self, seq: u64) -> Vec<(String, FileState)> {
        self.history
            .iter()
            .filter_map(|(path, seen)| Some((path.clone(), state_at(seen, seq)?)))
            .collect()
    }
}

fn state_at(seen: &[(u64, FileState)], seq: u64) -> Option<FileState> {
    seen.iter()
        .rev()
        .find(|(at, _)| *at <= seq)
        .map(|(_, state)| state.clone())
}

/// What a call the daemon stopped during changed: every file that differs
/// now from what it held when the call started (`starts`: the paths
/// changed since `base` then; any other path held its content in `base`).
/// What a file holds now is not known to be the call's (`after` None), so
/// a rewind never refuses over it.
pub(super) async fn interrupted(
    repo: &git::Repo,
    base: &str,
    starts: &[FileChange],
    scratch: &Path,
    keep: &(dyn Keep + Sync),
) -> Result<Vec<FileChange>, String> {
    let now = git::snapshot(repo, scratch).await?;
    let mut at_start: BTreeMap<PathBuf, FileState> = starts
        .iter()
        .map(|f| (f.path.clone(), f.before.clone()))
        .collect();
    let changed = git::changes(repo, base, &now).await?;
    let from_base: Vec<(String, bool)> = changed
        .into_iter()
        .filter(|c| !at_start.contains_key(&repo.top.join(&c.path)))
        .map(|c| (c.path, c.existed))
        .collect();
    let existed: Vec<&str> = from_base
        .iter()
        .filter(|(_, existed)| *existed)
        .map(|(p, _)| p.as_str())
        .collect();
    let contents = git::contents(repo, base, &existed).await?;
    for (path, bytes) in existed.iter().zip(contents) {
        let sha256 = keep.keep_bytes(&bytes)?;
        at_start.insert(repo.top.join(path), FileState::Content { sha256 });
    }
    for (path, existed) in &from_base {
        if !existed {
            at_start.insert(repo.top.join(path), FileState::Absent);
        }
    }
    let mut files = Vec::new();
    for (path, before) in at_start {
        let Some((now, _)) = now_state(&path)? else {
            continue;
        };
        if now != before {
            files.push(FileChange {
                path,
                before,
                after: None,
            });
        }
    }
    Ok(files)
}
