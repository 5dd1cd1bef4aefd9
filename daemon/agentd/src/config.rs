//! Daemon configuration: a TOML file, the conventional environment
//! variables, and command-line flags, in rising order of precedence.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The model used when neither a flag, the config file nor the request names one.
pub const DEFAULT_MODEL: &str = "claude-sonnet-4-5";

/// Configuration errors, reported at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("invalid config file {path}: {message}")]
    Parse {
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// An API key in a file other users can read.
    #[error(
        "config file {path} holds an API key but is readable by other users (mode {mode:o}); run `chmod 600 {path}`"
    )]
    InsecureKeyFile { path: PathBuf, mode: u32 },
    /// A value out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Which wire protocol the LLM speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Anthropic Messages API.
    #[default]
    Anthropic,
    /// OpenAI-compatible chat completions (Ollama, vLLM, llama.cpp, OpenRouter).
    Openai,
}

/// Credentials and endpoint of one provider.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    /// The API key (prefer the environment variable).
    pub api_key: Option<String>,
    /// The endpoint, e.g. `https://api.anthropic.com`.
    pub base_url: Option<String>,
}

/// Retry policy for model requests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySection {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// First backoff delay; doubles per attempt.
    pub base_delay_ms: u64,
    /// Largest backoff delay.
    pub max_delay_ms: u64,
    /// A `retry-after` longer than this is not waited for.
    pub max_retry_after_ms: u64,
}

impl Default for RetrySection {
    fn default() -> Self {
        RetrySection {
            max_attempts: 3,
            base_delay_ms: 1_000,
            max_delay_ms: 30_000,
            max_retry_after_ms: 120_000,
        }
    }
}

/// Limits on the agent loop and tools.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// Model rounds per user turn.
    pub max_iterations: u32,
    /// Tool output kept for the model, bytes.
    pub max_output_bytes: usize,
    pub bash_default_timeout_ms: u64,
    /// Largest bash timeout the model may ask for, ms.
    pub bash_max_timeout_ms: u64,
    /// Grace between SIGTERM and SIGKILL, ms.
    pub kill_grace_ms: u64,
    /// `max_tokens` of each model request.
    pub max_tokens: u32,
    /// The model's context window, tokens.
    pub context_window: u64,
    /// A conversation at rest with no client attached is unloaded from
    /// memory after this long (it stays on disk and loads again on use), ms.
    pub idle_unload_ms: u64,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            max_iterations: 100,
            max_output_bytes: 30_000,
            bash_default_timeout_ms: 120_000,
            bash_max_timeout_ms: 600_000,
            kill_grace_ms: 2_000,
            max_tokens: 16_384,
            context_window: 200_000,
            idle_unload_ms: 60_000,
        }
    }
}

/// Permission defaults for every conversation.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PermissionsSection {
    /// Mode of new conversations (`read_only`, `default`, `accept_edits`, `plan`; `bypass` needs `--allow-bypass`).
    pub mode: Option<agentd_core::Mode>,
    /// Rules that allow, e.g. `bash(cargo test:*)`.
    pub allow: Vec<String>,
    /// Rules that ask even where others would allow.
    pub ask: Vec<String>,
    pub deny: Vec<String>,
    /// What the same call repeated three times does: `allow`, `ask` (default), `deny`.
    pub doom_loop: Option<agentd_core::Action>,
}

/// Limits on background shells.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShellsSection {
    /// Running shells per daemon.
    pub max_total: usize,
    /// Running shells per conversation.
    pub max_per_conversation: usize,
    /// Output kept per shell (spooled to disk), bytes.
    pub max_output_bytes: u64,
}

impl Default for ShellsSection {
    fn default() -> Self {
        let d = crate::shells::ShellLimits::default();
        ShellsSection {
            max_total: d.max_total,
            max_per_conversation: d.max_per_conversation,
            max_output_bytes: d.max_spool_bytes,
        }
    }
}

