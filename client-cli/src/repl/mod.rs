//! `agent` with no subcommand: the interactive session.
//!
//! A new conversation in the current directory (created when the first
//! message is typed, so an idle session leaves nothing behind), the
//! newest one of this directory (`-c`), or one picked from a list (`-r`).
//! The live part is the same [`crate::session`] as `agent attach`, fed by
//! the terminal thread of [`term`] instead of stdin: a line editor with
//! history per directory, one-key permission answers, and the status
//! line of [`status`] above the input.

pub mod complete;
pub mod prompts;
pub mod status;
pub mod term;

use std::io::Write;
use std::ops::ControlFlow::{self, Break, Continue};
use std::path::{Path, PathBuf};

use agent_proto::v1 as pb;

use crate::cli::{Mode, NewArgs};
use crate::commands::{Ctx, absolute_dir, client_name, create_conversation};
use crate::error::{CliError, Exit};
use crate::io::{Input, Interrupts, Io};
use crate::render::{format_age, one_line, shorten_home};
use crate::session::{Outcome, SessionConfig, SessionKind, session_outcome};
use crate::slash_command::{SlashCommand, Unknown};
use term::Terminal;

/// How the session starts.
#[derive(Debug, Default)]
pub struct Start {
    /// `-c`: the newest conversation of this directory.
    pub continue_last: bool,
    /// `-r`: pick one from a list.
    pub resume: bool,
    /// `agent "PROMPT"`: the first message of a new conversation.
    pub prompt: Option<String>,
    /// Model, mode and rules of a new conversation.
    pub new: NewArgs,
}

/// What `/init` sends.
pub const INIT_PROMPT: &str = "Look through this repository and write (or improve) an AGENTS.md at its \
root for agents that work on it: what the project is, how it is laid out, the commands that \
build, test, lint and run it, and the conventions its code follows. Keep it short and concrete; \
read the existing README, build files and CI configuration rather than guessing.";

/// The prompt files this session offers as slash commands (read afresh,
/// so an edit shows at once).
pub fn prompt_commands() -> Vec<prompts::PromptCommand> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let user = crate::credentials::config_dir(&|k| std::env::var(k).ok());
    let reserved: Vec<&str> = SlashCommand::reserved().collect();
    prompts::load(&prompts::directories(user.as_deref(), &cwd), &reserved)
}

/// The note of a line like `# always run cargo fmt`: one line starting
/// with `# ` (a heading of more `#`, or several lines, is a message).
pub fn memory_line(line: &str) -> Option<&str> {
    let line = line.trim();
    if line.contains('\n') {
        return None;
    }
    line.strip_prefix("# ")
        .map(str::trim)
        .filter(|note| !note.is_empty())
}

/// Appends `note` as a list item to the AGENTS.md of the project (the
/// nearest `.git` above the current directory, else the directory itself),
/// creating it; returns the file.
pub fn remember(note: &str) -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let root = cwd
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(&cwd);
    let file = root.join("AGENTS.md");
    let existing = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    };
    let mut add = String::new();
    if !existing.is_empty() && !existing.ends_with('\n') {
        add.push('\n');
    }
    add.push_str(&format!("- {note}\n"));
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    out.write_all(add.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(file)
}

/// Conversations `-r` offers.
const PICK_LIMIT: usize = 20;

