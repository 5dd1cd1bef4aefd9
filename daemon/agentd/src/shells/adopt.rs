//! Taking a running process into the manager's care, the one way for a
//! shell started here (`spawn`) and for a foreground command moved to the
//! background while it runs (`adopt`): registered, its output pumped into
//! the spool, its end watched and recorded.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use super::output::Spool;
use super::shell::Shell;
use super::tasks::{monitor, pump};
use super::{ShellError, ShellEvent, ShellManager, ShellRecord, ShellStatus, lock, new_id, now_ms};
use crate::process;

/// A process about to be tracked as shell `id`.
pub(super) struct Tracked<'a> {
    pub(super) id: String,
    pub(super) conversation_id: &'a str,
    pub(super) command: &'a str,
    pub(super) cwd: &'a Path,
    pub(super) spool_path: PathBuf,
    pub(super) file: File,
    /// Output it printed before it came here (an adopted command's), which
    /// the model has seen: the spool starts with it, and `bash_output`
    /// starts after it.
    pub(super) already: &'a [u8],
}

impl ShellManager {
    /// A shell id no shell in `shells` has.
    pub(super) fn fresh_id(&self, shells: &HashMap<String, Arc<Shell>>) -> String {
        loop {
            let id = new_id(self.seq.load(Ordering::Relaxed));
            if !shells.contains_key(&id) {
                return id;
            }
        }
    }

    /// Takes a slot for a new shell of `conversation_id` (under the lock
    /// the caller holds until it tracks the shell): a fresh id and its spool.
    pub(super) fn reserve<'a>(
        &self,
        shells: &HashMap<String, Arc<Shell>>,
        conversation_id: &'a str,
        command: &'a str,
        cwd: &'a Path,
    ) -> Result<Tracked<'a>, ShellError> {
        self.check_limits(shells, conversation_id)?;
        let id = self.fresh_id(shells);
        let (spool_path, file) = self.create_spool(&id)?;
        Ok(Tracked {
            id,
            conversation_id,
            command,
            cwd,
            spool_path,
            file,
            already: &[],
        })
    }

    /// Moves a running foreground command (`spawned`, whose output nobody
    /// reads now) here as a background shell of `conversation_id`: same
    /// process group, same pipe, so no output is lost between. `already`
    /// is what it printed so far. Past a limit, or when the spool cannot
    /// be made, the command is handed back untouched with the error.
    pub(crate) fn adopt(
        &self,
        conversation_id: &str,
        command: &str,
        cwd: &Path,
        spawned: process::Spawned,
        already: &[u8],
    ) -> Result<ShellRecord, Box<(ShellError, process::Spawned)>> {
        let shells = lock(&self.shells);
        match self.reserve(&shells, conversation_id, command, cwd) {
            Ok(tracked) => Ok(self.track(shells, Tracked { already, ..tracked }, spawned)),
            Err(e) => Err(Box::new((e, spawned))),
        }
    }

    /// Registers the process as a running shell (under the lock the caller
    /// counted the limits with), starts the tasks that follow it, stores
    /// its record and announces it.
    pub(super) fn track(
        &self,
        mut shells: MutexGuard<'_, HashMap<String, Arc<Shell>>>,
        t: Tracked<'_>,
        spawned: process::Spawned,
    ) -> ShellRecord {
        let process::Spawned {
            child,
            group,
            output: receiver,
        } = spawned;
        let mut spool = Spool::new(t.file, self.limits.max_spool_bytes, self.limits.tail_bytes);
        let appended = spool.append(t.already);
        let record = ShellRecord {
            id: t.id.clone(),
            conversation_id: t.conversation_id.to_string(),
            command: t.command.to_string(),
            cwd: t.cwd.to_path_buf(),
            // A group id is a positive pid.
            pid: group.pgid().as_raw().unsigned_abs(),
            started_at_ms: now_ms(),
            ended_at_ms: None,
            status: ShellStatus::Running,
            output_bytes: spool.written(),
            truncated: appended.started_discarding,
            proc_start_ticks: group.leader_ticks(),
            report_pending: false,
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let shell = Arc::new(Shell::new(seq, t.spool_path, record.clone(), Some(spool)));
        if let Ok(mut cursor) = shell.model_cursor.try_lock() {
            // Nobody else holds the shell yet.
            *cursor = record.output_bytes;
        }
        shells.insert(t.id, Arc::clone(&shell));
        drop(shells);

        let reader = crate::tasks::spawn(
            "shell output pump",
            pump(receiver, Arc::clone(&shell), self.persist.clone()),
        );
        crate::tasks::spawn(
            "shell monitor",
            monitor(
                shell,
                child,
                reader,
                self.persist.clone(),
                self.events.clone(),
                Duration::from_millis(self.limits.kill_grace_ms),
            ),
        );
        (self.persist)(&record);
        let _ = self.events.send(ShellEvent::Started(record.clone()));
        record
    }
}