/// Limits on what clients send over gRPC. Each is checked per request and
/// named in the error a client gets when it is over it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcSection {
    /// Largest gRPC message the daemon decodes, bytes: a unary request, one
    /// Attach frame, one conversation of an import. A request over it is
    /// refused with OUT_OF_RANGE; an Attach or import stream is closed with
    /// that status.
    pub max_message_bytes: usize,
    /// Largest user text, bytes: a message, a prompt, permission feedback.
    /// Over it: INVALID_ARGUMENT (an error event on Attach, and the stream
    /// stays usable).
    pub max_text_bytes: usize,
    /// Largest HTTP/2 frame the daemon accepts (its SETTINGS_MAX_FRAME_SIZE),
    /// 16384 to 16777215 bytes.
    pub max_frame_bytes: u32,
}

/// Project instructions (AGENTS.md files).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InstructionsSection {
    /// Text of all instruction files together kept for the model, bytes
    /// (0: none are read).
    pub max_bytes: usize,
}

impl Default for InstructionsSection {
    fn default() -> Self {
        InstructionsSection {
            max_bytes: 32 * 1024,
        }
    }
}

/// What happens when a conversation's context fills up (README
/// "Long work: context continuation").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextSection {
    /// Continue an exhausted conversation in a new one without a person
    /// (as `agent continue` does), so unattended work goes on.
    pub auto_continue: bool,
    /// Continuations in a row the daemon makes by itself, counted from the
    /// first conversation of the chain; past it, a person continues.
    pub max_hops: u32,
    /// Past the warning share of the window, send old large tool outputs
    /// as a note (the transcript keeps them), which puts off the summary
    /// (README "Context continuation").
    pub prune_tool_outputs: bool,
}

impl Default for ContextSection {
    fn default() -> Self {
        ContextSection {
            auto_continue: false,
            max_hops: 10,
            prune_tool_outputs: true,
        }
    }
}

/// What conversations may spend (README "Budgets"): dollars at the model
/// table's prices, and tokens (which count for every model, priced or
/// not). Unset: no such budget.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetSection {
    pub per_conversation_usd: Option<f64>,
    pub per_day_usd: Option<f64>,
    pub per_conversation_tokens: Option<u64>,
    pub per_day_tokens: Option<u64>,
}

impl BudgetSection {
    /// The budgets as the core checks them (micro-dollars and tokens).
    pub fn amounts(&self) -> Result<agentd_core::Amounts, ConfigError> {
        let usd = |name: &str, value: Option<f64>| match value {
            None => Ok(None),
            Some(v) if v.is_finite() && v > 0.0 && v < 1e9 => {
                Ok(Some(agentd_core::budget::micro_usd(v).max(1)))
            }
            Some(v) => Err(ConfigError::Invalid(format!(
                "budget.{name} must be a positive number of dollars, got {v}"
            ))),
        };
        let tokens = |name: &str, value: Option<u64>| match value {
            Some(0) => Err(ConfigError::Invalid(format!(
                "budget.{name} must be at least 1 token"
            ))),
            other => Ok(other),
        };
        Ok(agentd_core::Amounts {
            per_conversation_usd: usd("per_conversation_usd", self.per_conversation_usd)?,
            per_day_usd: usd("per_day_usd", self.per_day_usd)?,
            per_conversation_tokens: tokens(
                "per_conversation_tokens",
                self.per_conversation_tokens,
            )?,
            per_day_tokens: tokens("per_day_tokens", self.per_day_tokens)?,
        })
    }
}

/// Images users send with their messages (README "Images").
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImagesSection {
    /// Largest image, bytes.
    pub max_bytes: u64,
    /// Most images in one message.
    pub max_per_message: usize,
    /// Largest width or height, pixels.
    pub max_dimension: u32,
}

impl Default for ImagesSection {
    fn default() -> Self {
        let limits = agentd_core::ImageLimits::default();
        ImagesSection {
            max_bytes: limits.max_bytes,
            max_per_message: limits.max_per_message,
            max_dimension: limits.max_dimension,
        }
    }
}