/// Runs the interactive session until the person leaves.
pub(crate) async fn interactive(ctx: &Ctx, start: Start, io: &mut Io) -> Result<Exit, CliError> {
    if !io.tty {
        return Err(CliError::Input(
            "the interactive session needs a terminal; in scripts use `agent run PROMPT`, \
             `agent send ID TEXT` or `agent attach ID`"
                .to_string(),
        ));
    }
    let dir = std::env::current_dir().map_err(|e| CliError::io("current directory", e))?;
    let cwd = absolute_dir(&dir, "working directory")?;
    let mut client = ctx.client().await?;
    let mut first_prompt = start.prompt.clone().filter(|p| !p.trim().is_empty());
    // What `/mode` and `/model` set before the first message.
    let mut new = start.new.clone();

    let (terminal, mut ui_io) = take_terminal(history_file(&cwd), io);
    let link = terminal.link();
    let mut last_id = None;
    let result = async {
        let mut target = if start.continue_last {
            Some(newest_here(&mut client, &cwd).await?.ok_or_else(|| {
                CliError::Input(format!(
                    "no conversation in {} yet; `agent` starts one",
                    shorten_home(&cwd)
                ))
            })?)
        } else if start.resume {
            match pick(&mut client, &cwd, &mut ui_io).await? {
                Some(id) => Some(id),
                None => return Ok(Exit::Ok),
            }
        } else {
            None
        };
        say(
            &mut ui_io,
            &format!(
                "agent · {} · /help for commands, Ctrl-D to leave",
                shorten_home(&cwd)
            ),
        )?;
        loop {
            let (id, sent_prompt) = match target.take() {
                Some(id) => (id, None),
                None => {
                    match start_conversation(ctx, &cwd, &mut first_prompt, &mut new, &mut ui_io)
                        .await?
                    {
                        Some((id, prompt)) => (id, Some(prompt)),
                        None => return Ok(Exit::Ok),
                    }
                }
            };
            last_id = Some(id.clone());
            link.status(|s| *s = status::Status::default());
            let config = SessionConfig {
                kind: SessionKind::Interactive,
                conversation_id: id,
                socket: ctx.socket.clone(),
                yes: false,
                json: false,
                client_name: client_name(),
                view_only: false,
                sent_prompt,
                create: None,
            };
            // Each session on a fresh connection, as the person may stay
            // for hours: the one opened before may be broken by now (a
            // session reconnects on its own connection when the daemon
            // restarts, and this one would fail its next call).
            let client = ctx.reconnect().await?;
            let (outcome, left) =
                session_outcome(client, config, &mut ui_io, Some(link.clone())).await?;
            match outcome {
                Outcome::Switch(None) => {
                    say_cleared(&mut ui_io, last_id.as_deref())?;
                    target = None;
                }
                Outcome::Switch(next) => target = next,
                _ => return left,
            }
        }
    }
    .await;
    drop(ui_io);
    terminal.stop();
    if let Some(id) = last_id {
        let short: String = id.chars().take(10).collect();
        let _ = writeln!(
            io.err,
            "The conversation stays in the daemon: `agent -c` here, or `agent attach {short}`."
        );
    }
    result
}

/// A new conversation in `cwd`, started with the prompt given on the
/// command line, else the first message typed (`None`: the person left
/// before typing one): its id and that prompt.
async fn start_conversation(
    ctx: &Ctx,
    cwd: &str,
    first_prompt: &mut Option<String>,
    new: &mut NewArgs,
    ui_io: &mut Io,
) -> Result<Option<(String, String)>, CliError> {
    let prompt = match first_prompt.take() {
        Some(prompt) => {
            say(ui_io, &format!("› {prompt}"))?;
            prompt
        }
        None => match first_message(ui_io, new).await? {
            Some(prompt) => prompt,
            None => return Ok(None),
        },
    };
    let request = pb::CreateConversationRequest {
        cwd: cwd.to_string(),
        model: new.model.clone().unwrap_or_default(),
        prompt,
        mode: new.mode.map_or(0, |m| m.to_proto() as i32),
        allow_rules: new.allow.clone(),
        additional_dirs: new
            .add_dirs
            .iter()
            .map(|d| absolute_dir(d, "directory"))
            .collect::<Result<Vec<_>, _>>()?,
        mcp_servers: Vec::new(),
        client_request_id: crate::commands::request_id(),
        images: Vec::new(),
        environment: crate::environment::here(),
        thinking: new.think.choice().map_err(CliError::Input)?,
    };
    let prompt = request.prompt.clone();
    let created = create_conversation(ctx, request).await?;
    say(ui_io, &format!("conversation {}", created.id))?;
    Ok(Some((created.id, prompt)))
}

