//! The global options: given before the subcommand or after it, at any
//! level (`agent --json ls`, `agent ls --json`, `agent daemon status
//! --json`).
//!
//! Every command level declares them by flattening [`GlobalArgs`], instead
//! of clap's `global = true`: clap copies a global option into every
//! subcommand when the command is built (eight options into 40 commands,
//! each with its help text: 136 KB of heap and a measurable part of a cold
//! `agent ls`, BENCHMARKS.md 2026-11-29 afternoon), while a flattened
//! struct is built, with clap's `defer`, only for the subcommands the
//! command line names. [`Globals`] is what they add up to: what is given
//! deepest wins, and a level's defaults and environment variables never
//! override what an outer level was given.

use std::path::PathBuf;

use std::any::Any;

use clap::parser::{MatchesError, ValueSource};
use clap::{ArgMatches, Args, ValueEnum};

// The global options as one command level declares them. (No doc comments
// on these types: with `defer`, clap would show them as each subcommand's
// description.) Every level flattens `GlobalArgs`; `agent token create`,
// whose own `--name` names the token, flattens `ConnectionArgs` only.
#[derive(Debug, Clone, Default, Args)]
pub struct GlobalArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// The name the other clients and the audit trail know this client by
    /// [default: user@host:pid]
    #[arg(
        id = "client_name",
        long = "name",
        env = "AGENT_CLIENT_NAME",
        value_name = "NAME",
        help_heading = "Global options"
    )]
    pub name: Option<String>,
}

// Every global option but `--name`.
#[derive(Debug, Clone, Default, Args)]
pub struct ConnectionArgs {
    /// The daemon's Unix socket [default: $XDG_RUNTIME_DIR/agentd/agentd.sock,
    /// else ~/.local/state/agentd/run/agentd.sock]
    #[arg(
        long,
        env = "AGENTD_SOCKET",
        value_name = "PATH",
        help_heading = "Global options"
    )]
    pub socket: Option<PathBuf>,

    /// Machine-readable output: JSON (streaming commands print one object per
    /// event per line)
    #[arg(long, help_heading = "Global options")]
    pub json: bool,

    /// Do not start agentd when no daemon answers on the socket
    #[arg(long, help_heading = "Global options")]
    pub no_autostart: bool,

    /// Talk to the daemon on another machine, at HOST:PORT (its `agentd
    /// --listen`), over TLS with a bearer token; needs --token-file and
    /// --fingerprint. The local socket is not used
    #[arg(
        long,
        env = "AGENT_REMOTE",
        value_name = "HOST:PORT",
        requires_all = ["token_file", "fingerprint"],
        help_heading = "Global options"
    )]
    pub remote: Option<String>,

    /// With --remote: the file holding the bearer token (`agent token
    /// create` on the daemon's machine prints one)
    #[arg(
        long,
        env = "AGENT_TOKEN_FILE",
        value_name = "FILE",
        help_heading = "Global options"
    )]
    pub token_file: Option<PathBuf>,

    /// With --remote: the SHA-256 fingerprint of the daemon's certificate,
    /// `SHA256:<64 hex digits>` (agentd prints it at start; `agent token ls`
    /// shows it); any other certificate is refused
    #[arg(
        long,
        env = "AGENT_FINGERPRINT",
        value_name = "SHA256:…",
        help_heading = "Global options"
    )]
    pub fingerprint: Option<String>,

    /// Colour and styles in human output: `auto` uses them when stdout is a
    /// terminal, `NO_COLOR` is unset or empty and `TERM` is not `dumb`
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        default_value_t = ColorWhen::Auto,
        help_heading = "Global options"
    )]
    pub color: ColorWhen,
}

/// The global options of the whole command line, merged from every level:
/// the outermost level's (with its environment variables and defaults),
/// then each deeper subcommand's where given on the command line there
/// (deepest wins). Read this, never a level's [`GlobalArgs`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Globals {
    pub socket: Option<PathBuf>,
    pub json: bool,
    pub no_autostart: bool,
    pub remote: Option<String>,
    pub token_file: Option<PathBuf>,
    pub fingerprint: Option<String>,
    pub name: Option<String>,
    pub color: ColorWhen,
}

impl Globals {
    /// The merged options of a parsed command line (`top` is its outermost
    /// level).
    pub(crate) fn fold(top: &ArgMatches) -> Result<Globals, MatchesError> {
        let mut globals = Globals::default();
        let mut level = Some(top);
        let mut outermost = true;
        while let Some(matches) = level {
            globals.take(matches, outermost)?;
            outermost = false;
            level = matches.subcommand().map(|(_, deeper)| deeper);
        }
        Ok(globals)
    }

    fn take(&mut self, level: &ArgMatches, outermost: bool) -> Result<(), MatchesError> {
        let pick = Pick { level, outermost };
        if let Some(socket) = pick.value::<PathBuf>("socket")? {
            self.socket = Some(socket);
        }
        if let Some(json) = pick.value("json")? {
            self.json = json;
        }
        if let Some(no_autostart) = pick.value("no_autostart")? {
            self.no_autostart = no_autostart;
        }
        if let Some(remote) = pick.value::<String>("remote")? {
            self.remote = Some(remote);
        }
        if let Some(token_file) = pick.value::<PathBuf>("token_file")? {
            self.token_file = Some(token_file);
        }
        if let Some(fingerprint) = pick.value::<String>("fingerprint")? {
            self.fingerprint = Some(fingerprint);
        }
        if let Some(name) = pick.value::<String>("client_name")? {
            self.name = Some(name);
        }
        if let Some(color) = pick.value("color")? {
            self.color = color;
        }
        Ok(())
    }
}

/// One level's global options, as far as they count: all of them at the
/// outermost level, only those given on the command line deeper down (a
/// default or an environment variable there must not undo what an outer
/// level was given).
struct Pick<'a> {
    level: &'a ArgMatches,
    outermost: bool,
}

impl Pick<'_> {
    fn value<T: Any + Clone + Send + Sync + 'static>(
        &self,
        id: &str,
    ) -> Result<Option<T>, MatchesError> {
        // Not declared at this level (clap's `help`; `--name` under `token create`
        // is the token's, with an id of its own).
        if self.level.try_contains_id(id).is_err() {
            return Ok(None);
        }
        if !self.outermost && self.level.value_source(id) != Some(ValueSource::CommandLine) {
            return Ok(None);
        }
        Ok(self.level.try_get_one::<T>(id)?.cloned())
    }
}

/// When human output is coloured (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ColorWhen {
    /// Never: plain text with no escape sequence
    Never,
    /// When stdout is a terminal and neither `NO_COLOR` nor `TERM=dumb` says no
    #[default]
    Auto,
    /// Always, even into a pipe or a file
    Always,
}
