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

use crate::runtime::Clock;
use crate::store::Store;
use crate::store::access::TokenRecord;
use agentd_core::{ClientInfo, ClientRole};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::BoxFuture;

/// Failed authentications one address may make within [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 10;
/// How long failed attempts count against an address.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Bytes of randomness in a token (256 bits).
const TOKEN_BYTES: usize = 32;
/// What every token's text starts with, so one is recognisable in a file.
const TOKEN_PREFIX: &str = "agentd_";
/// The metadata key a client gives its name in (user@host), for calls
/// that have no name field of their own.
pub const CLIENT_NAME_HEADER: &str = "agent-client-name";
/// How often a token's last use is written back.
const LAST_USED_EVERY_MS: i64 = 60_000;

/// What a call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// At least this role.
    Role(ClientRole),
    /// The local socket: managing tokens, trusting directories (which
    /// lets a project's hooks run commands unasked).
    Local,
}

/// The rule table: each method of `agent.v1.AgentService` and the least it
/// needs. A method missing here needs a driver (see [`need`]); a test
/// checks that the table names every RPC of the proto.
pub const RULES: &[(&str, Need)] = &[
    ("CreateConversation", Need::Role(ClientRole::Driver)),
    ("ListConversations", Need::Role(ClientRole::Viewer)),
    ("GetConversation", Need::Role(ClientRole::Viewer)),
    ("SendMessage", Need::Role(ClientRole::Driver)),
    ("CancelConversation", Need::Role(ClientRole::Driver)),
    ("DropQueuedMessage", Need::Role(ClientRole::Driver)),
    ("AnswerPermission", Need::Role(ClientRole::Approver)),
    ("ListShells", Need::Role(ClientRole::Viewer)),
    ("ReadShellOutput", Need::Role(ClientRole::Viewer)),
    ("KillShell", Need::Role(ClientRole::Driver)),
    // Each frame after `subscribe` is checked too: see [`frame_need`].
    ("Attach", Need::Role(ClientRole::Viewer)),
    ("ExportConversations", Need::Role(ClientRole::Viewer)),
    ("ImportConversations", Need::Role(ClientRole::Driver)),
    ("GetUsage", Need::Role(ClientRole::Viewer)),
    ("SetDirectoryTrust", Need::Local),
    ("ListTrustedDirectories", Need::Role(ClientRole::Viewer)),
    ("GetDaemonInfo", Need::Role(ClientRole::Viewer)),
    ("UpdateConversation", Need::Role(ClientRole::Driver)),
    ("CompactConversation", Need::Role(ClientRole::Driver)),
    ("ContinueConversation", Need::Role(ClientRole::Driver)),
    ("ListMcpServers", Need::Role(ClientRole::Viewer)),
    // Raising a budget decides what the conversation may spend: a driver's.
    ("AnswerBudget", Need::Role(ClientRole::Driver)),
    ("CreateToken", Need::Local),
    ("ListTokens", Need::Local),
    ("RevokeToken", Need::Local),
    ("GetAudit", Need::Role(ClientRole::Viewer)),
    // Rewriting files and forking the transcript: a driver's.
    ("Rewind", Need::Role(ClientRole::Driver)),
];

/// The agent service's path prefix.
const SERVICE_PREFIX: &str = "/agent.v1.AgentService/";

/// What a request to `path` needs, and the name to give it in a refusal.
/// Health checks and reflection need a viewer; an unknown method of the
/// agent service (or of any other) a driver, so nothing is open by
/// omission.
pub fn need(path: &str) -> (Need, &str) {
    if let Some(method) = path.strip_prefix(SERVICE_PREFIX) {
        let rule = RULES.iter().find(|(m, _)| *m == method);
        return (
            rule.map_or(Need::Role(ClientRole::Driver), |(_, n)| *n),
            method,
        );
    }
    if path.starts_with("/grpc.health.v1.Health/")
        || path.starts_with("/grpc.reflection.v1.ServerReflection/")
        || path.starts_with("/grpc.reflection.v1alpha.ServerReflection/")
    {
        return (Need::Role(ClientRole::Viewer), path);
    }
    (Need::Role(ClientRole::Driver), path)
}

/// An Attach frame, for [`frame_need`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Subscribe,
    Create,
    Send,
    Answer,
    Cancel,
    Budget,
}

