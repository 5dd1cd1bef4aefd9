//! The TCP listener (`agentd --listen ADDR:PORT`): TLS only, with a
//! certificate the daemon makes on first use (kept in the data directory,
//! so its fingerprint stays the same across restarts) or one configured.
//! Clients pin the certificate by its SHA-256 fingerprint; what a call may
//! do is the access layer's business (`access.rs`).

use super::Conn;
use super::limits;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

/// Why the TCP listener cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("{what} {path}: {source}")]
    File {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Certificate(String),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
}

/// The listener's certificate chain, its key and its fingerprint.
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// "SHA256:<64 hex digits>" of the first certificate.
    pub fingerprint: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// "SHA256:<hex>" of a certificate's DER bytes.
pub fn fingerprint(der: &[u8]) -> String {
    format!("SHA256:{}", super::access::hex(&Sha256::digest(der)))
}

/// The configured certificate and key (PEM files), or the daemon's own
/// under `dir` (`cert.pem`, `key.pem` mode 0600), made on first use.
pub fn identity(dir: &Path, configured: Option<(&Path, &Path)>) -> Result<Identity, RemoteError> {
    let (cert_path, key_path) = match configured {
        Some((c, k)) => (c.to_path_buf(), k.to_path_buf()),
        None => {
            let cert = dir.join("cert.pem");
            let key = dir.join("key.pem");
            if !cert.exists() || !key.exists() {
                generate(dir, &cert, &key)?;
            }
            (cert, key)
        }
    };
    let chain = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            RemoteError::Certificate(format!(
                "cannot read the certificate {}: {e}",
                cert_path.display()
            ))
        })?;
    let Some(first) = chain.first() else {
        return Err(RemoteError::Certificate(format!(
            "{} holds no certificate",
            cert_path.display()
        )));
    };
    let fingerprint = fingerprint(first);
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| {
        RemoteError::Certificate(format!(
            "cannot read the private key {}: {e}",
            key_path.display()
        ))
    })?;
    Ok(Identity {
        chain,
        key,
        fingerprint,
    })
}

/// Makes a self-signed certificate and its key, the key readable by us
/// only.
fn generate(dir: &Path, cert: &Path, key: &Path) -> Result<(), RemoteError> {
    super::listener::create_private_dir(dir)
        .map_err(|e| RemoteError::Certificate(e.to_string()))?;
    let names = vec!["localhost".to_string(), "agentd".to_string()];
    let made = rcgen::generate_simple_self_signed(names)
        .map_err(|e| RemoteError::Certificate(format!("cannot make a certificate: {e}")))?;
    write_private(
        key,
        made.signing_key.serialize_pem().as_bytes(),
        "private key",
    )?;
    write_private(cert, made.cert.pem().as_bytes(), "certificate")?;
    tracing::info!("made a self-signed TLS certificate in {}", cert.display());
    Ok(())
}

fn write_private(path: &Path, bytes: &[u8], what: &'static str) -> Result<(), RemoteError> {
    let err = |source| RemoteError::File {
        what,
        path: path.to_path_buf(),
        source,
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    file.write_all(bytes).map_err(err)?;
    file.sync_all().map_err(err)
}

/// The bound TCP listener and its TLS acceptor.
pub struct RemoteListener {
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    /// The address it listens on (the port resolved when 0 was asked).
    pub address: SocketAddr,
}

impl std::fmt::Debug for RemoteListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteListener")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// Binds `address` and prepares TLS with `identity`: TLS 1.2 and 1.3 with
/// rustls' ring provider, HTTP/2 only (ALPN `h2`).
pub async fn bind(address: &str, identity: Identity) -> Result<RemoteListener, RemoteError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_no_client_auth()
                .with_single_cert(identity.chain, identity.key)
        })
        .map_err(|e| RemoteError::Certificate(format!("unusable certificate or key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| RemoteError::Bind {
            address: address.to_string(),
            source,
        })?;
    let address = listener.local_addr().map_err(|source| RemoteError::Bind {
        address: address.to_string(),
        source,
    })?;
    Ok(RemoteListener {
        listener,
        acceptor: TlsAcceptor::from(Arc::new(config)),
        address,
    })
}

/// How the TCP listener limits its clients (`[remote]`).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Remote connections at once, handshaking or served.
    pub max_connections: usize,
    /// From the connection to the end of the TLS handshake.
    pub handshake_timeout: Duration,
    /// How long a connection with no call in progress is kept.
    pub idle_timeout: Duration,
    /// Handshakes in progress per address.
    pub max_handshakes_per_address: usize,
}

