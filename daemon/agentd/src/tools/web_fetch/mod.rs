//! `web_fetch`: a web page (HTTP(S) GET) as Markdown, other text as it is.
//!
//! The permission to fetch is the policy's (a host no rule allows asks,
//! `agentd_core::permission`); what is refused whatever anyone answers is
//! decided here: an address on the machine or a private network unless a
//! rule names the host (`address.rs`, checked on every hop and connected
//! to as checked, `fetch.rs`), a binary body (`text.rs`), more than
//! [`fetch::MAX_REDIRECTS`] redirects, a download beyond `[web]
//! fetch_max_bytes` (cut, and said) or `fetch_timeout_secs`. Pages are kept
//! for `[web] cache_secs` (`cache.rs`); the result is cut to the tool
//! budget with the marker every tool uses.

mod address;
mod cache;
mod fetch;
mod text;

use std::sync::Arc;
use std::time::Duration;

use agentd_core::tools::Tool;
use agentd_core::{Rule, ToolSpec};
use reqwest::Url;
use serde::Deserialize;
use serde_json::{Value, json};

pub(crate) use cache::PageCache;
use fetch::Fetched;

use super::{ToolContext, ToolError, ToolOutput, input, one_line};

/// What `web_fetch` runs with besides its input: the daemon's page cache,
/// the `[web]` limits and the conversation's permission rules (a rule that
/// names a host lets it resolve to a private address, and a redirect to
/// another host be followed).
#[derive(Debug, Clone)]
pub(crate) struct WebAccess {
    pub cache: Arc<PageCache>,
    pub timeout: Duration,
    pub max_bytes: u64,
    pub cache_ttl: Duration,
    pub rules: Arc<[Rule]>,
}

impl WebAccess {
    pub(crate) fn new(
        cache: Arc<PageCache>,
        web: &crate::config::WebSection,
        rules: &[Rule],
    ) -> Self {
        WebAccess {
            cache,
            timeout: Duration::from_secs(web.fetch_timeout_secs),
            max_bytes: web.fetch_max_bytes,
            cache_ttl: Duration::from_secs(web.cache_secs),
            rules: rules
                .iter()
                .filter(|r| r.tool == Tool::WebFetch.name())
                .cloned()
                .collect(),
        }
    }
}

impl Default for WebAccess {
    fn default() -> Self {
        WebAccess::new(Arc::default(), &crate::config::WebSection::default(), &[])
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    url: String,
    max_bytes: Option<u64>,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The http:// or https:// URL to read"},
            "max_bytes": {"type": "integer", "description": "Most bytes of the page to return (default and upper bound: the tool output budget)"}
        },
        "required": ["url"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::WebFetch.name().to_string(),
        description: "Read a web page: HTTP(S) GET of `url`, returned as Markdown (HTML) or as \
                      text (plain text, JSON, source files). Binary content (images, PDFs, \
                      archives) is refused. Redirects to another host are not followed: the \
                      result names the new URL, fetch it to read it. Addresses on this machine \
                      or a private network are refused unless the user allowed that host."
            .to_string(),
        input_schema: schema(),
    }
}

/// The call's line: the tool and its URL.
pub(super) fn summary(tool: Tool, input: &Value) -> Option<String> {
    let url = input.get("url").and_then(Value::as_str)?;
    Some(format!("{tool} {}", one_line(url, 100)))
}

pub(crate) async fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let name = Tool::WebFetch.name();
    let input: Input = input::parse(name, &schema(), input)?;
    let url = Url::parse(input.url.trim())
        .map_err(|e| ToolError::new(format!("{name}: `{}` is not a URL: {e}", input.url)))?;
    // The host the permission was judged on is the input's, as written.
    let host = fetch::checked_host(&url).map_err(|e| ToolError::new(format!("{name}: {e}")))?;
    if agentd_core::permission::url_host(&input.url).as_deref() != Some(host.as_str()) {
        return Err(ToolError::new(format!(
            "{name}: {}",
            fetch::ambiguous(&input.url)
        )));
    }
    let web = &ctx.web;
    let key = url.to_string();
    let page = match web.cache.get(&key, web.cache_ttl) {
        Some(page) => page,
        None => {
            let download =
                tokio::time::timeout(web.timeout, fetch::fetch(url, &web.rules, web.max_bytes));
            let fetched = tokio::select! {
                done = download => done.map_err(|_| ToolError::new(format!(
                    "{name}: {key} took longer than {} s ([web] fetch_timeout_secs)",
                    web.timeout.as_secs()
                )))?,
                () = ctx.cancel.cancelled() => return Ok(super::cancelled_output()),
            };
            match fetched.map_err(|e| ToolError::new(format!("{name}: {e}")))? {
                Fetched::Page(page) => {
                    web.cache.put(&key, page.clone(), web.cache_ttl);
                    page
                }
                Fetched::Moved(to) => {
                    return Ok(ToolOutput::ok(
                        format!(
                            "{key} redirects to {to}, on another host. To read it, call \
                             {name} with that URL."
                        ),
                        format!("redirects to {}", one_line(&to, 80)),
                    ));
                }
            }
        }
    };
    let budget = input
        .max_bytes
        .and_then(|b| usize::try_from(b).ok())
        .unwrap_or(usize::MAX)
        .min(ctx.limits.content_budget());
    Ok(render(&page, budget, web.max_bytes))
}

/// The result: where the page came from, its type, its text within
/// `budget` bytes.
fn render(page: &cache::Page, budget: usize, max_bytes: u64) -> ToolOutput {
    let mut head = format!("URL: {}\n", page.url);
    if !page.content_type.is_empty() {
        head.push_str(&format!("Content-Type: {}\n", page.content_type));
    }
    if page.cut {
        head.push_str(&format!(
            "[only the first {max_bytes} bytes of the page were downloaded ([web] fetch_max_bytes)]\n"
        ));
    }
    head.push('\n');
    let text = crate::truncate::truncate(&page.text, budget.saturating_sub(head.len()).max(1));
    let summary = format!("{} bytes from {}", page.text.len(), one_line(&page.url, 80));
    ToolOutput::ok(format!("{head}{text}"), summary)
}

#[cfg(test)]
mod tests;
