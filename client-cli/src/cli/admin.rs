//! The arguments of the subcommands that look after the daemon rather
//! than a conversation: `daemon`, `token`, `mcp`, `agents`.

use std::path::PathBuf;

use super::{ConnectionArgs, GlobalArgs};
use clap::{Subcommand, ValueEnum};

// `agent daemon …`.
#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Stop the daemon cleanly (SIGTERM) and wait until it has exited
    Stop {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
    },
    /// Stop the daemon and start it again with the same executable and arguments
    Restart {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
    },
    /// Pid, version, uptime, socket, data dir, log and loaded conversations
    Status {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
    },
    /// Print the daemon's log (the last N lines), and follow it with -f
    Logs {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Keep printing what the daemon writes (Ctrl-C ends)
        #[arg(long, short = 'f')]
        follow: bool,
        /// How many of the last lines to print first
        #[arg(long, short = 'n', value_name = "N", default_value_t = 100)]
        lines: usize,
    },
}

// `agent token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token; its text is printed once (on stdout), keep it in a
    /// file for `agent --token-file`
    Create {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: ConnectionArgs,
        /// What its holder may do: viewer (sees everything, changes
        /// nothing), approver (also answers permission requests), driver
        /// (also sends messages, cancels, changes settings, ...)
        #[arg(long, value_enum)]
        role: TokenRole,
        /// A name for it, shown to other clients and in the audit trail
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// How long it is valid: e.g. 30m, 12h, 7d (seconds without a
        /// unit) [default: never expires]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        expires: Option<u64>,
        /// Write the token to FILE (created with mode 0600, replacing one
        /// there) instead of printing it
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// List the tokens (never their text), and the listener's address and
    /// certificate fingerprint
    Ls {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
    },
    /// Revoke a token: every later call with it is refused
    Revoke {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Token id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
    },
}

/// A token's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TokenRole {
    Viewer,
    Approver,
    Driver,
}

/// A duration in seconds: a number with an optional unit s, m, h or d.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 90s, 30m, 12h, 7d)"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    match n.checked_mul(scale) {
        Some(0) | None => Err(format!("{text:?} is not a usable duration")),
        Some(secs) => Ok(secs),
    }
}

// `agent mcp …`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// List MCP servers: state (not started / running / crashed), restarts,
    /// last error and tools
    Ls {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
    },
}

// `agent agents …`.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// List the custom sub-agent types a conversation in DIR (default: the
    /// current directory) can spawn: the trusted project's
    /// (.agents/agents/*.md) and yours (<config dir>/agents/*.md), with
    /// their tools, model and problems
    Ls {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// The project directory (default: the current one)
        dir: Option<PathBuf>,
    },
}
