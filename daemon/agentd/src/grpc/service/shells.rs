//! Background shells: list them, stream a shell's output, kill one.

use super::{BoxStream, Service, caller};
use crate::grpc::access;
use crate::grpc::convert::{self, to_status};
use agent_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// Bytes of shell output per frame.
const SHELL_CHUNK: usize = 64 * 1024;

/// The full id of the shell `prefix` names.
fn resolve_shell(svc: &Service, prefix: &str) -> Result<String, Status> {
    let candidates = svc.manager.shared().shells.ids_with_prefix(prefix, 3);
    pick_shell(prefix, &candidates)
}

/// The one shell id among `candidates` (the ids `prefix` may stand for, at
/// most three): none is NotFound, several InvalidArgument naming some.
fn pick_shell(prefix: &str, candidates: &[String]) -> Result<String, Status> {
    let prefix = convert::brief(prefix.trim());
    if prefix.is_empty() {
        return Err(Status::invalid_argument("shell id is empty"));
    }
    match candidates {
        [] => Err(Status::not_found(format!("unknown shell {prefix}"))),
        [one] => Ok(one.clone()),
        [first, second] => Err(Status::invalid_argument(format!(
            "ambiguous shell prefix {prefix} (matches {first} and {second})"
        ))),
        [first, second, ..] => Err(Status::invalid_argument(format!(
            "ambiguous shell prefix {prefix} (matches {first}, {second}, …)"
        ))),
    }
}

pub(super) async fn list_shells(
    svc: &Service,
    request: Request<pb::ListShellsRequest>,
) -> Result<Response<pb::ListShellsResponse>, Status> {
    let req = request.into_inner();
    let conversation = if req.conversation_id.is_empty() {
        None
    } else {
        Some(
            svc.manager
                .resolve(&req.conversation_id)
                .map_err(to_status)?,
        )
    };
    let mut shells = svc.manager.shared().shells.list(None);
    if let Some(id) = &conversation {
        // A conversation's own shells and its sub-agents' (each named
        // by the child's id).
        let mut of_children = std::collections::HashMap::new();
        shells.retain(|r| {
            r.conversation_id == *id
                || *of_children
                    .entry(r.conversation_id.clone())
                    .or_insert_with(|| svc.manager.is_sub_agent_of(&r.conversation_id, id))
        });
    }
    Ok(Response::new(pb::ListShellsResponse {
        shells: shells.iter().map(convert::shell).collect(),
    }))
}

