//! The data directory: the files agentd keeps for itself, its lock against
//! a second daemon, and the store, moved aside when it cannot be read.

use super::StartError;
use crate::config::Config;
use crate::grpc::listener;
use crate::llm::credentials::Sources;
use crate::store::Store;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::Path;

/// The data directory made (private to the user) and locked against a
/// second daemon, and its store opened: the lock, held for as long as the
/// daemon runs, the store, and what opening it has to say.
pub(super) async fn open_data_dir(
    data_dir: &Path,
    config: &Config,
) -> Result<(nix::fcntl::Flock<File>, Store, Vec<String>), StartError> {
    listener::create_private_dir(data_dir)?;
    // The store, checkpoint copies and command output live here: a
    // directory others can enter (one made before, or by someone else) is
    // refused like the socket's.
    listener::check_private_dir(data_dir, listener::DATA_DIRECTORY)?;
    let lock = lock_data_dir(data_dir).await?;
    let db_dir = data_dir.join("db");
    let (store, notices) = open_or_quarantine(data_dir, &db_dir, &config.store)?;
    Ok((lock, store, notices))
}

/// agentd's own files and directories, which no file tool touches: the
/// data directory, the socket (and its directory when it is the default
/// one, agentd's own; one given with --socket may be any directory), the
/// config and credentials files, the user's config directory, a configured
/// TLS private key and the log.
pub(super) fn own_files(
    data_dir: &Path,
    socket: &Path,
    default_socket: bool,
    credentials: &Sources,
    config: &Config,
) -> crate::tools::OwnFiles {
    let socket_dir = socket.parent().filter(|_| default_socket);
    let paths = [
        Some(data_dir),
        Some(socket),
        socket_dir,
        credentials.config_file(),
        credentials.credentials_file(),
        config.user_dir.as_deref(),
        config.remote.key_file.as_deref(),
    ];
    crate::tools::OwnFiles::new(
        paths
            .into_iter()
            .flatten()
            .map(Path::to_path_buf)
            .chain(crate::logfile::stderr_file()),
    )
}

/// Opens the store. A store that cannot be read (sled 0.34 has known
/// reports of databases that fail to reopen after an abrupt stop) is moved
/// aside with a timestamp and a fresh one is started, rather than crash-
/// looping: the daemon says so loudly, and `agent ls` shows it. A store
/// written by a newer agentd is not touched: that is an error.
fn open_or_quarantine(
    data_dir: &Path,
    db_dir: &Path,
    options: &crate::config::StoreSection,
) -> Result<(Store, Vec<String>), StartError> {
    let open = |dir: &Path| {
        // sled may panic on some corruptions; a panic here is a bad store.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Store::open_with(dir, options.sync, options.cache_bytes)
        }))
        .unwrap_or_else(|_| {
            Err(crate::store::StoreError::Flush(
                "the store panicked while opening".to_string(),
            ))
        })
    };
    match open(db_dir) {
        Ok(store) => Ok((store, Vec::new())),
        Err(e @ crate::store::StoreError::Schema { .. }) => Err(StartError::Store {
            dir: db_dir.to_path_buf(),
            source: e,
        }),
        Err(e) => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let aside = data_dir.join(format!("{STORE_ASIDE}{secs}"));
            std::fs::rename(db_dir, &aside).map_err(|source| StartError::Io {
                what: format!(
                    "cannot move the unreadable store {} aside",
                    db_dir.display()
                ),
                source,
            })?;
            let notice = format!(
                "the store in {db} could not be opened ({e}); it was moved to {aside} and agentd started with an empty store. To go back to the old store: `agent daemon stop`, then `mv {db} {db}.new && mv {aside} {db}`, and start agentd again. Checkpoint copies are kept while {aside} exists. Or restore conversations from a backup with `agent import`.",
                db = db_dir.display(),
                aside = aside.display()
            );
            tracing::error!("!!! {notice}");
            eprintln!("agentd: WARNING: {notice}");
            let store = open(db_dir).map_err(|source| StartError::Store {
                dir: db_dir.to_path_buf(),
                source,
            })?;
            Ok((store, vec![notice]))
        }
    }
}

/// How a store moved aside is named in the data directory: this and the
/// time it was moved, in Unix seconds.
const STORE_ASIDE: &str = "db.unreadable-";

/// Whether `data_dir` holds a store moved aside ([`open_or_quarantine`]):
/// then checkpoint copies no record of the current store names may still
/// be wanted, and none is removed.
pub(super) fn stores_aside(data_dir: &Path) -> bool {
    std::fs::read_dir(data_dir).is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with(STORE_ASIDE))
        })
    })
}

/// Takes the data directory's lock file (held for the daemon's life) so a
/// second daemon on the same data refuses to start, naming the first.
/// How long start-up waits for a data directory lock that a dead daemon's
/// half-started child still holds.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

