//! The client's one error type and the mapping from gRPC statuses to the
//! one-line messages people see.

use std::path::PathBuf;

use tonic::{Code, Status};

/// How the `agent` process ends. The numbers are part of the CLI contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    /// Something failed (a gRPC error, a failed turn, bad input).
    Error,
    /// The command line was not understood.
    Usage,
    /// The conversation's context window is exhausted.
    ContextExhausted,
    /// The user pressed Ctrl-C.
    Interrupted,
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Error => 1,
            Exit::Usage => 2,
            Exit::ContextExhausted => 3,
            Exit::Interrupted => 130,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

/// Everything that can go wrong in the client. Each variant renders as one
/// line; `main` prints it as `agent: <message>`.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Nothing answered on the socket and starting a daemon did not help.
    #[error("no daemon at {} and autostart failed: {why}", socket.display())]
    AutostartFailed {
        socket: PathBuf,
        /// Why the daemon could not be started or reached.
        why: String,
    },
    /// Nothing answers on the socket and autostart is off.
    #[error("no daemon at {} (autostart is off)", .0.display())]
    NoDaemon(PathBuf),
    /// The socket exists but connecting failed for another reason (or
    /// autostart is off).
    #[error("cannot connect to agentd at {}: {why}", socket.display())]
    Connect { socket: PathBuf, why: String },
    /// No default socket path could be computed.
    #[error("{0}")]
    NoSocketPath(String),
    /// The daemon knows no conversation with this id or prefix.
    #[error("unknown conversation {0}")]
    UnknownConversation(String),
    /// The conversation was deleted (`agent rm`) while this client used it.
    #[error("conversation {0} was deleted")]
    ConversationDeleted(String),
    /// The prefix names more than one conversation.
    #[error("ambiguous conversation prefix {0}")]
    AmbiguousPrefix(String),
    /// The daemon knows no background shell with this id.
    #[error("unknown shell {0}")]
    UnknownShell(String),
    /// The daemon refused the request (FAILED_PRECONDITION, e.g. "agent is
    /// busy"); the message is passed through.
    #[error("{0}")]
    Refused(String),
    /// Any other status from the daemon.
    #[error("{0}")]
    Server(String),
    /// The connection broke and could not be re-established.
    #[error("connection to agentd lost: {0}")]
    Disconnected(String),
    /// The turn ended in the ERROR state.
    #[error("turn failed ({kind}): {message}")]
    TurnFailed {
        /// The error classification, lowercase ("auth", "network", ...).
        kind: String,
        /// The daemon's message.
        message: String,
    },
    /// The conversation's context window is exhausted.
    #[error("context window exhausted: {0}")]
    ContextExhausted(String),
    /// Bad input given to the client (a file to import, a directory, ...).
    #[error("{0}")]
    Input(String),
    /// `agent login` refused a key by its shape (the message never quotes
    /// it); nothing was stored.
    #[error("{0}")]
    BadKey(String),
    /// Reading or writing a local file or the terminal failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        source: std::io::Error,
    },
}

impl CliError {
    /// Whoever read the output has gone (`agent show ID | head`): the
    /// command stops quietly, with status 0, as ripgrep does. Only stdout
    /// can fail so: files do not, and the daemon's socket fails as
    /// [`CliError::Disconnected`].
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// The exit status this error ends the process with.
    pub fn exit(&self) -> Exit {
        match self {
            CliError::ContextExhausted(_) => Exit::ContextExhausted,
            CliError::BadKey(_) => Exit::Usage,
            CliError::AutostartFailed { .. }
            | CliError::NoDaemon(_)
            | CliError::Connect { .. }
            | CliError::NoSocketPath(_)
            | CliError::UnknownConversation(_)
            | CliError::ConversationDeleted(_)
            | CliError::AmbiguousPrefix(_)
            | CliError::UnknownShell(_)
            | CliError::Refused(_)
            | CliError::Server(_)
            | CliError::Disconnected(_)
            | CliError::TurnFailed { .. }
            | CliError::Input(_)
            | CliError::Io { .. } => Exit::Error,
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        CliError::Io {
            context: context.into(),
            source,
        }
    }

    /// Maps a status from a call about conversation `id` (as the user typed it).
    pub fn conversation_status(status: Status, id: &str) -> Self {
        let message = status.message().to_string();
        match status.code() {
            // The daemon's words when it ends the stream of a conversation
            // deleted meanwhile.
            Code::NotFound if message.ends_with(" was deleted") => {
                CliError::ConversationDeleted(id.to_string())
            }
            Code::NotFound if names(&message, "conversation") => {
                CliError::UnknownConversation(id.to_string())
            }
            // The daemon's own wording also lists some matches: keep it.
            Code::InvalidArgument if message.starts_with("ambiguous conversation prefix") => {
                CliError::Server(message)
            }
            Code::InvalidArgument if message.to_lowercase().contains("ambiguous") => {
                CliError::AmbiguousPrefix(id.to_string())
            }
            _ => CliError::status(status),
        }
    }

    /// Maps a status from a call about background shell `id`.
    pub fn shell_status(status: Status, id: &str) -> Self {
        if status.code() == Code::NotFound && names(status.message(), "shell") {
            return CliError::UnknownShell(id.to_string());
        }
        CliError::status(status)
    }

    /// Maps a status with no particular object in mind.
    pub fn status(status: Status) -> Self {
        let message = status.message().to_string();
        let message = if message.is_empty() {
            format!("{:?}", status.code())
        } else {
            message
        };
        match status.code() {
            Code::FailedPrecondition => CliError::Refused(message),
            Code::Unavailable => CliError::Disconnected(message),
            Code::Ok
            | Code::Cancelled
            | Code::Unknown
            | Code::InvalidArgument
            | Code::DeadlineExceeded
            | Code::NotFound
            | Code::AlreadyExists
            | Code::PermissionDenied
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::OutOfRange
            | Code::Unimplemented
            | Code::Internal
            | Code::DataLoss
            | Code::Unauthenticated => CliError::Server(message),
        }
    }
}

/// Whether a NOT_FOUND message is about `what` (or says nothing at all, in
/// which case the object asked about is the natural subject).
fn names(message: &str, what: &str) -> bool {
    message.is_empty() || message.to_lowercase().contains(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_become_the_documented_messages() {
        let e = CliError::conversation_status(Status::not_found("no such conversation"), "01AB");
        assert_eq!(e.to_string(), "unknown conversation 01AB");
        let e = CliError::conversation_status(
            Status::invalid_argument("ambiguous prefix 01 matches 2 conversations"),
            "01",
        );
        assert_eq!(e.to_string(), "ambiguous conversation prefix 01");
        let e = CliError::conversation_status(
            Status::invalid_argument("ambiguous conversation prefix 01 (matches 01A, 01B)"),
            "01",
        );
        assert_eq!(
            e.to_string(),
            "ambiguous conversation prefix 01 (matches 01A, 01B)"
        );
        let e = CliError::conversation_status(Status::failed_precondition("agent is busy"), "01");
        assert_eq!(e.to_string(), "agent is busy");
        let e =
            CliError::conversation_status(Status::not_found("no pending permission request"), "x");
        assert_eq!(e.to_string(), "no pending permission request");
        let e = CliError::shell_status(Status::not_found(""), "s1");
        assert_eq!(e.to_string(), "unknown shell s1");
        assert_eq!(
            CliError::ContextExhausted("x".into()).exit(),
            Exit::ContextExhausted
        );
        assert_eq!(Exit::Interrupted.code(), 130);
    }
}
