//! The command line: every flag and subcommand of `agent`, as clap types.
//!
//! Parsing is kept apart from running so it can be tested with
//! `Cli::parse_args` and reused by tests that drive the client in-process.

mod admin;
mod conversation;
mod decisions;
mod global;
mod removal;
mod shells;
mod words;

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

pub use admin::{
    AgentsCommand, DaemonCommand, McpCommand, TokenCommand, TokenRole, parse_duration,
};
pub use conversation::{
    AnswerArgs, AttachArgs, BudgetCommand, NewArgs, PlanAction, PlanArgs, RunArgs, parse_amount,
};
pub use decisions::{
    Decision, Mode, PLAN_KEYS, PlanKey, TypedAnswer, default_options, offered_decisions,
    parse_plan_key, parse_typed_answer,
};
pub use global::{ColorWhen, ConnectionArgs, GlobalArgs, Globals};
pub use removal::{ArchiveArgs, RenameArgs, RmArgs};
pub use shells::{ShellsArgs, ShellsCommand};
use words::edit_distance;

/// `agent`: the terminal client of agentd, the coding-agent daemon.
#[derive(Debug, Parser)]
#[command(
    name = "agent",
    version,
    about = "Terminal client of agentd, the coding-agent daemon",
    long_about = "Terminal client of agentd, the coding-agent daemon.\n\n\
        The daemon owns every conversation and background shell; `agent` only talks to it.\n\
        Closing a terminal loses nothing: `agent attach ID` joins again later.\n\
        Conversation ids may be abbreviated to any unique prefix.",
    after_help = "Without a subcommand, `agent` opens an interactive session in the current \
        directory: `agent` (new conversation), `agent \"PROMPT\"` (starting with PROMPT), \
        `agent -c` (the newest conversation here), `agent -r` (pick one). Type /help in it.\n\n\
        Exit status: 0 ok, 1 error, 2 usage, 3 context window exhausted, 130 interrupted."
)]
pub struct Cli {
    /// The global options given before any subcommand.
    #[command(flatten)]
    pub given: GlobalArgs,

    /// The global options of the whole command line (every level's merged).
    #[arg(skip)]
    pub global: Globals,

    /// Continue the newest conversation of this directory (interactive)
    #[arg(short = 'c', long = "continue", conflicts_with = "resume")]
    pub continue_last: bool,

    /// Pick a conversation to continue from a list (interactive)
    #[arg(short = 'r', long)]
    pub resume: bool,

    /// How a new interactive conversation is set up.
    #[command(flatten)]
    pub new: NewArgs,

    /// The first message of a new interactive conversation
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,

    /// What to do; without a subcommand, an interactive session opens in
    /// the current directory.
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// Parses a command line (the program's name first), with the global
    /// options taken anywhere: `agent --json ls` and `agent ls --json`.
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut matches = Cli::command().try_get_matches_from(args)?;
        let global = Globals::fold(&matches).map_err(|e| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, e).format(&mut Cli::command())
        })?;
        let mut cli =
            Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut Cli::command()))?;
        cli.global = global;
        Ok(cli)
    }

    /// A one-word prompt that looks like a misspelt subcommand (`agent lss`):
    /// the message that says so, instead of starting a session with it.
    pub fn misspelt_command(&self) -> Option<String> {
        let word = self.prompt.as_deref()?.trim();
        if self.command.is_some() || word.contains(char::is_whitespace) || word.len() < 2 {
            return None;
        }
        let command = Cli::command();
        let near = command
            .get_subcommands()
            .map(clap::Command::get_name)
            .find(|name| edit_distance(name, word) <= 2)?;
        Some(format!(
            "`{word}` is not a command; did you mean `agent {near}`? (a prompt of one \
             word starts a session only when it is not this close to a command: add a word)"
        ))
    }
}

