//! The daemon's command line and start-up: configuration, the data
//! directory lock, the store, recovery, the socket, and the signal that
//! stops it all. `main.rs` only calls [`main`]; the end-to-end tests build
//! the same entry point into their own binary.

use crate::config::{Config, ProviderKind};
use crate::grpc::listener::{self, ListenError};
use crate::llm::KeyedProvider;
use crate::llm::credentials::{CREDENTIALS_FILE, Sources, missing_key_message};
use crate::runtime::{DaemonInfo, Manager, Shared};
use crate::shells::{ShellLimits, ShellManager};
use crate::store::Store;
use clap::Parser;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// agentd: the coding-agent daemon. Owns every conversation, background
/// shell and all state; terminals talk to it with `agent`.
#[derive(Debug, Parser)]
#[command(name = "agentd", version, about, long_about = None)]
pub struct Args {
    /// Unix socket to listen on [default: $XDG_RUNTIME_DIR/agentd/agentd.sock,
    /// else ~/.local/state/agentd/run/agentd.sock].
    #[arg(long, env = "AGENTD_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Where conversations are stored [default: $XDG_DATA_HOME/agentd, else ~/.local/share/agentd].
    #[arg(long, env = "AGENTD_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Config file (TOML) [default: $XDG_CONFIG_HOME/agentd/config.toml if it exists].
    #[arg(long, env = "AGENTD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Default model for new conversations.
    #[arg(long)]
    pub model: Option<String>,
    /// Let conversations use `bypass` mode, in which no tool asks for
    /// permission. Dangerous: the model can then run any command.
    #[arg(long)]
    pub allow_bypass: bool,
    /// Also listen on TCP at ADDR:PORT for remote clients (`agent
    /// --remote`): TLS only, every call with a bearer token (`agent token
    /// create`). Off by default; `listen` in the config's [remote] section
    /// sets it too.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
}

