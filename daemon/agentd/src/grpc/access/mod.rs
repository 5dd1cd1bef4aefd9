//! Who may call what: the role each RPC and Attach frame needs, the bearer
//! tokens of the TCP listener, and the layer in front of every service
//! that authenticates a call and refuses one its caller's role does not
//! allow.
//!
//! On the local socket the caller is the user (the listener checked the
//! peer's uid) and a DRIVER. Over TCP every call carries
//! `authorization: Bearer <token>`; the token's SHA-256 is compared with
//! every stored token's in constant time, and a missing, wrong, revoked or
//! expired token is refused (UNAUTHENTICATED, saying which). Failed
//! attempts are counted per peer address: past [`MAX_FAILURES`] within
//! [`FAILURE_WINDOW`] the address's calls without a valid token are
//! refused outright (RESOURCE_EXHAUSTED) until the window has passed; a
//! valid token always passes. Revoking a token, or its expiry, ends every
//! stream and long call made with it ([`Session`]).

mod caller;
mod layer;
mod rate_limit;
mod roles;

pub(crate) use caller::{Caller, Peer, Session, display_name, session_check, session_ended};
pub(crate) use layer::AccessLayer;
pub(crate) use rate_limit::RateLimit;
pub(crate) use roles::{FrameKind, Need, check_role, frame_need, need};

use crate::runtime::Clock;
use crate::store::Store;
use crate::store::access::TokenRecord;
use agentd_core::ClientRole;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;
use tonic::Status;

/// Failed authentications one address may make within [`FAILURE_WINDOW`].
pub(crate) const MAX_FAILURES: u32 = 10;
/// How long failed attempts count against an address.
pub(crate) const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Bytes of randomness in a token (256 bits).
const TOKEN_BYTES: usize = 32;
/// What every token's text starts with, so one is recognisable in a file.
const TOKEN_PREFIX: &str = "agentd_";
/// The metadata key a client gives its name in (user@host), for calls
/// that have no name field of their own.
pub(crate) const CLIENT_NAME_HEADER: &str = "agent-client-name";
/// How often a token's last use is written back.
const LAST_USED_EVERY_MS: i64 = 60_000;

/// The TCP listener as clients are told about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listening {
    pub address: String,
    /// "SHA256:<64 hex digits>" of its certificate.
    pub fingerprint: String,
}

/// Tokens, rate limiting and the listener's identity, shared by the access
/// layer and the token RPCs.
#[derive(Debug)]
pub(crate) struct Access {
    store: Store,
    clock: Clock,
    limit: RateLimit,
    /// Per token id, cancelled when the token is revoked (and kept so, so
    /// a call authenticated just before the revocation sees it too).
    revoked: Mutex<HashMap<String, CancellationToken>>,
    /// Set when the daemon listens on TCP.
    pub listening: Option<Listening>,
}

/// SHA-256 of a token's text.
fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Refusals of a token, each saying which case it is.
fn unauthenticated(why: String) -> Status {
    Status::unauthenticated(why)
}

impl Access {
    pub(crate) fn new(store: Store, clock: Clock, listening: Option<Listening>) -> Access {
        Access {
            store,
            clock,
            limit: RateLimit::default(),
            revoked: Mutex::new(HashMap::new()),
            listening,
        }
    }

    /// Makes a token; returns it as stored and its text (shown once).
    pub(crate) fn create(
        &self,
        role: ClientRole,
        name: &str,
        expires_in: Option<Duration>,
    ) -> Result<(TokenRecord, String), Status> {
        use rand::RngCore;
        let mut secret = [0u8; TOKEN_BYTES];
        rand::rng().fill_bytes(&mut secret);
        let text = format!("{TOKEN_PREFIX}{}", hex(&secret));
        let mut id_bytes = [0u8; 4];
        rand::rng().fill_bytes(&mut id_bytes);
        let id = format!("t{}", hex(&id_bytes));
        let now = self.clock.now_ms();
        let name = display_name(name);
        let expires_at_ms = expires_in
            .map(|d| {
                i64::try_from(d.as_millis())
                    .ok()
                    .and_then(|ms| now.checked_add(ms))
                    .ok_or_else(|| Status::invalid_argument("the token's lifetime is too long"))
            })
            .transpose()?;
        let record = TokenRecord {
            name: if name.is_empty() {
                format!("token-{id}")
            } else {
                name
            },
            id,
            role,
            hash: hash(&text),
            created_at_ms: now,
            expires_at_ms,
            revoked_at_ms: None,
            last_used_at_ms: None,
        };
        self.store
            .put_token(&record)
            .map_err(|e| Status::internal(format!("cannot store the token: {e}")))?;
        Ok((record, text))
    }

