//! Running a tool call: what it runs with (its context, the checkpoint of
//! the files it may change, its post_tool_use hooks), the run itself off
//! the actor, and how its output becomes the transcript's result.
//!
//! Every result and every live chunk passes the `Redactor` here, in the
//! tool's task, so no key the daemon holds reaches the transcript, the
//! model or a client, whatever a command or an MCP server printed.

use super::{Actor, Input};
use crate::hooks::{self, HookReport, Stage};
use crate::tools::{ToolContext, ToolOutput};
use agentd_core::tools::Called;
use agentd_core::{ToolCall, ToolResult};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Everything a spawned call needs, taken from the actor before it starts.
struct CallRun {
    call: ToolCall,
    background: bool,
    /// The call number the report carries.
    id: u64,
    ctx: ToolContext,
    /// The post_tool_use hooks that match it, and where they run.
    post: Vec<hooks::Hook>,
    env: hooks::Env,
    redactor: Arc<crate::tools::Redactor>,
    registry: Arc<crate::tools::Registry>,
    mcp: Arc<crate::mcp::Hub>,
    servers: Vec<crate::mcp::ServerSpec>,
    checkpoints: Arc<crate::checkpoints::Checkpoints>,
    key: crate::checkpoints::CallKey,
    tx: mpsc::UnboundedSender<Input>,
}

impl Actor {
    pub(super) fn start_tool(&mut self, call: ToolCall, background: bool) {
        let (id, cancel) = self.work.begin_tool(&call.id);
        self.announce_call(&call);
        // Without post_tool_use hooks nothing is matched (the policy's
        // paths are not resolved again).
        let post = if self.hooks.get().of(Stage::PostToolUse).next().is_some() {
            self.hooks
                .get()
                .for_call(Stage::PostToolUse, &self.context(None).policy, &call)
        } else {
            Vec::new()
        };
        let env = self.hook_env(cancel.clone());
        let mut ctx = self.tool_context(cancel);
        ctx.tool_use_id = call.id.clone();
        // The daemon's keys never leave in a result (tools/redact.rs).
        let redactor = Arc::new(crate::tools::Redactor::of_daemon(
            self.shared.daemon.credentials.as_deref(),
        ));
        if !background {
            ctx.live = Some(self.live_output(id, &call.id, redactor.clone()));
        }
        let key = crate::checkpoints::CallKey {
            conversation_id: self.record.id.clone(),
            turn: self.turn_message_seq(),
            tool_use_id: call.id.clone(),
            at_ms: self.now_ms(),
        };
        let run = CallRun {
            call,
            background,
            id,
            ctx,
            post,
            env,
            redactor,
            registry: self.shared.tools.clone(),
            mcp: self.shared.mcp.clone(),
            servers: self.mcp_servers(),
            checkpoints: self.shared.checkpoints.clone(),
            key,
            tx: self.tx.clone(),
        };
        crate::tasks::spawn("tool call", run.run());
    }

    /// Where a running call's output goes as it comes. The sink only posts
    /// to the mailbox, which never blocks; the actor drops what arrives for
    /// a call that is over.
    fn live_output(
        &self,
        id: u64,
        tool_use_id: &str,
        redactor: Arc<crate::tools::Redactor>,
    ) -> crate::tools::LiveOutput {
        let mailbox = self.tx.clone();
        let tool_use_id = tool_use_id.to_string();
        crate::tools::LiveOutput::new(move |mut chunk| {
            redactor.chunk(&mut chunk);
            let _ = mailbox.send(Input::ToolOutput {
                call: id,
                tool_use_id: tool_use_id.clone(),
                chunk,
            });
        })
    }

    pub(super) fn tool_context(&self, cancel: CancellationToken) -> ToolContext {
        let config = &self.shared.config;
        let l = &config.limits;
        ToolContext {
            cwd: self.record.cwd.clone(),
            additional_dirs: self.record.setup.additional_dirs.clone(),
            cancel,
            limits: crate::tools::ToolLimits {
                max_output_bytes: l.max_output_bytes,
                bash_default_timeout_ms: l.bash_default_timeout_ms,
                bash_max_timeout_ms: l.bash_max_timeout_ms,
                kill_grace_ms: l.kill_grace_ms,
                ..Default::default()
            },
            shells: Some(self.shared.shells.clone()),
            conversation_id: self.record.id.clone(),
            tool_use_id: String::new(),
            live: None,
            model: self.record.model.clone(),
            images: config
                .models
                .lookup(&self.record.model)
                .images
                .then(|| config.images.limits()),
            own_files: self.shared.daemon.own_files.clone(),
            launch: self.shared.environments.launch(&self.record.id),
            sandboxes: self.shared.daemon.sandboxes.clone(),
            web: crate::tools::WebAccess::new(
                self.shared.tools.page_cache(),
                &config.web,
                self.permissions.rules(),
            ),
        }
    }