impl ImagesSection {
    /// The limits the core checks.
    pub fn limits(&self) -> agentd_core::ImageLimits {
        agentd_core::ImageLimits {
            max_bytes: self.max_bytes,
            max_per_message: self.max_per_message,
            max_dimension: self.max_dimension,
        }
    }

    /// A request with images must also fit `[grpc] max_message_bytes`
    /// (over it, tonic refuses the whole request with OUT_OF_RANGE).
    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_bytes == 0 || self.max_dimension == 0 {
            return Err(ConfigError::Invalid(
                "images.max_bytes and images.max_dimension must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Plans (README "Plans"): what a request that deserves a plan does.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlanSection {
    /// `off`, `suggest` (the default: clients ask whether to plan first) or
    /// `require` (the conversation enters plan mode).
    pub detect: agentd_core::plan::PlanDetect,
    /// When a step of an approved plan fails, restore the files the agent
    /// changed since that step started (README "Checkpoints and rewind").
    pub auto_rollback_on_failure: bool,
}

/// Checkpoints (README "Checkpoints and rewind"): what the daemon keeps of
/// files before the agent changes them, and for how long.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointsSection {
    /// Record checkpoints at all.
    pub enabled: bool,
    /// Bytes of stored file contents kept at most; the oldest checkpoints
    /// go first.
    pub max_bytes: u64,
    /// Days a checkpoint is kept.
    pub max_age_days: u64,
}

impl Default for CheckpointsSection {
    fn default() -> Self {
        CheckpointsSection {
            enabled: true,
            max_bytes: 512 * 1024 * 1024,
            max_age_days: 30,
        }
    }
}

/// Sub-agents (README "Sub-agents").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubAgentsSection {
    /// Children of one `spawn_agents` call that run at once; the rest wait
    /// their turn.
    pub max_concurrent: usize,
}

impl Default for SubAgentsSection {
    fn default() -> Self {
        SubAgentsSection { max_concurrent: 4 }
    }
}

/// HTTP/2's bounds on SETTINGS_MAX_FRAME_SIZE (RFC 9113 §6.5.2).
const HTTP2_FRAME_BYTES: std::ops::RangeInclusive<u32> = 16_384..=16_777_215;

impl Default for GrpcSection {
    fn default() -> Self {
        GrpcSection {
            max_message_bytes: 32 * 1024 * 1024,
            max_text_bytes: 1024 * 1024,
            max_frame_bytes: 16_384,
        }
    }
}

impl GrpcSection {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_message_bytes < 64 * 1024 {
            return Err(ConfigError::Invalid(format!(
                "grpc.max_message_bytes must be at least 65536, got {}",
                self.max_message_bytes
            )));
        }
        if self.max_text_bytes == 0 || self.max_text_bytes > self.max_message_bytes {
            return Err(ConfigError::Invalid(format!(
                "grpc.max_text_bytes must be between 1 and grpc.max_message_bytes ({}), got {}",
                self.max_message_bytes, self.max_text_bytes
            )));
        }
        if !HTTP2_FRAME_BYTES.contains(&self.max_frame_bytes) {
            return Err(ConfigError::Invalid(format!(
                "grpc.max_frame_bytes must be between {} and {}, got {}",
                HTTP2_FRAME_BYTES.start(),
                HTTP2_FRAME_BYTES.end(),
                self.max_frame_bytes
            )));
        }
        Ok(())
    }
}

/// The daemon's async runtime.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// Threads that run the daemon's tasks; 0 (the default) is one per two
    /// CPUs, at least one: the other CPUs are left to the commands the
    /// agent runs, the blocking pool (file tools, git) and the clients.
    pub worker_threads: usize,
}

impl RuntimeSection {
    /// The number of worker threads to start.
    pub fn workers(&self) -> usize {
        match self.worker_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
            n => n,
        }
    }
}

/// Persistence.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    /// What an acknowledged write survives: `kill` (a killed daemon; the
    /// default) or `power` (a power cut too, at the cost of an `fdatasync`
    /// of the journal per flush).
    pub sync: crate::store::Sync,
    /// Bytes of sled's page cache.
    pub cache_bytes: u64,
}

