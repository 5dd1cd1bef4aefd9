//! agent: the thin client (placeholder).
use std::process::ExitCode;

/// Runs the client as the `agent` binary does.
pub fn main() -> ExitCode {
    eprintln!("agent: not built yet");
    ExitCode::FAILURE
}
