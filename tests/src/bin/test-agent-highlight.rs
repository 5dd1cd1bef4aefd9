//! The highlighter exactly as `agent-highlight` runs it, built inside this
//! package so that `test-agent` finds it (the harness points
//! `AGENT_HIGHLIGHT_BIN` at it).
fn main() -> std::process::ExitCode {
    agent_highlight::main()
}