async fn lock_data_dir(dir: &Path) -> Result<nix::fcntl::Flock<File>, StartError> {
    let path = dir.join("agentd.lock");
    let io = |what: &str| {
        let what = format!("{what} {}", path.display());
        move |source| StartError::Io { what, source }
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io("cannot open lock file"))?;
    // A daemon killed while it spawned a command leaves the lock held by
    // the half-started child until that child's `exec` closes it: when the
    // daemon that wrote the lock file is gone, wait a little for that.
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                lock.set_len(0).map_err(io("cannot write lock file"))?;
                lock.rewind().map_err(io("cannot write lock file"))?;
                write!(lock, "{}", std::process::id()).map_err(io("cannot write lock file"))?;
                return Ok(lock);
            }
            Err((mut held, _errno)) => {
                let mut pid = String::new();
                let _ = held.rewind();
                let _ = held.read_to_string(&mut pid);
                let pid = pid.trim().to_string();
                let writer_gone = pid.parse::<u32>().is_ok_and(|p| {
                    p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()
                });
                if writer_gone && std::time::Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    file = held;
                    continue;
                }
                return Err(StartError::Locked {
                    dir: dir.to_path_buf(),
                    pid: if pid.is_empty() {
                        String::new()
                    } else {
                        format!(" (pid {pid})")
                    },
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderKind;
    use crate::llm::credentials::CREDENTIALS_FILE;

    #[test]
    fn the_daemons_own_files_are_every_place_it_keeps_something() {
        let top = tempfile::tempdir().unwrap();
        let top = top.path().canonicalize().unwrap();
        let home = top.display().to_string();
        let env = |k: &str| match k {
            "XDG_CONFIG_HOME" => Some(format!("{home}/config")),
            _ => None,
        };
        let mut file = crate::config::FileConfig::default();
        file.remote.cert_file = Some(top.join("tls/cert.pem"));
        file.remote.key_file = Some(top.join("tls/key.pem"));
        let config = Config::from_parts(file, &env, None).unwrap();
        let credentials = Sources::new(
            ProviderKind::Anthropic,
            Some(top.join("agentd.toml")),
            config.user_dir.as_ref().map(|d| d.join(CREDENTIALS_FILE)),
            &env,
        );
        let socket = top.join("run/agentd/agentd.sock");
        let own = own_files(&top.join("data"), &socket, true, &credentials, &config);
        for path in [
            "data/db/conf",
            "run/agentd/agentd.log",
            "config/agentd/credentials.toml",
            "config/agentd/AGENTS.md",
            "agentd.toml",
            "tls/key.pem",
        ] {
            assert!(own.refusal(&top.join(path)).is_some(), "{path}");
        }
        assert!(own.refusal(&top.join("tls/cert.pem")).is_none());
        assert!(own.refusal(&top.join("project/src/main.rs")).is_none());
        // A socket given with --socket: its directory may be anyone's.
        let own = own_files(&top.join("data"), &socket, false, &credentials, &config);
        assert!(own.refusal(&socket).is_some());
        assert!(own.refusal(&top.join("run/agentd/notes.txt")).is_none());
    }

    #[test]
    fn a_store_moved_aside_is_seen_in_the_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("db")).unwrap();
        std::fs::create_dir(dir.path().join("checkpoints")).unwrap();
        assert!(!stores_aside(dir.path()));
        std::fs::create_dir(dir.path().join(format!("{STORE_ASIDE}1700000000"))).unwrap();
        assert!(stores_aside(dir.path()));
        assert!(!stores_aside(&dir.path().join("missing")));
    }

    /// Takes the data directory's lock the way another holder would (its
    /// own open file description), with `pid` written as its writer.
    fn hold_lock(dir: &Path, pid: u32) -> nix::fcntl::Flock<File> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("agentd.lock"))
            .unwrap();
        let mut lock =
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap();
        write!(lock, "{pid}").unwrap();
        lock
    }

    /// A pid no process has now.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[tokio::test]
    async fn a_lock_left_by_a_dead_daemons_child_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let held = hold_lock(dir.path(), dead_pid());
        let release = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            drop(held);
        });
        let lock = lock_data_dir(dir.path()).await;
        assert!(lock.is_ok(), "{:?}", lock.err());
        release.await.unwrap();
    }

    #[tokio::test]
    async fn a_lock_held_by_a_live_daemon_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let _held = hold_lock(dir.path(), 1);
        let started = std::time::Instant::now();
        match lock_data_dir(dir.path()).await {
            Err(StartError::Locked { pid, .. }) => assert_eq!(pid, " (pid 1)"),
            other => panic!("{:?}", other.err()),
        }
        assert!(started.elapsed() < LOCK_WAIT);
    }
}
