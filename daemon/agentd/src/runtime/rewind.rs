//! `Rewind`: back to the start of a turn — the files the agent changed
//! since (from the checkpoints), the transcript (a fork that ends just
//! before the turn's message), or both.
//!
//! The conversation's actor does the code part, so no turn can start while
//! files are restored; the fork is a new conversation the manager stores
//! from the transcript, which never changes before the message named.

use super::actor::{Command, Input, starts_turn};
use super::{Manager, RuntimeError};
use crate::checkpoints::Restored;
use crate::store::{ConversationRecord, ForkOrigin, ModelHistory, ModelSwitch};
use agentd_core::{ContinuationChain, Conversation, Role, Usage};

/// What to rewind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RewindRequest {
    /// The user message (sequence number) to rewind to; 0: with `code`,
    /// the last whose turn changed files, else the last one.
    pub to: u64,
    pub code: bool,
    pub conversation: bool,
    pub force: bool,
}

/// What a rewind did.
#[derive(Debug, Clone)]
pub(crate) struct Rewound {
    /// The message rewound to.
    pub message_seq: u64,
    pub code: Option<Restored>,
    pub forked: Option<ConversationRecord>,
}

impl Manager {
    /// Rewinds conversation `id` (see [`RewindRequest`]).
    pub(crate) async fn rewind(
        &self,
        id: &str,
        req: RewindRequest,
    ) -> Result<Rewound, RuntimeError> {
        if !req.code && !req.conversation {
            return Err(RuntimeError::InvalidArgument(
                "rewind what? ask for the code, the conversation, or both".into(),
            ));
        }
        let (message_seq, code) = self
            .ask(id, |reply| Command::Rewind {
                to: req.to,
                code: req.code,
                force: req.force,
                reply,
            })
            .await??;
        let forked = if req.conversation {
            let fork = self.fork(id, message_seq).await?;
            let _ = self
                .send_input(
                    id,
                    Input::Command(Command::Forked {
                        message_seq,
                        forked_id: fork.id.clone(),
                    }),
                )
                .await;
            Some(fork)
        } else {
            None
        };
        Ok(Rewound {
            message_seq,
            code,
            forked,
        })
    }

    /// Stores a new conversation whose transcript is `id`'s up to, not
    /// including, message `before`; linked to it by `forked_from`.
    async fn fork(&self, id: &str, before: u64) -> Result<ConversationRecord, RuntimeError> {
        let old = self.record(id)?;
        let messages: Vec<(u64, agentd_core::Message)> = self
            .messages(&old)?
            .into_iter()
            .filter(|(seq, _)| *seq < before)
            .collect();
        let now = self.shared.clock.now_ms();
        let mut usage = Usage::default();
        let mut by_model = std::collections::BTreeMap::<String, Usage>::new();
        for (seq, m) in &messages {
            if let Some(u) = &m.usage {
                usage.add(u);
                by_model
                    .entry(old.model_at(*seq).to_string())
                    .or_default()
                    .add(u);
            }
        }
        let last_usage = messages
            .iter()
            .rev()
            .find(|(_, m)| m.role == Role::Assistant)
            .and_then(|(_, m)| m.usage)
            .unwrap_or_default();
        let turns = messages.iter().filter(|(_, m)| starts_turn(m)).count() as u64;
        let record = forked(
            &old,
            self.new_id()?,
            now,
            before,
            Forked {
                message_count: messages.len() as u64,
                usage,
                by_model,
                last_usage,
                turns,
            },
        );
        let numbered: Vec<(u64, &agentd_core::Message)> =
            messages.iter().map(|(seq, m)| (*seq, m)).collect();
        // Before the commit that makes the fork, so it never runs a
        // command without the environment it was made with.
        self.shared.environments.copy(&old.id, &record.id)?;
        self.shared.store.commit(&record, &numbered)?;
        self.shared.store.flush().await?;
        Ok(record)
    }
}

/// The model history of a fork of `old` ending before message `before`:
/// the switches made before it, then, if `old` has moved on to another
/// model since, a switch to that one (a fork goes on with the model chosen
/// last).
fn forked_models(
    old: &ConversationRecord,
    before: u64,
    usage_by_model: std::collections::BTreeMap<String, Usage>,
) -> ModelHistory {
    let mut model_switches: Vec<ModelSwitch> = old
        .models
        .model_switches
        .iter()
        .filter(|s| s.at < before)
        .cloned()
        .collect();
    let last = old.model_at(before.saturating_sub(1));
    if last != old.model {
        model_switches.push(ModelSwitch {
            at: before,
            from: last.to_string(),
            to: old.model.clone(),
        });
    }
    ModelHistory {
        model_switches,
        usage_by_model,
        // A continuation a switch asked of `old` is not the fork's.
        continue_on: None,
    }
}

