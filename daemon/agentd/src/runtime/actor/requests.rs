//! Client request ids and the turn guard: a retried request is answered
//! with what the first one did and changes nothing; a message for a turn
//! that is over is refused. What is remembered lives in the record, written
//! with the effect of each request and undone with it.

use crate::runtime::error::RuntimeError;
use crate::runtime::{REQUEST_ID_WINDOW_MS, REQUEST_IDS_PER_CONVERSATION, Sent};
use crate::store::{ConversationRecord, RememberedRequest, RequestOutcome};

/// The record's remembered requests and turn counter.
pub(super) struct Requests<'r> {
    remembered: &'r mut Vec<RememberedRequest>,
    turns: &'r mut u64,
}

/// What a failed request puts back.
pub(super) struct Undo {
    turns: u64,
    remembered: Option<Vec<RememberedRequest>>,
}

impl Undo {
    pub(super) fn undo(self, record: &mut ConversationRecord) {
        record.turns = self.turns;
        if let Some(remembered) = self.remembered {
            record.requests = remembered;
        }
    }
}

impl<'r> Requests<'r> {
    pub(super) fn of(record: &'r mut ConversationRecord) -> Requests<'r> {
        Requests {
            remembered: &mut record.requests,
            turns: &mut record.turns,
        }
    }

    /// What the request `id` did, if it is remembered.
    fn remembered(&self, id: Option<&str>) -> Option<RequestOutcome> {
        let id = id?;
        self.remembered
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.outcome)
    }

    /// What becomes of a message before anything is applied: a retry gets
    /// the first outcome, an id used by another request or a stale
    /// `expected_turn` is refused; None: the message is new.
    pub(super) fn prior_send(
        &self,
        id: Option<&str>,
        expected_turn: Option<u64>,
    ) -> Option<Result<Sent, RuntimeError>> {
        match self.remembered(id) {
            Some(RequestOutcome::Sent { message_seq }) => Some(Ok(Sent::Appended(message_seq))),
            Some(RequestOutcome::Queued { number }) => {
                Some(Ok(Sent::Queued(super::queue::queued_id(number))))
            }
            Some(other) => Some(Err(reused(id, other))),
            None => match expected_turn {
                Some(expected) if expected != *self.turns => Some(Err(RuntimeError::StaleTurn {
                    expected,
                    current: *self.turns,
                })),
                _ => None,
            },
        }
    }

    /// A cancel's first outcome, when `id` is a retry of one.
    pub(super) fn prior_cancel(&self, id: Option<&str>) -> Option<Result<bool, RuntimeError>> {
        match self.remembered(id)? {
            RequestOutcome::Cancelled { was_busy } => Some(Ok(was_busy)),
            other => Some(Err(reused(id, other))),
        }
    }

    /// An answer's first outcome, when `id` is a retry of one.
    pub(super) fn prior_answer(&self, id: Option<&str>) -> Option<Result<(), RuntimeError>> {
        match self.remembered(id)? {
            RequestOutcome::Answered => Some(Ok(())),
            other => Some(Err(reused(id, other))),
        }
    }

    /// Starts a request: the request `id` and what it did are remembered,
    /// and a message counts as a new turn. Returns what undoes it.
    pub(super) fn begin(
        &mut self,
        id: Option<String>,
        outcome: RequestOutcome,
        new_turn: bool,
        now_ms: i64,
    ) -> Undo {
        let undo = Undo {
            turns: *self.turns,
            remembered: id.is_some().then(|| self.remembered.clone()),
        };
        if new_turn {
            *self.turns += 1;
        }
        if let Some(id) = id {
            self.remember(id, outcome, now_ms);
        }
        undo
    }

    /// Remembers what the request `id` did, forgetting ids older than the
    /// window and the oldest beyond the limit.
    fn remember(&mut self, id: String, outcome: RequestOutcome, now_ms: i64) {
        let requests = &mut *self.remembered;
        requests.retain(|r| now_ms - r.at_ms < REQUEST_ID_WINDOW_MS);
        if requests.len() >= REQUEST_IDS_PER_CONVERSATION {
            requests.remove(0);
        }
        requests.push(RememberedRequest {
            id,
            at_ms: now_ms,
            outcome,
        });
    }
}

