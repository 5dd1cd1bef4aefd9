//! Budgets: what a conversation and a day may spend, checked at every model
//! request boundary (the first attempt of each model round), and the
//! pricing arithmetic behind them.
//!
//! Amounts are integers so that checks are exact and states comparable:
//! dollars in micro-dollars (millionths of a USD), tokens in tokens. Which
//! one an amount is follows from its [`BudgetKind`].
//!
//! The runtime supplies the limits (the configured ones plus what people
//! raised) and what was spent (this conversation's replies; today's ledger
//! of every conversation, UTC); this module decides. A model whose price
//! is unknown spends tokens only: it never counts toward a dollar budget,
//! which is why token budgets exist.

use crate::conversation::SubAgents;
use crate::message::Usage;
use serde::{Deserialize, Serialize};

/// Micro-dollars per dollar.
pub const MICRO_USD: u64 = 1_000_000;

/// USD per million tokens, by kind of token.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Input written to the prompt cache.
    pub cache_write: f64,
    /// Input read from the prompt cache.
    pub cache_read: f64,
}

impl Price {
    /// What `usage` costs, USD.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per_token = |tokens: u64, usd_per_mtok: f64| tokens as f64 * usd_per_mtok / 1e6;
        per_token(usage.input_tokens, self.input)
            + per_token(usage.output_tokens, self.output)
            + per_token(usage.cache_creation_input_tokens, self.cache_write)
            + per_token(usage.cache_read_input_tokens, self.cache_read)
    }
}

/// Dollars as micro-dollars, rounded to the nearest (negative and
/// non-finite amounts count as nothing).
pub fn micro_usd(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        (usd * MICRO_USD as f64).round() as u64
    } else {
        0
    }
}

/// Every token a reply was billed for: input, output and both kinds of
/// cache tokens.
pub fn billed_tokens(usage: &Usage) -> u64 {
    usage.context_tokens()
}

/// Which budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    /// Dollars one conversation may spend.
    PerConversationUsd,
    /// Dollars every conversation together may spend in a UTC day.
    PerDayUsd,
    /// Tokens one conversation may use.
    PerConversationTokens,
    /// Tokens every conversation together may use in a UTC day.
    PerDayTokens,
}

impl BudgetKind {
    /// Every kind, in the order they are checked.
    pub const ALL: [BudgetKind; 4] = [
        BudgetKind::PerConversationUsd,
        BudgetKind::PerDayUsd,
        BudgetKind::PerConversationTokens,
        BudgetKind::PerDayTokens,
    ];

    /// The name of its setting in `[budget]`.
    pub fn name(self) -> &'static str {
        match self {
            BudgetKind::PerConversationUsd => "per_conversation_usd",
            BudgetKind::PerDayUsd => "per_day_usd",
            BudgetKind::PerConversationTokens => "per_conversation_tokens",
            BudgetKind::PerDayTokens => "per_day_tokens",
        }
    }

    /// Whether its amounts are micro-dollars (otherwise tokens).
    pub fn is_usd(self) -> bool {
        matches!(self, BudgetKind::PerConversationUsd | BudgetKind::PerDayUsd)
    }

    /// Whether it counts the day's spending of every conversation.
    pub fn is_daily(self) -> bool {
        matches!(self, BudgetKind::PerDayUsd | BudgetKind::PerDayTokens)
    }

    /// `amount` in this budget's unit, for people: `$1.25` or `12,000 tokens`.
    pub fn show(self, amount: u64) -> String {
        if self.is_usd() {
            show_usd(amount)
        } else {
            format!("{} tokens", group_thousands(amount))
        }
    }
}

/// Micro-dollars as dollars: cents from a dollar up, four decimals below.
pub fn show_usd(micro: u64) -> String {
    let usd = micro as f64 / MICRO_USD as f64;
    if micro >= MICRO_USD || micro == 0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    }
}

fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One amount per budget kind (`None`: no such budget).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amounts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_conversation_usd: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day_usd: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_conversation_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day_tokens: Option<u64>,
}

impl Amounts {
    /// The amount of `kind`.
    pub fn get(&self, kind: BudgetKind) -> Option<u64> {
        match kind {
            BudgetKind::PerConversationUsd => self.per_conversation_usd,
            BudgetKind::PerDayUsd => self.per_day_usd,
            BudgetKind::PerConversationTokens => self.per_conversation_tokens,
            BudgetKind::PerDayTokens => self.per_day_tokens,
        }
    }

    /// Sets the amount of `kind`.
    pub fn set(&mut self, kind: BudgetKind, amount: Option<u64>) {
        match kind {
            BudgetKind::PerConversationUsd => self.per_conversation_usd = amount,
            BudgetKind::PerDayUsd => self.per_day_usd = amount,
            BudgetKind::PerConversationTokens => self.per_conversation_tokens = amount,
            BudgetKind::PerDayTokens => self.per_day_tokens = amount,
        }
    }

    /// Whether no budget is set.
    pub fn is_empty(&self) -> bool {
        BudgetKind::ALL.iter().all(|k| self.get(*k).is_none())
    }

    /// These limits raised by `raised` (a raise of a budget that is not
    /// set does nothing).
    pub fn raised_by(&self, raised: &Amounts) -> Amounts {
        let mut out = *self;
        for kind in BudgetKind::ALL {
            if let (Some(limit), Some(extra)) = (self.get(kind), raised.get(kind)) {
                out.set(kind, Some(limit.saturating_add(extra)));
            }
        }
        out
    }
}

