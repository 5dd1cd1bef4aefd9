//! Background shells: commands the daemon runs on behalf of a conversation
//! beyond the tool call (and the turn, and the client) that started them.
//!
//! Each shell is `bash -c` in a process group of its own (see
//! [`crate::process`]), so stopping it stops everything it started. Its stdout and stderr share one pipe; a
//! reader task copies the pipe into a spool file under the data directory
//! (up to a size cap, after which output is drained and dropped behind a
//! marker line) and keeps the last bytes in memory, so the daemon's memory
//! stays bounded whatever the command prints. A monitor task waits for the
//! shell to exit, stops processes it left behind in its group, and records
//! the end.
//!
//! Records go to the daemon's store through the `persist` callback on every
//! change of state (not on every byte of output: `output_bytes` of a stored
//! record is as of its last change). After a crash, [`ShellManager::recover`]
//! marks the shells that were running as lost and kills those still running
//! that provably are ours: same pid and same start time in `/proc`.

mod adopt;
mod commands;
mod output;
mod removal;
mod report;
mod shell;
mod tasks;

use std::collections::HashMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use regex::Regex;
use tokio::sync::broadcast;

pub(crate) use crate::store::persisted::{ShellRecord, ShellStatus};

use crate::process::{self, DRAIN, KILL_WAIT, OnDrop};
pub(crate) use commands::{CommandAction, CommandRequest, Foreground};
#[cfg(test)]
use output::Spool;
pub(crate) use report::status_words;
use shell::Shell;
use tasks::{group_of, provably_ours};

/// Largest read of the spool, per pipe read.
const PIPE_CHUNK: usize = 64 * 1024;
/// Alphabet of shell ids (RFC 4648 base32, lower case).
const ID_ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// How many shells may run, and how much of their output is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShellLimits {
    /// Running shells in the whole daemon.
    pub max_total: usize,
    /// Running shells per conversation.
    pub max_per_conversation: usize,
    /// Output kept per shell in its spool file; the rest is discarded.
    pub max_spool_bytes: u64,
    /// Output kept in memory per shell (the most recent bytes).
    pub tail_bytes: usize,
    /// Time between SIGTERM and SIGKILL when a shell is killed.
    pub kill_grace_ms: u64,
}

impl Default for ShellLimits {
    fn default() -> Self {
        ShellLimits {
            max_total: 16,
            max_per_conversation: 8,
            max_spool_bytes: 64 * 1024 * 1024,
            tail_bytes: 64 * 1024,
            kill_grace_ms: 2_000,
        }
    }
}

impl ShellStatus {
    /// Whether the shell has ended (in any way).
    pub fn is_ended(&self) -> bool {
        *self != ShellStatus::Running
    }
}

impl std::fmt::Display for ShellStatus {
    /// `running`, `exited (code 3)`, `killed`, `lost`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShellStatus::Running => f.write_str("running"),
            ShellStatus::Exited { code } => write!(f, "exited (code {code})"),
            ShellStatus::Killed => f.write_str("killed"),
            ShellStatus::Lost => f.write_str("lost"),
        }
    }
}

/// What attached clients hear about shells.
#[derive(Clone, Debug)]
pub(crate) enum ShellEvent {
    Started(ShellRecord),
    Exited(ShellRecord),
}

/// Why a shell operation failed. The texts are written for the model and
/// for people alike.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShellError {
    /// No such shell (the id).
    #[error("unknown shell {0}")]
    NotFound(String),
    /// A count limit; the text says which and what to do.
    #[error("{0}")]
    Limit(String),
    /// The shell could not be started.
    #[error("cannot start the background shell: {0}")]
    Spawn(String),
    /// The spool could not be read or written.
    #[error("{0}")]
    Io(String),
    /// No foreground command to move or kill (what the text says).
    #[error("{0}")]
    NoCommand(String),
    /// The command could not do what was asked (the text says why).
    #[error("{0}")]
    Refused(String),
}

type Persist = Arc<dyn Fn(&ShellRecord) + Send + Sync>;

/// Owns every background shell of the daemon. Shared as `Arc`.
pub(crate) struct ShellManager {
    spool_dir: PathBuf,
    limits: ShellLimits,
    persist: Persist,
    events: broadcast::Sender<ShellEvent>,
    shells: Mutex<HashMap<String, Arc<Shell>>>,
    /// The foreground commands running now, which a client may move here
    /// or kill.
    foreground: commands::Running,
    /// Order of registration, to list shells started in the same
    /// millisecond newest first too.
    seq: AtomicU64,
}

