//! The records the store keeps, as they are serialized: conversations,
//! their queued messages and remembered requests, durable events, rule
//! scopes and trusted directories. Kept apart from the trees they live in.

pub(crate) use agentd_core::QueuedMessage;
use agentd_core::{ConvState, Conversation, Usage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A conversation as stored. Its groups are flattened: the stored JSON is
/// one flat object, as records written before they existed are, so both
/// read the same. A field added later gets its default in every record
/// made (`..ConversationRecord::default()`), a fork's included.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConversationRecord {
    /// ULID.
    pub id: String,
    /// From the first user message.
    pub title: String,
    /// Working directory, fixed at creation.
    pub cwd: PathBuf,
    pub model: String,
    /// Unix ms.
    pub created_at_ms: i64,
    /// Unix ms.
    pub updated_at_ms: i64,
    /// What transitions decide (state, mode, plan, corrections, queue,
    /// where it stands in a chain of continuations, what its sub-agents
    /// used): written whole with each transition.
    #[serde(flatten)]
    pub conversation: Conversation,
    /// What its creator chose beyond the model and the mode (a fork keeps
    /// it).
    #[serde(flatten)]
    pub setup: Setup,
    /// Messages in the transcript (= the last message seq).
    pub message_count: u64,
    /// Sum of usage over replies.
    #[serde(default)]
    pub usage: Usage,
    /// Event sequence numbers below this may have been handed out; a
    /// restarted actor continues above it so no number is reused.
    #[serde(default)]
    pub seq_reserved: u64,
    /// User messages accepted so far: the turn a client's expected-turn
    /// guard names.
    #[serde(default)]
    pub turns: u64,
    /// What the latest requests that carried a client request id did,
    /// oldest first: a retry is answered from here. Written in the same
    /// record as the request's effect, so both or neither survive a crash.
    #[serde(default)]
    pub requests: Vec<RememberedRequest>,
    /// The number the next queued message gets (its id is `q<number>`).
    #[serde(default)]
    pub queued_next: u64,
    /// Usage of the latest reply: how full the context is now.
    #[serde(default)]
    pub last_usage: Usage,
    /// Requests send the large tool outputs of the messages before this
    /// index as a note (see `agentd_core::prune`); the transcript keeps
    /// them. Only moves forward; 0: nothing pruned.
    #[serde(default, skip_serializing_if = "is_no_index")]
    pub pruned_through: usize,
    /// What people raised this conversation's own budgets by (the daily
    /// budgets' raises are the day's, see `Store::day_raises`).
    #[serde(default, skip_serializing_if = "agentd_core::Amounts::is_empty")]
    pub budget_raised: agentd_core::Amounts,
    /// Set when a `spawn_agents` call of another conversation started this
    /// one (REQ-BED-009: not user initiated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_agent: Option<SubAgentLink>,
    /// The conversation a rewind forked it from, if one did.
    #[serde(flatten)]
    pub fork: ForkOrigin,
    /// Put away (`agent archive`): left out of listings unless asked for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
    /// The models its replies came from, and what each used.
    #[serde(flatten)]
    pub models: ModelHistory,
}

/// The models a conversation's replies came from (`/model` and `agent set
/// --model` switch it), and what each used: costs are counted at each
/// model's own price.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelHistory {
    /// Each switch, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_switches: Vec<ModelSwitch>,
    /// Usage per model. Records written before it was kept have their
    /// usage in `usage` only: [`ConversationRecord::usage_by_model`] counts
    /// the rest for the first model.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage_by_model: BTreeMap<String, Usage>,
    /// A switch to this model was asked for while the conversation filled
    /// more of the context than its window holds: the conversation is
    /// summarized by the current model and continues on this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_on: Option<String>,
}

/// From message `at` on, replies come from `to` instead of `from`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSwitch {
    pub at: u64,
    pub from: String,
    pub to: String,
}

impl ConversationRecord {
    /// The model message `seq` was (or will be) answered by.
    pub fn model_at(&self, seq: u64) -> &str {
        let switches = &self.models.model_switches;
        match switches.iter().rev().find(|s| s.at <= seq) {
            Some(s) => &s.to,
            None => switches.first().map_or(&self.model, |s| &s.from),
        }
    }

