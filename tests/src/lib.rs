//! Test support for agentd: a fake LLM server, a daemon harness, and (in
//! `e2e/`) the one aggregated end-to-end test binary.
//!
//! - [`fake_llm`]: a real HTTP server speaking the Anthropic Messages and
//!   OpenAI chat-completions streaming formats, answering each request from
//!   a queue of [`fake_llm::Script`]s and recording every request, with fault
//!   injection (error statuses, mid-stream errors, dropped connections, held
//!   and slow streams).
//! - [`harness`]: starts a real `agentd` (the `test-agentd` binary) on a
//!   temporary socket and data directory, pointed at a fake LLM, and connects
//!   to it as clients do.
//! - [`pty`]: runs a program (the `agent` client, say) in a pseudo-terminal
//!   of a given size and reads its screen through a terminal emulator, for
//!   tests that assert on what a person sees.
//!
//! The binaries `test-agentd` and `test-agent` are the daemon and the client
//! exactly as users run them; `fake-llm` runs the fake server on its own so
//! agentd can be tried offline; `stub-agentd` is a stand-in daemon that only
//! listens, used to test the harness itself; `agent-fuzz` runs the
//! randomized long runs of [`fuzz`].

pub mod attack;
pub mod bench;
pub mod crash;
pub mod fake_llm;
pub mod fuzz;
pub mod harness;
pub mod power;
pub mod pty;