impl std::fmt::Debug for ShellManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellManager")
            .field("spool_dir", &self.spool_dir)
            .field("limits", &self.limits)
            .field("shells", &lock(&self.shells).len())
            .finish_non_exhaustive()
    }
}

impl ShellManager {
    /// `spool_dir`: `<data dir>/shells` (created, mode 0700). `persist` is
    /// called with every record change; `events` carries starts and ends.
    pub(crate) fn new(
        spool_dir: PathBuf,
        limits: ShellLimits,
        persist: Box<dyn Fn(&ShellRecord) + Send + Sync>,
        events: broadcast::Sender<ShellEvent>,
    ) -> Arc<Self> {
        // A failure here shows up as a clear error on the first spawn.
        if let Err(e) = make_private_dir(&spool_dir) {
            tracing::warn!(
                "cannot create the shell spool directory {}: {e}",
                spool_dir.display()
            );
        }
        Arc::new(ShellManager {
            spool_dir,
            limits,
            persist: Arc::from(persist),
            events,
            shells: Mutex::new(HashMap::new()),
            foreground: commands::Running::default(),
            seq: AtomicU64::new(0),
        })
    }

    /// After a crash: given the records the store holds, marks every
    /// `Running` one `Lost` (persisting it) and kills the process group of
    /// any whose pid is alive, still leads its group and started at the
    /// recorded time (provably ours). Returns the records as updated; they
    /// stay listable and their output readable. Blocks for at most about
    /// the kill grace per killed shell.
    pub(crate) fn recover(&self, records: Vec<ShellRecord>) -> Vec<ShellRecord> {
        let grace = Duration::from_millis(self.limits.kill_grace_ms);
        let mut out = Vec::with_capacity(records.len());
        for mut record in records {
            if let Ok(live) = self.shell(&record.id) {
                // Already known (started since): the live record is right.
                out.push(live.record());
                continue;
            }
            let spool_path = self.spool_path(&record.id);
            if record.status == ShellStatus::Running {
                if provably_ours(&record) {
                    tracing::info!(
                        "killing background shell {} (pid {}) left from before a crash",
                        record.id,
                        record.pid
                    );
                    group_of(&record).terminate_blocking(grace);
                }
                record.status = ShellStatus::Lost;
                record.ended_at_ms = Some(now_ms());
                record.report_pending = true;
                if let Ok(meta) = std::fs::metadata(&spool_path) {
                    record.output_bytes = meta.len();
                }
                (self.persist)(&record);
            }
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            let shell = Shell::new(seq, spool_path, record.clone(), None);
            lock(&self.shells).insert(record.id.clone(), Arc::new(shell));
            out.push(record);
        }
        out
    }

    /// Starts `command` with `bash -c` in `cwd` as a background shell of
    /// `conversation_id`: own process group, stdin empty, stdout and stderr
    /// to the spool, in the daemon's environment, unconfined.
    #[cfg(test)]
    pub(crate) async fn spawn(
        &self,
        conversation_id: &str,
        command: &str,
        cwd: &Path,
    ) -> Result<ShellRecord, ShellError> {
        let launch = process::Launch::daemon();
        self.spawn_in(conversation_id, command, cwd, &launch, None)
            .await
    }

    /// Starts `command` with the conversation's shell (`launch`) in `cwd`
    /// as a background shell of `conversation_id`: own process group,
    /// stdin empty, stdout and stderr to the spool, the shell and
    /// environment as for the bash tool, confined by `sandbox` when given
    /// (see [`crate::process::sandbox`]).
    pub(crate) async fn spawn_in(
        &self,
        conversation_id: &str,
        command: &str,
        cwd: &Path,
        launch: &process::Launch,
        sandbox: Option<&crate::process::sandbox::Confinement>,
    ) -> Result<ShellRecord, ShellError> {
        // The map stays locked from the count to the insert, so concurrent
        // spawns cannot both take the last slot. Everything in between is
        // synchronous (fork and exec take about a millisecond).
        let shells = lock(&self.shells);
        let tracked = self.reserve(&shells, conversation_id, command, cwd)?;
        // Shells outlive the task that watches them: if the daemon dies,
        // the next start finds them (see `recover`).
        let spawned = process::spawn_bash(command, cwd, OnDrop::Leave, launch, sandbox)
            .map_err(|e| ShellError::Spawn(e.to_string()))?;
        Ok(self.track(shells, tracked, spawned))
    }

