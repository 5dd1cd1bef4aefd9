//! A sub-agent found mid-turn at start-up takes a slot of its parent's
//! (`[sub_agents] max_concurrent`) before it goes on, like a child that
//! starts: recovered and new children share the limit. Until the slot comes
//! the child waits as it was stored, handling its inputs; a cancel or an
//! answer to it recovers it at once (they act on the recovered turn).

use super::{Actor, Command, Flow, Input};
use crate::runtime::sub_agents::SubAgentRequest;
use agentd_core::Event;

impl Actor {
    /// The daemon found this conversation mid-turn at start-up: it goes on
    /// now, or, for a sub-agent still running, once it has a slot.
    pub(super) async fn recover(&mut self) -> Flow {
        if let Some(link) = &self.record.sub_agent
            && link.result.is_none()
            && self.record.needs_recovery()
        {
            let request = SubAgentRequest::Resume {
                child_id: self.record.id.clone(),
                parent_id: link.parent_id.clone(),
            };
            if self.sub_agents.send(request).is_ok() {
                return self.wait_for_slot().await;
            }
        }
        self.recover_now().await;
        Flow::Go
    }

    /// Handles inputs as they come until the slot is granted, or until a
    /// command acts on the turn (it is recovered first), then recovers.
    async fn wait_for_slot(&mut self) -> Flow {
        let idle_after = std::time::Duration::from_millis(self.shared.config.limits.idle_unload_ms);
        while let Some(input) = self.next_input(idle_after).await {
            match input {
                Input::RecoverySlotGranted => {
                    self.recover_now().await;
                    return Flow::Go;
                }
                Input::Command(cmd) if acts_on_turn(&cmd) => {
                    self.recover_now().await;
                    self.command(cmd).await;
                    return Flow::Go;
                }
                Input::Shutdown { done } => {
                    self.shutdown().await;
                    let _ = done.send(());
                    return Flow::Stop;
                }
                Input::Delete { done } => {
                    self.work.stop_all();
                    let _ = done.send(());
                    return Flow::Stop;
                }
                // Waiting already (the slot was asked for again).
                Input::Recover => {}
                other => self.handle(other).await,
            }
            self.keep_reservation().await;
        }
        Flow::Stop
    }

    /// Recovers the turn the store holds.
    async fn recover_now(&mut self) {
        self.apply_internal(Event::DaemonRestarted).await;
        // A continuation owed from before the restart.
        self.continuation.ask_if_owed(&self.record);
    }
}

/// Whether `cmd` acts on the recovered turn (so it is recovered first).
fn acts_on_turn(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Cancel { .. } | Command::Answer { .. } | Command::AnswerBudget { .. }
    )
}