impl Default for StoreSection {
    fn default() -> StoreSection {
        StoreSection {
            sync: crate::store::Sync::default(),
            cache_bytes: crate::store::DEFAULT_CACHE_BYTES,
        }
    }
}

impl StoreSection {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.cache_bytes < crate::store::MIN_CACHE_BYTES {
            return Err(ConfigError::Invalid(format!(
                "store.cache_bytes must be at least {}, got {}",
                crate::store::MIN_CACHE_BYTES,
                self.cache_bytes
            )));
        }
        Ok(())
    }
}

/// The TCP listener for remote clients (`[remote]`; README "Remote use").
/// Off unless `listen` (or `agentd --listen`) names an address.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteSection {
    /// `ADDR:PORT` to listen on, TLS only, every call with a bearer token.
    pub listen: Option<String>,
    /// A PEM certificate (chain) to serve instead of the daemon's own
    /// self-signed one; `key_file` must be given with it.
    pub cert_file: Option<PathBuf>,
    /// The PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Names (DNS names or IP addresses) the self-signed certificate
    /// names besides `localhost`, `agentd` and the listen address.
    pub cert_names: Vec<String>,
    /// Remote connections open at once (handshaking or served); more are
    /// closed as they are accepted. Never more than half the daemon's
    /// file descriptors, so the Unix socket always has room.
    pub max_connections: usize,
    /// How long a client may take from its connection to the end of its
    /// TLS handshake.
    pub handshake_timeout_ms: u64,
    /// How long a remote connection with no call in progress is kept.
    pub idle_timeout_ms: u64,
    /// TLS handshakes one address may have in progress at once; more are
    /// closed as they are accepted.
    pub max_handshakes_per_address: usize,
    /// The directories remote clients may work in (a conversation's
    /// working directory and the directories it adds must lie in one);
    /// the daemon user's home when empty. See `grpc::admission`.
    pub roots: Vec<PathBuf>,
}

impl Default for RemoteSection {
    fn default() -> RemoteSection {
        RemoteSection {
            listen: None,
            cert_file: None,
            key_file: None,
            cert_names: Vec::new(),
            max_connections: 256,
            handshake_timeout_ms: 2_000,
            idle_timeout_ms: 300_000,
            max_handshakes_per_address: 8,
            roots: Vec::new(),
        }
    }
}

impl RemoteSection {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(ConfigError::Invalid(
                "remote.cert_file and remote.key_file go together: give both or neither".into(),
            ));
        }
        for (key, value) in [
            ("max_connections", self.max_connections as u64),
            ("handshake_timeout_ms", self.handshake_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            (
                "max_handshakes_per_address",
                self.max_handshakes_per_address as u64,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!(
                    "remote.{key} must be at least 1"
                )));
            }
        }
        for name in &self.cert_names {
            if name.trim().is_empty() || name.contains(char::is_whitespace) {
                return Err(ConfigError::Invalid(format!(
                    "remote.cert_names: {name:?} is not a host name or address"
                )));
            }
        }
        Ok(())
    }
}

/// The daemon's own log (`[log]`): when its standard error is a regular
/// file (an autostarted daemon's `agentd.log`, or a redirection), the file
/// is kept under `max_bytes`: past it, it becomes `<file>.1` (replacing
/// the one before) and a new file is started.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    pub max_bytes: u64,
}

impl Default for LogSection {
    fn default() -> LogSection {
        LogSection {
            max_bytes: 10 * 1024 * 1024,
        }
    }
}

