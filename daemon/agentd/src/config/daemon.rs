//! The sections of the config file that say how the daemon itself runs:
//! what clients may send over gRPC, its async runtime, its store, the TCP
//! listener and its log file.

use super::ConfigError;
use serde::Deserialize;
use std::path::PathBuf;

/// Limits on what clients send over gRPC. Each is checked per request and
/// named in the error a client gets when it is over it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct GrpcSection {
    /// Largest gRPC message the daemon decodes, bytes: a unary request, one
    /// Attach frame, one conversation of an import. A request over it is
    /// refused with OUT_OF_RANGE; an Attach or import stream is closed with
    /// that status.
    pub max_message_bytes: usize,
    /// Largest user text, bytes: a message, a prompt, permission feedback.
    /// Over it: INVALID_ARGUMENT (an error event on Attach, and the stream
    /// stays usable).
    pub max_text_bytes: usize,
    /// Largest HTTP/2 frame the daemon accepts (its SETTINGS_MAX_FRAME_SIZE),
    /// 16384 to 16777215 bytes.
    pub max_frame_bytes: u32,
}

/// HTTP/2's bounds on SETTINGS_MAX_FRAME_SIZE (RFC 9113 §6.5.2).
const HTTP2_FRAME_BYTES: std::ops::RangeInclusive<u32> = 16_384..=16_777_215;

impl Default for GrpcSection {
    fn default() -> Self {
        GrpcSection {
            max_message_bytes: 32 * 1024 * 1024,
            max_text_bytes: 1024 * 1024,
            max_frame_bytes: 16_384,
        }
    }
}

impl GrpcSection {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_message_bytes < 64 * 1024 {
            return Err(ConfigError::Invalid(format!(
                "grpc.max_message_bytes must be at least 65536, got {}",
                self.max_message_bytes
            )));
        }
        if self.max_text_bytes == 0 || self.max_text_bytes > self.max_message_bytes {
            return Err(ConfigError::Invalid(format!(
                "grpc.max_text_bytes must be between 1 and grpc.max_message_bytes ({}), got {}",
                self.max_message_bytes, self.max_text_bytes
            )));
        }
        if !HTTP2_FRAME_BYTES.contains(&self.max_frame_bytes) {
            return Err(ConfigError::Invalid(format!(
                "grpc.max_frame_bytes must be between {} and {}, got {}",
                HTTP2_FRAME_BYTES.start(),
                HTTP2_FRAME_BYTES.end(),
                self.max_frame_bytes
            )));
        }
        Ok(())
    }
}

/// The daemon's async runtime.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RuntimeSection {
    /// Threads that run the daemon's tasks; 0 (the default) is one per two
    /// CPUs, at least one: the other CPUs are left to the commands the
    /// agent runs, the blocking pool (file tools, git) and the clients.
    pub worker_threads: usize,
}

impl RuntimeSection {
    /// The number of worker threads to start.
    pub(crate) fn workers(&self) -> usize {
        match self.worker_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
            n => n,
        }
    }
}

/// Persistence.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct StoreSection {
    /// What an acknowledged write survives: `kill` (a killed daemon; the
    /// default) or `power` (a power cut too, at the cost of an `fdatasync`
    /// of the journal per flush).
    pub sync: crate::store::Sync,
    /// Bytes of sled's page cache.
    pub cache_bytes: u64,
}

impl Default for StoreSection {
    fn default() -> StoreSection {
        StoreSection {
            sync: crate::store::Sync::default(),
            cache_bytes: crate::store::DEFAULT_CACHE_BYTES,
        }
    }
}

impl StoreSection {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.cache_bytes < crate::store::MIN_CACHE_BYTES {
            return Err(ConfigError::Invalid(format!(
                "store.cache_bytes must be at least {}, got {}",
                crate::store::MIN_CACHE_BYTES,
                self.cache_bytes
            )));
        }
        Ok(())
    }
}

/// The TCP listener for remote clients (`[remote]`; README "Remote use").
/// Off unless `listen` (or `agentd --listen`) names an address.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RemoteSection {
    /// `ADDR:PORT` to listen on, TLS only, every call with a bearer token.
    pub listen: Option<String>,
    /// A PEM certificate (chain) to serve instead of the daemon's own
    /// self-signed one; `key_file` must be given with it.
    pub cert_file: Option<PathBuf>,
    /// The PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Names (DNS names or IP addresses) the self-signed certificate
    /// names besides `localhost`, `agentd` and the listen address.
    pub cert_names: Vec<String>,
    /// Remote connections open at once (handshaking or served); more are
    /// closed as they are accepted. Never more than half the daemon's
    /// file descriptors, so the Unix socket always has room.
    pub max_connections: usize,
    /// How long a client may take from its connection to the end of its
    /// TLS handshake.
    pub handshake_timeout_ms: u64,
    /// How long a remote connection with no call in progress is kept.
    pub idle_timeout_ms: u64,
    /// TLS handshakes one address may have in progress at once; more are
    /// closed as they are accepted.
    pub max_handshakes_per_address: usize,
    /// The directories remote clients may work in (a conversation's
    /// working directory and the directories it adds must lie in one);
    /// the daemon user's home when empty. See `grpc::admission`.
    pub roots: Vec<PathBuf>,
}

impl Default for RemoteSection {
    fn default() -> RemoteSection {
        RemoteSection {
            listen: None,
            cert_file: None,
            key_file: None,
            cert_names: Vec::new(),
            max_connections: 256,
            handshake_timeout_ms: 2_000,
            idle_timeout_ms: 300_000,
            max_handshakes_per_address: 8,
            roots: Vec::new(),
        }
    }
}

impl RemoteSection {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(ConfigError::Invalid(
                "remote.cert_file and remote.key_file go together: give both or neither".into(),
            ));
        }
        for (key, value) in [
            ("max_connections", self.max_connections as u64),
            ("handshake_timeout_ms", self.handshake_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            (
                "max_handshakes_per_address",
                self.max_handshakes_per_address as u64,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!(
                    "remote.{key} must be at least 1"
                )));
            }
        }
        for name in &self.cert_names {
            if name.trim().is_empty() || name.contains(char::is_whitespace) {
                return Err(ConfigError::Invalid(format!(
                    "remote.cert_names: {name:?} is not a host name or address"
                )));
            }
        }
        Ok(())
    }
}

/// The daemon's own log (`[log]`): when its standard error is a regular
/// file (an autostarted daemon's `agentd.log`, or a redirection), the file
/// is kept under `max_bytes`: past it, it becomes `<file>.1` (replacing
/// the one before) and a new file is started.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct LogSection {
    pub max_bytes: u64,
}

impl Default for LogSection {
    fn default() -> LogSection {
        LogSection {
            max_bytes: 10 * 1024 * 1024,
        }
    }
}