/// What the check reads: the configured budgets, what people raised them
/// by, and what was spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetContext {
    /// The configured budgets (`[budget]`); also what a raise adds by
    /// default.
    pub configured: Amounts,
    /// What people raised each budget by (this conversation's raises for
    /// the per-conversation budgets, today's for the daily ones).
    pub raised: Amounts,
    /// What was spent, per kind (every kind filled, whether budgeted or
    /// not).
    pub spent: Amounts,
}

impl BudgetContext {
    /// The spending of a conversation whose sub-agents went from `before`
    /// to `after` (a child's end was counted): the per-conversation budgets
    /// count its sub-agents' spending ([`SubAgents::spent`]), and the
    /// runtime gave the spending of the conversation as the event found it.
    ///
    /// [`SubAgents::spent`]: crate::conversation::SubAgents::spent
    pub(crate) fn sub_agents_counted(&mut self, before: &SubAgents, after: &SubAgents) {
        let (usd_before, tokens_before) = before.spent();
        let (usd, tokens) = after.spent();
        if let Some(spent) = &mut self.spent.per_conversation_usd {
            *spent = spent.saturating_sub(usd_before).saturating_add(usd);
        }
        if let Some(spent) = &mut self.spent.per_conversation_tokens {
            *spent = spent.saturating_sub(tokens_before).saturating_add(tokens);
        }
    }
}

/// A budget that was reached: the turn stops before its next model
/// request until someone raises it (or stops the turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStop {
    pub kind: BudgetKind,
    /// The limit in force (configured plus raised).
    pub limit: u64,
    /// What was spent when it was checked.
    pub spent: u64,
    /// What a raise adds unless the answer says otherwise: the configured
    /// budget again.
    pub raise_by: u64,
}

/// The first budget `ctx` has reached (spent at or over its limit), in the
/// order of [`BudgetKind::ALL`]; `None` when every budget has room.
pub fn check(ctx: &BudgetContext) -> Option<BudgetStop> {
    let limits = ctx.configured.raised_by(&ctx.raised);
    BudgetKind::ALL.into_iter().find_map(|kind| {
        let limit = limits.get(kind)?;
        let spent = ctx.spent.get(kind).unwrap_or(0);
        (spent >= limit).then(|| BudgetStop {
            kind,
            limit,
            spent,
            raise_by: ctx.configured.get(kind).unwrap_or(0).max(1),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(configured: Amounts, raised: Amounts, spent: Amounts) -> BudgetContext {
        BudgetContext {
            configured,
            raised,
            spent,
        }
    }

    #[test]
    fn no_budget_never_stops() {
        let spent = Amounts {
            per_conversation_usd: Some(u64::MAX),
            per_day_usd: Some(u64::MAX),
            per_conversation_tokens: Some(u64::MAX),
            per_day_tokens: Some(u64::MAX),
        };
        assert_eq!(
            check(&ctx(Amounts::default(), Amounts::default(), spent)),
            None
        );
    }

    #[test]
    fn a_budget_stops_when_spending_reaches_it_and_a_raise_makes_room() {
        let configured = Amounts {
            per_day_usd: Some(5 * MICRO_USD),
            ..Amounts::default()
        };
        let mut spent = Amounts {
            per_day_usd: Some(4_999_999),
            ..Amounts::default()
        };
        assert_eq!(check(&ctx(configured, Amounts::default(), spent)), None);
        spent.per_day_usd = Some(5 * MICRO_USD);
        let stop = check(&ctx(configured, Amounts::default(), spent));
        assert_eq!(
            stop,
            Some(BudgetStop {
                kind: BudgetKind::PerDayUsd,
                limit: 5 * MICRO_USD,
                spent: 5 * MICRO_USD,
                raise_by: 5 * MICRO_USD,
            })
        );
        let raised = Amounts {
            per_day_usd: Some(MICRO_USD),
            ..Amounts::default()
        };
        assert_eq!(check(&ctx(configured, raised, spent)), None);
    }

    #[test]
    fn the_conversation_budget_is_checked_before_the_daily_one() {
        let configured = Amounts {
            per_conversation_usd: Some(1),
            per_day_usd: Some(1),
            per_day_tokens: Some(1),
            ..Amounts::default()
        };
        let spent = Amounts {
            per_conversation_usd: Some(1),
            per_day_usd: Some(1),
            per_day_tokens: Some(1),
            ..Amounts::default()
        };
        let stop = check(&ctx(configured, Amounts::default(), spent));
        assert_eq!(stop.map(|s| s.kind), Some(BudgetKind::PerConversationUsd));
    }

    #[test]
    fn a_raise_of_an_unset_budget_sets_nothing() {
        let raised = Amounts {
            per_conversation_tokens: Some(10),
            ..Amounts::default()
        };
        assert_eq!(Amounts::default().raised_by(&raised), Amounts::default());
    }

    #[test]
    fn amounts_read_as_people_write_them() {
        assert_eq!(BudgetKind::PerDayUsd.show(5 * MICRO_USD), "$5.00");
        assert_eq!(BudgetKind::PerDayUsd.show(1_234_567), "$1.23");
        assert_eq!(BudgetKind::PerConversationUsd.show(12_345), "$0.0123");
        assert_eq!(BudgetKind::PerDayUsd.show(0), "$0.00");
        assert_eq!(
            BudgetKind::PerConversationTokens.show(1_234_567),
            "1,234,567 tokens"
        );
        assert_eq!(BudgetKind::PerDayTokens.show(999), "999 tokens");
    }

    #[test]
    fn dollars_round_to_the_nearest_micro_dollar() {
        assert_eq!(micro_usd(0.0000014), 1);
        assert_eq!(micro_usd(2.5), 2_500_000);
        assert_eq!(micro_usd(-1.0), 0);
        assert_eq!(micro_usd(f64::NAN), 0);
    }
}
