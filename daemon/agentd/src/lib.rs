//! agentd: the daemon. Every edge of the system lives here; decisions live in
//! `agentd-core`.
pub mod cli;
pub mod llm;
pub mod tools;
