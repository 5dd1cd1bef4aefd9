//! Settings a client changes on a live conversation (mode, model,
//! additional directories) and its answer to a budget that holds the turn:
//! written before anyone hears of them, then announced.

use super::Actor;
use crate::runtime::error::RuntimeError;
use crate::runtime::events::EventKind;
use crate::runtime::{BudgetAnswer, Settings};
use crate::store::ConversationRecord;
use agentd_core::Event;

impl Actor {
    /// Sets the mode and/or the model: written before the client hears of
    /// it, then every client is told. The next permission decision and the
    /// next model request read them from the record.
    pub(super) async fn update_settings(
        &mut self,
        settings: Settings,
    ) -> Result<ConversationRecord, RuntimeError> {
        let mode = settings
            .mode
            .filter(|m| *m != self.record.conversation.mode);
        let mut model = settings.model.filter(|m| *m != self.record.model);
        // A model whose window cannot hold the conversation: at rest the
        // switch becomes a continuation on it; mid-turn it is refused.
        let mut continue_on = None;
        if let Some((window, used)) = model.as_deref().and_then(|m| self.too_small(m)) {
            if self.record.conversation.state != agentd_core::ConvState::Idle {
                return Err(self.does_not_fit(model.as_deref().unwrap_or(""), window, used));
            }
            continue_on = model.take().map(|m| (m, window, used));
        }
        let mut dirs = Vec::new();
        for dir in settings.add_dirs {
            if dir != self.record.cwd
                && !self.record.setup.additional_dirs.contains(&dir)
                && !dirs.contains(&dir)
            {
                dirs.push(dir);
            }
        }
        crate::runtime::too_many_dirs(self.record.setup.additional_dirs.len() + dirs.len())?;
        if mode.is_none() && model.is_none() && dirs.is_empty() && continue_on.is_none() {
            return Ok(self.record.clone());
        }
        let saved = self.record.clone();
        if let Some(mode) = mode {
            self.record.conversation.mode = mode;
        }
        if let Some(model) = model {
            self.record.switch_model(model);
            self.record.models.continue_on = None;
        }
        if let Some((model, ..)) = &continue_on {
            self.record.models.continue_on = Some(model.clone());
        }
        self.record.setup.additional_dirs.extend(dirs);
        self.record.updated_at_ms = self.now_ms();
        if let Err(e) = self.write_record().await {
            tracing::error!(conversation = %self.record.id, "persisting settings failed: {e}");
            self.record = saved;
            return Err(RuntimeError::Store(e));
        }
        tracing::info!(
            conversation = %self.record.id,
            mode = self.record.conversation.mode.as_str(),
            model = %self.record.model,
            "settings changed"
        );
        self.announce_settings(settings.by);
        if let Some((model, window, used)) = continue_on {
            // The current model, whose window holds the conversation,
            // writes the summary; the continuation is made on `model` as
            // soon as it is written (`continue_on` owes it).
            let message = format!(
                "{model} has a context window of {window} tokens and this conversation uses {used}: {} summarizes it now, and it continues on {model} in a new conversation",
                self.record.model
            );
            self.tell(agentd_core::Notice::Info { message }).await;
            self.compact().await?;
        }
        Ok(self.record.clone())
    }

    /// The window of `model` and the context in use, when the conversation
    /// already fills that window past the continuation threshold: its next
    /// request on `model` would fail.
    fn too_small(&self, model: &str) -> Option<(u64, u64)> {
        let window = self.shared.config.models.lookup(model).context_window;
        let used = self.record.last_usage;
        agentd_core::state::should_trigger_continuation(&used, window)
            .then(|| (window, used.context_tokens()))
    }

    /// The refusal of a switch to a model too small for the conversation
    /// while a turn runs (at rest the switch continues on it instead).
    fn does_not_fit(&self, model: &str, window: u64, used: u64) -> RuntimeError {
        let id = &self.record.id;
        RuntimeError::NotAllowed(format!(
            "{model} has a context window of {window} tokens and this conversation already uses {used} of context: it would not fit. Switch when the turn has ended (the conversation then continues on {model} after a summary), or `agent compact {id}`, then `agent continue {id} --model {model}`"
        ))
    }

    /// Answers the budget that holds the turn: a raise is written (the
    /// conversation's in its record, a day's in the store) and committed
    /// with the transition it makes, which sends the held request (or holds
    /// it again if the raise was too small); "stop" ends the turn.
    pub(super) async fn answer_budget(&mut self, answer: BudgetAnswer) -> Result<(), RuntimeError> {
        let agentd_core::ConvState::BudgetStopped { stop, .. } = &self.record.conversation.state
        else {
            return Err(RuntimeError::NotAllowed(format!(
                "no budget holds conversation {} (it is in state {})",
                self.record.id,
                self.record.conversation.state.name()
            )));
        };
        let stop = *stop;
        let saved = self.record.clone();
        let raised_by = if answer.raise {
            let by = match answer.raise_by {
                Some(v) if stop.kind.is_usd() => agentd_core::budget::micro_usd(v).max(1),
                Some(v) => v.round().max(1.0) as u64,
                None => stop.raise_by,
            };
            if stop.kind.is_daily() {
                let day = crate::runtime::prompt::civil_date(self.now_ms());
                self.shared.store.raise_day_budget(&day, stop.kind, by)?;
            } else {
                let before = self.record.budget_raised.get(stop.kind).unwrap_or(0);
                self.record
                    .budget_raised
                    .set(stop.kind, Some(before.saturating_add(by)));
            }
            Some(by)
        } else {
            None
        };
        tracing::info!(
            conversation = %self.record.id,
            budget = stop.kind.name(),
            raised_by = ?raised_by,
            "budget answered"
        );
        let client = answer.by.clone();
        self.persist_event(crate::store::StoredEvent::BudgetResolved {
            at_ms: self.now_ms(),
            stop,
            raised_by,
            client: client.clone(),
        })
        .await;
        self.emit(EventKind::BudgetResolved {
            stop,
            raised_by,
            client,
        });
        let result = self
            .apply(Event::BudgetAnswered {
                raise: answer.raise,
            })
            .await;
        if result.is_err() {
            self.record.budget_raised = saved.budget_raised;
        }
        result
    }

    /// Tells every client the mode and model now.
    pub(super) fn announce_settings(&mut self, by: String) {
        let context_window = self
            .shared
            .config
            .models
            .lookup(&self.record.model)
            .context_window;
        self.emit(EventKind::SettingsChanged {
            mode: self.record.conversation.mode,
            model: self.record.model.clone(),
            context_window,
            additional_dirs: self.record.setup.additional_dirs.clone(),
            by,
        });
    }
}
