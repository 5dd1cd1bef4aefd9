//! A process [`super::spawn`] started, followed through its pidfd: waited
//! for without a signal handler and without naming a pid that may have
//! been reused, and never left a zombie.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// What happens to the process when its [`Child`] is dropped before it
/// was waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDrop {
    /// It is killed (SIGKILL): the command lives no longer than the
    /// caller's handle.
    Kill,
    /// It keeps running: background shells outlive the task that watches
    /// them, and after a daemon crash the next start finds them.
    Leave,
}

/// A started process. Dropped before it was reaped, it is killed or left
/// running as [`OnDrop`] says, and reaped in the background either way.
#[derive(Debug)]
pub(crate) struct Child {
    pid: Pid,
    /// None once the process is reaped.
    pidfd: Option<AsyncFd<OwnedFd>>,
    on_drop: OnDrop,
    /// The pipe to the process's stdin, when it has one ([`super::spawn_piped`]).
    pub(crate) stdin: Option<pipe::Sender>,
    /// The pipe from its stdout, likewise.
    pub(crate) stdout: Option<pipe::Receiver>,
    /// The pipe from its stderr, likewise.
    pub(crate) stderr: Option<pipe::Receiver>,
}

impl Child {
    /// Follows the process `pid` through `pidfd`. Needs a tokio runtime
    /// (the pidfd registers with its reactor).
    #[expect(unsafe_code, reason = "AsyncFd::register_with_interest")]
    pub(super) fn new(pid: Pid, pidfd: OwnedFd, on_drop: OnDrop) -> std::io::Result<Self> {
        // Registering outside a runtime would panic.
        tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        // SAFETY: the `OwnedFd` is a valid descriptor the `AsyncFd` owns,
        // open and the same until it is dropped.
        let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        Ok(Child {
            pid,
            pidfd: Some(pidfd),
            on_drop,
            stdin: None,
            stdout: None,
            stderr: None,
        })
    }

    /// The process id.
    #[cfg(test)]
    pub(crate) fn id(&self) -> u32 {
        self.pid.as_raw().unsigned_abs()
    }

    /// Waits for the process to exit and reaps it; its status. Safe to
    /// cancel and to call again: after the first success it returns the
    /// same kind of answer at once (the status is not kept, callers read
    /// it once).
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let Some(pidfd) = &self.pidfd else {
            return Err(std::io::Error::other("the process was already waited for"));
        };
        loop {
            let mut ready = pidfd.readable().await?;
            match reap(pidfd.get_ref(), WaitPidFlag::WNOHANG)? {
                Some(status) => {
                    self.pidfd = None;
                    return Ok(status);
                }
                None => ready.clear_ready(),
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let Some(pidfd) = self.pidfd.take() else {
            return;
        };
        if self.on_drop == OnDrop::Kill {
            let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
        }
        if let Ok(Some(_)) = reap(pidfd.get_ref(), WaitPidFlag::WNOHANG) {
            return;
        }
        // Still running (or dying): reaped when it exits. Until it is
        // reaped its pid cannot be reused, so the SIGKILL above could only
        // reach this process.
        if tokio::runtime::Handle::try_current().is_ok() {
            crate::tasks::spawn("process reaper", async move {
                loop {
                    let Ok(mut ready) = pidfd.readable().await else {
                        return;
                    };
                    match reap(pidfd.get_ref(), WaitPidFlag::WNOHANG) {
                        Ok(None) => ready.clear_ready(),
                        Ok(Some(_)) | Err(_) => return,
                    }
                }
            });
        }
    }
}

/// Reaps the process of `pidfd` if it has exited (with `WNOHANG`; blocks
/// otherwise): its status, or None while it runs.
fn reap(pidfd: &OwnedFd, flags: WaitPidFlag) -> std::io::Result<Option<ExitStatus>> {
    let status = loop {
        match waitid(Id::PIDFd(pidfd.as_fd()), WaitPidFlag::WEXITED | flags) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    Ok(match status {
        WaitStatus::Exited(_, code) => Some(ExitStatus::from_raw((code & 0xff) << 8)),
        WaitStatus::Signaled(_, signal, core) => Some(ExitStatus::from_raw(
            signal as i32 | if core { 0x80 } else { 0 },
        )),
        _ => None,
    })
}
