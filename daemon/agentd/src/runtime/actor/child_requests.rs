//! The permission requests this conversation's sub-agents have pending:
//! shown to its clients too (again to each that attaches), until they are
//! resolved or the sub-agent ends.

use crate::runtime::events::{ConvEvent, EventKind, PermissionView};
use std::sync::Arc;

/// The sub-agents' pending requests, oldest first.
#[derive(Default)]
pub(super) struct ChildRequests {
    pending: Vec<PermissionView>,
}

impl ChildRequests {
    /// Keeps what a sub-agent forwarded; returns whether this
    /// conversation's clients are to be told (a resolution of a request
    /// they were never shown is a stale report).
    pub(super) fn forwarded(&mut self, kind: &EventKind) -> bool {
        match kind {
            EventKind::PermissionRequested(view) => {
                let id = &view.ask.request_id;
                self.pending.retain(|v| &v.ask.request_id != id);
                self.pending.push(view.clone());
                true
            }
            EventKind::PermissionResolved { request_id, .. } => {
                let known = self.pending.len();
                self.pending.retain(|v| &v.ask.request_id != request_id);
                known != self.pending.len()
            }
            _ => true,
        }
    }

    /// The sub-agent `child_id` ended: its requests are over, answered or
    /// not.
    pub(super) fn ended(&mut self, child_id: &str) {
        self.pending
            .retain(|v| v.sub_agent.as_ref().map(|r| r.conversation_id.as_str()) != Some(child_id));
    }

    /// The pending requests, for a client that attaches (addressed to it
    /// alone: sequence number 0).
    pub(super) fn frames(&self, now: i64) -> Vec<Arc<ConvEvent>> {
        self.pending
            .iter()
            .map(|v| {
                Arc::new(ConvEvent::new(
                    0,
                    now,
                    EventKind::PermissionRequested(v.clone()),
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Clock;
    use crate::runtime::events::SubAgentRef;
    use agentd_core::{Decision, PermissionAsk};
    use std::time::Duration;

    fn asked(child: &str, request_id: &str) -> EventKind {
        EventKind::PermissionRequested(PermissionView {
            ask: PermissionAsk {
                request_id: request_id.to_string(),
                tool_use_id: String::new(),
                tool_name: "bash".into(),
                input: serde_json::Value::Null,
                reason: String::new(),
                options: vec![Decision::AllowOnce],
                suggested_rule: String::new(),
            },
            summary: String::new(),
            diff: None,
            sub_agent: Some(SubAgentRef {
                conversation_id: child.to_string(),
                agent_id: "a".into(),
                description: String::new(),
            }),
        })
    }

    fn resolved(request_id: &str) -> EventKind {
        EventKind::PermissionResolved {
            request_id: request_id.to_string(),
            decision: Decision::AllowOnce,
            client: None,
        }
    }

    fn pending(requests: &ChildRequests) -> Vec<String> {
        requests
            .frames(0)
            .iter()
            .map(|e| match &e.kind {
                EventKind::PermissionRequested(v) => v.ask.request_id.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_attaches_is_shown_the_pending_requests_now() {
        let clock = Clock::virtual_at(1_000);
        let mut requests = ChildRequests::default();
        assert!(requests.forwarded(&asked("k1", "r1")));
        tokio::time::advance(Duration::from_millis(20)).await;
        let frames = requests.frames(clock.now_ms());
        assert_eq!(frames.len(), 1);
        assert_eq!((frames[0].seq, frames[0].at_ms), (0, 1_020));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_asked_again_is_kept_once_and_a_resolution_ends_it() {
        let mut requests = ChildRequests::default();
        requests.forwarded(&asked("k1", "r1"));
        requests.forwarded(&asked("k2", "r2"));
        requests.forwarded(&asked("k1", "r1"));
        assert_eq!(pending(&requests), ["r2", "r1"]);
        assert!(requests.forwarded(&resolved("r1")));
        assert_eq!(pending(&requests), ["r2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resolution_of_a_request_nobody_was_shown_is_not_forwarded() {
        let mut requests = ChildRequests::default();
        assert!(!requests.forwarded(&resolved("r9")));
        assert!(
            requests.forwarded(&EventKind::info("x")),
            "anything else is"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_sub_agents_requests_are_over() {
        let mut requests = ChildRequests::default();
        requests.forwarded(&asked("k1", "r1"));
        requests.forwarded(&asked("k2", "r2"));
        requests.ended("k1");
        assert_eq!(pending(&requests), ["r2"]);
        assert!(!requests.forwarded(&resolved("r1")), "over with its child");
    }
}
