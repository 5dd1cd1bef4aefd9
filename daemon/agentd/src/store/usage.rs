//! The token ledger: usage per day and model, and the raises of the daily
//! budgets by day (`usage_days` and `budget_raises`).

use agentd_core::Usage;

use super::{Store, StoreError, decode, encode};

impl Store {
    /// Adds a reply's usage to the ledger of `day` (`YYYY-MM-DD`) and
    /// `model` (not yet durable). Atomic: conversations add concurrently.
    pub fn add_daily_usage(&self, day: &str, model: &str, usage: &Usage) -> Result<(), StoreError> {
        let key = usage_key(day, model);
        let mut failed = None;
        self.usage_days.update_and_fetch(&key, |old| {
            let mut sum: Usage = match old.map(|v| decode(&key, v)) {
                Some(Ok(sum)) => sum,
                Some(Err(e)) => {
                    failed = Some(e);
                    return old.map(<[u8]>::to_vec);
                }
                None => Usage::default(),
            };
            sum.add(usage);
            match encode(day, &sum) {
                Ok(bytes) => Some(bytes),
                Err(e) => {
                    failed = Some(e);
                    old.map(<[u8]>::to_vec)
                }
            }
        })?;
        failed.map_or(Ok(()), Err)
    }

    /// What people raised the daily budgets by on `day` (`YYYY-MM-DD`).
    pub fn day_raises(&self, day: &str) -> Result<agentd_core::Amounts, StoreError> {
        match self.budget_raises.get(day.as_bytes())? {
            Some(v) => decode(day.as_bytes(), &v),
            None => Ok(agentd_core::Amounts::default()),
        }
    }

    /// Raises the daily budget `kind` of `day` by `amount` (not yet
    /// durable: the commit of the answer flushes it).
    pub fn raise_day_budget(
        &self,
        day: &str,
        kind: agentd_core::BudgetKind,
        amount: u64,
    ) -> Result<agentd_core::Amounts, StoreError> {
        let mut raises = self.day_raises(day)?;
        let before = raises.get(kind).unwrap_or(0);
        raises.set(kind, Some(before.saturating_add(amount)));
        self.budget_raises
            .insert(day.as_bytes(), encode(day, &raises)?)?;
        Ok(raises)
    }

    /// The ledger from `first_day` to `last_day` (`YYYY-MM-DD`, inclusive):
    /// (day, model, usage), by day then model.
    pub fn daily_usage(
        &self,
        first_day: &str,
        last_day: &str,
    ) -> Result<Vec<(String, String, Usage)>, StoreError> {
        let mut out = Vec::new();
        let end = usage_key(last_day, "\u{10FFFF}");
        for item in self.usage_days.range(usage_key(first_day, "")..end) {
            let (k, v) = item?;
            let usage: Usage = decode(&k, &v)?;
            let text = String::from_utf8_lossy(&k).into_owned();
            let (day, model) = text.split_once('\0').unwrap_or((text.as_str(), ""));
            out.push((day.to_string(), model.to_string(), usage));
        }
        Ok(out)
    }
}

fn usage_key(day: &str, model: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(day.len() + 1 + model.len());
    key.extend_from_slice(day.as_bytes());
    key.push(0);
    key.extend_from_slice(model.as_bytes());
    key
}
