//! Processes the daemon starts for the model: the one place that spawns
//! them, signals them and decides whether a process is still ours.
//!
//! Every command runs as `bash -c` in a process group of its own, so "stop
//! it" means every process it started, not just the shell. Stopping is one
//! sequence for every caller (`Group::terminate`): SIGTERM to the group,
//! SIGKILL after a grace period to whatever is left.
//!
//! A group is named by its leader's pid, and pids are reused: once a group
//! empties, pid_max (often 32768) soon hands the number out again. So a
//! `Group` also carries its leader's start time from `/proc/<pid>/stat`,
//! and a group whose pid now belongs to a live process with another start
//! time is someone else's and is never signalled.
//!
//! Both the `bash` tool and the background shells build on this module;
//! neither imports the other's process code.
//!
//! Which shell starts and in which environment is the conversation's
//! [`Launch`] (`launch.rs`, built by `crate::environment`): every spawn
//! takes one, and `bash_command` is the one place that turns it into the
//! child's environment.
//!
//! No child inherits the daemon's credentials: every process the daemon
//! starts (commands, shells, hooks, MCP stdio servers, git) goes through
//! `withhold_secrets`, the one function and the one list.

use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::net::unix::pipe;

mod launch;
pub(crate) use launch::Launch;
use launch::with_shell;
#[cfg(test)]
use launch::{BASH, find_in_path};
pub(crate) mod sandbox;

use sandbox::Confinement;

/// How often a dying process group is checked.
const POLL: Duration = Duration::from_millis(10);
/// How long SIGKILL gets to take effect before the caller carries on.
pub(crate) const KILL_WAIT: Duration = Duration::from_millis(500);
/// How long output is still read after a command's group is gone. Only a
/// process that left the group (setsid) and kept the pipe open makes this
/// wait matter.
pub(crate) const DRAIN: Duration = Duration::from_millis(500);
/// Names of variables that may hold one of the daemon's credentials: the
/// API keys and tokens of the providers (`ANTHROPIC_API_KEY`,
/// `ANTHROPIC_AUTH_TOKEN`, `OPENAI_API_KEY`, ...) and remote-access tokens
/// (`AGENTD_TOKEN`, `AGENTD_TOKEN_FILE`, ...). Every variable with one of
/// these prefixes is withheld, not only the names known today: the
/// providers add new credential variables now and then, and a list of
/// exact names would let the next one through. What this also removes
/// (`ANTHROPIC_BASE_URL`, `OPENAI_ORG_ID`, ...) configures the daemon's own
/// requests and is no command's business either; a command that needs one
/// sets it itself.
const SECRET_PREFIXES: [&str; 3] = ["ANTHROPIC_", "OPENAI_", "AGENTD_TOKEN"];

/// The credential variables known by name: always removed, whether or not
/// the daemon has them (a test or a caller can then see they are).
const SECRET_ENV: [&str; 4] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "AGENTD_TOKEN",
];

/// Whether the variable `name` may hold one of the daemon's credentials
/// (see [`SECRET_PREFIXES`]).
pub(crate) fn is_secret_var(name: &OsStr) -> bool {
    let name = name.as_encoded_bytes();
    SECRET_PREFIXES
        .iter()
        .any(|prefix| name.starts_with(prefix.as_bytes()))
}

/// The daemon's own variables that [`is_secret_var`] names, read once: the
/// daemon's environment does not change while it runs.
fn inherited_secret_vars() -> &'static [OsString] {
    static NAMES: std::sync::OnceLock<Vec<OsString>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        std::env::vars_os()
            .map(|(name, _)| name)
            .filter(|name| is_secret_var(name))
            .collect()
    })
}

/// Keeps the daemon's credentials out of a child: removes from `cmd`
/// every variable [`is_secret_var`] names, both those the child would
/// inherit from the daemon and those already set on `cmd`. Every process
/// the daemon starts goes through here (bash commands and background
/// shells, hooks, MCP stdio servers, git); it is the one function, so
/// there is one list.
///
/// Call it after the command's environment is set (`env`, `envs`,
/// `env_clear`): it works on whatever environment `cmd` would give. The
/// one deliberate exception is an MCP server's own `env` table, which the
/// user wrote in the config for that server: it is applied after this
/// call, so a server the user hands a key to explicitly gets it (see
/// `mcp/hub.rs`).
pub(crate) fn withhold_secrets(cmd: &mut std::process::Command) {
    let set: Vec<OsString> = cmd
        .get_envs()
        .filter(|(name, value)| value.is_some() && is_secret_var(name))
        .map(|(name, _)| name.to_os_string())
        .collect();
    for name in SECRET_ENV {
        cmd.env_remove(name);
    }
    for name in set.iter().chain(inherited_secret_vars()) {
        cmd.env_remove(name);
    }
}

