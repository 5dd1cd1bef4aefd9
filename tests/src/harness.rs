//! Runs a real daemon for a test: the `test-agentd` binary on a temporary
//! socket and data directory, pointed at a [`FakeLlm`], and clients for it;
//! [`Scenario`] sets all of that up the way most end-to-end tests begin.
//!
//! Everything here panics with a clear message on failure (it is test code);
//! panics that concern the daemon include its log.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use hyper_util::rt::TokioIo;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::fake_llm::{FakeLlm, Responder, Script};

/// How long a test waits for what should happen (a daemon to listen or to
/// exit after SIGTERM, a state, an event) before it fails. Generous, because
/// a loaded machine is slow and only a failing test ever waits it out; a
/// test that checks how fast something happens states its own limit.
pub const WAIT: Duration = Duration::from_secs(30);

/// The configuration every test daemon starts with (fast retries).
pub const DEFAULT_CONFIG: &str =
    "model = \"claude-test\"\n\n[retry]\nbase_delay_ms = 50\nmax_delay_ms = 500\n";

/// The daemon binary: `$AGENT_TESTS_DAEMON_BIN`, else `test-agentd` in the
/// cargo target directory of the running test.
pub fn daemon_bin() -> PathBuf {
    find_bin("AGENT_TESTS_DAEMON_BIN", "test-agentd")
}

/// The client binary: `$AGENT_TESTS_CLIENT_BIN`, else `test-agent` in the
/// cargo target directory of the running test.
pub fn client_bin() -> PathBuf {
    find_bin("AGENT_TESTS_CLIENT_BIN", "test-agent")
}

/// The ACP bridge that `agent acp` runs (give it to the client as
/// `AGENT_ACP_BIN`): `$AGENT_TESTS_ACP_BIN`, else `test-agent-acp` in the
/// cargo target directory of the running test.
pub fn acp_bin() -> PathBuf {
    find_bin("AGENT_TESTS_ACP_BIN", "test-agent-acp")
}

/// The syntax highlighter that the client runs (give it to the client as
/// `AGENT_HIGHLIGHT_BIN`; [`TestDaemon::agent`] does):
/// `$AGENT_TESTS_HIGHLIGHT_BIN`, else `test-agent-highlight` in the cargo
/// target directory of the running test.
pub fn highlight_bin() -> PathBuf {
    find_bin("AGENT_TESTS_HIGHLIGHT_BIN", "test-agent-highlight")
}

fn find_bin(var: &str, name: &str) -> PathBuf {
    target_bin(var, name).unwrap_or_else(|e| panic!("{e}"))
}

/// `$var`, else the binary `name` in the cargo target directory of the
/// running executable; why not when it is not there.
fn target_bin(var: &str, name: &str) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the current executable: {e}"))?;
    // Test executables live in target/<profile>/deps, binaries one level up.
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let candidate = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !candidate.exists() {
        return Err(format!(
            "{name} not found at {}: build it with `cargo build -p agent-tests --bins`, or set {var}",
            candidate.display()
        ));
    }
    Ok(candidate)
}

/// How a [`TestDaemon`] differs from the default.
#[derive(Debug, Clone, Default)]
pub struct DaemonOptions {
    /// TOML added to [`DEFAULT_CONFIG`] in `config.toml`: its top-level keys
    /// (e.g. `provider = "openai"`) before the default's tables, its tables
    /// after them (a table the default has must not be repeated).
    pub extra_config: String,
    /// Environment set after the defaults (so it can override them).
    pub env: Vec<(String, String)>,
    /// Arguments after `--socket/--data-dir/--config`.
    pub args: Vec<String>,
    /// Another daemon binary than [`daemon_bin()`] (a release build for a
    /// benchmark, or a stand-in for testing the harness).
    pub daemon_bin: Option<PathBuf>,
}

/// A running `test-agentd` with its own temporary directory:
///
/// ```text
/// <dir>/agentd.sock   socket          <dir>/config.toml  config
/// <dir>/data          data directory  <dir>/daemon.log   stdout + stderr
/// <dir>/work          a working directory for conversations
/// <dir>/xdg/...       XDG_CONFIG_HOME & co, so no user file leaks in
/// ```
///
/// The daemon is killed (SIGKILL to its process group) when this is dropped.
pub struct TestDaemon {
    /// The temporary directory holding everything; removed on drop.
    pub dir: tempfile::TempDir,
    /// The Unix socket the daemon listens on.
    pub socket: PathBuf,
    /// The daemon's data directory (`--data-dir`).
    pub data_dir: PathBuf,
    /// The configuration file (`--config`).
    pub config_path: PathBuf,
    /// An empty directory to use as a conversation's working directory; also
    /// the current directory of [`TestDaemon::agent`].
    pub work_dir: PathBuf,
    /// Where the daemon's stdout and stderr go.
    pub log_path: PathBuf,
    llm_url: String,
    opts: DaemonOptions,
    child: Option<Child>,
}

