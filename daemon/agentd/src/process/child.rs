//! A process [`super::spawn`] started, followed through its pidfd (waited
//! for without a signal handler), or on a kernel without pidfds by SIGCHLD
//! and `waitpid`; never left a zombie.

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

/// How a running child's end is noticed.
#[derive(Debug)]
enum Follow {
    /// Its pidfd becomes readable.
    Pidfd(AsyncFd<OwnedFd>),
    /// A SIGCHLD arrives, then `waitpid` tells whether it was this child's
    /// (kernels before 5.2).
    Signal(tokio::signal::unix::Signal),
}

impl Follow {
    /// Waits until the process `pid` has exited and reaps it.
    async fn reap(&mut self, pid: Pid) -> std::io::Result<ExitStatus> {
        loop {
            match self {
                Follow::Pidfd(fd) => {
                    let mut ready = fd.readable().await?;
                    match reap(|| Id::PIDFd(fd.get_ref().as_fd()))? {
                        Some(status) => return Ok(status),
                        None => ready.clear_ready(),
                    }
                }
                Follow::Signal(sigchld) => {
                    // The stream was made before the child could end, so
                    // no SIGCHLD of it is missed between check and wait.
                    if let Some(status) = reap(|| Id::Pid(pid))? {
                        return Ok(status);
                    }
                    if sigchld.recv().await.is_none() {
                        return Err(std::io::Error::other("SIGCHLD is no longer delivered"));
                    }
                }
            }
        }
    }
}

/// A started process. Dropped before it was reaped, it is killed or left
/// running as [`OnDrop`] says, and reaped in the background either way.
#[derive(Debug)]
pub(crate) struct Child {
    pid: Pid,
    /// None once the process is reaped.
    follow: Option<Follow>,
    /// Its status, once reaped.
    status: Option<ExitStatus>,
    on_drop: OnDrop,
    /// The pipe to the process's stdin, when it has one ([`super::spawn_piped`]).
    pub(crate) stdin: Option<pipe::Sender>,
    /// The pipe from its stdout, likewise.
    pub(crate) stdout: Option<pipe::Receiver>,
    /// The pipe from its stderr, likewise.
    pub(crate) stderr: Option<pipe::Receiver>,
}

impl Child {
    /// Follows the process `pid` through `pidfd`, or by SIGCHLD without
    /// one. Needs a tokio runtime (either registers with it).
    #[expect(unsafe_code, reason = "AsyncFd::register_with_interest")]
    pub(super) fn new(pid: Pid, pidfd: Option<OwnedFd>, on_drop: OnDrop) -> std::io::Result<Self> {
        // Registering outside a runtime would panic.
        tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let follow = match pidfd {
            // SAFETY: the `OwnedFd` is a valid descriptor the `AsyncFd`
            // owns, open and the same until it is dropped.
            Some(fd) => Follow::Pidfd(
                unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
                    .map_err(std::io::Error::from)?,
            ),
            None => Follow::Signal(tokio::signal::unix::signal(
                tokio::signal::unix::SignalKind::child(),
            )?),
        };
        Ok(Child {
            pid,
            follow: Some(follow),
            status: None,
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
    /// cancel and to call again: once reaped, it answers with the same
    /// status at once.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let Some(follow) = &mut self.follow else {
            return Err(std::io::Error::other("the process is not followed"));
        };
        let status = follow.reap(self.pid).await?;
        self.follow = None;
        self.status = Some(status);
        Ok(status)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let Some(mut follow) = self.follow.take() else {
            return;
        };
        let pid = self.pid;
        if self.on_drop == OnDrop::Kill {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        if let Ok(Some(_)) = reap(|| Id::Pid(pid)) {
            return;
        }
        // Still running (or dying): reaped when it exits. Until it is
        // reaped its pid cannot be reused, so the SIGKILL above could only
        // reach this process.
        if tokio::runtime::Handle::try_current().is_ok() {
            crate::tasks::spawn("process reaper", async move {
                let _ = follow.reap(pid).await;
            });
        }
    }
}

/// Reaps the process `id` names if it has exited: its status, or None
/// while it runs.
fn reap<'a>(id: impl Fn() -> Id<'a>) -> std::io::Result<Option<ExitStatus>> {
    let status = loop {
        match waitid(id(), WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG) {
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
