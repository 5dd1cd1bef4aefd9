//! One function per subcommand. Each checks its own input first (so a typo
//! does not start a daemon), then connects, calls the daemon, and prints.

use std::io::Write;
use std::path::{Path, PathBuf};

use agent_proto::v1 as pb;
use serde_json::{Value, json};

use crate::cli::{
    AnswerArgs, AttachArgs, BudgetCommand, Cli, Command, McpCommand, PlanAction, PlanArgs, RunArgs,
    ShellsArgs, ShellsCommand,
};
use crate::connect::{Client, connect_or_start, socket_path};
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;
use crate::render::{Renderer, conversation_tree, shell_table, usage_table};
use crate::session::{SessionConfig, SessionKind, run_session};

/// Runs a parsed command line against the daemon, printing through `io`.
pub async fn execute(cli: Cli, io: &mut Io) -> Result<Exit, CliError> {
    let remote =
        match (&cli.remote, &cli.token_file, &cli.fingerprint) {
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
                    | Command::Doctor
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
    crate::remote::set(remote, cli.name.clone());
    let ctx = Ctx {
        socket: socket_path(cli.socket.as_deref())?,
        pass_socket: cli.socket.is_some(),
        autostart: !cli.no_autostart,
        json: cli.json,
        connected: std::sync::Mutex::new(None),
    };
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
    match command {
        Command::Run(args) => run(&ctx, args, io).await,
        Command::Attach(args) => attach(&ctx, args, io).await,
        Command::Send {
            id,
            text,
            no_queue,
            image,
        } => {
            let images = read_images(&image)?;
            send(&ctx, id, text.join(" "), images, !no_queue, io).await
        }
        Command::Queue { id, drop, drop_all } => queue(&ctx, id, drop, drop_all, io).await,
        Command::Set {
            id,
            mode,
            model,
            add_dirs,
        } => {
            set(
                &ctx,
                id,
                Change {
                    mode,
                    model,
                    add_dirs,
                },
                io,
            )
            .await
        }
        Command::Cancel { id } => cancel(&ctx, id, io).await,
        Command::Compact { id } => compact(&ctx, id, io).await,
        Command::Continue { id } => continue_conversation(&ctx, id, io).await,
        Command::Ls { all, limit, flat } => ls(&ctx, if all { 0 } else { limit }, flat, io).await,
        Command::Show {
            id, audit: true, ..
        } => crate::access::audit(ctx.client().await?, id, ctx.json, io).await,
        Command::Show {
            id,
            checkpoints: true,
            ..
        } => show_checkpoints(&ctx, id, io).await,
        Command::Show {
            id, context, full, ..
        } => show(&ctx, id, context, full, io).await,
        Command::Rewind {
            id,
            to,
            code: _,
            conversation,
            both,
            force,
        } => {
            let request = pb::RewindRequest {
                conversation_id: id.clone(),
                message_seq: to.unwrap_or(0),
                code: both || !conversation,
                conversation: both || conversation,
                force,
            };
            rewind(&ctx, request, io).await
        }
        Command::Token { command } => {
            crate::access::token(ctx.client().await?, command, ctx.json, io).await
        }
        Command::Usage { days, conversation } => usage(&ctx, days, conversation, io).await,
        Command::Budget { command } => budget(&ctx, command, io).await,
        Command::Answer(args) => answer(&ctx, args, io).await,
        Command::Plan(args) => plan_answer(&ctx, args, io).await,
        Command::Shells(args) => shells(&ctx, args, io).await,
        Command::Mcp {
            command: McpCommand::Ls,
        } => mcp_ls(&ctx, io).await,
        Command::Trust { dir, list: true } if dir.is_none() => trust(&ctx, None, true, io).await,
        Command::Trust { dir, .. } => trust(&ctx, Some(dir), true, io).await,
        Command::Untrust { dir } => trust(&ctx, Some(dir), false, io).await,
        Command::Export { ids } => export(&ctx, ids, io).await,
        Command::Import { file } => import(&ctx, file, io).await,
        Command::Login { provider } => crate::admin::login(&ctx.target(), provider, io).await,
        Command::Logout { provider } => crate::admin::logout(&ctx.target(), provider, io).await,
        Command::Doctor => crate::admin::doctor(&ctx.target(), io).await,
        Command::Daemon { command } => crate::admin::daemon(&ctx.target(), command, io).await,
        Command::Completions { shell } => crate::admin::completions(shell, io),
        Command::Man { out } => crate::admin::man(out, io),
        Command::Acp => {
            crate::acp::serve(crate::acp::Target {
                socket: ctx.socket.clone(),
                pass_socket: ctx.pass_socket,
                autostart: ctx.autostart,
            })
            .await
        }
    }
}

/// What every command needs to reach the daemon.
pub(crate) struct Ctx {
    pub(crate) socket: PathBuf,
    pass_socket: bool,
    autostart: bool,
    json: bool,
    /// The connection the command made first, which its later calls share
    /// (a client is a handle on one HTTP/2 connection): `agent run` creates
    /// the conversation and attaches over one connection, not two.
    connected: std::sync::Mutex<Option<Client>>,
}

impl Ctx {
    fn target(&self) -> crate::admin::Target {
        crate::admin::Target {
            socket: self.socket.clone(),
            pass_socket: self.pass_socket,
            autostart: self.autostart,
            json: self.json,
        }
    }

    /// A client on the command's connection, connecting (or starting the
    /// daemon) the first time.
    pub(crate) async fn client(&self) -> Result<Client, CliError> {
        if let Some(client) = self.shared().clone() {
            return Ok(client);
        }
        let client = connect_or_start(&self.socket, self.pass_socket, self.autostart).await?;
        *self.shared() = Some(client.clone());
        Ok(client)
    }

    /// A client on a new connection (which later calls share), for a call
    /// whose connection broke or may have.
    pub(crate) async fn reconnect(&self) -> Result<Client, CliError> {
        self.shared().take();
        self.client().await
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Option<Client>> {
        self.connected
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A fresh client request id: the daemon answers a retry carrying it with
/// the first attempt's outcome instead of doing it twice.
///
/// A ULID of the time and 80 bits from std's per-process random hash keys
/// (seeded by the OS when the process starts), the pid and a counter. Not
/// `Ulid::new()`: its generator probes the CPU's features on first use,
/// a dozen `cpuid` instructions, each a trap to the hypervisor on a VM
/// (6 µs apiece measured on the 2-vCPU test machine), in every `agent`
/// process. The id only has to be unique, not secret.
pub(crate) fn request_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let keys = std::hash::RandomState::new();
    let word = |part: u64| {
        let mut hasher = keys.build_hasher();
        hasher.write_u64(part);
        hasher.write_u32(std::process::id());
        hasher.write_u64(count);
        hasher.finish()
    };
    let random = (u128::from(word(0)) << 64 | u128::from(word(1))) & ((1u128 << 80) - 1);
    let ms = u64::try_from(now_ms()).unwrap_or(0);
    ulid::Ulid::from_parts(ms, random).to_string()
}

/// Pause before the one retry of a call whose connection broke.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Makes a mutating call, and makes it once more when the connection broke
/// before its answer came: the request carries a client request id, so a
/// daemon that did it already answers with the first outcome.
async fn retrying<T, F, Fut>(ctx: &Ctx, call: F) -> Result<Result<T, tonic::Status>, CliError>
where
    F: Fn(Client) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    match call(ctx.client().await?).await {
        Err(status) if status.code() == tonic::Code::Unavailable => {
            tokio::time::sleep(RETRY_PAUSE).await;
            Ok(call(ctx.reconnect().await?)
                .await
                .map(tonic::Response::into_inner))
        }
        other => Ok(other.map(tonic::Response::into_inner)),
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

/// This client's name as the other clients see it: the one given with
/// `--name`, else `user@host:pid`. Worked out once per process: every call
/// and every session of a command carries it, and finding the user can
/// mean reading the password database.
pub fn client_name() -> String {
    if let Some(name) = crate::remote::chosen_name() {
        return name;
    }
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(default_client_name).clone()
}

/// The user named by the environment, as a login sets it.
fn env_user() -> Option<String> {
    user_from_env(|key| std::env::var(key).ok())
}

/// `USER`, else `LOGNAME`, as `var` reads them; empty ones do not count.
fn user_from_env(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    ["USER", "LOGNAME"]
        .into_iter()
        .find_map(|key| var(key).filter(|u| !u.is_empty()))
}

/// `user@host:pid`, the user as the environment names it. Without `USER`
/// and `LOGNAME` (cron, services, containers) it is `agent@host:pid`: the
/// user database is not asked. On the local socket every client is the
/// daemon's own user (its directory is private), so the lookup (nsswitch,
/// the password file, nscd, or a directory service over the network)
/// would tell the others nothing, and it cost every command 0.1 ms or
/// more before its first call (issue 20).
fn default_client_name() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty());
    name_from(env_user(), host, std::process::id())
}

/// A client's name from its user, host and pid, each as far as known.
fn name_from(user: Option<String>, host: Option<String>, pid: u32) -> String {
    match (user, host) {
        (Some(user), Some(host)) => format!("{user}@{host}:{pid}"),
        (Some(user), None) => format!("{user}:{pid}"),
        (None, Some(host)) => format!("agent@{host}:{pid}"),
        (None, None) => format!("agent-{pid}"),
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

async fn run(ctx: &Ctx, args: RunArgs, io: &mut Io) -> Result<Exit, CliError> {
    let cwd = match args.cwd {
        Some(dir) => dir,
        None => std::env::current_dir().map_err(|e| CliError::io("current directory", e))?,
    };
    let cwd = absolute_dir(&cwd, "working directory")?;
    let additional_dirs = args
        .new
        .add_dirs
        .iter()
        .map(|d| absolute_dir(d, "directory"))
        .collect::<Result<Vec<_>, _>>()?;
    let mcp_servers = args
        .mcp
        .iter()
        .map(|a| mcp_server_arg(a))
        .collect::<Result<Vec<_>, _>>()?;
    let prompt = args.prompt.join(" ");
    if prompt.trim().is_empty() {
        return Err(CliError::Input("the prompt is empty".to_string()));
    }
    let images = read_images(&args.image)?;
    let request = pb::CreateConversationRequest {
        images,
        mcp_servers,
        cwd,
        model: args.new.model.unwrap_or_default(),
        prompt: prompt.clone(),
        mode: args.new.mode.map_or(0, |m| m.to_proto() as i32),
        allow_rules: args.new.allow,
        additional_dirs,
        client_request_id: request_id(),
    };
    let on_terminal = io.tty && !ctx.json && !args.yes;
    let mut config = SessionConfig {
        kind: SessionKind::Run,
        conversation_id: String::new(),
        socket: ctx.socket.clone(),
        yes: args.yes,
        json: ctx.json,
        client_name: client_name(),
        view_only: false,
        sent_prompt: Some(prompt),
        create: None,
    };
    if !on_terminal {
        // Created on the Attach stream itself: the daemon subscribes this
        // client before the first turn starts, with no round trip between
        // creating and attaching (issue 20). The session says which
        // conversation it is once the snapshot names it.
        config.create = Some(request);
        return run_session(ctx.client().await?, config, io).await;
    }
    let conversation = create_conversation(ctx, request).await?;
    let client = ctx.client().await?;
    // One write: stderr is unbuffered, and `writeln!` would make three.
    io.err
        .write_all(format!("conversation {}\n", conversation.id).as_bytes())
        .and_then(|()| io.err.flush())
        .map_err(out_err)?;
    config.conversation_id = conversation.id;
    crate::repl::on_terminal(client, config, io).await
}

/// Creates a conversation (with its first message), retried once if the
/// connection broke before the answer.
pub(crate) async fn create_conversation(
    ctx: &Ctx,
    request: pb::CreateConversationRequest,
) -> Result<pb::ConversationSummary, CliError> {
    let created = retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.create_conversation(request).await }
    })
    .await?
    .map_err(CliError::status)?;
    created
        .conversation
        .ok_or_else(|| CliError::Server("the daemon returned no conversation".to_string()))
}

/// `dir` made absolute (symlinks resolved), checked to be a directory,
/// as the daemon wants it; `what` names it in errors.
pub(crate) fn absolute_dir(dir: &Path, what: &str) -> Result<String, CliError> {
    let canonical = dir
        .canonicalize()
        .map_err(|e| CliError::io(format!("{what} {}", dir.display()), e))?;
    if !canonical.is_dir() {
        return Err(CliError::Input(format!(
            "{} is not a directory",
            canonical.display()
        )));
    }
    canonical
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| CliError::Input(format!("{what} {} is not UTF-8", canonical.display())))
}

