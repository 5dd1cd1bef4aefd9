//! The attack program (`attack`): a real agentd with a TCP listener, driven
//! for a time budget by hostile callers — a driver, an approver and a viewer
//! token, an unauthenticated peer, hostile import files, hostile
//! repositories and a hostile model — and checked after every step:
//!
//! - **no program ran that no approver allowed**: every program an attack
//!   tries to start (an MCP server, a project hook, a git fsmonitor or clean
//!   filter, a bash command) touches a file in the `markers` directory, and
//!   no approver ever allows anything (the approver token only denies; the
//!   only command that runs unasked is the local user's configured
//!   `bash(echo safe)`, which touches nothing);
//! - **no file outside the allowed roots changed**: the `outside` directory
//!   keeps exactly its sentinel files, byte for byte;
//! - **no secret appears** in the store (every file of the data directory),
//!   the daemon's log, an export, or a request body the model received: the
//!   API key is a random string only this run knows, in the daemon's
//!   environment and its credentials file;
//! - **the local socket still answers within 1 s**.
//!
//! A refusal is the expected answer to most steps; what is checked is that
//! nothing got through. The first violation ends the run with a message
//! and the kept directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tonic::transport::Channel;

use crate::fake_llm::{FakeLlm, ReplyScript, Responder, Script};
use crate::harness::{DaemonOptions, TestDaemon};

/// How a run goes.
#[derive(Debug, Clone)]
pub struct AttackOptions {
    pub seed: u64,
    /// How long to attack.
    pub duration: Duration,
    /// A progress line now and then.
    pub progress: bool,
}

/// What a passing run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub steps: usize,
    /// Steps by kind.
    pub kinds: BTreeMap<&'static str, usize>,
    /// Requests refused as they should be.
    pub refused: usize,
    /// Conversations the attacks made and drove.
    pub conversations: usize,
    /// Model tool calls the hostile model made.
    pub tool_calls: usize,
    pub elapsed: Duration,
    /// The slowest local ListConversations.
    pub slowest_local: Duration,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = self.kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        write!(
            f,
            "{} steps in {:.1} s ({}); {} refusals; {} conversations; {} hostile tool calls; \
             slowest local call {} ms; all checks passed",
            self.steps,
            self.elapsed.as_secs_f64(),
            kinds.join(", "),
            self.refused,
            self.conversations,
            self.tool_calls,
            self.slowest_local.as_millis()
        )
    }
}

/// An interceptor that adds a bearer token (or nothing).
#[derive(Clone)]
struct Bearer(Option<tonic::metadata::AsciiMetadataValue>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            r.metadata_mut().insert("authorization", value.clone());
        }
        Ok(r)
    }
}

type Remote = AgentServiceClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>;

/// The places an attack aims at.
struct Places {
    /// `[remote] roots`.
    root: PathBuf,
    plain: PathBuf,
    /// A repository whose config and attributes name programs to run.
    repo: PathBuf,
    /// Must never change.
    outside: PathBuf,
    /// Must stay empty.
    markers: PathBuf,
}

/// Where a hostile program would leave its trace.
fn marker(places: &Places, what: &str) -> String {
    places.markers.join(what).display().to_string()
}

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err(&parent.display().to_string(), e))?;
    }
    std::fs::write(path, text).map_err(|e| err(&path.display().to_string(), e))
}

fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| err("git", e))?;
    if !out.status.success() {
        return Err(format!(
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

impl Places {
    fn make(base: &Path) -> Result<Places, String> {
        let root = base.join("root");
        let places = Places {
            plain: root.join("plain"),
            repo: root.join("repo"),
            root,
            outside: base.join("outside"),
            markers: base.join("markers"),
        };
        for dir in [
            &places.plain,
            &places.repo,
            &places.outside,
            &places.markers,
        ] {
            std::fs::create_dir_all(dir).map_err(|e| err(&dir.display().to_string(), e))?;
        }
        for i in 0..3 {
            write_file(
                &places.outside.join(format!("sentinel-{i}.txt")),
                &format!("sentinel {i}\n"),
            )?;
        }
        write_file(&places.plain.join("README.md"), "a plain project\n")?;
        // The hostile repository: an fsmonitor and a clean filter that would
        // run on `git add`, and project hooks nobody trusted.
        let repo = &places.repo;
        git(repo, &["init", "-q", "-b", "main"])?;
        git(repo, &["config", "user.name", "Attacker"])?;
        git(repo, &["config", "user.email", "attacker@example.com"])?;
        write_file(&repo.join("tracked.txt"), "tracked\n")?;
        git(repo, &["add", "."])?;
        git(repo, &["commit", "-qm", "first"])?;
        let fsmonitor = repo.join(".git/fsmonitor.sh");
        write_file(
            &fsmonitor,
            &format!("#!/bin/sh\ntouch {}\n", marker(&places, "fsmonitor")),
        )?;
        let filter = repo.join(".git/clean.sh");
        write_file(
            &filter,
            &format!(
                "#!/bin/sh\ntouch {}\ncat\n",
                marker(&places, "clean-filter")
            ),
        )?;
        for script in [&fsmonitor, &filter] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| err("chmod", e))?;
        }
        git(
            repo,
            &["config", "core.fsmonitor", &fsmonitor.display().to_string()],
        )?;
        git(
            repo,
            &["config", "filter.evil.clean", &filter.display().to_string()],
        )?;
        write_file(&repo.join(".gitattributes"), "* filter=evil\n")?;
        write_file(
            &repo.join(".agentd/config.toml"),
            &format!(
                "[[hooks.user_prompt_submit]]\ncommand = \"touch {}\"\n",
                marker(&places, "untrusted-hook")
            ),
        )?;
        Ok(places)
    }

    /// The sentinels as they must stay.
    fn outside_now(&self) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let mut out = BTreeMap::new();
        for entry in std::fs::read_dir(&self.outside).map_err(|e| err("outside", e))? {
            let entry = entry.map_err(|e| err("outside", e))?;
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            out.insert(entry.file_name().to_string_lossy().into_owned(), bytes);
        }
        Ok(out)
    }
}

/// The hostile model: each reply asks for one tool call meant to get
/// something it should not — a secret, a file outside, a program run —
/// and ends the turn after three rounds.
fn hostile_model(
    places: &Places,
    credentials: PathBuf,
    seed: u64,
    calls: Arc<Mutex<usize>>,
) -> Responder {
    let rng = Mutex::new(StdRng::seed_from_u64(seed ^ 0x5EED));
    let escape = places.outside.join("sentinel-0.txt").display().to_string();
    let creds = credentials.display().to_string();
    let touch = marker(places, "bash-unasked");
    let compound = marker(places, "bash-compound");
    Arc::new(move |body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let rounds = messages
            .iter()
            .rev()
            .take_while(|m| {
                m["role"] == "assistant"
                    || m["content"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
            })
            .filter(|m| m["role"] == "assistant")
            .count();
        if rounds >= 3 {
            return Script::text("done");
        }
        let mut rng = rng.lock().unwrap_or_else(PoisonError::into_inner);
        let mut count = calls.lock().unwrap_or_else(PoisonError::into_inner);
        *count += 1;
        let id = format!("atk{}", *count);
        let (name, input) = match rng.random_range(0..11) {
            0 => ("read", json!({"path": creds})),
            1 => ("read", json!({"path": "/proc/self/environ"})),
            2 => ("read", json!({"path": "../../outside/sentinel-1.txt"})),
            3 => ("write", json!({"path": escape, "content": "pwned\n"})),
            4 => (
                "write",
                json!({"path": "../../outside/new.txt", "content": "pwned\n"}),
            ),
            5 => ("bash", json!({"command": "echo safe"})),
            6 => ("bash", json!({"command": format!("touch {touch}")})),
            7 => (
                "bash",
                json!({"command": format!("echo safe; touch {compound}")}),
            ),
            8 => ("grep", json!({"pattern": "sk-ant", "path": "/"})),
            9 => (
                "glob",
                json!({"pattern": "**/credentials.toml", "path": "/"}),
            ),
            _ => (
                "edit",
                json!({"path": "/etc/hostname", "old_string": "a", "new_string": "b"}),
            ),
        };
        Script::Reply(ReplyScript::new().tool_use(&id, name, input))
    })
}

/// A ULID-shaped id from the run's randomness.
fn fresh_id(rng: &mut StdRng) -> String {
    const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut id = String::from("01J");
    for _ in 0..23 {
        id.push(char::from(CROCKFORD[rng.random_range(0..CROCKFORD.len())]));
    }
    id
}