/// What a fork's transcript holds: the counts its record starts with.
struct Forked {
    message_count: u64,
    usage: Usage,
    /// `usage` by the model each reply came from.
    by_model: std::collections::BTreeMap<String, Usage>,
    last_usage: Usage,
    turns: u64,
}

/// The record of a fork of `old` made at `now`, ending before its message
/// `before`: it keeps what was chosen for `old` (title, directory, model,
/// mode, setup, its place in a chain of continuations, how far its
/// transcript is pruned, its self-correction tracking) and starts anew in
/// everything else, whatever fields records gain later. A fork is a
/// person's conversation, whatever it came from.
fn forked(
    old: &ConversationRecord,
    id: String,
    now: i64,
    before: u64,
    counts: Forked,
) -> ConversationRecord {
    ConversationRecord {
        id,
        title: old.title.clone(),
        cwd: old.cwd.clone(),
        model: old.model.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        // The fork rests, in the old one's mode, counting its corrections.
        conversation: Conversation {
            mode: old.conversation.mode,
            corrections: old.conversation.corrections.clone(),
            // It stands where the old one stood in the chain of
            // continuations, continued by none.
            continuation: ContinuationChain {
                parent_id: old.conversation.continuation.parent_id.clone(),
                hop: old.conversation.continuation.hop,
                ..ContinuationChain::default()
            },
            ..Conversation::default()
        },
        setup: old.setup.clone(),
        message_count: counts.message_count,
        usage: counts.usage,
        last_usage: counts.last_usage,
        turns: counts.turns,
        pruned_through: old.pruned_through,
        fork: ForkOrigin {
            forked_from: Some(old.id.clone()),
            forked_at: before,
        },
        models: forked_models(old, before, counts.by_model),
        ..ConversationRecord::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a fork keeps of the conversation it forks; everything else
    /// starts anew (a field records gain later too).
    const KEPT: &[&str] = &[
        "title",
        "cwd",
        "model",
        "mode",
        "additional_dirs",
        "allow_rules",
        "mcp_servers",
        "parent_id",
        "hop",
        "pruned_through",
        "corrections",
    ];

    #[test]
    fn a_fork_keeps_what_was_chosen_and_inherits_nothing_else() {
        let old: ConversationRecord = serde_json::from_value(serde_json::json!({
            "id": "01OLD", "title": "t", "cwd": "/w", "model": "m",
            "created_at_ms": 1, "updated_at_ms": 2,
            "state": {"state": "error", "message": "boom", "kind": "unknown"},
            "mode": "accept_edits", "additional_dirs": ["/extra"], "allow_rules": ["read"],
            "message_count": 30, "usage": {"input_tokens": 50, "output_tokens": 60},
            "seq_reserved": 70, "turns": 10,
            "requests": [{"id": "r1", "at_ms": 1, "outcome": {"kind": "answered"}}],
            "queued": [{"id": "q1", "text": "later", "at_ms": 1}], "queued_next": 4,
            "last_usage": {"input_tokens": 51, "output_tokens": 61},
            "parent_id": "01PARENT", "continued_as": "01NEXT", "continued_automatically": true,
            "hop": 2, "continue_pending": true, "pruned_through": 1,
            "budget_raised": {"per_day_usd": 5},
            "sub_agent": {"parent_id": "01P", "agent_id": "a", "description": "d"},
            "sub_agents_usage": {"input_tokens": 8, "output_tokens": 9},
            "sub_agents_cost_usd": 0.5, "sub_agents_counted": ["a1"],
            "forked_from": "01OLDER", "forked_at": 3
        }))
        .unwrap();
        let counts = Forked {
            message_count: 2,
            usage: Usage::default(),
            by_model: std::collections::BTreeMap::new(),
            last_usage: Usage::default(),
            turns: 1,
        };
        let fork = forked(&old, "01FORK".to_string(), 99, 5, counts);
        assert_eq!(fork.fork.forked_from.as_deref(), Some("01OLD"));
        assert_eq!((fork.fork.forked_at, fork.created_at_ms), (5, 99));
        assert!(fork.user_initiated(), "a fork is a person's conversation");
        let old = serde_json::to_value(&old).unwrap();
        let fork = serde_json::to_value(&fork).unwrap();
        for (key, value) in fork.as_object().unwrap() {
            if old.get(key) == Some(value) {
                assert!(KEPT.contains(&key.as_str()), "the fork inherited {key}");
            }
        }
        for key in KEPT.iter().filter(|k| old.get(**k).is_some()) {
            assert_eq!(fork.get(*key), old.get(*key), "the fork keeps {key}");
        }
    }
}
