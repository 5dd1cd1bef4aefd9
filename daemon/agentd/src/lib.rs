//! agentd: the daemon. Every edge of the system lives here; every decision
//! lives in `agentd-core`.
//!
//! Layout (dependencies point inward: grpc → runtime → core; runtime → llm,
//! tools, shells, store; tools → shells → process, tools → process):
//! - [`alloc`]: idle threads give the allocator's caches back.
//! - [`cli`]: command line and start-up (`main.rs` only calls [`cli::main`]).
//! - [`config`]: the TOML config file and environment.
//! - [`grpc`]: the tonic service, the Unix socket and its security, and
//!   `convert.rs`, the one place wire types are converted to the daemon's
//!   own (prost types go no further than `grpc/`).
//! - [`runtime`]: one actor per live conversation, the manager, the hub.
//! - [`llm`]: providers (Anthropic, OpenAI-compatible), SSE, retry classes.
//! - [`tools`]: one file per tool, the registry, the tool context.
//! - [`mcp`]: MCP servers' tools (rmcp clients): start, share, restart,
//!   stop; results mapped to tool results.
//! - [`shells`]: background shells: spawn, spool output, kill, limits, and
//!   recovery after a crash.
//! - [`process`]: the processes both start: `bash -c` in a process group of
//!   its own, the `/proc` start-time check that keeps a reused pid from
//!   being signalled, and the one way a group is stopped.
//! - `truncate`: head-and-tail cuts of output for the model, for tools
//!   and shells alike.
//! - [`store`]: sled; the only module that knows keys and trees.

pub(crate) mod alloc;
pub(crate) mod checkpoints;
pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod grpc;
pub(crate) mod hooks;
pub(crate) mod images;
pub(crate) mod llm;
pub(crate) mod logfile;
pub(crate) mod mcp;
pub(crate) mod models;
pub(crate) mod process;
pub(crate) mod runtime;
pub(crate) mod shells;
pub(crate) mod store;
pub(crate) mod tools;
pub(crate) mod truncate;

// What other crates use: the binaries' entry point, and the stream parsers
// and the store for the fuzzers and a test. Everything else is the crate's
// own (`unreachable_pub` holds it to `pub(crate)`).
pub use cli::main;
pub use llm::{fuzzing, sse};
pub use store::Store;