/// The refusal of a request id already used by a request of another kind.
fn reused(id: Option<&str>, first: RequestOutcome) -> RuntimeError {
    let what = match first {
        RequestOutcome::Sent { .. } => "a message",
        RequestOutcome::Answered => "a permission answer",
        RequestOutcome::Cancelled { .. } => "a cancel",
        RequestOutcome::Queued { .. } => "a queued message",
    };
    RuntimeError::InvalidArgument(format!(
        "client request id {} was already used by {what}",
        crate::truncate::brief(id.unwrap_or_default())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Clock;
    use std::time::Duration;

    /// The record's two fields, as a test holds them.
    #[derive(Default)]
    struct Held {
        remembered: Vec<RememberedRequest>,
        turns: u64,
    }

    impl Held {
        fn requests(&mut self) -> Requests<'_> {
            Requests {
                remembered: &mut self.remembered,
                turns: &mut self.turns,
            }
        }
    }

    const SENT: RequestOutcome = RequestOutcome::Sent { message_seq: 3 };

    #[tokio::test(start_paused = true)]
    async fn a_retried_request_gets_the_first_outcome() {
        let clock = Clock::virtual_at(1_000);
        let mut held = Held::default();
        held.requests()
            .begin(Some("m1".into()), SENT, true, clock.now_ms());
        let queued = RequestOutcome::Queued { number: 4 };
        held.requests()
            .begin(Some("m2".into()), queued, true, clock.now_ms());
        let cancelled = RequestOutcome::Cancelled { was_busy: true };
        held.requests()
            .begin(Some("c1".into()), cancelled, false, clock.now_ms());
        let requests = held.requests();
        assert_eq!(
            requests.prior_send(Some("m1"), None).unwrap().unwrap(),
            Sent::Appended(3)
        );
        assert_eq!(
            requests.prior_send(Some("m2"), None).unwrap().unwrap(),
            Sent::Queued("q4".into())
        );
        assert!(requests.prior_cancel(Some("c1")).unwrap().unwrap());
        assert!(requests.prior_send(Some("new"), None).is_none());
        assert!(requests.prior_cancel(None).is_none());
        assert_eq!(held.turns, 2, "two messages, two turns");
    }

    #[tokio::test(start_paused = true)]
    async fn an_id_used_by_another_kind_of_request_is_refused() {
        let mut held = Held::default();
        held.requests().begin(Some("x".into()), SENT, true, 0);
        let requests = held.requests();
        let refused = requests.prior_answer(Some("x")).unwrap().unwrap_err();
        assert!(refused.to_string().contains("already used by a message"));
        assert!(requests.prior_cancel(Some("x")).unwrap().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_for_a_turn_that_is_over_is_refused() {
        let mut held = Held {
            turns: 5,
            ..Held::default()
        };
        let requests = held.requests();
        assert!(matches!(
            requests.prior_send(None, Some(4)),
            Some(Err(RuntimeError::StaleTurn {
                expected: 4,
                current: 5
            }))
        ));
        assert!(requests.prior_send(None, Some(5)).is_none());
        assert!(requests.prior_send(None, None).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn ids_are_forgotten_after_a_day_and_beyond_the_limit() {
        let clock = Clock::virtual_at(1_000);
        let mut held = Held::default();
        held.requests()
            .begin(Some("old".into()), SENT, true, clock.now_ms());
        tokio::time::advance(Duration::from_millis(REQUEST_ID_WINDOW_MS as u64)).await;
        held.requests()
            .begin(Some("new".into()), SENT, true, clock.now_ms());
        assert!(held.requests().prior_send(Some("old"), None).is_none());
        assert!(held.requests().prior_send(Some("new"), None).is_some());
        for i in 0..REQUEST_IDS_PER_CONVERSATION {
            held.requests()
                .begin(Some(format!("m{i}")), SENT, true, clock.now_ms());
        }
        assert_eq!(held.remembered.len(), REQUEST_IDS_PER_CONVERSATION);
        assert!(held.requests().prior_send(Some("new"), None).is_none());
        assert!(held.requests().prior_send(Some("m0"), None).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn undoing_a_failed_request_forgets_it_and_its_turn() {
        let dir = tempfile::tempdir().unwrap();
        let mut record = crate::runtime::test_record("c1", dir.path());
        Requests::of(&mut record).begin(Some("a".into()), SENT, true, 0);
        let undo = Requests::of(&mut record).begin(Some("b".into()), SENT, true, 0);
        assert_eq!(record.turns, 2);
        undo.undo(&mut record);
        assert_eq!(record.turns, 1);
        let requests = Requests::of(&mut record);
        assert!(requests.prior_send(Some("b"), None).is_none());
        assert!(requests.prior_send(Some("a"), None).is_some());
    }
}
