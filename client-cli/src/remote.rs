//! Reaching a daemon on another machine: `agent --remote HOST:PORT
//! --token-file F --fingerprint SHA256:…` speaks gRPC over TLS to the
//! daemon's TCP listener (`agentd --listen`), trusting exactly the
//! certificate whose SHA-256 fingerprint was pinned (the daemon prints it
//! at start and in `agent token ls`), and sends the bearer token with
//! every call.
//!
//! The choice is made once per process, from the global flags, before any
//! command connects ([`set`]): every command, and every reconnect of a
//! session, goes to the same place.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};
use tonic::transport::{Channel, Endpoint};

use crate::error::CliError;

/// A daemon reached over TCP.
#[derive(Clone)]
pub struct Remote {
    /// HOST:PORT.
    pub address: String,
    /// The bearer token's text.
    token: String,
    /// The SHA-256 of the certificate the daemon must present.
    fingerprint: [u8; 32],
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("address", &self.address)
            .field("fingerprint", &show(&self.fingerprint))
            .finish_non_exhaustive()
    }
}

/// Where this process's commands connect: `None` is the local socket.
static TARGET: RwLock<Option<Arc<Remote>>> = RwLock::new(None);
/// The name this client gives the daemon, when the user chose one.
static NAME: RwLock<Option<String>> = RwLock::new(None);

/// Makes every later connection of this process go to `remote` (or to the
/// local socket), naming this client `name` when given.
pub fn set(remote: Option<Remote>, name: Option<String>) {
    if let Ok(mut target) = TARGET.write() {
        *target = remote.map(Arc::new);
    }
    if let Ok(mut n) = NAME.write() {
        *n = name.filter(|n| !n.trim().is_empty());
    }
}

/// The remote daemon this process talks to, if any.
pub fn current() -> Option<Arc<Remote>> {
    TARGET.read().ok().and_then(|t| t.clone())
}

/// The name the user gave this client, if any.
pub fn chosen_name() -> Option<String> {
    NAME.read().ok().and_then(|n| n.clone())
}

