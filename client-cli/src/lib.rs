//! `agent`: the thin terminal client of agentd (being built).

pub mod cli;
pub mod connect;
pub mod error;
pub mod io;
pub mod json;
pub mod render;

use std::process::ExitCode;

/// Runs the client as the `agent` binary does.
pub fn main() -> ExitCode {
    eprintln!("agent: not built yet");
    ExitCode::FAILURE
}
