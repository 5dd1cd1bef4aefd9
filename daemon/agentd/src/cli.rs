//! Command line of the daemon (placeholder until the runtime lands).
use std::process::ExitCode;

/// Runs the daemon as the `agentd` binary does.
pub fn main() -> ExitCode {
    eprintln!("agentd: not built yet");
    ExitCode::FAILURE
}