    /// Refuses a spawn past the daemon's or the conversation's limit of
    /// running shells.
    fn check_limits(
        &self,
        shells: &HashMap<String, Arc<Shell>>,
        conversation_id: &str,
    ) -> Result<(), ShellError> {
        let running: Vec<ShellRecord> = shells
            .values()
            .map(|s| s.record())
            .filter(|r| r.status == ShellStatus::Running)
            .collect();
        if running.len() >= self.limits.max_total {
            return Err(ShellError::Limit(format!(
                "too many background shells ({} running; limit {}) — kill one with kill_shell first",
                running.len(),
                self.limits.max_total
            )));
        }
        let mine = running
            .iter()
            .filter(|r| r.conversation_id == conversation_id)
            .count();
        if mine >= self.limits.max_per_conversation {
            return Err(ShellError::Limit(format!(
                "too many background shells in this conversation ({mine} running; limit {}) — \
                 kill one with kill_shell first",
                self.limits.max_per_conversation
            )));
        }
        Ok(())
    }

    /// Creates the spool file of shell `id` (mode 0600, in the private
    /// spool directory).
    fn create_spool(&self, id: &str) -> Result<(PathBuf, File), ShellError> {
        make_private_dir(&self.spool_dir).map_err(|e| {
            ShellError::Io(format!(
                "cannot create the spool directory {}: {e}",
                self.spool_dir.display()
            ))
        })?;
        let spool_path = self.spool_path(id);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&spool_path)
            .map_err(|e| {
                ShellError::Io(format!(
                    "cannot create the spool file {}: {e}",
                    spool_path.display()
                ))
            })?;
        Ok((spool_path, file))
    }

    /// Records of the shells of `conversation_id` (all shells for None),
    /// newest first.
    pub(crate) fn list(&self, conversation_id: Option<&str>) -> Vec<ShellRecord> {
        let mut shells: Vec<(i64, u64, ShellRecord)> = lock(&self.shells)
            .values()
            .map(|s| {
                let r = s.record();
                (r.started_at_ms, s.seq, r)
            })
            .filter(|(_, _, r)| conversation_id.is_none_or(|c| r.conversation_id == c))
            .collect();
        shells.sort_by_key(|s| std::cmp::Reverse((s.0, s.1)));
        shells.into_iter().map(|(_, _, r)| r).collect()
    }

    /// The record of one shell.
    pub(crate) fn get(&self, id: &str) -> Option<ShellRecord> {
        self.shell(id).ok().map(|s| s.record())
    }

    /// At most `max` bytes of output from `offset` (an offset in the spool),
    /// and the record. The record is taken first: if it says the shell has
    /// ended, `output_bytes` is final and the bytes are all there is.
    pub(crate) async fn read(
        &self,
        id: &str,
        offset: u64,
        max: usize,
    ) -> Result<(Vec<u8>, ShellRecord), ShellError> {
        self.shell(id)?.read_at(offset, max as u64).await
    }

    /// For the model: the output that is new since the last call for this
    /// shell, as whole lines while it runs (a partial last line waits for
    /// the rest), only lines matching `filter` if given, and at most about
    /// `max_bytes` (head and tail kept around a truncation marker); plus
    /// the record. Lines dropped by the filter or the cap count as read.
    pub(crate) async fn read_new(
        &self,
        id: &str,
        filter: Option<&Regex>,
        max_bytes: usize,
    ) -> Result<(String, ShellRecord), ShellError> {
        let shell = self.shell(id)?;
        let mut cursor = shell.model_cursor.lock().await;
        let start = *cursor;
        let (record, in_tail) = {
            let st = lock(&shell.state);
            let end = st.record.output_bytes;
            let in_tail = st.spool.as_ref().and_then(|s| s.tail_range(start, end));
            (st.record.clone(), in_tail)
        };
        let len = record.output_bytes.saturating_sub(start);
        let complete = record.status.is_ended();
        let scanned = match in_tail {
            Some(bytes) => output::scan(bytes.as_slice(), len, complete, filter, max_bytes),
            None if len == 0 => output::scan(&[][..], 0, complete, filter, max_bytes),
            None => {
                let path = shell.spool_path.clone();
                let filter = filter.cloned();
                crate::tasks::spawn_blocking("shell output scan", move || {
                    output::scan(
                        open_at(&path, start)?,
                        len,
                        complete,
                        filter.as_ref(),
                        max_bytes,
                    )
                })
                .await
                .map_err(|e| ShellError::Io(format!("reading the output failed: {e}")))?
            }
        }
        .map_err(|e| io_error(id, &e))?;
        *cursor = start + scanned.consumed;
        Ok((scanned.text, record))
    }

    /// Returns once the shell has more than `offset` bytes of output or has
    /// ended, its end recorded (at once for an unknown id).
    pub(crate) async fn wait_output(&self, id: &str, offset: u64) {
        if let Ok(shell) = self.shell(id) {
            shell.wait_until(|r| r.output_bytes > offset).await;
        }
    }

    /// Kills a shell: SIGTERM to its process group, SIGKILL after the
    /// grace; returns the final record (status `Killed`) once it is stored.
    /// A shell that has already ended is left as it is and its record
    /// returned.
    pub(crate) async fn kill(&self, id: &str) -> Result<ShellRecord, ShellError> {
        let shell = self.shell(id)?;
        let target = {
            let mut st = lock(&shell.state);
            if st.record.status.is_ended() {
                None
            } else {
                st.kill_requested = true;
                Some(group_of(&st.record))
            }
        };
        let grace = Duration::from_millis(self.limits.kill_grace_ms);
        if let Some(group) = target {
            group.terminate(grace).await;
        }
        // The monitor records the end once the pipe is drained (at once for
        // a shell whose end is recorded already).
        let recorded = shell.wait_until(|_| false);
        let _ = tokio::time::timeout(grace + KILL_WAIT + DRAIN * 2, recorded).await;
        Ok(shell.record())
    }

    /// For a clean daemon shutdown: kills every running shell (all at
    /// once); returns when their ends are stored (`Killed`, or how they
    /// ended if that came first).
    pub(crate) async fn kill_all(&self) {
        let unsettled: Vec<String> = lock(&self.shells)
            .iter()
            .filter(|(_, s)| !lock(&s.state).settled)
            .map(|(id, _)| id.clone())
            .collect();
        futures::future::join_all(unsettled.iter().map(|id| self.kill(id))).await;
    }

    fn shell(&self, id: &str) -> Result<Arc<Shell>, ShellError> {
        lock(&self.shells)
            .get(id)
            .cloned()
            .ok_or_else(|| ShellError::NotFound(id.to_string()))
    }

    fn spool_path(&self, id: &str) -> PathBuf {
        self.spool_dir.join(format!("{id}.log"))
    }

    /// Bytes of output held in memory for a shell.
    #[cfg(test)]
    fn tail_len(&self, id: &str) -> usize {
        self.shell(id)
            .ok()
            .and_then(|s| lock(&s.state).spool.as_ref().map(Spool::tail_len))
            .unwrap_or(0)
    }

    /// The ids `prefix` may stand for, sorted, at most `max`: the id itself
    /// when it is one, else every id that starts with it. People abbreviate
    /// ids, so case is ignored and the `sh-` may be left out.
    pub(crate) fn ids_with_prefix(&self, prefix: &str, max: usize) -> Vec<String> {
        let prefix = prefix.trim().to_ascii_lowercase();
        let shells = lock(&self.shells);
        if shells.contains_key(&prefix) {
            return vec![prefix];
        }
        let mut ids = matching_ids(shells.keys(), &prefix);
        ids.sort();
        ids.truncate(max);
        ids
    }
}

