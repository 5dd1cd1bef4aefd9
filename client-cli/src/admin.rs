//! Looking after the daemon rather than talking to a conversation: `agent
//! login|logout|doctor`, `agent daemon stop|restart|status|logs`, `agent
//! --version`, and the packaging helpers `agent completions` and `agent man`.

mod daemon;
mod doctor;
mod packaging;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_proto::v1 as pb;

use crate::connect::{Client, connect, connect_or_start};
use crate::credentials::{self, Provider};
use crate::error::{CliError, Exit};
use crate::io::Io;

pub use daemon::daemon;
pub use doctor::doctor;
pub use packaging::{completions, man};

/// The client's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How long `agent --version` waits for a daemon's answer.
const VERSION_WAIT: Duration = Duration::from_secs(2);

/// Where the daemon is and how to reach it (the parts of `commands::Ctx`
/// these commands need).
#[derive(Debug, Clone)]
pub struct Target {
    pub socket: PathBuf,
    pub pass_socket: bool,
    pub autostart: bool,
    pub json: bool,
}

fn out_err(e: std::io::Error) -> CliError {
    CliError::io("writing output", e)
}

fn line(io: &mut Io, text: &str) -> Result<(), CliError> {
    writeln!(io.out, "{text}")
        .and_then(|()| io.out.flush())
        .map_err(out_err)
}

fn status(e: tonic::Status) -> CliError {
    CliError::Server(format!("GetDaemonInfo: {}", e.message()))
}

async fn info(
    client: &mut Client,
    check_model: bool,
) -> Result<pb::GetDaemonInfoResponse, CliError> {
    client
        .get_daemon_info(pb::GetDaemonInfoRequest { check_model })
        .await
        .map(tonic::Response::into_inner)
        .map_err(status)
}

/// The daemon answering on the socket, if any (never starts one).
async fn running(target: &Target) -> Option<(Client, pb::GetDaemonInfoResponse)> {
    let mut client = connect(&target.socket).await.ok()?;
    let info = info(&mut client, false).await.ok()?;
    Some((client, info))
}

fn source_name(source: i32) -> &'static str {
    match pb::CredentialsSource::try_from(source) {
        Ok(pb::CredentialsSource::ConfigFile) => "config file",
        Ok(pb::CredentialsSource::CredentialsFile) => "credentials file",
        Ok(pb::CredentialsSource::Environment) => "environment",
        Ok(pb::CredentialsSource::None) => "none",
        Ok(pb::CredentialsSource::Unspecified) | Err(_) => "unreadable",
    }
}

/// "1 h 2 m", "3 m 4 s", "5 s".
fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} m {} s", s / 60, s % 60),
        3600..86400 => format!("{} h {} m", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

// ---- --version ----

/// `agent --version`: this client's version, and the daemon's when one
/// answers on the socket within 2 s (none is started).
pub async fn version(socket: Option<&Path>, io: &mut Io) -> Result<Exit, CliError> {
    line(io, &format!("agent {VERSION}"))?;
    let daemon = match crate::connect::socket_path(socket) {
        Ok(socket) => {
            let ask = async {
                let mut client = connect(&socket).await.ok()?;
                info(&mut client, false).await.ok()
            };
            tokio::time::timeout(VERSION_WAIT, ask).await.ok().flatten()
        }
        Err(_) => None,
    };
    match daemon {
        Some(info) => line(io, &format!("agentd {} (pid {})", info.version, info.pid))?,
        None => line(io, "daemon: not running")?,
    }
    Ok(Exit::Ok)
}

/// The socket given by `--socket PATH`/`--socket=PATH` among `args`, else
/// `AGENTD_SOCKET`: `--version` is answered before the command line is
/// parsed, so it looks for the flag itself.
pub fn socket_from_args(args: &[String]) -> Option<PathBuf> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--socket" {
            return it.next().map(PathBuf::from);
        }
        if let Some(path) = arg.strip_prefix("--socket=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os("AGENTD_SOCKET")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
}

// ---- login / logout ----

/// Where `agent login` and `agent logout` act: the credentials file and
/// provider (the daemon's, else those a daemon started from this
/// environment would use), the endpoint the key is for, and the daemon.
struct LoginTarget {
    path: PathBuf,
    provider: Provider,
    endpoint: credentials::Endpoint,
    daemon: Option<(Client, pb::GetDaemonInfoResponse)>,
}