/// "SHA256:<hex>".
fn show(fingerprint: &[u8; 32]) -> String {
    let mut out = String::from("SHA256:");
    for b in fingerprint {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Reads a fingerprint as the daemon prints it: `SHA256:` and 64 hex
/// digits, colons between bytes and either case accepted.
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32], String> {
    let trimmed = text.trim();
    let hex = trimmed
        .strip_prefix("SHA256:")
        .or_else(|| trimmed.strip_prefix("sha256:"))
        .unwrap_or(trimmed);
    let digits: Vec<u8> = hex.bytes().filter(|b| *b != b':').collect();
    let bad = || {
        format!(
            "--fingerprint {trimmed:?} is not a SHA-256 fingerprint: expected SHA256: and 64 hex digits, as `agentd` prints at start and `agent token ls` shows"
        )
    };
    if digits.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).map_err(|_| bad())?;
        out[i] = u8::from_str_radix(text, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

impl Remote {
    /// The remote daemon at `address`, its token read from `token_file`
    /// (whitespace around it ignored), its certificate pinned by
    /// `fingerprint`.
    pub fn new(address: &str, token_file: &Path, fingerprint: &str) -> Result<Remote, CliError> {
        let fingerprint = parse_fingerprint(fingerprint).map_err(CliError::Input)?;
        check_private(token_file)?;
        let token = std::fs::read_to_string(token_file).map_err(|e| {
            CliError::Input(format!(
                "cannot read the token file {}: {e}",
                token_file.display()
            ))
        })?;
        let token = token.trim().to_string();
        if token.is_empty() {
            return Err(CliError::Input(format!(
                "the token file {} is empty",
                token_file.display()
            )));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(CliError::Input(format!(
                "the token file {} holds something that is not a token",
                token_file.display()
            )));
        }
        Ok(Remote {
            address: address.trim().to_string(),
            token,
            fingerprint,
        })
    }

    /// The `authorization` header's value.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// A channel to the daemon over TLS, its certificate checked against
    /// the pinned fingerprint; the error says why not.
    pub async fn connect(&self) -> Result<Channel, String> {
        pinned_channel(&self.address, self.fingerprint).await
    }
}

/// Refuses a token file that others may read or change, as ssh refuses
/// such a private key: the token is a password, and anyone who can read
/// the file can act with its role.
fn check_private(token_file: &Path) -> Result<(), CliError> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(token_file) else {
        // Reading it says why.
        return Ok(());
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        let path = token_file.display();
        return Err(CliError::Input(format!(
            "the token file {path} is accessible by others (mode {mode:03o}): anyone who can read it can act with its token. Run `chmod 600 {path}` (and revoke the token if others may have read it)"
        )));
    }
    Ok(())
}

/// A channel to the daemon at `address` over TLS, trusting only the
/// certificate with `fingerprint` (as the daemon prints it). It carries no
/// token: a [`crate::Client`] adds it to every call.
pub async fn channel(address: &str, fingerprint: &str) -> Result<Channel, String> {
    pinned_channel(address.trim(), parse_fingerprint(fingerprint)?).await
}

async fn pinned_channel(address: &str, fingerprint: [u8; 32]) -> Result<Channel, String> {
    let connector = pinned_connector(fingerprint)?;
    let address = address.to_string();
    // The URI is required by the API; the connector does the connecting
    // (TCP, then TLS).
    Endpoint::from_static("http://agentd.remote")
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_| {
            let address = address.clone();
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(&address).await?;
                let tls = pinned_handshake(&connector, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
        .map_err(|e| crate::connect::error_chain(&e))
}

/// TLS (ALPN `h2`) trusting only the certificate with `fingerprint`.
fn pinned_connector(fingerprint: [u8; 32]) -> Result<tokio_rustls::TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(Pinned {
        fingerprint,
        provider: provider.clone(),
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

async fn pinned_handshake(
    connector: &tokio_rustls::TlsConnector,
    tcp: tokio::net::TcpStream,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let _ = tcp.set_nodelay(true);
    // The name is not checked (the fingerprint is); rustls needs one all
    // the same.
    let name = ServerName::try_from("agentd")
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    connector.connect(name, tcp).await
}

/// The TLS handshake alone on a connection made already, trusting only
/// the certificate with `fingerprint` (as the daemon prints it).
pub async fn handshake(
    tcp: tokio::net::TcpStream,
    fingerprint: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let connector =
        pinned_connector(parse_fingerprint(fingerprint).map_err(std::io::Error::other)?)
            .map_err(std::io::Error::other)?;
    pinned_handshake(&connector, tcp).await
}

/// Trusts exactly the certificate with the pinned SHA-256, and checks that
/// the server holds its key (the handshake's signatures).
#[derive(Debug)]
struct Pinned {
    fingerprint: [u8; 32],
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        if got == self.fingerprint {
            return Ok(ServerCertVerified::assertion());
        }
        Err(rustls::Error::General(format!(
            "the daemon's certificate has fingerprint {}, not the pinned {}: refusing to talk to it (if the daemon's certificate changed on purpose, pin the new one)",
            show(&got),
            show(&self.fingerprint)
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_read_as_the_daemon_prints_them() {
        let hex = "ab".repeat(32);
        assert_eq!(parse_fingerprint(&format!("SHA256:{hex}")), Ok([0xab; 32]));
        let colons: Vec<String> = (0..32).map(|_| "AB".to_string()).collect();
        assert_eq!(parse_fingerprint(&colons.join(":")), Ok([0xab; 32]));
        assert!(parse_fingerprint("SHA256:abc").is_err());
        assert!(parse_fingerprint(&format!("SHA256:{}", "zz".repeat(32))).is_err());
        assert_eq!(show(&[0xab; 32]), format!("SHA256:{hex}"));
    }

    #[test]
    fn only_the_pinned_certificate_is_trusted() {
        let der = CertificateDer::from(vec![1u8, 2, 3]);
        let pinned = Pinned {
            fingerprint: Sha256::digest([1u8, 2, 3]).into(),
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        };
        let name = ServerName::try_from("agentd").unwrap();
        assert!(
            pinned
                .verify_server_cert(&der, &[], &name, &[], UnixTime::now())
                .is_ok()
        );
        let other = CertificateDer::from(vec![1u8, 2, 4]);
        let refused = pinned
            .verify_server_cert(&other, &[], &name, &[], UnixTime::now())
            .unwrap_err()
            .to_string();
        assert!(refused.contains("not the pinned SHA256:"), "{refused}");
    }

    #[test]
    fn a_token_file_is_read_trimmed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let file = dir.path().join("t");
        let fp = format!("SHA256:{}", "00".repeat(32));
        std::fs::write(&file, "agentd_abc\n").unwrap();
        let mode = |m| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(m)).unwrap();
        // Readable by others: refused, as ssh refuses such a key.
        for open in [0o644, 0o640, 0o604, 0o620] {
            mode(open);
            let refused = Remote::new("h:1", &file, &fp).unwrap_err().to_string();
            assert!(refused.contains("chmod 600"), "{refused}");
            assert!(refused.contains(&format!("mode {open:03o}")), "{refused}");
        }
        mode(0o600);
        let remote = Remote::new("h:1", &file, &fp).unwrap();
        assert_eq!(remote.authorization(), "Bearer agentd_abc");
        assert!(
            !format!("{remote:?}").contains("agentd_abc"),
            "the token is not printed"
        );
        std::fs::write(&file, "  \n").unwrap();
        assert!(Remote::new("h:1", &file, &fp).is_err());
        assert!(Remote::new("h:1", &dir.path().join("none"), &fp).is_err());
    }
}
