//! The daemon's command line and start-up: configuration, the data
//! directory lock, the store, recovery, the socket, and the signal that
//! stops it all. `main.rs` only calls [`main`]; the end-to-end tests build
//! the same entry point into their own binary.
//!
//! The tokio runtime has one worker per two CPUs by default (`[runtime]
//! worker_threads`): every hop of a tool round wakes a task, and with a
//! worker per CPU an idle second worker was woken and parked for most of
//! them, about 0.2 ms of CPU per bash round on two CPUs, taken from the
//! command and the client (issue 20, BENCHMARKS.md). Blocking work runs on
//! the blocking pool either way. The gRPC server is a task on the workers;
//! the main thread only waits for the daemon to end.

mod data_dir;

use crate::config::{Config, ProviderKind};
use crate::grpc::listener::{self, ListenError};
use crate::llm::KeyedProvider;
use crate::llm::credentials::{CREDENTIALS_FILE, Sources, missing_key_message};
use crate::runtime::{DaemonInfo, Manager, Shared};
use crate::shells::{ShellLimits, ShellManager};
use crate::store::Store;
use clap::Parser;
use data_dir::{open_data_dir, own_files, stores_aside};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// agentd: the coding-agent daemon. Owns every conversation, background
/// shell and all state; terminals talk to it with `agent`.
#[derive(Debug, Parser)]
#[command(name = "agentd", version, about, long_about = None)]
pub(crate) struct Args {
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
pub(crate) enum StartError {
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
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send {
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
pub(crate) async fn run(
    args: Args,
    mut config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), StartError> {
    config.allow_bypass = args.allow_bypass;
    let Places {
        data_dir,
        socket,
        default_socket,
        runtime_dir,
    } = places(args.data_dir, args.socket)?;

    // Every connection, file and pipe is a descriptor: the hard limit is
    // the daemon's to use (remote connections get at most half of it).
    let nofile = crate::grpc::limits::raise_nofile();
    let (_lock, store, notices) = open_data_dir(&data_dir, &config).await?;

    let (credentials, provider) = model_provider(args.config.clone(), &config);
    let (shell_events, shell_rx) = tokio::sync::broadcast::channel(256);
    let shells = start_shells(&data_dir, &config, &store, shell_events)?;
    let mcp = Arc::new(crate::mcp::Hub::new(config.mcp_servers.clone()));
    let listen = args.listen.clone().or_else(|| config.remote.listen.clone());
    let (remote, cert_notice) = match &listen {
        Some(address) => {
            let (remote, notice) = bind_remote(address, &config, &data_dir, nofile).await?;
            (Some(remote), notice)
        }
        None => (None, String::new()),
    };
    let access = access(&store, remote.as_ref());
    let checkpoints = open_checkpoints(&store, &data_dir, &config)?;
    let own_files = Arc::new(own_files(
        &data_dir,
        &socket,
        default_socket,
        &credentials,
        &config,
    ));
    let sandbox = config.sandbox;
    let manager = Manager::new(Shared {
        environments: crate::environment::Environments::new(
            store.environments_tree(),
            config.shell.clone(),
        ),
        checkpoints,
        rings: Default::default(),
        agent_types: Default::default(),
        store,
        config,
        provider,
        tools: Arc::new(crate::tools::Registry::new()),
        mcp: mcp.clone(),
        shells: shells.clone(),
        notices,
        clock: crate::runtime::Clock::System,
        daemon: daemon_info(&socket, &data_dir, credentials, own_files, sandbox),
    });
    forward_shell_events(manager.clone(), shell_rx);

    let listener = listener::bind(&socket, runtime_dir.as_deref())?;
    let recovered = manager.recover().await?;
    if recovered > 0 {
        tracing::info!("recovered {recovered} conversation(s) that were mid-turn");
    }
    manager.tell_shell_ends().await;
    tracing::info!(socket = %socket.display(), data_dir = %data_dir.display(), "agentd listening");
    if let Some(listening) = &access.listening {
        announce_remote(
            listening,
            remote.as_ref().map(|(bound, _, _)| bound),
            &cert_notice,
        );
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
    // Then every task the daemon started ends (or is named).
    crate::tasks::drain(crate::tasks::DRAIN_GRACE).await;
    let _ = std::fs::remove_file(&socket);
    tracing::info!("agentd stopped");
    Ok(result?)
}

/// Who may call: tokens in `store`, and the TCP listener when there is one.
fn access(store: &Store, remote: Option<&Remote>) -> Arc<crate::grpc::access::Access> {
    Arc::new(crate::grpc::access::Access::new(
        store.clone(),
        crate::runtime::Clock::System,
        remote.map(|(bound, fingerprint, _)| crate::grpc::access::Listening {
            address: bound.address.to_string(),
            fingerprint: fingerprint.clone(),
        }),
    ))
}

/// What the daemon says of itself (`agent status`), as it starts.
fn daemon_info(
    socket: &Path,
    data_dir: &Path,
    credentials: Arc<Sources>,
    own_files: Arc<crate::tools::OwnFiles>,
    sandbox: crate::process::sandbox::SandboxSection,
) -> DaemonInfo {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let sandboxes =
        crate::process::sandbox::Sandboxes::new(sandbox, own_files.paths(), home.as_deref());
    DaemonInfo {
        started_at_ms: crate::runtime::Clock::System.now_ms(),
        started: Some(std::time::Instant::now()),
        socket: std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf()),
        data_dir: std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf()),
        log_file: crate::logfile::stderr_file(),
        executable: std::env::current_exe().ok(),
        args: std::env::args().skip(1).collect(),
        credentials: Some(credentials),
        own_files,
        sandboxes: Arc::new(sandboxes),
    }
}

/// Where the daemon keeps its data and listens.
struct Places {
    data_dir: PathBuf,
    socket: PathBuf,
    /// Whether the socket is the default one (its directory is agentd's).
    default_socket: bool,
    /// `$XDG_RUNTIME_DIR`, for the default socket.
    runtime_dir: Option<PathBuf>,
}

/// The data directory and socket the flags give, else the defaults.
fn places(data_dir: Option<PathBuf>, socket: Option<PathBuf>) -> Result<Places, StartError> {
    let data_dir = match data_dir {
        Some(d) => d,
        None => crate::config::default_data_dir(&env).ok_or_else(|| {
            StartError::Paths("neither XDG_DATA_HOME nor HOME is set; pass --data-dir".into())
        })?,
    };
    let default_socket = socket.is_none();
    let (socket, runtime_dir) = match socket {
        Some(s) => (s, None),
        None => {
            let s = agent_proto::default_socket_path().map_err(StartError::Paths)?;
            let rt = env("XDG_RUNTIME_DIR")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from);
            (s, rt)
        }
    };
    Ok(Places {
        data_dir,
        socket,
        default_socket,
        runtime_dir,
    })
}

/// Where the API key comes from, and the model provider that uses it
/// (`config_file`: the --config flag's).
fn model_provider(
    config_file: Option<PathBuf>,
    config: &Config,
) -> (Arc<Sources>, Arc<dyn crate::llm::Provider>) {
    // The key is resolved again for every request (`agent login` needs no
    // restart); a daemon without one starts anyway and its model requests
    // say what to do.
    let credentials = Arc::new(Sources::new(
        config.provider,
        config_file.or_else(|| crate::config::default_config_path(&env)),
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
    (credentials, provider)
}

/// The background shells, each record persisted as it changes, and those
/// from before a crash recovered.
fn start_shells(
    data_dir: &Path,
    config: &Config,
    store: &Store,
    events: tokio::sync::broadcast::Sender<crate::shells::ShellEvent>,
) -> Result<Arc<ShellManager>, StartError> {
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
            crate::tasks::spawn("shell record flush", async move {
                if let Err(e) = store.flush().await {
                    tracing::error!("cannot flush a shell record: {e}");
                }
            });
        }),
        events,
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
    Ok(shells)
}

/// The TCP listener bound, with its certificate's fingerprint and its
/// limits.
type Remote = (
    crate::grpc::remote::RemoteListener,
    String,
    crate::grpc::remote::Limits,
);

/// Binds the TCP listener at `address` with the configured (or agentd's
/// own) certificate. Also returns what the start line says when the
/// certificate's fingerprint changed (else nothing).
async fn bind_remote(
    address: &str,
    config: &Config,
    data_dir: &Path,
    nofile: Option<u64>,
) -> Result<(Remote, String), StartError> {
    let mut cert_notice = String::new();
    let configured = config
        .remote
        .cert_file
        .as_deref()
        .zip(config.remote.key_file.as_deref());
    let names = crate::grpc::remote::cert_names(address, &config.remote.cert_names);
    let identity = crate::grpc::remote::identity(&data_dir.join("tls"), configured, &names)?;
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
    Ok(((bound, fingerprint, limits), cert_notice))
}

/// The file checkpoints, their retention run once at start.
fn open_checkpoints(
    store: &Store,
    data_dir: &Path,
    config: &Config,
) -> Result<Arc<crate::checkpoints::Checkpoints>, StartError> {
    let mut checkpoints = crate::checkpoints::Checkpoints::open(
        store,
        &data_dir.join("checkpoints"),
        config.checkpoints,
    )
    .map_err(StartError::Paths)?;
    if stores_aside(data_dir) {
        // Their records are in a store moved aside, which may come back.
        checkpoints = checkpoints.keep_unreferenced();
    }
    let checkpoints = Arc::new(checkpoints);
    {
        // Retention, once at start (and again whenever the stored contents
        // pass `max_bytes`).
        let checkpoints = checkpoints.clone();
        let now = crate::runtime::Clock::System.now_ms();
        crate::tasks::spawn_blocking("checkpoint retention", move || {
            if let Err(e) = checkpoints.prune(now) {
                tracing::warn!("checkpoint retention: {e}");
            }
        });
    }
    Ok(checkpoints)
}

/// Hands what happens to background shells to the conversations' clients.
fn forward_shell_events(
    manager: Arc<Manager>,
    mut shell_rx: tokio::sync::broadcast::Receiver<crate::shells::ShellEvent>,
) {
    crate::tasks::spawn_until_stopped("shell event forwarding", async move {
        loop {
            match shell_rx.recv().await {
                Ok(event) => manager.shell_event(event).await,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!("{n} shell events were not forwarded to clients");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// Says where the TCP listener is and its certificate's fingerprint, in
/// the log and on standard error, warning when it listens on every
/// network (`bound`: the listener).
fn announce_remote(
    listening: &crate::grpc::access::Listening,
    bound: Option<&crate::grpc::remote::RemoteListener>,
    cert_notice: &str,
) {
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
    if let Some(bound) = bound
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