    /// Switches to `model` from the next message on.
    pub fn switch_model(&mut self, model: String) {
        let from = std::mem::replace(&mut self.model, model.clone());
        self.models.model_switches.push(ModelSwitch {
            at: self.message_count + 1,
            from,
            to: model,
        });
    }

    /// Counts a reply of the current model.
    pub fn count_reply(&mut self, usage: &Usage) {
        self.usage.add(usage);
        self.last_usage = *usage;
        self.models
            .usage_by_model
            .entry(self.model.clone())
            .or_default()
            .add(usage);
    }

    /// What each model used, by name; usage counted before models were
    /// told apart goes to the first model.
    pub fn usage_by_model(&self) -> Vec<(String, Usage)> {
        let mut by_model = self.models.usage_by_model.clone();
        let mut counted = Usage::default();
        for u in by_model.values() {
            counted.add(u);
        }
        let rest = self.usage.minus(&counted);
        if rest != Usage::default() {
            by_model
                .entry(self.model_at(0).to_string())
                .or_default()
                .add(&rest);
        }
        by_model.into_iter().collect()
    }
}

/// What a conversation's creator chose beyond the model and the mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// Extra directories tools may touch.
    #[serde(default)]
    pub additional_dirs: Vec<PathBuf>,
    /// Rules given at creation.
    #[serde(default)]
    pub allow_rules: Vec<String>,
    /// MCP servers given at creation (the configured ones are not copied
    /// here: they follow the config file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<super::persisted::ServerSpec>,
}

/// The conversation a rewind forked this one from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// A rewind forked this conversation from that one, ending just before
    /// its message `forked_at` (`agent rewind --conversation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forked_at: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_no_index(n: &usize) -> bool {
    *n == 0
}

/// What ties a sub-agent to its parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubAgentLink {
    /// The conversation whose `spawn_agents` call started it.
    pub parent_id: String,
    /// Its id in the parent's call (`agent_{n}_{tool_use_id}`).
    pub agent_id: String,
    /// The label the parent gave it.
    pub description: String,
    /// How it ended, once it has: written in the same commit as the state
    /// that ends it, so a restart finds it and reports it to the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<SubAgentEnd>,
    /// The sub-agent type it runs as, as it was when it was spawned (a
    /// restart resumes it with the same type, whatever its file says
    /// now); `None`: the general one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<SubAgentType>,
}

/// A sub-agent type as a child runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubAgentType {
    pub name: String,
    /// The only tools it is offered and may call (with `submit_result`),
    /// as the daemon calls them; `None`: its parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Added to its system prompt.
    pub prompt: String,
}

/// A sub-agent's end as its parent gets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubAgentEnd {
    pub result: String,
    pub success: bool,
    /// What it used in all (its own replies and its sub-agents').
    #[serde(default)]
    pub usage: Usage,
    /// What that cost, USD (0 when unknown).
    #[serde(default)]
    pub cost_usd: f64,
}

impl ConversationRecord {
    /// Whether a user started it (REQ-BED-009), rather than a parent's
    /// `spawn_agents` call.
    pub fn user_initiated(&self) -> bool {
        self.sub_agent.is_none()
    }

    /// Whether start-up has something to do for it: a turn was in flight,
    /// or a continuation the daemon owes.
    pub fn needs_recovery(&self) -> bool {
        !self.conversation.state.is_at_rest() || self.conversation.continuation.pending
    }
}

/// A request a client identified, and what it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RememberedRequest {
    /// The client's request id.
    pub id: String,
    /// When it took effect, Unix ms.
    pub at_ms: i64,
    pub outcome: RequestOutcome,
}

/// What a remembered request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RequestOutcome {
    /// A user message, appended as this message.
    Sent { message_seq: u64 },
    /// A permission answer, accepted.
    Answered,
    /// A cancel; whether a turn was running.
    Cancelled { was_busy: bool },
    /// A user message queued while a turn ran, as `q<number>`.
    Queued { number: u64 },
}

