//! Reaching the daemon: gRPC over its Unix socket, and starting it when
//! nothing answers there.

use std::error::Error as StdError;
use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_proto::v1::agent_service_client::AgentServiceClient;
use tokio::time::Instant;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::error::CliError;

/// The client type every command uses.
pub type Client = AgentServiceClient<InterceptedService<Channel, Credentials>>;

/// What every call carries: this client's name (user@host, or the one the
/// user chose) and, to a remote daemon, the bearer token.
#[derive(Clone, Debug)]
pub struct Credentials {
    name: Option<AsciiMetadataValue>,
    authorization: Option<AsciiMetadataValue>,
}

impl Credentials {
    fn new(remote: Option<&crate::remote::Remote>) -> Credentials {
        let name = crate::commands::client_name();
        Credentials {
            // A name that is no header value (not ASCII) goes unsent.
            name: MetadataValue::try_from(name.as_str()).ok(),
            authorization: remote.and_then(|r| MetadataValue::try_from(r.authorization()).ok()),
        }
    }
}

impl tonic::service::Interceptor for Credentials {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(name) = &self.name {
            request
                .metadata_mut()
                .insert("agent-client-name", name.clone());
        }
        if let Some(authorization) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", authorization.clone());
        }
        Ok(request)
    }
}

/// A client over `channel`.
fn client(channel: Channel, remote: Option<&crate::remote::Remote>) -> Client {
    AgentServiceClient::with_interceptor(channel, Credentials::new(remote))
        .max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(64 * 1024 * 1024)
}

/// Connects to the remote daemon this process was pointed at.
async fn connect_remote(remote: &crate::remote::Remote) -> Result<Client, CliError> {
    let channel = remote.connect().await.map_err(|why| CliError::Connect {
        socket: PathBuf::from(&remote.address),
        why,
    })?;
    Ok(client(channel, Some(remote)))
}

/// How long autostart waits for a fresh daemon to answer.
const AUTOSTART_WAIT: Duration = Duration::from_secs(5);

/// Connects to the daemon listening on `socket`. Fails at once when nothing
/// listens there (no retry, no autostart).
pub async fn connect(socket: &Path) -> Result<Client, CliError> {
    if let Some(remote) = crate::remote::current() {
        return connect_remote(&remote).await;
    }
    try_connect(socket).await.map_err(|e| CliError::Connect {
        socket: socket.to_path_buf(),
        why: error_chain(&e),
    })
}

async fn try_connect(socket: &Path) -> Result<Client, tonic::transport::Error> {
    let path = socket.to_path_buf();
    // The URI is required by the API but unused: the connector ignores it.
    let channel = Endpoint::from_static("http://[::]:50051")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await?;
    Ok(client(channel, None))
}

/// The socket to use: the one given (flag or `AGENTD_SOCKET`) or the default.
pub fn socket_path(given: Option<&Path>) -> Result<PathBuf, CliError> {
    match given {
        Some(path) => Ok(path.to_path_buf()),
        None => agent_proto::default_socket_path().map_err(CliError::NoSocketPath),
    }
}

/// Connects to the daemon on `socket`; when no daemon is there (no socket
/// file, or connection refused) and `autostart` is on, starts one and waits
/// up to 5 s for it to answer. `pass_socket`: the user chose the socket, so
/// the daemon is told to listen there.
pub async fn connect_or_start(
    socket: &Path,
    pass_socket: bool,
    autostart: bool,
) -> Result<Client, CliError> {
    connect_or_start_with(socket, pass_socket, autostart, daemon_binary).await
}

