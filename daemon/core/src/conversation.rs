//! The conversation as the core decides over it: what `transition` takes
//! and returns whole, and what is persisted with the state in one commit.

use crate::correction::Corrections;
use crate::image::ImageRef;
use crate::permission::Mode;
use crate::plan::Plan;
use crate::state::ConvState;
use serde::{Deserialize, Serialize};

/// Everything about a conversation that a transition decides: its state,
/// its permission mode, its plan, its self-correction tracking and the
/// user messages queued while a turn ran. `transition` returns the new
/// value whole, so the runtime persists it in one assignment and a crash
/// can never leave one part of it ahead of another.
///
/// Its serialized form is the fields of the conversation record as they
/// were stored before this type existed (it is flattened into it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub state: ConvState,
    /// The permission mode: the runtime builds the context's policy in it
    /// (`ConvContext::policy`), and a transition may change it.
    #[serde(default)]
    pub mode: Mode,
    /// The latest plan proposed (issue 17), with its steps' statuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
    /// Self-correction tracking (issue 17 point 6): the request the turn
    /// works on and its open correction chains.
    #[serde(default, skip_serializing_if = "Corrections::is_empty")]
    pub corrections: Corrections,
    /// User messages sent "queue if busy" while a turn ran, oldest first,
    /// not yet delivered to the model: delivered at the next model request
    /// boundary, or as the next turn when this one ends (see `transition`).
    #[serde(default, rename = "queued")]
    pub queue: Vec<QueuedMessage>,
}

impl Conversation {
    /// A conversation in `state`, with everything else at its default.
    pub fn with_state(state: ConvState) -> Self {
        Conversation {
            state,
            ..Conversation::default()
        }
    }
}

impl From<ConvState> for Conversation {
    fn from(state: ConvState) -> Self {
        Conversation::with_state(state)
    }
}

/// A user message waiting for the turn in flight to reach a point where it
/// can be delivered. The core reads its text and images; the rest is the
/// runtime's, carried along.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedMessage {
    /// `q<number>`, unique within the conversation (the runtime numbers).
    pub id: String,
    pub text: String,
    /// When it was queued, Unix ms.
    pub at_ms: i64,
    /// The client that sent it (id, name), if it came from one.
    #[serde(default)]
    pub from: Option<(String, String)>,
    /// Its images (their bytes are the runtime's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageRef>,
}

impl QueuedMessage {
    /// A message queued with `text` and nothing else (tests, simulations).
    pub fn text(text: impl Into<String>) -> Self {
        QueuedMessage {
            id: String::new(),
            text: text.into(),
            at_ms: 0,
            from: None,
            images: Vec::new(),
        }
    }
}