/// The config file's schema.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// Default model.
    pub model: Option<String>,
    pub provider: ProviderKind,
    /// Replaces the built-in system prompt.
    pub system_prompt: Option<String>,
    pub anthropic: ProviderSection,
    /// OpenAI-compatible settings.
    pub openai: ProviderSection,
    pub retry: RetrySection,
    pub limits: LimitsSection,
    pub permissions: PermissionsSection,
    pub shells: ShellsSection,
    /// Limits on what clients send.
    pub grpc: GrpcSection,
    pub instructions: InstructionsSection,
    /// Models the built-in table lacks, or entries of it changed:
    /// `[models."NAME"]` with `context_window`, `max_output_tokens`, `price`.
    pub models: std::collections::HashMap<String, crate::models::ModelSection>,
    /// Persistence.
    pub store: StoreSection,
    /// The async runtime.
    pub runtime: RuntimeSection,
    /// Commands run at points of a turn (README "Hooks").
    pub hooks: crate::hooks::HooksSection,
    /// Context continuation.
    pub context: ContextSection,
    /// MCP servers (README "MCP servers").
    pub mcp: crate::mcp::McpSection,
    /// Spending limits (README "Budgets").
    pub budget: BudgetSection,
    /// Images in user messages (README "Images").
    pub images: ImagesSection,
    /// The TCP listener (README "Remote use").
    pub remote: RemoteSection,
    /// The daemon's log file.
    pub log: LogSection,
    /// Plans (README "Plans").
    pub plan: PlanSection,
    /// Sub-agents.
    pub sub_agents: SubAgentsSection,
    /// Checkpoints (README "Checkpoints and rewind").
    pub checkpoints: CheckpointsSection,
}

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Default model.
    pub model: String,
    pub provider: ProviderKind,
    /// The provider's endpoint. (Its API key is not here: it is resolved
    /// for every request, see `llm::credentials`.)
    pub base_url: String,
    /// Replaces the built-in system prompt.
    pub system_prompt: Option<String>,
    pub retry: RetrySection,
    pub limits: LimitsSection,
    /// Mode of new conversations that do not ask for one.
    pub default_mode: agentd_core::Mode,
    /// Rules from the config file, for every conversation.
    pub rules: Vec<agentd_core::Rule>,
    /// What a doom loop does.
    pub doom_loop: agentd_core::Action,
    /// Whether conversations may use `bypass` mode (`--allow-bypass`).
    pub allow_bypass: bool,
    pub shells: ShellsSection,
    /// Limits on what clients send.
    pub grpc: GrpcSection,
    pub instructions: InstructionsSection,
    /// Context windows, output limits and prices of models.
    pub models: crate::models::Models,
    /// The user's own instructions live here (`AGENTS.md`): the config
    /// directory (`$XDG_CONFIG_HOME/agentd`, else `~/.config/agentd`).
    pub user_dir: Option<PathBuf>,
    /// Persistence.
    pub store: StoreSection,
    /// The async runtime.
    pub runtime: RuntimeSection,
    /// The user's hooks, checked; a trusted project's are added per
    /// conversation.
    pub hooks: crate::hooks::Hooks,
    /// The default time limit of a hook, ms (project hooks use it too).
    pub hook_timeout_ms: u64,
    /// Context continuation.
    pub context: ContextSection,
    /// The MCP servers of the config file, checked.
    pub mcp_servers: Vec<crate::mcp::ServerSpec>,
    /// Spending limits, checked (micro-dollars and tokens).
    pub budget: agentd_core::Amounts,
    /// Limits on images in user messages.
    pub images: ImagesSection,
    /// The TCP listener (`--listen` overrides `listen`).
    pub remote: RemoteSection,
    /// The daemon's log file.
    pub log: LogSection,
    /// Plans.
    pub plan: PlanSection,
    /// Sub-agents.
    pub sub_agents: SubAgentsSection,
    /// Checkpoints and their retention.
    pub checkpoints: CheckpointsSection,
}

impl Config {
    /// Reads `path` (when given, or the default file when it exists) and
    /// overlays the environment. `env` is injected so tests need not touch
    /// the process environment.
    pub fn load(
        path: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
        model_flag: Option<String>,
    ) -> Result<Config, ConfigError> {
        let file = match path {
            Some(p) => read_file(p)?,
            None => match default_config_path(env) {
                Some(p) if p.exists() => read_file(&p)?,
                _ => FileConfig::default(),
            },
        };
        Config::from_parts(file, env, model_flag)
    }

