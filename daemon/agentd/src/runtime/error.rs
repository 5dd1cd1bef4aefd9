//! Runtime errors, each with one explicit mapping to a gRPC status in
//! `grpc/convert/mod.rs`.

use crate::store::StoreError;
use agentd_core::Rejected;

/// Why the runtime refused or failed a request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RuntimeError {
    /// No conversation with that id or prefix.
    #[error("unknown conversation {0}")]
    NotFound(String),
    /// A prefix that matches several conversations.
    #[error("ambiguous conversation prefix {prefix} (matches {examples})")]
    Ambiguous {
        prefix: String,
        /// Some of the matches.
        examples: String,
    },
    /// The request itself is malformed.
    #[error("{0}")]
    InvalidArgument(String),
    /// Not allowed by how the daemon was started.
    #[error("{0}")]
    NotAllowed(String),
    /// A message's expected-turn guard names another turn than the
    /// current one: something happened that its sender has not seen.
    #[error(
        "the conversation is at turn {current}, not {expected}: another message came first; look again before sending"
    )]
    StaleTurn { expected: u64, current: u64 },
    /// A `user_prompt_submit` hook refused the message.
    #[error("a user_prompt_submit hook blocked the message: {0}")]
    HookBlocked(String),
    /// No queued message with that id (it was delivered or dropped).
    #[error("no queued message {id} in conversation {conversation} (it was delivered or dropped)")]
    NotQueued { id: String, conversation: String },
    /// The conversation's queue holds as many messages as it may.
    #[error(
        "{0} messages are queued already, the most a conversation keeps; wait for the agent to read them or drop some (`agent queue`)"
    )]
    QueueFull(usize),
    /// The state machine refused the event.
    #[error("{0}")]
    Rejected(Rejected),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("agentd is shutting down")]
    ShuttingDown,
}
