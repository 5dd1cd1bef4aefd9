//! The work a conversation has in flight: the model request, running tools,
//! the retry timer and hooks, each under a call number so a report of work
//! that was cancelled or replaced is recognised as stale and dropped.

use super::Input;
use crate::llm::PartialReply;
use std::collections::HashMap;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A spawned piece of work: its call number (reports with another number
/// are stale) and how to stop it.
struct InFlight {
    call: u64,
    cancel: CancellationToken,
}

impl InFlight {
    fn stop(self) {
        self.cancel.cancel();
    }
}

/// What is in flight, by kind.
#[derive(Default)]
pub(super) struct Work {
    next_call: u64,
    llm: Option<InFlight>,
    /// What the model request in flight has streamed so far.
    pub(super) partial: PartialReply,
    /// What clients are not told yet of the calls that started while the
    /// reply streams.
    pub(super) held: super::early::HeldCalls,
    /// Running tools by tool_use id, with their start.
    tools: HashMap<String, (InFlight, Instant)>,
    retry: Option<(u64, tokio::task::JoinHandle<()>)>,
    /// The pre_tool_use or stop hooks that run.
    hooks: Option<InFlight>,
    /// The hooks checking a user message before it is sent.
    prompt: Option<InFlight>,
    /// Stops notification hooks when the daemon stops.
    notifications: CancellationToken,
}

impl Work {
    pub(super) fn is_empty(&self) -> bool {
        self.llm.is_none()
            && self.tools.is_empty()
            && self.retry.is_none()
            && self.hooks.is_none()
            && self.prompt.is_none()
    }

    fn call_number(&mut self) -> u64 {
        self.next_call += 1;
        self.next_call
    }

    /// A new piece of work: its call number and its cancel token.
    fn begin(&mut self) -> (InFlight, u64, CancellationToken) {
        let call = self.call_number();
        let cancel = CancellationToken::new();
        let flight = InFlight {
            call,
            cancel: cancel.clone(),
        };
        (flight, call, cancel)
    }

    /// A model request starts (one in flight is stopped): its call number
    /// and cancel token. What it streams starts afresh.
    pub(super) fn begin_llm(&mut self) -> (u64, CancellationToken) {
        self.abort_llm();
        let (flight, call, cancel) = self.begin();
        self.llm = Some(flight);
        self.partial = PartialReply::new();
        (call, cancel)
    }

    /// Stops the model request in flight, if any.
    pub(super) fn abort_llm(&mut self) {
        if let Some(f) = self.llm.take() {
            f.stop();
        }
    }

    pub(super) fn is_current_llm(&self, call: u64) -> bool {
        self.llm.as_ref().is_some_and(|f| f.call == call)
    }

    /// Whether `call` is the model request in flight; if so it is over.
    pub(super) fn finish_llm(&mut self, call: u64) -> bool {
        if !self.is_current_llm(call) {
            return false;
        }
        self.llm = None;
        self.partial = PartialReply::new();
        true
    }

    /// A tool call `tool_use_id` starts now: its call number and cancel
    /// token.
    pub(super) fn begin_tool(&mut self, tool_use_id: &str) -> (u64, CancellationToken) {
        let (flight, call, cancel) = self.begin();
        self.tools
            .insert(tool_use_id.to_string(), (flight, Instant::now()));
        (call, cancel)
    }

    /// Stops the tool call `tool_use_id`; returns how long it ran, if it
    /// was running.
    pub(super) fn abort_tool(&mut self, tool_use_id: &str) -> Option<std::time::Duration> {
        let (flight, started) = self.tools.remove(tool_use_id)?;
        flight.stop();
        Some(started.elapsed())
    }

    /// Whether `call` runs the tool `tool_use_id` and it is not over.
    pub(super) fn is_current_tool(&self, call: u64, tool_use_id: &str) -> bool {
        self.tools
            .get(tool_use_id)
            .is_some_and(|(f, _)| f.call == call)
    }

    /// Whether `call` runs the tool `tool_use_id`; if so it is over.
    pub(super) fn finish_tool(&mut self, call: u64, tool_use_id: &str) -> bool {
        let current = self.is_current_tool(call, tool_use_id);
        if current {
            self.tools.remove(tool_use_id);
        }
        current
    }

    /// Arms the retry timer (replacing one armed): `RetryDue` reaches
    /// `mailbox` after `delay_ms`, with the timer's call number.
    pub(super) fn schedule_retry(&mut self, delay_ms: u64, mailbox: mpsc::UnboundedSender<Input>) {
        let call = self.call_number();
        let handle = crate::tasks::spawn("retry timer", async move {
            tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
            let _ = mailbox.send(Input::RetryDue { call });
        });
        if let Some((_, old)) = self.retry.replace((call, handle)) {
            old.abort();
        }
    }

    /// Disarms the retry timer.
    pub(super) fn cancel_retry(&mut self) {
        if let Some((_, h)) = self.retry.take() {
            h.abort();
        }
    }

    /// Whether `call` is the retry timer that is due; if so it is over.
    pub(super) fn finish_retry(&mut self, call: u64) -> bool {
        let current = self.retry.as_ref().is_some_and(|(c, _)| *c == call);
        if current {
            self.retry = None;
        }
        current
    }

    /// pre_tool_use or stop hooks start (those running are stopped).
    pub(super) fn begin_hooks(&mut self) -> (u64, CancellationToken) {
        self.abort_hooks();
        let (flight, call, cancel) = self.begin();
        self.hooks = Some(flight);
        (call, cancel)
    }

    /// Whether `call` is the hooks run in flight; if so it is over.
    pub(super) fn finish_hooks(&mut self, call: u64) -> bool {
        let current = self.hooks.as_ref().is_some_and(|f| f.call == call);
        if current {
            self.hooks = None;
        }
        current
    }

    pub(super) fn abort_hooks(&mut self) {
        if let Some(f) = self.hooks.take() {
            f.stop();
        }
    }

    /// Hooks start checking a user message.
    pub(super) fn begin_prompt(&mut self) -> (u64, CancellationToken) {
        let (flight, call, cancel) = self.begin();
        self.prompt = Some(flight);
        (call, cancel)
    }

    /// Whether `call` is the message check in flight; if so it is over.
    pub(super) fn finish_prompt(&mut self, call: u64) -> bool {
        let current = self.prompt.as_ref().is_some_and(|f| f.call == call);
        if current {
            self.prompt = None;
        }
        current
    }

    /// Whether hooks check a user message now.
    pub(super) fn prompt_checking(&self) -> bool {
        self.prompt.is_some()
    }

    /// Kills the hooks checking a user message (the message is not sent).
    pub(super) fn cancel_prompt(&mut self) {
        if let Some(f) = self.prompt.take() {
            f.stop();
        }
    }

    /// What stops notification hooks (when the daemon stops).
    pub(super) fn notifications(&self) -> CancellationToken {
        self.notifications.clone()
    }

    /// Stops everything: the model request, the timer and the tools.
    pub(super) fn stop_all(&mut self) {
        self.abort_llm();
        self.cancel_retry();
        for (_, (f, _)) in self.tools.drain() {
            f.stop();
        }
        self.abort_hooks();
        self.cancel_prompt();
        self.notifications.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn retry_due(input: Option<Input>) -> Option<u64> {
        match input {
            Some(Input::RetryDue { call }) => Some(call),
            _ => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_retry_timer_fires_after_its_delay_on_virtual_time() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut work = Work::default();
        work.schedule_retry(2_000, tx);
        assert!(!work.is_empty());
        tokio::time::advance(Duration::from_millis(1_999)).await;
        assert!(rx.try_recv().is_err(), "not due yet");
        tokio::time::advance(Duration::from_millis(1)).await;
        let call = retry_due(rx.recv().await).expect("due");
        assert!(work.finish_retry(call));
        assert!(work.is_empty());
        assert!(!work.finish_retry(call), "a timer is due once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_or_replaced_retry_timer_never_fires() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut work = Work::default();
        work.schedule_retry(1_000, tx.clone());
        work.cancel_retry();
        work.schedule_retry(5_000, tx.clone());
        work.schedule_retry(3_000, tx);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let fired: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|i| retry_due(Some(i)))
            .collect();
        assert_eq!(fired.len(), 1, "only the last timer armed fires");
        assert!(work.finish_retry(fired[0]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_replaced_model_request_is_cancelled_and_its_late_end_is_stale() {
        let mut work = Work::default();
        let (first, first_cancel) = work.begin_llm();
        let (second, second_cancel) = work.begin_llm();
        assert!(first_cancel.is_cancelled());
        assert!(!second_cancel.is_cancelled());
        assert!(!work.is_current_llm(first));
        assert!(!work.finish_llm(first), "the first request's end is stale");
        assert!(work.finish_llm(second));
        assert!(work.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_aborted_tool_says_how_long_it_ran_and_its_end_is_stale() {
        let mut work = Work::default();
        let (call, cancel) = work.begin_tool("t1");
        assert!(work.is_current_tool(call, "t1"));
        assert!(!work.is_current_tool(call, "t2"));
        tokio::time::advance(Duration::from_millis(750)).await;
        assert_eq!(work.abort_tool("t1"), Some(Duration::from_millis(750)));
        assert!(cancel.is_cancelled());
        assert!(!work.finish_tool(call, "t1"), "its end arrives too late");
        assert_eq!(work.abort_tool("t1"), None, "aborted once");
    }

    #[tokio::test(start_paused = true)]
    async fn new_hooks_stop_the_running_ones_and_a_cancelled_check_is_over() {
        let mut work = Work::default();
        let (stop_hooks, stop_cancel) = work.begin_hooks();
        let (pre_hooks, _) = work.begin_hooks();
        assert!(stop_cancel.is_cancelled());
        assert!(!work.finish_hooks(stop_hooks));
        assert!(work.finish_hooks(pre_hooks));
        let (check, check_cancel) = work.begin_prompt();
        assert!(work.prompt_checking());
        work.cancel_prompt();
        assert!(check_cancel.is_cancelled());
        assert!(!work.finish_prompt(check), "the message was cancelled");
        assert!(work.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_everything_cancels_every_piece_of_work_and_the_notifications() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut work = Work::default();
        let (_, llm) = work.begin_llm();
        let (_, tool) = work.begin_tool("t1");
        let (_, hooks) = work.begin_hooks();
        let (_, prompt) = work.begin_prompt();
        let notifications = work.notifications();
        work.schedule_retry(10, tx);
        work.stop_all();
        for token in [llm, tool, hooks, prompt, notifications] {
            assert!(token.is_cancelled());
        }
        assert!(work.is_empty());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(rx.try_recv().is_err(), "the timer was disarmed");
    }
}