/// Starts the terminal thread and the `Io` that reads and writes through
/// it.
fn take_terminal(history: Option<PathBuf>, io: &Io) -> (Terminal, Io) {
    let (terminal, channels) = Terminal::start(history, io.color);
    spawn_sigint_forwarder(channels.interrupt_sender.clone());
    let ui_io = Io {
        out: Box::new(terminal.writer()),
        err: Box::new(terminal.writer()),
        color: io.color,
        width: io.width,
        truecolor: io.truecolor,
        input: Input::channel(channels.lines, true),
        interrupts: Interrupts::channel(channels.interrupts),
        tty: false,
    };
    (terminal, ui_io)
}

/// `agent run` and `agent attach` on a terminal: the same session, with the
/// interactive terminal's one-key answers, spinner and line editor (what
/// is typed is queued for the agent). `attach` behaves as the interactive
/// session on that conversation.
pub(crate) async fn on_terminal(
    client: crate::Client,
    mut config: SessionConfig,
    io: &mut Io,
) -> Result<Exit, CliError> {
    if config.kind == SessionKind::Attach {
        config.kind = SessionKind::Interactive;
    }
    let (terminal, mut ui_io) = take_terminal(None, io);
    let link = terminal.link();
    let ended = session_outcome(client, config, &mut ui_io, Some(link)).await;
    drop(ui_io);
    terminal.stop();
    let (outcome, detached) = ended?;
    crate::session::exit_status(outcome, detached)
}

/// Prints one line through the session's output.
/// After `/clear`, which shows nothing else: what happened, and how to get
/// back to the conversation left.
fn say_cleared(io: &mut Io, left: Option<&str>) -> Result<(), CliError> {
    say(io, "New conversation: your next message starts it.")?;
    let short: String = left.unwrap_or_default().chars().take(10).collect();
    say(io, &format!("(the last one stays: `agent attach {short}`)"))
}

fn say(io: &mut Io, text: &str) -> Result<(), CliError> {
    writeln!(io.out, "{text}").map_err(|e| CliError::io("writing output", e))
}

/// Waits for the first message of a new conversation; None: the person left.
/// `/mode` and `/model` before it choose those of the conversation it
/// starts.
async fn first_message(io: &mut Io, new: &mut NewArgs) -> Result<Option<String>, CliError> {
    loop {
        let Some(line) = io.input.next_line().await else {
            return Ok(None);
        };
        let text = line.trim();
        let Some(typed) = text.strip_prefix('/') else {
            if let Some(note) = memory_line(text) {
                match remember(note) {
                    Ok(file) => say(
                        io,
                        &format!("noted in {}", shorten_home(&file.display().to_string())),
                    )?,
                    Err(e) => say(io, &e)?,
                }
                continue;
            }
            if text.is_empty() {
                continue;
            }
            return Ok(Some(text.to_string()));
        };
        let next = match SlashCommand::parse(typed) {
            Ok((command, arg)) => before_conversation(io, new, command, arg, typed)?,
            Err(Unknown { name, args }) => {
                match prompt_commands().into_iter().find(|c| c.name == name) {
                    Some(command) => Break(Some(command.expand(args).trim().to_string())),
                    None => {
                        say(io, &no_conversation_yet(name))?;
                        Continue(())
                    }
                }
            }
        };
        if let Break(first) = next {
            return Ok(first);
        }
    }
}