/// A directory as a person typed it in the session (`~/src`, `../lib`):
/// absolute and canonical, from the current directory.
pub(crate) fn typed_dir(typed: &str) -> Result<String, CliError> {
    let typed = typed.trim();
    let path = match typed.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(rest),
            None => PathBuf::from(typed),
        },
        None => PathBuf::from(typed),
    };
    absolute_dir(&path, "directory")
}

async fn attach(ctx: &Ctx, args: AttachArgs, io: &mut Io) -> Result<Exit, CliError> {
    let client = ctx.client().await?;
    let config = SessionConfig {
        kind: SessionKind::Attach,
        conversation_id: args.id,
        socket: ctx.socket.clone(),
        yes: args.yes,
        json: ctx.json,
        client_name: client_name(),
        view_only: args.view_only,
        sent_prompt: None,
        create: None,
    };
    if io.tty && !ctx.json && !config.yes {
        return crate::repl::on_terminal(client, config, io).await;
    }
    run_session(client, config, io).await
}

/// The images named on the command line, read for sending. Whether each
/// is an image the daemon takes is the daemon's to say (by content, with
/// the limits of its config); here only a file that cannot be read is an
/// error.
pub fn read_images(paths: &[std::path::PathBuf]) -> Result<Vec<pb::ImageUpload>, CliError> {
    paths
        .iter()
        .map(|path| {
            let data = std::fs::read(path).map_err(|e| {
                CliError::Input(format!("cannot read image {}: {e}", path.display()))
            })?;
            Ok(pb::ImageUpload {
                data,
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| path.display().to_string()),
            })
        })
        .collect()
}

