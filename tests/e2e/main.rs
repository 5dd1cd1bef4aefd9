//! The one end-to-end test binary (one link, one process per `cargo test`
//! run). Each area has a file under `suite/`; add new ones to `suite/mod.rs`.
//!
//! Daemon tests start a real `test-agentd` with
//! [`agent_tests::harness::TestDaemon`] pointed at an
//! [`agent_tests::fake_llm::FakeLlm`], and drive it through the gRPC client or
//! the `test-agent` binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