pub(super) async fn read_shell_output(
    svc: &Service,
    request: Request<pb::ReadShellOutputRequest>,
) -> Result<Response<BoxStream<pb::ReadShellOutputResponse>>, Status> {
    let session = caller(&request)?.session;
    let mut req = request.into_inner();
    // Fail fast on an unknown id, before the stream starts.
    req.shell_id = resolve_shell(svc, &req.shell_id)?;
    let shells = svc.manager.shared().shells.clone();
    let (tx, rx) = mpsc::channel(16);
    let shutdown = svc.shutdown.clone();
    crate::tasks::spawn("shell output stream", async move {
        let mut offset = req.offset;
        loop {
            let (data, record) = match shells.read(&req.shell_id, offset, SHELL_CHUNK).await {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(convert::shell_status(e))).await;
                    return;
                }
            };
            let ended = record.status.is_ended();
            let got = data.len() as u64;
            // The last chunk carries the final record: when the shell
            // has ended and everything was read, or when not following.
            let last = got < SHELL_CHUNK as u64 && (ended || !req.follow);
            let frame = pb::ReadShellOutputResponse {
                offset,
                data,
                finished: last.then(|| convert::shell(&record)),
            };
            offset += got;
            let frame = access::session_check(session.as_ref()).map(|()| frame);
            let refused = frame.is_err();
            if tx.send(frame).await.is_err() || last || refused {
                return;
            }
            if got == 0 {
                tokio::select! {
                    _ = shells.wait_output(&req.shell_id, offset) => {}
                    status = access::session_ended(session.as_ref()) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                    _ = shutdown.cancelled() => return,
                    _ = tx.closed() => return,
                }
            }
        }
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

pub(super) async fn kill_shell(
    svc: &Service,
    request: Request<pb::KillShellRequest>,
) -> Result<Response<pb::KillShellResponse>, Status> {
    let id = resolve_shell(svc, &request.into_inner().shell_id)?;
    let record = svc
        .manager
        .shared()
        .shells
        .kill(&id)
        .await
        .map_err(convert::shell_status)?;
    Ok(Response::new(pb::KillShellResponse {
        shell: Some(convert::shell(&record)),
    }))
}

/// Has the running foreground command of call `tool_use_id` (empty: the
/// one running) of conversation `id` do `action` for the client `by`: the
/// shell id it goes on as, for a move to the background.
pub(super) async fn control(
    manager: &crate::runtime::Manager,
    id: &str,
    tool_use_id: &str,
    action: crate::shells::CommandAction,
    by: &str,
) -> Result<Option<String>, Status> {
    manager
        .shared()
        .shells
        .control(id, tool_use_id.trim(), action, by)
        .await
        .map_err(convert::shell_status)
}

/// What both command RPCs share: the conversation resolved, the client
/// named (the request's name, else the caller's), the action done.
async fn command_rpc<T>(
    svc: &Service,
    request: Request<T>,
    fields: impl FnOnce(T) -> (String, String, String),
    action: crate::shells::CommandAction,
) -> Result<Option<String>, Status> {
    let who = caller(&request)?;
    let (conversation_id, tool_use_id, client_name) = fields(request.into_inner());
    let id = svc.manager.resolve(&conversation_id).map_err(to_status)?;
    let by = super::answerer(&who, client_name, "agent").name;
    control(&svc.manager, &id, &tool_use_id, action, &by).await
}

pub(super) async fn background_command(
    svc: &Service,
    request: Request<pb::BackgroundCommandRequest>,
) -> Result<Response<pb::BackgroundCommandResponse>, Status> {
    let fields =
        |r: pb::BackgroundCommandRequest| (r.conversation_id, r.tool_use_id, r.client_name);
    let action = crate::shells::CommandAction::Background;
    let shell_id = command_rpc(svc, request, fields, action).await?;
    Ok(Response::new(pb::BackgroundCommandResponse {
        shell_id: shell_id.unwrap_or_default(),
    }))
}

pub(super) async fn kill_command(
    svc: &Service,
    request: Request<pb::KillCommandRequest>,
) -> Result<Response<pb::KillCommandResponse>, Status> {
    let fields = |r: pb::KillCommandRequest| (r.conversation_id, r.tool_use_id, r.client_name);
    let action = crate::shells::CommandAction::Kill;
    command_rpc(svc, request, fields, action).await?;
    Ok(Response::new(pb::KillCommandResponse {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_shell_prefix_resolves_only_when_it_is_unique() {
        assert_eq!(
            pick_shell("sh-ab", &ids(&["sh-abcdef"])).ok(),
            Some("sh-abcdef".into())
        );
        let none = pick_shell("sh-zz", &[])
            .err()
            .map(|s| (s.code(), s.message().to_string()));
        assert_eq!(
            none,
            Some((tonic::Code::NotFound, "unknown shell sh-zz".into()))
        );
        let two = pick_shell("sh", &ids(&["sh-a", "sh-b"])).err();
        assert_eq!(
            two.map(|s| (s.code(), s.message().to_string())),
            Some((
                tonic::Code::InvalidArgument,
                "ambiguous shell prefix sh (matches sh-a and sh-b)".into()
            ))
        );
        let many = pick_shell("sh", &ids(&["sh-a", "sh-b", "sh-c"])).err();
        assert!(many.is_some_and(|s| s.message().ends_with("(matches sh-a, sh-b, …)")));
        let empty = pick_shell(" ", &[]).err().map(|s| s.code());
        assert_eq!(empty, Some(tonic::Code::InvalidArgument));
    }
}