/// A slash command typed before the conversation exists: Break with the
/// first message (None: the person left), or Continue to the next line.
fn before_conversation(
    io: &mut Io,
    new: &mut NewArgs,
    command: SlashCommand,
    arg: &str,
    typed: &str,
) -> Result<ControlFlow<Option<String>>, CliError> {
    match command {
        SlashCommand::Exit => return Ok(Break(None)),
        SlashCommand::Init => return Ok(Break(Some(INIT_PROMPT.to_string()))),
        SlashCommand::Mode if arg.is_empty() => say(
            io,
            &format!(
                "mode: {}; /mode {} sets the mode the conversation starts in",
                new.mode
                    .map_or_else(|| "the daemon's default".to_string(), Mode::name),
                Mode::names().join("|")
            ),
        )?,
        SlashCommand::Mode => match Mode::parse(arg) {
            Ok(mode) => {
                new.mode = Some(mode);
                say(
                    io,
                    &format!("the conversation will start in mode {}", mode.name()),
                )?;
            }
            Err(e) => say(io, &e)?,
        },
        SlashCommand::Model if arg.is_empty() => say(
            io,
            &format!(
                "model: {}; /model NAME sets the model the conversation starts with",
                new.model.as_deref().unwrap_or("the daemon's default")
            ),
        )?,
        SlashCommand::Model => {
            new.model = Some(arg.to_string());
            say(io, &format!("the conversation will start with model {arg}"))?;
        }
        SlashCommand::Think => match crate::think::parse(arg) {
            Ok(choice) => {
                let now = crate::think::describe(Some(&choice));
                new.think = crate::think::ThinkArgs {
                    think: Some(arg.to_string()),
                    effort: None,
                };
                say(io, &format!("the first message's thinking: {now}"))?;
            }
            Err(e) => say(io, &e)?,
        },
        SlashCommand::AddDir if arg.is_empty() => say(io, "which directory? /add-dir DIR")?,
        SlashCommand::AddDir => match crate::commands::typed_dir(arg) {
            Ok(dir) => {
                say(
                    io,
                    &format!("the conversation's tools will also reach {dir}"),
                )?;
                new.add_dirs.push(PathBuf::from(dir));
            }
            Err(e) => say(io, &e.to_string())?,
        },
        SlashCommand::Help => say(
            io,
            "Type what the agent should do and press Enter (Alt-Enter or a trailing \\ \
             for a new line). The conversation starts with your first message. \
             Ctrl-D leaves.",
        )?,
        // The others act on a conversation, as a new command will by
        // default (so adding one needs no arm here); said by the name
        // typed, an alias too.
        _ => say(
            io,
            &no_conversation_yet(crate::slash_command::split(typed).0),
        )?,
    }
    Ok(Continue(()))
}

/// What a command that needs a conversation says before there is one.
fn no_conversation_yet(name: &str) -> String {
    format!("/{name}: there is no conversation yet; type your first message")
}

/// The newest conversation whose working directory is `cwd`.
async fn newest_here(client: &mut crate::Client, cwd: &str) -> Result<Option<String>, CliError> {
    Ok(conversations(client)
        .await?
        .into_iter()
        .find(|c| c.cwd == cwd)
        .map(|c| c.id))
}

/// Every conversation, newest first (the daemon lists them in that order).
async fn conversations(
    client: &mut crate::Client,
) -> Result<Vec<pb::ConversationSummary>, CliError> {
    let response = client
        .list_conversations(pb::ListConversationsRequest {
            limit: 0,
            before_id: String::new(),
            archived: false,
        })
        .await
        .map_err(CliError::status)?;
    Ok(response.into_inner().conversations)
}

/// `-r`: lists this directory's conversations (then the others) and reads
/// the number of one. None: nothing to pick, or the person typed nothing.
async fn pick(
    client: &mut crate::Client,
    cwd: &str,
    io: &mut Io,
) -> Result<Option<String>, CliError> {
    let all = conversations(client).await?;
    let (mut here, others): (Vec<_>, Vec<_>) = all.into_iter().partition(|c| c.cwd == cwd);
    here.extend(others);
    here.truncate(PICK_LIMIT);
    if here.is_empty() {
        say(io, "no conversations yet; `agent` starts one")?;
        return Ok(None);
    }
    let now = crate::commands::now_ms();
    let mut listing = String::new();
    for (i, c) in here.iter().enumerate() {
        let short: String = c.id.chars().take(10).collect();
        let place = if c.cwd == cwd {
            String::new()
        } else {
            format!("  ({})", shorten_home(&c.cwd))
        };
        listing.push_str(&format!(
            "{:>3}. {short}  {:>4} ago  {}{place}\n",
            i + 1,
            format_age(now - c.updated_at_ms),
            one_line(&c.title, 60)
        ));
    }
    writeln!(
        io.out,
        "{listing}Which one? Type its number (Enter for 1, Ctrl-D for none)."
    )
    .map_err(|e| CliError::io("writing output", e))?;
    let Some(answer) = io.input.next_line().await else {
        return Ok(None);
    };
    let answer = answer.trim();
    let index = if answer.is_empty() {
        1
    } else {
        answer
            .parse::<usize>()
            .map_err(|_| CliError::Input(format!("`{answer}` is not a number from the list")))?
    };
    here.get(index.wrapping_sub(1))
        .map(|c| Some(c.id.clone()))
        .ok_or_else(|| CliError::Input(format!("there is no number {index} in the list")))
}

