//! The conversation as the core decides over it: what `transition` takes
//! and returns whole, and what is persisted with the state in one commit.

use crate::correction::Corrections;
use crate::image::ImageRef;
use crate::message::Usage;
use crate::permission::Mode;
use crate::plan::Plan;
use crate::state::{AutoContinue, ConvState};
use serde::{Deserialize, Serialize};

/// Everything about a conversation that a transition decides: its state,
/// its permission mode, its plan, its self-correction tracking, the user
/// messages queued while a turn ran, where it stands in a chain of
/// continuations and what its sub-agents used. `transition` returns the
/// new value whole, so the runtime persists it in one assignment and a
/// crash can never leave one part of it ahead of another.
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
    /// Where it stands in a chain of continuations, and whether the daemon
    /// owes it one.
    #[serde(flatten)]
    pub continuation: ContinuationChain,
    /// What its sub-agents used, counted once per child.
    #[serde(flatten)]
    pub sub_agents: SubAgents,
    /// The thinking the message that started the current (or last) turn
    /// asked for; None: the model's configured thinking. Every request of
    /// the turn asks the same, across a restart too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<crate::thinking::Thinking>,
    /// Ends of its background shells the model has yet to hear of, and
    /// the shells it has heard of.
    #[serde(flatten)]
    pub shell_notes: ShellNotes,
    /// The current turn's tool calls, for the todo-list reminder.
    #[serde(flatten)]
    pub todo_tally: crate::plan::TodoTally,
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

/// Where a conversation stands in a chain of continuations (each one
/// continues the last when its context is exhausted). Its serialized names
/// are the conversation record's from before this type existed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinuationChain {
    /// The conversation this one continues (its context was exhausted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The conversation that continues this one, once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_as: Option<String>,
    /// The daemon made that continuation by itself (`auto_continue`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continued_automatically: bool,
    /// How many continuations lead from the first conversation of the
    /// chain to this one (0: not a continuation).
    #[serde(default)]
    pub hop: u32,
    /// Exhausted, and the daemon is to continue it by itself but has not
    /// yet: set by the transition that owes it
    /// ([`Effect::ContinueInNewConversation`]), so it is written with the
    /// state and a restart finds it; cleared by [`Event::ContinuedAs`].
    ///
    /// [`Effect::ContinueInNewConversation`]: crate::effect::Effect::ContinueInNewConversation
    /// [`Event::ContinuedAs`]: crate::event::Event::ContinuedAs
    #[serde(
        default,
        rename = "continue_pending",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub pending: bool,
}

impl ContinuationChain {
    /// The chain of a new conversation that continues `parent_id`, which
    /// stood at `parent_hop`: one hop further.
    pub fn continuing(parent_id: String, parent_hop: u32) -> Self {
        ContinuationChain {
            parent_id: Some(parent_id),
            hop: parent_hop.saturating_add(1),
            ..ContinuationChain::default()
        }
    }

    /// Whether the daemon continues it by itself once it is exhausted, as
    /// `auto` says: it is on, this one was not continued, and the chain is
    /// not too long (`max_hops` continuations in a row).
    pub fn owed(&self, auto: &AutoContinue) -> bool {
        auto.enabled && self.continued_as.is_none() && self.hop < auto.max_hops
    }

    /// Whether the daemon continues it by itself, or did: clients follow
    /// such a continuation without being asked.
    pub fn automatic(&self) -> bool {
        self.pending || self.continued_automatically
    }

    /// It goes on as `next` (made by the daemon itself if `automatically`):
    /// nothing is owed any more.
    pub(crate) fn continued_as(&mut self, next: String, automatically: bool) {
        self.continued_as = Some(next);
        self.continued_automatically = automatically;
        self.pending = false;
    }
}

/// What a conversation's sub-agents used, counted once per child as each
/// ends (the conversation's own usage excludes it). Its serialized names
/// are the conversation record's from before this type existed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubAgents {
    /// What its sub-agents used (theirs included).
    #[serde(default, rename = "sub_agents_usage")]
    pub usage: Usage,
    /// What that cost at list price, USD (children of unknown price count
    /// nothing).
    #[serde(default, rename = "sub_agents_cost_usd")]
    pub cost_usd: f64,
    /// The children (conversation ids) counted in `usage`.
    #[serde(
        default,
        rename = "sub_agents_counted",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub counted: Vec<String>,
}

impl SubAgents {
    /// Counts what the child `child` used in all, unless it was counted
    /// already (its end may be reported again after a restart); a child
    /// without an id is never counted. Returns whether it was counted now.
    pub fn count(&mut self, child: &str, usage: &Usage, cost_usd: f64) -> bool {
        if child.is_empty() || self.counted.iter().any(|c| c == child) {
            return false;
        }
        self.usage.add(usage);
        self.cost_usd += cost_usd;
        self.counted.push(child.to_string());
        true
    }

    /// What they spent as the per-conversation budgets count it:
    /// micro-USD and billed tokens.
    pub fn spent(&self) -> (u64, u64) {
        (
            crate::budget::micro_usd(self.cost_usd),
            crate::budget::billed_tokens(&self.usage),
        )
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
    /// The thinking its sender asked for, should it start a turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<crate::thinking::Thinking>,
    /// The files its `@path` mentions attach, read when it was queued.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<crate::mention::Mentioned>,
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
            thinking: None,
            mentions: Vec::new(),
        }
    }
}

/// How a background shell ended, as the model is told: the note that
/// joins the next model request of the conversation that started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellNote {
    /// `sh-…`.
    pub shell_id: String,
    pub command: String,
    /// How it ended, in words: `exit code 0`, `killed`, `lost`, …
    pub status: String,
    /// The last lines of its output (the runtime caps them).
    #[serde(default)]
    pub tail: String,
}

/// The ends of a conversation's background shells: those the model has
/// not heard of yet, delivered all at once at the next model request
/// boundary (or as a new turn, `[shells] wake_on_exit`), and every shell
/// whose end was taken, so that an end reported again (after a restart)
/// is told once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellNotes {
    /// Not delivered yet, oldest first.
    #[serde(
        default,
        rename = "shell_notes_pending",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub pending: Vec<ShellNote>,
    /// Ids of the shells whose end was taken.
    #[serde(
        default,
        rename = "shells_noted",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub noted: Vec<String>,
}

impl ShellNotes {
    /// Takes the end `note` unless this shell's end was taken already;
    /// whether it was taken now.
    pub fn take(&mut self, note: &ShellNote) -> bool {
        if note.shell_id.is_empty() || self.noted.contains(&note.shell_id) {
            return false;
        }
        self.noted.push(note.shell_id.clone());
        self.pending.push(note.clone());
        true
    }
}
