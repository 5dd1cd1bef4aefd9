fn main() -> std::process::ExitCode {
    agent_cli::main()
}
