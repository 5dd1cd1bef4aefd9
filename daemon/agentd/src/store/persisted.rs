//! The records of executors' state the store keeps (background shells, a
//! conversation's MCP servers, the hook stages an audit entry names),
//! defined here so that the store sits below the executors that use them
//! (issue 40's layers). Their behaviour stays with the executors:
//! `shells`, `mcp` and `hooks` re-export them and implement their methods.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where a shell is in its life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShellStatus {
    /// Its process is running.
    Running,
    /// It ended by itself; killed by a signal it did not get from us is
    /// code 128 + the signal, as shells report it.
    Exited { code: i32 },
    /// Stopped by a kill (a person, the model, or the daemon's shutdown).
    Killed,
    /// It was running when the daemon died; its end is unknown.
    Lost,
}

/// Everything known about a shell; what the store keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellRecord {
    /// `sh-` and six base32 characters, unique in this daemon's records.
    pub id: String,
    /// The conversation that started it; only that one sees it.
    pub conversation_id: String,
    pub command: String,
    pub cwd: PathBuf,
    /// Pid of `bash`, which is also the process group id.
    pub pid: u32,
    /// Unix ms.
    pub started_at_ms: i64,
    /// Unix ms; None while running.
    pub ended_at_ms: Option<i64>,
    pub status: ShellStatus,
    /// Bytes in the spool file (output, plus agentd's marker lines).
    pub output_bytes: u64,
    /// Output beyond the cap was discarded.
    pub truncated: bool,
    /// Field 22 of `/proc/<pid>/stat` at start, so that after a crash a
    /// live pid can be proven to still be this shell.
    pub proc_start_ticks: Option<u64>,
    /// It ended and its conversation has not taken the note of its end
    /// yet: reported again after a restart until it has.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub report_pending: bool,
}

/// The points of a turn hooks run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    PreToolUse,
    PostToolUse,
    UserPromptSubmit,
    Stop,
    Notification,
    SessionStart,
}

/// Time a tool call may take unless the server's config says otherwise.
pub(crate) const DEFAULT_CALL_TIMEOUT_MS: u64 = 60_000;
/// Time a server has to start and list its tools.
pub(crate) const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;

/// One MCP server a conversation may use.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServerSpec {
    /// What its tools are prefixed with (`mcp__NAME__…`).
    pub name: String,
    pub transport: Transport,
    /// Honour the server's read-only hints (such tools run unasked).
    #[serde(default)]
    pub trust: bool,
    /// Time limit of one tool call, ms.
    #[serde(default = "default_call_timeout")]
    pub timeout_ms: u64,
    /// Time limit of starting the server and listing its tools, ms.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout_ms: u64,
}

fn default_call_timeout() -> u64 {
    DEFAULT_CALL_TIMEOUT_MS
}

fn default_startup_timeout() -> u64 {
    DEFAULT_STARTUP_TIMEOUT_MS
}

/// How the daemon talks to a server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Transport {
    /// A child process speaking JSON-RPC on stdin/stdout, started in the
    /// conversation's working directory.
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP at `url`, with extra request headers.
    Http {
        url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}