impl std::fmt::Debug for TestDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDaemon")
            .field("dir", &self.dir.path())
            .field("pid", &self.child.as_ref().map(Child::id))
            .finish_non_exhaustive()
    }
}

impl TestDaemon {
    /// Starts a daemon with the default configuration.
    pub async fn start(fake: &FakeLlm) -> TestDaemon {
        TestDaemon::start_with(fake, DaemonOptions::default()).await
    }

    /// Starts a daemon with `opts` and waits until its socket accepts
    /// connections.
    pub async fn start_with(fake: &FakeLlm, opts: DaemonOptions) -> TestDaemon {
        let dir = tempfile::Builder::new()
            .prefix("agentd-test-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let root = dir.path().to_path_buf();
        // The daemon refuses a socket directory other users can enter.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
                .unwrap_or_else(|e| panic!("cannot make {} private: {e}", root.display()));
        }
        let config_path = root.join("config.toml");
        let config = compose_config(&opts.extra_config);
        write_file(&config_path, config.as_bytes());
        let work_dir = root.join("work");
        create_dir(&work_dir);
        for sub in XDG_DIRS {
            create_dir(&root.join("xdg").join(sub.1));
        }
        let mut daemon = TestDaemon {
            socket: root.join("agentd.sock"),
            data_dir: root.join("data"),
            config_path,
            work_dir,
            log_path: root.join("daemon.log"),
            dir,
            llm_url: fake.base_url(),
            opts,
            child: None,
        };
        daemon.spawn().await;
        daemon
    }

    /// Starts the daemon again on the same directories and configuration,
    /// after [`terminate`](Self::terminate) or [`kill9`](Self::kill9).
    ///
    /// # Panics
    /// When the daemon is still running.
    pub async fn restart(&mut self) {
        if let Some(status) = self.exit_status() {
            self.child = None;
            self.append_log(&format!(
                "\n----- test harness: daemon had exited ({status}); restarting -----\n"
            ));
        } else if self.child.is_some() {
            panic!(
                "TestDaemon::restart: the daemon is still running; terminate() or kill9() it first"
            );
        } else {
            self.append_log("\n----- test harness: restarting the daemon -----\n");
        }
        self.spawn().await;
    }

    /// The arguments after `--socket/--data-dir/--config` of the next
    /// [`restart`](Self::restart) (a daemon started again with other flags).
    pub fn set_args(&mut self, args: Vec<String>) {
        self.opts.args = args;
    }

    /// The daemon's process id.
    ///
    /// # Panics
    /// When no daemon is running.
    pub fn pid(&self) -> u32 {
        match &self.child {
            Some(child) => child.id(),
            None => panic!("TestDaemon::pid: no daemon is running"),
        }
    }

