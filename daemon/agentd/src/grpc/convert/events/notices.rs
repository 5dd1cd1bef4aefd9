//! Notices: what the core (or the daemon) tells people. Those clients act
//! on (a retry's countdown, the context filling up, a continuation, a
//! budget, a plan suggestion, self-corrections, an error) keep their typed
//! events; every other one goes as the generic `Notice`: its name, the
//! sentence, its severity and its fields as JSON. So a new notice needs
//! nothing here.

use crate::grpc::convert::{budget_stop, error_kind};
use crate::runtime::EventKind;
use agent_proto::v1 as pb;
use agentd_core::{Notice, Severity};
use pb::attach_response::Event as E;

/// A notice as it goes on the wire (routed here by [`super::wire_event`]).
pub(super) fn event(kind: &EventKind) -> E {
    match kind {
        EventKind::Notice(notice) => typed(notice).unwrap_or_else(|| generic(notice)),
        EventKind::ContextExhausted {
            summary,
            continuing,
        } => exhausted(summary, *continuing),
        other => super::misrouted(other),
    }
}

/// The generic form, which clients show without knowing the notice.
fn generic(notice: &Notice) -> E {
    let (kind, details) = notice.kind_and_details();
    let severity = match notice.severity() {
        Severity::Info => pb::NoticeSeverity::Info,
        Severity::Warning => pb::NoticeSeverity::Warning,
        Severity::Error => pb::NoticeSeverity::Error,
    };
    E::Notice(pb::Notice {
        message: notice.text(),
        kind,
        severity: severity as i32,
        details_json: details.to_string(),
    })
}

fn exhausted(summary: &str, continuing: bool) -> E {
    E::ContextExhausted(pb::ContextExhausted {
        summary: summary.to_string(),
        continuing,
    })
}

/// The typed event of a notice clients act on; `None` for the others.
fn typed(notice: &Notice) -> Option<E> {
    Some(match notice {
        Notice::Retrying {
            attempt,
            max_attempts,
            delay_ms,
            reason,
        } => E::Retrying(pb::Retrying {
            attempt: *attempt,
            max_attempts: *max_attempts,
            delay_ms: *delay_ms,
            reason: reason.clone(),
        }),
        Notice::Error { message, kind } => E::Error(pb::ErrorEvent {
            message: message.clone(),
            kind: error_kind(*kind) as i32,
        }),
        Notice::ContextWarning {
            used_tokens,
            context_window,
        } => E::ContextWarning(pb::ContextWarning {
            used_tokens: *used_tokens,
            context_window: *context_window,
        }),
        Notice::ContinuationStarted {
            rejected_tools,
            manual,
        } => E::ContinuationStarted(pb::ContinuationStarted {
            rejected_tools: rejected_tools.clone(),
            manual: *manual,
        }),
        // The runtime makes it `EventKind::ContextExhausted`, with what
        // only it knows; were one to come this way, it is not continued.
        Notice::ContextExhausted { summary } => exhausted(summary, false),
        Notice::BudgetStopped { stop } => E::BudgetStopped(pb::BudgetStopped {
            stop: Some(budget_stop(stop)),
        }),
        Notice::PlanSuggested { score, cues } => E::PlanSuggested(pb::PlanSuggested {
            score: *score,
            cues: cues.clone(),
        }),
        Notice::CorrectionAttempt {
            attempt,
            max_attempts,
            tool,
            error,
            fallback_request,
            fallback_tools,
        } => E::CorrectionAttempt(pb::CorrectionAttempt {
            attempt: *attempt,
            max_attempts: *max_attempts,
            tool: tool.clone(),
            error: error.clone(),
            fallback_request: fallback_request.clone(),
            fallback_tools: fallback_tools.clone(),
        }),
        Notice::CorrectionSucceeded { attempts, tool } => {
            E::CorrectionSuccess(pb::CorrectionSuccess {
                attempts: *attempts,
                tool: tool.clone(),
            })
        }
        Notice::CorrectionFailed {
            attempts,
            tool,
            error,
            message,
        } => E::CorrectionFailed(pb::CorrectionFailed {
            attempts: *attempts,
            tool: tool.clone(),
            error: error.clone(),
            message: message.clone(),
        }),
        // Said as they are: the daemon's sentences (the shutdown, a hook
        // that failed, ...) and what the recovery after a restart did, and
        // every notice without an event of its own.
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_without_an_event_of_its_own_goes_as_the_generic_one() {
        let kind = EventKind::Notice(Notice::Recovered {
            message: "agentd restarted".into(),
        });
        let E::Notice(n) = event(&kind) else {
            panic!("not a notice")
        };
        assert_eq!(n.message, "agentd restarted");
        assert_eq!(n.kind, "recovered");
        assert_eq!(n.severity, pb::NoticeSeverity::Info as i32);
        assert_eq!(n.details_json, r#"{"message":"agentd restarted"}"#);
    }

    #[test]
    fn a_notice_clients_act_on_keeps_its_event() {
        let kind = EventKind::Notice(Notice::Retrying {
            attempt: 2,
            max_attempts: 3,
            delay_ms: 500,
            reason: "overloaded".into(),
        });
        assert!(matches!(event(&kind), E::Retrying(r) if r.attempt == 2 && r.delay_ms == 500));
    }
}
