//! The Attach stream: a client subscribes to (or creates) a conversation,
//! one task forwards the conversation's events to it through its outbox,
//! and another reads the frames it sends (messages, answers, cancels).

use super::conversations::new_conversation;
use super::forward::forward;
use super::{Service, caller, check_text, frame_status};
use crate::config::GrpcSection;
use crate::grpc::access::{self, FrameKind};
use crate::grpc::convert::{self, to_status};
use crate::grpc::wire::FrameTx;
use crate::runtime::Manager;
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// Frames buffered in an attached client's stream. Small on purpose: what
/// does not fit waits in the client's outbox, where deltas still merge.
const CLIENT_BUFFER: usize = 16;

fn local_error(message: String) -> pb::AttachResponse {
    pb::AttachResponse {
        seq: 0,
        at_ms: 0,
        event: Some(pb::attach_response::Event::Error(pb::ErrorEvent {
            message,
            kind: pb::ErrorKind::Unspecified as i32,
        })),
    }
}

/// Whether reading a request stream failed because its connection ended
/// (the client closed it or died), not because of what the client sent. A
/// frame the client sent wrong is a decode error (INTERNAL) or too large
/// (OUT_OF_RANGE); the transport's own failures come from h2 and hyper,
/// which tonic reports with their reason's code and an "h2 protocol error"
/// message.
fn connection_ended(status: &Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Cancelled | tonic::Code::Unknown | tonic::Code::Unavailable
    ) || status.message().starts_with("h2 protocol error")
}

pub(super) async fn attach(
    svc: &Service,
    request: Request<Streaming<pb::AttachRequest>>,
) -> Result<Response<crate::grpc::wire::Frames>, Status> {
    let who = caller(&request)?;
    let mut inbound = request.into_inner();
    let first = match inbound
        .message()
        .await
        .map_err(|s| frame_status(s, "the first Attach frame"))?
    {
        Some(f) => f,
        None => {
            return Err(Status::invalid_argument(
                "the Attach stream ended before `subscribe`",
            ));
        }
    };
    let name_of = |given: String| {
        if given.trim().is_empty() && who.name.is_none() && who.remote.is_none() {
            "anonymous".to_string()
        } else {
            given
        }
    };
    let (id, subscription) = match first.frame {
        Some(pb::attach_request::Frame::Subscribe(sub)) => {
            let id = svc
                .manager
                .resolve(&sub.conversation_id)
                .map_err(to_status)?;
            let asked = convert::role_from(sub.role)?;
            let client = who.client(String::new(), &name_of(sub.client_name), asked);
            let subscription = svc
                .manager
                .subscribe(&id, sub.after_seq, client)
                .await
                .map_err(to_status)?;
            (id, subscription)
        }
        Some(pb::attach_request::Frame::Create(create)) => {
            // What CreateConversation needs, whatever role the stream
            // then asks for.
            let (needed, what) = access::frame_need(FrameKind::Create);
            access::check_role(who.role, needed, what)?;
            let asked = convert::role_from(create.role)?;
            let client = who.client(String::new(), &name_of(create.client_name), asked);
            let (new, prompt) = new_conversation(svc, &who, create.create.unwrap_or_default())?;
            let (record, subscription) = svc
                .manager
                .create_attached(new, prompt, client)
                .await
                .map_err(to_status)?;
            (record.id, subscription)
        }
        _ => {
            return Err(Status::invalid_argument(
                "the first Attach frame must be `subscribe` or `create`",
            ));
        }
    };
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    let client = subscription.client.clone();
    crate::tasks::spawn(
        "Attach forward",
        forward(
            svc.manager.clone(),
            id.clone(),
            subscription,
            tx.clone(),
            svc.shutdown.clone(),
            who.session.clone(),
        ),
    );
    crate::tasks::spawn(
        "Attach reader",
        read_frames(
            svc.manager.clone(),
            id,
            (client, who.session),
            inbound,
            tx,
            svc.shutdown.clone(),
        ),
    );
    Ok(Response::new(crate::grpc::wire::Frames::new(rx)))
}

/// Reads a client's frames after `subscribe`. Refusals of its own requests
/// go back to that client only (sequence number 0).
async fn read_frames(
    manager: Arc<Manager>,
    id: String,
    (client, session): (crate::runtime::ClientInfo, Option<access::Session>),
    mut inbound: Streaming<pb::AttachRequest>,
    tx: FrameTx,
    shutdown: CancellationToken,
) {
    let limits = &manager.shared().config.grpc;
    let stream = (id.as_str(), &client);
    while let Some(frame) = next_frame(stream, &mut inbound, &tx, &shutdown, session.as_ref()).await
    {
        // Nothing is done, or recorded, under a token revoked or expired
        // since the stream began.
        if let Err(status) = access::session_check(session.as_ref()) {
            let _ = tx.try_send(Err(status));
            break;
        }
        if let Some(kind) = frame_kind(&frame.frame) {
            let (needed, what) = access::frame_need(kind);
            if let Err(refused) = access::check_role(client.role, needed, what) {
                if tx
                    .send(crate::grpc::wire::frame(&local_error(
                        refused.message().to_string(),
                    )))
                    .await
                    .is_err()
                {
                    break;
                }
                continue;
            }
        }
        let outcome = apply_frame(&manager, &id, &client, limits, frame.frame).await;
        if let Err(status) = outcome
            && tx
                .send(crate::grpc::wire::frame(&local_error(
                    status.message().to_string(),
                )))
                .await
                .is_err()
        {
            break;
        }
    }
}

