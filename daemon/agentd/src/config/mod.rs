//! Daemon configuration: a TOML file, the conventional environment
//! variables, and command-line flags, in rising order of precedence.

mod agent;
mod daemon;
mod web;

pub(crate) use agent::{
    BudgetSection, CheckpointsSection, ContextSection, ImagesSection, InstructionsSection,
    LimitsSection, LoopsSection, PermissionsSection, PlanSection, ProviderKind, ProviderSection,
    RetrySection, ShellsSection, SubAgentsSection,
};
pub(crate) use daemon::{GrpcSection, LogSection, RemoteSection, RuntimeSection, StoreSection};
pub(crate) use web::WebSection;

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The model used when neither a flag, the config file nor the request names one.
pub(crate) const DEFAULT_MODEL: &str = "claude-sonnet-4-5";

/// Configuration errors, reported at start-up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
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

/// The config file's schema.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct FileConfig {
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
    /// How much repetition the doom-loop checks allow.
    pub loops: LoopsSection,
    pub shells: ShellsSection,
    /// The shell and the environment of commands (README "Environment").
    pub shell: crate::environment::ShellSection,
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
    /// The sandbox commands run in (README "Sandbox").
    pub sandbox: crate::process::sandbox::SandboxSection,
    /// `web_fetch` and web search (README "The web").
    pub web: WebSection,
}

/// The effective configuration.
/// Anthropic's API, when `ANTHROPIC_BASE_URL` is not set.
pub(crate) const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// OpenAI's API, when `OPENAI_BASE_URL` is not set.
pub(crate) const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

#[derive(Debug, Clone)]
pub(crate) struct Config {
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
    /// How much repetition the doom-loop checks allow.
    pub loops: LoopsSection,
    /// Whether conversations may use `bypass` mode (`--allow-bypass`).
    pub allow_bypass: bool,
    pub shells: ShellsSection,
    /// The shell and environment of commands (`[shell]`).
    pub shell: crate::environment::Policy,
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
    /// The sandbox commands run in.
    pub sandbox: crate::process::sandbox::SandboxSection,
    /// `web_fetch` and web search.
    pub web: WebSection,
}

impl Config {
    /// Reads `path` (when given, or the default file when it exists) and
    /// overlays the environment. `env` is injected so tests need not touch
    /// the process environment.
    pub(crate) fn load(
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
    pub(crate) fn from_parts(
        file: FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
        model_flag: Option<String>,
    ) -> Result<Config, ConfigError> {
        check_limits(&file)?;
        let nonempty = |k: &str| env(k).filter(|v| !v.is_empty());
        let base_url = match file.provider {
            ProviderKind::Anthropic => nonempty("ANTHROPIC_BASE_URL")
                .or(file.anthropic.base_url)
                .unwrap_or_else(|| ANTHROPIC_DEFAULT_BASE_URL.to_string()),
            ProviderKind::Openai => nonempty("OPENAI_BASE_URL")
                .or(file.openai.base_url)
                .unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.to_string()),
        };
        let model = model_flag
            .or_else(|| nonempty("AGENTD_MODEL"))
            .or(file.model)
            .unwrap_or_else(|| DEFAULT_MODEL.to_string());
        let rules = permission_rules(&file.permissions)?;
        let hooks = user_hooks(&file.hooks)?;
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
            loops: file.loops,
            shells: file.shells,
            shell: file.shell.policy().map_err(ConfigError::Invalid)?,
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
            sandbox: file.sandbox,
            web: file.web,
            model,
            provider: file.provider,
            base_url,
            system_prompt: file.system_prompt,
            retry: file.retry,
            limits: file.limits,
        })
    }
}

/// Refuses retry, iteration, gRPC, store and image limits out of range.
fn check_limits(file: &FileConfig) -> Result<(), ConfigError> {
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
    file.web.validate()?;
    file.images.validate()
}

/// The file's allow, ask and deny rules, parsed.
fn permission_rules(p: &PermissionsSection) -> Result<Vec<agentd_core::Rule>, ConfigError> {
    let mut rules = Vec::new();
    for (texts, action) in [
        (&p.allow, agentd_core::Action::Allow),
        (&p.ask, agentd_core::Action::Ask),
        (&p.deny, agentd_core::Action::Deny),
    ] {
        for text in texts {
            let rule = agentd_core::Rule::parse(text, action).map_err(|e| {
                ConfigError::Invalid(format!("permissions.{action}: rule {text:?}: {e}"))
            })?;
            rules.push(rule);
        }
    }
    Ok(rules)
}

/// The user's hooks, checked.
fn user_hooks(h: &crate::hooks::HooksSection) -> Result<crate::hooks::Hooks, ConfigError> {
    if h.timeout_ms == 0 {
        return Err(ConfigError::Invalid(
            "hooks.timeout_ms must be at least 1".into(),
        ));
    }
    Ok(crate::hooks::Hooks {
        hooks: crate::hooks::Hooks::compile(&h.lists(), h.timeout_ms)
            .map_err(ConfigError::Invalid)?,
        max_stop_continuations: h.max_stop_continuations,
        problem: None,
    })
}

/// `$XDG_CONFIG_HOME/agentd/config.toml`, else `~/.config/agentd/config.toml`.
pub(crate) fn default_config_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(dir) = env("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("agentd/config.toml"));
    }
    env("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".config/agentd/config.toml"))
}

/// `$XDG_DATA_HOME/agentd`, else `~/.local/share/agentd`.
pub(crate) fn default_data_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
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
    fn the_loop_checks_have_defaults_and_can_be_turned_off_one_by_one() {
        let c = Config::from_parts(toml::from_str("").unwrap(), &env_of(&[]), None).unwrap();
        assert_eq!(c.loops.limits(), agentd_core::LoopLimits::default());
        let file = toml::from_str("[loops]\ncycles = 0\nno_progress = 12\n").unwrap();
        let c = Config::from_parts(file, &env_of(&[]), None).unwrap();
        let limits = c.loops.limits();
        assert_eq!(
            (limits.cycles, limits.no_progress, limits.identical),
            (0, 12, 3)
        );
        let wrong = toml::from_str::<FileConfig>("[loops]\nrepeats = 3\n").unwrap_err();
        assert!(wrong.to_string().contains("repeats"), "{wrong}");
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