async fn send(
    ctx: &Ctx,
    id: String,
    text: String,
    images: Vec<pb::ImageUpload>,
    queue_if_busy: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    if text.trim().is_empty() {
        return Err(CliError::Input("the message is empty".to_string()));
    }
    let request = pb::SendMessageRequest {
        conversation_id: id.clone(),
        text,
        client_request_id: request_id(),
        expected_turn: None,
        queue_if_busy,
        images,
    };
    let response = retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.send_message(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &id))?;
    if ctx.json {
        print_json(
            io,
            &json!({
                "conversation_id": response.conversation_id,
                "message_seq": response.message_seq,
                "queued_id": response.queued_id,
            }),
        )?;
    } else if !response.queued_id.is_empty() {
        print_line(
            io,
            &format!(
                "queued in {} as {}: the agent reads it at its next step \
                 (`agent queue {} --drop {}` takes it back)",
                response.conversation_id,
                response.queued_id,
                response.conversation_id,
                response.queued_id
            ),
        )?;
    } else {
        print_line(
            io,
            &format!(
                "sent to {} (message {})",
                response.conversation_id, response.message_seq
            ),
        )?;
    }
    Ok(Exit::Ok)
}

/// `agent queue`: what waits for the turn, or drops some of it.
async fn queue(
    ctx: &Ctx,
    id: String,
    drop: Option<String>,
    drop_all: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let queued = if drop.is_some() || drop_all {
        let request = pb::DropQueuedMessageRequest {
            conversation_id: id.clone(),
            queued_id: drop.unwrap_or_default(),
        };
        retrying(ctx, |mut client| {
            let request = request.clone();
            async move { client.drop_queued_message(request).await }
        })
        .await?
        .map_err(|s| CliError::conversation_status(s, &id))?
        .queued
    } else {
        conversation(ctx, &id)
            .await?
            .conversation
            .map(|c| c.queued)
            .unwrap_or_default()
    };
    if ctx.json {
        let items: Vec<_> = queued.iter().map(crate::json::queued_message).collect();
        print_json(io, &json!({ "queued": items }))?;
    } else if queued.is_empty() {
        print_line(io, "nothing is queued")?;
    } else {
        for q in &queued {
            let from = q
                .from
                .as_ref()
                .map(|c| format!(" (from {})", c.name))
                .unwrap_or_default();
            print_line(io, &format!("{}{from}: {}", q.id, q.text))?;
        }
    }
    Ok(Exit::Ok)
}

