//! `GetDaemonInfo`: what the daemon is, where its files are, which source
//! its API key comes from (never the key), and, when asked, whether the
//! model answers.

use crate::config::ProviderKind;
use crate::llm::LlmRequest;
use crate::llm::credentials::{CredentialsError, Resolved, Source};
use crate::runtime::Manager;
use agent_proto::v1 as pb;
use agentd_core::{ContentBlock, Message};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long the model check waits for an answer.
const MODEL_CHECK_TIMEOUT: Duration = Duration::from_secs(30);
/// A remote caller's model checks are at most one per this long.
pub(super) const MODEL_CHECK_EVERY: Duration = Duration::from_secs(10);

/// Who may have the daemon make a model request with its key, and how
/// often: the local user always; a remote caller only with a driver's
/// token, one check per token per [`MODEL_CHECK_EVERY`] (a viewer could
/// otherwise spend the owner's money).
#[derive(Debug, Default)]
pub(super) struct ModelChecks {
    last: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
}

impl ModelChecks {
    pub(super) fn admit(
        &self,
        who: &super::access::Caller,
        now: Instant,
    ) -> Result<(), tonic::Status> {
        let Some(session) = &who.session else {
            return Ok(());
        };
        super::access::check_role(
            who.role,
            agentd_core::ClientRole::Driver,
            "GetDaemonInfo with check_model (a model request paid by the daemon's owner)",
        )?;
        let Ok(mut last) = self.last.lock() else {
            return Err(tonic::Status::internal(
                "the model check's lock is poisoned",
            ));
        };
        if let Some(at) = last.get(session.token_id()) {
            let since = now.saturating_duration_since(*at);
            if since < MODEL_CHECK_EVERY {
                return Err(tonic::Status::resource_exhausted(format!(
                    "one model check per {} s per token; try again in {} s",
                    MODEL_CHECK_EVERY.as_secs(),
                    (MODEL_CHECK_EVERY - since).as_secs().max(1)
                )));
            }
        }
        last.retain(|_, at| now.saturating_duration_since(*at) < MODEL_CHECK_EVERY);
        last.insert(session.token_id().to_string(), now);
        Ok(())
    }
}

/// The answer to `GetDaemonInfo`.
pub(super) async fn daemon_info(manager: &Manager, check_model: bool) -> pb::GetDaemonInfoResponse {
    let shared = manager.shared();
    let daemon = &shared.daemon;
    let config = &shared.config;
    let resolved = daemon.credentials.as_ref().map(|c| c.resolve());
    let path = |p: Option<&Path>| p.map(|p| p.display().to_string()).unwrap_or_default();
    let credentials = daemon.credentials.as_deref();
    let model_check = if check_model {
        Some(check(manager).await)
    } else {
        None
    };
    pb::GetDaemonInfoResponse {
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        started_at_ms: daemon.started_at_ms,
        uptime_ms: daemon
            .started
            .map(|s| u64::try_from(s.elapsed().as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
        socket: daemon.socket.display().to_string(),
        data_dir: daemon.data_dir.display().to_string(),
        config_file: path(credentials.and_then(|c| c.config_file())),
        credentials_file: path(credentials.and_then(|c| c.credentials_file())),
        credentials_source: source(resolved.as_ref()) as i32,
        credentials_error: match &resolved {
            Some(Err(e)) => e.to_string(),
            _ => String::new(),
        },
        provider: match config.provider {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Openai => "openai",
        }
        .to_string(),
        model: config.model.clone(),
        base_url: shown_url(&config.base_url),
        log_file: path(daemon.log_file.as_deref()),
        conversations_loaded: u32::try_from(manager.loaded().await).unwrap_or(u32::MAX),
        executable: path(daemon.executable.as_deref()),
        args: daemon.args.clone(),
        model_check,
        sandbox: daemon.sandboxes.status(),
    }
}

/// `url` without what may hold a secret: the `user:password@` of its
/// authority and its query (some gateways take a key there).
fn shown_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let scheme = if scheme.is_empty() {
        String::new()
    } else {
        format!("{scheme}://")
    };
    format!("{scheme}{host}{path}")
}

fn source(resolved: Option<&Result<Resolved, CredentialsError>>) -> pb::CredentialsSource {
    match resolved {
        Some(Ok(r)) => match r.source {
            Source::ConfigFile => pb::CredentialsSource::ConfigFile,
            Source::CredentialsFile => pb::CredentialsSource::CredentialsFile,
            Source::Environment => pb::CredentialsSource::Environment,
            Source::None => pb::CredentialsSource::None,
        },
        Some(Err(_)) | None => pb::CredentialsSource::Unspecified,
    }
}

/// Sends the default model a one-line request through the daemon's own
/// provider (so the key is resolved as for any turn).
async fn check(manager: &Manager) -> pb::ModelCheck {
    let shared = manager.shared();
    let request = LlmRequest {
        thinking: None,
        model: shared.config.model.clone(),
        system: Arc::from(""),
        messages: Arc::new(vec![Message::user(
            vec![ContentBlock::text("Reply with the single word OK.")],
            shared.clock.now_ms(),
        )]),
        tools: Arc::new([]),
        max_tokens: 16,
        cache: Default::default(),
        images: Default::default(),
        web_search: None,
    };
    let started = Instant::now();
    let cancel = CancellationToken::new();
    let mut ignore = |_| {};
    let call = shared
        .provider
        .stream(&request, &mut ignore, cancel.clone());
    let result = tokio::time::timeout(MODEL_CHECK_TIMEOUT, call).await;
    let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (ok, detail) = match result {
        Ok(Ok(reply)) => {
            let mut words = Vec::new();
            for block in &reply.content {
                if let ContentBlock::Text { text } = block {
                    words.extend(text.split_whitespace());
                }
            }
            let words = words.join(" ");
            (true, words.chars().take(60).collect())
        }
        Ok(Err(e)) => (false, e.to_string()),
        Err(_) => {
            cancel.cancel();
            (
                false,
                format!("no answer within {} s", MODEL_CHECK_TIMEOUT.as_secs()),
            )
        }
    };
    pb::ModelCheck {
        ok,
        detail,
        latency_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn the_shown_url_holds_no_secret() {
        assert_eq!(
            shown_url("https://api.anthropic.com"),
            "https://api.anthropic.com"
        );
        assert_eq!(
            shown_url("https://me:sk-secret@gw.example/v1?key=sk-2"),
            "https://gw.example/v1"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:8080/v1#x"),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(shown_url("localhost:11434"), "localhost:11434");
    }
}
