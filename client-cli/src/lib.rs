//! `agent`: the thin terminal client of agentd.
//!
//! The daemon owns every conversation, background shell and bit of state;
//! this crate only speaks its gRPC protocol (crate `agent-proto`, never the
//! daemon's own crates) over a Unix socket and renders what comes back.
//!
//! Layout:
//! - [`cli`]: the clap command line (parsing only), decisions and modes.
//! - [`admin`]: looking after the daemon: `login`, `logout`, `doctor`,
//!   `daemon stop|restart|status|logs`, `--version`, `completions`, `man`.
//! - [`credentials`]: the daemon's credentials file (written atomically,
//!   mode 0600) and which terminal keys an autostarted daemon inherits.
//! - [`commands`]: one module per subcommand; [`execute`] dispatches.
//!   `agent acp` runs the `agent-acp` binary (crate `agent-acp`, the
//!   Agent Client Protocol bridge for editors), which serves through
//!   [`main_serving_acp`].
//! - [`repl`]: `agent` alone, the interactive session: the terminal thread
//!   (line editor, one-key answers, status line) feeding [`session`].
//! - [`session`]: the live Attach stream behind `run` and `attach`: rendering,
//!   permission prompts, stdin, Ctrl-C, reconnection without duplicates.
//! - `slash_command`: the interactive session's slash commands, one enum
//!   whose declaration is the table `/help`, Tab and both parsers read.
//! - [`connect`]: the Unix-socket channel and daemon autostart.
//! - [`render`]: human output into any `impl Write` (events, transcripts,
//!   permission prompts, tables).
//! - [`markdown`]: the assistant's markdown for the terminal, block by block
//!   as it streams (plain text without colour).
//! - [`json`]: the hand-written JSON mapping of the wire types (`--json`,
//!   `export`/`import`).
//! - [`io`]: stdin/stdout/stderr/Ctrl-C behind one struct, so tests can drive
//!   the client in-process.
//! - [`error`]: [`CliError`] (one line per failure) and [`Exit`] statuses.

pub mod access;
pub mod admin;
pub mod cli;
pub mod commands;
pub mod connect;
pub mod credentials;
pub mod environment;
pub mod error;
pub mod io;
pub mod json;
pub mod markdown;
#[cfg(test)]
mod mock;
pub mod remote;
pub mod render;
pub mod repl;
pub mod session;
mod slash_command;
pub mod think;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

pub use cli::Cli;
pub use commands::{AcpServer, client_name, execute, request_id};
pub use connect::{Client, connect, connect_or_start};
pub use error::{CliError, Exit};
pub use io::Io;

/// Runs the client as the `agent` binary does: parses the process's
/// arguments, runs the command on a fresh tokio runtime, prints a failure as
/// one `agent: <message>` line on stderr, and returns the exit status
/// (0 ok, 1 error, 2 usage, 3 context exhausted, 130 interrupted).
pub fn main() -> ExitCode {
    run_main(None)
}

/// Runs `agent-acp` as `main` runs `agent`, the same command line (`agent`'s
/// global options, then `acp`) served by `serve`.
pub fn main_serving_acp(serve: AcpServer) -> ExitCode {
    run_main(Some(serve))
}

fn run_main(acp: Option<AcpServer>) -> ExitCode {
    let cli = match Cli::parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        // `--version` also asks the daemon for its own (see admin::version).
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => {
            let args: Vec<String> = std::env::args().collect();
            let socket = admin::socket_from_args(&args);
            let mut io = Io::stdio(cli::ColorWhen::Auto);
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| CliError::io("cannot start the async runtime", e))
                .and_then(|rt| rt.block_on(admin::version(socket.as_deref(), &mut io)));
            return match result {
                Ok(exit) => exit.into(),
                Err(e) if e.is_broken_pipe() => Exit::Ok.into(),
                Err(e) => {
                    eprintln!("agent: {e}");
                    e.exit().into()
                }
            };
        }
        Err(e) => {
            // Help and version go to stdout with status 0; mistakes to stderr with 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(Exit::Usage.code()));
        }
    };
    // One thread: a client waits on one daemon connection and a terminal,
    // and a second worker thread (and the CPU count read to size the pool)
    // was a measurable part of a short `agent run` (BENCHMARKS.md, floor).
    // Blocking reads of stdin have threads of their own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("agent: cannot start the async runtime: {e}");
            return Exit::Error.into();
        }
    };
    let mut io = Io::stdio(cli.global.color);
    let json = cli.global.json;
    // Boxed: the command's future is some 15 KB (the largest of all the
    // commands'), and `block_on` passes it down by value through several
    // frames, each a fresh copy on fresh stack pages: 30 of a one-round
    // `agent run`'s ~250 page faults were stack (issue 20).
    let result = match acp {
        Some(serve) => runtime.block_on(commands::serve_acp(cli, serve)),
        None => runtime.block_on(Box::pin(execute(cli, &mut io))),
    };
    let _ = io.out.flush();
    let code = match result {
        Ok(exit) => exit.code(),
        Err(e) if e.is_broken_pipe() => Exit::Ok.code(),
        Err(e) => {
            if !already_on_screen(&e, json, std::io::stdout().is_terminal()) {
                eprintln!("agent: {e}");
            }
            e.exit().code()
        }
    };
    let _ = io.err.flush();
    // The command is done and its output written (a terminal it took over
    // was given back when the command's state was dropped): leave now.
    // Taking the runtime down first would wait for a thread blocked
    // reading the terminal, and freeing what is left cost a one-round
    // `agent run` about a tenth of a millisecond (issue 20). `exit` still
    // flushes Rust's own stdout buffer.
    std::process::exit(i32::from(code))
}

/// Whether the person has just read this error in the session's output (a
/// failed turn, an exhausted context: rendered on a terminal stdout), so it
/// is not printed a second time. Scripts (`--json`, stdout not a terminal)
/// always get the `agent: …` line on stderr.
fn already_on_screen(e: &CliError, json: bool, stdout_is_terminal: bool) -> bool {
    !json
        && stdout_is_terminal
        && matches!(
            e,
            CliError::TurnFailed { .. } | CliError::ContextExhausted(_)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_turn_is_said_once_on_a_terminal() {
        let failed = CliError::TurnFailed {
            kind: "auth".into(),
            message: "bad key".into(),
        };
        assert!(already_on_screen(&failed, false, true));
        assert!(!already_on_screen(&failed, true, true));
        assert!(!already_on_screen(&failed, false, false));
        assert!(!already_on_screen(
            &CliError::Input("x".into()),
            false,
            true
        ));
    }
}
