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
    let lines: Vec<(String, String, agentd_core::Usage)> = if req.conversation_id.is_empty() {
        let days = if req.days == 0 { 7 } else { req.days.min(3660) };
        svc.manager.daily_usage(days).map_err(to_status)?
    } else {
        let id = svc
            .manager
            .resolve(&req.conversation_id)
            .map_err(to_status)?;
        let record = svc.manager.record(&id).map_err(to_status)?;
        let messages = svc.manager.messages(&record).map_err(to_status)?;
        messages
            .iter()
            .filter_map(|(seq, m)| {
                m.usage
                    .map(|u| (format!("#{seq}"), record.model.clone(), u))
            })
            .collect()
    };
    let shared = svc.manager.shared();
    let budgets = if req.conversation_id.is_empty() {
        let now = shared.clock.now_ms();
        let day = crate::runtime::prompt::civil_date(now);
        let ctx = agentd_core::BudgetContext {
            configured: shared.config.budget,
            raised: shared
                .store
                .day_raises(&day)
                .map_err(|e| to_status(e.into()))?,
            spent: crate::runtime::budget::day_spent(shared, &day)
                .map_err(|e| to_status(e.into()))?,
        };
        crate::runtime::budget::statuses(&ctx, true)
    } else {
        let id = svc
            .manager
            .resolve(&req.conversation_id)
            .map_err(to_status)?;
        let record = svc.manager.record(&id).map_err(to_status)?;
        let ctx = agentd_core::BudgetContext {
            configured: shared.config.budget,
            raised: record.budget_raised,
            spent: crate::runtime::budget::conversation_spent(shared, &record),
        };
        crate::runtime::budget::statuses(&ctx, false)
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
