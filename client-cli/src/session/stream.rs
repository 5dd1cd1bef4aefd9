//! One Attach stream at a time: subscribing (or creating the conversation
//! on the stream), waiting on the daemon, stdin and Ctrl-C together, and
//! reconnecting with backoff when the stream breaks.

use std::time::Duration;

use agent_proto::v1::{self as pb, AttachRequest, attach_request::Frame};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use super::{Outcome, Session};
use crate::connect::connect;
use crate::error::CliError;

/// First delay before reconnecting; doubles up to [`RECONNECT_MAX_DELAY`].
const RECONNECT_FIRST_DELAY: Duration = Duration::from_millis(100);
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(2);
/// How long to keep trying before giving up on the daemon.
const RECONNECT_WINDOW: Duration = Duration::from_secs(30);
/// Streams that break before delivering anything, in a row, before giving up.
const MAX_FRUITLESS_STREAMS: u32 = 5;

/// How one Attach stream ended.
enum StreamEnd {
    Done(Outcome),
    /// The connection broke: reconnect with backoff.
    Broken {
        why: String,
        delivered: bool,
    },
    /// The daemon refused a frame and closed the stream: subscribe again now.
    Resubscribe,
}

/// Whether a daemon refused an Attach stream because it does not know the
/// `create` frame (older than it: a frame it cannot decode has no body).
fn knows_no_create_frame(status: &tonic::Status) -> bool {
    status.code() == Code::InvalidArgument
        && status.message() == "the first Attach frame must be `subscribe`"
}

