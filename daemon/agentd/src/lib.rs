//! agentd: the daemon. Every edge of the system lives here; every decision
//! lives in `agentd-core`.
//!
//! Layout (dependencies point inward: grpc → runtime → core; runtime → llm,
//! tools, store):
//! - [`cli`]: command line and start-up (`main.rs` only calls [`cli::main`]).
//! - [`config`]: the TOML config file and environment.
//! - [`grpc`]: the tonic service, the Unix socket and its security, and
//!   `convert.rs`, the one place wire types are converted to the daemon's
//!   own (prost types go no further than `grpc/`).
//! - [`runtime`]: one actor per live conversation, the manager, the hub.
//! - [`llm`]: providers (Anthropic, OpenAI-compatible), SSE, retry classes.
//! - [`tools`]: one file per tool, the registry, the tool context.
//! - [`store`]: sled; the only module that knows keys and trees.

pub mod cli;
pub mod config;
pub mod grpc;
pub mod llm;
pub mod runtime;
pub mod shells;
pub mod store;
pub mod tools;
