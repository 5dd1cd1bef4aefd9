//! `agent token create|ls|revoke` and `agent show --audit`: the remote
//! listener's tokens, and who did what in a conversation.

use std::io::Write;
use std::path::PathBuf;

use agent_proto::v1 as pb;
use serde_json::{Value, json};

use crate::cli::{TokenCommand, TokenRole};
use crate::connect::Client;
use crate::error::{CliError, Exit};
use crate::io::Io;

fn out_err(e: std::io::Error) -> CliError {
    CliError::io("writing output", e)
}

/// A role's name.
pub fn role_name(raw: i32) -> &'static str {
    match pb::ClientRole::try_from(raw) {
        Ok(pb::ClientRole::Viewer) => "viewer",
        Ok(pb::ClientRole::Approver) => "approver",
        Ok(pb::ClientRole::Driver) => "driver",
        Ok(pb::ClientRole::Unspecified) | Err(_) => "?",
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` UTC; "-" for 0 (and for an instant
/// chrono cannot represent).
pub(crate) fn when(ms: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) if ms > 0 => t.format("%Y-%m-%d %H:%M:%S").to_string(),
        _ => "-".to_string(),
    }
}

fn token_json(t: &pb::TokenInfo) -> Value {
    json!({
        "id": t.id,
        "name": t.name,
        "role": role_name(t.role),
        "created_at_ms": t.created_at_ms,
        "expires_at_ms": t.expires_at_ms,
        "revoked_at_ms": t.revoked_at_ms,
        "last_used_at_ms": t.last_used_at_ms,
    })
}

/// The file `agent token create --out FILE` writes: a temporary file
/// beside it (0600) until the token is in it, then renamed over FILE (so a
/// file that was readable by others is replaced, not rewritten).
struct TokenFile {
    path: std::path::PathBuf,
    temp: std::path::PathBuf,
    file: std::fs::File,
}

impl TokenFile {
    fn create(path: &std::path::Path) -> Result<TokenFile, CliError> {
        use std::os::unix::fs::OpenOptionsExt;
        let name = path
            .file_name()
            .ok_or_else(|| CliError::Input(format!("--out {}: not a file name", path.display())))?
            .to_string_lossy();
        let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| CliError::io(format!("cannot create {}", temp.display()), e))?;
        Ok(TokenFile {
            path: path.to_path_buf(),
            temp,
            file,
        })
    }

    fn keep(mut self, secret: &str) -> std::io::Result<()> {
        let written = writeln!(self.file, "{secret}")
            .and_then(|()| self.file.sync_all())
            .and_then(|()| std::fs::rename(&self.temp, &self.path));
        if written.is_err() {
            let _ = std::fs::remove_file(&self.temp);
        }
        written
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        // Not kept (the call failed): nothing is left behind. After a
        // rename there is no temporary file to remove.
        let _ = std::fs::remove_file(&self.temp);
    }
}

/// `agent token …`.
pub async fn token(
    client: Client,
    command: TokenCommand,
    json: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    match command {
        TokenCommand::Create {
            role,
            name,
            expires,
            out,
            ..
        } => {
            create_token(
                client,
                NewToken {
                    role,
                    name,
                    expires,
                    out,
                },
                json,
                io,
            )
            .await?
        }
        TokenCommand::Ls { .. } => list_tokens(client, json, io).await?,
        TokenCommand::Revoke { id, .. } => revoke_token(client, id, json, io).await?,
    }
    Ok(Exit::Ok)
}

/// What `agent token create` asks for.
struct NewToken {
    role: TokenRole,
    name: Option<String>,
    expires: Option<u64>,
    out: Option<PathBuf>,
}

/// `agent token create`: the secret on stdout (or into `--out`), said once.
async fn create_token(
    mut client: Client,
    new: NewToken,
    json: bool,
    io: &mut Io,
) -> Result<(), CliError> {
    let NewToken {
        role,
        name,
        expires,
        out,
    } = new;
    // The file is made (0600) before the token, so a token is
    // never made that cannot be kept.
    let file = out.as_deref().map(TokenFile::create).transpose()?;
    let role = match role {
        TokenRole::Viewer => pb::ClientRole::Viewer,
        TokenRole::Approver => pb::ClientRole::Approver,
        TokenRole::Driver => pb::ClientRole::Driver,
    };
    let response = client
        .create_token(pb::CreateTokenRequest {
            role: role as i32,
            name: name.unwrap_or_default(),
            expires_in_secs: expires.unwrap_or(0),
        })
        .await
        .map_err(CliError::status)?
        .into_inner();
    let token = response.token.unwrap_or_default();
    if let Some(file) = file {
        let path = file.path.clone();
        file.keep(&response.secret).map_err(|e| {
            CliError::Input(format!(
                "token {} was made but cannot be written to {}: {e}; revoke it with `agent token revoke {}`",
                token.id,
                path.display(),
                token.id
            ))
        })?;
        if json {
            let mut value = token_json(&token);
            value["file"] = json!(path.display().to_string());
            writeln!(io.out, "{value}").map_err(out_err)?;
        } else {
            eprintln!(
                "agent: token {} ({}, {}) written to {} (mode 0600); it is shown nowhere else",
                token.id,
                token.name,
                role_name(token.role),
                path.display()
            );
        }
    } else if json {
        let mut value = token_json(&token);
        value["secret"] = json!(response.secret);
        writeln!(io.out, "{value}").map_err(out_err)?;
    } else {
        // The secret alone on stdout, so `> FILE` keeps just it.
        writeln!(io.out, "{}", response.secret).map_err(out_err)?;
        eprintln!(
            "agent: token {} ({}, {}{}) created; it is shown only this once",
            token.id,
            token.name,
            role_name(token.role),
            if token.expires_at_ms > 0 {
                format!(", expires {} UTC", when(token.expires_at_ms))
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// `agent token ls`: where the daemon listens, and every token's state.
async fn list_tokens(mut client: Client, json: bool, io: &mut Io) -> Result<(), CliError> {
    let response = client
        .list_tokens(pb::ListTokensRequest {})
        .await
        .map_err(CliError::status)?
        .into_inner();
    if json {
        let value = json!({
            "tokens": response.tokens.iter().map(token_json).collect::<Vec<_>>(),
            "listen_address": response.listen_address,
            "fingerprint": response.fingerprint,
        });
        writeln!(io.out, "{value}").map_err(out_err)?;
    } else {
        if response.listen_address.is_empty() {
            writeln!(
                io.out,
                "listening: no (start agentd with --listen ADDR:PORT)"
            )
        } else {
            writeln!(
                io.out,
                "listening: {}\nfingerprint: {}",
                response.listen_address, response.fingerprint
            )
        }
        .map_err(out_err)?;
        writeln!(
            io.out,
            "{:<10} {:<20} {:<9} {:<20} {:<20} STATUS",
            "ID", "NAME", "ROLE", "CREATED (UTC)", "LAST USED"
        )
        .map_err(out_err)?;
        let now = crate::commands::now_ms();
        for t in &response.tokens {
            let status = if t.revoked_at_ms > 0 {
                format!("revoked {}", when(t.revoked_at_ms))
            } else if t.expires_at_ms > 0 && t.expires_at_ms <= now {
                format!("expired {}", when(t.expires_at_ms))
            } else if t.expires_at_ms > 0 {
                format!("valid until {}", when(t.expires_at_ms))
            } else {
                "valid".to_string()
            };
            writeln!(
                io.out,
                "{:<10} {:<20} {:<9} {:<20} {:<20} {status}",
                t.id,
                crate::render::one_line(&t.name, 20),
                role_name(t.role),
                when(t.created_at_ms),
                when(t.last_used_at_ms),
            )
            .map_err(out_err)?;
        }
    }
    Ok(())
}

/// `agent token revoke ID`.
async fn revoke_token(
    mut client: Client,
    id: String,
    json: bool,
    io: &mut Io,
) -> Result<(), CliError> {
    let response = client
        .revoke_token(pb::RevokeTokenRequest { id })
        .await
        .map_err(CliError::status)?
        .into_inner();
    let token = response.token.unwrap_or_default();
    if json {
        writeln!(io.out, "{}", token_json(&token)).map_err(out_err)?;
    } else {
        writeln!(io.out, "revoked token {} ({})", token.id, token.name).map_err(out_err)?;
    }
    Ok(())
}

/// Who, as the audit trail names them: `name (role, token T from ADDR)`.
fn who(c: Option<&pb::ClientInfo>) -> String {
    let Some(c) = c else {
        return "?".to_string();
    };
    let mut out = format!("{} ({}", c.name, role_name(c.role));
    if !c.token_name.is_empty() {
        out.push_str(&format!(", token {}", c.token_name));
    }
    if !c.address.is_empty() {
        out.push_str(&format!(" from {}", c.address));
    }
    out.push(')');
    out
}

fn decision_name(raw: i32) -> String {
    pb::PermissionDecision::try_from(raw)
        .map(|d| {
            d.as_str_name()
                .trim_start_matches("PERMISSION_DECISION_")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| raw.to_string())
}

/// `agent show --audit ID`.
pub async fn audit(
    mut client: Client,
    id: String,
    json: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let response = client
        .get_audit(pb::GetAuditRequest {
            conversation_id: id.clone(),
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    use pb::audit_entry::Action;
    for entry in &response.entries {
        if json {
            let client = entry.client.as_ref();
            let mut value = json!({
                "at_ms": entry.at_ms,
                "client": client.map(|c| json!({
                    "name": c.name,
                    "role": role_name(c.role),
                    "token_name": c.token_name,
                    "address": c.address,
                })),
            });
            match &entry.action {
                Some(Action::MessageSent(m)) => {
                    value["action"] = json!("message_sent");
                    value["text"] = json!(m.text);
                    value["queued_id"] = json!(m.queued_id);
                }
                Some(Action::PermissionAnswered(p)) => {
                    value["action"] = json!("permission_answered");
                    value["request_id"] = json!(p.request_id);
                    value["decision"] = json!(decision_name(p.decision));
                    value["tool"] = json!(p.tool);
                    value["summary"] = json!(p.summary);
                }
                None => {}
            }
            writeln!(io.out, "{value}").map_err(out_err)?;
            continue;
        }
        let what = match &entry.action {
            Some(Action::MessageSent(m)) => format!(
                "sent{} {:?}",
                if m.queued_id.is_empty() {
                    String::new()
                } else {
                    format!(" (queued as {})", m.queued_id)
                },
                crate::render::one_line(&m.text, 80)
            ),
            Some(Action::PermissionAnswered(p)) => format!(
                "answered {} {} for {}: {}",
                p.request_id,
                decision_name(p.decision),
                p.tool,
                crate::render::one_line(&p.summary, 80)
            ),
            None => "did something this client does not know".to_string(),
        };
        writeln!(
            io.out,
            "{} UTC  {}  {what}",
            when(entry.at_ms),
            who(entry.client.as_ref())
        )
        .map_err(out_err)?;
    }
    if response.entries.is_empty() && !json {
        writeln!(io.out, "no messages sent or requests answered yet").map_err(out_err)?;
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_in_utc() {
        assert_eq!(when(0), "-");
        assert_eq!(when(1_000), "1970-01-01 00:00:01");
        assert_eq!(when(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(when(1_795_000_000_000), "2026-11-18 11:06:40");
    }

    #[test]
    fn a_client_is_named_with_its_role_token_and_address() {
        let c = pb::ClientInfo {
            name: "al@lap".into(),
            role: pb::ClientRole::Approver as i32,
            token_name: "laptop".into(),
            address: "192.0.2.1:5000".into(),
            ..Default::default()
        };
        assert_eq!(
            who(Some(&c)),
            "al@lap (approver, token laptop from 192.0.2.1:5000)"
        );
        let local = pb::ClientInfo {
            name: "al@box".into(),
            role: pb::ClientRole::Driver as i32,
            ..Default::default()
        };
        assert_eq!(who(Some(&local)), "al@box (driver)");
    }
}