impl Session<'_> {
    pub(super) async fn run(&mut self) -> Result<Outcome, CliError> {
        self.interrupts.install();
        let mut fruitless = 0;
        loop {
            match self.stream_once().await? {
                StreamEnd::Done(outcome) => return Ok(outcome),
                StreamEnd::Resubscribe => {}
                StreamEnd::Broken { why, delivered } => {
                    fruitless = if delivered { 0 } else { fruitless + 1 };
                    if fruitless >= MAX_FRUITLESS_STREAMS {
                        return Err(CliError::Disconnected(why));
                    }
                    if let Some(outcome) = self.reconnect(&why).await? {
                        return Ok(outcome);
                    }
                }
            }
        }
    }

    /// Subscribes and handles one stream until it ends.
    async fn stream_once(&mut self) -> Result<StreamEnd, CliError> {
        let (tx, rx) = mpsc::channel(32);
        // The receiver is alive: this cannot fail.
        let _ = tx
            .send(AttachRequest {
                frame: Some(self.subscribe_frame()),
            })
            .await;
        self.tx = Some(tx);
        self.send_again().await;
        let mut inbound = match self.client.attach(ReceiverStream::new(rx)).await {
            Ok(response) => response.into_inner(),
            Err(status) if self.config.create.is_some() && knows_no_create_frame(&status) => {
                // A daemon started before it knew the `create` frame (it
                // runs on until restarted after an upgrade): create the
                // conversation as before, then subscribe to it.
                self.create_first().await?;
                return Ok(StreamEnd::Resubscribe);
            }
            Err(status) => return self.stream_error(status, false),
        };
        let mut delivered = false;
        loop {
            let deadline = self.detach_deadline;
            let detach_timer = async move {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let want_line = self.reading_input && !self.input_closed;
            let outcome = tokio::select! {
                item = inbound.next() => {
                    match self.on_stream_item(item, &mut delivered).await? {
                        Some(end) => return Ok(end),
                        None => None,
                    }
                }
                line = self.input.next_line(), if want_line => self.on_line(line).await?,
                () = self.interrupts.next() => self.on_interrupt().await?,
                () = detach_timer => Some(Outcome::Detached),
            };
            if let Some(outcome) = outcome {
                return Ok(StreamEnd::Done(outcome));
            }
        }
    }

    /// The stream's first frame: create the conversation (`run`, until its
    /// snapshot names it) or subscribe after the last event seen.
    fn subscribe_frame(&self) -> Frame {
        let role = if self.config.view_only {
            pb::ClientRole::Viewer as i32
        } else {
            pb::ClientRole::Unspecified as i32
        };
        match &self.config.create {
            Some(create) => Frame::Create(pb::CreateAndSubscribe {
                create: Some(create.clone()),
                client_name: self.config.client_name.clone(),
                role,
            }),
            None => Frame::Subscribe(pb::Subscribe {
                conversation_id: self.config.conversation_id.clone(),
                after_seq: self.last_seq,
                client_name: self.config.client_name.clone(),
                role,
            }),
        }
    }

    /// What may have been lost with the old connection, sent on the new
    /// stream: a cancel (idempotent) and the messages not yet seen appended
    /// (the daemon appends each id once).
    async fn send_again(&mut self) {
        if self.interrupted || self.cancel_sent {
            self.send_frame(Frame::Cancel(pb::CancelFrame {
                client_request_id: crate::commands::request_id(),
            }))
            .await;
        }
        for message in self.outbox.unconfirmed() {
            self.send_frame(Frame::Send(message)).await;
        }
    }

    /// One item from the daemon: `Some` when the stream is over.
    async fn on_stream_item(
        &mut self,
        item: Option<Result<pb::AttachResponse, tonic::Status>>,
        delivered: &mut bool,
    ) -> Result<Option<StreamEnd>, CliError> {
        match item {
            Some(Ok(event)) => {
                *delivered = true;
                if let Some(outcome) = self.handle(event).await? {
                    return Ok(Some(StreamEnd::Done(outcome)));
                }
                if std::mem::take(&mut self.follow) {
                    return Ok(Some(StreamEnd::Resubscribe));
                }
                Ok(None)
            }
            Some(Err(status))
                if !*delivered
                    && self.config.create.is_some()
                    && knows_no_create_frame(&status) =>
            {
                // As when opening the stream, the refusal sent on the stream.
                self.create_first().await?;
                Ok(Some(StreamEnd::Resubscribe))
            }
            Some(Err(status)) => self.stream_error(status, *delivered).map(Some),
            None => Ok(Some(StreamEnd::Broken {
                why: "the daemon closed the stream".to_string(),
                delivered: *delivered,
            })),
        }
    }

    /// Decides what an error status on the stream means.
    fn stream_error(
        &mut self,
        status: tonic::Status,
        delivered: bool,
    ) -> Result<StreamEnd, CliError> {
        self.tx = None;
        if status.code() == Code::NotFound && status.message().ends_with(" was deleted") {
            // Deleted while attached: the daemon ended the stream saying so.
            return Err(CliError::conversation_status(
                status,
                &self.config.conversation_id,
            ));
        }
        if status.code() == Code::OutOfRange {
            // A frame over the daemon's size limit: it closed the stream
            // there, and read nothing sent after it.
            return Err(CliError::Refused(format!(
                "{}; the daemon closed the stream, so nothing typed from there on was sent",
                status.message()
            )));
        }
        match status.code() {
            Code::Unavailable
            | Code::Unknown
            | Code::Internal
            | Code::Cancelled
            | Code::Aborted => {
                let why = broken_reason(&status);
                return Ok(StreamEnd::Broken { why, delivered });
            }
            _ => {}
        }
        if delivered && (self.answered.is_some() || !self.outbox.is_empty()) {
            // The daemon refused something this client sent (a late answer,
            // a message while busy): say so and carry on.
            let error = CliError::conversation_status(status, &self.config.conversation_id);
            self.refused(&error.to_string())?;
            return Ok(StreamEnd::Resubscribe);
        }
        Err(CliError::conversation_status(
            status,
            &self.config.conversation_id,
        ))
    }

    /// Connects again with backoff. `Some` when the session ended meanwhile.
    async fn reconnect(&mut self, why: &str) -> Result<Option<Outcome>, CliError> {
        self.tx = None;
        self.render
            .stream_broken()
            .map_err(|e| CliError::io("writing output", e))?;
        self.note(&format!("reconnecting… ({why})"))?;
        let give_up = Instant::now() + RECONNECT_WINDOW;
        let mut delay = RECONNECT_FIRST_DELAY;
        loop {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.interrupts.next() => return Ok(Some(Outcome::Interrupted)),
            }
            match connect(&self.config.socket).await {
                Ok(client) => {
                    self.client = client;
                    self.note("reconnected")?;
                    return Ok(None);
                }
                Err(e) if Instant::now() >= give_up => {
                    return Err(CliError::Disconnected(format!("{why}; {e}")));
                }
                Err(_) => {}
            }
            delay = (delay * 2).min(RECONNECT_MAX_DELAY);
        }
    }

    pub(super) async fn send_frame(&mut self, frame: Frame) {
        if let Some(tx) = &self.tx {
            // A failure means the stream is gone; the reconnect logic takes over.
            let _ = tx.send(AttachRequest { frame: Some(frame) }).await;
        }
    }
}

/// Why a stream broke, for people: the daemon's own words when it said
/// something (e.g. "shutting down"), not the transport's internals.
fn broken_reason(status: &tonic::Status) -> String {
    let message = status.message();
    let internal = [
        "h2 protocol error",
        "transport error",
        "error reading a body",
        "connection reset",
    ];
    if message.is_empty() || internal.iter().any(|i| message.contains(i)) {
        "connection lost".to_string()
    } else {
        message.to_string()
    }
}