/// The least role an Attach frame needs, and what it is called in a
/// refusal.
pub fn frame_need(frame: FrameKind) -> (ClientRole, &'static str) {
    match frame {
        FrameKind::Subscribe => (ClientRole::Viewer, "the Attach `subscribe` frame"),
        FrameKind::Create => (ClientRole::Driver, "the Attach `create` frame"),
        FrameKind::Send => (ClientRole::Driver, "the Attach `send` frame"),
        FrameKind::Answer => (ClientRole::Approver, "the Attach `answer` frame"),
        FrameKind::Cancel => (ClientRole::Driver, "the Attach `cancel` frame"),
        FrameKind::Budget => (ClientRole::Driver, "the Attach `budget` frame"),
    }
}

/// What a role may not do, for refusals.
fn lacks(role: ClientRole) -> &'static str {
    match role {
        ClientRole::Viewer => "a viewer sees everything and changes nothing",
        ClientRole::Approver => {
            "an approver may answer permission requests but not send messages, cancel or change settings"
        }
        ClientRole::Driver => "a driver may do everything but manage tokens and trust",
    }
}

/// Refuses `what` to a client whose role is `role` when it needs `needed`:
/// PERMISSION_DENIED naming both and what the role lacks.
pub fn check_role(role: ClientRole, needed: ClientRole, what: &str) -> Result<(), Status> {
    if role.allows(needed) {
        return Ok(());
    }
    let article = if role == ClientRole::Approver {
        "an"
    } else {
        "a"
    };
    Err(Status::permission_denied(format!(
        "{what} needs the {needed} role; this client is {article} {role} ({})",
        lacks(role)
    )))
}

/// Where a connection comes from: tonic's connect info of the daemon's
/// connections (see `grpc::Conn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// The Unix socket (the peer's uid was checked on accept).
    Local,
    /// The TCP listener, after the TLS handshake.
    Remote(SocketAddr),
}

/// Who is calling, as the access layer established it; every request the
/// service sees carries one in its extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
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
pub struct Session {
    id: String,
    name: String,
    revoked: CancellationToken,
    expires_at_ms: Option<i64>,
    clock: Clock,
}

impl PartialEq for Session {
    fn eq(&self, other: &Session) -> bool {
        self.id == other.id
    }
}

impl Eq for Session {}

impl Session {
    /// The token's id.
    pub fn token_id(&self) -> &str {
        &self.id
    }