/// What happens to a command when the [`Spawned::child`] handle is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDrop {
    /// Its shell is killed: the command lives no longer than the caller's
    /// interest in it (a tool call).
    Kill,
    /// It keeps running: background shells outlive the task that watches
    /// them, and after a daemon crash the next start finds them.
    Leave,
}

/// A command started by [`spawn_bash`].
#[derive(Debug)]
pub(crate) struct Spawned {
    /// The `bash` process, the leader of [`Spawned::group`].
    pub(crate) child: tokio::process::Child,
    /// The command's process group.
    pub(crate) group: Group,
    /// stdout and stderr, which share this one pipe so their lines keep the
    /// order they were written in. End-of-file means every process of the
    /// command has closed it.
    pub(crate) output: pipe::Receiver,
}

/// Why [`spawn_bash`] failed. The texts read well after a caller's prefix
/// ("bash: ", "cannot start the background shell: ").
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpawnError {
    #[error("cannot create a pipe: {0}")]
    Pipe(std::io::Error),
    #[error("cannot start bash in {cwd}: {source}")]
    Start {
        /// The working directory, as displayed.
        cwd: String,
        source: std::io::Error,
    },
    #[error("the shell exited before it could be tracked")]
    Untracked,
    #[error("cannot read the command's output: {0}")]
    Output(std::io::Error),
}

/// Starts `bash -c command` in `cwd`, in a process group of its own, with
/// stdin empty and stdout and stderr to one new pipe. The shell and the
/// environment are the conversation's (`launch`), minus the daemon's
/// credentials, with prompts and pagers out of the way. Needs a tokio
/// runtime (the pipe registers with it). With `sandbox` the command
/// confines itself before it starts ([`sandbox`]).
pub(crate) fn spawn_bash(
    command: &str,
    cwd: &Path,
    on_drop: OnDrop,
    launch: &Launch,
    sandbox: Option<&Confinement>,
) -> Result<Spawned, SpawnError> {
    with_shell(launch, |program| {
        spawn_bash_with(program, launch, command, cwd, on_drop, sandbox)
    })
}

fn spawn_bash_with(
    program: &OsStr,
    launch: &Launch,
    command: &str,
    cwd: &Path,
    on_drop: OnDrop,
    sandbox: Option<&Confinement>,
) -> Result<Spawned, SpawnError> {
    let mut cmd = bash_command(program, launch, command, cwd, sandbox);
    cmd.kill_on_drop(on_drop == OnDrop::Kill);
    let read_end = attach_output_pipe(&mut cmd).map_err(SpawnError::Pipe)?;
    let (child, group) = start(cmd, cwd)?;
    let output = match pipe::Receiver::from_owned_fd(read_end) {
        Ok(output) => output,
        Err(e) => {
            group.signal(Signal::SIGKILL);
            return Err(SpawnError::Output(e));
        }
    };
    Ok(Spawned {
        child,
        group,
        output,
    })
}

/// A hook's command started by [`spawn_piped`]: stdin, stdout and stderr
/// are pipes of their own.
#[derive(Debug)]
pub(crate) struct Piped {
    /// The `bash` process, the leader of [`Piped::group`]; killed when
    /// dropped.
    pub(crate) child: tokio::process::Child,
    /// The command's process group.
    pub(crate) group: Group,
}

/// Starts `bash -c command` in `cwd`, in a process group of its own (the
/// environment as for [`spawn_bash`]), with stdin, stdout and stderr piped
/// separately: hooks read a JSON object on stdin and answer on stdout,
/// with their complaints on stderr. The shell is killed if the handle is
/// dropped; its group is the caller's to terminate.
pub(crate) fn spawn_piped(
    command: &str,
    cwd: &Path,
    launch: &Launch,
    sandbox: Option<&Confinement>,
) -> Result<Piped, SpawnError> {
    with_shell(launch, |program| {
        spawn_piped_with(program, launch, command, cwd, sandbox)
    })
}

fn spawn_piped_with(
    program: &OsStr,
    launch: &Launch,
    command: &str,
    cwd: &Path,
    sandbox: Option<&Confinement>,
) -> Result<Piped, SpawnError> {
    let mut cmd = bash_command(program, launch, command, cwd, sandbox);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let (child, group) = start(cmd, cwd)?;
    Ok(Piped { child, group })
}

