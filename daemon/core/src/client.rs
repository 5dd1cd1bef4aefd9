//! Who is talking to a conversation.

use serde::{Deserialize, Serialize};

/// A client attached to a conversation, or one that answered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// The id the daemon gave the client's connection.
    pub id: String,
    /// The name the client gave (`user@host`, an editor's name, …).
    pub name: String,
}
