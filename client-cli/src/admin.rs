//! Looking after the daemon rather than talking to a conversation: `agent
//! login|logout|doctor`, `agent daemon stop|restart|status|logs`, `agent
//! --version`, and the packaging helpers `agent completions` and `agent man`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_proto::v1 as pb;
use serde_json::json;

use crate::cli::{Cli, DaemonCommand};
use crate::connect::{Client, connect, connect_or_start, daemon_binary, start_daemon};
use crate::credentials::{self, Provider};
use crate::error::{CliError, Exit};
use crate::io::Io;

/// The client's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How long `agent --version` waits for a daemon's answer.
const VERSION_WAIT: Duration = Duration::from_secs(2);
/// How long `agent daemon stop` waits for the daemon to exit.
const STOP_WAIT: Duration = Duration::from_secs(30);

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

/// The credentials file and provider to use: the running daemon's, else
/// those a daemon started from this environment would use.
async fn credentials_target(
    target: &Target,
    provider: Option<Provider>,
) -> Result<(PathBuf, Provider, Option<Client>), CliError> {
    let env = |k: &str| std::env::var(k).ok();
    let daemon = running(target).await;
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
    let provider = provider.unwrap_or_else(|| match &daemon {
        Some((_, i)) => Provider::from_name(&i.provider).unwrap_or(Provider::Anthropic),
        None => credentials::configured_provider(credentials::config_file(&env).as_deref()),
    });
    Ok((path, provider, daemon.map(|(c, _)| c)))
}

/// `agent login`: reads a key (no echo at a terminal, else all of stdin)
/// and stores it in the daemon's credentials file.
pub async fn login(
    target: &Target,
    provider: Option<Provider>,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let (path, provider, client) = credentials_target(target, provider).await?;
    let raw = if io.input.is_terminal() {
        rpassword::prompt_password(format!("{} API key (not echoed): ", provider.table()))
            .map_err(|e| CliError::io("reading the key from the terminal", e))?
    } else {
        io.input
            .read_to_string()
            .await
            .map_err(|e| CliError::io("reading the key from stdin", e))?
    };
    let key = credentials::clean_key(&raw)?;
    credentials::store(&path, provider, &key)?;
    line(
        io,
        &format!(
            "stored the {} key in {} (mode 0600); agentd uses it from its next request",
            provider.table(),
            path.display()
        ),
    )?;
    // Say so when the daemon will not use it: a key in its config file
    // comes first.
    if let Some(mut client) = client
        && let Ok(info) = info(&mut client, false).await
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
    Ok(Exit::Ok)
}