async fn connect_or_start_with(
    socket: &Path,
    pass_socket: bool,
    autostart: bool,
    find_binary: fn() -> Result<PathBuf, String>,
) -> Result<Client, CliError> {
    // A remote daemon is never started from here.
    if let Some(remote) = crate::remote::current() {
        return connect_remote(&remote).await;
    }
    let first = match try_connect(socket).await {
        Ok(client) => return Ok(client),
        Err(e) => e,
    };
    let absent = daemon_absent(&first, socket);
    if absent && !autostart {
        return Err(CliError::NoDaemon(socket.to_path_buf()));
    }
    if !absent {
        return Err(CliError::Connect {
            socket: socket.to_path_buf(),
            why: error_chain(&first),
        });
    }
    let failed = |why: String| CliError::AutostartFailed {
        socket: socket.to_path_buf(),
        why,
    };
    let bin = find_binary().map_err(failed)?;
    let args = if pass_socket {
        vec![
            "--socket".to_string(),
            absolute(socket).display().to_string(),
        ]
    } else {
        Vec::new()
    };
    start_daemon(&bin, &args, socket).await.map_err(failed)
}

/// Starts `bin args` detached (see [`spawn_daemon`]) and waits up to 5 s
/// for it to answer on `socket`. The error says why it did not.
pub(crate) async fn start_daemon(
    bin: &Path,
    args: &[String],
    socket: &Path,
) -> Result<Client, String> {
    let (mut child, log) = spawn_daemon(bin, args, socket)?;
    let log_hint = |log: &Option<DaemonLog>| log.as_ref().map_or(String::new(), DaemonLog::hint);
    let deadline = Instant::now() + AUTOSTART_WAIT;
    let mut delay = Duration::from_millis(25);
    loop {
        tokio::time::sleep(delay).await;
        let last = match try_connect(socket).await {
            Ok(client) => return Ok(client),
            Err(e) => e,
        };
        if let Ok(Some(status)) = child.try_wait() {
            // Another client may have started a daemon at the same moment,
            // and ours stepped aside: give that one a last chance.
            tokio::time::sleep(Duration::from_millis(300)).await;
            if let Ok(client) = try_connect(socket).await {
                return Ok(client);
            }
            return Err(format!("agentd exited ({status}){}", log_hint(&log)));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "agentd did not answer within {} s: {}{}",
                AUTOSTART_WAIT.as_secs(),
                error_chain(&last),
                log_hint(&log)
            ));
        }
        delay = (delay * 2).min(Duration::from_millis(400));
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether a connect error means "no daemon here" (rather than, say, a
/// permission problem that starting another daemon would not fix).
fn daemon_absent(error: &tonic::transport::Error, socket: &Path) -> bool {
    if !socket.exists() {
        return true;
    }
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            );
        }
        source = e.source();
    }
    false
}

/// The daemon binary: `$AGENTD_BIN`, else `agentd` next to this executable,
/// else `agentd` on `PATH`.
pub fn daemon_binary() -> Result<PathBuf, String> {
    find_program("agentd", "AGENTD_BIN")
}