/// The conversation `id` names (a retry after a broken connection).
async fn conversation(ctx: &Ctx, id: &str) -> Result<pb::GetConversationResponse, CliError> {
    let request = pb::GetConversationRequest {
        conversation_id: id.to_string(),
    };
    retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.get_conversation(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, id))
}

/// What `agent set` changes.
struct Change {
    mode: Option<crate::cli::Mode>,
    model: Option<String>,
    add_dirs: Vec<PathBuf>,
}

/// `agent set`: changes the mode, the model or the directories (prints
/// them when nothing is given).
async fn set(ctx: &Ctx, id: String, change: Change, io: &mut Io) -> Result<Exit, CliError> {
    let Change {
        mode,
        model,
        add_dirs,
    } = change;
    let add_dirs = add_dirs
        .iter()
        .map(|d| absolute_dir(d, "directory"))
        .collect::<Result<Vec<_>, _>>()?;
    let conversation = if mode.is_none() && model.is_none() && add_dirs.is_empty() {
        conversation(ctx, &id).await?.conversation
    } else {
        let request = pb::UpdateConversationRequest {
            conversation_id: id.clone(),
            mode: mode.map_or(0, |m| m.to_proto() as i32),
            model: model.unwrap_or_default(),
            client_name: client_name(),
            add_dirs,
        };
        retrying(ctx, |mut client| {
            let request = request.clone();
            async move { client.update_conversation(request).await }
        })
        .await?
        .map_err(|s| CliError::conversation_status(s, &id))?
        .conversation
    };
    let c = conversation.unwrap_or_default();
    if ctx.json {
        print_json(io, &crate::json::conversation_summary(&c))?;
    } else {
        print_line(
            io,
            &format!(
                "mode {} · model {} ({} tokens of context)",
                crate::render::mode_name(c.mode),
                c.model,
                c.context_window
            ),
        )?;
        if !c.additional_dirs.is_empty() {
            print_line(io, &format!("also in {}", c.additional_dirs.join(", ")))?;
        }
    }
    Ok(Exit::Ok)
}

async fn cancel(ctx: &Ctx, id: String, io: &mut Io) -> Result<Exit, CliError> {
    let request = pb::CancelConversationRequest {
        conversation_id: id.clone(),
        client_request_id: request_id(),
    };
    let response = retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.cancel_conversation(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &id))?;
    if ctx.json {
        print_json(io, &json!({"was_busy": response.was_busy}))?;
    } else if response.was_busy {
        print_line(io, "cancelled")?;
    } else {
        print_line(io, "nothing to cancel: the agent is idle")?;
    }
    Ok(Exit::Ok)
}