/// Starts `cmd` (bash in `cwd`) as the leader of its process group, and
/// the group's handle.
fn start(
    mut cmd: tokio::process::Command,
    cwd: &Path,
) -> Result<(tokio::process::Child, Group), SpawnError> {
    let before = boot_ticks();
    let spawned = cmd.spawn();
    let after = boot_ticks();
    // Our copies of any pipe's write end go with `cmd`, so end-of-file
    // means every process of the command has closed it.
    drop(cmd);
    let child = spawned.map_err(|source| SpawnError::Start {
        cwd: cwd.display().to_string(),
        source,
    })?;
    let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
        return Err(SpawnError::Untracked);
    };
    // The leader is not reaped before `child` is waited for, so its pid
    // cannot have been reused yet and its start time is the one to keep.
    let group = Group::spawned(Pid::from_raw(pid), before, after);
    Ok((child, group))
}

/// `shell -c command` in its own process group, without stdin, in the
/// environment of `launch`: the one place that decides what a command's
/// environment is (the conversation's or the daemon's, then the fixed
/// additions, then without the daemon's credentials); confined by
/// `sandbox` when given.
fn bash_command(
    program: &OsStr,
    launch: &Launch,
    command: &str,
    cwd: &Path,
    sandbox: Option<&Confinement>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    // The environment first: everything below goes on top of it.
    launch.apply_env(&mut cmd);
    if let Some(sandbox) = sandbox {
        sandbox.install(&mut cmd);
    }
    // `$0`, and the name the shell's own messages start with ("bash: line
    // 1: …"), as when it is found by name.
    cmd.arg0(launch::arg0(program))
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .process_group(0)
        // Nothing can answer a prompt: make git fail instead of waiting for
        // a password, and keep pagers out of the way.
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .env("PAGER", "cat");
    // The daemon's own credentials are not the command's business: a
    // command could print them into the transcript.
    withhold_secrets(cmd.as_std_mut());
    cmd
}

/// Sends the command's stdout and stderr into one new pipe and returns the
/// pipe's read end. `cmd` holds the write ends until it is dropped: drop it
/// right after spawning, or end-of-file never comes.
fn attach_output_pipe(cmd: &mut tokio::process::Command) -> std::io::Result<OwnedFd> {
    let (read_end, write_end) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let write_end_2 = write_end.try_clone()?;
    cmd.stdout(Stdio::from(write_end))
        .stderr(Stdio::from(write_end_2));
    Ok(read_end)
}

/// A process group the daemon started: its id (the leader's pid) and the
/// leader's start time, which together name it for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Group {
    pgid: Pid,
    leader_ticks: Option<u64>,
}

impl Group {
    /// The group `pgid` whose leader started at `leader_ticks` (field 22 of
    /// its `/proc/<pid>/stat`), as recorded when it was spawned.
    pub(crate) fn new(pgid: Pid, leader_ticks: Option<u64>) -> Self {
        Group { pgid, leader_ticks }
    }

    /// The group led by `pid`, with the start time the leader has now. Only
    /// right for a leader that is known to be ours at this moment (spawned
    /// and not yet reaped).
    fn led_by(pid: Pid) -> Self {
        Group::new(pid, start_ticks(pid))
    }

    /// The group led by `pid`, started between `before` and `after` (the
    /// [`boot_ticks`] around the spawn). When both are the same tick, that
    /// tick is the leader's start time, and `/proc` is not read: right
    /// after a spawn the read cost the worker 40–60 µs while the new
    /// process was still in its `exec`, on the same CPU (issue 20).
    fn spawned(pid: Pid, before: Option<u64>, after: Option<u64>) -> Self {
        match (before, after) {
            (Some(before), Some(after)) if before == after => Group::new(pid, Some(before)),
            _ => Group::led_by(pid),
        }
    }

    pub(crate) fn pgid(&self) -> Pid {
        self.pgid
    }

    pub(crate) fn leader_ticks(&self) -> Option<u64> {
        self.leader_ticks
    }

    /// Whether the number still names this group: no live process other
    /// than our leader holds the pid. A live process with the pid and
    /// another start time means the number was reused and the group (if
    /// any) is someone else's. pids 0 and 1 and our own are never ours:
    /// signalling them would hit the daemon's group or init.
    pub(crate) fn is_ours(&self) -> bool {
        self.may_be_ours()
            && !proc_stat(self.pgid.as_raw())
                .is_some_and(|s| s.is_alive() && Some(s.start_ticks) != self.leader_ticks)
    }

    /// Not a number that is never ours (0, 1, the daemon's own).
    fn may_be_ours(&self) -> bool {
        let pid = self.pgid.as_raw();
        pid > 1 && pid != nix::unistd::getpid().as_raw()
    }

    /// Whether the group is still ours ([`Group::is_ours`]) and has a live
    /// member.
    pub(crate) fn is_alive(&self) -> bool {
        // The signal-0 probe before `/proc`: for a command that ended with
        // its whole group (nearly every one) it answers alone.
        self.may_be_ours() && group_alive(self.pgid) && self.is_ours()
    }

