//! The sections of the config file that say how the agent works: the model
//! provider, retries and limits, permissions, shells, instructions,
//! context, budgets, images, plans, checkpoints and sub-agents.

use super::ConfigError;
use serde::Deserialize;

/// Which wire protocol the LLM speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ProviderKind {
    /// Anthropic Messages API.
    #[default]
    Anthropic,
    /// OpenAI-compatible chat completions (Ollama, vLLM, llama.cpp, OpenRouter).
    Openai,
}

/// Credentials and endpoint of one provider.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderSection {
    /// The API key (prefer the environment variable).
    pub api_key: Option<String>,
    /// The endpoint, e.g. `https://api.anthropic.com`.
    pub base_url: Option<String>,
}

/// Retry policy for model requests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RetrySection {
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
pub(crate) struct LimitsSection {
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
pub(crate) struct PermissionsSection {
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
pub(crate) struct ShellsSection {
    /// Running shells per daemon.
    pub max_total: usize,
    /// Running shells per conversation.
    pub max_per_conversation: usize,
    /// Output kept per shell (spooled to disk), bytes.
    pub max_output_bytes: u64,
    /// The end of a background shell starts a turn in its conversation
    /// when that is idle (otherwise the model hears of it at its next
    /// request).
    pub wake_on_exit: bool,
}

impl Default for ShellsSection {
    fn default() -> Self {
        let d = crate::shells::ShellLimits::default();
        ShellsSection {
            max_total: d.max_total,
            max_per_conversation: d.max_per_conversation,
            max_output_bytes: d.max_spool_bytes,
            wake_on_exit: false,
        }
    }
}

/// Project instructions (AGENTS.md files).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct InstructionsSection {
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
pub(crate) struct ContextSection {
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
pub(crate) struct BudgetSection {
    pub per_conversation_usd: Option<f64>,
    pub per_day_usd: Option<f64>,
    pub per_conversation_tokens: Option<u64>,
    pub per_day_tokens: Option<u64>,
}

impl BudgetSection {
    /// The budgets as the core checks them (micro-dollars and tokens).
    pub(crate) fn amounts(&self) -> Result<agentd_core::Amounts, ConfigError> {
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
pub(crate) struct ImagesSection {
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
    pub(crate) fn limits(&self) -> agentd_core::ImageLimits {
        agentd_core::ImageLimits {
            max_bytes: self.max_bytes,
            max_per_message: self.max_per_message,
            max_dimension: self.max_dimension,
        }
    }

    /// A request with images must also fit `[grpc] max_message_bytes`
    /// (over it, tonic refuses the whole request with OUT_OF_RANGE).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_bytes == 0 || self.max_dimension == 0 {
            return Err(ConfigError::Invalid(
                "images.max_bytes and images.max_dimension must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Plans (README "Plans"): what a request that deserves a plan does.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct PlanSection {
    /// `off`, `suggest` (the default: clients ask whether to plan first) or
    /// `require` (the conversation enters plan mode).
    pub detect: agentd_core::plan::PlanDetect,
    /// When a step of an approved plan fails, restore the files the agent
    /// changed since that step started (README "Checkpoints and rewind").
    pub auto_rollback_on_failure: bool,
    /// A turn that made this many tool calls without a todo list gets one
    /// reminder to keep one (README "Todo list"; 0: never).
    pub todo_reminder_after: u32,
}

impl Default for PlanSection {
    fn default() -> Self {
        PlanSection {
            detect: agentd_core::plan::PlanDetect::default(),
            auto_rollback_on_failure: false,
            todo_reminder_after: 8,
        }
    }
}

/// Checkpoints (README "Checkpoints and rewind"): what the daemon keeps of
/// files before the agent changes them, and for how long.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct CheckpointsSection {
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
pub(crate) struct SubAgentsSection {
    /// Children of one `spawn_agents` call that run at once; the rest wait
    /// their turn.
    pub max_concurrent: usize,
}

impl Default for SubAgentsSection {
    fn default() -> Self {
        SubAgentsSection { max_concurrent: 4 }
    }
}

/// How much repetition the doom-loop checks allow (`[loops]`); 0 turns a
/// check off. What a loop found does is `permissions.doom_loop`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct LoopsSection {
    /// The same call with identical input this many times in a row.
    pub identical: usize,
    /// A block of 2 to `max_period` calls repeated this many times with
    /// the same results, and started again.
    pub cycles: usize,
    pub max_period: usize,
    /// The same failing command with only cosmetic changes this many
    /// times in a row.
    pub cosmetic: usize,
    /// Rounds in a row with no new output and nothing new that worked,
    /// before a call that repeats an earlier one.
    pub no_progress: usize,
}

impl Default for LoopsSection {
    fn default() -> Self {
        let d = agentd_core::LoopLimits::default();
        LoopsSection {
            identical: d.identical,
            cycles: d.cycles,
            max_period: d.max_period,
            cosmetic: d.cosmetic,
            no_progress: d.no_progress,
        }
    }
}

impl LoopsSection {
    /// The limits the core checks with.
    pub(crate) fn limits(self) -> agentd_core::LoopLimits {
        agentd_core::LoopLimits {
            identical: self.identical,
            cycles: self.cycles,
            max_period: self.max_period,
            cosmetic: self.cosmetic,
            no_progress: self.no_progress,
        }
    }
}
