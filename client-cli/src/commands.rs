//! One module per subcommand, and [`execute`], which dispatches to them.
//! Each checks its own input first (so a typo does not start a daemon),
//! then connects, calls the daemon, and prints. The helpers they share sit
//! below the dispatcher: [`Ctx`] (the connection and its one retry), the
//! client's identity, argument conversions, and printing.

mod acp;
mod agents;
mod answer;
mod args;
mod attach;
mod budget;
mod cancel;
mod compact;
mod ctx;
mod export;
mod identity;
mod ls;
mod mcp;
mod plan;
mod queue;
mod removal;
mod rewind;
mod run;
mod send;
mod set;
mod shells;
mod show;
mod trust;
mod usage;

use std::io::Write;

use serde_json::Value;

use crate::cli::{AgentsCommand, Cli, Command, McpCommand};
use crate::connect::socket_path;
use crate::error::{CliError, Exit};
use crate::io::Io;

pub use acp::AcpServer;
pub(crate) use acp::serve_acp;
pub use args::read_images;
pub(crate) use args::{absolute_dir, mcp_server_arg, typed_dir};
pub(crate) use ctx::Ctx;
use ctx::{conversation, retrying};
pub use export::parse_export;
pub(crate) use identity::now_ms;
pub use identity::{client_name, request_id};
#[cfg(test)]
use identity::{name_from, user_from_env};
pub(crate) use rewind::rewind_lines;
pub(crate) use run::create_conversation;

/// Runs a parsed command line against the daemon, printing through `io`.
pub async fn execute(cli: Cli, io: &mut Io) -> Result<Exit, CliError> {
    let ctx = context(&cli)?;
    if let Some(message) = cli.misspelt_command() {
        return Err(CliError::Input(message));
    }
    let Some(command) = cli.command else {
        let start = crate::repl::Start {
            continue_last: cli.continue_last,
            resume: cli.resume,
            prompt: cli.prompt,
            new: cli.new,
        };
        return crate::repl::interactive(&ctx, start, io).await;
    };
    dispatch(&ctx, command, io).await
}

/// Where the daemon is (the local socket, or `--remote` with its token and
/// fingerprint), refusing the commands that only work on this machine.
fn context(cli: &Cli) -> Result<Ctx, CliError> {
    let remote =
        match (
            &cli.global.remote,
            &cli.global.token_file,
            &cli.global.fingerprint,
        ) {
            (Some(address), Some(token_file), Some(fingerprint)) => Some(
                crate::remote::Remote::new(address, token_file, fingerprint)?,
            ),
            (Some(_), _, _) => {
                return Err(CliError::Input(
                    "--remote needs --token-file and --fingerprint".to_string(),
                ));
            }
            (None, _, _) => None,
        };
    if remote.is_some()
        && matches!(
            cli.command,
            Some(
                Command::Daemon { .. }
                    | Command::Login { .. }
                    | Command::Logout { .. }
                    | Command::Doctor { .. }
            )
        )
    {
        // They act on this machine's daemon process and files (signal its
        // pid, write its credentials file): with a remote daemon's answers
        // they would act on the wrong process or file.
        return Err(CliError::Input(
            "`agent daemon`, `login`, `logout` and `doctor` manage the daemon on this machine; they do not work with --remote (run them on the daemon's machine)".to_string(),
        ));
    }
    crate::remote::set(remote, cli.global.name.clone());
    Ok(Ctx {
        socket: socket_path(cli.global.socket.as_deref())?,
        pass_socket: cli.global.socket.is_some(),
        autostart: !cli.global.no_autostart,
        json: cli.global.json,
        connected: std::sync::Mutex::new(None),
    })
}

