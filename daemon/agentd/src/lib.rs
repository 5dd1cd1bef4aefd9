//! agentd: the daemon. Every edge of the system lives here; what a
//! conversation does is decided in `agentd-core` (the actor still keeps a
//! few decisions of its own, listed in ARCHITECTURE.md).
//!
//! Layers the shape check holds (`tests/shape/layers.rs`): `store` names no
//! executor (`hooks`, `mcp`, `shells`, `tools`, `llm`, `checkpoints`,
//! `runtime`, `grpc`), `runtime` never names `grpc`, `checkpoints` never
//! names `runtime`, `config` never names `llm`. Beyond those the modules are
//! not layered: `cli`, `grpc` and `runtime` use most of the others, and
//! `config` → `mcp` → `tools` → `llm` → `config` is a cycle.
//!
//! Layout:
//! - [`cli`]: command line and start-up (`main.rs` only calls [`main`],
//!   which is `cli::main`).
//! - [`config`]: the TOML config file, environment and flags.
//! - [`grpc`]: the tonic service, the listeners and their security, and
//!   `convert/`, the one place wire types are converted to the daemon's
//!   own (prost types go no further than `grpc/`).
//! - [`runtime`]: the manager and one actor per live conversation.
//! - [`store`]: sled and its journal; the only module that knows keys and
//!   trees.
//! - [`llm`]: providers (Anthropic, OpenAI-compatible), SSE, retry classes,
//!   the API key.
//! - [`tools`]: one file per tool, the registry, path confinement,
//!   redaction.
//! - [`checkpoints`]: what files were before the agent changed them, and
//!   rewind.
//! - [`hooks`]: the user's commands at points of a turn.
//! - [`mcp`]: MCP servers' tools (rmcp clients): start, share, restart,
//!   stop; results mapped to tool results.
//! - [`shells`]: background shells: spawn, spool output, kill, limits, and
//!   recovery after a crash.
//! - [`process`]: the processes the daemon starts: `bash -c` in a process
//!   group of its own, the `/proc` start-time check that keeps a reused pid
//!   from being signalled, the one way a group is stopped, and the
//!   credentials withheld from every child.
//! - [`images`], [`models`]: uploads checked and addressed; what is known of
//!   models (window, output limit, price).
//! - `truncate`: head-and-tail cuts of output for the model, for tools
//!   and shells alike.
//! - [`alloc`], [`logfile`]: idle threads give the allocator's caches back;
//!   the log kept to a size.

pub(crate) mod agent_types;
pub(crate) mod alloc;
pub(crate) mod checkpoints;
pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod environment;
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
pub(crate) mod tasks;
pub(crate) mod tools;
pub(crate) mod truncate;

// What other crates use: the binaries' entry point, and the stream parsers
// and the store for the fuzzers and a test. Everything else is the crate's
// own (`unreachable_pub` holds it to `pub(crate)`).
pub use cli::main;
pub use llm::{fuzzing, sse};
pub use store::Store;
