//! A sub-agent found mid-turn at start-up takes a slot of its parent's
//! (`[sub_agents] max_concurrent`) before it goes on, like a child that
//! starts: recovered and new children share the limit. Until the slot comes
//! the child waits as it was stored; a cancel or an answer to it recovers
//! it at once (they act on the recovered turn).

use super::Actor;
use crate::runtime::sub_agents::SubAgentRequest;
use agentd_core::Event;

impl Actor {
    /// The daemon found this conversation mid-turn at start-up: it goes on
    /// now, or, for a sub-agent still running, once it has a slot.
    pub(super) async fn recover(&mut self) {
        if let Some(link) = &self.record.sub_agent
            && link.result.is_none()
            && self.record.needs_recovery()
        {
            let request = SubAgentRequest::Resume {
                child_id: self.record.id.clone(),
                parent_id: link.parent_id.clone(),
            };
            if self.sub_agents.send(request).is_ok() {
                self.recovery_deferred = true;
                return;
            }
        }
        self.recover_now().await;
    }

    /// Recovers the turn the store holds.
    pub(super) async fn recover_now(&mut self) {
        self.recovery_deferred = false;
        self.apply_internal(Event::DaemonRestarted).await;
        // A continuation owed from before the restart.
        self.maybe_auto_continue();
    }
}