/// `agent compact`: asks for the continuation summary now.
async fn compact(ctx: &Ctx, id: String, io: &mut Io) -> Result<Exit, CliError> {
    let response = ctx
        .client()
        .await?
        .compact_conversation(pb::CompactConversationRequest {
            conversation_id: id.clone(),
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    let c = response.conversation.unwrap_or_default();
    if ctx.json {
        print_json(io, &js::conversation_summary(&c))?;
    } else {
        print_line(
            io,
            &format!(
                "compacting {}: the model writes a continuation summary; then `agent continue {}`",
                c.id, c.id
            ),
        )?;
    }
    Ok(Exit::Ok)
}

/// `agent continue`: the exhausted conversation goes on in a new one.
async fn continue_conversation(ctx: &Ctx, id: String, io: &mut Io) -> Result<Exit, CliError> {
    // Asked again, the daemon answers with the same new conversation, so a
    // retry after a broken connection is safe.
    let request = pb::ContinueConversationRequest {
        conversation_id: id.clone(),
    };
    let response = retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.continue_conversation(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &id))?;
    let c = response.conversation.unwrap_or_default();
    if ctx.json {
        print_json(io, &js::conversation_summary(&c))?;
    } else {
        print_line(
            io,
            &format!("continued {} as {}", c.parent_conversation_id, c.id),
        )?;
    }
    Ok(Exit::Ok)
}

/// `limit` 0 lists every conversation.
async fn ls(ctx: &Ctx, limit: u32, flat: bool, io: &mut Io) -> Result<Exit, CliError> {
    let response = ctx
        .client()
        .await?
        .list_conversations(pb::ListConversationsRequest {
            limit,
            before_id: String::new(),
        })
        .await
        .map_err(CliError::status)?
        .into_inner();
    for notice in &response.notices {
        writeln!(io.err, "agentd: {notice}").map_err(out_err)?;
    }
    if ctx.json {
        let list: Vec<Value> = response
            .conversations
            .iter()
            .map(js::conversation_summary)
            .collect();
        print_json(io, &Value::Array(list))?;
    } else {
        if flat {
            crate::render::conversation_table(&mut io.out, &response.conversations, now_ms(), false)
        } else {
            conversation_tree(&mut io.out, &response.conversations, now_ms(), false)
        }
        .and_then(|()| io.out.flush())
        .map_err(out_err)?;
    }
    if !response.next_before_id.is_empty() {
        writeln!(
            io.err,
            "(the newest {} shown; `agent ls --all` lists every conversation)",
            response.conversations.len()
        )
        .map_err(out_err)?;
    }
    Ok(Exit::Ok)
}

async fn show(
    ctx: &Ctx,
    id: String,
    context: bool,
    full: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let response = ctx
        .client()
        .await?
        .get_conversation(pb::GetConversationRequest {
            conversation_id: id.clone(),
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    let (color, width, truecolor) = (io.color, io.width, io.truecolor);
    match (ctx.json, context) {
        (true, false) => print_json(io, &js::get_conversation_response(&response))?,
        (true, true) => print_json(
            io,
            &js::instructions(&response.instructions.unwrap_or_default()),
        )?,
        (false, false) => Renderer::new(&mut io.out, color)
            .with_screen(width, truecolor)
            .with_full_output(full)
            .transcript(&response)
            .map_err(out_err)?,
        (false, true) => Renderer::new(&mut io.out, color)
            .instructions(&response.instructions.unwrap_or_default())
            .map_err(out_err)?,
    }
    Ok(Exit::Ok)
}

/// `agent show --checkpoints`: the turns that can be rewound.
async fn show_checkpoints(ctx: &Ctx, id: String, io: &mut Io) -> Result<Exit, CliError> {
    let response = conversation(ctx, &id).await?;
    if ctx.json {
        let turns: Vec<Value> = response
            .checkpoints
            .iter()
            .map(js::checkpoint_turn)
            .collect();
        print_json(io, &json!({ "checkpoints": turns }))?;
    } else {
        for line in crate::render::checkpoint_lines(&response.checkpoints) {
            print_line(io, &line)?;
        }
    }
    Ok(Exit::Ok)
}

/// `agent rewind`.
async fn rewind(ctx: &Ctx, request: pb::RewindRequest, io: &mut Io) -> Result<Exit, CliError> {
    let id = request.conversation_id.clone();
    let response = ctx
        .client()
        .await?
        .rewind(request)
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    if ctx.json {
        print_json(io, &js::rewind_response(&response))?;
        return Ok(Exit::Ok);
    }
    for line in rewind_lines(&response) {
        print_line(io, &line)?;
    }
    Ok(Exit::Ok)
}

/// What `Rewind` did, for people.
pub(crate) fn rewind_lines(r: &pb::RewindResponse) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(code) = &r.code {
        lines.extend(crate::render::code_rewound_lines(code));
    }
    if let Some(f) = &r.forked {
        lines.push(format!(
            "forked as {} (its transcript ends before message {}); `agent attach {}` goes on there",
            f.id, r.message_seq, f.id
        ));
    }
    lines
}

async fn usage(
    ctx: &Ctx,
    days: u32,
    conversation: Option<String>,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let id = conversation.unwrap_or_default();
    let report = ctx
        .client()
        .await?
        .get_usage(pb::GetUsageRequest {
            conversation_id: id.clone(),
            days,
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    if ctx.json {
        print_json(io, &js::usage_report(&report))?;
    } else {
        usage_table(&mut io.out, &report).map_err(out_err)?;
    }
    Ok(Exit::Ok)
}

/// `agent budget raise|stop`.
async fn budget(ctx: &Ctx, command: BudgetCommand, io: &mut Io) -> Result<Exit, CliError> {
    let (id, raise, raise_by) = match command {
        BudgetCommand::Raise { id, by } => (id, true, by),
        BudgetCommand::Stop { id } => (id, false, None),
    };
    let c = ctx
        .client()
        .await?
        .answer_budget(pb::AnswerBudgetRequest {
            conversation_id: id.clone(),
            raise,
            raise_by,
            client_name: client_name(),
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner()
        .conversation
        .unwrap_or_default();
    if ctx.json {
        print_json(io, &js::conversation_summary(&c))?;
    } else if let Some(stop) = &c.budget_stop {
        print_line(
            io,
            &format!("raised, but the budget is still reached: {}", stop.text),
        )?;
    } else if raise {
        print_line(io, &format!("raised; {} goes on", c.id))?;
    } else {
        print_line(io, &format!("{} stopped at the budget", c.id))?;
    }
    Ok(Exit::Ok)
}

async fn answer(ctx: &Ctx, args: AnswerArgs, io: &mut Io) -> Result<Exit, CliError> {
    let scope = if args.always_project {
        pb::RuleScope::Project
    } else {
        pb::RuleScope::Unspecified
    };
    let request = pb::AnswerPermissionRequest {
        conversation_id: args.id.clone(),
        request_id: String::new(),
        decision: args.decision.to_proto() as i32,
        feedback: args.feedback.unwrap_or_default(),
        client_name: client_name(),
        scope: scope as i32,
        client_request_id: request_id(),
        plan_answer: None,
    };
    retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.answer_permission(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &args.id))?;
    if ctx.json {
        print_json(
            io,
            &js::answer(args.decision.to_proto() as i32, scope as i32),
        )?;
    } else {
        print_line(io, &format!("answered: {}", args.decision.label()))?;
    }
    Ok(Exit::Ok)
}

async fn plan_answer(ctx: &Ctx, args: PlanArgs, io: &mut Io) -> Result<Exit, CliError> {
    use pb::plan_answer::Answer as A;
    let answer = match args.action {
        PlanAction::Approve => A::Approve(pb::PlanApprove {
            mode: pb::PermissionMode::Default as i32,
        }),
        PlanAction::ApproveEdits => A::Approve(pb::PlanApprove {
            mode: pb::PermissionMode::AcceptEdits as i32,
        }),
        PlanAction::Reject => A::Reject(pb::PlanReject {
            feedback: args.feedback.clone().unwrap_or_default(),
        }),
        PlanAction::Edit => {
            let text = match &args.steps_file {
                Some(path) if path.as_os_str() == "-" => std::io::read_to_string(std::io::stdin())
                    .map_err(|e| {
                        CliError::Input(format!("cannot read the steps from standard input: {e}"))
                    })?,
                Some(path) => std::fs::read_to_string(path)
                    .map_err(|e| CliError::Input(format!("cannot read {}: {e}", path.display())))?,
                None => {
                    let pending = conversation(ctx, &args.id)
                        .await?
                        .pending_permission
                        .and_then(|p| p.plan)
                        .ok_or_else(|| {
                            CliError::Refused("no plan is waiting for approval".to_string())
                        })?;
                    edit_in_editor(&crate::render::plan_steps_text(&pending))?
                }
            };
            let steps = crate::render::parse_plan_steps(&text).map_err(CliError::Input)?;
            A::Edit(pb::PlanEdit {
                steps,
                mode: pb::PermissionMode::Default as i32,
            })
        }
    };
    let request = pb::AnswerPermissionRequest {
        conversation_id: args.id.clone(),
        client_name: client_name(),
        client_request_id: request_id(),
        plan_answer: Some(pb::PlanAnswer {
            answer: Some(answer),
        }),
        ..Default::default()
    };
    retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.answer_permission(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &args.id))?;
    let done = match args.action {
        PlanAction::Approve => "plan approved",
        PlanAction::ApproveEdits => "plan approved (accept_edits)",
        PlanAction::Reject => "plan rejected",
        PlanAction::Edit => "edited plan approved",
    };
    if ctx.json {
        print_json(io, &serde_json::json!({"answered": done}))?;
    } else {
        print_line(io, done)?;
    }
    Ok(Exit::Ok)
}

/// Opens `text` in $VISUAL / $EDITOR (vi without either) and returns what
/// the user saved.
fn edit_in_editor(text: &str) -> Result<String, CliError> {
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".to_string());
    let path = std::env::temp_dir().join(format!("agent-plan-{}.txt", std::process::id()));
    let header = "# Edit the steps, one a line: id. [kind] title (after id, id) {file, file}\n# kinds: analyze, edit, validate, test. Lines starting with # are ignored.\n";
    std::fs::write(&path, format!("{header}{text}"))
        .map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))?;
    let mut words = shlex::split(&editor).unwrap_or_else(|| vec![editor.clone()]);
    if words.is_empty() {
        words.push("vi".to_string());
    }
    let status = std::process::Command::new(&words[0])
        .args(&words[1..])
        .arg(&path)
        .status();
    let edited = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            return Err(CliError::Input(format!(
                "{editor} exited with {s}; nothing sent"
            )));
        }
        Err(e) => return Err(CliError::Input(format!("cannot run {editor}: {e}"))),
    }
    edited.map_err(|e| CliError::Input(format!("cannot read the edited steps: {e}")))
}

