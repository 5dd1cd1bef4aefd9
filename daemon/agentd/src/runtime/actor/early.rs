//! What clients hear of calls that start while their reply still streams
//! (`transition/early.rs` in the core): nothing, until the reply that
//! asked for them is in the transcript. Their begin, output and end wait
//! here and go out right after the assistant message, in the order they
//! happened; calls of a reply that never makes it (it failed, was retried,
//! cancelled or continued) are never announced at all. A client so sees
//! what it always saw: a message, then its calls.

use crate::runtime::events::EventKind;
use agentd_core::{ContentBlock, ConvState, Effect, Role};

/// Events of calls started early, held until their reply is appended.
#[derive(Debug, Default)]
pub(super) struct HeldCalls {
    /// By call id, in the order they happened.
    events: Vec<(String, EventKind)>,
    /// Calls whose events were dropped by the last [`HeldCalls::settle`]:
    /// an abort of them says nothing either.
    dropped: Vec<String>,
}

impl HeldCalls {
    /// Whether call `id`'s events are held now.
    pub(super) fn holds(&self, id: &str) -> bool {
        self.events.iter().any(|(held, _)| held == id)
    }

    /// Whether call `id` started early and was never announced.
    pub(super) fn was_dropped(&self, id: &str) -> bool {
        self.dropped.iter().any(|d| d == id)
    }

    pub(super) fn hold(&mut self, id: &str, event: EventKind) {
        self.events.push((id.to_string(), event));
    }

    /// After a commit that left the conversation in `state` with
    /// `effects`: the held events of the calls the appended assistant
    /// message asks for, to announce now (after the message); the calls
    /// still streaming keep theirs; the rest are dropped.
    pub(super) fn settle(&mut self, state: &ConvState, effects: &[Effect]) -> Vec<EventKind> {
        self.dropped.clear();
        if self.events.is_empty() {
            return Vec::new();
        }
        let adopted: Vec<&str> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::AppendMessage { message } if message.role == Role::Assistant => {
                    Some(message)
                }
                _ => None,
            })
            .flat_map(|m| m.content.iter())
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        let streaming: Vec<&str> = match state {
            ConvState::LlmRequesting { early, .. } => {
                early.calls.iter().map(|c| c.id.as_str()).collect()
            }
            _ => Vec::new(),
        };
        let mut now = Vec::new();
        let mut kept = Vec::new();
        for (id, event) in std::mem::take(&mut self.events) {
            if adopted.contains(&id.as_str()) {
                now.push(event);
            } else if streaming.contains(&id.as_str()) {
                kept.push((id, event));
            } else if !self.dropped.contains(&id) {
                self.dropped.push(id);
            }
        }
        self.events = kept;
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_core::state::EarlyCalls;
    use agentd_core::{Message, ToolCall};

    fn begin(id: &str) -> EventKind {
        EventKind::ToolCallBegin {
            tool_use_id: id.to_string(),
            name: "read".to_string(),
            summary: String::new(),
            input_json: "{}".to_string(),
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.to_string(),
            name: "read".to_string(),
            input: serde_json::json!({}),
        }
    }

    fn streaming(ids: &[&str]) -> ConvState {
        ConvState::LlmRequesting {
            attempt: 1,
            iteration: 1,
            retry: None,
            early: EarlyCalls {
                calls: ids.iter().map(|id| call(id)).collect(),
                ..EarlyCalls::default()
            },
        }
    }

    fn ids(events: &[EventKind]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                EventKind::ToolCallBegin { tool_use_id, .. } => tool_use_id.clone(),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn held_calls_go_out_after_their_reply_and_lost_ones_never() {
        let mut held = HeldCalls::default();
        held.hold("a", begin("a"));
        // Still streaming: nothing goes out.
        assert!(held.settle(&streaming(&["a"]), &[]).is_empty());
        held.hold("b", begin("b"));
        held.hold("c", begin("c"));
        // The reply is appended with a and b (c belonged to nothing).
        let reply = Message {
            role: Role::Assistant,
            ..Message::user(
                vec![
                    ContentBlock::ToolUse {
                        id: "a".into(),
                        name: "read".into(),
                        input: serde_json::json!({}),
                    },
                    ContentBlock::ToolUse {
                        id: "b".into(),
                        name: "read".into(),
                        input: serde_json::json!({}),
                    },
                ],
                0,
            )
        };
        let out = held.settle(
            &ConvState::Idle,
            &[Effect::AppendMessage { message: reply }],
        );
        assert_eq!(ids(&out), ["a", "b"]);
        assert!(held.was_dropped("c") && !held.holds("c"));
        // A failed reply: everything held is dropped.
        held.hold("d", begin("d"));
        assert!(held.settle(&streaming(&[]), &[]).is_empty());
        assert!(held.was_dropped("d"));
    }
}
