//! The ACP bridge exactly as `agent-acp` runs it, built inside this package
//! so that `test-agent acp` finds it (the harness points `AGENT_ACP_BIN` at
//! it).
fn main() -> std::process::ExitCode {
    agent_acp::main()
}
