//! Clients attaching, leaving and falling behind: what a client gets first
//! (a snapshot, or a `Resumed` marker and the events it missed, from the
//! replay buffer or the store's event log), and the reservation of event
//! numbers that keeps them unique across restarts.
//!
//! The reservation is written in the record before numbers are handed out
//! and extended with the next commit once half of it is used (or, when
//! only ephemeral events flow, right after the input that used it), never
//! from inside `emit`; so a restarted daemon continues above anything a
//! client may have seen.

use super::continuation::Continuation;
use super::replay::{message_at, reservation_from};
use super::{Actor, Subscription};
use crate::runtime::events::{ClientInfo, ConvEvent, EventKind, PermissionView, SnapshotData};
use crate::store::{Store, StoredEvent};
use agentd_core::Message;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Durable events replayed from the store to a reconnecting client; beyond
/// this it gets a snapshot.
const MAX_STORED_REPLAY: usize = 2048;

impl Actor {
    /// Attaches a client: its first frames, then the live events; every
    /// client is told.
    pub(super) fn subscribe(
        &mut self,
        after_seq: u64,
        client: ClientInfo,
        reply: oneshot::Sender<Subscription>,
    ) {
        let live = self.fanout.subscribe(&self.shared.rings);
        let initial = self.initial_frames(after_seq, &client);
        self.fanout.clients.push(client.clone());
        let _ = reply.send(Subscription {
            client: client.clone(),
            initial,
            live,
        });
        self.emit(EventKind::ClientAttached(client));
    }

    /// A client went away: the others are told, and the ring goes once
    /// nobody watches.
    pub(super) fn detach(&mut self, client_id: &str) {
        if let Some(pos) = self.fanout.clients.iter().position(|c| c.id == client_id) {
            let client = self.fanout.clients.remove(pos);
            self.emit(EventKind::ClientDetached(client));
            if let Some(ring) = self.fanout.unwatched_hub() {
                self.shared.rings.recycle(ring);
            }
        }
    }

    /// A fresh snapshot for a client that fell behind.
    pub(super) fn resync(&self, client_id: String) -> Arc<ConvEvent> {
        let client = self
            .fanout
            .clients
            .iter()
            .find(|c| c.id == client_id)
            .cloned()
            .unwrap_or(ClientInfo::local(
                client_id,
                "",
                agentd_core::ClientRole::Viewer,
            ));
        self.snapshot(&client)
    }

    /// A snapshot, or — when the client reconnects and every event it
    /// missed is still in the replay buffer or the store — a `Resumed`
    /// marker and those events. A client that gets a snapshot is also told
    /// what the recovery after a restart said (sequence number 0: only to
    /// this client).
    fn initial_frames(&self, after_seq: u64, client: &ClientInfo) -> Vec<Arc<ConvEvent>> {
        let now = self.now_ms();
        let mut frames = match self.missed(after_seq) {
            Some(missed) => {
                let resumed = ConvEvent::new(0, now, EventKind::Resumed { after_seq });
                let mut frames = vec![Arc::new(resumed)];
                frames.extend(missed);
                frames
            }
            None => {
                let mut frames = vec![self.snapshot(client)];
                frames.extend(self.recovery_notices.iter().map(|n| {
                    Arc::new(ConvEvent::new(
                        0,
                        now,
                        EventKind::Notice(agentd_core::Notice::Recovered { message: n.clone() }),
                    ))
                }));
                frames
            }
        };
        // Those that asked before a restart are not in the log.
        frames.extend(self.child_requests.frames(now));
        frames.extend(Continuation::frame(&self.record, now));
        frames
    }

    /// The events after `after_seq` a reconnecting client missed, when the
    /// replay buffer or (beyond it, after a restart say) the store's log
    /// with whatever the buffer holds still has every one of them.
    fn missed(&self, after_seq: u64) -> Option<Vec<Arc<ConvEvent>>> {
        if after_seq == 0 || after_seq >= self.fanout.next_seq() {
            return None;
        }
        self.fanout
            .buffered_after(after_seq, &self.transcript)
            .or_else(|| {
                let stored = self.stored_events_after(after_seq)?;
                self.fanout
                    .merged_after(stored, after_seq, &self.transcript)
            })
    }

