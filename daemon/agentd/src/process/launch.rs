//! What a conversation's commands are started with: which shell and which
//! environment, and where the shell is. Built once per conversation (`crate::environment`) and
//! shared (`Arc`), so a command's start costs what it did before.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::SpawnError;

/// The shell and environment of one conversation's commands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Launch {
    /// The shell to start, absolute; None: `bash` on the daemon's `PATH`
    /// (found once for all commands, see `process::find_bash`).
    program: Option<PathBuf>,
    /// The whole environment the command starts from (the daemon's fixed
    /// additions come on top and its secrets are taken out, see
    /// `process::command_env`); None: the daemon's own.
    env: Option<Arc<[(OsString, OsString)]>>,
}

/// Shells whose `-c` reads the commands the model writes for bash.
const SHELLS: [&str; 2] = ["bash", "zsh"];

impl Launch {
    /// Commands as the daemon started them before conversations had an
    /// environment: bash, in the daemon's environment.
    #[cfg(test)]
    pub(crate) fn daemon() -> Launch {
        Launch::default()
    }

    /// Commands in `env` (None: the daemon's), started with `shell` (a
    /// path or a name, looked up on the `PATH` of `env`) when its file name
    /// is one of [`SHELLS`], else with bash from that `PATH`.
    pub(crate) fn new(shell: Option<&OsStr>, env: Option<Vec<(OsString, OsString)>>) -> Launch {
        let path = match &env {
            Some(vars) => vars
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone()),
            None => std::env::var_os("PATH"),
        };
        let program = shell
            .filter(|s| is_known_shell(s))
            .and_then(|s| locate(s, path.as_deref()))
            .or_else(|| match &env {
                // The daemon's bash is found and kept by `process` itself.
                None => None,
                Some(_) => locate(OsStr::new("bash"), path.as_deref()),
            });
        Launch {
            program,
            env: env.map(Arc::from),
        }
    }

    /// The shell to start; None: the daemon's bash.
    pub(crate) fn program(&self) -> Option<&Path> {
        self.program.as_deref()
    }

    /// The environment commands start from; None: the daemon's.
    pub(crate) fn env(&self) -> Option<&[(OsString, OsString)]> {
        self.env.as_deref()
    }
}

/// What `program` calls itself (`$0`, and the start of its messages):
/// its file name when it is one of [`SHELLS`], else `bash`.
pub(super) fn arg0(program: &OsStr) -> &OsStr {
    Path::new(program)
        .file_name()
        .filter(|name| SHELLS.iter().any(|s| name == s))
        .unwrap_or(OsStr::new("bash"))
}

/// Whether `shell`'s file name is one of [`SHELLS`].
fn is_known_shell(shell: &OsStr) -> bool {
    Path::new(shell)
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|name| SHELLS.contains(&name))
}

/// `shell` as an absolute path: itself when it is one and executable, else
/// found on `path`.
fn locate(shell: &OsStr, path: Option<&OsStr>) -> Option<PathBuf> {
    let as_path = Path::new(shell);
    if as_path.is_absolute() {
        return is_executable(as_path).then(|| as_path.to_path_buf());
    }
    let name = as_path.file_name()?.to_str()?;
    find_in_path(path?, name)
}

/// Where `bash` was found on the daemon's `PATH`, once for all commands.
///
/// Started by name, the new process looked for it itself, and every
/// directory of `PATH` before bash's costs a failed `execve` (each sets up
/// and drops a whole new address space): with bash in the ninth directory,
/// as on the machine the benchmarks run on, about 60 µs of every command's
/// start, the daemon's worker waiting in `vfork` meanwhile (issue 20).
/// The daemon's `PATH` does not change; a bash that moved away since is
/// looked for again ([`moved_away`]).
pub(super) static BASH: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Starts the conversation's shell with `spawn`; the daemon's bash when it
/// has none, or when its shell is gone.
pub(super) fn with_shell<T>(
    launch: &Launch,
    spawn: impl Fn(&OsStr) -> Result<T, SpawnError>,
) -> Result<T, SpawnError> {
    let Some(program) = launch.program() else {
        return with_bash(spawn);
    };
    match spawn(program.as_os_str()) {
        Err(SpawnError::Start { source, .. }) if moved_away(program.as_os_str(), &source) => {
            with_bash(spawn)
        }
        other => other,
    }
}

