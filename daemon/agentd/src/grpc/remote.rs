//! The TCP listener (`agentd --listen ADDR:PORT`): TLS only, with a
//! certificate the daemon makes on first use (kept in the data directory,
//! so its fingerprint stays the same across restarts) or one configured.
//! Clients pin the certificate by its SHA-256 fingerprint; what a call may
//! do is the access layer's business (`access.rs`).

use super::Conn;
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

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; more connections wait to be accepted.
const MAX_HANDSHAKES: usize = 64;

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

impl RemoteListener {
    /// The connections that completed a TLS handshake. Handshakes run
    /// side by side (a slow or silent client holds up no other); one that
    /// fails (a plaintext client, a client that refused our certificate)
    /// or takes over 10 s is logged and dropped.
    pub fn incoming(self) -> impl tokio_stream::Stream<Item = Result<Conn, std::io::Error>> {
        let (tx, rx) = mpsc::channel(16);
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let (tcp, peer) = tokio::select! {
                    accepted = self.listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!("cannot accept a TCP connection: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                    _ = tx.closed() => return,
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = self.acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx
                                .send(Ok(Conn::Remote {
                                    tls: Box::new(tls),
                                    peer,
                                }))
                                .await;
                        }
                        Ok(Err(e)) => {
                            tracing::info!(peer = %peer, "TLS handshake failed: {e}");
                        }
                        Err(_) => {
                            tracing::info!(peer = %peer, "TLS handshake timed out");
                        }
                    }
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
