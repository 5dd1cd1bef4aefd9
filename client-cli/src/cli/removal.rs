//! `agent rm`, `archive`, `unarchive` and `rename`: putting conversations
//! away.

use clap::Args;

use super::GlobalArgs;

// `agent rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// The global options given at this level (read `Cli::global`).
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Delete a conversation whose turn is running too: it is stopped first
    #[arg(long, short = 'f')]
    pub force: bool,
    /// Conversation ids or unique prefixes
    #[arg(value_name = "ID", required = true)]
    pub ids: Vec<String>,
}

// `agent archive` and `agent unarchive`.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// The global options given at this level (read `Cli::global`).
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Conversation ids or unique prefixes
    #[arg(value_name = "ID", required = true)]
    pub ids: Vec<String>,
}

// `agent rename`.
#[derive(Debug, Args)]
pub struct RenameArgs {
    /// The global options given at this level (read `Cli::global`).
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Conversation id or unique prefix
    #[arg(value_name = "ID")]
    pub id: String,
    /// The new title (one line, at most 200 characters)
    #[arg(value_name = "TITLE", required = true, num_args = 1..)]
    pub title: Vec<String>,
}
