//! One open session and what its pump and the request handlers share about
//! it: the waiting prompt, how the last turn ended, the calls the editor was
//! told of, the permission requests in flight.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;

use agent_client_protocol::RequestCancellationHandle;
use agent_client_protocol::v1::schema::StopReason;
use tokio::sync::oneshot;

use super::{lock, map};

/// One open session: a conversation this bridge is attached to.
pub(super) struct Live {
    /// The conversation's full id (the ACP session id).
    pub(super) id: String,
    pub(super) shared: Mutex<Shared>,
    pub(super) pump: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What the pump and the request handlers share about a session.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) cwd: PathBuf,
    pub(super) mode: i32,
    /// The `session/prompt` waiting for its turn to end.
    pub(super) waiter: Option<Waiter>,
    /// How the last turn ended, and the last message seen before it did.
    pub(super) turn_end: Option<(u64, TurnEnd)>,
    /// The highest message sequence number seen.
    pub(super) last_msg_seq: u64,
    /// The last reply's stop reason and whether a cancel cut it.
    pub(super) last_stop: (String, bool),
    /// Prompts this bridge sent and has not seen appended: not echoed back.
    pub(super) own_texts: Vec<String>,
    /// Tool calls the editor was told of, ended, and their inputs.
    pub(super) announced: HashSet<String>,
    pub(super) ended: HashSet<String>,
    pub(super) inputs: HashMap<String, String>,
    /// What running commands printed so far (the newest part).
    pub(super) output: HashMap<String, String>,
    /// Permission requests asked of the editor and not answered, and those
    /// resolved (by anyone) or answered from here.
    pub(super) asked: HashMap<String, RequestCancellationHandle>,
    pub(super) resolved: HashSet<String>,
    pub(super) answered_here: HashSet<String>,
}

/// A prompt waiting for the end of its turn.
pub(super) struct Waiter {
    /// The user message it sent, once the daemon said which.
    pub(super) msg_seq: Option<u64>,
    /// `session/cancel` came: the turn ends cancelled.
    pub(super) cancelled: bool,
    pub(super) done: oneshot::Sender<Result<StopReason, String>>,
}

/// How a turn ended.
#[derive(Clone)]
pub(super) enum TurnEnd {
    /// Idle again: the last reply's stop reason, and whether a cancel cut it.
    Idle { stop: String, interrupted: bool },
    /// The context window is full.
    Exhausted,
    /// The turn failed: why.
    Failed(String),
}

impl Live {
    /// The daemon accepted the prompt as message `seq`.
    pub(super) fn sent(&self, seq: u64) {
        let mut shared = lock(&self.shared);
        if let Some(waiter) = shared.waiter.as_mut() {
            waiter.msg_seq = Some(seq);
        }
        shared.finish_if_over();
    }

    /// Ends the pump and any prompt waiting.
    pub(super) fn stop(&self, why: &str) {
        if let Some(pump) = lock(&self.pump).take() {
            pump.abort();
        }
        if let Some(waiter) = lock(&self.shared).waiter.take() {
            let _ = waiter.done.send(Err(why.to_string()));
        }
    }
}

impl Shared {
    /// Answers the waiting prompt when its turn has ended.
    pub(super) fn finish_if_over(&mut self) {
        let over = match (&self.waiter, &self.turn_end) {
            (
                Some(Waiter {
                    msg_seq: Some(seq), ..
                }),
                Some((at, _)),
            ) => at >= seq,
            _ => false,
        };
        if !over {
            return;
        }
        let (Some(waiter), Some((_, end))) = (self.waiter.take(), self.turn_end.clone()) else {
            return;
        };
        let result = match end {
            TurnEnd::Idle { stop, interrupted } => {
                Ok(map::stop_reason(&stop, interrupted, waiter.cancelled))
            }
            TurnEnd::Exhausted if waiter.cancelled => Ok(StopReason::Cancelled),
            TurnEnd::Exhausted => Ok(StopReason::MaxTokens),
            TurnEnd::Failed(_) if waiter.cancelled => Ok(StopReason::Cancelled),
            TurnEnd::Failed(why) => Err(format!("the turn failed: {why}")),
        };
        let _ = waiter.done.send(result);
    }
}