/// Runs one subcommand.
async fn dispatch(ctx: &Ctx, command: Command, io: &mut Io) -> Result<Exit, CliError> {
    match command {
        Command::Run(args) => run::run(ctx, args, io).await,
        Command::Attach(args) => attach::attach(ctx, args, io).await,
        Command::Send(args) => send::send(ctx, args, io).await,
        Command::Queue {
            id, drop, drop_all, ..
        } => queue::queue(ctx, id, drop, drop_all, io).await,
        Command::Set {
            id,
            mode,
            model,
            add_dirs,
            env_from_here,
            ..
        } => {
            let change = set::Change {
                mode,
                model,
                add_dirs,
                env_from_here,
            };
            set::set(ctx, id, change, io).await
        }
        Command::Cancel { id, .. } => cancel::cancel(ctx, id, io).await,
        Command::Compact { id, .. } => compact::compact(ctx, id, io).await,
        Command::Continue { id, model, .. } => {
            compact::continue_conversation(ctx, id, model, io).await
        }
        Command::Ls {
            all,
            limit,
            flat,
            archived,
            ..
        } => ls::ls(ctx, if all { 0 } else { limit }, flat, archived, io).await,
        Command::Rm(args) => removal::rm(ctx, args.ids, args.force, io).await,
        Command::Archive(args) => removal::archive(ctx, args.ids, true, io).await,
        Command::Unarchive(args) => removal::archive(ctx, args.ids, false, io).await,
        Command::Rename(args) => removal::rename(ctx, args.id, args.title.join(" "), io).await,
        Command::Show {
            id, audit: true, ..
        } => crate::access::audit(ctx.client().await?, id, ctx.json, io).await,
        Command::Show {
            id,
            checkpoints: true,
            ..
        } => show::show_checkpoints(ctx, id, io).await,
        Command::Show {
            id, context, full, ..
        } => show::show(ctx, id, context, full, io).await,
        Command::Rewind {
            id,
            to,
            code: _,
            conversation,
            both,
            force,
            ..
        } => rewind::rewind(ctx, rewind::request(id, to, conversation, both, force), io).await,
        Command::Token { command, .. } => {
            crate::access::token(ctx.client().await?, command, ctx.json, io).await
        }
        Command::Usage {
            days, conversation, ..
        } => usage::usage(ctx, days, conversation, io).await,
        Command::Budget { command, .. } => budget::budget(ctx, command, io).await,
        Command::Answer(args) => answer::answer(ctx, args, io).await,
        Command::Plan(args) => plan::plan_answer(ctx, args, io).await,
        Command::Shells(args) => shells::shells(ctx, args, io).await,
        Command::Mcp {
            command: McpCommand::Ls { .. },
            ..
        } => mcp::mcp_ls(ctx, io).await,
        Command::Agents {
            command: AgentsCommand::Ls { dir, .. },
            ..
        } => agents::agents_ls(ctx, dir, io).await,
        Command::Trust {
            dir, list: true, ..
        } if dir.is_none() => trust::trust(ctx, None, true, io).await,
        Command::Trust { dir, .. } => trust::trust(ctx, Some(dir), true, io).await,
        Command::Untrust { dir, .. } => trust::trust(ctx, Some(dir), false, io).await,
        Command::Export { ids, .. } => export::export(ctx, ids, io).await,
        Command::Import { file, .. } => export::import(ctx, file, io).await,
        Command::Login {
            provider, check, ..
        } => crate::admin::login(&ctx.target(), provider, check, io).await,
        Command::Logout { provider, .. } => crate::admin::logout(&ctx.target(), provider, io).await,
        Command::Doctor { model, .. } => crate::admin::doctor(&ctx.target(), model, io).await,
        Command::Daemon { command, .. } => crate::admin::daemon(&ctx.target(), command, io).await,
        Command::Completions { shell, .. } => crate::admin::completions(shell, io),
        Command::Man { out, .. } => crate::admin::man(out, io),
        Command::Acp { .. } => acp::acp(),
    }
}

fn out_err(e: std::io::Error) -> CliError {
    CliError::io("writing output", e)
}

fn print_json(io: &mut Io, value: &Value) -> Result<(), CliError> {
    writeln!(io.out, "{value}")
        .and_then(|()| io.out.flush())
        .map_err(out_err)
}

fn print_line(io: &mut Io, text: &str) -> Result<(), CliError> {
    writeln!(io.out, "{text}")
        .and_then(|()| io.out.flush())
        .map_err(out_err)
}

#[cfg(test)]
mod tests;
