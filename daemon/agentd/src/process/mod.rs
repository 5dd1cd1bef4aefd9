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
//! takes one, and `command_env` is the one place that turns it into the
//! child's environment.
//!
//! No child inherits the daemon's credentials: every process the daemon
//! starts leaves out the variables [`is_secret_var`] names, the one list:
//! commands, shells and hooks in `command_env`, MCP stdio servers and git
//! through `withhold_secrets`.
//!
//! Commands are started by [`spawn`] (`clone` with `CLONE_VM | CLONE_VFORK`,
//! as `posix_spawn` does, the sandbox entered on the way) and followed by
//! a [`Child`] on their pidfd.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use tokio::net::unix::pipe;

mod child;
mod group;
mod launch;
mod spawn;
pub(crate) use child::{Child, OnDrop};
use group::boot_ticks;
pub(crate) use group::{Group, leads_group_since, proc_stat};
#[cfg(test)]
pub(crate) use group::{ProcStat, group_alive};
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

/// A command started by [`spawn_bash`].
#[derive(Debug)]
pub(crate) struct Spawned {
    /// The `bash` process, the leader of [`Spawned::group`].
    pub(crate) child: Child,
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
    #[error("cannot follow the shell: {0}")]
    Untracked(std::io::Error),
    #[error("cannot read the command's output: {0}")]
    Output(std::io::Error),
}

/// Starts `bash -c command` in `cwd`, in a process group of its own, with
/// stdin empty and stdout and stderr to one new pipe. The shell and the
/// environment are the conversation's (`launch`), minus the daemon's
/// credentials, with prompts and pagers out of the way. Needs a tokio
/// runtime (the pipe and the pidfd register with it). With `sandbox` the
/// command confines itself before it starts ([`sandbox`]).
pub(crate) fn spawn_bash(
    command: &str,
    cwd: &Path,
    on_drop: OnDrop,
    launch: &Launch,
    sandbox: Option<&Confinement>,
) -> Result<Spawned, SpawnError> {
    with_shell(launch, |program| {
        Bash::new(program, launch, command, cwd, sandbox).with_output_pipe(on_drop)
    })
}

/// A hook's command started by [`spawn_piped`]: stdin, stdout and stderr
/// are pipes of their own ([`Child::stdin`], ...).
#[derive(Debug)]
pub(crate) struct Piped {
    /// The `bash` process, the leader of [`Piped::group`]; killed when
    /// dropped.
    pub(crate) child: Child,
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
        Bash::new(program, launch, command, cwd, sandbox).with_pipes()
    })
}

/// A new pipe, both ends close-on-exec and above the standard streams'
/// numbers (see [`spawn::above_stdio`]).
fn new_pipe() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    let (read_end, write_end) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| SpawnError::Pipe(e.into()))?;
    let moved = spawn::above_stdio(read_end)
        .and_then(|r| Ok((r, spawn::above_stdio(write_end)?)))
        .map_err(SpawnError::Pipe)?;
    Ok(moved)
}

/// `/dev/null` for reading, the stdin of a command nobody types into.
fn dev_null() -> std::io::Result<OwnedFd> {
    let null = std::fs::File::open("/dev/null")?;
    spawn::above_stdio(OwnedFd::from(null))
}

/// `shell -c command` in `cwd`, in the environment of `launch`, confined
/// by `sandbox` when given.
struct Bash<'a> {
    program: &'a OsStr,
    launch: &'a Launch,
    command: &'a str,
    cwd: &'a Path,
    sandbox: Option<&'a Confinement>,
}

impl<'a> Bash<'a> {
    fn new(
        program: &'a OsStr,
        launch: &'a Launch,
        command: &'a str,
        cwd: &'a Path,
        sandbox: Option<&'a Confinement>,
    ) -> Self {
        Bash {
            program,
            launch,
            command,
            cwd,
            sandbox,
        }
    }

