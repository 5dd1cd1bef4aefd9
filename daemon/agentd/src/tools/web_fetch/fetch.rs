//! One `web_fetch` download: each hop's host read the same way the
//! permission rules read it, resolved once, every address it resolves to
//! checked (no private, loopback or link-local address unless a rule names
//! the host), and the connection made to the address checked, so a DNS
//! answer that changes between the check and the connection (rebinding)
//! cannot move it. Redirects are followed by hand, a few, each hop checked
//! again; one to another host is followed only when a rule allows that
//! host, else the model is told where the page went.

use std::net::{IpAddr, SocketAddr};

use agentd_core::Rule;
use reqwest::Url;

use super::address::non_public;
use super::cache::Page;
use super::text::{BodyKind, body_kind, to_text};

/// Redirects one fetch follows.
pub(super) const MAX_REDIRECTS: usize = 5;

/// What a fetch came to.
#[derive(Debug)]
pub(super) enum Fetched {
    Page(Page),
    /// The page moved to another host that no rule allows: its URL.
    Moved(String),
}

/// The host of `url` as the rules read it, when the URL parser agrees.
pub(super) fn checked_host(url: &Url) -> Result<String, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{url}: only http and https URLs can be fetched"));
    }
    let ours = agentd_core::permission::url_host(url.as_str());
    let parsed = url
        .host_str()
        .map(|h| h.trim_end_matches('.').to_ascii_lowercase());
    match (ours, parsed) {
        (Some(ours), Some(parsed)) if ours == parsed => Ok(ours),
        _ => Err(ambiguous(url.as_str())),
    }
}

/// Why a URL whose host the rules and the URL parser read differently is
/// refused.
pub(super) fn ambiguous(url: &str) -> String {
    format!(
        "{url}: the host cannot be read unambiguously (write a non-ASCII host in its punycode \
         form, without percent-encoding)"
    )
}

/// Downloads `url`, following redirects; `host` is the call's host (the
/// one the permission was for), `rules` the conversation's.
pub(super) async fn fetch(url: Url, rules: &[Rule], max_bytes: u64) -> Result<Fetched, String> {
    let first_host = checked_host(&url)?;
    let mut url = url;
    for hop in 0..=MAX_REDIRECTS {
        let host = checked_host(&url)?;
        if host != first_host && !agentd_core::permission::rules_name_host(rules, &host) {
            return Ok(Fetched::Moved(url.to_string()));
        }
        let address = address(&url, &host, rules).await?;
        let response = client(&host, address)?
            .get(url.clone())
            .header(
                reqwest::header::ACCEPT,
                "text/html, text/markdown, text/plain;q=0.9, */*;q=0.5",
            )
            .send()
            .await
            .map_err(|e| format!("{url}: {}", error_chain(&e)))?;
        let status = response.status();
        if status.is_redirection() {
            let Some(location) = response.headers().get(reqwest::header::LOCATION) else {
                return Err(format!("{url} answered {status} without a Location"));
            };
            let location = location.to_str().unwrap_or_default();
            url = url
                .join(location)
                .map_err(|e| format!("{url} redirects to `{location}`, not a URL: {e}"))?;
            if hop == MAX_REDIRECTS {
                break;
            }
            continue;
        }
        if !status.is_success() {
            return Err(format!("{url} answered HTTP {status}"));
        }
        return read_page(url, response, max_bytes).await.map(Fetched::Page);
    }
    Err(format!(
        "more than {MAX_REDIRECTS} redirects; the last went to {url}"
    ))
}

/// The address to connect to for `url`: its host resolved (or the IP
/// address it is), every address checked.
async fn address(url: &Url, host: &str, rules: &[Rule]) -> Result<SocketAddr, String> {
    let port = url.port_or_known_default().unwrap_or(443);
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    let addresses: Vec<SocketAddr> = match literal {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .collect(),
    };
    let named = agentd_core::permission::rules_name_host(rules, host);
    for a in &addresses {
        if let Some(kind) = non_public(a.ip()).filter(|_| !named) {
            return Err(format!(
                "refused: {host} is {}{}, a {kind} address; web_fetch reaches private, loopback \
                 and link-local addresses only for a host a rule names: allow \
                 web_fetch(domain:{host})",
                if literal.is_some() { "" } else { "at " },
                a.ip()
            ));
        }
    }
    addresses
        .first()
        .copied()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

/// A client that connects to `address` for `host`, follows no redirect
/// and uses no proxy (a proxy would resolve the host itself).
fn client(host: &str, address: SocketAddr) -> Result<reqwest::Client, String> {
    let builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!(
            "agentd/",
            env!("CARGO_PKG_VERSION"),
            " (web_fetch)"
        ));
    let builder = if host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
        builder
    } else {
        builder.resolve(host, address)
    };
    builder
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// Reads at most `max_bytes` of the body and turns it into text.
async fn read_page(
    url: Url,
    mut response: reqwest::Response,
    max_bytes: u64,
) -> Result<Page, String> {
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    let mut body: Vec<u8> = Vec::new();
    let mut cut = false;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("{url}: reading the page: {}", error_chain(&e)))?
    {
        if kind_of(&content_type, &body, &chunk) == BodyKind::Binary {
            break;
        }
        let room = cap.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            cut = true;
            break;
        }
    }
    let kind = body_kind(&content_type, &body);
    if kind == BodyKind::Binary {
        let shown = if content_type.is_empty() {
            "no Content-Type"
        } else {
            &content_type
        };
        return Err(format!(
            "{url} is binary content ({shown}); web_fetch returns web pages and text only"
        ));
    }
    let text = crate::tasks::spawn_blocking("web_fetch convert", move || to_text(kind, &body))
        .await
        .map_err(|_| "the page could not be converted".to_string())??;
    Ok(Page {
        url: url.to_string(),
        content_type,
        text,
        cut,
    })
}

/// The kind of the body once `chunk` follows `body`, judged on the first
/// chunk only (a binary file is not downloaded whole to be refused).
fn kind_of(content_type: &str, body: &[u8], chunk: &[u8]) -> BodyKind {
    if body.is_empty() {
        body_kind(content_type, chunk)
    } else {
        BodyKind::Text
    }
}

/// An error with its causes, which say what went wrong (`connection
/// refused`), where reqwest's own line says only that it did.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