    /// Sends `signal` to every process of the group, unless the group is no
    /// longer ours; whether it was sent.
    pub(crate) fn signal(&self, signal: Signal) -> bool {
        self.is_ours() && killpg(self.pgid, signal).is_ok()
    }

    /// Stops the group: SIGTERM to all of it, SIGKILL after `grace` to
    /// whatever is left, then up to [`KILL_WAIT`] for SIGKILL to take
    /// effect. Does nothing to a group that is gone or no longer ours, and
    /// checks again before every signal.
    pub(crate) async fn terminate(&self, grace: Duration) {
        self.terminate_with(grace, tokio::time::sleep).await;
    }

    /// [`Group::terminate`] for start-up, outside any task: blocks the
    /// thread while it waits.
    pub(crate) fn terminate_blocking(&self, grace: Duration) {
        // The waits block instead of yielding, so the future is ready on
        // its first poll and no runtime is needed to drive it.
        futures::executor::block_on(self.terminate_with(grace, |d| {
            std::thread::sleep(d);
            std::future::ready(())
        }));
    }

    /// The one termination sequence; `sleep` decides whether waiting yields
    /// to the runtime or blocks the thread.
    async fn terminate_with<F: Future<Output = ()>>(
        &self,
        grace: Duration,
        mut sleep: impl FnMut(Duration) -> F,
    ) {
        if !self.is_alive() {
            return;
        }
        self.signal(Signal::SIGTERM);
        // A stopped process acts on SIGTERM only once it runs again.
        self.signal(Signal::SIGCONT);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_alive() {
                return;
            }
            sleep(POLL).await;
        }
        if self.is_alive() {
            self.signal(Signal::SIGKILL);
        }
        let deadline = Instant::now() + KILL_WAIT;
        while self.is_alive() && Instant::now() < deadline {
            sleep(POLL).await;
        }
    }
}

/// Whether `pid` is, right now, the process that started at `ticks`: alive,
/// leading its own group, with that start time. This is what proves a
/// process recorded before a daemon crash is still ours.
pub(crate) fn leads_group_since(pid: Pid, ticks: u64) -> bool {
    let group = Group::new(pid, Some(ticks));
    group.is_ours()
        && proc_stat(pid.as_raw())
            .is_some_and(|s| s.is_alive() && s.pgrp == pid.as_raw() && s.start_ticks == ticks)
}

/// The start time (clock ticks since boot) of process `pid`, which with the
/// pid identifies it for good.
fn start_ticks(pid: Pid) -> Option<u64> {
    proc_stat(pid.as_raw()).map(|s| s.start_ticks)
}

/// The time since boot in the unit and on the clock of a start time in
/// `/proc/<pid>/stat`: clock ticks (`sysconf(_SC_CLK_TCK)`, rounded down)
/// of `CLOCK_BOOTTIME`, which is what the kernel stamps a new process with
/// (see proc(5), field 22). None when either cannot be read.
fn boot_ticks() -> Option<u64> {
    static NANOS_PER_TICK: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let per_tick = (*NANOS_PER_TICK.get_or_init(|| {
        let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
        let per_second = u64::try_from(per_second).ok().filter(|t| *t > 0)?;
        // The kernel divides exactly when the tick divides a second.
        (1_000_000_000 % per_second == 0).then(|| 1_000_000_000 / per_second)
    }))?;
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let nanos = u64::try_from(now.tv_sec())
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(now.tv_nsec()).ok()?)?;
    Some(nanos / per_tick)
}

/// Whether any live process is in the group `pgid`, whoever's it is.
/// Zombies do not count: they are dead and only wait for a parent to reap
/// them (and in a container the init process may never do so), but
/// signal 0 still reaches them.
pub(crate) fn group_alive(pgid: Pid) -> bool {
    if killpg(pgid, None).is_err() {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            return false;
        };
        proc_stat(pid).is_some_and(|s| s.pgrp == pgid.as_raw() && s.is_alive())
    })
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// One letter: R, S, D, Z (zombie), X (dead), ...
    pub(crate) state: char,
    /// Process group id.
    pub(crate) pgrp: i32,
    /// Start time in clock ticks after boot (field 22): with the pid, it
    /// identifies a process, because pids are reused but not at the same
    /// instant.
    pub(crate) start_ticks: u64,
}

impl ProcStat {
    /// Running or able to run: neither a zombie nor dead.
    pub(crate) fn is_alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// Reads `/proc/<pid>/stat`; None if the process does not exist.
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

fn parse_stat(stat: &str) -> Option<ProcStat> {
    // The fields after the command name, which is in parentheses and may
    // itself contain spaces and parentheses: state (field 3), ppid, pgrp,
    // ..., starttime (field 22).
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests;
