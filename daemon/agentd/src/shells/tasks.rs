//! The two tasks that follow a running shell: one copies its output into
//! the spool, the other waits for its end and records it.

use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::Duration;

use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::shell::{Shell, State};
use super::{PIPE_CHUNK, Persist, ShellEvent, ShellRecord, ShellStatus, lock, now_ms};
use crate::process::{self, DRAIN, Group};

/// Copies the shell's output into its spool until end-of-file. Keeps
/// reading after the cap, so the command never blocks on a full pipe.
pub(super) async fn pump(mut receiver: pipe::Receiver, shell: Arc<Shell>, persist: Persist) {
    let mut buf = vec![0u8; PIPE_CHUNK];
    loop {
        let n = match receiver.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let capped = {
            let mut guard = lock(&shell.state);
            let st = &mut *guard;
            let Some(spool) = st.spool.as_mut() else {
                continue;
            };
            let appended = spool.append(&buf[..n]);
            let written = spool.written();
            st.record.output_bytes = written;
            if appended.started_discarding {
                st.record.truncated = true;
                Some(st.record.clone())
            } else if appended.written == 0 {
                continue;
            } else {
                None
            }
        };
        shell.bump();
        if let Some(record) = capped {
            persist(&record);
        }
    }
}

/// Waits for the shell to exit, stops what it left running in its group,
/// lets the reader finish, and records the end.
pub(super) async fn monitor(
    shell: Arc<Shell>,
    mut child: process::Child,
    mut reader: JoinHandle<()>,
    persist: Persist,
    events: broadcast::Sender<ShellEvent>,
    grace: Duration,
) {
    let exit = child.wait().await;
    let group = group_of(&shell.record());
    let mut left_behind = false;
    // The leader is reaped: only leftovers can keep the group ours.
    if group.is_alive() {
        left_behind = !lock(&shell.state).kill_requested;
        group.terminate(grace).await;
    }
    if tokio::time::timeout(DRAIN, &mut reader).await.is_err() {
        // A process that left the group still holds the pipe.
        reader.abort();
    }
    let record = {
        let mut st = lock(&shell.state);
        let State {
            record,
            spool,
            kill_requested,
            quiet,
            ..
        } = &mut *st;
        record.status = if *kill_requested {
            ShellStatus::Killed
        } else {
            match &exit {
                Ok(status) => ShellStatus::Exited {
                    code: status
                        .code()
                        .or_else(|| status.signal().map(|s| 128 + s))
                        .unwrap_or(-1),
                },
                Err(e) => {
                    tracing::warn!("waiting for background shell {} failed: {e}", record.id);
                    ShellStatus::Exited { code: -1 }
                }
            }
        };
        if let Some(spool) = spool.as_mut() {
            if left_behind {
                spool.note("[agentd: the shell exited; processes it left running were stopped]");
            }
            spool.close();
            record.output_bytes = spool.written();
        }
        record.ended_at_ms = Some(now_ms());
        // Stored with the end, so a crash before it is told loses nothing.
        record.report_pending = !*quiet;
        record.clone()
    };
    shell.bump();
    persist(&record);
    let _ = events.send(ShellEvent::Exited(record));
    lock(&shell.state).settled = true;
    shell.bump();
}

/// Whether the record's pid is, right now, the very process the shell
/// started as: alive, leading its own group, and started at the recorded
/// clock tick.
pub(super) fn provably_ours(record: &ShellRecord) -> bool {
    let (Some(ticks), Ok(pid)) = (record.proc_start_ticks, i32::try_from(record.pid)) else {
        return false;
    };
    process::leads_group_since(Pid::from_raw(pid), ticks)
}

/// The shell's process group, as recorded at its start.
pub(super) fn group_of(record: &ShellRecord) -> Group {
    let pgid = Pid::from_raw(i32::try_from(record.pid).unwrap_or(i32::MAX));
    Group::new(pgid, record.proc_start_ticks)
}
