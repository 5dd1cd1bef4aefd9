//! The OS sandbox every command of the model runs in (bash in the
//! foreground, background shells, hooks): Landlock for the file system,
//! seccomp for the network, entered by the child between `clone` and `exec`
//! (`process::spawn`).
//!
//! Modes (`[sandbox] mode`): `workspace-write` (the default) lets a command
//! read everywhere except the deny list and write only to the
//! conversation's directories, the temporary directories and a few devices;
//! `read-only` writes nowhere but those devices; `off` confines nothing.
//! `network = false` (the default) cuts the network: `socket()` for any
//! family but Unix sockets fails with EPERM.
//!
//! The network is cut by seccomp rather than by Landlock's TCP rules
//! (ABI 4): those cover TCP `bind`/`connect` only, so UDP (DNS included),
//! raw and other sockets would still reach out; a seccomp filter on
//! `socket()` stops every one of them, on any kernel with seccomp, and
//! leaves Unix sockets (local tools, the daemon's own socket needs its
//! token anyway) alone. `io_uring_setup` is refused too: io_uring can open
//! sockets without the `socket()` call.
//!
//! The deny list (read nothing there): the daemon's own files (data
//! directory, config directory and file, credentials file, socket and its
//! directory, log), and the user's `~/.ssh`, `~/.aws`, `~/.gnupg`,
//! `~/.config/gcloud`, `~/.kube`, `~/.docker`, `~/.netrc`. A denied path is
//! cut out of the readable tree level by level (see [`plan`]). Landlock also
//! keeps a sandboxed process from `ptrace`-reading processes outside its
//! domain, so `/proc/<daemon>/environ` is closed too. Signals are not
//! scoped (Landlock ABI 6 could): every command is a Landlock domain of its
//! own, so scoping would keep a later command from stopping a server an
//! earlier one started.
//!
//! Where Landlock is missing (old kernel, another OS, a failed probe) the
//! daemon says so once at start-up and runs commands as `off` would: it
//! never pretends. Everything that allocates or opens files (the ruleset,
//! its rules, the BPF program) is made in the daemon, once per set of
//! directories; the child only makes three system calls.

mod build;
mod plan;

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Deserialize;

pub(crate) use plan::Grant;

/// `[sandbox] mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SandboxMode {
    #[default]
    WorkspaceWrite,
    ReadOnly,
    Off,
}

impl SandboxMode {
    fn as_str(self) -> &'static str {
        match self {
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::Off => "off",
        }
    }
}

/// The `[sandbox]` section of the config file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct SandboxSection {
    pub(crate) mode: SandboxMode,
    /// Whether sandboxed commands may use the network.
    pub(crate) network: bool,
}

/// Why a sandbox could not be made for a command: the command is not run.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the sandbox: {0}")]
pub(crate) struct SandboxError(String);

/// The daemon's sandboxes: the policy, whether the kernel can enforce it,
/// and the prepared rulesets, one per set of writable directories.
#[derive(Debug)]
pub(crate) struct Sandboxes {
    section: SandboxSection,
    /// The Landlock ABI the kernel speaks, or why there is none.
    support: Result<i32, String>,
    /// Paths no sandboxed command reads.
    denied: Vec<PathBuf>,
    /// By writable directories and whether the network stays.
    prepared: Mutex<HashMap<(Vec<PathBuf>, bool), Confinement>>,
}

impl Sandboxes {
    /// The sandboxes of `section`, denying `own` (the daemon's own files)
    /// and the user's secrets under `home`. Probes the kernel; where
    /// Landlock is missing and the config wants a sandbox, logs a warning
    /// (once: the daemon makes one of these).
    pub(crate) fn new(section: SandboxSection, own: &[PathBuf], home: Option<&Path>) -> Sandboxes {
        let support = build::landlock_abi();
        if section.mode != SandboxMode::Off
            && let Err(why) = &support
        {
            tracing::warn!(
                "the sandbox is off: {why}; commands run unconfined (set [sandbox] mode = \"off\" \
                 to silence this)"
            );
        }
        let mut denied: Vec<PathBuf> = own.to_vec();
        if let Some(home) = home {
            denied.extend(USER_SECRETS.iter().map(|p| home.join(p)));
        }
        denied.sort();
        denied.dedup();
        Sandboxes {
            section,
            support,
            denied,
            prepared: Mutex::new(HashMap::new()),
        }
    }

    /// No sandbox at all (tests, and callers outside a conversation).
    pub(crate) fn off() -> Sandboxes {
        Sandboxes::new(
            SandboxSection {
                mode: SandboxMode::Off,
                network: true,
            },
            &[],
            None,
        )
    }

