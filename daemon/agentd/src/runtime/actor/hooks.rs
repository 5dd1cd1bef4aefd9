//! The conversation's hooks: which are in force (`HookSet`, read again at
//! every user message), starting them off the actor, and reporting what
//! they did.

use super::{Actor, Input};
use crate::hooks::{self, HookReport, Hooks, NotificationKind, Stage};
use crate::runtime::events::EventKind;
use agentd_core::{Event, Role, ToolCall, transition};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The hooks of this conversation: the user's, and its project's if the
/// project is trusted, as last read (at start, and again for every user
/// message, so `agent trust` and an edited hook file count from the next
/// message on).
#[derive(Default)]
pub(super) struct HookSet {
    current: Arc<Hooks>,
}

impl HookSet {
    /// The hooks in force.
    pub(super) fn get(&self) -> &Arc<Hooks> {
        &self.current
    }

    /// Replaces the hooks in force with a reading made now.
    fn set(&mut self, hooks: Hooks) {
        self.current = Arc::new(hooks);
    }
}

impl Actor {
    /// Reads the conversation's hooks again (the user's, plus the trusted
    /// project's); a project file that cannot be used is logged and kept
    /// with them, for [`Actor::tell_hooks_problem`].
    pub(super) fn load_hooks(&mut self) {
        let cfg = &self.shared.config;
        let trusted = match self.shared.store.trusted_dirs() {
            Ok(dirs) => dirs,
            Err(e) => {
                tracing::error!(conversation = %self.record.id, "cannot read trusted directories: {e}");
                Vec::new()
            }
        };
        let (mut hooks, problem) =
            Hooks::for_conversation(&cfg.hooks, cfg.hook_timeout_ms, &self.record.cwd, &trusted);
        if let Some(problem) = &problem {
            tracing::warn!(conversation = %self.record.id, "{problem}");
        }
        hooks.problem = problem;
        self.hooks.set(hooks);
    }

    /// The hooks a user message goes through before it is sent, read
    /// again for it (session_start for the first message, then
    /// user_prompt_submit). Clients are told why the project's hooks are
    /// not used, with each message they are not used for.
    pub(super) fn hooks_for_message(&mut self) -> (Vec<hooks::Hook>, Vec<hooks::Hook>) {
        self.load_hooks();
        if let Some(problem) = self.hooks.get().problem.clone() {
            self.emit(EventKind::info(problem));
        }
        let hooks = self.hooks.get();
        let session_start = if self.transcript.is_empty() {
            hooks.all_of(Stage::SessionStart)
        } else {
            Vec::new()
        };
        (session_start, hooks.all_of(Stage::UserPromptSubmit))
    }

    /// Where this conversation's hooks run, stopped by `cancel`.
    pub(super) fn hook_env(&self, cancel: CancellationToken) -> hooks::Env {
        hooks::Env {
            cwd: self.record.cwd.clone(),
            conversation_id: self.record.id.clone(),
            grace: std::time::Duration::from_millis(self.shared.config.limits.kill_grace_ms),
            cancel,
            launch: self.shared.environments.launch(&self.record.id),
            sandboxes: self.shared.daemon.sandboxes.clone(),
            writable: std::iter::once(self.record.cwd.clone())
                .chain(self.record.setup.additional_dirs.iter().cloned())
                .collect(),
        }
    }

    /// Starts the pre_tool_use hooks of `call`. Should none match any more
    /// (the hooks were read again meanwhile), the answer is "no decision",
    /// at once.
    pub(super) fn start_pre_hooks(&mut self, call: ToolCall) -> Option<agentd_core::Transition> {
        let policy = self.context(None).policy;
        let matching = self.hooks.get().for_call(Stage::PreToolUse, &policy, &call);
        if matching.is_empty() {
            let event = Event::PreToolHooksDecided {
                tool_use_id: call.id,
                verdict: agentd_core::HookVerdict::None,
                new_input: None,
            };
            return transition(
                &self.record.conversation,
                &self.context(Some(&event)),
                event,
            )
            .ok();
        }
        let (id, cancel) = self.work.begin_hooks();
        let env = self.hook_env(cancel);
        let tx = self.tx.clone();
        crate::tasks::spawn("hooks", async move {
            let (outcome, reports) = hooks::pre_tool_use(&matching, &env, &call).await;
            let _ = tx.send(Input::PreHooksDone {
                call: id,
                tool_use_id: call.id,
                outcome,
                reports,
            });
        });
        None
    }

