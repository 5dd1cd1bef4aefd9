//! The OS sandbox as the permission model sees it: whether a bash command
//! will run confined (a fact the daemon fills into the policy), what the
//! `auto` mode allows because of it, what always asks (leaving the
//! sandbox), which commands need the network, and the hint a command that
//! the sandbox stopped gets.

use serde::{Deserialize, Serialize};

use super::parts::Part;
use super::shell::{self, Word};
use super::{Mode, Policy, input_str};
use crate::message::ToolCall;
use crate::tools::{Subject, Tool};

/// How the daemon confines a conversation's bash commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sandboxed {
    /// Whether a confined command may use the network.
    pub network: bool,
}

/// How a permission request to run a command outside the sandbox starts;
/// the model's justification follows.
pub const RUN_UNSANDBOXED: &str = "run unsandboxed";

/// Commands known to need the network, by program and (when not any use)
/// the subcommands that do.
const NETWORK: &[(&str, &[&str])] = &[
    ("curl", &[]),
    ("wget", &[]),
    ("ssh", &[]),
    ("scp", &[]),
    ("sftp", &[]),
    ("rsync", &[]),
    ("nc", &[]),
    ("ncat", &[]),
    ("telnet", &[]),
    ("ftp", &[]),
    ("git", &["clone", "fetch", "pull", "push", "ls-remote"]),
    ("npm", &["install", "i", "ci", "add", "update", "publish"]),
    ("pnpm", &["install", "i", "add", "update", "publish"]),
    ("yarn", &["install", "add", "upgrade", "publish"]),
    ("bun", &["install", "add"]),
    ("pip", &["install", "download"]),
    ("pip3", &["install", "download"]),
    (
        "cargo",
        &["install", "fetch", "update", "publish", "search", "add"],
    ),
    ("go", &["get", "install"]),
    ("apt", &["install", "update"]),
    ("apt-get", &["install", "update"]),
    ("gem", &["install"]),
    ("docker", &["pull", "push"]),
];

/// Whether the simple command `words` is one [`NETWORK`] names: its
/// program by file name (`/usr/bin/curl` is `curl`), its subcommand the
/// first later word that is no option.
fn needs_network_words(words: &[Word]) -> bool {
    let Some(program) = words.first().and_then(|w| w.literal.as_deref()) else {
        return false;
    };
    let program = program.rsplit('/').next().unwrap_or(program);
    let Some((_, subcommands)) = NETWORK.iter().find(|(name, _)| *name == program) else {
        return false;
    };
    if subcommands.is_empty() {
        return true;
    }
    words[1..]
        .iter()
        .filter_map(|w| w.literal.as_deref())
        .find(|w| !w.starts_with('-'))
        .is_some_and(|sub| subcommands.contains(&sub))
}

/// Whether the bash line `command` runs a command known to need the
/// network (itself or through another: `sudo curl`, `sh -c 'curl …'`).
/// The daemon lets such a command, once allowed, reach the network from
/// inside the sandbox; a line that does not read needs none.
pub fn needs_network(command: &str) -> bool {
    shell::parse(command).is_ok_and(|script| {
        script
            .commands
            .iter()
            .chain(&script.wrapped)
            .any(|words| needs_network_words(words))
    })
}

/// Whether `call` asks to run outside the sandbox (`sandbox: "off"`).
fn leaves_sandbox(call: &ToolCall) -> bool {
    input_str(call, "sandbox") == Some("off")
}

fn is_command_line(call: &ToolCall) -> bool {
    Tool::from_name(&call.name).map(Tool::subject) == Some(Subject::CommandLine)
}

impl Policy {
    /// Whether `call` is a command that `auto` mode runs without asking:
    /// one that will run inside the sandbox.
    pub(super) fn runs_sandboxed_unasked(&self, call: &ToolCall) -> bool {
        self.mode == Mode::Auto
            && self.sandbox.is_some()
            && is_command_line(call)
            && !leaves_sandbox(call)
    }

    /// What the sandbox makes `call` (cut into `parts`) ask, whatever the
    /// rules allow: leaving the sandbox always asks, with the model's
    /// reason; in `auto` mode without the network, a command known to need
    /// it asks. Bypass mode asks nothing.
    pub(super) fn sandbox_asks(&self, call: &ToolCall, parts: &[Part]) -> Vec<String> {
        let Some(sandboxed) = self.sandbox else {
            return Vec::new();
        };
        if self.mode == Mode::Bypass || !is_command_line(call) {
            return Vec::new();
        }
        if leaves_sandbox(call) {
            let reason = input_str(call, "justification")
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map_or_else(
                    || format!("{RUN_UNSANDBOXED} (no reason given)"),
                    |r| format!("{RUN_UNSANDBOXED}: {r}"),
                );
            return vec![reason];
        }
        if self.mode != Mode::Auto || sandboxed.network {
            return Vec::new();
        }
        let mut asks: Vec<String> = Vec::new();
        for part in parts {
            let inner = match part {
                Part::Wrapped(inner) => inner.as_ref(),
                other => other,
            };
            if let Part::Command(words) = inner
                && needs_network_words(words)
            {
                let ask = format!("{inner} needs the network, which the sandbox cuts off");
                if !asks.contains(&ask) {
                    asks.push(ask);
                }
            }
        }
        asks
    }
}

/// What a failed command that ran inside the sandbox gets appended when its
/// output looks like the sandbox stopped it (a permission error, a name
/// that does not resolve): that it ran confined, and how to ask to run it
/// outside. `network`: whether the sandbox lets the network through.
pub fn sandbox_hint(output: &str, network: bool) -> Option<String> {
    const SIGNS: [&str; 6] = [
        "Permission denied",
        "Operation not permitted",
        "Read-only file system",
        "Could not resolve host",
        "Temporary failure in name resolution",
        "Network is unreachable",
    ];
    if !SIGNS.iter().any(|sign| output.contains(sign)) {
        return None;
    }
    let net = if network { "" } else { " and has no network" };
    Some(format!(
        "\n[this command ran inside the sandbox: it may write only in the working directories \
         and temporary directories, cannot read agentd's files or credentials such as ~/.ssh{net}. \
         If the sandbox stopped it, run it again with sandbox: \"off\" and a justification; the \
         user is asked]"
    ))
}