    /// Whether commands run confined, and if so whether they have the
    /// network: None when they run unconfined (mode `off`, or no Landlock).
    pub(crate) fn active(&self) -> Option<bool> {
        (self.section.mode != SandboxMode::Off && self.support.is_ok())
            .then_some(self.section.network)
    }

    /// One line for `agent doctor`: the mode, the network, and the kernel's
    /// Landlock ABI or why there is none.
    pub(crate) fn status(&self) -> String {
        let network = if self.section.network { "on" } else { "off" };
        match (&self.support, self.section.mode) {
            (_, SandboxMode::Off) => "off (config: [sandbox] mode = \"off\")".to_string(),
            (Ok(abi), mode) => format!(
                "{}, network {network} (Landlock ABI {abi}, seccomp)",
                mode.as_str()
            ),
            (Err(why), mode) => format!(
                "off: {why} (config asks for {}); commands run unconfined",
                mode.as_str()
            ),
        }
    }

    /// The confinement for a command that may write in `dirs` (the
    /// conversation's working and additional directories); None when the
    /// sandbox is not active. `network`: the command is known to need the
    /// network (`agentd_core::permission::needs_network`) and was allowed
    /// as such, so it keeps it even with `network = false`; the file
    /// system stays confined. Made once per set of directories and kept.
    pub(crate) fn confine(
        &self,
        dirs: &[PathBuf],
        network: bool,
    ) -> Result<Option<Confinement>, SandboxError> {
        let Ok(abi) = self.support else {
            return Ok(None);
        };
        let roots = match self.section.mode {
            SandboxMode::Off => return Ok(None),
            SandboxMode::WorkspaceWrite => write_roots(dirs),
            SandboxMode::ReadOnly => Vec::new(),
        };
        let network = network || self.section.network;
        let key = (dirs.to_vec(), network);
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(known) = prepared.get(&key) {
            return Ok(Some(known.clone()));
        }
        let mut all: Vec<(PathBuf, Grant)> = vec![(PathBuf::from("/"), Grant::Read)];
        all.extend(roots.into_iter().map(|p| (p, Grant::Write)));
        all.extend(DEVICES.iter().map(|d| (PathBuf::from(d), Grant::Write)));
        let rules = plan::plan(&all, &self.denied, &build::list_dir);
        let ruleset = build::ruleset(abi, &rules).map_err(SandboxError)?;
        let network = if network {
            None
        } else {
            Some(build::network_filter().map_err(SandboxError)?)
        };
        let confinement = Confinement(Arc::new(Prepared { ruleset, network }));
        prepared.insert(key, confinement.clone());
        Ok(Some(confinement))
    }
}

impl Default for Sandboxes {
    /// [`Sandboxes::off`].
    fn default() -> Self {
        Sandboxes::off()
    }
}

/// Under the user's home: what holds keys and tokens of other services.
const USER_SECRETS: [&str; 7] = [
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
];

/// Devices every sandboxed command may write to.
const DEVICES: [&str; 7] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// What a `workspace-write` command may write: `dirs`, `/tmp` and
/// `$TMPDIR`.
fn write_roots(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots = dirs.to_vec();
    roots.push(PathBuf::from("/tmp"));
    roots.extend(std::env::var_os("TMPDIR").map(PathBuf::from));
    roots.retain(|p| p.is_absolute());
    roots
}

/// A prepared sandbox, cheap to clone and to install on a command.
#[derive(Debug, Clone)]
pub(crate) struct Confinement(Arc<Prepared>);

#[derive(Debug)]
struct Prepared {
    /// The Landlock ruleset, made in the daemon; each child restricts
    /// itself with it.
    ruleset: OwnedFd,
    /// The seccomp program that cuts the network; None: the network stays.
    network: Option<seccompiler::BpfProgram>,
}

impl Confinement {
    /// Confines the calling process (see [`Prepared::enter`]). For the
    /// child of `process::spawn`, between `clone` and `exec`:
    /// async-signal-safe, it allocates nothing and takes no lock.
    pub(in crate::process) fn enter(&self) -> std::io::Result<()> {
        self.0.enter()
    }
}

impl Prepared {
    /// Confines the calling process: no new privileges, the Landlock
    /// ruleset, then the seccomp filter. Runs in the child after `fork`.
    fn enter(&self) -> std::io::Result<()> {
        build::restrict_self(self.ruleset.as_raw_fd())?;
        if let Some(filter) = &self.network {
            seccompiler::apply_filter(filter).map_err(|_| std::io::Error::last_os_error())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