/// Starts bash with `spawn`: by the remembered path, and once more by a
/// fresh lookup when that bash moved away.
fn with_bash<T>(spawn: impl Fn(&OsStr) -> Result<T, SpawnError>) -> Result<T, SpawnError> {
    let (program, remembered) = bash_program();
    match spawn(&program) {
        Err(SpawnError::Start { source, .. }) if remembered && moved_away(&program, &source) => {
            spawn(&find_bash())
        }
        other => other,
    }
}

/// The program to start for `bash`, and whether it is the remembered one:
/// see [`find_bash`].
fn bash_program() -> (OsString, bool) {
    let known = BASH.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match known {
        Some(path) => (path.into_os_string(), true),
        None => (find_bash(), false),
    }
}

/// Looks for bash on the daemon's `PATH` now and remembers where it is;
/// the bare name when it cannot be told from here (see [`find_in_path`]),
/// and the new process searches.
fn find_bash() -> OsString {
    let found = std::env::var_os("PATH").and_then(|path| find_in_path(&path, "bash"));
    let mut known = BASH.lock().unwrap_or_else(|p| p.into_inner());
    known.clone_from(&found);
    found.map_or_else(|| OsString::from("bash"), PathBuf::into_os_string)
}

/// Whether starting the remembered `program` failed because it is not
/// there any more (not, say, because the command's directory is missing):
/// then it is looked for again.
fn moved_away(program: &OsStr, error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::NotFound && !Path::new(program).is_file()
}

/// The first executable file `name` in the directories of `path` (a `PATH`
/// value), as `execvp` would pick it. None when there is none, or when a
/// directory before it is relative (`.`, or an empty entry): that one is
/// looked up in each command's own working directory, so only the new
/// process can search it.
pub(super) fn find_in_path(path: &OsStr, name: &str) -> Option<PathBuf> {
    for dir in std::env::split_paths(path) {
        if !dir.is_absolute() {
            return None;
        }
        let candidate = dir.join(name);
        if is_executable(&candidate) {
            return Some(candidate);
        }
    }
    None
}

/// Whether `path` is a file someone may execute.
fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn executable(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn env_with_path(dir: &Path) -> Vec<(OsString, OsString)> {
        vec![("PATH".into(), dir.as_os_str().to_owned())]
    }

    #[test]
    fn the_users_shell_is_taken_when_it_is_bash_or_zsh_and_bash_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let zsh = executable(dir.path(), "zsh");
        let bash = executable(dir.path(), "bash");
        executable(dir.path(), "fish");
        let env = || Some(env_with_path(dir.path()));
        let by_name = Launch::new(Some(OsStr::new("zsh")), env());
        assert_eq!(by_name.program(), Some(zsh.as_path()));
        assert_eq!(arg0(zsh.as_os_str()), "zsh");
        let by_path = Launch::new(Some(zsh.as_os_str()), env());
        assert_eq!(by_path.program(), Some(zsh.as_path()));
        let fish = Launch::new(Some(OsStr::new("/usr/bin/fish")), env());
        assert_eq!(fish.program(), Some(bash.as_path()));
        assert_eq!(arg0(OsStr::new("/usr/bin/fish")), "bash");
        let none = Launch::new(None, env());
        assert_eq!(none.program(), Some(bash.as_path()));
    }

    #[test]
    fn without_an_environment_the_daemons_bash_is_kept() {
        assert_eq!(Launch::new(None, None), Launch::daemon());
        assert_eq!(arg0(OsStr::new("bash")), "bash");
        let gone = Launch::new(Some(OsStr::new("/nonexistent/zsh")), None);
        assert_eq!(gone.program(), None);
    }
}
