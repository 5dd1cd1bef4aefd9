//! `agent acp`: the Agent Client Protocol bridge for editors lives in its
//! own binary, `agent-acp` (crate `agent-acp`), so the ACP library and the
//! bridge are not loaded by every `agent ls`. `agent acp` runs it in this
//! process's place with the same command line, so editors configured with
//! `agent acp` keep working; `agent-acp` reads that command line with this
//! crate's parser and serves through [`AcpServer`].

use std::future::Future;
use std::os::unix::process::CommandExt as _;
use std::pin::Pin;

use super::context;
use crate::admin::Target;
use crate::cli::{Cli, Command};
use crate::error::{CliError, Exit};

/// How `agent-acp` serves ACP on stdin/stdout, given where the daemon is,
/// until the editor closes stdin.
pub type AcpServer = fn(Target) -> Pin<Box<dyn Future<Output = Result<Exit, CliError>>>>;

/// `agent acp`: replaces this process with `agent-acp` (`$AGENT_ACP_BIN`,
/// else next to this executable, else on `PATH`), given this process's
/// arguments. Returns only when that fails.
pub(super) fn acp() -> Result<Exit, CliError> {
    let program = crate::connect::find_program("agent-acp", "AGENT_ACP_BIN").map_err(|e| {
        CliError::Input(format!(
            "`agent acp` runs the ACP bridge, agent-acp, which is not installed: {e}"
        ))
    })?;
    let e = std::process::Command::new(&program)
        .args(std::env::args_os().skip(1))
        .exec();
    Err(CliError::io(format!("cannot run {}", program.display()), e))
}

/// `agent-acp`'s command line (the global options, then `acp` or nothing)
/// served by `serve`.
pub(crate) async fn serve_acp(cli: Cli, serve: AcpServer) -> Result<Exit, CliError> {
    if cli.prompt.is_some() || !matches!(cli.command, None | Some(Command::Acp { .. })) {
        return Err(CliError::Input(
            "agent-acp serves the Agent Client Protocol on stdin/stdout: it takes `agent`'s \
             global options and `acp`, nothing else"
                .to_string(),
        ));
    }
    serve(context(&cli)?.target()).await
}