    pub(super) fn start_stop_hooks(&mut self) {
        let matching = self.hooks.get().all_of(Stage::Stop);
        let (id, cancel) = self.work.begin_hooks();
        let env = self.hook_env(cancel);
        let last_reply = self
            .transcript
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .map(|m| m.text())
            .unwrap_or_default();
        let tx = self.tx.clone();
        crate::tasks::spawn("hooks", async move {
            let (continue_with, reports) = hooks::stop(&matching, &env, &last_reply).await;
            let _ = tx.send(Input::StopHooksDone {
                call: id,
                continue_with,
                reports,
            });
        });
    }

    /// Runs the hooks a user message goes through before it is sent
    /// (session_start for the first, then user_prompt_submit); the answer
    /// comes back as `PromptChecked`, which sends it or refuses it.
    pub(super) fn check_prompt(
        &mut self,
        session_start: Vec<hooks::Hook>,
        submit: Vec<hooks::Hook>,
        message: crate::runtime::NewMessage,
        reply: super::Reply<crate::runtime::Sent>,
    ) {
        let (id, cancel) = self.work.begin_prompt();
        let env = self.hook_env(cancel);
        let tx = self.tx.clone();
        crate::tasks::spawn("hooks", async move {
            let (outcome, reports) =
                hooks::before_prompt(&session_start, &submit, &env, &message.text).await;
            let _ = tx.send(Input::PromptChecked {
                call: id,
                message,
                outcome,
                reports,
                reply,
            });
        });
    }

    /// Fires the notification hooks of `kind` (nothing waits for them;
    /// they are reported when they end).
    pub(super) fn notify(&mut self, kind: NotificationKind, message: String) {
        let matching = self.hooks.get().for_notification(kind);
        if matching.is_empty() {
            return;
        }
        let env = self.hook_env(self.work.notifications());
        let tx = self.tx.clone();
        crate::tasks::spawn("hooks", async move {
            let reports = hooks::notify(&matching, &env, kind, &message).await;
            let _ = tx.send(Input::HooksRan(reports));
        });
    }

    /// Tells clients about hooks that ran, and records them in the event
    /// log (durable with the next flush: a hook's report is not worth a
    /// flush of its own).
    pub(super) fn report_hooks(&mut self, reports: Vec<HookReport>) {
        for report in reports {
            if let Some(error) = &report.error {
                tracing::warn!(conversation = %self.record.id, "{} hook `{}` failed: {error}", report.stage.as_str(), report.command);
            }
            let stored = crate::store::StoredEvent::HookRan {
                at_ms: self.now_ms(),
                stage: report.stage,
                command: report.command.clone(),
                decision: report.decision.clone(),
                duration_ms: report.duration_ms,
                error: report.error.clone(),
            };
            let seq = self.fanout.next_seq();
            if let Err(e) = self.shared.store.put_event(&self.record.id, seq, &stored) {
                tracing::error!(conversation = %self.record.id, "cannot record a hook's report: {e}");
            }
            self.emit(EventKind::HookRan(report));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_stop_hook(command: &str) -> Hooks {
        Hooks {
            hooks: vec![hooks::Hook {
                stage: Stage::Stop,
                matcher: hooks::Matcher::All,
                command: command.to_string(),
                timeout: std::time::Duration::from_secs(1),
            }],
            ..Hooks::default()
        }
    }

    #[test]
    fn a_new_reading_replaces_the_hooks_in_force() {
        let mut set = HookSet::default();
        set.set(with_stop_hook("true"));
        assert_eq!(set.get().all_of(Stage::Stop).len(), 1);
        set.set(Hooks::default());
        assert!(set.get().all_of(Stage::Stop).is_empty(), "replaced");
    }
}