    /// Whether the daemon exited on its own: its status if so.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// Sends SIGTERM and waits for the daemon to exit.
    ///
    /// # Panics
    /// When no daemon is running, or it is still running after [`WAIT`] (it
    /// is then killed).
    pub async fn terminate(&mut self) -> ExitStatus {
        let Some(mut child) = self.child.take() else {
            panic!("TestDaemon::terminate: no daemon is running");
        };
        let pid = pid_of(&child);
        if let Err(e) = kill(pid, Signal::SIGTERM) {
            panic!("TestDaemon::terminate: cannot signal {pid}: {e}");
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) => {}
                Err(e) => panic!("TestDaemon::terminate: cannot wait for {pid}: {e}"),
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the daemon did not exit within {WAIT:?} of SIGTERM; it was killed. Log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Kills the daemon with SIGKILL (only the daemon, not its children, as
    /// a crash would) and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A gRPC client connected over the daemon's socket.
    pub async fn client(&self) -> AgentServiceClient<Channel> {
        match connect_uds(&self.socket).await {
            Ok(channel) => AgentServiceClient::new(channel),
            Err(e) => panic!(
                "cannot connect to the daemon at {}: {e:?}. Log:\n{}",
                self.socket.display(),
                self.log()
            ),
        }
    }

    /// The client binary with `--socket <socket> --no-autostart`, run in
    /// `work_dir`, without any `AGENTD_*` variable from the test's
    /// environment, with [`highlight_bin`] as its highlighter when that is
    /// built. Add the subcommand and run it.
    pub fn agent(&self) -> Command {
        self.agent_bin(&client_bin())
    }

    /// [`TestDaemon::agent`] with another client binary (a benchmark
    /// comparing two builds of the client).
    pub fn agent_bin(&self, bin: &Path) -> Command {
        let mut cmd = Command::new(bin);
        cmd.arg("--socket").arg(&self.socket).arg("--no-autostart");
        cmd.current_dir(&self.work_dir);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("AGENTD_") {
                cmd.env_remove(name);
            }
        }
        self.isolate_xdg(&mut cmd);
        cmd.env("NO_COLOR", "1");
        // Not a failure when absent: a benchmark's client does not need it.
        if let Ok(highlighter) = target_bin("AGENT_TESTS_HIGHLIGHT_BIN", "test-agent-highlight") {
            cmd.env("AGENT_HIGHLIGHT_BIN", highlighter);
        }
        cmd
    }

    /// Everything the daemon wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        match fs::read(&self.log_path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => format!("<cannot read {}: {e}>", self.log_path.display()),
        }
    }

    async fn spawn(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.log_path.display()));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot duplicate the log file handle: {e}"));
        let bin = self.opts.daemon_bin.clone().unwrap_or_else(daemon_bin);
        let mut cmd = Command::new(&bin);
        cmd.arg("--socket")
            .arg(&self.socket)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--config")
            .arg(&self.config_path)
            .args(&self.opts.args);
        for (name, _) in std::env::vars_os() {
            let name_str = name.to_string_lossy();
            if ["AGENTD_", "ANTHROPIC_", "OPENAI_"]
                .iter()
                .any(|p| name_str.starts_with(p))
            {
                cmd.env_remove(name);
            }
        }
        self.isolate_xdg(&mut cmd);
        // Both providers point at the fake; `provider` in the config picks one.
        cmd.env("ANTHROPIC_BASE_URL", &self.llm_url)
            .env("ANTHROPIC_API_KEY", "test-key")
            .env("OPENAI_BASE_URL", format!("{}/v1", self.llm_url))
            .env("OPENAI_API_KEY", "test-key")
            .env("RUST_LOG", "agentd=debug")
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.work_dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own process group, so Drop can take down whatever it left
            // running, and a Ctrl-C in the terminal reaches only the tests.
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        self.child = Some(child);
        self.wait_until_listening().await;
    }

    async fn wait_until_listening(&mut self) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.exit_status() {
                self.child = None;
                panic!(
                    "the daemon exited ({status}) before listening on {}. Log:\n{}",
                    self.socket.display(),
                    self.log()
                );
            }
            // Listening means *this* daemon listens: right after a kill -9
            // the old socket can still accept connections for a moment (a
            // command the old daemon was starting holds it until its exec)
            // that nobody will ever serve.
            let ours = self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok());
            if let Ok(stream) = tokio::net::UnixStream::connect(&self.socket).await
                && stream.peer_cred().ok().and_then(|c| c.pid()) == ours
            {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "the daemon did not listen on {} within {WAIT:?}. Log:\n{}",
                    self.socket.display(),
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The daemon's own config directory (`$XDG_CONFIG_HOME/agentd`), where
    /// the user's `AGENTS.md` lives.
    pub fn user_config_dir(&self) -> PathBuf {
        self.dir.path().join("xdg/config/agentd")
    }

    fn isolate_xdg(&self, cmd: &mut Command) {
        for (var, sub) in XDG_DIRS {
            cmd.env(var, self.dir.path().join("xdg").join(sub));
        }
    }

    fn append_log(&self, line: &str) {
        if let Ok(mut file) = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
        {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        // The running daemon's whole group (signalled before it is reaped,
        // so the group id cannot belong to anyone else yet). Groups of
        // daemons already reaped are left alone: once empty, their ids can
        // be reused by unrelated processes (pid_max is 32768 here), and the
        // daemon starts its tools and shells in groups of their own anyway.
        if let Some(mut child) = self.child.take() {
            let _ = kill(Pid::from_raw(-pid_of(&child).as_raw()), Signal::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How an end-to-end test begins, written once: a [`FakeLlm`] with its
/// scripts, a [`TestDaemon`] with its configuration pointed at it, a client,
/// a working directory and, when asked, a conversation in it.
///
/// ```no_run
/// # async fn example() {
/// use agent_proto::v1 as pb;
/// use agent_tests::fake_llm::Script;
/// use agent_tests::harness::Scenario;
///
/// let s = Scenario::new()
///     .script(Script::text("Done."))
///     .config("[limits]\nidle_unload_ms = 200")
///     .conversation("do it")
///     .allow(&["bash"])
///     .mode(pb::PermissionMode::Default)
///     .start()
///     .await;
/// let (fake, mut client, id) = (s.fake, s.client, s.id);
/// # }
/// ```
#[must_use = "a scenario does nothing until it is started"]
pub struct Scenario<C = ()> {
    scripts: Vec<Script>,
    responder: Option<Responder>,
    options: DaemonOptions,
    conversation: C,
}

/// The conversation a [`Scenario`] creates once its daemon runs.
#[derive(Debug, Clone)]
pub struct NewConversation {
    prompt: String,
    allow: Vec<String>,
    mode: pb::PermissionMode,
}

/// What a started [`Scenario`] gives. Keep it in a variable and move out
/// the parts the test uses (`let (fake, mut client) = (s.fake, s.client);`):
/// the rest stays in the variable, alive to the end of the test. (Taken
/// apart straight from `start()`, the parts not bound would be dropped at
/// once, the daemon killed among them.)
#[derive(Debug)]
pub struct Started<Id = ()> {
    /// The model the daemon talks to; more scripts can be queued.
    pub fake: FakeLlm,
    pub daemon: TestDaemon,
    /// A gRPC client connected to it.
    pub client: AgentServiceClient<Channel>,
    /// An empty directory for the conversation to work in.
    pub work: tempfile::TempDir,
    /// The id of the conversation [`Scenario::conversation`] asked for;
    /// `()` without one.
    pub id: Id,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            scripts: Vec::new(),
            responder: None,
            options: DaemonOptions::default(),
            conversation: (),
        }
    }
}

impl Scenario {
    /// A fake LLM with nothing queued and a daemon with the default
    /// configuration.
    pub fn new() -> Scenario {
        Scenario::default()
    }

    /// Creates a conversation with `prompt` (none is sent when empty) in
    /// [`Started::work`] once the daemon runs.
    pub fn conversation(self, prompt: &str) -> Scenario<NewConversation> {
        Scenario {
            scripts: self.scripts,
            responder: self.responder,
            options: self.options,
            conversation: NewConversation {
                prompt: prompt.to_string(),
                allow: Vec::new(),
                mode: pb::PermissionMode::Unspecified,
            },
        }
    }

    /// Starts the fake LLM, the daemon and a client.
    pub async fn start(self) -> Started {
        self.launch().await.0
    }
}

impl Scenario<NewConversation> {
    /// Permission rules the conversation is created with.
    pub fn allow(mut self, rules: &[&str]) -> Self {
        self.conversation.allow = rules.iter().map(|r| r.to_string()).collect();
        self
    }

    /// The permission mode the conversation is created with.
    pub fn mode(mut self, mode: pb::PermissionMode) -> Self {
        self.conversation.mode = mode;
        self
    }

    /// Starts the fake LLM, the daemon and a client, and creates the
    /// conversation.
    ///
    /// # Panics
    /// When the daemon refuses the conversation.
    pub async fn start(self) -> Started<String> {
        let (mut started, conversation) = self.launch().await;
        let created = started
            .client
            .create_conversation(pb::CreateConversationRequest {
                cwd: started.work.path().display().to_string(),
                prompt: conversation.prompt,
                allow_rules: conversation.allow,
                mode: conversation.mode as i32,
                ..Default::default()
            })
            .await;
        let id = match created.map(|r| r.into_inner().conversation) {
            Ok(Some(conversation)) => conversation.id,
            Ok(None) => panic!("CreateConversation answered without a conversation"),
            Err(e) => panic!(
                "cannot create the conversation: {e}. Log:\n{}",
                started.daemon.log()
            ),
        };
        Started {
            fake: started.fake,
            daemon: started.daemon,
            client: started.client,
            work: started.work,
            id,
        }
    }
}

impl<C> Scenario<C> {
    /// Queues one model reply; requests take them in order.
    pub fn script(mut self, script: Script) -> Self {
        self.scripts.push(script);
        self
    }

    /// Queues model replies; requests take them in order.
    pub fn scripts(mut self, scripts: impl IntoIterator<Item = Script>) -> Self {
        self.scripts.extend(scripts);
        self
    }

    /// Answers requests the queue has no script for (see
    /// [`FakeLlm::set_responder`]).
    pub fn responder(mut self, responder: Responder) -> Self {
        self.responder = Some(responder);
        self
    }

    /// TOML added to the daemon's configuration.
    pub fn config(mut self, toml: &str) -> Self {
        if !self.options.extra_config.is_empty() {
            self.options.extra_config.push('\n');
        }
        self.options.extra_config.push_str(toml);
        self
    }

    /// An environment variable for the daemon.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.options.env.push((name.to_string(), value.to_string()));
        self
    }

    async fn launch(self) -> (Started, C) {
        let fake = FakeLlm::start().await;
        fake.push_all(self.scripts);
        if let Some(responder) = self.responder {
            fake.set_responder(Some(responder));
        }
        let daemon = TestDaemon::start_with(&fake, self.options).await;
        let client = daemon.client().await;
        let work = tempfile::tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let started = Started {
            fake,
            daemon,
            client,
            work,
            id: (),
        };
        (started, self.conversation)
    }
}

/// [`DEFAULT_CONFIG`] with `extra` added: the keys `extra` sets before its
/// first table go before the default's tables (TOML puts a key after a
/// table header into that table), its tables after them.
fn compose_config(extra: &str) -> String {
    let split = extra
        .lines()
        .scan(0, |at, line| {
            let start = *at;
            *at += line.len() + 1;
            Some((start, line))
        })
        .find(|(_, line)| line.trim_start().starts_with('['))
        .map_or(extra.len(), |(start, _)| start);
    let (top, tables) = extra.split_at(split);
    let (default_top, default_tables) = match DEFAULT_CONFIG.find("\n[") {
        Some(at) => DEFAULT_CONFIG.split_at(at + 1),
        None => (DEFAULT_CONFIG, ""),
    };
    let mut config = String::from(default_top);
    if !top.trim().is_empty() {
        config.push_str(top.trim_end());
        config.push_str("\n\n");
    }
    config.push_str(default_tables);
    if !tables.trim().is_empty() {
        config.push('\n');
        config.push_str(tables.trim_end());
        config.push('\n');
    }
    config
}

/// XDG variables pointed into the daemon's directory, and their subfolders.
const XDG_DIRS: [(&str, &str); 5] = [
    ("XDG_CONFIG_HOME", "config"),
    ("XDG_DATA_HOME", "data"),
    ("XDG_STATE_HOME", "state"),
    ("XDG_CACHE_HOME", "cache"),
    ("XDG_RUNTIME_DIR", "run"),
];

fn pid_of(child: &Child) -> Pid {
    match i32::try_from(child.id()) {
        Ok(pid) => Pid::from_raw(pid),
        Err(_) => panic!("process id {} does not fit a pid_t", child.id()),
    }
}

fn write_file(path: &Path, contents: &[u8]) {
    let result = File::create(path).and_then(|mut f| f.write_all(contents));
    if let Err(e) = result {
        panic!("cannot write {}: {e}", path.display());
    }
}

fn create_dir(path: &Path) {
    if let Err(e) = fs::create_dir_all(path) {
        panic!("cannot create {}: {e}", path.display());
    }
}

/// Polls `f` every 10 ms until it returns true.
///
/// # Panics
/// After `timeout`, naming `what`.
pub async fn wait_for<F: FnMut() -> bool>(what: &str, timeout: Duration, mut f: F) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A tonic channel over the Unix socket at `path`.
pub async fn connect_uds(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // The URI is required by tonic but unused: the connector ignores it.
    Endpoint::from_static("http://agentd.local")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_top_level_keys_go_before_the_default_tables() {
        let config = compose_config("provider = \"openai\"\n[grpc]\nmax_text_bytes = 10\n");
        let provider = config.find("provider = \"openai\"").unwrap();
        let retry = config.find("[retry]").unwrap();
        let grpc = config.find("[grpc]").unwrap();
        assert!(provider < retry && retry < grpc, "{config}");
        assert!(config.starts_with("model = \"claude-test\"\n"), "{config}");
        // Tables only, or nothing at all.
        let tables = compose_config("[shells]\nmax_total = 1");
        assert!(tables.ends_with("[shells]\nmax_total = 1\n"), "{tables}");
        assert!(compose_config("").contains("[retry]\nbase_delay_ms = 50\n"));
    }
}
