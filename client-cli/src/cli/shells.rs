//! The arguments of `agent shells` and its subcommands.

use super::GlobalArgs;
use clap::{Args, Subcommand};

// `agent shells`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ShellsArgs {
    /// The global options given at this level (read `Cli::global`).
    #[command(flatten)]
    pub global: GlobalArgs,
    /// `output` or `kill`; without one, lists shells.
    #[command(subcommand)]
    pub command: Option<ShellsCommand>,

    /// List the shells of every conversation (the default without CONVERSATION)
    #[arg(long, conflicts_with = "conversation")]
    pub all: bool,

    /// Only the shells of this conversation (id or unique prefix)
    #[arg(value_name = "CONVERSATION")]
    pub conversation: Option<String>,
}

// `agent shells output|kill`.
#[derive(Debug, Subcommand)]
pub enum ShellsCommand {
    /// Write a shell's output (raw bytes) to stdout
    Output {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Shell id
        #[arg(value_name = "SHELL_ID")]
        shell_id: String,
        /// Keep streaming until the shell exits
        #[arg(long, short = 'f')]
        follow: bool,
        /// Start at this byte offset
        #[arg(long, value_name = "OFFSET", default_value_t = 0)]
        from: u64,
    },
    /// Kill a shell and its whole process group
    Kill {
        /// The global options given at this level (read `Cli::global`).
        #[command(flatten)]
        global: GlobalArgs,
        /// Shell id
        #[arg(value_name = "SHELL_ID")]
        shell_id: String,
    },
}
