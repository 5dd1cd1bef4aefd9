//! MCP client: the tools of Model Context Protocol servers, offered to the
//! model as `mcp__SERVER__TOOL`.
//!
//! Servers come from the config file (`[mcp.servers.NAME]`) and from the
//! client that creates a conversation (`agent run --mcp NAME=COMMAND`);
//! both become a [`ServerSpec`], stored with the conversation. The
//! [`Hub`] (`hub/`) owns the connections, through the official SDK
//! (`rmcp`): it starts a server when a conversation that uses it first asks
//! the model, shares one server per (spec, working directory) between
//! conversations, restarts one that crashed (with backoff), picks up tool
//! list changes the server announces, and stops them all with the daemon.
//! `result.rs` turns a tool's result into the text the model gets.
//!
//! The core knows MCP tools only by name and a read-only flag
//! (`agentd_core::tools::Called::Mcp`, `Policy::mcp_read_only`): a tool is
//! read-only only when its server says so *and* the config trusts that
//! server (`trust = true`).

mod hub;
mod result;

pub(crate) use hub::{Hub, ServerInfo};

use serde::Deserialize;
use std::collections::BTreeMap;

pub(crate) use crate::store::persisted::{
    DEFAULT_CALL_TIMEOUT_MS, DEFAULT_STARTUP_TIMEOUT_MS, ServerSpec, Transport,
};

impl ServerSpec {
    /// The transport's name as `agent mcp ls` shows it.
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }

    /// What it runs or where it is, for people.
    pub fn target(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => {
                let mut words = vec![command.clone()];
                words.extend(args.iter().cloned());
                words.join(" ")
            }
            Transport::Http { url, .. } => url.clone(),
        }
    }

    /// Checks what a config file or a client gave.
    pub fn validate(&self) -> Result<(), String> {
        check_name(&self.name)?;
        match &self.transport {
            Transport::Stdio { command, env, .. } => {
                if command.trim().is_empty() {
                    return Err(format!("MCP server `{}`: empty command", self.name));
                }
                if let Some(k) = env.keys().find(|k| k.is_empty() || k.contains(['=', '\0'])) {
                    return Err(format!(
                        "MCP server `{}`: invalid environment variable name {k:?}",
                        self.name
                    ));
                }
            }
            Transport::Http { url, headers } => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "MCP server `{}`: url must start with http:// or https://, got {url:?}",
                        self.name
                    ));
                }
                for (k, v) in headers {
                    if http::HeaderName::try_from(k.as_str()).is_err()
                        || http::HeaderValue::try_from(v.as_str()).is_err()
                    {
                        return Err(format!("MCP server `{}`: invalid header {k:?}", self.name));
                    }
                }
            }
        }
        if self.timeout_ms == 0 || self.startup_timeout_ms == 0 {
            return Err(format!(
                "MCP server `{}`: timeout_ms and startup_timeout_ms must be at least 1",
                self.name
            ));
        }
        Ok(())
    }
}

/// A server name: letters, digits, `-` and `_`, without `__` and not
/// ending in `_`, so that `mcp__NAME__TOOL` splits back unambiguously.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        && !name.contains("__")
        && !name.ends_with('_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid MCP server name {name:?}: use letters, digits, `-` and `_` (not `__`, not a trailing `_`), at most 64"
        ))
    }
}

/// `[mcp]` in the config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct McpSection {
    /// `[mcp.servers.NAME]`.
    pub servers: BTreeMap<String, ServerEntry>,
}

/// `[mcp.servers.NAME]`: `command` (+ `args`, `env`) for stdio, or `url`
/// (+ `headers`) for streamable HTTP.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ServerEntry {
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub url: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub trust: bool,
    pub timeout_ms: Option<u64>,
    pub startup_timeout_ms: Option<u64>,
}