    /// Starts it with stdin empty and stdout and stderr to one new pipe.
    fn with_output_pipe(&self, on_drop: OnDrop) -> Result<Spawned, SpawnError> {
        let (read_end, write_end) = new_pipe()?;
        let null = dev_null().map_err(SpawnError::Pipe)?;
        let stdio = [
            null.as_raw_fd(),
            write_end.as_raw_fd(),
            write_end.as_raw_fd(),
        ];
        let (child, group) = self.start(stdio, on_drop)?;
        // Our copy of the write end goes, so end-of-file means every
        // process of the command has closed it.
        drop(write_end);
        let output = pipe::Receiver::from_owned_fd(read_end).map_err(|e| {
            group.signal(Signal::SIGKILL);
            SpawnError::Output(e)
        })?;
        Ok(Spawned {
            child,
            group,
            output,
        })
    }

    /// Starts it with stdin, stdout and stderr piped separately; killed
    /// when its handle is dropped.
    fn with_pipes(&self) -> Result<Piped, SpawnError> {
        let (in_read, in_write) = new_pipe()?;
        let (out_read, out_write) = new_pipe()?;
        let (err_read, err_write) = new_pipe()?;
        let stdio = [
            in_read.as_raw_fd(),
            out_write.as_raw_fd(),
            err_write.as_raw_fd(),
        ];
        let (mut child, group) = self.start(stdio, OnDrop::Kill)?;
        drop((in_read, out_write, err_write));
        let ends = pipe::Sender::from_owned_fd(in_write).and_then(|stdin| {
            Ok((
                stdin,
                pipe::Receiver::from_owned_fd(out_read)?,
                pipe::Receiver::from_owned_fd(err_read)?,
            ))
        });
        let (stdin, stdout, stderr) = ends.map_err(|e| {
            group.signal(Signal::SIGKILL);
            SpawnError::Output(e)
        })?;
        child.stdin = Some(stdin);
        child.stdout = Some(stdout);
        child.stderr = Some(stderr);
        Ok(Piped { child, group })
    }

    /// Starts it with `stdio` as its stdin, stdout and stderr, as the
    /// leader of a new process group; the process and the group's handle.
    fn start(&self, stdio: [RawFd; 3], on_drop: OnDrop) -> Result<(Child, Group), SpawnError> {
        let env = command_env(self.launch);
        // `$0`, and the name the shell's own messages start with ("bash:
        // line 1: …"), as when it is found by name.
        let args = [
            launch::arg0(self.program),
            OsStr::new("-c"),
            OsStr::new(self.command),
        ];
        let spec = spawn::Spec {
            program: self.program,
            args: &args,
            env: &env,
            cwd: self.cwd,
            stdio,
            sandbox: self.sandbox,
        };
        let before = boot_ticks();
        let started = spawn::spawn(&spec);
        let after = boot_ticks();
        let started = started.map_err(|source| SpawnError::Start {
            cwd: self.cwd.display().to_string(),
            source,
        })?;
        // The leader is not reaped before its `Child` is waited for, so
        // its pid cannot have been reused yet and its start time is the
        // one to keep.
        let group = Group::spawned(started.pid, before, after);
        let child = Child::new(started.pid, started.pidfd, on_drop).map_err(|e| {
            group.signal(Signal::SIGKILL);
            SpawnError::Untracked(e)
        })?;
        Ok((child, group))
    }
}

/// The environment of a command: the conversation's (`launch`) or the
/// daemon's, then the fixed additions, then without the daemon's
/// credentials. The one place that decides it.
fn command_env(launch: &Launch) -> Vec<(OsString, OsString)> {
    let mut env: std::collections::BTreeMap<OsString, OsString> = match launch.env() {
        Some(vars) => vars.iter().cloned().collect(),
        None => std::env::vars_os().collect(),
    };
    // Nothing can answer a prompt: make git fail instead of waiting for a
    // password, and keep pagers out of the way.
    for (name, value) in [
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_PAGER", "cat"),
        ("PAGER", "cat"),
    ] {
        env.insert(name.into(), value.into());
    }
    // The daemon's own credentials are not the command's business: a
    // command could print them into the transcript.
    env.into_iter()
        .filter(|(name, _)| !is_secret_var(name))
        .collect()
}

#[cfg(test)]
mod tests;