    /// Every token.
    pub(crate) fn tokens(&self) -> Result<Vec<TokenRecord>, Status> {
        self.store
            .tokens()
            .map_err(|e| Status::internal(format!("cannot read the tokens: {e}")))
    }

    /// Revokes the token whose id starts with `prefix` (unique).
    pub(crate) fn revoke(&self, prefix: &str) -> Result<TokenRecord, Status> {
        let prefix = prefix.trim();
        if prefix.is_empty() {
            return Err(Status::invalid_argument("token id is empty"));
        }
        let matching: Vec<TokenRecord> = self
            .tokens()?
            .into_iter()
            .filter(|t| t.id.starts_with(prefix))
            .collect();
        let mut token = match matching.as_slice() {
            [] => {
                return Err(Status::not_found(format!(
                    "no token {} (`agent token ls` lists them)",
                    crate::grpc::convert::brief(prefix)
                )));
            }
            [one] => one.clone(),
            [a, b, ..] => {
                return Err(Status::invalid_argument(format!(
                    "ambiguous token id {prefix} (matches {} and {})",
                    a.id, b.id
                )));
            }
        };
        if token.revoked_at_ms.is_none() {
            token.revoked_at_ms = Some(self.clock.now_ms());
            self.store
                .put_token(&token)
                .map_err(|e| Status::internal(format!("cannot store the token: {e}")))?;
        }
        // Every stream and long call of the token ends.
        self.revocation(&token.id).cancel();
        Ok(token)
    }

    /// The cancellation of token `id`'s sessions.
    fn revocation(&self, id: &str) -> CancellationToken {
        match self.revoked.lock() {
            Ok(mut revoked) => revoked.entry(id.to_string()).or_default().clone(),
            // Unreachable in practice (nothing panics holding it); a
            // session that cannot be tracked is ended at once.
            Err(_) => {
                let ended = CancellationToken::new();
                ended.cancel();
                ended
            }
        }
    }

    /// Makes every token change so far durable.
    pub(crate) async fn flush(&self) -> Result<(), Status> {
        self.store
            .flush()
            .await
            .map_err(|e| Status::internal(format!("cannot store the token: {e}")))
    }

    /// The caller of a request from `peer` carrying `authorization`.
    pub(crate) fn authenticate(
        &self,
        peer: Peer,
        authorization: Option<&http::HeaderValue>,
        name: Option<String>,
    ) -> Result<Caller, Status> {
        let addr = match peer {
            Peer::Local => {
                return Ok(Caller {
                    role: ClientRole::Driver,
                    remote: None,
                    name,
                    session: None,
                });
            }
            Peer::Remote(addr) => addr,
        };
        let now = Instant::now();
        // The token first: a valid one always passes, whatever others
        // from the same address (a shared NAT, a client with an old token
        // file) got wrong.
        match self.verify(authorization) {
            Ok(token) => Ok(Caller {
                role: token.role,
                session: Some(Session {
                    revoked: self.revocation(&token.id),
                    id: token.id,
                    name: token.name.clone(),
                    expires_at_ms: token.expires_at_ms,
                    clock: self.clock,
                }),
                remote: Some((token.name, addr)),
                name,
            }),
            Err(refused) => {
                self.limit.check(addr.ip(), now)?;
                self.limit.failed(addr.ip(), now);
                tracing::warn!(peer = %addr, "refused a call: {}", refused.message());
                Err(refused)
            }
        }
    }

