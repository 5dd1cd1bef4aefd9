//! The TCP listener (`agentd --listen ADDR:PORT`): TLS only, with a
//! certificate the daemon makes on first use (kept in the data directory,
//! so its fingerprint stays the same across restarts) or one configured.
//! Clients pin the certificate by its SHA-256 fingerprint; what a call may
//! do is the access layer's business (`access/`).
//!
//! Threat model. The Unix socket trusts the user (the peer's uid is checked
//! on every connection). This listener, off unless asked for, trusts nobody:
//! every request passes the access layer before any service sees it, health
//! and reflection included, and a method missing from the role table needs
//! a driver. It defends against a network attacker (TLS only, the
//! certificate pinned, plaintext unanswered); a caller without a valid
//! token (refused before any work; repeated failures from one address are
//! refused for a minute); a stolen token store (only SHA-256 hashes, compared
//! in constant time); a holder doing more than its role (every RPC and
//! Attach frame checked, and no remote caller mints tokens or trusts a
//! directory, since trust lets a project's hooks run commands); and
//! repudiation (the audit trail names who sent and answered, durably). It
//! does not defend against a token holder acting within its role, a
//! compromised machine or data directory (the key and hashes live there),
//! or a flood of connections beyond the limits of `limits.rs`. Tokens never
//! appear in logs, listings or the audit trail, only their id and name.

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
pub(crate) enum RemoteError {
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
pub(crate) struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// "SHA256:<64 hex digits>" of the first certificate.
    pub fingerprint: String,
    /// Set when the daemon's own certificate was made again because it
    /// did not name every name asked for: the names it lacked.
    pub remade_for: Option<Vec<String>>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// "SHA256:<hex>" of a certificate's DER bytes.
pub(crate) fn fingerprint(der: &[u8]) -> String {
    format!("SHA256:{}", super::access::hex(&Sha256::digest(der)))
}

/// The names the daemon's own certificate gives: `localhost`, `agentd`,
/// the listen address's host (its IP; for 0.0.0.0 or [::] this machine's
/// host name) and the configured `extra` ones.
pub(crate) fn cert_names(listen: &str, extra: &[String]) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "agentd".to_string()];
    let host = match listen.parse::<SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        }
        Ok(addr) => Some(addr.ip().to_string()),
        // HOST:PORT with a host name.
        Err(_) => listen
            .rsplit_once(':')
            .map(|(host, _)| host.trim_matches(|c| c == '[' || c == ']').to_string()),
    };
    for name in host.into_iter().chain(extra.iter().cloned()) {
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The configured certificate and key (PEM files), or the daemon's own
/// under `dir` (`cert.pem`, `key.pem` mode 0600, and `names`, the names it
/// gives), made on first use and again when it does not give all of
/// `names`.
pub(crate) fn identity(
    dir: &Path,
    configured: Option<(&Path, &Path)>,
    names: &[String],
) -> Result<Identity, RemoteError> {
    let mut remade_for = None;
    let (cert_path, key_path) = match configured {
        Some((c, k)) => (c.to_path_buf(), k.to_path_buf()),
        None => {
            let cert = dir.join("cert.pem");
            let key = dir.join("key.pem");
            if !cert.exists() || !key.exists() {
                generate(dir, &cert, &key, names)?;
            } else {
                // A certificate made before names were recorded gave these.
                let had = std::fs::read_to_string(dir.join(NAMES_FILE))
                    .unwrap_or_else(|_| "localhost\nagentd\n".to_string());
                let had: Vec<&str> = had.lines().map(str::trim).collect();
                let lacking: Vec<String> = names
                    .iter()
                    .filter(|n| !had.contains(&n.as_str()))
                    .cloned()
                    .collect();
                if !lacking.is_empty() {
                    generate(dir, &cert, &key, names)?;
                    remade_for = Some(lacking);
                }
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
        remade_for,
    })
}

/// Beside the daemon's own certificate: the names it gives, one a line.
const NAMES_FILE: &str = "names";

/// Makes a self-signed certificate giving `names` and its key, the key
/// readable by us only.
fn generate(dir: &Path, cert: &Path, key: &Path, names: &[String]) -> Result<(), RemoteError> {
    super::listener::create_private_dir(dir)
        .map_err(|e| RemoteError::Certificate(e.to_string()))?;
    let made = rcgen::generate_simple_self_signed(names.to_vec()).map_err(|e| {
        RemoteError::Certificate(format!(
            "cannot make a certificate for {}: {e}",
            names.join(", ")
        ))
    })?;
    write_private(
        key,
        made.signing_key.serialize_pem().as_bytes(),
        "private key",
    )?;
    write_private(cert, made.cert.pem().as_bytes(), "certificate")?;
    let mut listed = names.join("\n");
    listed.push('\n');
    write_private(
        &dir.join(NAMES_FILE),
        listed.as_bytes(),
        "certificate names",
    )?;
    tracing::info!(
        "made a self-signed TLS certificate in {} for {}",
        cert.display(),
        names.join(", ")
    );
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
pub(crate) struct RemoteListener {
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
pub(crate) async fn bind(address: &str, identity: Identity) -> Result<RemoteListener, RemoteError> {
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
pub(crate) struct Limits {
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
    pub(crate) fn new(config: &crate::config::RemoteSection, nofile: Option<u64>) -> Limits {
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
    pub(crate) fn incoming(
        self,
        limits: Limits,
    ) -> impl tokio_stream::Stream<Item = Result<Conn, std::io::Error>> {
        let (tx, rx) = mpsc::channel(16);
        let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
        let handshakes = Arc::new(limits::Handshakes::default());
        let tally = Arc::new(limits::Tally::default());
        crate::tasks::spawn("TCP accept loop", async move {
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
                crate::tasks::spawn("TLS handshake", async move {
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
        let names = cert_names("127.0.0.1:7443", &[]);
        let first = identity(&tls, None, &names).unwrap();
        let again = identity(&tls, None, &names).unwrap();
        assert!(again.remade_for.is_none());
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
            &names,
        )
        .unwrap();
        assert_eq!(configured.fingerprint, first.fingerprint);
        let missing = identity(
            dir.path(),
            Some((&dir.path().join("no.pem"), &tls.join("key.pem"))),
            &names,
        );
        assert!(missing.unwrap_err().to_string().contains("no.pem"));
    }

    /// Whether `der` holds the SAN of `ip` (context tag 7, its octets).
    fn names_ip(der: &[u8], ip: [u8; 4]) -> bool {
        let san = [0x87, 4, ip[0], ip[1], ip[2], ip[3]];
        der.windows(san.len()).any(|w| w == san)
    }

    /// Whether `der` holds the SAN of DNS name `name` (context tag 2).
    fn names_dns(der: &[u8], name: &str) -> bool {
        let mut san = vec![0x82, name.len() as u8];
        san.extend_from_slice(name.as_bytes());
        der.windows(san.len()).any(|w| w == san.as_slice())
    }

    #[test]
    fn the_certificate_names_the_listen_address_and_is_made_again_for_new_names() {
        let dir = tempfile::tempdir().unwrap();
        let tls = dir.path().join("tls");
        let names = cert_names("127.0.0.1:7443", &[]);
        assert_eq!(names, ["localhost", "agentd", "127.0.0.1"]);
        let first = identity(&tls, None, &names).unwrap();
        let der = first.chain[0].as_ref();
        assert!(names_ip(der, [127, 0, 0, 1]));
        assert!(names_dns(der, "localhost") && names_dns(der, "agentd"));
        // A configured name the certificate lacks: made again, saying so.
        let more = cert_names(
            "127.0.0.1:7443",
            &["work.example".to_string(), "192.0.2.7".to_string()],
        );
        let second = identity(&tls, None, &more).unwrap();
        assert_eq!(
            second.remade_for,
            Some(vec!["work.example".to_string(), "192.0.2.7".to_string()])
        );
        assert_ne!(second.fingerprint, first.fingerprint);
        let der = second.chain[0].as_ref();
        assert!(names_dns(der, "work.example") && names_ip(der, [192, 0, 2, 7]));
        // Fewer names than it gives: kept.
        let kept = identity(&tls, None, &names).unwrap();
        assert_eq!(kept.fingerprint, second.fingerprint);
        assert!(kept.remade_for.is_none());
        // A certificate made before names were recorded gave only
        // localhost and agentd.
        std::fs::remove_file(tls.join(NAMES_FILE)).unwrap();
        let old = identity(&tls, None, &names).unwrap();
        assert_eq!(old.remade_for, Some(vec!["127.0.0.1".to_string()]));
        // A wildcard address names this machine.
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert!(cert_names("0.0.0.0:7443", &[]).contains(&host.trim().to_string()));
        assert!(cert_names("[::]:7443", &[]).contains(&host.trim().to_string()));
        assert_eq!(cert_names("[::1]:7443", &[])[2], "::1");
        assert_eq!(cert_names("box.lan:7443", &[])[2], "box.lan");
    }
}
