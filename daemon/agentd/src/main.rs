fn main() -> std::process::ExitCode {
    agentd::cli::main()
}
