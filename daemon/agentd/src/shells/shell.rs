//! One shell, live or from the store: its record, its spool, and the
//! change counter its waiters watch.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Mutex;

use tokio::sync::watch;

use super::output::Spool;
use super::{ShellError, ShellRecord, io_error, lock, open_at};

/// One shell, live or from the store.
#[derive(Debug)]
pub(super) struct Shell {
    pub(super) seq: u64,
    pub(super) spool_path: PathBuf,
    pub(super) state: Mutex<State>,
    /// Bumped on every new output and on the end, for waiters.
    pub(super) changed: watch::Sender<u64>,
    /// Where the model's last `read_new` stopped; also serialises those
    /// reads, so two polls never return the same line.
    pub(super) model_cursor: tokio::sync::Mutex<u64>,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) record: ShellRecord,
    /// The writer; None for shells from the store.
    pub(super) spool: Option<Spool>,
    /// A kill was asked for: the end is `Killed`, whatever the exit status.
    pub(super) kill_requested: bool,
    /// The model stopped it itself (`kill_shell`): its end is not told.
    pub(super) quiet: bool,
    /// The end is recorded: stored through `persist` and announced. Waiters
    /// wait for this, not for the status, so that a clean shutdown cannot
    /// exit between the two.
    pub(super) settled: bool,
}

impl Shell {
    pub(super) fn new(
        seq: u64,
        spool_path: PathBuf,
        record: ShellRecord,
        spool: Option<Spool>,
    ) -> Self {
        Shell {
            seq,
            spool_path,
            state: Mutex::new(State {
                settled: record.status.is_ended(),
                record,
                spool,
                kill_requested: false,
                quiet: false,
            }),
            changed: watch::channel(0).0,
            model_cursor: tokio::sync::Mutex::new(0),
        }
    }

    pub(super) fn record(&self) -> ShellRecord {
        lock(&self.state).record.clone()
    }

    pub(super) fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits until the end is recorded, or `pred` holds.
    pub(super) async fn wait_until(&self, pred: impl Fn(&ShellRecord) -> bool) {
        // Subscribing before looking means no change can slip in between.
        let mut changes = self.changed.subscribe();
        loop {
            {
                let st = lock(&self.state);
                if st.settled || pred(&st.record) {
                    return;
                }
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// The record, and the bytes `[start, start + max)` of the spool as far
    /// as they exist, from memory when the tail still holds them.
    pub(super) async fn read_at(
        &self,
        start: u64,
        max: u64,
    ) -> Result<(Vec<u8>, ShellRecord), ShellError> {
        let (record, in_tail) = {
            let st = lock(&self.state);
            let end = st.record.output_bytes.min(start.saturating_add(max));
            let in_tail = st.spool.as_ref().and_then(|s| s.tail_range(start, end));
            (st.record.clone(), in_tail)
        };
        if let Some(bytes) = in_tail {
            return Ok((bytes, record));
        }
        let end = record.output_bytes.min(start.saturating_add(max));
        if start >= end {
            return Ok((Vec::new(), record));
        }
        let path = self.spool_path.clone();
        let bytes = crate::tasks::spawn_blocking(
            "shell output read",
            move || -> std::io::Result<Vec<u8>> {
                let mut bytes = Vec::new();
                open_at(&path, start)?
                    .take(end - start)
                    .read_to_end(&mut bytes)?;
                Ok(bytes)
            },
        )
        .await
        .map_err(|e| ShellError::Io(format!("reading the output failed: {e}")))?
        .map_err(|e| io_error(&record.id, &e))?;
        Ok((bytes, record))
    }
}