/// `agent logout`: removes the key from the daemon's credentials file.
pub async fn logout(
    target: &Target,
    provider: Option<Provider>,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let (path, provider, _) = credentials_target(target, provider).await?;
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

// ---- doctor ----

/// One line of `agent doctor`.
struct Check {
    ok: bool,
    what: &'static str,
    detail: String,
}

impl Check {
    fn ok(what: &'static str, detail: impl Into<String>) -> Check {
        Check {
            ok: true,
            what,
            detail: detail.into(),
        }
    }
    fn fail(what: &'static str, detail: impl Into<String>) -> Check {
        Check {
            ok: false,
            what,
            detail: detail.into(),
        }
    }
}

/// `agent doctor`: checks each part and says ok or fail, with the reason.
/// Exits 1 when anything failed. Never shows a key.
pub async fn doctor(target: &Target, io: &mut Io) -> Result<Exit, CliError> {
    let mut checks = vec![Check::ok("agent", format!("version {VERSION}"))];
    let connected = connect_or_start(&target.socket, target.pass_socket, target.autostart).await;
    let daemon = match connected {
        Ok(mut client) => info(&mut client, true).await,
        Err(e) => Err(e),
    };
    match daemon {
        // Every connection error names the socket already.
        Err(e) => checks.push(Check::fail("agentd", e.to_string())),
        Ok(info) => daemon_checks(&info, &mut checks),
    }
    let failed = checks.iter().any(|c| !c.ok);
    if target.json {
        let lines: Vec<_> = checks
            .iter()
            .map(|c| json!({"check": c.what, "ok": c.ok, "detail": c.detail}))
            .collect();
        line(io, &json!({"ok": !failed, "checks": lines}).to_string())?;
    } else {
        for c in &checks {
            let mark = if c.ok { "ok  " } else { "FAIL" };
            line(io, &format!("{mark} {:<12} {}", c.what, c.detail))?;
        }
    }
    Ok(if failed { Exit::Error } else { Exit::Ok })
}

fn daemon_checks(info: &pb::GetDaemonInfoResponse, checks: &mut Vec<Check>) {
    let differs = if info.version == VERSION {
        String::new()
    } else {
        format!(" (agent is {VERSION}: `agent daemon restart` after an upgrade)")
    };
    checks.push(Check::ok(
        "agentd",
        format!(
            "version {}, pid {}, up {}{differs}",
            info.version,
            info.pid,
            duration(info.uptime_ms)
        ),
    ));
    checks.push(Check::ok("socket", info.socket.clone()));
    checks.push(Check::ok("data dir", info.data_dir.clone()));
    checks.push(if info.config_file.is_empty() {
        Check::ok("config file", "none (defaults)")
    } else if Path::new(&info.config_file).exists() {
        Check::ok("config file", info.config_file.clone())
    } else {
        Check::ok(
            "config file",
            format!("{} (absent: defaults)", info.config_file),
        )
    });
    if !info.log_file.is_empty() {
        checks.push(Check::ok("log", info.log_file.clone()));
    }
    let source = pb::CredentialsSource::try_from(info.credentials_source);
    let where_from = match source {
        Ok(pb::CredentialsSource::ConfigFile) => info.config_file.clone(),
        Ok(pb::CredentialsSource::CredentialsFile) => info.credentials_file.clone(),
        Ok(pb::CredentialsSource::Environment) => {
            let var = Provider::from_name(&info.provider)
                .unwrap_or(Provider::Anthropic)
                .variable();
            format!("{var} in agentd's environment")
        }
        _ => String::new(),
    };
    checks.push(match source {
        _ if !info.credentials_error.is_empty() => {
            Check::fail("credentials", info.credentials_error.clone())
        }
        Ok(pb::CredentialsSource::None) if info.provider == "anthropic" => Check::fail(
            "credentials",
            "none: run `agent login` (no restart needed)".to_string(),
        ),
        Ok(pb::CredentialsSource::None) => {
            Check::ok("credentials", "none (the server needs none?)")
        }
        _ => Check::ok(
            "credentials",
            format!("{} ({where_from})", source_name(info.credentials_source)),
        ),
    });
    let model = format!("{} via {}", info.model, info.provider);
    checks.push(match &info.model_check {
        Some(m) if m.ok => Check::ok(
            "model",
            format!("{model} answers ({} ms): {:?}", m.latency_ms, m.detail),
        ),
        Some(m) => Check::fail("model", format!("{model}: {}", m.detail)),
        None => Check::fail("model", format!("{model}: the daemon did not check it")),
    });
}

// ---- daemon stop|restart|status|logs ----

/// `agent daemon …`.
pub async fn daemon(
    target: &Target,
    command: DaemonCommand,
    io: &mut Io,
) -> Result<Exit, CliError> {
    match command {
        DaemonCommand::Status => status_cmd(target, io).await,
        DaemonCommand::Stop => {
            match running(target).await {
                Some((_, info)) => {
                    stop(&info).await?;
                    line(io, &format!("agentd (pid {}) stopped", info.pid))?;
                }
                None => line(
                    io,
                    &format!("agentd is not running on {}", target.socket.display()),
                )?,
            }
            Ok(Exit::Ok)
        }
        DaemonCommand::Restart => restart(target, io).await,
        DaemonCommand::Logs { follow, lines } => logs(target, follow, lines, io).await,
    }
}

async fn status_cmd(target: &Target, io: &mut Io) -> Result<Exit, CliError> {
    let Some((_, info)) = running(target).await else {
        if target.json {
            line(
                io,
                &json!({"running": false, "socket": target.socket.display().to_string()})
                    .to_string(),
            )?;
        } else {
            line(
                io,
                &format!("agentd is not running on {}", target.socket.display()),
            )?;
        }
        return Ok(Exit::Error);
    };
    if target.json {
        let value = json!({
            "running": true,
            "pid": info.pid,
            "version": info.version,
            "uptime_ms": info.uptime_ms,
            "started_at_ms": info.started_at_ms,
            "socket": info.socket,
            "data_dir": info.data_dir,
            "config_file": info.config_file,
            "log_file": info.log_file,
            "conversations_loaded": info.conversations_loaded,
            "model": info.model,
            "provider": info.provider,
            "credentials": source_name(info.credentials_source),
        });
        line(io, &value.to_string())?;
    } else {
        let rows = [
            ("pid", info.pid.to_string()),
            ("version", info.version.clone()),
            ("uptime", duration(info.uptime_ms)),
            ("socket", info.socket.clone()),
            ("data dir", info.data_dir.clone()),
            (
                "log",
                if info.log_file.is_empty() {
                    "stderr (not a file)".into()
                } else {
                    info.log_file.clone()
                },
            ),
            (
                "loaded",
                format!("{} conversation(s) in memory", info.conversations_loaded),
            ),
            ("model", format!("{} via {}", info.model, info.provider)),
            (
                "credentials",
                source_name(info.credentials_source).to_string(),
            ),
        ];
        for (name, value) in rows {
            line(io, &format!("{name:<12} {value}"))?;
        }
    }
    Ok(Exit::Ok)
}

/// Whether process `pid` is gone (a zombie counts as gone: its parent may
/// not have reaped it yet, but it holds nothing any more).
fn gone(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return true;
    };
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None).is_err() {
        return true;
    }
    // /proc/PID/stat: "pid (comm) S …"; the state follows the last ')'.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Asks the daemon to stop (SIGTERM: it finishes cleanly, records running