/// An event clients were told that a reconnecting client must not miss:
/// kept in the `events` tree so it can be replayed even after a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoredEvent {
    StateChanged {
        /// Unix ms.
        at_ms: i64,
        state: ConvState,
    },
    /// A message was appended (its content is in the messages tree).
    MessageAppended {
        /// Unix ms.
        at_ms: i64,
        message_seq: u64,
    },
    /// A permission request was raised.
    PermissionRequested {
        /// Unix ms.
        at_ms: i64,
        ask: agentd_core::PermissionAsk,
        /// For people.
        summary: String,
        /// Diff preview.
        diff: Option<String>,
    },
    /// A permission request was resolved.
    PermissionResolved {
        /// Unix ms.
        at_ms: i64,
        request_id: String,
        decision: agentd_core::Decision,
        /// Who answered: (client id, name).
        client: Option<(String, String)>,
        /// Who answered, with role, token and address (events stored
        /// before roles have `client` only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<agentd_core::ClientInfo>,
    },
    /// A notice of the core clients must not miss (context warning,
    /// continuation, exhaustion, a reached budget).
    Notified {
        /// Unix ms.
        at_ms: i64,
        notice: agentd_core::Notice,
    },
    /// A reached budget was answered: raised by `raised_by`, or stopped.
    BudgetResolved {
        /// Unix ms.
        at_ms: i64,
        stop: agentd_core::BudgetStop,
        raised_by: Option<u64>,
        /// Who answered (with the role they had).
        client: Option<agentd_core::ClientInfo>,
    },
    /// A hook ran (or failed, or timed out): kept so the record of what
    /// hooks decided survives a restart.
    HookRan {
        /// Unix ms.
        at_ms: i64,
        stage: super::persisted::Stage,
        command: String,
        decision: String,
        duration_ms: u64,
        error: Option<String>,
    },
    /// What happened to the conversation's plan, with the plan as it was
    /// then (issue 17): replayed to a client that resumes, so a plan's
    /// events are not live only.
    PlanChanged {
        /// Unix ms.
        at_ms: i64,
        change: agentd_core::plan::PlanEvent,
        plan: agentd_core::Plan,
    },
}

/// Where a rule added by an "always"/"never" answer applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleScope {
    /// One conversation (by id).
    Conversation(String),
    /// Every conversation in a working directory.
    Project(PathBuf),
}

impl RuleScope {
    pub(super) fn key(&self) -> Vec<u8> {
        let mut key = match self {
            RuleScope::Conversation(id) => format!("conv\0{id}"),
            RuleScope::Project(dir) => format!("project\0{}", dir.display()),
        }
        .into_bytes();
        key.push(0);
        key
    }
}

/// What trusting a directory pinned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustRecord {
    /// The project hooks files at or under the directory when it was
    /// trusted.
    #[serde(default)]
    pub pinned: Vec<FilePin>,
}

/// A file as it was when the user trusted it: its hooks run only while it
/// still is (a `git pull` that changes it, or another repository cloned at
/// the same path, needs a new `agent trust`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePin {
    pub path: PathBuf,
    /// Lowercase hex SHA-256 of its bytes.
    pub sha256: String,
    /// Its owner's uid.
    pub uid: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    #[test]
    fn each_model_counts_its_own_replies_and_old_usage_goes_to_the_first() {
        let mut r = ConversationRecord {
            model: "big".into(),
            // Counted before models were told apart.
            usage: usage(100, 10),
            message_count: 4,
            ..ConversationRecord::default()
        };
        r.count_reply(&usage(5, 1));
        r.switch_model("small".into());
        r.message_count = 6;
        r.count_reply(&usage(7, 2));
        assert_eq!(
            r.usage_by_model(),
            [
                ("big".to_string(), usage(105, 11)),
                ("small".to_string(), usage(7, 2))
            ]
        );
        assert_eq!(r.usage, usage(112, 13));
        assert_eq!((r.model_at(1), r.model_at(4)), ("big", "big"));
        assert_eq!((r.model_at(5), r.model_at(9)), ("small", "small"));
        // Written and read back the same.
        let back: ConversationRecord =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn a_record_that_never_switched_writes_no_model_history() {
        let mut r = ConversationRecord {
            model: "m".into(),
            ..ConversationRecord::default()
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("model_switches") && !text.contains("usage_by_model"));
        r.count_reply(&usage(1, 1));
        assert_eq!(r.usage_by_model(), [("m".to_string(), usage(1, 1))]);
        assert_eq!(r.model_at(0), "m");
    }
}