    /// Combines a parsed file with the environment and flags.
    pub fn from_parts(
        file: FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
        model_flag: Option<String>,
    ) -> Result<Config, ConfigError> {
        let nonempty = |k: &str| env(k).filter(|v| !v.is_empty());
        let base_url = match file.provider {
            ProviderKind::Anthropic => nonempty("ANTHROPIC_BASE_URL")
                .or(file.anthropic.base_url)
                .unwrap_or_else(|| crate::llm::ANTHROPIC_DEFAULT_BASE_URL.to_string()),
            ProviderKind::Openai => nonempty("OPENAI_BASE_URL")
                .or(file.openai.base_url)
                .unwrap_or_else(|| crate::llm::OPENAI_DEFAULT_BASE_URL.to_string()),
        };
        let model = model_flag
            .or_else(|| nonempty("AGENTD_MODEL"))
            .or(file.model)
            .unwrap_or_else(|| DEFAULT_MODEL.to_string());
        if file.retry.max_attempts == 0 {
            return Err(ConfigError::Invalid(
                "retry.max_attempts must be at least 1".into(),
            ));
        }
        if file.limits.max_iterations == 0 {
            return Err(ConfigError::Invalid(
                "limits.max_iterations must be at least 1".into(),
            ));
        }
        file.grpc.validate()?;
        file.store.validate()?;
        file.images.validate()?;
        let mut rules = Vec::new();
        for (texts, action) in [
            (&file.permissions.allow, agentd_core::Action::Allow),
            (&file.permissions.ask, agentd_core::Action::Ask),
            (&file.permissions.deny, agentd_core::Action::Deny),
        ] {
            for text in texts {
                let rule = agentd_core::Rule::parse(text, action).map_err(|e| {
                    ConfigError::Invalid(format!("permissions.{action}: rule {text:?}: {e}"))
                })?;
                rules.push(rule);
            }
        }
        if file.hooks.timeout_ms == 0 {
            return Err(ConfigError::Invalid(
                "hooks.timeout_ms must be at least 1".into(),
            ));
        }
        let hooks = crate::hooks::Hooks {
            hooks: crate::hooks::Hooks::compile(&file.hooks.lists(), file.hooks.timeout_ms)
                .map_err(ConfigError::Invalid)?,
            max_stop_continuations: file.hooks.max_stop_continuations,
            problem: None,
        };
        let mcp_servers = file.mcp.specs().map_err(ConfigError::Invalid)?;
        let budget = file.budget.amounts()?;
        file.remote.validate()?;
        if file.log.max_bytes < 16 * 1024 {
            return Err(ConfigError::Invalid(format!(
                "log.max_bytes must be at least 16384, got {}",
                file.log.max_bytes
            )));
        }
        let default_mode = file.permissions.mode.unwrap_or_default();
        if default_mode == agentd_core::Mode::Bypass {
            return Err(ConfigError::Invalid(
                "permissions.mode = \"bypass\" is not allowed as a default; start agentd with --allow-bypass and ask for it per conversation".into(),
            ));
        }
        Ok(Config {
            default_mode,
            rules,
            doom_loop: file
                .permissions
                .doom_loop
                .unwrap_or(agentd_core::Action::Ask),
            allow_bypass: false,
            shells: file.shells,
            grpc: file.grpc,
            instructions: file.instructions,
            models: crate::models::Models::new(
                file.models,
                file.limits.context_window,
                file.limits.max_tokens,
            ),
            user_dir: default_config_path(env).and_then(|p| p.parent().map(Path::to_path_buf)),
            store: file.store,
            runtime: file.runtime,
            hooks,
            hook_timeout_ms: file.hooks.timeout_ms,
            context: file.context,
            plan: file.plan,
            mcp_servers,
            budget,
            images: file.images,
            remote: file.remote,
            log: file.log,
            sub_agents: SubAgentsSection {
                max_concurrent: file.sub_agents.max_concurrent.max(1),
            },
            checkpoints: file.checkpoints,
            model,
            provider: file.provider,
            base_url,
            system_prompt: file.system_prompt,
            retry: file.retry,
            limits: file.limits,
        })
    }
}

