//! The arguments of the subcommands that start, join and answer a
//! conversation: `run`, `attach`, `answer`, `plan`, `budget`.

use std::path::PathBuf;

use super::GlobalArgs;
use clap::{Args, Subcommand};

use super::{Decision, Mode};

// How a new conversation is set up (`agent run`, and `agent` alone).
#[derive(Debug, Default, Clone, Args)]
pub struct NewArgs {
    /// Model to use [default: the daemon's]
    #[arg(long, value_name = "M")]
    pub model: Option<String>,

    /// Permission mode [default: the daemon's]
    #[arg(long, value_name = "MODE")]
    pub mode: Option<Mode>,

    /// Extra permission rule for this conversation, e.g. 'bash(cargo test:*)'
    /// or 'write(src/**)' (repeatable)
    #[arg(long = "allow", value_name = "RULE")]
    pub allow: Vec<String>,

    /// Another directory the agent's tools may read and change, besides the
    /// working directory (repeatable)
    #[arg(long = "add-dir", value_name = "DIR")]
    pub add_dirs: Vec<PathBuf>,

    #[command(flatten)]
    pub think: crate::think::ThinkArgs,
}

// `agent run`. (No doc comments on the argument types of subcommands: with
// `defer`, clap would show them as the subcommand's description.)
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The global options given at this level (read `Cli::global`).
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Working directory of the conversation [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    #[command(flatten)]
    pub new: NewArgs,

    /// An MCP server for this conversation, besides the daemon's configured
    /// ones (repeatable): NAME=COMMAND [ARGS…] for a stdio server (split as
    /// a shell would, e.g. 'fs=npx -y @modelcontextprotocol/server-filesystem
    /// .'), or NAME=URL (http:// or https://) for streamable HTTP. Its tools
    /// are offered as mcp__NAME__TOOL and ask before they run unless a rule
    /// allows them (--allow 'mcp__NAME__*')
    #[arg(long = "mcp", value_name = "NAME=COMMAND")]
    pub mcp: Vec<String>,

    /// DANGEROUS: answer "allow once" to every permission request, so the
    /// agent may run any command and change any file without asking
    #[arg(long, short = 'y')]
    pub yes: bool,

    /// Attach an image (PNG, JPEG, GIF or WebP, recognised by its content)
    /// to the first message; repeatable
    #[arg(long = "image", value_name = "FILE")]
    pub image: Vec<PathBuf>,

    /// The first message; several words are joined with spaces
    #[arg(value_name = "PROMPT", required = true, num_args = 1..)]
    pub prompt: Vec<String>,
}

// `agent attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The global options given at this level (read `Cli::global`).
    #[command(flatten)]
    pub global: GlobalArgs,
    /// DANGEROUS: answer "allow once" to every permission request this client
    /// sees, so the agent may run any command and change any file without asking
    #[arg(long, short = 'y')]
    pub yes: bool,

    /// Watch only: the daemon gives this client the viewer role, so it sees
    /// everything and can send, answer or cancel nothing
    #[arg(long, conflicts_with = "yes")]
    pub view_only: bool,

    /// Conversation id or unique prefix
    #[arg(value_name = "ID")]
    pub id: String,
}

// `agent answer`.
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The global options given at this level (read `Cli::global`).
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Conversation id or unique prefix
    #[arg(value_name = "ID")]
    pub id: String,

    /// The decision, by name or by the key the interactive prompt shows
    /// for it: y allow_once, a allow_always, n deny, s deny_and_stop,
    /// v never, b background
    #[arg(value_name = "DECISION", ignore_case = true)]
    pub decision: Decision,

    /// With deny_and_stop: what the agent should do instead (sent as the next
    /// user message)
    #[arg(long, value_name = "TEXT")]
    pub feedback: Option<String>,

    /// With allow_always / never: the rule applies to every conversation in
    /// the same working directory, not just this one
    #[arg(long)]
    pub always_project: bool,
}

/// How `agent plan` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum PlanAction {
    /// Carry it out in default mode.
    Approve,
    /// Carry it out in accept_edits mode.
    ApproveEdits,
    /// Reject it; --feedback says why.
    Reject,
    /// Approve an edited step list (default mode).
    Edit,
}

// `agent plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The global options given at this level (read `Cli::global`).
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Conversation id or unique prefix
    #[arg(value_name = "ID")]
    pub id: String,

    #[arg(value_name = "ACTION", value_enum, ignore_case = true)]
    pub action: PlanAction,

    /// With reject: what the plan should do differently (the model is told)
    #[arg(long, value_name = "TEXT")]
    pub feedback: Option<String>,

    /// With edit: the steps, one a line `id. [kind] title (after id, id)
    /// {file, file}` (- reads standard input); without it, $EDITOR opens
    /// the proposed steps
    #[arg(long, value_name = "FILE")]
    pub steps_file: Option<std::path::PathBuf>,
}

// `agent budget …`.
#[derive(Debug, Subcommand)]
pub enum BudgetCommand {
    /// Raise the budget that was reached and let the turn go on
    Raise {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
        /// How much to add, in the budget's unit: dollars (`5`, `$2.50`)
        /// for the dollar budgets, tokens for the token ones. Default: the
        /// configured budget again
        #[arg(long, value_name = "AMOUNT", value_parser = parse_amount)]
        by: Option<f64>,
    },
    /// Stop the turn at the budget
    Stop {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
    },
}

/// A positive amount, dollars or tokens; a leading `$` and `_`/`,`
/// separators are allowed.
pub fn parse_amount(text: &str) -> Result<f64, String> {
    let clean: String = text
        .trim()
        .trim_start_matches('$')
        .chars()
        .filter(|c| *c != '_' && *c != ',')
        .collect();
    match clean.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a positive amount")),
    }
}
