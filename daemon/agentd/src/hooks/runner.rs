//! Running one hook's command: `bash -c` in the conversation's working
//! directory, in a process group of its own, the JSON object on stdin,
//! stdout and stderr read (bounded), stopped at its timeout or when the
//! caller cancels.

use crate::process::{self, SpawnError};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Output kept from each of stdout and stderr; the rest is dropped.
pub(crate) const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// What a hook's process did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finished {
    /// Its exit code; `None` when a signal ended it.
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Why a hook gave no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error("cannot start: {0}")]
    Spawn(#[from] SpawnError),
    #[error("timed out after {0} ms and was killed")]
    Timeout(u64),
    #[error("cancelled with the turn and killed")]
    Cancelled,
    #[error("cannot read its output: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Sandbox(#[from] crate::process::sandbox::SandboxError),
}

/// How long a hook may take: at `timeout` its process group is
/// terminated (SIGTERM, `grace`, SIGKILL).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    pub timeout: Duration,
    pub grace: Duration,
}

/// Runs `command` with `input` on stdin, in the conversation's shell and
/// environment (`launch`), confined by `sandbox` when given. At the
/// deadline or when `cancel` fires, the whole process group is terminated.
/// Whatever the group left running after the shell exited is terminated
/// too: a hook does not outlive its answer.
pub(crate) async fn run(
    command: &str,
    cwd: &Path,
    input: &[u8],
    deadline: Deadline,
    cancel: &CancellationToken,
    launch: &process::Launch,
    sandbox: Option<&crate::process::sandbox::Confinement>,
) -> Result<Finished, RunError> {
    let Deadline { timeout, grace } = deadline;
    let mut piped = process::spawn_piped(command, cwd, launch, sandbox)?;
    let group = piped.group;
    let stdin = piped.child.stdin.take();
    let stdout = piped.child.stdout.take();
    let stderr = piped.child.stderr.take();
    let input = input.to_vec();
    let feed = async move {
        if let Some(mut stdin) = stdin {
            // A hook need not read its input: a closed pipe is no error.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        }
    };
    let work = async {
        let (_, out, err, status) = tokio::join!(
            feed,
            read_bounded(stdout),
            read_bounded(stderr),
            piped.child.wait()
        );
        Ok::<_, RunError>(Finished {
            code: status?.code(),
            stdout: out?,
            stderr: err?,
        })
    };
    let outcome = tokio::select! {
        done = tokio::time::timeout(timeout, work) => match done {
            Ok(done) => done,
            Err(_) => Err(RunError::Timeout(timeout.as_millis() as u64)),
        },
        () = cancel.cancelled() => Err(RunError::Cancelled),
    };
    group.terminate(grace).await;
    outcome
}

/// Reads up to [`MAX_OUTPUT_BYTES`] of a pipe, as text (invalid UTF-8
/// replaced), then keeps reading and dropping what is left until the end,
/// so a talkative hook is not blocked on a full pipe.
async fn read_bounded<R: AsyncRead + Unpin>(pipe: Option<R>) -> std::io::Result<String> {
    let Some(mut pipe) = pipe else {
        return Ok(String::new());
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = pipe.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    Ok(String::from_utf8_lossy(&kept).into_owned())
}