// `defer`: a subcommand's arguments are made only for the subcommand that
// runs (help, completions and man pages build the whole tree). Making all
// ~460 of them for every command cost `agent run` 0.27 ms of CPU and 58
// page faults (BENCHMARKS.md, 2026-11-26, evening).
/// The subcommands.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Start a new conversation with PROMPT and stream it until the turn ends
    ///
    /// Prints the conversation id on stderr first, so another terminal can
    /// `agent attach` to it. Ctrl-C cancels the turn (a second Ctrl-C quits at
    /// once). Exits 0 when the agent is idle again, 1 when the turn failed, 3
    /// when the context window is exhausted, 130 when interrupted.
    Run(RunArgs),

    /// Join a live conversation: show it, stream it, chat with it
    ///
    /// Prints the transcript, the reply being streamed and any pending
    /// permission request, then live events. Each line typed on stdin is sent
    /// as a user message (while a permission request is pending, the next line
    /// answers it). Ctrl-D detaches; the conversation goes on. Ctrl-C cancels
    /// the turn in flight, or detaches when the agent is idle.
    Attach(AttachArgs),

    /// Send a user message to a conversation (starts a turn)
    ///
    /// While a turn runs the message is queued: the agent reads it after the
    /// current tool round (or as the next turn when this one ends), and every
    /// attached client sees it waiting. `agent queue ID` lists or drops queued
    /// messages.
    Send(SendArgs),

    /// List the messages queued for a conversation's next model request, or
    /// drop them
    Queue {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
        /// Drop this queued message (its id, e.g. q3)
        #[arg(long, value_name = "QUEUED_ID", conflicts_with = "drop_all")]
        drop: Option<String>,
        /// Drop every queued message
        #[arg(long)]
        drop_all: bool,
    },

    /// Change a conversation's permission mode or model, or add a directory
    ///
    /// Takes effect at once, even mid-turn: the next permission decision
    /// uses the new mode and directories, the next model request the new
    /// model. Every attached client is told. Without options, prints them.
    Set {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
        /// The new permission mode
        #[arg(long, value_name = "MODE")]
        mode: Option<Mode>,
        /// The new model
        #[arg(long, value_name = "NAME")]
        model: Option<String>,
        /// Another directory its tools may reach (repeatable)
        #[arg(long = "add-dir", value_name = "DIR")]
        add_dirs: Vec<PathBuf>,
        /// Its commands run in this terminal's environment from now on
        #[arg(long)]
        env_from_here: bool,
    },

    /// Cancel the turn in flight, if any
    Cancel {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
    },

    /// Summarise an idle conversation now and end it, as when its context
    /// fills up
    ///
    /// The model is asked for a continuation summary (no tools); the
    /// conversation then becomes read-only ("context exhausted") and `agent
    /// continue ID` goes on in a new one seeded with the summary.
    Compact {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
    },

    /// Go on with a conversation whose context is exhausted, in a new one
    ///
    /// The new conversation has the same directory, model, mode and rules,
    /// starts with the old one's summary and the messages queued there, and
    /// runs its first turn at once. Prints its id (`agent attach` follows it).
    Continue {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
        /// The new conversation talks to model M [default: the old one's]
        #[arg(long, value_name = "M")]
        model: Option<String>,
    },

    /// List conversations, newest first (the newest 50 unless told)
    Ls {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// List every conversation
        #[arg(long, conflicts_with = "limit")]
        all: bool,
        /// List at most N conversations
        #[arg(short = 'n', long, value_name = "N", default_value_t = 50,
              value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
        /// One row per conversation in list order, sub-agents not placed
        /// under their parents
        #[arg(long)]
        flat: bool,
        /// List the archived conversations (`agent archive`) instead
        #[arg(long)]
        archived: bool,
    },

    /// Delete conversations for good: transcript, checkpoints, background
    /// shells (killed) and sub-agents
    ///
    /// Refuses a conversation whose turn is running unless `--force`, which
    /// stops it first. Says what it removed. Attached clients are told.
    Rm(RmArgs),

    /// Put conversations away: `agent ls`, `-c` and `-r` no longer show
    /// them (`agent ls --archived` does); nothing is deleted
    Archive(ArchiveArgs),

    /// Bring archived conversations back into `agent ls`
    Unarchive(ArchiveArgs),

    /// Give a conversation a new title
    Rename(RenameArgs),

    /// Print a conversation's transcript
    Show {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
        /// Print the project instruction files (AGENTS.md) its next turn
        /// reads instead of the transcript
        #[arg(long)]
        context: bool,
        /// Print every tool result whole (what the model got), not its
        /// first line
        #[arg(long, conflicts_with = "context")]
        full: bool,
        /// Print the audit trail instead: who sent which message and who
        /// answered which permission request, when, with which role
        #[arg(long, conflicts_with_all = ["context", "full"])]
        audit: bool,
        /// List the turns that can be rewound (`agent rewind --to`): each
        /// user message whose turn changed files, and the files
        #[arg(long, conflicts_with_all = ["context", "full", "audit"])]
        checkpoints: bool,
    },

    /// Rewind a conversation to the start of a turn: its files, its
    /// transcript, or both
    ///
    /// `--code` (the default) puts every file the agent changed since that
    /// user message back as it was (files it created are removed); it
    /// refuses, listing them, when someone else changed a file since the
    /// agent last did, unless `--force`. Without `--to` it goes back to the
    /// last turn that changed files (and says so when none did). `bash`
    /// changes are tracked only in a git work tree. `--conversation` forks
    /// a new conversation whose transcript ends just before that message
    /// (without `--to`: the last user message); the original stays.
    /// Refused while a turn runs.
    Rewind {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation id or unique prefix
        #[arg(value_name = "ID")]
        id: String,
        /// The user message to rewind to (its `#N` in `agent show`)
        /// [default: the last whose turn changed files; with
        /// `--conversation` alone, the last user message]
        #[arg(long, value_name = "MESSAGE")]
        to: Option<u64>,
        /// Restore the files (the default)
        #[arg(long, conflicts_with_all = ["conversation", "both"])]
        code: bool,
        /// Fork the conversation before that message instead
        #[arg(long, conflicts_with = "both")]
        conversation: bool,
        /// Restore the files and fork the conversation
        #[arg(long)]
        both: bool,
        /// Restore files even when someone else changed them since
        #[arg(long)]
        force: bool,
    },

    /// Token usage and cost: the daily ledger, or one conversation's replies
    Usage {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Days back from today (UTC), today included
        #[arg(long, value_name = "N", default_value_t = 7,
              value_parser = clap::value_parser!(u32).range(1..=3660))]
        days: u32,
        /// One conversation's replies instead (id or unique prefix)
        #[arg(long, value_name = "ID")]
        conversation: Option<String>,
    },

    /// Answer a budget that holds a conversation's turn: raise it (the
    /// held model request goes out) or stop the turn
    Budget {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        #[command(subcommand)]
        command: BudgetCommand,
    },

    /// Answer a conversation's pending permission request (for scripts)
    Answer(AnswerArgs),

    /// Answer a conversation's pending plan approval request: approve,
    /// approve_edits (approve and continue in accept_edits mode), reject
    /// (with --feedback), or edit (the steps from --steps-file, or edited in
    /// $EDITOR)
    Plan(PlanArgs),

    /// List background shells, read their output, kill them
    Shells(ShellsArgs),

    /// MCP servers: the daemon's configured ones and those conversations
    /// started, with their state and tools
    Mcp {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        #[command(subcommand)]
        command: McpCommand,
    },

    /// Custom sub-agent types: the project's and yours, as the spawn tool
    /// offers them
    Agents {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        #[command(subcommand)]
        command: AgentsCommand,
    },

    /// Bearer tokens for remote clients (`agentd --listen`); local socket
    /// only
    Token {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        #[command(subcommand)]
        command: TokenCommand,
    },

    /// Trust a directory: hooks in the `.agentd/config.toml` and sub-agent
    /// types in `.agents/agents/*.md` of projects at or under it are used
    /// (those of other projects never are)
    Trust {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// The directory [default: the current directory]
        #[arg(value_name = "DIR", conflicts_with = "list")]
        dir: Option<PathBuf>,
        /// List the trusted directories instead
        #[arg(long)]
        list: bool,
    },

    /// Stop trusting a directory: its projects' hooks no longer run nor
    /// their sub-agent types
    Untrust {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// The directory [default: the current directory]
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
    },

    /// Write conversations as JSON lines (one conversation per line) to stdout
    Export {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Conversation ids or unique prefixes [default: all]
        #[arg(value_name = "ID")]
        ids: Vec<String>,
    },

    /// Restore conversations written by `agent export`
    Import {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// A JSON-lines file, or `-` for stdin [default: -]
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
    },

    /// Store an API key for the daemon (asked without echo, or read from stdin)
    ///
    /// The key goes to `credentials.toml` in the daemon's config directory
    /// (mode 0600), which the daemon reads at every model request: no
    /// restart is needed. `echo "$KEY" | agent login` works too.
    ///
    /// The key's shape is checked first: one line, no spaces or control
    /// characters, 8 to 2048 characters, and for the provider's own API
    /// its prefix (`sk-ant-` for Anthropic, `sk-` for OpenAI). When the
    /// daemon's base URL is another server (a gateway, vLLM, OpenRouter…)
    /// the prefix is not checked; when it cannot be known (an older
    /// daemon), a wrong prefix is refused for Anthropic and only warned
    /// about for OpenAI. A refused key is never stored nor shown (exit 2).
    Login {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Whose key [default: the daemon's provider]
        #[arg(long, value_enum)]
        provider: Option<crate::credentials::Provider>,
        /// Then have the daemon send its model one tiny request (it costs
        /// one) and say whether it answers; exits 1 when it does not
        #[arg(long)]
        check: bool,
    },

    /// Remove the API key `agent login` stored
    Logout {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Whose key [default: the daemon's provider]
        #[arg(long, value_enum)]
        provider: Option<crate::credentials::Provider>,
    },

    /// Check the set-up: versions, socket, data dir, config, where the API
    /// key comes from (never the key), the model endpoint, and, when asked,
    /// whether the model answers
    ///
    /// Each line says ok or FAIL with the reason; exits 1 when anything
    /// failed. Sends nothing to the model (nothing is paid) unless
    /// `--model` is given.
    Doctor {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Also send the model one tiny request (it costs one) and say
        /// whether it answers
        #[arg(long)]
        model: bool,
    },

    /// Stop, restart or inspect the daemon, or read its log
    Daemon {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        #[command(subcommand)]
        command: DaemonCommand,
    },

    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// The shell
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },

    /// Serve the Agent Client Protocol on stdin/stdout, for editors
    ///
    /// Zed, JetBrains IDEs and Neovim plugins start `agent acp` as their
    /// agent server. Each editor session is a daemon conversation: a
    /// conversation a terminal is attached to can be loaded in the editor
    /// (session/load takes its id) and both stay live. Logs go to stderr.
    Acp {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
    },

    /// Print the man page, or write one per subcommand into DIR
    Man {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Write agent.1, agent-run.1, … into this directory
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

// `agent send`. (No doc comment: see `RunArgs`.)
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The global options given at this level (read `Cli::global`).
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Conversation id or unique prefix
    #[arg(value_name = "ID")]
    pub id: String,
    /// Refuse the message ("agent is busy") instead of queueing it while
    /// a turn runs
    #[arg(long)]
    pub no_queue: bool,
    /// Attach an image (PNG, JPEG, GIF or WebP, recognised by its
    /// content) to the message; repeatable
    #[arg(long = "image", value_name = "FILE")]
    pub image: Vec<PathBuf>,
    /// Switch the conversation to model M first, for this message and the
    /// ones after it (as `agent set ID --model M`)
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    #[command(flatten)]
    pub think: crate::think::ThinkArgs,
    /// The message; several words are joined with spaces
    #[arg(value_name = "TEXT", required = true, num_args = 1..)]
    pub text: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::path::Path;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::parse_args(std::iter::once("agent").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn color_is_a_global_flag_that_defaults_to_auto() {
        assert_eq!(parse(&["ls"]).unwrap().global.color, ColorWhen::Auto);
        assert_eq!(
            parse(&["--color", "never", "ls"]).unwrap().global.color,
            ColorWhen::Never
        );
        assert_eq!(
            parse(&["ls", "--color", "always"]).unwrap().global.color,
            ColorWhen::Always
        );
        assert!(parse(&["--color", "sometimes", "ls"]).is_err());
    }

    #[test]
    fn run_takes_flags_and_joins_the_prompt() {
        let cli = parse(&[
            "run",
            "--cwd",
            "/tmp",
            "--model",
            "m1",
            "--mode",
            "accept_edits",
            "--allow",
            "bash(git status)",
            "--allow",
            "write(src/**)",
            "--yes",
            "fix",
            "the",
            "test",
        ])
        .unwrap();
        let Command::Run(run) = cli.command.unwrap() else {
            panic!("not run")
        };
        assert_eq!(run.cwd, Some(PathBuf::from("/tmp")));
        assert_eq!(run.new.model.as_deref(), Some("m1"));
        assert_eq!(run.new.mode, Some(Mode::AcceptEdits));
        assert_eq!(run.new.allow, vec!["bash(git status)", "write(src/**)"]);
        assert!(run.yes);
        assert_eq!(run.prompt.join(" "), "fix the test");
    }

    #[test]
    fn run_needs_a_prompt_and_a_known_mode() {
        assert_eq!(
            parse(&["run"]).unwrap_err().kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            parse(&["run", "--mode", "yolo", "x"]).unwrap_err().kind(),
            clap::error::ErrorKind::InvalidValue
        );
        let cli = parse(&["run", "--mode", "read-only", "x"]).unwrap();
        let Command::Run(run) = cli.command.unwrap() else {
            panic!("not run")
        };
        assert_eq!(run.new.mode, Some(Mode::ReadOnly));
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = parse(&["ls", "--json", "--socket", "/s.sock", "--no-autostart"]).unwrap();
        assert!(cli.global.json && cli.global.no_autostart);
        assert_eq!(cli.global.socket, Some(PathBuf::from("/s.sock")));
        assert!(matches!(
            cli.command.unwrap(),
            Command::Ls {
                all: false,
                limit: 50,
                flat: false,
                ..
            }
        ));
        let cli = parse(&["ls", "--all"]).unwrap();
        assert!(matches!(
            cli.command.unwrap(),
            Command::Ls { all: true, .. }
        ));
        let cli = parse(&["ls", "-n", "3"]).unwrap();
        assert!(matches!(
            cli.command.unwrap(),
            Command::Ls {
                all: false,
                limit: 3,
                flat: false,
                ..
            }
        ));
        let cli = parse(&["ls", "--flat"]).unwrap();
        assert!(matches!(
            cli.command.unwrap(),
            Command::Ls { flat: true, .. }
        ));
        assert!(parse(&["ls", "-n", "0"]).is_err());
        assert!(parse(&["ls", "--all", "-n", "3"]).is_err());
        let cli = parse(&["--json", "show", "01AB"]).unwrap();
        assert!(cli.global.json);
        assert!(
            matches!(cli.command.unwrap(), Command::Show { id, context: false, full: false, audit: false, checkpoints: false, .. } if id == "01AB")
        );
    }

    #[test]
    fn a_subcommand_option_of_a_global_name_is_its_own() {
        // `token create --name` names the token; the client's name is
        // given before `create`, and the token's does not leak into it.
        let cli = parse(&[
            "--name", "me", "token", "create", "--role", "viewer", "--name", "tok", "--json",
        ])
        .unwrap();
        assert_eq!(cli.global.name.as_deref(), Some("me"));
        assert!(cli.global.json);
        let Some(Command::Token {
            command: TokenCommand::Create { name, .. },
            ..
        }) = cli.command
        else {
            panic!("not token create")
        };
        assert_eq!(name.as_deref(), Some("tok"));
        let cli = parse(&["token", "create", "--role", "viewer", "--name", "tok"]).unwrap();
        assert_eq!(cli.global.name, None);
        // A deeper level's default does not undo an outer level's option.
        let cli = parse(&["--color", "always", "--socket", "/o", "daemon", "status"]).unwrap();
        assert_eq!(cli.global.color, ColorWhen::Always);
        assert_eq!(cli.global.socket, Some(PathBuf::from("/o")));
    }

    #[test]
    fn global_options_reach_nested_subcommands_and_help() {
        // Under a subcommand's own subcommand, and given at both levels.
        let cli = parse(&["daemon", "status", "--json", "--socket", "/d.sock"]).unwrap();
        assert!(cli.global.json);
        assert_eq!(cli.global.socket, Some(PathBuf::from("/d.sock")));
        assert!(matches!(
            cli.command,
            Some(Command::Daemon {
                command: DaemonCommand::Status { .. },
                ..
            })
        ));
        let cli = parse(&["--color", "never", "daemon", "--color", "always", "stop"]).unwrap();
        assert_eq!(cli.global.color, ColorWhen::Always);
        // An option's value that names a subcommand is a value: `ls` runs,
        // and takes the global options after it.
        let cli = parse(&["--name", "run", "ls", "--json"]).unwrap();
        assert_eq!(cli.global.name.as_deref(), Some("run"));
        assert!(cli.global.json && matches!(cli.command, Some(Command::Ls { .. })));
        // A short flag and an option's `=` value are skipped alike.
        let cli = parse(&["--socket=/x", "-c", "ls", "--no-autostart"]).unwrap();
        assert!(cli.global.no_autostart && cli.continue_last);
        assert_eq!(cli.global.socket, Some(PathBuf::from("/x")));
        // A value that is not UTF-8 does not hide the subcommand after it.
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let socket = std::ffi::OsStr::from_bytes(b"--socket=/s\xff.sock");
            let args = ["agent".as_ref(), socket, "ls".as_ref(), "--json".as_ref()];
            let cli = Cli::parse_args(args).unwrap();
            assert!(cli.global.json && matches!(cli.command, Some(Command::Ls { .. })));
        }
        // A prompt is not a subcommand; an option after it is the top level's.
        let cli = parse(&["fix the bug", "--json"]).unwrap();
        assert!(cli.global.json && cli.command.is_none());
        assert_eq!(cli.prompt.as_deref(), Some("fix the bug"));
        // --remote still needs its two companions where it is given.
        let err = parse(&["ls", "--remote", "h:1"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        assert!(
            parse(&[
                "ls",
                "--remote",
                "h:1",
                "--token-file",
                "/t",
                "--fingerprint",
                "f"
            ])
            .is_ok()
        );
        // Help, asked either way, lists them.
        for words in [
            &["run", "--help"][..],
            &["help", "run"],
            &["daemon", "stop", "--help"],
            &["help", "daemon", "stop"],
        ] {
            let help = parse(words).unwrap_err();
            assert_eq!(
                help.kind(),
                clap::error::ErrorKind::DisplayHelp,
                "{words:?}"
            );
            let text = help.to_string();
            assert!(
                text.contains("Global options") && text.contains("--no-autostart"),
                "{words:?}: {text}"
            );
        }
        // Unknown options are still refused, with the global ones suggested.
        let err = parse(&["ls", "--jsno"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
        assert!(err.to_string().contains("--json"), "{err}");
    }

    #[test]
    fn answer_parses_decisions() {
        let cli = parse(&[
            "answer",
            "01AB",
            "deny_and_stop",
            "--feedback",
            "use git mv",
        ])
        .unwrap();
        let Command::Answer(a) = cli.command.unwrap() else {
            panic!("not answer")
        };
        assert_eq!(a.decision, Decision::DenyAndStop);
        assert_eq!(a.feedback.as_deref(), Some("use git mv"));
        assert!(!a.always_project);
        for d in Decision::ALL {
            let cli = parse(&["answer", "x", d.name(), "--always-project"]).unwrap();
            let Command::Answer(a) = cli.command.unwrap() else {
                panic!("not answer")
            };
            assert_eq!(a.decision, d);
            assert!(a.always_project);
            assert_eq!(Decision::from_proto(d.to_proto()), Some(d));
        }
        assert!(parse(&["answer", "x", "maybe"]).is_err());
        assert!(parse(&["answer", "x", "allow-once"]).is_ok());
    }

    #[test]
    fn answer_takes_the_keys_the_prompt_shows() {
        for d in Decision::ALL {
            for key in [
                d.key().to_string(),
                d.key().to_ascii_uppercase().to_string(),
            ] {
                let cli = parse(&["answer", "x", &key]).unwrap();
                let Command::Answer(a) = cli.command.unwrap() else {
                    panic!("not answer")
                };
                assert_eq!(a.decision, d, "key {key}");
            }
        }
        assert!(parse(&["answer", "x", "q"]).is_err());
    }

    #[test]
    fn shells_lists_reads_and_kills() {
        let cli = parse(&["shells"]).unwrap();
        let Command::Shells(s) = cli.command.unwrap() else {
            panic!("not shells")
        };
        assert!(s.command.is_none() && !s.all && s.conversation.is_none());

        let cli = parse(&["shells", "--all"]).unwrap();
        let Command::Shells(s) = cli.command.unwrap() else {
            panic!("not shells")
        };
        assert!(s.all);

        let cli = parse(&["shells", "01AB"]).unwrap();
        let Command::Shells(s) = cli.command.unwrap() else {
            panic!("not shells")
        };
        assert_eq!(s.conversation.as_deref(), Some("01AB"));
        assert!(parse(&["shells", "--all", "01AB"]).is_err());

        let cli = parse(&["shells", "output", "sh1", "--follow", "--from", "42"]).unwrap();
        let Command::Shells(s) = cli.command.unwrap() else {
            panic!("not shells")
        };
        assert!(matches!(
            s.command,
            Some(ShellsCommand::Output { shell_id, follow: true, from: 42, .. }) if shell_id == "sh1"
        ));

        let cli = parse(&["shells", "kill", "sh1"]).unwrap();
        let Command::Shells(s) = cli.command.unwrap() else {
            panic!("not shells")
        };
        assert!(
            matches!(s.command, Some(ShellsCommand::Kill { shell_id, .. }) if shell_id == "sh1")
        );
    }

    #[test]
    fn export_import_send_cancel_attach() {
        let cli = parse(&["export"]).unwrap();
        assert!(matches!(cli.command.unwrap(), Command::Export { ids, .. } if ids.is_empty()));
        let cli = parse(&["export", "01A", "01B"]).unwrap();
        assert!(matches!(cli.command.unwrap(), Command::Export { ids, .. } if ids.len() == 2));
        let cli = parse(&["import"]).unwrap();
        assert!(matches!(
            cli.command.unwrap(),
            Command::Import { file: None, .. }
        ));
        let cli = parse(&["import", "-"]).unwrap();
        assert!(
            matches!(cli.command.unwrap(), Command::Import { file: Some(f), .. } if f == Path::new("-"))
        );
        let cli = parse(&["send", "01A", "hello", "there"]).unwrap();
        assert!(
            matches!(cli.command.unwrap(), Command::Send(SendArgs { id, text, no_queue: false, image, .. }) if id == "01A" && text.len() == 2 && image.is_empty())
        );
        assert!(parse(&["send", "01A"]).is_err());
        let cli = parse(&["cancel", "01A"]).unwrap();
        assert!(matches!(cli.command.unwrap(), Command::Cancel { id, .. } if id == "01A"));
        let cli = parse(&["attach", "--yes", "01A"]).unwrap();
        assert!(matches!(cli.command.unwrap(), Command::Attach(a) if a.yes && a.id == "01A"));
        // A word that is no command is the prompt of an interactive session,
        // unless it looks like a command misspelt.
        let cli = parse(&["frobnicate"]).unwrap();
        assert!(cli.command.is_none() && cli.prompt.as_deref() == Some("frobnicate"));
        assert_eq!(cli.misspelt_command(), None);
        let cli = parse(&["atach"]).unwrap();
        assert!(
            cli.misspelt_command()
                .unwrap()
                .contains("did you mean `agent attach`")
        );
        assert_eq!(parse(&["lss the files"]).unwrap().misspelt_command(), None);
        // The prompt is one argument: unquoted words are a usage error.
        assert!(parse(&["fix", "the", "bug"]).is_err());
        // Flags before a subcommand still select it.
        let cli = parse(&["--json", "ls"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Ls { .. })));
        let cli = parse(&["-c"]).unwrap();
        assert!(cli.continue_last && cli.command.is_none());
        let cli = parse(&["--mode", "plan", "fix the bug"]).unwrap();
        assert_eq!(cli.prompt.as_deref(), Some("fix the bug"));
        assert_eq!(cli.new.mode, Some(Mode::Plan));
    }
}
