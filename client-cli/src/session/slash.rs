//! Interactive: what the slash commands typed in the session (`/mode`,
//! `/rewind`, `/budget`, …) do, each a request to the daemon or a note.
//! Their names, help and parser are [`crate::slash_command`]'s.

use agent_proto::v1 as pb;

use super::input::unquote;
use super::{Outcome, Session};
use crate::error::CliError;
use crate::render::mode_name;
use crate::repl::term::UiLink;
use crate::slash_command::{SlashCommand, Unknown};

impl Session<'_> {
    /// Interactive: a line starting with `/`; `typed` is what follows it.
    pub(super) async fn slash(&mut self, typed: &str) -> Result<Option<Outcome>, CliError> {
        let (command, arg) = match SlashCommand::parse(typed) {
            Ok(found) => found,
            Err(unknown) => {
                self.prompt_file(unknown).await?;
                return Ok(None);
            }
        };
        match command {
            SlashCommand::Image if arg.is_empty() => {
                self.note("usage: /image PATH (attaches it to your next message)")?;
            }
            SlashCommand::Image => {
                let path = unquote(arg);
                self.attach_image(std::path::Path::new(&path))?;
            }
            SlashCommand::Help => self.slash_help()?,
            SlashCommand::Exit => return Ok(Some(Outcome::Detached)),
            SlashCommand::Expand => self
                .render
                .expand_last()
                .map_err(|e| CliError::io("writing output", e))?,
            SlashCommand::Clear => return Ok(Some(Outcome::Switch(None))),
            SlashCommand::Attach if arg.is_empty() => {
                self.show_error("which conversation? /attach ID (agent ls lists them)")?;
            }
            SlashCommand::Attach => return self.slash_attach(arg).await,
            SlashCommand::Mode => self.slash_mode(arg).await?,
            SlashCommand::Model => self.slash_model(arg).await?,
            SlashCommand::Think => self.slash_think(arg)?,
            SlashCommand::AddDir if arg.is_empty() => {
                self.show_error("which directory? /add-dir DIR")?;
            }
            SlashCommand::AddDir => match crate::commands::typed_dir(arg) {
                Ok(dir) => self.update_settings(None, None, vec![dir]).await?,
                Err(e) => self.show_error(&e.to_string())?,
            },
            SlashCommand::Env => self.slash_env().await?,
            SlashCommand::Cost => self.slash_cost()?,
            SlashCommand::Budget => self.slash_budget(arg).await?,
            SlashCommand::Compact => self.slash_compact().await?,
            SlashCommand::Continue => return self.slash_continue().await,
            SlashCommand::Rewind => return self.slash_rewind(arg).await,
            SlashCommand::Shells => self.slash_shells().await?,
            SlashCommand::Init => self.send_text(crate::repl::INIT_PROMPT).await,
        }
        Ok(None)
    }

    /// `/think`: the thinking of the messages typed from now on, or what
    /// it is.
    fn slash_think(&mut self, arg: &str) -> Result<(), CliError> {
        if arg.is_empty() {
            let now = crate::think::describe(self.outbox.thinking.as_ref());
            return self.note(&format!(
                "thinking: {now}; /think on, off, a token budget, low, medium, high or default changes it"
            ));
        }
        if arg.eq_ignore_ascii_case("default") {
            self.outbox.thinking = None;
        } else {
            match crate::think::parse(arg) {
                Ok(choice) => self.outbox.thinking = Some(choice),
                Err(e) => return self.show_error(&e),
            }
        }
        let now = crate::think::describe(self.outbox.thinking.as_ref());
        self.note(&format!("thinking for your next messages: {now}"))
    }

    /// A name that is no command: the person's prompt file of that name,
    /// else an error.
    async fn prompt_file(&mut self, unknown: Unknown<'_>) -> Result<(), CliError> {
        let Unknown { name, args } = unknown;
        match crate::repl::prompt_commands()
            .into_iter()
            .find(|c| c.name == name)
        {
            Some(command) => self.send_text(command.expand(args).trim()).await,
            None => self.show_error(&format!(
                "unknown command /{name}; /help lists the commands"
            ))?,
        }
        Ok(())
    }

    /// `/help`: how the session works, its commands and the person's own
    /// prompt files.
    fn slash_help(&mut self) -> Result<(), CliError> {
        for line in SLASH_HELP {
            self.note(line)?;
        }
        for &c in SlashCommand::ALL {
            self.note(&format!("  {:<16} {}", c.synopsis(), c.help()))?;
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

    /// `/mode` shows the mode; `/mode MODE` changes it.
    async fn slash_mode(&mut self, arg: &str) -> Result<(), CliError> {
        if arg.is_empty() {
            let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
            return self.note(&format!(
                "mode: {}; /mode {} changes it",
                status.mode,
                crate::cli::Mode::names().join("|")
            ));
        }
        match crate::cli::Mode::parse(arg) {
            Ok(mode) => self.update_settings(Some(mode), None, Vec::new()).await,
            Err(e) => self.show_error(&e),
        }
    }

    /// `/model` shows the model; `/model NAME` changes it.
    async fn slash_model(&mut self, arg: &str) -> Result<(), CliError> {
        if arg.is_empty() {
            let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
            return self.note(&format!(
                "model: {} ({} tokens of context); /model NAME changes it",
                status.model, status.context_window
            ));
        }
        self.update_settings(None, Some(arg), Vec::new()).await
    }

    /// `/compact`: the daemon summarises and ends the conversation (its
    /// events say so).
    async fn slash_compact(&mut self) -> Result<(), CliError> {
        let request = pb::CompactConversationRequest {
            conversation_id: self.config.conversation_id.clone(),
        };
        if let Err(status) = self.client.compact_conversation(request).await {
            self.show_error(&format!("cannot compact: {}", status.message()))?;
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
            ..Default::default()
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
    /// `/env`: the conversation's commands run in this terminal's
    /// environment as it is now.
    async fn slash_env(&mut self) -> Result<(), CliError> {
        let Some(environment) = crate::environment::here() else {
            return self.show_error(
                "/env: only a client on the daemon's own machine sends its environment",
            );
        };
        let n = environment.vars.len();
        let request = pb::UpdateConversationRequest {
            conversation_id: self.config.conversation_id.clone(),
            client_name: self.config.client_name.clone(),
            environment: Some(environment),
            ..Default::default()
        };
        match self.client.update_conversation(request).await {
            Ok(_) => self.note(&format!(
                "the next commands run in this terminal's environment ({n} variables)"
            )),
            Err(status) => self.show_error(status.message()),
        }
    }

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
            environment: None,
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
