//! The one end-to-end test binary (one link, one process per `cargo test`
//! run). Each area has a file under `suite/`; add new ones to `suite/mod.rs`.
//!
//! Daemon tests begin with [`agent_tests::harness::Scenario`]: a real
//! `test-agentd` pointed at an [`agent_tests::fake_llm::FakeLlm`] with its
//! scripts, a client and a conversation. They drive it through the gRPC
//! client or the `test-agent` binary, with the helpers in `suite/util.rs`,
//! and wait at most [`agent_tests::harness::WAIT`] for anything.
#![expect(clippy::unwrap_used, clippy::expect_used)]

mod suite;