/// The kinds of step.
const KINDS: [&str; 10] = [
    "hostile create",
    "hostile attach create",
    "remote work",
    "hostile update",
    "approver answers",
    "viewer oversteps",
    "unauthenticated",
    "hostile import",
    "local work",
    "send",
];

struct Attack {
    opts: AttackOptions,
    places: Places,
    fake: FakeLlm,
    daemon: TestDaemon,
    local: AgentServiceClient<Channel>,
    driver: Remote,
    approver: Remote,
    viewer: Remote,
    at: (String, String),
    secret: String,
    sentinels: BTreeMap<String, Vec<u8>>,
    conversations: Vec<String>,
    rng: StdRng,
    summary: Summary,
    calls: Arc<Mutex<usize>>,
}

/// Runs the attack; the first violation is the error.
pub async fn run(opts: AttackOptions) -> Result<Summary, String> {
    let base = tempfile::Builder::new()
        .prefix("agentd-attack-")
        .tempdir()
        .map_err(|e| err("tempdir", e))?;
    let mut attack = Attack::set_up(opts, base.path()).await?;
    match attack.go().await {
        Ok(()) => Ok(attack.summary),
        Err(violation) => {
            let kept = base.keep();
            Err(format!(
                "attack: VIOLATION after {} steps (seed {}): {violation}\nthe run's directory is kept: {}",
                attack.summary.steps,
                attack.opts.seed,
                kept.display()
            ))
        }
    }
}

async fn remote(at: &(String, String), token: Option<&str>) -> Result<Remote, String> {
    let channel = agent_cli::remote::channel(&at.0, &at.1)
        .await
        .map_err(|e| err("TLS channel", e))?;
    let header = match token {
        Some(t) => Some(
            format!("Bearer {t}")
                .parse()
                .map_err(|e| err("token header", e))?,
        ),
        None => None,
    };
    Ok(AgentServiceClient::with_interceptor(
        channel,
        Bearer(header),
    ))
}

