//! `agent daemon stop|restart|status|logs`: the daemon process itself,
//! found by its pid and its log file.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_proto::v1 as pb;
use serde_json::json;

use super::{Target, duration, info, line, out_err, running, source_name};
use crate::cli::DaemonCommand;
use crate::connect::{daemon_binary, start_daemon};
use crate::error::{CliError, Exit};
use crate::io::Io;

/// How long `agent daemon stop` waits for the daemon to exit.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// `agent daemon …`.
pub async fn daemon(
    target: &Target,
    command: DaemonCommand,
    io: &mut Io,
) -> Result<Exit, CliError> {
    match command {
        DaemonCommand::Status { .. } => status_cmd(target, io).await,
        DaemonCommand::Stop { .. } => {
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
        DaemonCommand::Restart { .. } => restart(target, io).await,
        DaemonCommand::Logs { follow, lines, .. } => logs(target, follow, lines, io).await,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_of_a_log() {
        assert_eq!(tail_start(b"a\nb\nc\n", 2), 2);
        assert_eq!(tail_start(b"a\nb\nc", 2), 2);
        assert_eq!(tail_start(b"a\nb\n", 5), 0);
        assert_eq!(tail_start(b"", 3), 0);
    }
}