    pub(super) fn snapshot(&self, client: &ClientInfo) -> Arc<ConvEvent> {
        let messages = self.transcript.clone();
        let models = &self.shared.config.models;
        let mut clients = self.fanout.clients.clone();
        if !clients.iter().any(|c| c.id == client.id) {
            clients.push(client.clone());
        }
        Arc::new(ConvEvent::new(
            self.fanout.next_seq() - 1,
            self.now_ms(),
            EventKind::Snapshot(Box::new(SnapshotData {
                record: self.record.clone(),
                messages,
                partial: self.work.partial.clone(),
                pending: self.permissions.pending(&self.record.conversation.state),
                clients,
                your_client_id: client.id.clone(),
                max_attempts: self.shared.config.retry.max_attempts,
                pricing: models.pricing(&self.record),
            })),
        ))
    }

    /// The events of the store after `after_seq`, as clients see them, when
    /// the store's log reaches back that far and is not too long.
    fn stored_events_after(&self, after_seq: u64) -> Option<Vec<Arc<ConvEvent>>> {
        let replay = StoredReplay {
            transcript: &self.transcript,
            max_attempts: self.shared.config.retry.max_attempts,
            continuing: self.record.conversation.continuation.automatic(),
        };
        replay.after(&self.shared.store, &self.record.id, after_seq)
    }

    /// Persists a reservation of sequence numbers ahead of the next one, so
    /// a restarted daemon continues above anything a client may have seen.
    pub(super) async fn extend_reservation(&mut self) -> Result<(), crate::store::StoreError> {
        self.record.seq_reserved = reservation_from(self.fanout.next_seq());
        self.write_record().await
    }
}

/// How stored events become the events clients see.
struct StoredReplay<'a> {
    /// Where appended messages are taken from (the log names them).
    transcript: &'a [Message],
    max_attempts: u32,
    /// Whether the conversation is continued by the daemon (notices say so).
    continuing: bool,
}

impl StoredReplay<'_> {
    /// The events of conversation `conv_id` in `store` after `after_seq`;
    /// None when the log does not reach back that far, is too long, or
    /// names a message the transcript lacks.
    fn after(&self, store: &Store, conv_id: &str, after_seq: u64) -> Option<Vec<Arc<ConvEvent>>> {
        if !store.events_cover(conv_id, after_seq).ok()? {
            return None;
        }
        let stored = store
            .events_after(conv_id, after_seq, MAX_STORED_REPLAY)
            .ok()??;
        stored
            .into_iter()
            .map(|(seq, event)| {
                let (at_ms, kind) = self.event(event)?;
                Some(Arc::new(ConvEvent::new(seq, at_ms, kind)))
            })
            .collect()
    }

    /// One stored event as clients see it, with its time.
    fn event(&self, event: StoredEvent) -> Option<(i64, EventKind)> {
        Some(match event {
            StoredEvent::StateChanged { at_ms, state } => (
                at_ms,
                EventKind::StateChanged {
                    state,
                    max_attempts: self.max_attempts,
                },
            ),
            StoredEvent::MessageAppended { at_ms, message_seq } => {
                let message = message_at(self.transcript, message_seq)?;
                (
                    at_ms,
                    EventKind::MessageAppended {
                        message_seq,
                        message: message.clone(),
                    },
                )
            }
            StoredEvent::PermissionRequested {
                at_ms,
                ask,
                summary,
                diff,
            } => (
                at_ms,
                EventKind::PermissionRequested(PermissionView {
                    ask,
                    summary,
                    diff,
                    // Replayed on the conversation's own stream, whose
                    // snapshot names it.
                    sub_agent: None,
                }),
            ),
            StoredEvent::PermissionResolved {
                at_ms,
                request_id,
                decision,
                client,
                by,
            } => (
                at_ms,
                EventKind::PermissionResolved {
                    request_id,
                    decision,
                    client: by.or_else(|| {
                        client.map(|(id, name)| {
                            ClientInfo::local(id, name, agentd_core::ClientRole::Driver)
                        })
                    }),
                },
            ),
            StoredEvent::Notified { at_ms, notice } => {
                (at_ms, EventKind::from_notice(notice, self.continuing))
            }
            StoredEvent::BudgetResolved {
                at_ms,
                stop,
                raised_by,
                client,
            } => (
                at_ms,
                EventKind::BudgetResolved {
                    stop,
                    raised_by,
                    client,
                },
            ),
            StoredEvent::PlanChanged {
                at_ms,
                change,
                plan,
            } => (at_ms, EventKind::Plan { change, plan }),
            StoredEvent::HookRan {
                at_ms,
                stage,
                command,
                decision,
                duration_ms,
                error,
            } => (
                at_ms,
                EventKind::HookRan(crate::hooks::HookReport {
                    stage,
                    command,
                    decision,
                    duration_ms,
                    error,
                }),
            ),
        })
    }
}
