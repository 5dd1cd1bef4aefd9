//! Interactive: the slash commands typed in the session (`/mode`,
//! `/rewind`, `/budget`, …), each a request to the daemon or a note, and
//! their table for `/help` and Tab.

use agent_proto::v1 as pb;

use super::input::unquote;
use super::{Outcome, Session};
use crate::error::CliError;
use crate::render::mode_name;
use crate::repl::complete::SlashCommand;
use crate::repl::term::UiLink;

impl Session<'_> {
    /// Interactive: a line starting with `/`.
    pub(super) async fn slash(&mut self, command: &str) -> Result<Option<Outcome>, CliError> {
        let (name, arg) = match command.split_once(char::is_whitespace) {
            Some((name, arg)) => (name, arg.trim()),
            None => (command, ""),
        };
        match name {
            "image" => {
                if arg.is_empty() {
                    self.note("usage: /image PATH (attaches it to your next message)")?;
                } else {
                    let path = unquote(arg);
                    self.attach_image(std::path::Path::new(&path))?;
                }
                return Ok(None);
            }
            "help" | "?" => self.slash_help()?,
            "exit" | "quit" => return Ok(Some(Outcome::Detached)),
            "expand" | "output" => self
                .render
                .expand_last()
                .map_err(|e| CliError::io("writing output", e))?,
            "clear" | "new" => return Ok(Some(Outcome::Switch(None))),
            "attach" if !arg.is_empty() => return self.slash_attach(arg).await,
            "attach" => self.show_error("which conversation? /attach ID (agent ls lists them)")?,
            "mode" if arg.is_empty() => {
                let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
                self.note(&format!(
                    "mode: {}; /mode {} changes it",
                    status.mode,
                    crate::cli::Mode::names().join("|")
                ))?;
            }
            "mode" => match crate::cli::Mode::parse(arg) {
                Ok(mode) => self.update_settings(Some(mode), None, Vec::new()).await?,
                Err(e) => self.show_error(&e)?,
            },
            "model" if arg.is_empty() => {
                let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
                self.note(&format!(
                    "model: {} ({} tokens of context); /model NAME changes it",
                    status.model, status.context_window
                ))?;
            }
            "model" => self.update_settings(None, Some(arg), Vec::new()).await?,
            "add-dir" if arg.is_empty() => {
                self.show_error("which directory? /add-dir DIR")?;
            }
            "add-dir" => match crate::commands::typed_dir(arg) {
                Ok(dir) => self.update_settings(None, None, vec![dir]).await?,
                Err(e) => self.show_error(&e.to_string())?,
            },
            "cost" | "usage" => self.slash_cost()?,
            "budget" => self.slash_budget(arg).await?,
            "compact" => {
                let request = pb::CompactConversationRequest {
                    conversation_id: self.config.conversation_id.clone(),
                };
                if let Err(status) = self.client.compact_conversation(request).await {
                    self.show_error(&format!("cannot compact: {}", status.message()))?;
                }
            }
            "continue" => return self.slash_continue().await,
            "rewind" => return self.slash_rewind(arg).await,
            "shells" => self.slash_shells().await?,
            "init" => self.send_text(crate::repl::INIT_PROMPT).await,
            other => match crate::repl::prompt_commands()
                .into_iter()
                .find(|c| c.name == other)
            {
                Some(command) => self.send_text(command.expand(arg).trim()).await,
                None => self.show_error(&format!(
                    "unknown command /{other}; /help lists the commands"
                ))?,
            },
        }
        Ok(None)
    }

    /// `/help`: how the session works, its commands and the person's own
    /// prompt files.
    fn slash_help(&mut self) -> Result<(), CliError> {
        for line in SLASH_HELP {
            self.note(line)?;
        }
        for c in SLASH_COMMANDS {
            let usage = format!("/{} {}", c.name, c.args);
            self.note(&format!("  {usage:<16} {}", c.help))?;
        }
        let custom = crate::repl::prompt_commands();
        if !custom.is_empty() {
            self.note("Your prompt files (.agentd/commands/*.md; see the README):")?;
        }
        for c in custom {
            let usage = format!("/{} …", c.name);
            self.note(&format!("  {usage:<16} {}", c.description))?;
        }
        Ok(())
    }

    /// `/attach ID`: a wrong id is said here; the session stays where it is.
    async fn slash_attach(&mut self, arg: &str) -> Result<Option<Outcome>, CliError> {
        let request = pb::GetConversationRequest {
            conversation_id: arg.to_string(),
        };
        match self.client.get_conversation(request).await {
            Ok(found) => {
                if let Some(c) = found.into_inner().conversation {
                    return Ok(Some(Outcome::Switch(Some(c.id))));
                }
                self.show_error("the daemon returned no conversation")?;
            }
            Err(status) => {
                let error = CliError::conversation_status(status, arg);
                self.show_error(&error.to_string())?;
            }
        }
        Ok(None)
    }

    /// `/cost`: the conversation's tokens and cost, as the status line knows them.
    fn slash_cost(&mut self) -> Result<(), CliError> {
        let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
        let u = status.total;
        let cost = status
            .cost_usd
            .map_or("unknown (no price for this model)".to_string(), |c| {
                format!("${c:.4}")
            });
        self.note(&format!(
            "this conversation: {} input ({} written to and {} read from the cache), {} output tokens; cost {cost}",
            u.input_tokens,
            u.cache_creation_input_tokens,
            u.cache_read_input_tokens,
            u.output_tokens
        ))
    }

    /// `/budget raise [AMOUNT]` or `/budget stop`.
    async fn slash_budget(&mut self, arg: &str) -> Result<(), CliError> {
        let (raise, raise_by) = match arg.split_whitespace().collect::<Vec<_>>()[..] {
            ["raise"] => (true, None),
            ["raise", amount] => match crate::cli::parse_amount(amount) {
                Ok(v) => (true, Some(v)),
                Err(e) => return self.show_error(&e),
            },
            ["stop"] => (false, None),
            _ => return self.show_error("/budget raise [AMOUNT] or /budget stop"),
        };
        let request = pb::AnswerBudgetRequest {
            conversation_id: self.config.conversation_id.clone(),
            raise,
            raise_by,
            client_name: self.config.client_name.clone(),
        };
        if let Err(status) = self.client.answer_budget(request).await {
            self.show_error(&format!("cannot answer the budget: {}", status.message()))?;
        }
        Ok(())
    }

    /// `/continue`: the session goes on in the new conversation.
    async fn slash_continue(&mut self) -> Result<Option<Outcome>, CliError> {
        let request = pb::ContinueConversationRequest {
            conversation_id: self.config.conversation_id.clone(),
        };
        match self.client.continue_conversation(request).await {
            Ok(r) => {
                if let Some(c) = r.into_inner().conversation {
                    return Ok(Some(Outcome::Switch(Some(c.id))));
                }
            }
            Err(status) => self.show_error(&format!("cannot continue: {}", status.message()))?,
        }
        Ok(None)
    }

    /// `/rewind [MESSAGE] [code|conversation|both] [force]`; a fork is
    /// where the session goes next.
    async fn slash_rewind(&mut self, arg: &str) -> Result<Option<Outcome>, CliError> {
        let mut request = pb::RewindRequest {
            conversation_id: self.config.conversation_id.clone(),
            ..Default::default()
        };
        for word in arg.split_whitespace() {
            match word {
                "code" => request.code = true,
                "conversation" => request.conversation = true,
                "both" => (request.code, request.conversation) = (true, true),
                "force" => request.force = true,
                n => match n.parse::<u64>() {
                    Ok(seq) if seq > 0 => request.message_seq = seq,
                    _ => {
                        self.show_error("/rewind [MESSAGE] [code|conversation|both] [force]")?;
                        return Ok(None);
                    }
                },
            }
        }
        if !request.conversation {
            request.code = true;
        }
        match self.client.rewind(request).await {
            Ok(r) => {
                let r = r.into_inner();
                // Attached clients see the events; this one is told
                // the whole answer (and goes to the fork).
                for line in crate::commands::rewind_lines(&r) {
                    self.note(&line)?;
                }
                if let Some(f) = r.forked {
                    return Ok(Some(Outcome::Switch(Some(f.id))));
                }
            }
            Err(status) => self.show_error(&format!("cannot rewind: {}", status.message()))?,
        }
        Ok(None)
    }

    /// `/shells`: the conversation's background shells as a table.
    async fn slash_shells(&mut self) -> Result<(), CliError> {
        let request = pb::ListShellsRequest {
            conversation_id: self.config.conversation_id.clone(),
        };
        match self.client.list_shells(request).await {
            Ok(response) => {
                let shells = response.into_inner().shells;
                if shells.is_empty() {
                    return self.note("no background shells");
                }
                let mut table = Vec::new();
                crate::render::shell_table(
                    &mut table,
                    &shells,
                    Some(self.config.conversation_id.as_str()),
                    crate::commands::now_ms(),
                )
                .map_err(|e| CliError::io("writing output", e))?;
                let text = String::from_utf8_lossy(&table).into_owned();
                for line in text.lines() {
                    self.note(line)?;
                }
                Ok(())
            }
            Err(status) => self.show_error(&format!("cannot list shells: {}", status.message())),
        }
    }

    /// `/mode` and `/model`: the daemon changes the conversation and tells
    /// every client (the line saying so comes with that event).
    pub(super) async fn update_settings(
        &mut self,
        mode: Option<crate::cli::Mode>,
        model: Option<&str>,
        add_dirs: Vec<String>,
    ) -> Result<(), CliError> {
        let adding = add_dirs.clone();
        let request = pb::UpdateConversationRequest {
            conversation_id: self.config.conversation_id.clone(),
            mode: mode.map_or(0, |m| m.to_proto() as i32),
            model: model.unwrap_or_default().to_string(),
            client_name: self.config.client_name.clone(),
            add_dirs,
        };
        let before = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
        match self.client.update_conversation(request).await {
            Ok(response) => {
                // An unchanged value makes no event: say so here.
                let now = response.into_inner().conversation.unwrap_or_default();
                if let Some(mode) = mode
                    && before.mode == mode.name()
                {
                    self.note(&format!("the mode is already {}", mode_name(now.mode)))?;
                }
                if let Some(model) = model
                    && before.model == model.trim()
                {
                    self.note(&format!("the model is already {}", now.model))?;
                }
                if let [dir] = adding.as_slice()
                    && (before.additional_dirs.contains(dir) || *dir == now.cwd)
                {
                    self.note(&format!("the tools already reach {dir}"))?;
                }
            }
            Err(status) => self.show_error(status.message())?,
        }
        Ok(())
    }
}