impl McpSection {
    /// The servers, checked.
    pub(crate) fn specs(&self) -> Result<Vec<ServerSpec>, String> {
        let mut out = Vec::new();
        for (name, e) in &self.servers {
            let transport = match (&e.command, &e.url) {
                (Some(command), None) => {
                    if !e.headers.is_empty() {
                        return Err(format!("mcp.servers.{name}: `headers` is for url servers"));
                    }
                    Transport::Stdio {
                        command: command.clone(),
                        args: e.args.clone(),
                        env: e.env.clone(),
                    }
                }
                (None, Some(url)) => {
                    if !e.args.is_empty() || !e.env.is_empty() {
                        return Err(format!(
                            "mcp.servers.{name}: `args` and `env` are for command servers"
                        ));
                    }
                    Transport::Http {
                        url: url.clone(),
                        headers: e.headers.clone(),
                    }
                }
                _ => {
                    return Err(format!(
                        "mcp.servers.{name}: give either `command` (stdio) or `url` (streamable HTTP)"
                    ));
                }
            };
            let spec = ServerSpec {
                name: name.clone(),
                transport,
                trust: e.trust,
                timeout_ms: e.timeout_ms.unwrap_or(DEFAULT_CALL_TIMEOUT_MS),
                startup_timeout_ms: e.startup_timeout_ms.unwrap_or(DEFAULT_STARTUP_TIMEOUT_MS),
            };
            spec.validate()
                .map_err(|e| format!("mcp.servers.{name}: {e}"))?;
            out.push(spec);
        }
        Ok(out)
    }
}

/// The servers a conversation uses: the config's, with those the client
/// gave at creation replacing config servers of the same name.
pub(crate) fn servers_of(config: &[ServerSpec], own: &[ServerSpec]) -> Vec<ServerSpec> {
    let mut out: Vec<ServerSpec> = config
        .iter()
        .filter(|c| !own.iter().any(|o| o.name == c.name))
        .cloned()
        .collect();
    out.extend(own.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> Result<Vec<ServerSpec>, String> {
        #[derive(Deserialize)]
        struct F {
            mcp: McpSection,
        }
        let f: F = toml::from_str(text).map_err(|e| e.to_string())?;
        f.mcp.specs()
    }

    #[test]
    fn config_servers_are_stdio_or_http_and_checked() {
        let specs = section(
            "[mcp.servers.fs]\ncommand = \"mcp-fs\"\nargs = [\"/tmp\"]\nenv = { A = \"1\" }\ntrust = true\n\
             [mcp.servers.gh]\nurl = \"https://example.test/mcp\"\nheaders = { Authorization = \"Bearer x\" }\ntimeout_ms = 5\n",
        )
        .unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].name, "fs");
        assert!(specs[0].trust);
        assert_eq!(specs[0].target(), "mcp-fs /tmp");
        assert_eq!(specs[1].transport_name(), "http");
        assert_eq!(specs[1].timeout_ms, 5);
        assert_eq!(specs[1].startup_timeout_ms, DEFAULT_STARTUP_TIMEOUT_MS);

        for (bad, says) in [
            ("[mcp.servers.x]\n", "either `command`"),
            (
                "[mcp.servers.x]\ncommand = \"a\"\nurl = \"http://a\"\n",
                "either",
            ),
            (
                "[mcp.servers.a__b]\ncommand = \"a\"\n",
                "invalid MCP server name",
            ),
            (
                "[mcp.servers.a_]\ncommand = \"a\"\n",
                "invalid MCP server name",
            ),
            ("[mcp.servers.x]\nurl = \"ftp://a\"\n", "http://"),
            ("[mcp.servers.x]\ncommand = \" \"\n", "empty command"),
            (
                "[mcp.servers.x]\ncommand = \"a\"\ntimeout_ms = 0\n",
                "at least 1",
            ),
            (
                "[mcp.servers.x]\ncommand = \"a\"\nbogus = 1\n",
                "unknown field",
            ),
        ] {
            let err = section(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn a_conversation_server_replaces_the_config_one_of_its_name() {
        let spec = |name: &str, command: &str| ServerSpec {
            name: name.to_string(),
            transport: Transport::Stdio {
                command: command.to_string(),
                args: Vec::new(),
                env: BTreeMap::new(),
            },
            trust: false,
            timeout_ms: 1,
            startup_timeout_ms: 1,
        };
        let all = servers_of(&[spec("a", "x"), spec("b", "y")], &[spec("b", "z")]);
        let targets: Vec<String> = all
            .iter()
            .map(|s| format!("{}={}", s.name, s.target()))
            .collect();
        assert_eq!(targets, ["a=x", "b=z"]);
    }
}