/// A program of the project: the path in the variable `var` when it is set,
/// else `name` next to this executable, else `name` on `PATH`.
pub(crate) fn find_program(name: &str, var: &str) -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os(var).filter(|b| !b.is_empty()) {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().ok();
    if let Some(beside) = exe.as_ref().map(|e| e.with_file_name(name))
        && is_executable(&beside)
    {
        return Ok(beside);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
    }
    let beside = exe
        .and_then(|e| e.parent().map(|p| p.display().to_string()))
        .unwrap_or_else(|| "this program".to_string());
    Err(format!(
        "{name} not found in {beside} or on PATH (set {var})"
    ))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Starts the daemon detached: its own process group (so Ctrl-C in this
/// terminal does not reach it), stdin from /dev/null, output appended to
/// `agentd.log` in the socket's directory when that can be opened. Returns
/// the child and the log's path.
///
/// The daemon inherits this environment minus the terminal's API keys,
/// unless it has no key of its own for that provider: then it keeps the
/// terminal's, and one line on stderr says so
/// ([`crate::credentials::daemon_environment`]).
fn spawn_daemon(
    bin: &Path,
    args: &[String],
    socket: &Path,
) -> Result<(Child, Option<DaemonLog>), String> {
    let socket = absolute(socket);
    let mut command = Command::new(bin);
    command.args(args);
    let (remove, notices) = crate::credentials::daemon_environment(&|k| std::env::var(k).ok());
    for var in remove {
        command.env_remove(var);
    }
    let log_path = socket.parent().map(|dir| dir.join("agentd.log"));
    let log = log_path.as_ref().and_then(|path| {
        let dir = path.parent()?;
        // The daemon insists on a private (0700) socket directory; create it so.
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .ok()?;
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .ok()
    });
    let (stdout, stderr, log) = match log.and_then(|f| Some((f.try_clone().ok()?, f))) {
        Some((out, err)) => {
            let start = err.metadata().map_or(0, |m| m.len());
            let log = log_path.map(|path| DaemonLog { path, start });
            (Stdio::from(out), Stdio::from(err), log)
        }
        None => (Stdio::null(), Stdio::null(), None),
    };
    command
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .current_dir("/")
        .process_group(0);
    let child = command
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    for notice in notices {
        eprintln!("agent: {notice}");
    }
    Ok((child, log))
}

/// The log a started daemon writes to, and where this start's output begins.
struct DaemonLog {
    path: PathBuf,
    start: u64,
}

impl DaemonLog {
    /// " (see PATH)", or ": LAST LINE (see PATH)" when this start logged something.
    fn hint(&self) -> String {
        let last = std::fs::read(&self.path).ok().and_then(|bytes| {
            let new = bytes.get(usize::try_from(self.start).ok()?..)?;
            let text = String::from_utf8_lossy(new);
            let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
            Some(crate::render::one_line(line, 200))
        });
        match last {
            Some(line) => format!(": {line} (see {})", self.path.display()),
            None => format!(" (see {})", self.path.display()),
        }
    }
}

/// An error and its sources, `: `-separated, without repeats.
pub fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = Some(error);
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_says_where_it_was_looked_for() {
        let err = find_program("agent-no-such-program", "AGENT_NO_SUCH_PROGRAM_BIN").unwrap_err();
        assert!(
            err.starts_with("agent-no-such-program not found in "),
            "{err}"
        );
        assert!(
            err.ends_with(" or on PATH (set AGENT_NO_SUCH_PROGRAM_BIN)"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn missing_socket_without_autostart_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("none.sock");
        let err = connect_or_start(&socket, true, false).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("no daemon at {} (autostart is off)", socket.display())
        );
        let err = connect(&socket).await.unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "cannot connect to agentd at {}: ",
                socket.display()
            )),
            "{err}"
        );
    }

    #[tokio::test]
    async fn autostart_reports_why_it_failed() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run").join("agentd.sock");
        // A "daemon" that logs its arguments and exits at once.
        let fake = dir.path().join("fake-agentd");
        std::fs::write(&fake, "#!/bin/sh\necho started \"$@\"\nexit 3\n").unwrap();
        let log_path = dir.path().join("run").join("agentd.log");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        FAKE.with(|f| *f.borrow_mut() = Some(fake.clone()));
        let err = connect_or_start_with(&socket, true, true, fake_binary).await;
        let text = err.unwrap_err().to_string();
        assert_eq!(
            text,
            format!(
                "no daemon at {} and autostart failed: agentd exited (exit status: 3): \
                 started --socket {} (see {})",
                socket.display(),
                socket.display(),
                log_path.display()
            )
        );
        let log = std::fs::read_to_string(dir.path().join("run").join("agentd.log")).unwrap();
        assert_eq!(log, format!("started --socket {}\n", socket.display()));
        let mode = std::fs::metadata(dir.path().join("run"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);

        let err = connect_or_start_with(&socket, true, true, || Err("not here".into())).await;
        assert_eq!(
            err.unwrap_err().to_string(),
            format!(
                "no daemon at {} and autostart failed: not here",
                socket.display()
            )
        );
    }

    thread_local! {
        static FAKE: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
    }

    fn fake_binary() -> Result<PathBuf, String> {
        FAKE.with(|f| f.borrow().clone())
            .ok_or_else(|| "no fake".to_string())
    }

    #[test]
    fn error_chains_drop_repeats() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let outer = std::io::Error::other(inner);
        assert_eq!(error_chain(&outer), "no such file");
    }
}