/// The next frame of a client's Attach stream (`stream`: its conversation
/// and client, for the log), or None when the stream is to end: the daemon
/// shuts down, the client went away or its token ended, or a frame could
/// not be read (the client is told why).
async fn next_frame(
    (id, client): (&str, &crate::runtime::ClientInfo),
    inbound: &mut Streaming<pb::AttachRequest>,
    tx: &FrameTx,
    shutdown: &CancellationToken,
    session: Option<&access::Session>,
) -> Option<pb::AttachRequest> {
    tokio::select! {
        biased;
        _ = shutdown.cancelled() => None,
        _ = tx.closed() => None,
        // The stream's forwarding task ends it with the reason.
        _ = access::session_ended(session) => None,
        m = inbound.message() => match m {
            Ok(Some(f)) => Some(f),
            Ok(None) => None,
            Err(status) if connection_ended(&status) => {
                // The client went away without ending its stream (a
                // terminal closed, `agent run` done): nothing to tell.
                tracing::debug!(conversation = %id, client = %client.name, "Attach stream ended with its connection: {}", status.message());
                None
            }
            Err(status) => {
                // The stream cannot be read past a frame it could not
                // decode: end it with a status that says why, to this
                // client only.
                let status = frame_status(status, "Attach frame");
                tracing::warn!(conversation = %id, client = %client.name, "closing an Attach stream: {}", status.message());
                tokio::select! {
                    _ = tx.send(Err(status)) => {}
                    _ = shutdown.cancelled() => {}
                }
                None
            }
        },
    }
}

/// Which kind of frame `frame` is, for the role it needs.
fn frame_kind(frame: &Option<Frame>) -> Option<FrameKind> {
    match frame {
        Some(Frame::Subscribe(_)) => Some(FrameKind::Subscribe),
        Some(Frame::Create(_)) => Some(FrameKind::Create),
        Some(Frame::Send(_)) => Some(FrameKind::Send),
        Some(Frame::Answer(_)) => Some(FrameKind::Answer),
        Some(Frame::Cancel(_)) => Some(FrameKind::Cancel),
        Some(Frame::Budget(_)) => Some(FrameKind::Budget),
        Some(Frame::Background(_) | Frame::Kill(_)) => Some(FrameKind::Command),
        None => None,
    }
}

/// Does what a frame after `subscribe` asks, as `client`.
async fn apply_frame(
    manager: &Manager,
    id: &str,
    client: &crate::runtime::ClientInfo,
    limits: &GrpcSection,
    frame: Option<Frame>,
) -> Result<(), Status> {
    match frame {
        Some(Frame::Subscribe(_) | Frame::Create(_)) => {
            Err(Status::invalid_argument("already subscribed"))
        }
        Some(Frame::Send(s)) => send_frame(manager, id, client, limits, s).await,
        Some(Frame::Answer(a)) => {
            match check_text(limits, "feedback", &a.feedback).and_then(|()| {
                convert::answer_from(
                    a.request_id,
                    a.decision,
                    a.feedback,
                    a.scope,
                    client.clone(),
                    a.client_request_id,
                    a.plan_answer,
                )
            }) {
                Ok(answer) => manager.answer(id, answer).await.map_err(to_status),
                Err(s) => Err(s),
            }
        }
        Some(Frame::Cancel(c)) => match convert::client_request_id_from(c.client_request_id) {
            Ok(client_request_id) => manager
                .cancel_request(id, client_request_id)
                .await
                .map(|_| ())
                .map_err(to_status),
            Err(refused) => Err(refused),
        },
        Some(Frame::Budget(b)) => {
            let answer = crate::runtime::BudgetAnswer {
                raise: b.raise,
                raise_by: b.raise_by,
                by: Some(client.clone()),
            };
            manager
                .answer_budget(id, answer)
                .await
                .map(|_| ())
                .map_err(to_status)
        }
        Some(Frame::Background(c)) => {
            let action = crate::shells::CommandAction::Background;
            super::shells::control(manager, id, &c.tool_use_id, action, &client.name)
                .await
                .map(|_| ())
        }
        Some(Frame::Kill(c)) => {
            let action = crate::shells::CommandAction::Kill;
            super::shells::control(manager, id, &c.tool_use_id, action, &client.name)
                .await
                .map(|_| ())
        }
        None => Err(Status::invalid_argument("empty Attach frame")),
    }
}

/// A `send` frame: the message checked as SendMessage checks it, then sent
/// from `client`.
async fn send_frame(
    manager: &Manager,
    id: &str,
    client: &crate::runtime::ClientInfo,
    limits: &GrpcSection,
    s: pb::SendMessageFrame,
) -> Result<(), Status> {
    let images = convert::uploads(&manager.shared().config.images.limits(), s.images);
    if let Err(refused) = check_text(limits, "message text", &s.text) {
        Err(refused)
    } else {
        let thinking = convert::thinking_from(s.thinking.as_ref());
        match convert::client_request_id_from(s.client_request_id)
            .and_then(|id| images.map(|images| (id, images)))
            .and_then(|(id, images)| thinking.map(|thinking| (id, images, thinking)))
        {
            Ok((client_request_id, images, thinking)) => {
                let message = crate::runtime::NewMessage {
                    text: s.text,
                    images,
                    client_request_id,
                    expected_turn: s.expected_turn,
                    queue_if_busy: s.queue_if_busy,
                    from: Some(client.clone()),
                    by: None,
                    thinking,
                };
                manager
                    .send_message(id, message)
                    .await
                    .map(|_| ())
                    .map_err(to_status)
            }
            Err(refused) => Err(refused),
        }
    }
}