/// tools as interrupted, ends its shells, removes its socket) and waits
/// until the process is gone.
async fn stop(info: &pb::GetDaemonInfoResponse) -> Result<(), CliError> {
    let pid = i32::try_from(info.pid)
        .map_err(|_| CliError::Server(format!("the daemon reported pid {}", info.pid)))?;
    if pid <= 1 {
        return Err(CliError::Server(format!("the daemon reported pid {pid}")));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .map_err(|e| CliError::Input(format!("cannot signal agentd (pid {pid}): {e}")))?;
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    while !gone(info.pid) {
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::Input(format!(
                "agentd (pid {pid}) did not stop within {} s; `kill -9 {pid}` ends it",
                STOP_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Stops the daemon and starts it again the way it was started (same
/// executable and arguments; this terminal's environment minus its keys,
/// as autostart does).
async fn restart(target: &Target, io: &mut Io) -> Result<Exit, CliError> {
    let previous = running(target).await.map(|(_, info)| info);
    let failed = |why: String| CliError::AutostartFailed {
        socket: target.socket.clone(),
        why,
    };
    let (bin, args) = match &previous {
        Some(info) if !info.executable.is_empty() && Path::new(&info.executable).exists() => {
            (PathBuf::from(&info.executable), info.args.clone())
        }
        _ => {
            let args = if target.pass_socket {
                let socket =
                    std::path::absolute(&target.socket).unwrap_or_else(|_| target.socket.clone());
                vec!["--socket".to_string(), socket.display().to_string()]
            } else {
                Vec::new()
            };
            (daemon_binary().map_err(failed)?, args)
        }
    };
    if let Some(info) = &previous {
        stop(info).await?;
    }
    let mut client = start_daemon(&bin, &args, &target.socket)
        .await
        .map_err(failed)?;
    let now = info(&mut client, false).await?;
    let text = match &previous {
        Some(old) => format!("agentd restarted (pid {} → {})", old.pid, now.pid),
        None => format!("agentd was not running; started it (pid {})", now.pid),
    };
    line(io, &text)?;
    Ok(Exit::Ok)
}

/// The daemon's log file: the one it reports, else `agentd.log` beside the
/// socket (where autostart sends its output).
async fn log_path(target: &Target) -> Option<PathBuf> {
    if let Some((_, info)) = running(target).await
        && !info.log_file.is_empty()
    {
        return Some(PathBuf::from(info.log_file));
    }
    let beside = target.socket.parent()?.join("agentd.log");
    beside.exists().then_some(beside)
}

/// `agent daemon logs [-n N] [-f]`.
async fn logs(target: &Target, follow: bool, lines: usize, io: &mut Io) -> Result<Exit, CliError> {
    let Some(path) = log_path(target).await else {
        return Err(CliError::Input(format!(
            "no daemon log: agentd is not running on {} with its output in a file, and there is no agentd.log beside the socket (a daemon started by hand logs to its stderr; under systemd: `journalctl --user -u agentd`)",
            target.socket.display()
        )));
    };
    let read_err = |e| CliError::io(format!("cannot read {}", path.display()), e);
    let mut file = std::fs::File::open(&path).map_err(read_err)?;
    let mut text = Vec::new();
    file.read_to_end(&mut text).map_err(read_err)?;
    let start = tail_start(&text, lines);
    io.out.write_all(&text[start..]).map_err(out_err)?;
    io.out.flush().map_err(out_err)?;
    if !follow {
        return Ok(Exit::Ok);
    }
    let mut offset = u64::try_from(text.len()).unwrap_or(u64::MAX);
    let mut chunk = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len < offset {
            // Truncated or replaced: start over from its beginning.
            file = std::fs::File::open(&path).map_err(read_err)?;
            offset = 0;
        }
        file.seek(SeekFrom::Start(offset)).map_err(read_err)?;
        chunk.clear();
        file.read_to_end(&mut chunk).map_err(read_err)?;
        if !chunk.is_empty() {
            offset += u64::try_from(chunk.len()).unwrap_or(0);
            io.out.write_all(&chunk).map_err(out_err)?;
            io.out.flush().map_err(out_err)?;
        }
    }
}

/// Where the last `lines` lines of `text` begin.
fn tail_start(text: &[u8], lines: usize) -> usize {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == lines {
                return i + 1;
            }
        }
    }
    0
}

// ---- completions and man pages ----

/// `agent completions SHELL`: the completion script on stdout.
pub fn completions(shell: clap_complete::Shell, io: &mut Io) -> Result<Exit, CliError> {
    let mut command = whole_command();
    clap_complete::generate(shell, &mut command, "agent", &mut io.out);
    io.out.flush().map_err(out_err)?;
    Ok(Exit::Ok)
}

/// `agent man [--out DIR]`: `agent.1` on stdout, or every page (`agent.1`,
/// `agent-run.1`, `agent-daemon-stop.1`, …) written into DIR.
pub fn man(out: Option<PathBuf>, io: &mut Io) -> Result<Exit, CliError> {
    let command = whole_command();
    match out {
        None => {
            clap_mangen::Man::new(command)
                .render(&mut io.out)
                .map_err(out_err)?;
            io.out.flush().map_err(out_err)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| CliError::io(format!("cannot create {}", dir.display()), e))?;
            let mut written = Vec::new();
            write_pages(command, &dir, &mut written)?;
            for path in &written {
                line(io, &path.display().to_string())?;
            }
        }
    }
    Ok(Exit::Ok)
}

/// Every command, argument and subcommand, built, as completions and man
/// pages show them. The subcommands' own parts are made when the tree is
/// built (`defer` in [`crate::cli::Command`]), after clap has copied the
/// tree under `help` (for `agent help daemon stop`): their subcommands are
/// added to that copy here.
fn whole_command() -> clap::Command {
    let mut command = Cli::documented_command();
    command.build();
    let nested: Vec<(String, Vec<clap::Command>)> = command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help" && sub.has_subcommands())
        .map(|sub| {
            let under = format!("{} help {}", command.get_name(), sub.get_name());
            let copies = help_copies(sub, &under);
            (sub.get_name().to_string(), copies)
        })
        .collect();
    // In place, in clap's order; a copy that is not there is left alone.
    command.mut_subcommands(|sub| {
        if sub.get_name() != "help" {
            return sub;
        }
        sub.mut_subcommands(|copy| {
            match nested.iter().find(|(name, _)| name == copy.get_name()) {
                // Only where clap copied none (they did not exist yet).
                Some((_, copies)) if !copy.has_subcommands() => copy.subcommands(copies.clone()),
                _ => copy,
            }
        })
    })
}

/// The subcommands of `command` as clap copies them under `help`: name,
/// description and subcommands, no arguments, no `help` of their own;
/// `under` is their parent's command line.
fn help_copies(command: &clap::Command, under: &str) -> Vec<clap::Command> {
    command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help")
        .map(|sub| {
            let bin_name = format!("{under} {}", sub.get_name());
            let mut copy = clap::Command::new(sub.get_name().to_string())
                .hide(sub.is_hide_set())
                .disable_help_flag(true)
                .disable_version_flag(true)
                .disable_help_subcommand(true)
                .subcommands(help_copies(sub, &bin_name))
                .bin_name(bin_name);
            if let Some(about) = sub.get_about() {
                copy = copy.about(about.clone());
            }
            copy
        })
        .collect()
}

/// Writes the page of `command` and of each subcommand, depth first.
fn write_pages(
    command: clap::Command,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), CliError> {
    let mut command = command;
    command.build();
    let name = command
        .get_display_name()
        .unwrap_or(command.get_name())
        .to_string();
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone())
        .render(&mut page)
        .map_err(out_err)?;
    std::fs::write(&path, page)
        .map_err(|e| CliError::io(format!("cannot write {}", path.display()), e))?;
    written.push(path);
    for sub in command.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub.clone(), dir, written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured() -> (Io, crate::io::Captured) {
        let (_tx, lines) = tokio::sync::mpsc::channel(1);
        let (_itx, interrupts) = tokio::sync::mpsc::channel(1);
        Io::captured(lines, false, interrupts)
    }

    /// Every shell's script names the subcommands and their arguments, and
    /// knows the tree under `help` (`agent help budget raise`): the
    /// subcommands' own parts are built late (`defer`), after clap copies
    /// the tree under `help`.
    #[test]
    fn completions_know_every_subcommand_its_arguments_and_help() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
            clap_complete::Shell::Elvish,
            clap_complete::Shell::PowerShell,
        ] {
            let (mut io, out) = captured();
            completions(shell, &mut io).unwrap();
            let text = out.out.text();
            let under_help = match shell {
                clap_complete::Shell::Bash => "agent__subcmd__help__subcmd__budget__subcmd__raise",
                clap_complete::Shell::Zsh => {
                    "_agent__subcmd__help__subcmd__budget__subcmd__raise_commands"
                }
                clap_complete::Shell::Fish => {
                    "__fish_agent_using_subcommand help; and __fish_seen_subcommand_from budget\" -f -a \"raise\""
                }
                _ => "'agent;help;budget;raise'",
            };
            let expected = ["run", "attach", "doctor", "login", "daemon"]
                .into_iter()
                .chain(["steps-file", "drop-all", "add-dir"])
                .chain([under_help]);
            for word in expected {
                assert!(text.contains(word), "{shell:?} lacks {word}:\n{text}");
            }
        }
    }

    #[test]
    fn man_pages_cover_every_subcommand() {
        let (mut io, out) = captured();
        man(None, &mut io).unwrap();
        let page = out.out.text();
        assert!(page.contains(".TH"), "{page}");
        assert!(page.contains("doctor") && page.contains("login"), "{page}");

        let dir = tempfile::tempdir().unwrap();
        let (mut io, out) = captured();
        man(Some(dir.path().to_path_buf()), &mut io).unwrap();
        for name in [
            "agent.1",
            "agent-run.1",
            "agent-daemon-stop.1",
            "agent-shells-kill.1",
            "agent-login.1",
        ] {
            let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert!(!text.is_empty(), "{name}");
            assert!(out.out.text().contains(name), "{name} not listed");
        }
        let run = std::fs::read_to_string(dir.path().join("agent-run.1")).unwrap();
        assert!(run.contains("PROMPT"), "{run}");
        // Each page says what its subcommand does (the variant's doc comment,
        // not the doc comment of the type holding its arguments).
        for (name, says) in [
            ("agent-run.1", "Start a new conversation with PROMPT"),
            ("agent-shells.1", "List background shells"),
            ("agent-budget.1", "Answer a budget that holds"),
            ("agent-daemon.1", "Stop, restart or inspect the daemon"),
        ] {
            let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert!(text.contains(says), "{name} does not say {says:?}:\n{text}");
        }
    }

    #[test]
    fn the_last_lines_of_a_log() {
        assert_eq!(tail_start(b"a\nb\nc\n", 2), 2);
        assert_eq!(tail_start(b"a\nb\nc", 2), 2);
        assert_eq!(tail_start(b"a\nb\n", 5), 0);
        assert_eq!(tail_start(b"", 3), 0);
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