/// Start-up failures, each a clear one-line message.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// No place for the socket or data.
    #[error("{0}")]
    Paths(String),
    /// The socket could not be bound.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// Another daemon owns the data directory.
    #[error("another agentd{pid} is already using the data directory {dir}")]
    Locked {
        /// The data directory.
        dir: PathBuf,
        /// " (pid N)" when known.
        pid: String,
    },
    /// The store could not be opened.
    #[error("cannot open the store in {dir}: {source}")]
    Store {
        dir: PathBuf,
        source: crate::store::StoreError,
    },
    #[error("recovery failed: {0}")]
    Recovery(#[from] crate::runtime::RuntimeError),
    #[error(transparent)]
    Serve(#[from] crate::grpc::ServeError),
    #[error("the TCP listener: {0}")]
    Remote(#[from] crate::grpc::remote::RemoteError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// Runs the daemon as the `agentd` binary does.
pub fn main() -> ExitCode {
    let args = Args::parse();
    let log = crate::logfile::LogWriter::for_stderr();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("agentd=info")),
        )
        .with_writer(log.clone())
        // Colour only for a person at a terminal: an autostarted daemon's
        // stderr is `agentd.log`, and escape codes there are noise.
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none(),
        )
        .init();
    // The config decides the runtime's size, so it is read first.
    let config = match Config::load(args.config.as_deref(), &env, args.model.clone()) {
        Ok(config) => {
            log.set_max_bytes(config.log.max_bytes);
            config
        }
        Err(e) => {
            let e = StartError::from(e);
            tracing::error!("{e}");
            eprintln!("agentd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.runtime.workers())
        .enable_all()
        .on_thread_start(crate::alloc::enable_thread_cache)
        .on_thread_park(crate::alloc::on_idle)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentd: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Caught from here on, before the socket is bound: a SIGTERM that
    // arrives while the daemon starts (a client may already have its
    // answer from the server's worker) stops it cleanly once it serves,
    // where the default action killed it and left its socket behind.
    let shutdown = {
        let _runtime = runtime.enter();
        shutdown_signal()
    };
    match runtime.block_on(run(args, config, shutdown)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("agentd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Installs the SIGINT and SIGTERM handlers now and completes on the
/// first of them, even one that arrived before it was polled. Called
/// within the runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    let install = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(stream) => Some(stream),
        Err(e) => {
            tracing::error!("cannot install the {name} handler: {e}");
            None
        }
    };
    let mut interrupt = install(SignalKind::interrupt(), "SIGINT");
    let mut terminate = install(SignalKind::terminate(), "SIGTERM");
    async fn received(stream: Option<&mut Signal>) {
        match stream {
            Some(stream) => {
                stream.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    async move {
        tokio::select! {
            _ = received(interrupt.as_mut()) => tracing::info!("SIGINT received"),
            _ = received(terminate.as_mut()) => tracing::info!("SIGTERM received"),
        }
    }
}

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

/// Starts the daemon and serves until `shutdown` completes.
pub async fn run(
    args: Args,
    mut config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), StartError> {
    config.allow_bypass = args.allow_bypass;
    let data_dir = match args.data_dir {
        Some(d) => d,
        None => crate::config::default_data_dir(&env).ok_or_else(|| {
            StartError::Paths("neither XDG_DATA_HOME nor HOME is set; pass --data-dir".into())
        })?,
    };
    let default_socket = args.socket.is_none();
    let (socket, runtime_dir) = match args.socket {
        Some(s) => (s, None),
        None => {
            let s = agent_proto::default_socket_path().map_err(StartError::Paths)?;
            let rt = env("XDG_RUNTIME_DIR")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from);
            (s, rt)
        }
    };

    // Every connection, file and pipe is a descriptor: the hard limit is
    // the daemon's to use (remote connections get at most half of it).
    let nofile = crate::grpc::limits::raise_nofile();
    listener::create_private_dir(&data_dir)?;
    // The store, checkpoint copies and command output live here: a
    // directory others can enter (one made before, or by someone else) is
    // refused like the socket's.
    listener::check_private_dir(&data_dir, listener::DATA_DIRECTORY)?;
    let _lock = lock_data_dir(&data_dir).await?;
    let db_dir = data_dir.join("db");
    let (store, notices) = open_or_quarantine(&data_dir, &db_dir, &config.store)?;

    // The key is resolved again for every request (`agent login` needs no
    // restart); a daemon without one starts anyway and its model requests
    // say what to do.
    let credentials = Arc::new(Sources::new(
        config.provider,
        args.config
            .clone()
            .or_else(|| crate::config::default_config_path(&env)),
        config.user_dir.as_ref().map(|d| d.join(CREDENTIALS_FILE)),
        &env,
    ));
    match credentials.resolve() {
        Ok(r) if r.key.is_none() && config.provider == ProviderKind::Anthropic => {
            tracing::warn!("{}", missing_key_message(config.provider));
        }
        Ok(r) => tracing::info!("API key from the {}", r.source.name()),
        Err(e) => tracing::warn!("{e}"),
    }
    let provider: Arc<dyn crate::llm::Provider> = Arc::new(KeyedProvider::new(
        credentials.clone(),
        config.base_url.clone(),
    ));
    tracing::info!(model = %config.model, provider = ?config.provider, base_url = %config.base_url, "configured");
    let (shell_events, mut shell_rx) = tokio::sync::broadcast::channel(256);
    let shell_store = store.clone();
    let shells = ShellManager::new(
        data_dir.join("shells"),
        ShellLimits {
            max_total: config.shells.max_total,
            max_per_conversation: config.shells.max_per_conversation,
            max_spool_bytes: config.shells.max_output_bytes,
            kill_grace_ms: config.limits.kill_grace_ms,
            ..ShellLimits::default()
        },
        Box::new(move |record| {
            if let Err(e) = shell_store.put_shell(record) {
                tracing::error!("cannot persist shell {}: {e}", record.id);
                return;
            }
            let store = shell_store.clone();
            tokio::spawn(async move {
                if let Err(e) = store.flush().await {
                    tracing::error!("cannot flush a shell record: {e}");
                }
            });
        }),
        shell_events,
    );
    // After a crash, shells the store lists as running are lost; any whose
    // process provably is still ours is killed.
    let stored = store.shells().map_err(|source| StartError::Store {
        dir: data_dir.join("db"),
        source,
    })?;
    let lost = shells
        .recover(stored)
        .into_iter()
        .filter(|r| r.status == crate::shells::ShellStatus::Lost)
        .count();
    if lost > 0 {
        tracing::warn!("{lost} background shell(s) from before a crash are marked lost");
    }
    let mcp = Arc::new(crate::mcp::Hub::new(config.mcp_servers.clone()));
    let listen = args.listen.clone().or_else(|| config.remote.listen.clone());
    // Said in the start line when the certificate's fingerprint changed.
    let mut cert_notice = String::new();
    let remote = match &listen {
        Some(address) => {
            let configured = config
                .remote
                .cert_file
                .as_deref()
                .zip(config.remote.key_file.as_deref());
            let names = crate::grpc::remote::cert_names(address, &config.remote.cert_names);
            let identity =
                crate::grpc::remote::identity(&data_dir.join("tls"), configured, &names)?;
            let fingerprint = identity.fingerprint.clone();
            if let Some(lacking) = &identity.remade_for {
                cert_notice = format!(
                    " (NEW: the certificate was made again to name {} as well; clients must pin this fingerprint)",
                    lacking.join(", ")
                );
                tracing::warn!("certificate fingerprint changed{cert_notice}");
            }
            let bound = crate::grpc::remote::bind(address, identity).await?;
            let limits = crate::grpc::remote::Limits::new(&config.remote, nofile);
            Some((bound, fingerprint, limits))
        }
        None => None,
    };
    let access = Arc::new(crate::grpc::access::Access::new(
        store.clone(),
        crate::runtime::Clock::System,
        remote
            .as_ref()
            .map(|(bound, fingerprint, _)| crate::grpc::access::Listening {
                address: bound.address.to_string(),
                fingerprint: fingerprint.clone(),
            }),
    ));
    let mut checkpoints = crate::checkpoints::Checkpoints::open(
        &store,
        &data_dir.join("checkpoints"),
        config.checkpoints,
    )
    .map_err(StartError::Paths)?;
    if stores_aside(&data_dir) {
        // Their records are in a store moved aside, which may come back.
        checkpoints = checkpoints.keep_unreferenced();
    }
    let checkpoints = Arc::new(checkpoints);
    {
        // Retention, once at start (and again whenever the stored contents
        // pass `max_bytes`).
        let checkpoints = checkpoints.clone();
        let now = crate::runtime::Clock::System.now_ms();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = checkpoints.prune(now) {
                tracing::warn!("checkpoint retention: {e}");
            }
        });
    }
    let own_files = Arc::new(own_files(
        &data_dir,
        &socket,
        default_socket,
        &credentials,
        &config,
    ));
    let manager = Manager::new(Shared {
        checkpoints,
        rings: Default::default(),
        store,
        config,
        provider,
        tools: Arc::new(crate::tools::Registry::new()),
        mcp: mcp.clone(),
        shells: shells.clone(),
        notices,
        clock: crate::runtime::Clock::System,
        daemon: DaemonInfo {
            started_at_ms: crate::runtime::Clock::System.now_ms(),
            started: Some(std::time::Instant::now()),
            socket: std::path::absolute(&socket).unwrap_or_else(|_| socket.clone()),
            data_dir: std::path::absolute(&data_dir).unwrap_or_else(|_| data_dir.clone()),
            log_file: crate::logfile::stderr_file(),
            executable: std::env::current_exe().ok(),
            args: std::env::args().skip(1).collect(),
            credentials: Some(credentials),
            own_files,
        },
    });
    let forward_to = manager.clone();
    tokio::spawn(async move {
        loop {
            match shell_rx.recv().await {
                Ok(event) => forward_to.shell_event(event).await,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!("{n} shell events were not forwarded to clients");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });

    let listener = listener::bind(&socket, runtime_dir.as_deref())?;
    let recovered = manager.recover().await?;
    if recovered > 0 {
        tracing::info!("recovered {recovered} conversation(s) that were mid-turn");
    }
    tracing::info!(socket = %socket.display(), data_dir = %data_dir.display(), "agentd listening");
    if let Some(listening) = &access.listening {
        tracing::info!(
            address = %listening.address,
            fingerprint = %listening.fingerprint,
            "agentd listening on TCP (TLS, bearer tokens)"
        );
        // On standard error as a plain line too, for the person who
        // started it to copy (clients pin it with --fingerprint).
        eprintln!(
            "agentd: listening on {} (TLS); certificate fingerprint {}{cert_notice}",
            listening.address, listening.fingerprint
        );
        if let Some((bound, _, _)) = &remote
            && bound.address.ip().is_unspecified()
        {
            let warning = format!(
                "listening on {} reaches every network this machine is on, not only this machine: anyone who can reach port {} can try tokens (listen on 127.0.0.1 or one interface's address to limit it)",
                bound.address,
                bound.address.port()
            );
            tracing::warn!("{warning}");
            eprintln!("agentd: WARNING: {warning}");
        }
    }
    let result = crate::grpc::serve(
        listener::incoming(listener),
        remote.map(|(bound, _, limits)| (bound, limits)),
        access,
        manager,
        shutdown,
    )
    .await;
    // A clean shutdown ends the background shells and records that.
    shells.kill_all().await;
    // And the MCP servers' process groups.
    mcp.shutdown().await;
    let _ = std::fs::remove_file(&socket);
    tracing::info!("agentd stopped");
    Ok(result?)
}

/// agentd's own files and directories, which no file tool touches: the
/// data directory, the socket (and its directory when it is the default
/// one, agentd's own; one given with --socket may be any directory), the
/// config and credentials files, the user's config directory, a configured
/// TLS private key and the log.
fn own_files(
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
fn stores_aside(data_dir: &Path) -> bool {
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

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
