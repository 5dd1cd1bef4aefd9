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
        let model = settings.model.filter(|m| *m != self.record.model);
        if let Some(model) = &model {
            self.fits(model)?;
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
        if mode.is_none() && model.is_none() && dirs.is_empty() {
            return Ok(self.record.clone());
        }
        let saved = self.record.clone();
        if let Some(mode) = mode {
            self.record.conversation.mode = mode;
        }
        if let Some(model) = model {
            self.record.switch_model(model);
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
        Ok(self.record.clone())
    }

    /// Refuses a switch to `model` when the conversation's context already
    /// fills its window past the continuation threshold: its next request
    /// would fail. The way on is a continuation with that model.
    fn fits(&self, model: &str) -> Result<(), RuntimeError> {
        let window = self.shared.config.models.lookup(model).context_window;
        let used = self.record.last_usage;
        if !agentd_core::state::should_trigger_continuation(&used, window) {
            return Ok(());
        }
        let id = &self.record.id;
        Err(RuntimeError::NotAllowed(format!(
            "{model} has a context window of {window} tokens and this conversation already uses {} of context: it would not fit. Continue it in a new conversation with that model: `agent compact {id}`, then `agent continue {id} --model {model}`",
            used.context_tokens()
        )))
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
