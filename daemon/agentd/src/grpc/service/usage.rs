//! Usage and budgets: what conversations or days used and cost, and where
//! each budget stands.

use super::Service;
use crate::grpc::convert::{self, to_status};
use agent_proto::v1 as pb;
use tonic::{Request, Response, Status};

pub(super) async fn get_usage(
    svc: &Service,
    request: Request<pb::GetUsageRequest>,
) -> Result<Response<pb::GetUsageResponse>, Status> {
    let req = request.into_inner();
    let models = &svc.manager.shared().config.models;
    let (lines, budgets) = if req.conversation_id.is_empty() {
        daily(svc, req.days)?
    } else {
        conversation(svc, &req.conversation_id)?
    };
    let mut total = agentd_core::Usage::default();
    let mut total_cost = Some(0.0);
    let lines = lines
        .into_iter()
        .map(|(label, model, usage)| {
            let cost = models.cost(&model, &usage);
            total.add(&usage);
            total_cost = total_cost.zip(cost).map(|(a, b)| a + b);
            convert::usage_line(label, model, &usage, cost)
        })
        .collect();
    Ok(Response::new(pb::GetUsageResponse {
        lines,
        total: Some(convert::usage_line(
            "total".into(),
            String::new(),
            &total,
            total_cost,
        )),
        budgets: budgets
            .into_iter()
            .map(|b| pb::BudgetStatus {
                budget: b.kind.name().to_string(),
                usd: b.kind.is_usd(),
                limit: b.limit,
                spent: b.spent,
                raised: b.raised,
            })
            .collect(),
    }))
}

/// One labelled line of usage: (label, model, usage).
type Line = (String, String, agentd_core::Usage);

/// The last `days` days' usage (7 when 0, at most 3660) and the daily budgets.
fn daily(
    svc: &Service,
    days: u32,
) -> Result<(Vec<Line>, Vec<crate::runtime::budget::Status>), Status> {
    let days = if days == 0 { 7 } else { days.min(3660) };
    let lines = svc.manager.daily_usage(days).map_err(to_status)?;
    let shared = svc.manager.shared();
    let day = crate::runtime::prompt::civil_date(shared.clock.now_ms());
    let ctx = agentd_core::BudgetContext {
        configured: shared.config.budget,
        raised: shared
            .store
            .day_raises(&day)
            .map_err(|e| to_status(e.into()))?,
        spent: crate::runtime::budget::day_spent(shared, &day).map_err(|e| to_status(e.into()))?,
    };
    Ok((lines, crate::runtime::budget::statuses(&ctx, true)))
}

/// One conversation's usage, a line per reply, and its budgets.
fn conversation(
    svc: &Service,
    conversation_id: &str,
) -> Result<(Vec<Line>, Vec<crate::runtime::budget::Status>), Status> {
    let id = svc.manager.resolve(conversation_id).map_err(to_status)?;
    let record = svc.manager.record(&id).map_err(to_status)?;
    let messages = svc.manager.messages(&record).map_err(to_status)?;
    let lines = messages
        .iter()
        .filter_map(|(seq, m)| {
            m.usage
                .map(|u| (format!("#{seq}"), record.model_at(*seq).to_string(), u))
        })
        .collect();
    let shared = svc.manager.shared();
    let ctx = agentd_core::BudgetContext {
        configured: shared.config.budget,
        raised: record.budget_raised,
        spent: crate::runtime::budget::conversation_spent(shared, &record),
    };
    Ok((lines, crate::runtime::budget::statuses(&ctx, false)))
}