    /// UNAUTHENTICATED once the token was revoked or expired.
    pub fn check(&self) -> Result<(), Status> {
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
    pub async fn ended(&self) -> Status {
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
pub async fn session_ended(session: Option<&Session>) -> Status {
    match session {
        Some(session) => session.ended().await,
        None => std::future::pending().await,
    }
}

/// [`Session::check`] of a caller that has a session.
pub fn session_check(session: Option<&Session>) -> Result<(), Status> {
    session.map_or(Ok(()), Session::check)
}

impl Caller {
    /// A client of this caller as conversations record it: the given
    /// `name` (else the metadata's, else the token's, else "local"), with
    /// the role `role` (at most the caller's).
    pub fn client(&self, id: String, name: &str, asked: Option<ClientRole>) -> ClientInfo {
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
pub fn display_name(name: &str) -> String {
    name.trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect()
}

/// Failed attempts of one address.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    since: Instant,
}

/// Counts failed authentications per address (the IP, not the port).
#[derive(Debug, Default)]
pub struct RateLimit {
    failures: Mutex<HashMap<IpAddr, Failures>>,
}

impl RateLimit {
    /// Refuses an address that failed [`MAX_FAILURES`] times within the
    /// window, saying when it may try again.
    pub fn check(&self, ip: IpAddr, now: Instant) -> Result<(), Status> {
        let Ok(mut failures) = self.failures.lock() else {
            return Err(Status::internal("the rate limiter's lock is poisoned"));
        };
        if let Some(f) = failures.get(&ip) {
            let age = now.saturating_duration_since(f.since);
            if age >= FAILURE_WINDOW {
                failures.remove(&ip);
            } else if f.count >= MAX_FAILURES {
                let wait = (FAILURE_WINDOW - age).as_secs().max(1);
                return Err(Status::resource_exhausted(format!(
                    "too many failed authentication attempts from {ip} ({} within {} s); try again in {wait} s",
                    f.count,
                    FAILURE_WINDOW.as_secs()
                )));
            }
        }
        Ok(())
    }

    /// Counts a failed attempt of `ip`.
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        if let Ok(mut failures) = self.failures.lock() {
            let f = failures.entry(ip).or_insert(Failures {
                count: 0,
                since: now,
            });
            if now.saturating_duration_since(f.since) >= FAILURE_WINDOW {
                *f = Failures {
                    count: 0,
                    since: now,
                };
            }
            f.count += 1;
            // Forget addresses whose window has passed, so the map stays
            // as small as the set of recent offenders.
            if failures.len() > 1024 {
                failures.retain(|_, f| now.saturating_duration_since(f.since) < FAILURE_WINDOW);
            }
        }
    }
}

/// The TCP listener as clients are told about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listening {
    pub address: String,
    /// "SHA256:<64 hex digits>" of its certificate.
    pub fingerprint: String,
}

/// Tokens, rate limiting and the listener's identity, shared by the access
/// layer and the token RPCs.
#[derive(Debug)]
pub struct Access {
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
pub fn hex(bytes: &[u8]) -> String {
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
    pub fn new(store: Store, clock: Clock, listening: Option<Listening>) -> Access {
        Access {
            store,
            clock,
            limit: RateLimit::default(),
            revoked: Mutex::new(HashMap::new()),
            listening,
        }
    }

    /// Makes a token; returns it as stored and its text (shown once).
    pub fn create(
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
    pub fn tokens(&self) -> Result<Vec<TokenRecord>, Status> {
        self.store
            .tokens()
            .map_err(|e| Status::internal(format!("cannot read the tokens: {e}")))
    }

    /// Revokes the token whose id starts with `prefix` (unique).
    pub fn revoke(&self, prefix: &str) -> Result<TokenRecord, Status> {
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
    pub async fn flush(&self) -> Result<(), Status> {
        self.store
            .flush()
            .await
            .map_err(|e| Status::internal(format!("cannot store the token: {e}")))
    }

    /// The caller of a request from `peer` carrying `authorization`.
    pub fn authenticate(
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

/// The layer in front of every service: authenticates each request,
/// refuses one its caller may not make, and hands the [`Caller`] on in the
/// request's extensions.
#[derive(Debug, Clone)]
pub struct AccessLayer {
    access: Arc<Access>,
}

impl AccessLayer {
    pub fn new(access: Arc<Access>) -> AccessLayer {
        AccessLayer { access }
    }
}

impl<S> tower::Layer<S> for AccessLayer {
    type Service = AccessService<S>;

    fn layer(&self, inner: S) -> AccessService<S> {
        AccessService {
            inner,
            access: self.access.clone(),
        }
    }
}

/// See [`AccessLayer`].
#[derive(Debug, Clone)]
pub struct AccessService<S> {
    inner: S,
    access: Arc<Access>,
}

/// The caller of `request`, or why it may not call.
fn admit(access: &Access, request: &http::Request<Body>) -> Result<Caller, Status> {
    let Some(peer) = request
        .extensions()
        .get::<super::ConnInfo>()
        .map(|info| info.peer)
    else {
        return Err(Status::internal("a request from an unknown connection"));
    };
    let name = request
        .headers()
        .get(CLIENT_NAME_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(display_name);
    let caller = access.authenticate(
        peer,
        request.headers().get(http::header::AUTHORIZATION),
        name,
    )?;
    let (need, what) = need(request.uri().path());
    match need {
        Need::Role(role) => check_role(caller.role, role, what)?,
        Need::Local if caller.remote.is_some() => {
            return Err(Status::permission_denied(format!(
                "{what} is served on the local socket only: a remote client (role {}) cannot manage tokens or trust",
                caller.role
            )));
        }
        Need::Local => {}
    }
    Ok(caller)
}

impl<S> tower::Service<http::Request<Body>> for AccessService<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<http::Response<Body>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // A remote connection is busy while this call is in progress: until
        // its response's body ends (or the call is dropped unanswered).
        let busy = request
            .extensions()
            .get::<super::ConnInfo>()
            .and_then(|info| info.activity.as_ref())
            .map(|activity| activity.call());
        match admit(&self.access, &request) {
            Ok(caller) => {
                request.extensions_mut().insert(caller);
                // The clone that was made ready is the one that serves.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                let call = inner.call(request);
                match busy {
                    None => Box::pin(call),
                    Some(busy) => Box::pin(async move {
                        let response = call.await?;
                        Ok(response.map(|body| Body::new(Busy { body, _busy: busy })))
                    }),
                }
            }
            Err(status) => Box::pin(async move { Ok(status.into_http()) }),
        }
    }
}

/// A response body that keeps its connection counted busy until it ends.
struct Busy {
    body: Body,
    _busy: super::limits::CallGuard,
}

impl http_body::Body for Busy {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Status>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The RPCs the proto declares.
    fn proto_rpcs() -> BTreeSet<String> {
        let proto = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../proto/agent/v1/agent.proto");
        let text = std::fs::read_to_string(proto).unwrap();
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("rpc "))
            .map(|l| l.split('(').next().unwrap().trim().to_string())
            .collect()
    }

    #[test]
    fn every_rpc_has_exactly_one_rule() {
        let rpcs = proto_rpcs();
        assert!(rpcs.len() > 20, "the proto was read: {rpcs:?}");
        let ruled: Vec<&str> = RULES.iter().map(|(m, _)| *m).collect();
        let unique: BTreeSet<String> = ruled.iter().map(|m| m.to_string()).collect();
        assert_eq!(unique.len(), ruled.len(), "a method is listed twice");
        assert_eq!(unique, rpcs, "the rule table and the proto's RPCs differ");
    }

    #[test]
    fn the_rule_table_says_what_each_role_may_call() {
        use ClientRole::*;
        let may =
            |role: ClientRole, method: &str| match need(&format!("{SERVICE_PREFIX}{method}")).0 {
                Need::Role(r) => role.allows(r),
                Need::Local => false,
            };
        for method in [
            "ListConversations",
            "GetConversation",
            "Attach",
            "ReadShellOutput",
            "GetAudit",
            "GetUsage",
        ] {
            assert!(may(Viewer, method), "a viewer sees {method}");
        }
        for method in [
            "SendMessage",
            "CancelConversation",
            "AnswerPermission",
            "UpdateConversation",
            "KillShell",
            "CreateConversation",
            "CompactConversation",
            "ContinueConversation",
            "DropQueuedMessage",
            "ImportConversations",
            "AnswerBudget",
        ] {
            assert!(!may(Viewer, method), "a viewer may not call {method}");
        }
        assert!(may(Approver, "AnswerPermission"));
        for method in [
            "SendMessage",
            "CancelConversation",
            "UpdateConversation",
            "KillShell",
            "CreateConversation",
            "AnswerBudget",
        ] {
            assert!(!may(Approver, method), "an approver may not call {method}");
            assert!(may(Driver, method), "a driver may call {method}");
        }
        for method in [
            "CreateToken",
            "ListTokens",
            "RevokeToken",
            "SetDirectoryTrust",
        ] {
            assert_eq!(need(&format!("{SERVICE_PREFIX}{method}")).0, Need::Local);
        }
        // Nothing is open by omission.
        assert_eq!(need("/agent.v1.AgentService/Nope").0, Need::Role(Driver));
        assert_eq!(need("/other.Service/Call").0, Need::Role(Driver));
        assert_eq!(need("/grpc.health.v1.Health/Check").0, Need::Role(Viewer));
    }

    #[test]
    fn frames_need_what_their_unary_forms_need() {
        let unary = |m: &str| match need(&format!("{SERVICE_PREFIX}{m}")).0 {
            Need::Role(r) => r,
            Need::Local => unreachable!(),
        };
        assert_eq!(frame_need(FrameKind::Send).0, unary("SendMessage"));
        assert_eq!(frame_need(FrameKind::Answer).0, unary("AnswerPermission"));
        assert_eq!(frame_need(FrameKind::Cancel).0, unary("CancelConversation"));
        assert_eq!(frame_need(FrameKind::Subscribe).0, unary("Attach"));
        assert_eq!(frame_need(FrameKind::Create).0, unary("CreateConversation"));
    }

    #[test]
    fn a_refusal_names_the_rule_and_the_role() {
        let refused =
            check_role(ClientRole::Viewer, ClientRole::Driver, "SendMessage").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            refused.message(),
            "SendMessage needs the driver role; this client is a viewer (a viewer sees everything and changes nothing)"
        );
        assert!(check_role(ClientRole::Approver, ClientRole::Approver, "x").is_ok());
    }

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

    #[test]
    fn an_address_that_keeps_failing_is_refused_until_its_window_passes() {
        let limit = RateLimit::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..MAX_FAILURES {
            assert!(limit.check(ip, t0).is_ok());
            limit.failed(ip, t0);
        }
        let refused = limit.check(ip, t0 + Duration::from_secs(1)).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("try again in 59 s"),
            "{}",
            refused.message()
        );
        assert!(
            limit.check(other, t0).is_ok(),
            "other addresses are not affected"
        );
        assert!(limit.check(ip, t0 + FAILURE_WINDOW).is_ok());
    }

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
