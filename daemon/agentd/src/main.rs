//! The `agentd` binary: everything is in the library (`agentd::main`).

/// jemalloc, whose background thread returns freed memory to the system a
/// second after it was freed (`.cargo/config.toml`). glibc's malloc kept
/// what thousands of departed clients had used (BENCHMARKS.md, 2026-11-24).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    agentd::main()
}
