//! The daemon exactly as `agentd` runs it, built inside this package so the
//! end-to-end tests can find it through `CARGO_BIN_EXE_test-agentd`.

/// The allocator of `daemon/agentd/src/main.rs`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    agentd::main()
}
