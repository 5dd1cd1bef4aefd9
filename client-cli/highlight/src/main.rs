fn main() -> std::process::ExitCode {
    agent_highlight::main()
}
