fn main() -> std::process::ExitCode {
    agent_acp::main()
}