async fn shells(ctx: &Ctx, args: ShellsArgs, io: &mut Io) -> Result<Exit, CliError> {
    match args.command {
        None => {
            let conversation = args.conversation.unwrap_or_default();
            let response = ctx
                .client()
                .await?
                .list_shells(pb::ListShellsRequest {
                    conversation_id: conversation.clone(),
                })
                .await
                .map_err(|s| CliError::conversation_status(s, &conversation))?
                .into_inner();
            if ctx.json {
                let list: Vec<Value> = response.shells.iter().map(js::shell_info).collect();
                print_json(io, &Value::Array(list))?;
            } else {
                let of = Some(conversation.as_str()).filter(|c| !c.is_empty());
                shell_table(&mut io.out, &response.shells, of, now_ms())
                    .and_then(|()| io.out.flush())
                    .map_err(out_err)?;
            }
        }
        Some(ShellsCommand::Output {
            shell_id,
            follow,
            from,
        }) => shell_output(ctx, shell_id, follow, from, io).await?,
        Some(ShellsCommand::Kill { shell_id }) => {
            let response = ctx
                .client()
                .await?
                .kill_shell(pb::KillShellRequest {
                    shell_id: shell_id.clone(),
                })
                .await
                .map_err(|s| CliError::shell_status(s, &shell_id))?
                .into_inner();
            if ctx.json {
                let shell = response.shell.as_ref().map_or(Value::Null, js::shell_info);
                print_json(io, &shell)?;
            } else {
                // The full id: `shell_id` may be a prefix.
                let id = response.shell.as_ref().map_or(&shell_id, |s| &s.id);
                print_line(io, &format!("shell {id} killed"))?;
            }
        }
    }
    Ok(Exit::Ok)
}