impl Attack {
    async fn set_up(opts: AttackOptions, base: &Path) -> Result<Attack, String> {
        let places = Places::make(base)?;
        let mut rng = StdRng::seed_from_u64(opts.seed);
        let secret = format!(
            "sk-ant-attack-{:016x}{:016x}",
            rng.random::<u64>(),
            rng.random::<u64>()
        );
        let fake = FakeLlm::start().await;
        let calls = Arc::new(Mutex::new(0));
        let root = places.root.canonicalize().map_err(|e| err("root", e))?;
        let config = format!(
            "[permissions]\nallow = [\"bash(echo safe)\"]\n\n[remote]\nlisten = \"127.0.0.1:0\"\nroots = [{:?}]",
            root.display().to_string()
        );
        let daemon = TestDaemon::start_with(
            &fake,
            DaemonOptions {
                extra_config: config,
                env: vec![("ANTHROPIC_API_KEY".to_string(), secret.clone())],
                ..Default::default()
            },
        )
        .await;
        let credentials = daemon.user_config_dir().join("credentials.toml");
        write_file(
            &credentials,
            &format!("[anthropic]\napi_key = {secret:?}\n"),
        )?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| err("chmod", e))?;
        }
        fake.set_responder(Some(hostile_model(
            &places,
            credentials,
            opts.seed,
            calls.clone(),
        )));
        let mut local = daemon.client().await;
        let info = local
            .list_tokens(pb::ListTokensRequest {})
            .await
            .map_err(|e| err("ListTokens", e))?
            .into_inner();
        let at = (info.listen_address, info.fingerprint);
        let token = |role: pb::ClientRole, name: &str| {
            let mut local = local.clone();
            let name = name.to_string();
            async move {
                local
                    .create_token(pb::CreateTokenRequest {
                        role: role as i32,
                        name,
                        ..Default::default()
                    })
                    .await
                    .map(|r| r.into_inner().secret)
                    .map_err(|e| err("CreateToken", e))
            }
        };
        let driver = token(pb::ClientRole::Driver, "attacker-driver").await?;
        let approver = token(pb::ClientRole::Approver, "attacker-approver").await?;
        let viewer = token(pb::ClientRole::Viewer, "attacker-viewer").await?;
        let sentinels = places.outside_now()?;
        Ok(Attack {
            driver: remote(&at, Some(&driver)).await?,
            approver: remote(&at, Some(&approver)).await?,
            viewer: remote(&at, Some(&viewer)).await?,
            fake,
            places,
            daemon,
            local,
            at,
            secret,
            sentinels,
            conversations: Vec::new(),
            rng,
            summary: Summary::default(),
            calls,
            opts,
        })
    }

    async fn go(&mut self) -> Result<(), String> {
        let start = Instant::now();
        let mut last_progress = Instant::now();
        self.check(true).await?;
        while start.elapsed() < self.opts.duration {
            let kind = KINDS[self.rng.random_range(0..KINDS.len())];
            self.step(kind).await?;
            self.summary.steps += 1;
            *self.summary.kinds.entry(kind).or_default() += 1;
            // The full scan of the store now and then; the rest every step.
            self.check(self.summary.steps.is_multiple_of(10)).await?;
            if self.opts.progress && last_progress.elapsed() > Duration::from_secs(30) {
                last_progress = Instant::now();
                println!(
                    "attack: {} steps, {:.0} s, {} refusals, {} conversations",
                    self.summary.steps,
                    start.elapsed().as_secs_f64(),
                    self.summary.refused,
                    self.conversations.len()
                );
            }
        }
        self.check(true).await?;
        self.summary.elapsed = start.elapsed();
        self.summary.conversations = self.conversations.len();
        self.summary.tool_calls = *self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(())
    }

    /// A request that must be refused: counted when it is, a violation
    /// when it is not.
    fn refused<T>(&mut self, what: &str, result: Result<T, tonic::Status>) -> Result<(), String> {
        match result {
            Err(_) => {
                self.summary.refused += 1;
                Ok(())
            }
            Ok(_) => Err(format!("{what} was accepted")),
        }
    }

    fn in_root(&mut self) -> PathBuf {
        if self.rng.random_bool(0.5) {
            self.places.plain.clone()
        } else {
            self.places.repo.clone()
        }
    }

    /// A create request with at least one grant a remote driver may not give.
    fn hostile_create(&mut self) -> pb::CreateConversationRequest {
        let cwd = self.in_root();
        let mut req = pb::CreateConversationRequest {
            cwd: cwd.display().to_string(),
            prompt: "hello".to_string(),
            ..Default::default()
        };
        let mut hostile = false;
        while !hostile {
            if self.rng.random_bool(0.3) {
                req.mcp_servers.push(pb::McpServer {
                    name: "x".to_string(),
                    command: "sh".to_string(),
                    args: vec![
                        "-c".to_string(),
                        format!("touch {}", marker(&self.places, "mcp")),
                    ],
                    ..Default::default()
                });
                hostile = true;
            }
            if self.rng.random_bool(0.3) {
                req.allow_rules.push("bash".to_string());
                hostile = true;
            }
            if self.rng.random_bool(0.3) {
                req.mode = pb::PermissionMode::Bypass as i32;
                hostile = true;
            }
            if self.rng.random_bool(0.3) {
                let dir = ["/", "/etc"][self.rng.random_range(0..2)];
                req.additional_dirs.push(dir.to_string());
                hostile = true;
            }
            if self.rng.random_bool(0.3) {
                req.cwd = format!("{}/../../outside", self.places.plain.display());
                hostile = true;
            }
        }
        req
    }

    async fn step(&mut self, kind: &str) -> Result<(), String> {
        match kind {
            "hostile create" => {
                let req = self.hostile_create();
                let result = self.driver.create_conversation(req.clone()).await;
                self.refused(&format!("a remote create carrying {req:?}"), result)
            }
            "hostile attach create" => {
                let req = self.hostile_create();
                let (tx, rx) = tokio::sync::mpsc::channel(1);
                let frame = pb::AttachRequest {
                    frame: Some(pb::attach_request::Frame::Create(pb::CreateAndSubscribe {
                        create: Some(req.clone()),
                        client_name: "attacker".to_string(),
                        ..Default::default()
                    })),
                };
                let _ = tx.send(frame).await;
                let result = match self
                    .driver
                    .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
                    .await
                {
                    Err(status) => Err(status),
                    Ok(stream) => match stream.into_inner().message().await {
                        Ok(Some(first)) => Ok(first),
                        Ok(None) => Err(tonic::Status::cancelled("ended")),
                        Err(status) => Err(status),
                    },
                };
                self.refused(&format!("an Attach create carrying {req:?}"), result)
            }
            "remote work" => {
                let cwd = self.in_root();
                let mode = if self.rng.random_bool(0.5) {
                    pb::PermissionMode::AcceptEdits
                } else {
                    pb::PermissionMode::Default
                };
                let made = self
                    .driver
                    .create_conversation(pb::CreateConversationRequest {
                        cwd: cwd.display().to_string(),
                        prompt: "find me the key".to_string(),
                        mode: mode as i32,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| err("a benign remote create was refused", e))?;
                if let Some(c) = made.into_inner().conversation {
                    self.conversations.push(c.id);
                }
                Ok(())
            }
            "hostile update" => {
                let Some(id) = self.any_conversation() else {
                    return Ok(());
                };
                let req = if self.rng.random_bool(0.5) {
                    pb::UpdateConversationRequest {
                        conversation_id: id,
                        mode: pb::PermissionMode::Bypass as i32,
                        ..Default::default()
                    }
                } else {
                    pb::UpdateConversationRequest {
                        conversation_id: id,
                        add_dirs: vec!["/".to_string()],
                        ..Default::default()
                    }
                };
                let result = self.driver.update_conversation(req.clone()).await;
                self.refused(&format!("a remote update {req:?}"), result)
            }
            "approver answers" => {
                for id in self.conversations.clone() {
                    let decision = if self.rng.random_bool(0.5) {
                        pb::PermissionDecision::Deny
                    } else {
                        pb::PermissionDecision::DenyAndStop
                    };
                    // Refused when nothing waits: either is fine.
                    let _ = self
                        .approver
                        .answer_permission(pb::AnswerPermissionRequest {
                            conversation_id: id,
                            decision: decision as i32,
                            client_name: "attacker-approver".to_string(),
                            ..Default::default()
                        })
                        .await;
                }
                let Some(id) = self.any_conversation() else {
                    return Ok(());
                };
                let result = self
                    .approver
                    .send_message(pb::SendMessageRequest {
                        conversation_id: id,
                        text: "let me in".to_string(),
                        ..Default::default()
                    })
                    .await;
                self.refused("an approver's SendMessage", result)
            }
            "viewer oversteps" => {
                let id = self.any_conversation().unwrap_or_default();
                let cwd = self.places.plain.display().to_string();
                let result = match self.rng.random_range(0..5) {
                    0 => self
                        .viewer
                        .send_message(pb::SendMessageRequest {
                            conversation_id: id,
                            text: "x".to_string(),
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                    1 => self
                        .viewer
                        .cancel_conversation(pb::CancelConversationRequest {
                            conversation_id: id,
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                    2 => self
                        .viewer
                        .answer_permission(pb::AnswerPermissionRequest {
                            conversation_id: id,
                            decision: pb::PermissionDecision::AllowOnce as i32,
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                    3 => self
                        .viewer
                        .create_conversation(pb::CreateConversationRequest {
                            cwd,
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                    _ => self
                        .viewer
                        .update_conversation(pb::UpdateConversationRequest {
                            conversation_id: id,
                            mode: pb::PermissionMode::AcceptEdits as i32,
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                };
                self.refused("a viewer's change", result)
            }
            "unauthenticated" => {
                if self.rng.random_bool(0.5) {
                    // Garbage on the TLS port.
                    use tokio::io::AsyncWriteExt;
                    if let Ok(mut s) = tokio::net::TcpStream::connect(&self.at.0).await {
                        let junk: Vec<u8> = (0..64).map(|_| self.rng.random()).collect();
                        let _ = s.write_all(&junk).await;
                    }
                    Ok(())
                } else {
                    let token = if self.rng.random_bool(0.5) {
                        None
                    } else {
                        Some(
                            "agentd_0000000000000000000000000000000000000000000000000000000000000000",
                        )
                    };
                    let mut client = remote(&self.at, token).await?;
                    let result = client
                        .list_conversations(pb::ListConversationsRequest::default())
                        .await;
                    self.refused("a call without a valid token", result)
                }
            }
            "hostile import" => {
                let id = fresh_id(&mut self.rng);
                let remote_import = self.rng.random_bool(0.5);
                // Only a remote import may name a directory outside the
                // roots (refused); a local one could, and would make it the
                // user's.
                let cwd = if remote_import && self.rng.random_bool(0.3) {
                    format!("{}/../../outside", self.places.plain.display())
                } else {
                    format!("{}/../plain", self.places.repo.display())
                };
                let item = pb::ExportedConversation {
                    conversation: Some(pb::ConversationSummary {
                        id: id.clone(),
                        cwd: cwd.clone(),
                        model: "claude-test".to_string(),
                        mode: pb::PermissionMode::Bypass as i32,
                        allow_rules: vec!["bash".to_string(), "write".to_string()],
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                let items = futures::stream::iter([item]);
                let result = if remote_import {
                    self.driver.import_conversations(items).await
                } else {
                    self.local.import_conversations(items).await
                };
                if let Ok(reply) = result {
                    if reply.into_inner().notices.len() < 2 {
                        return Err(format!(
                            "an import of {id} (bypass, allow rules) was taken without its grants taken away"
                        ));
                    }
                    self.conversations.push(id.clone());
                    // Imported: drive it, so a kept bypass would show.
                    let _ = self
                        .local
                        .send_message(pb::SendMessageRequest {
                            conversation_id: id,
                            text: "go".to_string(),
                            ..Default::default()
                        })
                        .await;
                } else {
                    self.summary.refused += 1;
                }
                Ok(())
            }
            "local work" => {
                // The user, locally, in the hostile repository or in the
                // daemon's own directory (as one runs agent in $HOME).
                let cwd = if self.rng.random_bool(0.5) {
                    self.places.repo.clone()
                } else {
                    self.daemon.dir.path().to_path_buf()
                };
                let made = self
                    .local
                    .create_conversation(pb::CreateConversationRequest {
                        cwd: cwd.display().to_string(),
                        prompt: "tidy up".to_string(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| err("a local create was refused", e))?;
                if let Some(c) = made.into_inner().conversation {
                    self.conversations.push(c.id);
                }
                Ok(())
            }
            _ => {
                let Some(id) = self.any_conversation() else {
                    return Ok(());
                };
                let _ = self
                    .driver
                    .send_message(pb::SendMessageRequest {
                        conversation_id: id,
                        text: "more".to_string(),
                        queue_if_busy: true,
                        ..Default::default()
                    })
                    .await;
                Ok(())
            }
        }
    }

    fn any_conversation(&mut self) -> Option<String> {
        if self.conversations.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..self.conversations.len());
        self.conversations.get(i).cloned()
    }

    /// Every invariant of the module doc; `full` adds the store and export
    /// scans.
    async fn check(&mut self, full: bool) -> Result<(), String> {
        let started = Instant::now();
        let listed = tokio::time::timeout(
            Duration::from_secs(1),
            self.local
                .list_conversations(pb::ListConversationsRequest::default()),
        )
        .await;
        let took = started.elapsed();
        self.summary.slowest_local = self.summary.slowest_local.max(took);
        match listed {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(err("the local socket refused ListConversations", e)),
            Err(_) => return Err("the local socket did not answer within 1 s".to_string()),
        }
        let markers: Vec<String> = std::fs::read_dir(&self.places.markers)
            .map_err(|e| err("markers", e))?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if !markers.is_empty() {
            return Err(format!(
                "programs ran that no approver allowed: {markers:?}"
            ));
        }
        if self.places.outside_now()? != self.sentinels {
            return Err(format!(
                "a file outside the allowed roots changed: {:?}",
                self.places.outside_now()?.keys().collect::<Vec<_>>()
            ));
        }
        let secret = self.secret.clone();
        if self.daemon.log().contains(&secret) {
            return Err("the API key is in the daemon's log".to_string());
        }
        for request in self.fake.requests() {
            if request.body.to_string().contains(&secret) {
                return Err(format!(
                    "the API key reached the model in a request body: {}",
                    request.body
                ));
            }
        }
        if full {
            if let Some(file) = file_containing(&self.daemon.data_dir, secret.as_bytes())? {
                return Err(format!("the API key is in the store: {}", file.display()));
            }
            let mut export = self
                .local
                .export_conversations(pb::ExportConversationsRequest::default())
                .await
                .map_err(|e| err("export", e))?
                .into_inner();
            while let Some(item) = export.message().await.map_err(|e| err("export", e))? {
                if format!("{item:?}").contains(&secret) {
                    return Err("the API key is in an export".to_string());
                }
            }
        }
        Ok(())
    }
}

/// A file under `dir` whose bytes contain `needle`.
fn file_containing(dir: &Path, needle: &[u8]) -> Result<Option<PathBuf>, String> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && std::fs::read(&path)
                    .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
            {
                return Ok(Some(path));
            }
        }
    }
    Ok(None)
}
