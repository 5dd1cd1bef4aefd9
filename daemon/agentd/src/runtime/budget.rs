//! What the budget check reads: the configured budgets, the raises people
//! answered with, and what was spent — this conversation's replies, and
//! today's ledger (UTC) of every conversation. The core decides
//! (`agentd_core::budget::check`); this gathers.

use super::Shared;
use crate::store::{ConversationRecord, StoreError};
use agentd_core::budget::{billed_tokens, micro_usd};
use agentd_core::{Amounts, BudgetContext, BudgetKind};

/// The budget context of `record` at `now_ms`. Without a configured budget
/// it reads nothing.
pub(crate) fn context(
    shared: &Shared,
    record: &ConversationRecord,
    now_ms: i64,
) -> Result<BudgetContext, StoreError> {
    let configured = shared.config.budget;
    if configured.is_empty() {
        return Ok(BudgetContext::default());
    }
    let mut spent = conversation_spent(shared, record);
    let mut raised = Amounts {
        per_conversation_usd: record.budget_raised.per_conversation_usd,
        per_conversation_tokens: record.budget_raised.per_conversation_tokens,
        ..Amounts::default()
    };
    if configured.per_day_usd.is_some() || configured.per_day_tokens.is_some() {
        let day = super::prompt::civil_date(now_ms);
        let today = day_spent(shared, &day)?;
        spent.per_day_usd = today.per_day_usd;
        spent.per_day_tokens = today.per_day_tokens;
        let raises = shared.store.day_raises(&day)?;
        raised.per_day_usd = raises.per_day_usd;
        raised.per_day_tokens = raises.per_day_tokens;
    }
    Ok(BudgetContext {
        configured,
        raised,
        spent,
    })
}

/// What `record` spent: its replies at its model's price (nothing in
/// dollars when the price is unknown), and every token billed — its
/// sub-agents' included, which count toward their parent's budget.
pub(crate) fn conversation_spent(shared: &Shared, record: &ConversationRecord) -> Amounts {
    let own = shared
        .config
        .models
        .conversation_cost(record)
        .map_or(0, micro_usd);
    let (children_usd, children_tokens) = record.conversation.sub_agents.spent();
    Amounts {
        per_conversation_usd: Some(own.saturating_add(children_usd)),
        per_conversation_tokens: Some(billed_tokens(&record.usage).saturating_add(children_tokens)),
        ..Amounts::default()
    }
}

/// What every conversation spent on `day` (`YYYY-MM-DD`), from the ledger.
pub(crate) fn day_spent(shared: &Shared, day: &str) -> Result<Amounts, StoreError> {
    let mut usd = 0u64;
    let mut tokens = 0u64;
    for (_, model, usage) in shared.store.daily_usage(day, day)? {
        if let Some(cost) = shared.config.models.cost(&model, &usage) {
            usd = usd.saturating_add(micro_usd(cost));
        }
        tokens = tokens.saturating_add(billed_tokens(&usage));
    }
    Ok(Amounts {
        per_day_usd: Some(usd),
        per_day_tokens: Some(tokens),
        ..Amounts::default()
    })
}

/// One configured budget and where spending stands against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status {
    pub kind: BudgetKind,
    /// Configured plus raised.
    pub limit: u64,
    pub spent: u64,
    pub raised: u64,
}

/// The configured budgets of `ctx` that are daily (`daily`) or per
/// conversation, with their spending.
pub(crate) fn statuses(ctx: &BudgetContext, daily: bool) -> Vec<Status> {
    BudgetKind::ALL
        .into_iter()
        .filter(|k| k.is_daily() == daily)
        .filter_map(|kind| {
            let configured = ctx.configured.get(kind)?;
            let raised = ctx.raised.get(kind).unwrap_or(0);
            Some(Status {
                kind,
                limit: configured.saturating_add(raised),
                spent: ctx.spent.get(kind).unwrap_or(0),
                raised,
            })
        })
        .collect()
}