/// The [`LoginTarget`]; `start` starts a daemon when none answers (for
/// `--check`, which needs one).
async fn credentials_target(
    target: &Target,
    provider: Option<Provider>,
    start: bool,
) -> Result<LoginTarget, CliError> {
    let env = |k: &str| std::env::var(k).ok();
    let daemon = if start {
        let mut client =
            connect_or_start(&target.socket, target.pass_socket, target.autostart).await?;
        let info = info(&mut client, false).await?;
        Some((client, info))
    } else {
        running(target).await
    };
    let path = daemon
        .as_ref()
        .map(|(_, i)| i.credentials_file.clone())
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| credentials::credentials_file(&env))
        .ok_or_else(|| {
            CliError::Input(
                "neither XDG_CONFIG_HOME nor HOME is set: no place for the credentials file".into(),
            )
        })?;
    let config = credentials::config_file(&env);
    let provider = provider.unwrap_or_else(|| match &daemon {
        Some((_, i)) => Provider::from_name(&i.provider).unwrap_or(Provider::Anthropic),
        None => credentials::configured_provider(config.as_deref()),
    });
    // A daemon reports the endpoint of its own provider only (an older one
    // none); a daemon's environment, which may name another, is unknown.
    let base_url = match &daemon {
        Some((_, i)) if Provider::from_name(&i.provider) == Some(provider) => i.base_url.clone(),
        Some(_) => String::new(),
        None => credentials::configured_base_url(&env, config.as_deref(), provider),
    };
    Ok(LoginTarget {
        path,
        provider,
        endpoint: credentials::Endpoint::of(&base_url, provider),
        daemon,
    })
}

/// `agent login`: reads a key (no echo at a terminal, else all of stdin),
/// checks its shape and stores it in the daemon's credentials file; with
/// `check`, then has the daemon send its model one tiny request.
pub async fn login(
    target: &Target,
    provider: Option<Provider>,
    check: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let LoginTarget {
        path,
        provider,
        endpoint,
        daemon,
    } = credentials_target(target, provider, check).await?;
    if check
        && let Some((_, info)) = &daemon
        && Provider::from_name(&info.provider) != Some(provider)
    {
        return Err(CliError::Input(format!(
            "--check asks agentd's model, which is {}'s; store the {} key without --check",
            info.provider,
            provider.table()
        )));
    }
    let raw = if io.input.is_terminal() {
        rpassword::prompt_password(format!("{} API key (not echoed): ", provider.table()))
            .map_err(|e| CliError::io("reading the key from the terminal", e))?
    } else {
        io.input
            .read_to_string()
            .await
            .map_err(|e| CliError::io("reading the key from stdin", e))?
    };
    let (key, warning) = credentials::check_key(&raw, provider, endpoint)?;
    credentials::store(&path, provider, &key)?;
    line(
        io,
        &format!(
            "stored the {} key in {} (mode 0600); agentd uses it from its next request",
            provider.table(),
            path.display()
        ),
    )?;
    if let Some(warning) = warning {
        writeln!(io.err, "agent: warning: {warning}").map_err(out_err)?;
    }
    let Some((mut client, _)) = daemon else {
        return Ok(Exit::Ok);
    };
    // Say so when the daemon will not use it: a key in its config file
    // comes first.
    if let Ok(info) = info(&mut client, false).await
        && info.credentials_source != pb::CredentialsSource::CredentialsFile as i32
    {
        let why = if info.credentials_error.is_empty() {
            format!(
                "its key comes from its {}",
                source_name(info.credentials_source)
            )
        } else {
            info.credentials_error.clone()
        };
        writeln!(
            io.err,
            "agent: note: the running agentd does not use this key: {why}"
        )
        .map_err(out_err)?;
    }
    if !check {
        return Ok(Exit::Ok);
    }
    let answer = doctor::model_check(&info(&mut client, true).await?);
    line(io, &answer.text())?;
    Ok(if answer.ok { Exit::Ok } else { Exit::Error })
}

/// `agent logout`: removes the key from the daemon's credentials file.
pub async fn logout(
    target: &Target,
    provider: Option<Provider>,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let LoginTarget { path, provider, .. } = credentials_target(target, provider, false).await?;
    if credentials::remove(&path, provider)? {
        line(
            io,
            &format!(
                "removed the {} key from {}",
                provider.table(),
                path.display()
            ),
        )?;
    } else {
        line(
            io,
            &format!("no {} key in {}", provider.table(), path.display()),
        )?;
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn captured() -> (Io, crate::io::Captured) {
        let (_tx, lines) = tokio::sync::mpsc::channel(1);
        let (_itx, interrupts) = tokio::sync::mpsc::channel(1);
        Io::captured(lines, false, interrupts)
    }
    #[test]
    fn the_socket_flag_is_found_before_parsing() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            socket_from_args(&args(&["agent", "--socket", "/s", "--version"])),
            Some(PathBuf::from("/s"))
        );
        assert_eq!(
            socket_from_args(&args(&["agent", "--socket=/t", "-V"])),
            Some(PathBuf::from("/t"))
        );
    }

    #[tokio::test]
    async fn version_does_not_wait_for_a_daemon_that_is_not_there() {
        let dir = tempfile::tempdir().unwrap();
        let (mut io, out) = captured();
        let started = std::time::Instant::now();
        version(Some(&dir.path().join("none.sock")), &mut io)
            .await
            .unwrap();
        assert!(started.elapsed() < VERSION_WAIT + Duration::from_secs(1));
        assert_eq!(
            out.out.text(),
            format!("agent {VERSION}\ndaemon: not running\n")
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(4_000), "4 s");
        assert_eq!(duration(184_000), "3 m 4 s");
        assert_eq!(duration(7_380_000), "2 h 3 m");
    }
}
