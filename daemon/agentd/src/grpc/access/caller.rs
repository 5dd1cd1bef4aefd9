//! Who is calling: the connection's peer, the caller the access layer
//! established, and a remote caller's session, which ends when its token
//! is revoked or expires.

use super::unauthenticated;
use crate::runtime::Clock;
use agentd_core::{ClientInfo, ClientRole};
use std::net::SocketAddr;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::Status;

/// Where a connection comes from: tonic's connect info of the daemon's
/// connections (see `grpc::Conn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The Unix socket (the peer's uid was checked on accept).
    Local,
    /// The TCP listener, after the TLS handshake.
    Remote(SocketAddr),
}

/// Who is calling, as the access layer established it; every request the
/// service sees carries one in its extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    /// The most the connection may do.
    pub role: ClientRole,
    /// The token's name and the peer's address over TCP.
    pub remote: Option<(String, SocketAddr)>,
    /// The name the client gave in its metadata, if any.
    pub name: Option<String>,
    /// A remote caller's token, for as long as it stays valid: a stream
    /// or long call ends when it is revoked or expires.
    pub session: Option<Session>,
}

/// The token a remote call was made with, while it is valid. Streams and
/// long calls check it before acting on each frame and wait on
/// [`Session::ended`] alongside their work.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) revoked: CancellationToken,
    pub(super) expires_at_ms: Option<i64>,
    pub(super) clock: Clock,
}

impl PartialEq for Session {
    fn eq(&self, other: &Session) -> bool {
        self.id == other.id
    }
}

impl Eq for Session {}

impl Session {
    /// The token's id.
    pub(crate) fn token_id(&self) -> &str {
        &self.id
    }

    /// UNAUTHENTICATED once the token was revoked or expired.
    pub(crate) fn check(&self) -> Result<(), Status> {
        if self.revoked.is_cancelled() {
            return Err(unauthenticated(format!(
                "token {} ({}) was revoked; this stream is closed",
                self.id, self.name
            )));
        }
        if let Some(expires) = self.expires_at_ms
            && self.clock.now_ms() >= expires
        {
            return Err(unauthenticated(format!(
                "token {} ({}) expired; this stream is closed",
                self.id, self.name
            )));
        }
        Ok(())
    }

    /// Completes, with the refusal to end the stream with, when the token
    /// is revoked or expires.
    pub(crate) async fn ended(&self) -> Status {
        loop {
            if let Err(status) = self.check() {
                return status;
            }
            let left = self.expires_at_ms.map(|at| {
                Duration::from_millis(u64::try_from(at - self.clock.now_ms()).unwrap_or(0))
            });
            tokio::select! {
                _ = self.revoked.cancelled() => {}
                _ = tokio::time::sleep(left.unwrap_or(Duration::MAX)), if left.is_some() => {}
            }
        }
    }
}

/// [`Session::ended`] of a caller that has a session; never for a local
/// one.
pub(crate) async fn session_ended(session: Option<&Session>) -> Status {
    match session {
        Some(session) => session.ended().await,
        None => std::future::pending().await,
    }
}

/// [`Session::check`] of a caller that has a session.
pub(crate) fn session_check(session: Option<&Session>) -> Result<(), Status> {
    session.map_or(Ok(()), Session::check)
}

impl Caller {
    /// A client of this caller as conversations record it: the given
    /// `name` (else the metadata's, else the token's, else "local"), with
    /// the role `role` (at most the caller's).
    pub(crate) fn client(&self, id: String, name: &str, asked: Option<ClientRole>) -> ClientInfo {
        let name = display_name(name);
        let name = if !name.is_empty() {
            name
        } else if let Some(given) = self.name.as_deref().filter(|n| !n.is_empty()) {
            given.to_string()
        } else if let Some((token, _)) = &self.remote {
            token.clone()
        } else {
            "local".to_string()
        };
        ClientInfo {
            id,
            name,
            role: self.role.capped(asked),
            token_name: self.remote.as_ref().map(|(t, _)| t.clone()),
            address: self.remote.as_ref().map(|(_, a)| a.to_string()),
        }
    }
}

/// A client's name as others are shown it: one line of at most 64
/// characters.
pub(crate) fn display_name(name: &str) -> String {
    name.trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_named_by_itself_then_its_metadata_then_its_token() {
        let remote = Caller {
            role: ClientRole::Approver,
            remote: Some(("laptop".into(), "192.0.2.1:4000".parse().unwrap())),
            name: None,
            session: None,
        };
        let c = remote.client("c1".into(), "", Some(ClientRole::Driver));
        assert_eq!((c.name.as_str(), c.role), ("laptop", ClientRole::Approver));
        assert_eq!(c.address.as_deref(), Some("192.0.2.1:4000"));
        let named = Caller {
            name: Some("al@lap".into()),
            ..remote.clone()
        };
        assert_eq!(named.client("c1".into(), "", None).name, "al@lap");
        assert_eq!(
            named
                .client("c1".into(), "ed\n", Some(ClientRole::Viewer))
                .role,
            ClientRole::Viewer
        );
        assert_eq!(named.client("c1".into(), "ed\n", None).name, "ed");
    }
}