/// What `/help` prints.
const SLASH_HELP: [&str; 5] = [
    "Type a message and press Enter; Alt-Enter or a trailing \\ starts a new line.",
    "While the agent works, what you send waits for its next step (it is queued).",
    "Ctrl-C cancels the turn; Ctrl-C twice or Ctrl-D leaves (the conversation stays).",
    "A line starting with `# ` is noted in the project's AGENTS.md.",
    "Tab completes commands and paths. The commands:",
];

/// The session's slash commands, for `/help` and Tab.
pub const SLASH_COMMANDS: &[SlashCommand] = &[
    SlashCommand {
        name: "help",
        args: "",
        help: "this list",
    },
    SlashCommand {
        name: "cost",
        args: "",
        help: "tokens and cost of this conversation",
    },
    SlashCommand {
        name: "shells",
        args: "",
        help: "the background shells of this conversation",
    },
    SlashCommand {
        name: "expand",
        args: "",
        help: "the last tool result whole (also Ctrl-O)",
    },
    SlashCommand {
        name: "mode",
        args: "[MODE]",
        help: "show or change the permission mode; Shift-Tab: the next one",
    },
    SlashCommand {
        name: "model",
        args: "[NAME]",
        help: "show or change the model of the next requests",
    },
    SlashCommand {
        name: "add-dir",
        args: "DIR",
        help: "let the tools reach DIR too (as the working directory)",
    },
    SlashCommand {
        name: "init",
        args: "",
        help: "ask the agent to write an AGENTS.md for this project",
    },
    SlashCommand {
        name: "budget",
        args: "raise [AMOUNT] | stop",
        help: "answer a reached budget: raise it (default: by the budget again) or stop the turn",
    },
    SlashCommand {
        name: "image",
        args: "PATH",
        help: "attach an image (PNG, JPEG, GIF, WebP) to your next message",
    },
    SlashCommand {
        name: "compact",
        args: "",
        help: "summarise the conversation now and end it (then /continue)",
    },
    SlashCommand {
        name: "continue",
        args: "",
        help: "go on in a new conversation seeded with the summary",
    },
    SlashCommand {
        name: "rewind",
        args: "[MESSAGE] [code|conversation|both] [force]",
        help: "undo the agent's file changes since a message (default: the last), or fork before it",
    },
    SlashCommand {
        name: "attach",
        args: "ID",
        help: "go to another conversation (agent ls lists them)",
    },
    SlashCommand {
        name: "clear",
        args: "",
        help: "start a new conversation in this directory",
    },
    SlashCommand {
        name: "exit",
        args: "",
        help: "leave (the conversation stays in the daemon: agent -c)",
    },
];