/// Lets a SIGINT that arrives while the terminal is not in raw mode count
/// as a Ctrl-C key (without this it would end the process).
fn spawn_sigint_forwarder(sender: tokio::sync::mpsc::Sender<()>) {
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if sender.send(()).await.is_err() {
                break;
            }
        }
    });
}

/// Where the lines typed in `cwd` are remembered:
/// `$XDG_STATE_HOME/agentd/history/` (else `~/.local/state/agentd/history/`),
/// one file per directory. None when there is no such place (no history).
fn history_file(cwd: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })?;
    let dir = base.join("agentd").join("history");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join(history_name(cwd)))
}

/// A file name for a directory's history: its last component (readable)
/// and a hash of the whole path (unique), e.g. `agentd-9f3c…`.
fn history_name(cwd: &str) -> String {
    let base: String = Path::new(cwd)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("root")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(40)
        .collect();
    // FNV-1a: stable across Rust versions, unlike the std hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in cwd.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{base}-{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before the first message only `/mode`, `/model`, `/add-dir`, `/init`,
    /// `/help` and `/exit` mean something; the others (aliases too) say
    /// there is no conversation yet, by the name typed.
    #[tokio::test]
    async fn before_the_first_message_the_commands_answer_as_they_always_did() {
        let (lines, lines_rx) = tokio::sync::mpsc::channel(16);
        let (_presses, presses_rx) = tokio::sync::mpsc::channel(1);
        let (mut io, captured) = Io::captured(lines_rx, true, presses_rx);
        for line in [
            "/?",
            "/cost",
            "/usage now",
            "/nosuch",
            "/mode",
            "/mode plan",
            "/model m2",
            "/add-dir",
            "/ init  ",
            "/init",
        ] {
            lines.send(line.to_string()).await.unwrap();
        }
        let mut new = NewArgs::default();
        let first = first_message(&mut io, &mut new).await.unwrap();
        assert_eq!(first.as_deref(), Some(INIT_PROMPT));
        assert_eq!(new.mode, Some(Mode::Plan));
        assert_eq!(new.model.as_deref(), Some("m2"));
        assert_eq!(
            captured.out.text(),
            "Type what the agent should do and press Enter (Alt-Enter or a trailing \\ for a new \
             line). The conversation starts with your first message. Ctrl-D leaves.
/cost: there is no conversation yet; type your first message
/usage: there is no conversation yet; type your first message
/nosuch: there is no conversation yet; type your first message
mode: the daemon's default; /mode read_only|default|accept_edits|plan|bypass|auto sets the mode the conversation starts in
the conversation will start in mode plan
the conversation will start with model m2
which directory? /add-dir DIR
/: there is no conversation yet; type your first message
"
        );
        lines.send("/quit".to_string()).await.unwrap();
        assert_eq!(first_message(&mut io, &mut new).await.unwrap(), None);
    }

    #[test]
    fn each_directory_has_its_own_history_file() {
        let a = history_name("/home/me/proj");
        assert!(a.starts_with("proj-"), "{a}");
        assert_eq!(a, history_name("/home/me/proj"));
        assert_ne!(a, history_name("/home/you/proj"));
        assert!(history_name("/").starts_with("root-"));
        let odd = history_name("/tmp/a b/../ü*?");
        assert!(
            odd.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "{odd}"
        );
    }
}
