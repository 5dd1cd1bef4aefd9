//! What spawned work reports back: a model request's stream and end, a
//! tool's output and end, hooks' answers. A report of work that is no
//! longer current (cancelled, replaced) is dropped here.

use super::Actor;
use crate::hooks::{HookReport, PreToolUse, Prompt};
use crate::llm::{LlmError, StreamEvent};
use crate::runtime::error::RuntimeError;
use crate::runtime::events::EventKind;
use crate::runtime::{NewMessage, Sent};
use crate::tools::{OutputChunk, ToolOutput};
use agentd_core::{Event, Reply};

impl Actor {
    /// A piece of the model's reply: kept for snapshots, and the text and
    /// thinking shown live. A tool block that ended goes to the state
    /// machine, which may start the call before the reply ends.
    pub(super) async fn llm_streamed(&mut self, call: u64, event: StreamEvent) {
        if !self.work.is_current_llm(call) {
            return;
        }
        self.work.partial.push(&event);
        let kind = match event {
            StreamEvent::TextDelta { index, text } => EventKind::TextDelta { index, text },
            StreamEvent::ThinkingDelta { index, text } => EventKind::ThinkingDelta { index, text },
            StreamEvent::BlockEnd { index } => {
                if let Some(call) = self.work.partial.tool_call(index) {
                    let preceding = self.work.partial.tool_ids_before(index);
                    self.apply_internal(Event::ToolCallStreamed { call, preceding })
                        .await;
                }
                return;
            }
            _ => return,
        };
        self.emit(kind);
    }

    /// The model request ended; a cancelled one says nothing (the cancel
    /// took its partial reply).
    pub(super) async fn llm_done(&mut self, call: u64, result: Result<Reply, LlmError>) {
        if !self.work.finish_llm(call) {
            return;
        }
        let event = match result {
            Ok(reply) => Event::LlmCompleted { reply },
            Err(LlmError::Cancelled) => return,
            Err(e) => {
                tracing::warn!(conversation = %self.record.id, "model request failed: {e}");
                Event::LlmFailed {
                    failure: e.to_failure(),
                    jitter_permille: rand::random_range(0..1000),
                }
            }
        };
        self.apply_internal(event).await;
    }

    /// A running tool printed something.
    pub(super) fn tool_output(&mut self, call: u64, tool_use_id: String, chunk: OutputChunk) {
        if self.work.is_current_tool(call, &tool_use_id) {
            let id = tool_use_id.clone();
            let delta = EventKind::ToolOutputDelta {
                tool_use_id,
                text: chunk.text,
                skipped_bytes: chunk.skipped_bytes,
            };
            self.announce_tool(&id, delta);
        }
    }

    /// A tool ended (its post_tool_use hooks included).
    pub(super) async fn tool_done(
        &mut self,
        call: u64,
        tool_use_id: String,
        output: ToolOutput,
        duration_ms: u64,
        hooks: Vec<HookReport>,
    ) {
        self.report_hooks(hooks);
        if !self.work.finish_tool(call, &tool_use_id) {
            return;
        }
        let name = self.tool_name(&tool_use_id);
        let end = EventKind::ToolCallEnd {
            tool_use_id: tool_use_id.clone(),
            name,
            is_error: output.is_error,
            summary: output.summary.clone(),
            diff: output.diff.clone(),
            duration_ms,
            preview: output.preview.clone(),
        };
        self.announce_tool(&tool_use_id, end);
        let result = self.tool_result(tool_use_id, output);
        self.apply_internal(Event::ToolCompleted { result }).await;
    }

    /// The pre_tool_use hooks of a call answered.
    pub(super) async fn pre_hooks_done(
        &mut self,
        call: u64,
        tool_use_id: String,
        outcome: PreToolUse,
        reports: Vec<HookReport>,
    ) {
        self.report_hooks(reports);
        if self.work.finish_hooks(call) {
            self.apply_internal(Event::PreToolHooksDecided {
                tool_use_id,
                verdict: outcome.verdict,
                new_input: outcome.new_input,
            })
            .await;
        }
    }

    /// The stop hooks answered.
    pub(super) async fn stop_hooks_done(
        &mut self,
        call: u64,
        continue_with: Option<String>,
        reports: Vec<HookReport>,
    ) {
        self.report_hooks(reports);
        if self.work.finish_hooks(call) {
            self.apply_internal(Event::StopHooksDecided { continue_with })
                .await;
        }
    }

    /// The hooks before a user message answered: it is sent (with what
    /// they added) or refused.
    pub(super) async fn prompt_checked(
        &mut self,
        call: u64,
        mut message: NewMessage,
        outcome: Prompt,
    ) -> Result<Sent, RuntimeError> {
        if !self.work.finish_prompt(call) {
            return Err(RuntimeError::NotAllowed(
                "the message was cancelled while its hooks ran".to_string(),
            ));
        }
        match outcome {
            Prompt::Block(reason) => Err(RuntimeError::HookBlocked(reason)),
            Prompt::Send { context } => {
                for more in context {
                    message.text.push_str("\n\n");
                    message.text.push_str(&more);
                }
                self.send_now(message).await
            }
        }
    }
}