    /// The MCP servers this conversation uses: the config's and its own.
    pub(super) fn mcp_servers(&self) -> Vec<crate::mcp::ServerSpec> {
        crate::mcp::servers_of(
            self.shared.mcp.config_servers(),
            &self.record.setup.mcp_servers,
        )
    }

    /// Announces a tool call, as every start of one is.
    pub(super) fn announce_call(&mut self, call: &ToolCall) {
        let begin = crate::runtime::events::EventKind::ToolCallBegin {
            tool_use_id: call.id.clone(),
            name: call.name.clone(),
            summary: crate::tools::summarize_call(&call.name, &call.input),
            input_json: call.input.to_string(),
        };
        self.announce_tool(&call.id, begin);
    }

    /// The transcript's result of a tool's `output`. Images it returned are
    /// stored first (like a user's: content-addressed, flushed by the
    /// commit that appends the result); should the store refuse them, the
    /// model is told in the text instead.
    pub(super) fn tool_result(&mut self, tool_use_id: String, output: ToolOutput) -> ToolResult {
        let mut result = ToolResult::new(tool_use_id, output.content, output.is_error);
        if output.images.is_empty() {
            return result;
        }
        match self.store_images(&output.images) {
            Ok(()) => {
                result.images = output.images.into_iter().map(|s| s.image).collect();
            }
            Err(e) => {
                tracing::error!(conversation = %self.record.id, "cannot store a tool's images: {e}");
                result
                    .content
                    .push_str(&format!("\n[the image(s) could not be kept: {e}]"));
            }
        }
        result
    }

    /// The name of the call `tool_use_id` of the run in progress (or of
    /// the reply streaming, for a call that started early).
    pub(super) fn tool_name(&self, tool_use_id: &str) -> String {
        let calls = match &self.record.conversation.state {
            agentd_core::ConvState::ToolExecuting(run) => &run.calls,
            agentd_core::ConvState::LlmRequesting { early, .. } => &early.calls,
            _ => return String::new(),
        };
        calls
            .iter()
            .find(|c| c.id == tool_use_id)
            .map(|c| c.name.clone())
            .unwrap_or_default()
    }
}

impl CallRun {
    /// Runs the call and reports its end (`ToolDone`) to the actor.
    ///
    /// What the call may change is recorded (durably) before it runs, and
    /// what it left when it ends (`agent rewind`); a command outside git,
    /// which only leaves a note that it ran untracked, as it starts.
    async fn run(self) {
        let started = Instant::now();
        let checkpoints = self.checkpoints.clone();
        let mut checkpoint = if self.background {
            None
        } else {
            let (key, name, input) = (self.key.clone(), &self.call.name, &self.call.input);
            checkpoints.before(key, name, input, &self.ctx).await
        };
        let mut output = match checkpoint.as_mut().filter(|p| p.unwritten()) {
            // A command outside git: it starts on the first poll of the
            // call, and its record is written right after.
            Some(pending) => {
                tokio::join!(biased; self.call_once(), async { checkpoints.started(pending) }).0
            }
            None => self.call_once().await,
        };
        self.redactor.output(&mut output);
        if let Some(pending) = checkpoint {
            checkpoints.after(pending).await;
        }
        let reports = self.post_hooks(&mut output).await;
        let _ = self.tx.send(Input::ToolDone {
            call: self.id,
            tool_use_id: self.call.id,
            output,
            duration_ms: started.elapsed().as_millis() as u64,
            hooks: reports,
        });
    }

    /// The call itself: a background shell, an MCP server's tool, or one
    /// of the registry's.
    async fn call_once(&self) -> ToolOutput {
        let (call, ctx) = (&self.call, &self.ctx);
        if self.background {
            crate::tools::run_as_background_shell(&call.input, ctx).await
        } else if let Called::Mcp { server, tool } = Called::of(&call.name) {
            let mut out = self
                .mcp
                .call(&self.servers, server, tool, call.input.clone(), ctx)
                .await;
            // The registry's backstop, for what a server sent.
            if out.content.len() > ctx.limits.max_output_bytes {
                out.content = crate::truncate::truncate(&out.content, ctx.limits.max_output_bytes);
            }
            out
        } else {
            self.registry.run(&call.name, call.input.clone(), ctx).await
        }
    }

    /// The tool's post_tool_use hooks are part of its run: they are
    /// stopped with it, and what they add is in its result.
    async fn post_hooks(&self, output: &mut ToolOutput) -> Vec<HookReport> {
        if self.post.is_empty() {
            return Vec::new();
        }
        let (added, reports) = hooks::post_tool_use(
            &self.post,
            &self.env,
            &self.call,
            &output.content,
            output.is_error,
        )
        .await;
        for text in added {
            output.content.push_str("\n\n");
            output.content.push_str(&text);
        }
        self.redactor.output(output);
        reports
    }
}
