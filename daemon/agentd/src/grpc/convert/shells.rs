//! Background shells as clients see them, and shell errors as statuses.

use agent_proto::v1 as pb;
use tonic::Status;

/// A background shell as clients see it.
pub(crate) fn shell(r: &crate::shells::ShellRecord) -> pb::ShellInfo {
    use crate::shells::ShellStatus;
    let (status, exit_code) = match &r.status {
        ShellStatus::Running => (pb::ShellStatus::Running, 0),
        ShellStatus::Exited { code } => (pb::ShellStatus::Exited, *code),
        ShellStatus::Killed => (pb::ShellStatus::Killed, 0),
        ShellStatus::Lost => (pb::ShellStatus::Lost, 0),
    };
    pb::ShellInfo {
        id: r.id.clone(),
        conversation_id: r.conversation_id.clone(),
        command: r.command.clone(),
        cwd: r.cwd.display().to_string(),
        pid: r.pid,
        started_at_ms: r.started_at_ms,
        status: status as i32,
        exit_code,
        output_bytes: r.output_bytes,
        ended_at_ms: r.ended_at_ms.unwrap_or(0),
    }
}

/// The one mapping from shell errors to gRPC statuses.
pub(crate) fn shell_status(e: crate::shells::ShellError) -> Status {
    use crate::shells::ShellError;
    match e {
        ShellError::NotFound(_) | ShellError::NoCommand(_) => Status::not_found(e.to_string()),
        ShellError::Refused(_) => Status::failed_precondition(e.to_string()),
        ShellError::Limit(_) => Status::resource_exhausted(e.to_string()),
        ShellError::Spawn(_) | ShellError::Io(_) => Status::internal(e.to_string()),
    }
}
