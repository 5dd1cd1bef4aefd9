//! The actor's part of a rewind and of a plan step's rollback: restoring
//! files from the checkpoints while no turn runs (or, for a rollback, while
//! the turn that failed the step is between tool rounds).

use super::{Actor, starts_turn};
use crate::checkpoints::{RestoreError, Restored, Since};
use crate::runtime::RuntimeError;
use crate::runtime::events::EventKind;
use agentd_core::ConvState;

impl Actor {
    /// `Rewind`'s code part (and the check every rewind makes): the
    /// message rewound to, and what was restored when `code`.
    pub(super) async fn rewind(
        &mut self,
        to: u64,
        code: bool,
        force: bool,
    ) -> Result<(u64, Option<Restored>), RuntimeError> {
        let id = self.record.id.clone();
        let running = !matches!(
            self.record.conversation.state,
            ConvState::Idle | ConvState::Error { .. } | ConvState::ContextExhausted { .. }
        ) || self.work.prompt_checking();
        if running {
            return Err(RuntimeError::NotAllowed(format!(
                "conversation {id} is running a turn ({}); cancel it or wait for it to end before rewinding",
                self.record.conversation.state.name()
            )));
        }
        let seq = self.rewind_target(to, code)?;
        let starts = usize::try_from(seq)
            .ok()
            .and_then(|s| s.checked_sub(1))
            .and_then(|i| self.transcript.get(i))
            .is_some_and(starts_turn);
        if !starts {
            return Err(RuntimeError::InvalidArgument(if seq == 0 {
                format!("conversation {id} has no user message to rewind to")
            } else {
                format!(
                    "message {seq} of conversation {id} is not a user message that started a turn; \
                     `agent show {id} --checkpoints` lists the turns"
                )
            }));
        }
        if !code {
            return Ok((seq, None));
        }
        let restored = self
            .shared
            .checkpoints
            .restore(&id, Since::Turn(seq), force, false)
            .await
            .map_err(|e| match e {
                RestoreError::ChangedSince(paths) => RuntimeError::NotAllowed(format!(
                    "nothing was restored: {} changed since the agent last changed {} (by someone else): {}; \
                     `--force` overwrites {}",
                    if paths.len() == 1 { "a file was" } else { "files were" },
                    if paths.len() == 1 { "it" } else { "them" },
                    paths
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    if paths.len() == 1 { "it" } else { "them" },
                )),
                RestoreError::Io(m) => {
                    RuntimeError::NotAllowed(format!("the files could not be restored: {m}"))
                }
            })?;
        self.emit(EventKind::CodeRewound {
            message_seq: seq,
            restored: restored.clone(),
            plan_step_id: String::new(),
        });
        Ok((seq, Some(restored)))
    }

    /// The user message a rewind goes back to: `to`, or when 0, the last
    /// turn that changed files (for `code`; none is an error, as there is
    /// nothing to restore) or the last turn (for a fork alone).
    fn rewind_target(&self, to: u64, code: bool) -> Result<u64, RuntimeError> {
        if to != 0 {
            return Ok(to);
        }
        if !code {
            return Ok(self.turn_message_seq());
        }
        let id = &self.record.id;
        match self.shared.checkpoints.last_changed_turn(id) {
            Ok(Some(turn)) => Ok(turn),
            Ok(None) => Err(RuntimeError::NotAllowed(
                "nothing to rewind: no turn of this conversation changed files".into(),
            )),
            Err(e) => Err(RuntimeError::NotAllowed(format!(
                "the checkpoints of conversation {id} cannot be read: {e}"
            ))),
        }
    }

    /// `MarkCheckpoint`: a plan step started; remember where, so its
    /// failure can roll back what came after.
    pub(super) fn mark_checkpoint(&self, mark: &str) {
        let id = &self.record.id;
        if let Err(e) = self.shared.checkpoints.mark(id, mark) {
            tracing::warn!(conversation = %id, "cannot mark {mark}: {e}");
        }
    }

    /// `RestoreCheckpoint`: the plan step `step_id` failed; restore the
    /// files the agent changed since `mark` (files someone else changed
    /// meanwhile are left alone and named), and say so.
    pub(super) async fn roll_back_step(&mut self, mark: &str, step_id: String) {
        let id = self.record.id.clone();
        let checkpoints = self.shared.checkpoints.clone();
        let Some(mark) = checkpoints.mark_of(&id, mark) else {
            return;
        };
        let notice = match checkpoints
            .restore(&id, Since::Mark(mark), false, true)
            .await
        {
            Ok(restored) => {
                let text = format!(
                    "plan step {step_id} failed: {} file(s) restored and {} removed as they were before it started{}",
                    restored.restored.len(),
                    restored.removed.len(),
                    if restored.skipped.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; left as someone else changed them: {}",
                            restored
                                .skipped
                                .iter()
                                .map(|p| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                );
                self.emit(EventKind::CodeRewound {
                    message_seq: 0,
                    restored,
                    plan_step_id: step_id,
                });
                text
            }
            Err(e) => {
                format!("plan step {step_id} failed and its changes could not be rolled back: {e}")
            }
        };
        self.emit(EventKind::info(notice));
    }
}
