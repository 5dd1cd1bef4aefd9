//! The agentd wire protocol: the one definition of what travels between the
//! daemon and its clients. Generated from `agent/v1/agent.proto`.
//!
//! Clients depend on this crate only; none reaches into the daemon.

#![allow(clippy::large_enum_variant, missing_docs)]

/// Package `agent.v1`.
pub mod v1 {
    tonic::include_proto!("agent.v1");
}

/// A scripted, recording stand-in for the daemon, for tests.
#[cfg(feature = "testing")]
pub mod testing;

/// The encoded `FileDescriptorSet` of every `.proto` file, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/agent_descriptor.bin"));

/// The fully qualified name of the service, for health checks.
pub const SERVICE_NAME: &str = "agent.v1.AgentService";

/// Where the daemon listens and clients connect when no socket is given.
///
/// `$XDG_RUNTIME_DIR/agentd/agentd.sock` when `XDG_RUNTIME_DIR` is set, else
/// `$HOME/.local/state/agentd/run/agentd.sock` (never /tmp). Both sides call
/// this one function so they cannot disagree.
pub fn default_socket_path() -> Result<std::path::PathBuf, String> {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Ok(std::path::PathBuf::from(dir)
            .join("agentd")
            .join("agentd.sock"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(std::path::PathBuf::from(home)
            .join(".local/state/agentd/run")
            .join("agentd.sock")),
        None => Err("neither XDG_RUNTIME_DIR nor HOME is set; pass --socket".to_string()),
    }
}