async fn shell_output(
    ctx: &Ctx,
    shell_id: String,
    follow: bool,
    from: u64,
    io: &mut Io,
) -> Result<(), CliError> {
    let mut stream = ctx
        .client()
        .await?
        .read_shell_output(pb::ReadShellOutputRequest {
            shell_id: shell_id.clone(),
            offset: from,
            follow,
        })
        .await
        .map_err(|s| CliError::shell_status(s, &shell_id))?
        .into_inner();
    loop {
        let chunk = match stream.message().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok(()),
            Err(status) => return Err(CliError::shell_status(status, &shell_id)),
        };
        if ctx.json {
            print_json(io, &js::shell_output(&chunk))?;
            continue;
        }
        io.out
            .write_all(&chunk.data)
            .and_then(|()| io.out.flush())
            .map_err(out_err)?;
        if let Some(shell) = &chunk.finished {
            let status = match pb::ShellStatus::try_from(shell.status) {
                Ok(pb::ShellStatus::Exited) => format!("exited ({})", shell.exit_code),
                Ok(pb::ShellStatus::Killed) => "killed".to_string(),
                Ok(pb::ShellStatus::Lost) => "lost".to_string(),
                Ok(pb::ShellStatus::Running) => "running".to_string(),
                Ok(pb::ShellStatus::Unspecified) | Err(_) => "ended".to_string(),
            };
            writeln!(io.err, "shell {}: {status}", shell.id)
                .and_then(|()| io.err.flush())
                .map_err(out_err)?;
        }
    }
}

async fn export(ctx: &Ctx, ids: Vec<String>, io: &mut Io) -> Result<Exit, CliError> {
    let map_status = |status: tonic::Status| match ids.as_slice() {
        [one] => CliError::conversation_status(status, one),
        _ => CliError::status(status),
    };
    let mut stream = ctx
        .client()
        .await?
        .export_conversations(pb::ExportConversationsRequest {
            conversation_ids: ids.clone(),
        })
        .await
        .map_err(map_status)?
        .into_inner();
    while let Some(exported) = stream.message().await.map_err(map_status)? {
        print_json(io, &js::exported_conversation(&exported))?;
    }
    Ok(Exit::Ok)
}

/// Parses `agent export` output: one conversation per non-blank line.
pub fn parse_export(text: &str) -> Result<Vec<pb::ExportedConversation>, CliError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            let value: Value = serde_json::from_str(line)
                .map_err(|e| CliError::Input(format!("line {}: not JSON: {e}", n + 1)))?;
            js::read_exported_conversation(&value)
                .map_err(|e| CliError::Input(format!("line {}: {e}", n + 1)))
        })
        .collect()
}

async fn import(ctx: &Ctx, file: Option<PathBuf>, io: &mut Io) -> Result<Exit, CliError> {
    let text = match file.as_deref() {
        None => io.input.read_to_string().await,
        Some(path) if path == Path::new("-") => io.input.read_to_string().await,
        Some(path) => std::fs::read_to_string(path),
    };
    let name = file
        .as_ref()
        .map_or("stdin".to_string(), |f| f.display().to_string());
    let text = text.map_err(|e| CliError::io(format!("reading {name}"), e))?;
    let conversations = parse_export(&text).map_err(|e| CliError::Input(format!("{name}: {e}")))?;
    if conversations.is_empty() {
        // An empty backup (from a daemon with nothing in it) restores nothing.
        return report_import(ctx, io, &pb::ImportConversationsResponse::default());
    }
    let response = ctx
        .client()
        .await?
        .import_conversations(futures::stream::iter(conversations))
        .await
        .map_err(CliError::status)?
        .into_inner();
    report_import(ctx, io, &response)
}

fn report_import(
    ctx: &Ctx,
    io: &mut Io,
    response: &pb::ImportConversationsResponse,
) -> Result<Exit, CliError> {
    let (imported, skipped) = (response.imported, &response.skipped_ids);
    if ctx.json {
        print_json(
            io,
            &json!({"imported": imported, "skipped_ids": skipped, "notices": response.notices}),
        )?;
    } else {
        let plural = if imported == 1 { "" } else { "s" };
        print_line(io, &format!("imported {imported} conversation{plural}"))?;
        if !skipped.is_empty() {
            print_line(
                io,
                &format!("skipped (already present): {}", skipped.join(", ")),
            )?;
        }
        for notice in &response.notices {
            print_line(io, notice)?;
        }
    }
    Ok(Exit::Ok)
}

