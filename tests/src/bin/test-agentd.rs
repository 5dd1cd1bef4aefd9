//! The daemon exactly as `agentd` runs it, built inside this package so the
//! end-to-end tests can find it through `CARGO_BIN_EXE_test-agentd`.
fn main() -> std::process::ExitCode {
    agentd::cli::main()
}