    /// The token `authorization` carries, if it is one of ours, neither
    /// revoked nor expired.
    fn verify(&self, authorization: Option<&http::HeaderValue>) -> Result<TokenRecord, Status> {
        let Some(header) = authorization else {
            return Err(unauthenticated(
                "no token: every call over TCP needs `authorization: Bearer <token>` (make one with `agent token create` on the daemon's machine)".into(),
            ));
        };
        let secret = header
            .to_str()
            .ok()
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                unauthenticated("malformed authorization header: expected `Bearer <token>`".into())
            })?;
        let presented = hash(secret);
        // Every stored hash is compared, in constant time, whatever
        // matched before: the time taken says nothing about which bytes
        // of which token were right.
        let mut found = None;
        for token in self.tokens()? {
            if bool::from(token.hash.ct_eq(&presented)) {
                found = Some(token);
            }
        }
        let Some(mut token) = found else {
            return Err(unauthenticated(
                "wrong token: it is not one this daemon made (`agent token ls` on the daemon's machine lists them)".into(),
            ));
        };
        let now = self.clock.now_ms();
        if token.revoked_at_ms.is_some() {
            return Err(unauthenticated(format!(
                "token {} ({}) was revoked",
                token.id, token.name
            )));
        }
        if let Some(expires) = token.expires_at_ms
            && now >= expires
        {
            return Err(unauthenticated(format!(
                "token {} ({}) expired {} s ago",
                token.id,
                token.name,
                (now - expires) / 1000
            )));
        }
        if token
            .last_used_at_ms
            .is_none_or(|t| now - t >= LAST_USED_EVERY_MS)
        {
            token.last_used_at_ms = Some(now);
            // Durable with the next flush of anything: a last use is
            // worth no flush of its own.
            if let Err(e) = self.store.put_token(&token) {
                tracing::warn!("cannot record the use of token {}: {e}", token.id);
            }
        }
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> (tempfile::TempDir, Access) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, Access::new(store, Clock::System, None))
    }

    fn bearer(secret: &str) -> http::HeaderValue {
        http::HeaderValue::from_str(&format!("Bearer {secret}")).unwrap()
    }

    #[test]
    fn tokens_are_checked_and_each_refusal_says_why() {
        let (_dir, access) = access();
        let peer = Peer::Remote("192.0.2.1:4000".parse().unwrap());
        let (token, secret) = access.create(ClientRole::Approver, "laptop", None).unwrap();
        assert!(
            secret.len() >= TOKEN_PREFIX.len() + 64,
            "256 bits of secret"
        );
        assert_ne!(token.hash, [0; 32]);
        assert!(
            !format!("{:?}", access.tokens().unwrap()).contains(&secret),
            "only the hash is kept"
        );
        let caller = access
            .authenticate(peer, Some(&bearer(&secret)), None)
            .unwrap();
        assert_eq!(caller.role, ClientRole::Approver);
        assert_eq!(caller.remote.as_ref().map(|r| r.0.as_str()), Some("laptop"));
        let why = |h: Option<&http::HeaderValue>| {
            let s = access.authenticate(peer, h, None).unwrap_err();
            assert_eq!(s.code(), tonic::Code::Unauthenticated);
            s.message().to_string()
        };
        assert!(why(None).starts_with("no token"));
        assert!(why(Some(&bearer("agentd_00"))).starts_with("wrong token"));
        assert!(why(Some(&http::HeaderValue::from_static("Basic x"))).starts_with("malformed"));
        access.revoke(&token.id[..3]).unwrap();
        assert!(why(Some(&bearer(&secret))).ends_with("was revoked"));
        let (_, short) = access
            .create(ClientRole::Viewer, "", Some(Duration::ZERO))
            .unwrap();
        assert!(why(Some(&bearer(&short))).contains("expired"));
        // The local socket needs no token.
        assert_eq!(
            access.authenticate(Peer::Local, None, None).unwrap().role,
            ClientRole::Driver
        );
    }

    #[test]
    fn a_valid_token_passes_where_its_address_is_locked_out() {
        let (_dir, access) = access();
        let peer = Peer::Remote("192.0.2.1:4000".parse().unwrap());
        let (_, secret) = access.create(ClientRole::Viewer, "good", None).unwrap();
        for _ in 0..MAX_FAILURES {
            let s = access
                .authenticate(peer, Some(&bearer("agentd_bad")), None)
                .unwrap_err();
            assert_eq!(s.code(), tonic::Code::Unauthenticated);
        }
        let locked = access
            .authenticate(peer, Some(&bearer("agentd_bad")), None)
            .unwrap_err();
        assert_eq!(locked.code(), tonic::Code::ResourceExhausted);
        assert!(
            access
                .authenticate(peer, Some(&bearer(&secret)), None)
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_revocation_ends_the_sessions_authenticated_before_it() {
        let (_dir, access) = access();
        let peer = Peer::Remote("192.0.2.1:4000".parse().unwrap());
        let (token, secret) = access.create(ClientRole::Driver, "pilot", None).unwrap();
        let caller = access
            .authenticate(peer, Some(&bearer(&secret)), None)
            .unwrap();
        let session = caller.session.clone().unwrap();
        assert!(session.check().is_ok());
        let waiting = tokio::spawn(async move { session.ended().await });
        access.revoke(&token.id).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
        assert!(
            status.message().contains("(pilot) was revoked"),
            "{status:?}"
        );
        assert!(caller.session.unwrap().check().is_err());
        // A session that expires ends on its own.
        let (_, brief) = access
            .create(
                ClientRole::Viewer,
                "brief",
                Some(Duration::from_millis(200)),
            )
            .unwrap();
        let session = access
            .authenticate(peer, Some(&bearer(&brief)), None)
            .unwrap()
            .session
            .unwrap();
        let status = tokio::time::timeout(Duration::from_secs(5), session.ended())
            .await
            .unwrap();
        assert!(status.message().contains("(brief) expired"), "{status:?}");
        // The local socket has no session.
        assert!(
            access
                .authenticate(Peer::Local, None, None)
                .unwrap()
                .session
                .is_none()
        );
    }
}
