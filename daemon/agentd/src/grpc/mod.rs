//! The gRPC edge: the service, the Unix socket listener and its security,
//! the optional TCP listener (TLS, bearer tokens, roles: `remote.rs`,
//! `access/`), and the conversion between wire and daemon types.
//!
//! Architecture invariant: prost types stop here. `service/` unpacks
//! requests and builds responses, `outbox.rs` merges wire frames, and
//! `convert/` is the one place that converts between wire types and the
//! daemon's own (messages, states, events, answers); nothing outside
//! `grpc/` names a generated type (the test below checks it).

pub(crate) mod access;
mod admission;
mod authority;
pub(crate) mod convert;
mod hpack;
mod info;
pub(crate) mod limits;
pub(crate) mod listener;
mod outbox;
pub(crate) mod remote;
pub(crate) mod service;
mod wire;

use crate::runtime::Manager;
use agent_proto::v1::agent_service_server::AgentServiceServer;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

/// How long the conversations and the server may take to stop, together,
/// before the server is dropped (the daemon's tasks then get
/// `tasks::DRAIN_GRACE`).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Errors of the gRPC server.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// Reflection could not be set up.
    #[error("gRPC reflection failed: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The server's task panicked or was cancelled.
    #[error("gRPC server stopped: {0}")]
    Stopped(String),
}

/// Serves the agent service (plus health and reflection) on `incoming`
/// (the Unix socket) and `remote` (the TCP listener, when there is one)
/// until `shutdown` completes; then ends every stream, stops the actors
/// (their persisted state is kept for recovery) and returns within a
/// bounded time even if clients hold streams open. Every request passes
/// `access` first (see `access.rs`).
pub(crate) async fn serve<S>(
    incoming: S,
    remote: Option<(remote::RemoteListener, remote::Limits)>,
    access: Arc<access::Access>,
    manager: Arc<Manager>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError>
where
    S: tokio_stream::Stream<Item = Result<tokio::net::UnixStream, std::io::Error>> + Send + 'static,
{
    let stop = CancellationToken::new();
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<AgentServiceServer<service::Service>>()
        .await;
    // Both versions of reflection: grpcurl asks for v1, but the reflection
    // clients on PyPI and npm (grpcio-reflection, grpc-js-reflection-client)
    // still ask for v1alpha only.
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(agent_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(agent_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let limits = manager.shared().config.grpc.clone();
    let svc = service::Service::new(manager.clone(), stop.clone(), access.clone());
    let remote: Pin<Box<dyn tokio_stream::Stream<Item = Result<Conn, std::io::Error>> + Send>> =
        match remote {
            Some((listener, limits)) => Box::pin(listener.incoming(limits)),
            None => Box::pin(tokio_stream::pending()),
        };
    let incoming = tokio_stream::StreamExt::merge(lenient(incoming), remote);
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .max_frame_size(Some(limits.max_frame_bytes))
        .layer(access::AccessLayer::new(access))
        .add_service(health_service)
        .add_service(reflection)
        .add_service(reflection_v1alpha)
        .add_service(wire::Intercept::new(
            AgentServiceServer::new(svc.clone())
                .max_decoding_message_size(limits.max_message_bytes),
            svc,
            limits.max_message_bytes,
        ))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = server_stopped.await;
        });
    // On the runtime's workers, not on the thread that waits for the
    // daemon to end: there, every connection was accepted on that thread
    // (woken by the worker that saw the socket ready) and handed back to a
    // worker, two thread switches before a client's first request was read.
    // Dropped (on the timeout below, or with this future), it stops the
    // server and every connection, as dropping the server's future did.
    let mut server =
        tokio_util::task::AbortOnDropHandle::new(crate::tasks::spawn("gRPC server", server));
    tokio::select! {
        r = &mut server => return served(r),
        _ = shutdown => {}
    }
    tracing::info!("shutting down");
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    stop.cancel();
    manager.shutdown(deadline).await;
    let _ = stop_server.send(());
    match tokio::time::timeout_at(deadline, &mut server).await {
        Ok(r) => served(r),
        Err(_) => {
            tracing::warn!("clients held connections open; stopped without waiting for them");
            Ok(())
        }
    }
}

/// How the server's task ended.
fn served(
    joined: Result<Result<(), tonic::transport::Error>, tokio::task::JoinError>,
) -> Result<(), ServeError> {
    match joined {
        Ok(served) => Ok(served?),
        Err(e) => Err(ServeError::Stopped(e.to_string())),
    }
}

/// The accepted connections, each read through [`authority::LenientAuthority`]
/// so that stock clients are served whatever `:authority` they send.
fn lenient<S>(incoming: S) -> impl tokio_stream::Stream<Item = Result<Conn, std::io::Error>>
where
    S: tokio_stream::Stream<Item = Result<tokio::net::UnixStream, std::io::Error>>,
{
    use tokio_stream::StreamExt;
    incoming.map(|conn| conn.map(|c| Conn::Local(authority::LenientAuthority::new(c))))
}

/// A connection the daemon serves: on the Unix socket, or over TCP after
/// the TLS handshake. Its connect info ([`ConnInfo`]) tells the access
/// layer which.
pub(crate) enum Conn {
    Local(authority::LenientAuthority<tokio::net::UnixStream>),
    Remote {
        tls: Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>,
        peer: std::net::SocketAddr,
        /// Closes the connection once it has had no call for the idle
        /// timeout.
        idle: limits::IdleTimer,
        /// Its place among `remote.max_connections`, given back when the
        /// connection is dropped.
        _slot: tokio::sync::OwnedSemaphorePermit,
    },
}

/// What the access layer knows of a request's connection.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    pub peer: access::Peer,
    /// A remote connection's calls in progress (for its idle timeout).
    pub activity: Option<Arc<limits::Activity>>,
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            Conn::Local(_) => ConnInfo {
                peer: access::Peer::Local,
                activity: None,
            },
            Conn::Remote { peer, idle, .. } => ConnInfo {
                peer: access::Peer::Remote(*peer),
                activity: Some(idle.activity().clone()),
            },
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Local(c) => Pin::new(c).poll_read(cx, buf),
            Conn::Remote { tls, idle, .. } => match Pin::new(tls.as_mut()).poll_read(cx, buf) {
                Poll::Pending if idle.expired(cx) => {
                    // Read as ended: the server closes the connection.
                    tracing::debug!("closing a remote connection idle for the idle timeout");
                    Poll::Ready(Ok(()))
                }
                other => other,
            },
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Local(c) => Pin::new(c).poll_write(cx, buf),
            Conn::Remote { tls, .. } => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Local(c) => Pin::new(c).poll_write_vectored(cx, bufs),
            Conn::Remote { tls, .. } => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Local(c) => c.is_write_vectored(),
            Conn::Remote { tls, .. } => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Local(c) => Pin::new(c).poll_flush(cx),
            Conn::Remote { tls, .. } => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Local(c) => Pin::new(c).poll_shutdown(cx),
            Conn::Remote { tls, .. } => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every `.rs` file under `dir`, recursively.
    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn no_module_outside_grpc_names_a_generated_type() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let grpc = src.join("grpc");
        let mut offenders = Vec::new();
        for file in files.iter().filter(|f| !f.starts_with(&grpc)) {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                if line.contains("agent_proto::v1") || line.contains("pb::") {
                    offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "prost types outside grpc/:\n{}",
            offenders.join("\n")
        );
        assert!(files.len() > 20, "the walk found the sources");
    }
}