/// The ids among `ids` that `prefix` (lowercase) may stand for. Typed
/// without `sh-`, a prefix names the random part of an id (`s` is the start
/// of `sh-skgynv`, not of every id); only when no random part starts with
/// it is it read as the start of whole ids (`sh` fits them all).
fn matching_ids<'a>(ids: impl Iterator<Item = &'a String> + Clone, prefix: &str) -> Vec<String> {
    let whole = |ids: &mut dyn Iterator<Item = &'a String>| -> Vec<String> {
        ids.filter(|id| id.starts_with(prefix)).cloned().collect()
    };
    if prefix.starts_with("sh-") {
        return whole(&mut ids.clone());
    }
    let by_rest: Vec<String> = ids
        .clone()
        .filter(|id| {
            id.strip_prefix("sh-")
                .is_some_and(|rest| rest.starts_with(prefix))
        })
        .cloned()
        .collect();
    if by_rest.is_empty() {
        whole(&mut ids.clone())
    } else {
        by_rest
    }
}

/// `sh-` and six base32 characters: 30 random bits, mixed with a counter so
/// that two draws in a row differ even from a poor random source. The
/// caller checks uniqueness.
fn new_id(counter: u64) -> String {
    let mixed = rand::random::<u32>() ^ (counter as u32).wrapping_mul(0x9E37_79B9);
    let mut id = String::from("sh-");
    for i in 0..6 {
        id.push(char::from(ID_ALPHABET[((mixed >> (5 * i)) & 31) as usize]));
    }
    id
}

fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    // `mode` applies only to directories it creates.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

fn open_at(path: &Path, offset: u64) -> std::io::Result<File> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    Ok(file)
}

fn io_error(id: &str, e: &std::io::Error) -> ShellError {
    ShellError::Io(format!("cannot read the output of {id}: {e}"))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
