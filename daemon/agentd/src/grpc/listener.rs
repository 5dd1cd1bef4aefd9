//! The Unix socket listener and its security: a private directory, a 0600
//! socket, stale-socket detection, and a peer-uid check on every connection.

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why the daemon cannot listen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListenError {
    /// A directory that other users could enter or change.
    #[error(
        "{what} {path} must be a directory owned by you (uid {uid}) with mode 0700; it is owned by uid {owner} with mode {mode:o}. Fix it with `chmod 700 {path}` or choose another {option}"
    )]
    Insecure {
        /// Which directory.
        what: &'static str,
        /// The option that chooses another one.
        option: &'static str,
        path: PathBuf,
        /// Our uid.
        uid: u32,
        owner: u32,
        mode: u32,
    },
    /// Another daemon answers on the socket.
    #[error("another agentd is already listening on {0}")]
    AlreadyRunning(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket; remove it or choose another --socket")]
    NotASocket(PathBuf),
    #[error("cannot listen on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ListenError + '_ {
    move |source| ListenError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether a connecting peer may talk to this daemon: only our own user.
pub(crate) fn peer_allowed(peer_uid: u32, our_uid: u32) -> bool {
    peer_uid == our_uid
}

/// Checks that `dir` is ours and private (no group/other permissions).
/// One that is not is refused, not fixed (as ssh does): its contents may
/// already have been read or planted, and only its owner can tell.
pub(crate) fn check_private_dir(dir: &Path, what: &'static str) -> Result<(), ListenError> {
    let meta = std::fs::metadata(dir).map_err(io_err(dir))?;
    let uid = nix::unistd::geteuid().as_raw();
    let mode = meta.permissions().mode() & 0o7777;
    if !meta.is_dir() || meta.uid() != uid || mode & 0o077 != 0 {
        return Err(ListenError::Insecure {
            what,
            option: if what == DATA_DIRECTORY {
                "--data-dir"
            } else {
                "--socket"
            },
            path: dir.to_path_buf(),
            uid,
            owner: meta.uid(),
            mode,
        });
    }
    Ok(())
}

/// What [`check_private_dir`] calls the daemon's data directory.
pub(crate) const DATA_DIRECTORY: &str = "data directory";

/// Creates `dir` (and missing parents) with mode 0700.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), ListenError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))
}

/// Binds the socket at `path` securely. When `runtime_dir` is given (the
/// default socket under `$XDG_RUNTIME_DIR`), that directory must itself be
/// the user's own 0700 directory, or we fail closed.
pub(crate) fn bind(
    path: &Path,
    runtime_dir: Option<&Path>,
) -> Result<tokio::net::UnixListener, ListenError> {
    if let Some(rt) = runtime_dir {
        check_private_dir(rt, "runtime directory")?;
    }
    let parent = path.parent().unwrap_or(Path::new("/"));
    if !parent.exists() {
        create_private_dir(parent)?;
    }
    check_private_dir(parent, "socket directory")?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(ListenError::NotASocket(path.to_path_buf()));
            }
            // Try to connect before unlinking: a live daemon answers.
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(stream) if listener_owner_alive(&stream) => {
                    return Err(ListenError::AlreadyRunning(path.to_path_buf()));
                }
                Ok(_) => tracing::info!(
                    "removing stale socket {}: the daemon that listened on it is gone \
                     (a process it was starting still held the socket)",
                    path.display()
                ),
                Err(_) => tracing::info!("removing stale socket {}", path.display()),
            }
            std::fs::remove_file(path).map_err(io_err(path))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(path)(e)),
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(io_err(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_err(path))?;
    Ok(listener)
}

/// Whether the process that made the listening socket `stream` is
/// connected to still runs. A daemon killed while it was starting a
/// command leaves the socket open in the half-started child until that
/// child's `exec` closes it: connecting then succeeds although no daemon
/// will ever answer. (The credentials of a connection to a listening
/// socket are those of the process that called `listen`.) When they cannot
/// be read, the socket is taken to be live.
fn listener_owner_alive(stream: &std::os::unix::net::UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let Ok(creds) = getsockopt(stream, PeerCredentials) else {
        return true;
    };
    let pid = nix::unistd::Pid::from_raw(creds.pid());
    !matches!(
        nix::sys::signal::kill(pid, None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// The accepted connections of `listener` whose peer is our own user;
/// others are logged and dropped. Accepting never fails: when it does (no
/// file descriptor left), the loop pauses, longer each time, and tries
/// again; it never spins.
pub(crate) fn incoming(
    listener: tokio::net::UnixListener,
) -> impl tokio_stream::Stream<Item = Result<tokio::net::UnixStream, std::io::Error>> {
    let our_uid = nix::unistd::geteuid().as_raw();
    let backoff = super::limits::Backoff::new("the Unix socket");
    futures::stream::unfold(
        (listener, backoff),
        move |(listener, mut backoff)| async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => {
                        backoff.accepted();
                        stream
                    }
                    Err(e) => {
                        tokio::time::sleep(backoff.failed(&e)).await;
                        continue;
                    }
                };
                match stream.peer_cred() {
                    Ok(cred) if peer_allowed(cred.uid(), our_uid) => {
                        return Some((Ok(stream), (listener, backoff)));
                    }
                    Ok(cred) => tracing::warn!(
                        "refused a connection from uid {} (not our user)",
                        cred.uid()
                    ),
                    Err(e) => tracing::warn!("refused a connection whose peer is unknown: {e}"),
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_uid_is_allowed() {
        assert!(peer_allowed(1000, 1000));
        assert!(!peer_allowed(0, 1000));
        assert!(!peer_allowed(1001, 1000));
    }

    #[tokio::test]
    async fn socket_is_0600_in_a_0700_directory() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("run/agentd.sock");
        let _l = bind(&sock, None).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(sock.parent().unwrap()), 0o700);
        assert_eq!(mode(&sock), 0o600);
    }

    #[tokio::test]
    async fn a_group_readable_socket_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = bind(&run.join("s.sock"), None).unwrap_err();
        assert!(matches!(err, ListenError::Insecure { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        create_private_dir(&run).unwrap();
        let sock = run.join("s.sock");
        drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        let live = bind(&sock, None).unwrap();
        let err = bind(&sock, None).unwrap_err();
        assert!(matches!(err, ListenError::AlreadyRunning(_)), "{err}");
        drop(live);
    }

    #[test]
    fn a_listening_socket_is_traced_to_the_process_that_listens() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let stream = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
        let creds = getsockopt(&stream, PeerCredentials).unwrap();
        assert_eq!(creds.pid(), std::process::id() as i32);
        assert!(listener_owner_alive(&stream));
    }
}
