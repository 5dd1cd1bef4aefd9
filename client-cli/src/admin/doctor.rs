//! `agent doctor`: each part of the set-up checked, one line each.

use std::path::Path;

use agent_proto::v1 as pb;
use serde_json::json;

use super::{Target, VERSION, duration, info, line, source_name};
use crate::connect::connect_or_start;
use crate::credentials::Provider;
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::markdown::{find_highlighter, probe_highlighter};

/// One line of `agent doctor` (and of `agent login --check`).
pub(super) struct Check {
    pub(super) ok: bool,
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

    /// The line as printed: `ok  ` or `FAIL`, what, and the detail.
    pub(super) fn text(&self) -> String {
        let mark = if self.ok { "ok  " } else { "FAIL" };
        format!("{mark} {:<12} {}", self.what, self.detail)
    }
}

/// `agent doctor`: checks each part and says ok or fail, with the reason.
/// Exits 1 when anything failed. Never shows a key. The model is sent a
/// request (which costs one) only with `check_model`.
pub async fn doctor(target: &Target, check_model: bool, io: &mut Io) -> Result<Exit, CliError> {
    let mut checks = vec![Check::ok("agent", format!("version {VERSION}"))];
    // Starting the highlighter and waiting for its answer blocks.
    checks.push(
        tokio::task::spawn_blocking(highlight_check)
            .await
            .unwrap_or_else(|e| Check::fail("highlighting", e.to_string())),
    );
    let connected = connect_or_start(&target.socket, target.pass_socket, target.autostart).await;
    let daemon = match connected {
        Ok(mut client) => info(&mut client, check_model).await,
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
            line(io, &c.text())?;
        }
    }
    Ok(if failed { Exit::Error } else { Exit::Ok })
}

/// Whether code in replies is coloured, and by which program: not having
/// it is a choice (code shows plain), one that does not work is a failure.
fn highlight_check() -> Check {
    let program = match find_highlighter() {
        Ok(program) => program,
        Err(e) => return Check::ok("highlighting", format!("off, code shows plain: {e}")),
    };
    match probe_highlighter(&program) {
        Ok(took) => Check::ok(
            "highlighting",
            format!(
                "{} (highlighted a line in {} ms)",
                program.display(),
                took.as_millis()
            ),
        ),
        Err(e) => Check::fail("highlighting", format!("{}: {e}", program.display())),
    }
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
    checks.push(if info.base_url.is_empty() {
        Check::ok(
            "endpoint",
            format!("not reported by agentd {}", info.version),
        )
    } else {
        Check::ok(
            "endpoint",
            format!(
                "{} ({}, model {})",
                info.base_url, info.provider, info.model
            ),
        )
    });
    checks.push(model_check(info));
    // A sandbox that is off is no failure: the user may have chosen it;
    // the line says why.
    checks.push(Check::ok(
        "sandbox",
        if info.sandbox.is_empty() {
            format!("not reported by agentd {}", info.version)
        } else {
            info.sandbox.clone()
        },
    ));
}

/// The model line: whether the model answered the daemon's request, or
/// that none was sent and how to send one.
pub(super) fn model_check(info: &pb::GetDaemonInfoResponse) -> Check {
    let model = format!("{} via {}", info.model, info.provider);
    match &info.model_check {
        Some(m) if m.ok => Check::ok(
            "model",
            format!("{model} answers ({} ms): {:?}", m.latency_ms, m.detail),
        ),
        Some(m) => Check::fail("model", format!("{model}: {}", m.detail)),
        None => Check::ok(
            "model",
            format!("{model}: not checked (`agent doctor --model` sends it one tiny request)"),
        ),
    }
}