/// `--mcp NAME=COMMAND [ARGS…]` (split as a shell would) or `--mcp NAME=URL`.
pub(crate) fn mcp_server_arg(arg: &str) -> Result<pb::McpServer, CliError> {
    let bad = |why: &str| CliError::Input(format!("--mcp {arg:?}: {why}"));
    let Some((name, rest)) = arg.split_once('=') else {
        return Err(bad("expected NAME=COMMAND or NAME=URL"));
    };
    let name = name.trim();
    let rest = rest.trim();
    if name.is_empty() || rest.is_empty() {
        return Err(bad("expected NAME=COMMAND or NAME=URL"));
    }
    if rest.starts_with("http://") || rest.starts_with("https://") {
        return Ok(pb::McpServer {
            name: name.to_string(),
            url: rest.to_string(),
            ..Default::default()
        });
    }
    let words = shlex::split(rest).ok_or_else(|| bad("unbalanced quotes in the command"))?;
    let Some((command, args)) = words.split_first() else {
        return Err(bad("empty command"));
    };
    Ok(pb::McpServer {
        name: name.to_string(),
        command: command.clone(),
        args: args.to_vec(),
        ..Default::default()
    })
}

/// `agent mcp ls`.
async fn mcp_ls(ctx: &Ctx, io: &mut Io) -> Result<Exit, CliError> {
    let mut client = ctx.client().await?;
    let response = client
        .list_mcp_servers(pb::ListMcpServersRequest {})
        .await
        .map_err(CliError::status)?
        .into_inner();
    if ctx.json {
        let servers: Vec<serde_json::Value> = response
            .servers
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "transport": s.transport,
                    "target": s.target,
                    "cwd": s.cwd,
                    "state": s.state,
                    "restarts": s.restarts,
                    "last_error": s.last_error,
                    "pid": s.pid,
                    "trusted": s.trusted,
                    "source": s.source,
                    "tools": s.tools.iter().map(|t| json!({
                        "name": t.name,
                        "description": t.description,
                        "read_only": t.read_only,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        print_json(io, &json!({ "servers": servers }))?;
        return Ok(Exit::Ok);
    }
    if response.servers.is_empty() {
        print_line(
            io,
            "no MCP servers (configure [mcp.servers.NAME], or agent run --mcp NAME=COMMAND)",
        )?;
        return Ok(Exit::Ok);
    }
    for s in &response.servers {
        let mut head = format!("{}  {}  {}  {}", s.name, s.state, s.transport, s.target);
        if s.restarts > 0 {
            head.push_str(&format!("  restarts: {}", s.restarts));
        }
        if s.pid != 0 {
            head.push_str(&format!("  pid {}", s.pid));
        }
        if s.trusted {
            head.push_str("  trusted");
        }
        if s.source != "config" {
            head.push_str(&format!("  ({})", s.source));
        }
        print_line(io, &head)?;
        if !s.cwd.is_empty() {
            print_line(io, &format!("  cwd: {}", s.cwd))?;
        }
        if !s.last_error.is_empty() {
            print_line(io, &format!("  last error: {}", s.last_error))?;
        }
        for t in &s.tools {
            let ro = if t.read_only { " (read-only)" } else { "" };
            let desc = t.description.lines().next().unwrap_or("");
            print_line(io, &format!("  {}{ro}  {desc}", t.name))?;
        }
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests;

/// `agent trust [DIR]`, `agent trust --list`, `agent untrust [DIR]`: `dir`
/// `None` lists; `Some(None)` is the current directory.
async fn trust(
    ctx: &Ctx,
    dir: Option<Option<PathBuf>>,
    trusted: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let mut client = ctx.client().await?;
    let (response, path) = match dir {
        None => (
            client
                .list_trusted_directories(pb::ListTrustedDirectoriesRequest {})
                .await
                .map_err(CliError::status)?
                .into_inner(),
            None,
        ),
        Some(dir) => {
            let dir = dir.unwrap_or_else(|| PathBuf::from("."));
            // The daemon runs elsewhere: the path goes absolute.
            let path = std::path::absolute(&dir)
                .map_err(|e| CliError::io("reading the current directory", e))?;
            let path = std::fs::canonicalize(&path).unwrap_or(path);
            let response = client
                .set_directory_trust(pb::SetDirectoryTrustRequest {
                    path: path.display().to_string(),
                    trusted,
                })
                .await
                .map_err(CliError::status)?
                .into_inner();
            (response, Some(path))
        }
    };
    if ctx.json {
        let value = serde_json::json!({"paths": response.paths, "changed": response.changed});
        print_json(io, &value)?;
        return Ok(Exit::Ok);
    }
    match path {
        None if response.paths.is_empty() => print_line(io, "no trusted directories")?,
        None => {
            for p in &response.paths {
                print_line(io, p)?;
            }
        }
        Some(path) => {
            let what = match (trusted, response.changed) {
                (true, true) => "trusted: its projects' hooks run",
                (true, false) => "already trusted",
                (false, true) => "no longer trusted: its projects' hooks do not run",
                (false, false) => "was not trusted",
            };
            print_line(io, &format!("{}: {what}", path.display()))?;
        }
    }
    Ok(Exit::Ok)
}
