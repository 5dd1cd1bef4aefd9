//! The client exactly as `agent` runs it, built inside this package so the
//! end-to-end tests can find it through `CARGO_BIN_EXE_test-agent`.
fn main() -> std::process::ExitCode {
    agent_cli::main()
}