impl Limits {
    /// The configured limits, the connection cap lowered to half of
    /// `nofile` (the open-file limit) when that is less.
    pub fn new(config: &crate::config::RemoteSection, nofile: Option<u64>) -> Limits {
        let max_connections = limits::connection_cap(config.max_connections, nofile);
        if max_connections < config.max_connections {
            tracing::warn!(
                "remote.max_connections lowered from {} to {max_connections}: the open-file limit is {}",
                config.max_connections,
                nofile.unwrap_or(0)
            );
        }
        Limits {
            max_connections,
            handshake_timeout: Duration::from_millis(config.handshake_timeout_ms),
            idle_timeout: Duration::from_millis(config.idle_timeout_ms),
            max_handshakes_per_address: config.max_handshakes_per_address,
        }
    }
}

impl RemoteListener {
    /// The connections that completed a TLS handshake. Handshakes run
    /// side by side (a slow or silent client holds up no other). A
    /// connection is closed at once when `max_connections` are open or its
    /// address has `max_handshakes_per_address` handshakes in progress,
    /// and when its handshake fails or takes longer than
    /// `handshake_timeout`; those are logged per address per minute.
    pub fn incoming(
        self,
        limits: Limits,
    ) -> impl tokio_stream::Stream<Item = Result<Conn, std::io::Error>> {
        let (tx, rx) = mpsc::channel(16);
        let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
        let handshakes = Arc::new(limits::Handshakes::default());
        let tally = Arc::new(limits::Tally::default());
        tokio::spawn(async move {
            let mut backoff = limits::Backoff::new("TCP");
            let mut report = tokio::time::interval(limits::REPORT_EVERY);
            report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let (tcp, peer) = tokio::select! {
                    accepted = self.listener.accept() => match accepted {
                        Ok(a) => {
                            backoff.accepted();
                            a
                        }
                        Err(e) => {
                            let pause = backoff.failed(&e);
                            tokio::select! {
                                _ = tokio::time::sleep(pause) => continue,
                                _ = tx.closed() => return,
                            }
                        }
                    },
                    _ = report.tick() => {
                        tally.report();
                        continue;
                    }
                    _ = tx.closed() => return,
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    tally.count(
                        peer.ip(),
                        "connections closed at once (remote.max_connections are open)",
                        &format!("{} open", limits.max_connections),
                    );
                    continue;
                };
                let Some(handshaking) =
                    handshakes.start(peer.ip(), limits.max_handshakes_per_address)
                else {
                    tally.count(
                        peer.ip(),
                        "connections closed at once (remote.max_handshakes_per_address in progress)",
                        &format!("{} handshakes in progress", limits.max_handshakes_per_address),
                    );
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = self.acceptor.clone();
                let tx = tx.clone();
                let tally = tally.clone();
                let (handshake_timeout, idle_timeout) =
                    (limits.handshake_timeout, limits.idle_timeout);
                tokio::spawn(async move {
                    let done = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await;
                    drop(handshaking);
                    let failed = match done {
                        Ok(Ok(tls)) => {
                            let idle =
                                limits::IdleTimer::new(limits::Activity::new(), idle_timeout);
                            let conn = Conn::Remote {
                                tls: Box::new(tls),
                                peer,
                                idle,
                                _slot: slot,
                            };
                            let _ = tx.send(Ok(conn)).await;
                            return;
                        }
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => {
                            format!("no handshake within {} ms", handshake_timeout.as_millis())
                        }
                    };
                    tally.count(peer.ip(), "failed TLS handshakes", &failed);
                });
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_is_made_once_and_its_key_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let tls = dir.path().join("tls");
        let first = identity(&tls, None).unwrap();
        let again = identity(&tls, None).unwrap();
        assert_eq!(first.fingerprint, again.fingerprint, "kept across restarts");
        assert!(first.fingerprint.starts_with("SHA256:"));
        assert_eq!(first.fingerprint.len(), "SHA256:".len() + 64);
        let mode = std::fs::metadata(tls.join("key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A configured pair is read as it is.
        let configured = identity(
            dir.path(),
            Some((&tls.join("cert.pem"), &tls.join("key.pem"))),
        )
        .unwrap();
        assert_eq!(configured.fingerprint, first.fingerprint);
        let missing = identity(
            dir.path(),
            Some((&dir.path().join("no.pem"), &tls.join("key.pem"))),
        );
        assert!(missing.unwrap_err().to_string().contains("no.pem"));
    }
}