/// `$XDG_CONFIG_HOME/agentd/config.toml`, else `~/.config/agentd/config.toml`.
pub fn default_config_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(dir) = env("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("agentd/config.toml"));
    }
    env("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".config/agentd/config.toml"))
}

/// `$XDG_DATA_HOME/agentd`, else `~/.local/share/agentd`.
pub fn default_data_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(dir) = env("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("agentd"));
    }
    env("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".local/share/agentd"))
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let parsed: FileConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    if parsed.anthropic.api_key.is_some() || parsed.openai.api_key.is_some() {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(ConfigError::InsecureKeyFile {
                path: path.to_path_buf(),
                mode: mode & 0o777,
            });
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn environment_overrides_file_and_flag_overrides_both() {
        let file: FileConfig = toml::from_str(
            "model = \"from-file\"\n[anthropic]\nbase_url = \"http://file\"\n[retry]\nbase_delay_ms = 5\n",
        )
        .unwrap();
        let env = env_of(&[
            ("ANTHROPIC_BASE_URL", "http://env"),
            ("ANTHROPIC_API_KEY", "k"),
        ]);
        let c = Config::from_parts(file.clone(), &env, None).unwrap();
        assert_eq!(c.base_url, "http://env");
        assert_eq!(c.model, "from-file");
        assert_eq!(c.retry.base_delay_ms, 5);
        assert_eq!(c.retry.max_attempts, 3);
        let c = Config::from_parts(file, &env, Some("flag".into())).unwrap();
        assert_eq!(c.model, "flag");
    }

    #[test]
    fn store_sync_is_kill_unless_the_file_asks_for_power() {
        let file: FileConfig = toml::from_str("").unwrap();
        assert_eq!(file.store.sync, crate::store::Sync::Kill);
        let file: FileConfig = toml::from_str("[store]\nsync = \"power\"\n").unwrap();
        assert_eq!(file.store.sync, crate::store::Sync::Power);
        let wrong = toml::from_str::<FileConfig>("[store]\nsync = \"always\"\n").unwrap_err();
        assert!(wrong.to_string().contains("kill"), "{wrong}");
    }

    #[test]
    fn the_runtime_has_one_worker_per_two_cpus_unless_told() {
        let c = Config::from_parts(toml::from_str("").unwrap(), &env_of(&[]), None).unwrap();
        assert_eq!(c.runtime.worker_threads, 0);
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(c.runtime.workers(), (cpus / 2).max(1));
        let file = toml::from_str("[runtime]\nworker_threads = 3\n").unwrap();
        let c = Config::from_parts(file, &env_of(&[]), None).unwrap();
        assert_eq!(c.runtime.workers(), 3);
        let wrong = toml::from_str::<FileConfig>("[runtime]\nthreads = 3\n").unwrap_err();
        assert!(wrong.to_string().contains("threads"), "{wrong}");
    }

    #[test]
    fn the_store_cache_has_a_default_and_a_floor() {
        let c = Config::from_parts(toml::from_str("").unwrap(), &env_of(&[]), None).unwrap();
        assert_eq!(c.store.cache_bytes, crate::store::DEFAULT_CACHE_BYTES);
        let file = toml::from_str("[store]\ncache_bytes = 1048576\n").unwrap();
        let c = Config::from_parts(file, &env_of(&[]), None).unwrap();
        assert_eq!(c.store.cache_bytes, 1024 * 1024);
        let file = toml::from_str("[store]\ncache_bytes = 1000\n").unwrap();
        let err = Config::from_parts(file, &env_of(&[]), None).unwrap_err();
        assert!(err.to_string().contains("store.cache_bytes"), "{err}");
    }

    #[test]
    fn grpc_limits_have_defaults_and_out_of_range_values_are_refused() {
        let c = Config::from_parts(toml::from_str("").unwrap(), &env_of(&[]), None).unwrap();
        assert_eq!(c.grpc.max_message_bytes, 32 * 1024 * 1024);
        assert_eq!(c.grpc.max_text_bytes, 1024 * 1024);
        assert_eq!(c.grpc.max_frame_bytes, 16_384);
        let refused = |text: &str| {
            Config::from_parts(toml::from_str(text).unwrap(), &env_of(&[]), None)
                .unwrap_err()
                .to_string()
        };
        let small = refused("[grpc]\nmax_message_bytes = 1000\n");
        assert!(small.contains("grpc.max_message_bytes"), "{small}");
        let text = refused("[grpc]\nmax_message_bytes = 100000\nmax_text_bytes = 200000\n");
        assert!(text.contains("grpc.max_text_bytes"), "{text}");
        let frame = refused("[grpc]\nmax_frame_bytes = 100\n");
        assert!(frame.contains("grpc.max_frame_bytes"), "{frame}");
        let ok =
            "[grpc]\nmax_message_bytes = 100000\nmax_text_bytes = 100\nmax_frame_bytes = 65536\n";
        let c = Config::from_parts(toml::from_str(ok).unwrap(), &env_of(&[]), None).unwrap();
        assert_eq!(
            (c.grpc.max_text_bytes, c.grpc.max_frame_bytes),
            (100, 65_536)
        );
    }

    #[test]
    fn remote_limits_and_the_log_cap_have_defaults_and_bad_values_are_refused() {
        let c = Config::from_parts(FileConfig::default(), &env_of(&[]), None).unwrap();
        assert_eq!(c.remote.max_connections, 256);
        assert_eq!(c.remote.handshake_timeout_ms, 2_000);
        assert_eq!(c.remote.idle_timeout_ms, 300_000);
        assert_eq!(c.remote.max_handshakes_per_address, 8);
        assert_eq!(c.log.max_bytes, 10 * 1024 * 1024);
        let refused = |text: &str| {
            Config::from_parts(toml::from_str(text).unwrap(), &env_of(&[]), None)
                .unwrap_err()
                .to_string()
        };
        for key in [
            "max_connections",
            "handshake_timeout_ms",
            "idle_timeout_ms",
            "max_handshakes_per_address",
        ] {
            let zero = refused(&format!("[remote]\n{key} = 0\n"));
            assert!(
                zero.contains(&format!("remote.{key} must be at least 1")),
                "{zero}"
            );
        }
        let name = refused("[remote]\ncert_names = [\"two words\"]\n");
        assert!(name.contains("remote.cert_names"), "{name}");
        let log = refused("[log]\nmax_bytes = 100\n");
        assert!(
            log.contains("log.max_bytes must be at least 16384"),
            "{log}"
        );
    }

    #[test]
    fn hooks_are_checked_at_start_up() {
        let ok = "[hooks]\nmax_stop_continuations = 1\n[[hooks.pre_tool_use]]\nmatcher = \"bash(git push:*)\"\ncommand = \"./check.sh\"\n";
        let c = Config::from_parts(toml::from_str(ok).unwrap(), &env_of(&[]), None).unwrap();
        assert_eq!(c.hooks.hooks.len(), 1);
        assert_eq!(
            (c.hooks.max_stop_continuations, c.hook_timeout_ms),
            (1, 60_000)
        );
        let bad = "[[hooks.pre_tool_use]]\nmatcher = \"bash(\"\ncommand = \"x\"\n";
        let err = Config::from_parts(toml::from_str(bad).unwrap(), &env_of(&[]), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("hooks.pre_tool_use[0]: matcher"), "{err}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "modle = \"typo\"\n").unwrap();
        let err = Config::load(Some(&p), &env_of(&[]), None).unwrap_err();
        assert!(err.to_string().contains("modle"), "{err}");
    }

    #[test]
    fn a_key_in_a_world_readable_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "[anthropic]\napi_key = \"secret\"\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Config::load(Some(&p), &env_of(&[]), None).unwrap_err();
        assert!(matches!(err, ConfigError::InsecureKeyFile { .. }));
        assert!(!err.to_string().contains("secret"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Config::load(Some(&p), &env_of(&[]), None).is_ok());
    }
}
