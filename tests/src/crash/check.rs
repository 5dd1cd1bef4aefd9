//! The invariants the crash test checks, as functions that describe the
//! first violation they find instead of panicking.

use agent_proto::v1 as pb;
use serde_json::Value;

use super::responder::{self, SubTag, Tag};

/// One content block, in a form both a stored message and a model request
/// reduce to.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    /// Reasoning with its signature.
    Thinking(String, String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        /// The call it answers.
        id: String,
        content: String,
        is_error: bool,
    },
}

/// A message reduced to its role and blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// "user" or "assistant".
    pub role: &'static str,
    /// The blocks in order.
    pub blocks: Vec<Block>,
}

fn role_name(role: i32) -> &'static str {
    match pb::Role::try_from(role) {
        Ok(pb::Role::User) => "user",
        Ok(pb::Role::Assistant) => "assistant",
        _ => "unspecified",
    }
}

/// The blocks of a stored message.
pub fn blocks_of(m: &pb::Message) -> Vec<Block> {
    use pb::content_block::Block as B;
    m.content
        .iter()
        .filter_map(|b| match b.block.as_ref()? {
            B::Text(t) => Some(Block::Text(t.text.clone())),
            // Crash checks are about text, calls and results.
            B::Image(_) | B::ServerTool(_) => None,
            B::Thinking(t) => Some(Block::Thinking(t.thinking.clone(), t.signature.clone())),
            B::ToolUse(t) => Some(Block::ToolUse {
                id: t.id.clone(),
                name: t.name.clone(),
                input: serde_json::from_str(&t.input_json)
                    .unwrap_or_else(|_| Value::String(t.input_json.clone())),
            }),
            B::ToolResult(r) => Some(Block::ToolResult {
                id: r.tool_use_id.clone(),
                content: r.content.clone(),
                is_error: r.is_error,
            }),
        })
        .collect()
}

fn uses(blocks: &[Block]) -> Vec<&str> {
    blocks
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

fn results(blocks: &[Block]) -> Vec<&str> {
    blocks
        .iter()
        .filter_map(|b| match b {
            Block::ToolResult { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

/// The exact texts the daemon writes (`daemon/core/src/texts.rs`).
pub mod texts {
    /// Result of a tool that was running when the daemon died.
    pub const RESTARTED_WHILE_RUNNING: &str =
        "agentd restarted while this tool was running; its effects are unknown";
    /// Result of a tool that had not started when the daemon died.
    pub const SKIPPED_DUE_TO_RESTART: &str = "Skipped: agentd restarted before this tool ran";
    /// Result of a tool that was running when the user cancelled.
    pub const CANCELLED_BY_USER: &str = "Cancelled by user";
    /// Result of a tool that had not started when the user cancelled.
    pub const SKIPPED_DUE_TO_CANCELLATION: &str = "Skipped due to cancellation";
    /// The user message that marks a cancelled reply.
    pub const INTERRUPT_USER: &str = "[Request interrupted by user]";
    /// How the result of a call denied with "deny and stop" begins.
    pub const INTERRUPT_TOOL: &str = "[Request interrupted by user for tool use]";
    /// Result of a call skipped because an earlier one was denied with
    /// "deny and stop".
    pub const SKIPPED_AFTER_INTERRUPT: &str =
        "Skipped: the user stopped this reply at an earlier tool";
    /// Result of an accepted `submit_result`.
    pub const RESULT_SUBMITTED: &str = "Result submitted to the parent conversation.";
    /// Result of a call after `submit_result` in the same reply.
    pub const SKIPPED_AFTER_SUBMIT: &str = "Skipped: the sub-agent already submitted its result";
    /// How the reminder to call `submit_result` begins.
    pub const SUBMIT_RESULT_REMINDER: &str = "You ended your turn without calling submit_result.";
    /// How the result of a sub-agent that never called `submit_result`
    /// begins; its last text follows.
    pub const LAST_TEXT_RESULT: &str = "[no submit_result: the sub-agent's last text]";
    /// The result of a sub-agent that was cancelled.
    pub const SUB_AGENT_CANCELLED: &str = "Cancelled by user";
}

/// Roles alternate from user (a stored transcript may hold several user
/// messages in a row after a cancel, when `user_runs`); every tool_use is
/// answered, in order, by the tool_results of the next message, which is
/// the user's; no tool_result answers anything else. `what` names the chain
/// in the message.
pub fn chain(turns: &[Turn], what: &str, user_runs: bool) -> Result<(), String> {
    let Some(first) = turns.first() else {
        return Ok(());
    };
    if first.role != "user" {
        return Err(format!("{what}: the first message is {}'s", first.role));
    }
    for (i, t) in turns.iter().enumerate() {
        if i > 0 && turns[i - 1].role == t.role && !(user_runs && t.role == "user") {
            return Err(format!(
                "{what}: messages {} and {} are both {}'s (roles must alternate): {:?} / {:?}",
                i,
                i + 1,
                t.role,
                turns[i - 1].blocks,
                t.blocks
            ));
        }
        let called = uses(&t.blocks);
        if !called.is_empty() {
            if t.role != "assistant" {
                return Err(format!(
                    "{what}: message {} is a user's with tool_use",
                    i + 1
                ));
            }
            if let Some(next) = turns.get(i + 1) {
                let answered = results(&next.blocks);
                if answered != called {
                    return Err(format!(
                        "{what}: message {} calls {called:?} but message {} answers {answered:?}",
                        i + 1,
                        i + 2
                    ));
                }
            }
        }
        let answered = results(&t.blocks);
        if !answered.is_empty() {
            let prev = if i > 0 {
                uses(&turns[i - 1].blocks)
            } else {
                Vec::new()
            };
            if t.role != "user" || prev != answered {
                return Err(format!(
                    "{what}: message {} ({}) answers {answered:?} but the message before calls {prev:?}",
                    i + 1,
                    t.role
                ));
            }
        }
    }
    Ok(())
}

/// A stored transcript as the daemon sends it to the model: empty text and
/// unsigned thinking dropped, consecutive messages of one role merged, tool
/// results first in user messages (see the Anthropic provider).
pub fn as_sent(messages: &[pb::Message]) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::new();
    for m in messages {
        let role = role_name(m.role);
        let blocks = blocks_of(m).into_iter().filter(|b| match b {
            Block::Text(t) => !t.is_empty(),
            Block::Thinking(_, sig) => !sig.is_empty(),
            _ => true,
        });
        match out.last_mut() {
            Some(last) if last.role == role => last.blocks.extend(blocks),
            _ => {
                let blocks: Vec<Block> = blocks.collect();
                if !blocks.is_empty() {
                    out.push(Turn { role, blocks });
                }
            }
        }
    }
    for t in &mut out {
        if t.role == "user" {
            t.blocks
                .sort_by_key(|b| !matches!(b, Block::ToolResult { .. }));
        }
    }
    out
}

/// The messages of a model request.
pub fn request_turns(body: &Value) -> Result<Vec<Turn>, String> {
    let messages = body["messages"]
        .as_array()
        .ok_or_else(|| format!("a request without messages: {body}"))?;
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let role = match m["role"].as_str() {
            Some("user") => "user",
            Some("assistant") => "assistant",
            other => return Err(format!("a request message with role {other:?}")),
        };
        let mut blocks = Vec::new();
        match &m["content"] {
            Value::String(s) => blocks.push(Block::Text(s.clone())),
            Value::Array(items) => {
                for b in items {
                    blocks.push(request_block(b)?);
                }
            }
            other => return Err(format!("a request message with content {other}")),
        }
        out.push(Turn { role, blocks });
    }
    Ok(out)
}

fn request_block(b: &Value) -> Result<Block, String> {
    let s = |key: &str| b[key].as_str().unwrap_or_default().to_string();
    Ok(match b["type"].as_str() {
        Some("text") => Block::Text(s("text")),
        Some("thinking") => Block::Thinking(s("thinking"), s("signature")),
        Some("tool_use") => Block::ToolUse {
            id: s("id"),
            name: s("name"),
            input: b["input"].clone(),
        },
        Some("tool_result") => Block::ToolResult {
            id: s("tool_use_id"),
            content: match &b["content"] {
                Value::String(c) => c.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                _ => String::new(),
            },
            is_error: b["is_error"].as_bool().unwrap_or(false),
        },
        other => return Err(format!("a request block of type {other:?}: {b}")),
    })
}

/// The label of the conversation a request belongs to: from the tag of its
/// first user message.
pub fn request_conv(body: &Value) -> Option<u64> {
    let first = body["messages"].as_array()?.first()?;
    responder::texts(first)
        .into_iter()
        .find_map(Tag::parse)
        .map(|t| t.conv)
}

/// Whose transcript a model request continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKey {
    /// A conversation the test started (its label).
    Conv(u64),
    /// A sub-agent: the parent's label, the parent's turn, its agent number.
    Child(u64, u64, u32),
}

/// Whose transcript a request continues, from its first message.
pub fn request_key(body: &Value) -> Option<RequestKey> {
    let first = body["messages"].as_array()?.first()?;
    let texts = responder::texts(first);
    if let Some(sub) = texts.iter().find_map(|t| SubTag::parse(t)) {
        return Some(RequestKey::Child(sub.conv, sub.turn, sub.agent));
    }
    texts
        .into_iter()
        .find_map(Tag::parse)
        .map(|t| RequestKey::Conv(t.conv))
}

/// The task tag of a stored sub-agent, from its first message.
pub fn transcript_sub_tag(messages: &[pb::Message]) -> Option<SubTag> {
    let first = messages.first()?;
    blocks_of(first).iter().find_map(|b| match b {
        Block::Text(t) => SubTag::parse(t),
        _ => None,
    })
}

/// The label of a stored conversation, from its first message.
pub fn transcript_conv(messages: &[pb::Message]) -> Option<u64> {
    let first = messages.first()?;
    blocks_of(first).iter().find_map(|b| match b {
        Block::Text(t) => Tag::parse(t).map(|t| t.conv),
        _ => None,
    })
}

fn turns_of(messages: &[pb::Message]) -> Vec<Turn> {
    messages
        .iter()
        .map(|m| Turn {
            role: role_name(m.role),
            blocks: blocks_of(m),
        })
        .collect()
}

/// The tag of a prompt (a user message whose text carries one).
fn prompt_tag(t: &Turn) -> Option<Tag> {
    if t.role != "user" {
        return None;
    }
    t.blocks.iter().find_map(|b| match b {
        Block::Text(text) => Tag::parse(text),
        _ => None,
    })
}

/// A reply that ended its turn.
fn ended(t: &Turn, stop_reason: &str) -> bool {
    t.role == "assistant" && stop_reason == "end_turn" && uses(&t.blocks).is_empty()
}

/// What a cancel leaves at the end of a turn: the interrupt marker, or the
/// results of a cancelled tool run; or what a "deny and stop" answer
/// leaves (counted with cancels: the user stopped the turn).
fn cancel_trace(t: &Turn) -> bool {
    t.role == "user"
        && t.blocks.iter().any(|b| match b {
            Block::Text(text) => text == texts::INTERRUPT_USER,
            Block::ToolResult { content, .. } => {
                content == texts::CANCELLED_BY_USER
                    || content == texts::SKIPPED_DUE_TO_CANCELLATION
                    || content.starts_with(texts::INTERRUPT_TOOL)
                    || content == texts::SKIPPED_AFTER_INTERRUPT
            }
            _ => false,
        })
}

/// Checks a conversation at rest: sequence numbers gap-free from 1 and
/// matching the summary's count; a valid chain; every turn finished — its
/// last message is a reply that ended it, or, for a turn in `cancelled`
/// (turn numbers), what the cancel leaves.
pub fn transcript(
    id: &str,
    summary: &pb::ConversationSummary,
    messages: &[pb::Message],
    cancelled: &std::collections::HashSet<u64>,
) -> Result<(), String> {
    for (i, m) in messages.iter().enumerate() {
        let want = i as u64 + 1;
        if m.seq != want {
            let seqs: Vec<u64> = messages.iter().map(|m| m.seq).collect();
            return Err(format!(
                "conversation {id}: message sequence numbers are not gap-free from 1: {seqs:?}"
            ));
        }
    }
    if summary.message_count != messages.len() as u64 {
        return Err(format!(
            "conversation {id}: the summary counts {} messages, the transcript holds {}",
            summary.message_count,
            messages.len()
        ));
    }
    let turns = turns_of(messages);
    chain(&turns, &format!("conversation {id}"), true)?;
    let prompts: Vec<(usize, Tag)> = turns
        .iter()
        .enumerate()
        .filter_map(|(i, t)| prompt_tag(t).map(|tag| (i, tag)))
        .collect();
    if !turns.is_empty() && prompts.first().map(|p| p.0) != Some(0) {
        return Err(format!(
            "conversation {id}: the first message is not a prompt: {:?}",
            turns[0].blocks
        ));
    }
    for (k, (at, tag)) in prompts.iter().enumerate() {
        let end = prompts.get(k + 1).map_or(turns.len(), |p| p.0);
        let last = end - 1;
        let fine = ended(&turns[last], &messages[last].stop_reason)
            || (cancelled.contains(&tag.turn) && cancel_trace(&turns[last]));
        if !fine {
            let what = if cancelled.contains(&tag.turn) {
                "(cancelled) "
            } else {
                ""
            };
            return Err(format!(
                "conversation {id}: turn {}{what} (prompt at message {}) did not end: its last message, {} ({}, stop_reason {:?}), is {:?}",
                tag.turn,
                at + 1,
                last + 1,
                turns[last].role,
                messages[last].stop_reason,
                turns[last].blocks
            ));
        }
    }
    Ok(())
}

/// A sub-agent as stored: its summary and transcript.
#[derive(Debug, Clone)]
pub struct Child {
    pub summary: pb::ConversationSummary,
    pub messages: Vec<pb::Message>,
}

/// How a stored sub-agent ended: the result its parent must have been
/// given (success, text), or why it has not ended.
pub fn child_end(child: &Child) -> Result<(bool, String), String> {
    let id = &child.summary.id;
    let turns = turns_of(&child.messages);
    let Some(last) = turns.last() else {
        // Cancelled while it waited for a slot: it never ran.
        return Ok((false, texts::SUB_AGENT_CANCELLED.to_string()));
    };
    // An accepted submit_result ends it; nothing may follow.
    for (i, pair) in turns.windows(2).enumerate() {
        for b in &pair[0].blocks {
            let Block::ToolUse {
                id: call,
                name,
                input,
            } = b
            else {
                continue;
            };
            if name != "submit_result" {
                continue;
            }
            let accepted = pair[1].blocks.iter().any(|r| {
                matches!(r, Block::ToolResult { id, content, .. }
                    if id == call && content == texts::RESULT_SUBMITTED)
            });
            if !accepted {
                continue;
            }
            if i + 2 != turns.len() {
                return Err(format!(
                    "sub-agent {id}: {} message(s) after its accepted submit_result (message {})",
                    turns.len() - i - 2,
                    i + 2
                ));
            }
            let result = input["result"].as_str().unwrap_or_default().to_string();
            let success = input["success"].as_bool().unwrap_or(true);
            return Ok((success, result));
        }
    }
    if cancel_trace(last) {
        return Ok((false, texts::SUB_AGENT_CANCELLED.to_string()));
    }
    let reminders = turns
        .iter()
        .filter(|t| {
            t.role == "user"
                && t.blocks.iter().any(|b| {
                    matches!(b, Block::Text(text) if text.starts_with(texts::SUBMIT_RESULT_REMINDER))
                })
        })
        .count();
    let stop = child
        .messages
        .last()
        .map(|m| m.stop_reason.as_str())
        .unwrap_or_default();
    if reminders == 1 && ended(last, stop) {
        let text = turns
            .iter()
            .rev()
            .filter(|t| t.role == "assistant")
            .flat_map(|t| {
                t.blocks.iter().filter_map(|b| match b {
                    Block::Text(text) if !text.trim().is_empty() => Some(text.clone()),
                    _ => None,
                })
            })
            .next()
            .unwrap_or_default();
        return Ok((true, format!("{}\n{text}", texts::LAST_TEXT_RESULT)));
    }
    Err(format!(
        "sub-agent {id} did not end (no accepted submit_result, no cancel, {reminders} reminder(s)): \
         its last message, {} ({}, stop_reason {stop:?}), is {:?}",
        turns.len(),
        last.role,
        last.blocks
    ))
}

/// Checks one sub-agent at rest: gap-free sequence numbers matching its
/// summary, a valid chain, its task as the first message (the one its
/// parent asked for), and an end.
pub fn child(child: &Child, task: Option<&str>) -> Result<(), String> {
    let id = &child.summary.id;
    for (i, m) in child.messages.iter().enumerate() {
        if m.seq != i as u64 + 1 {
            let seqs: Vec<u64> = child.messages.iter().map(|m| m.seq).collect();
            return Err(format!(
                "sub-agent {id}: message sequence numbers are not gap-free from 1: {seqs:?}"
            ));
        }
    }
    if child.summary.message_count != child.messages.len() as u64 {
        return Err(format!(
            "sub-agent {id}: the summary counts {} messages, the transcript holds {}",
            child.summary.message_count,
            child.messages.len()
        ));
    }
    let turns = turns_of(&child.messages);
    chain(&turns, &format!("sub-agent {id}"), true)?;
    if let Some(first) = turns.first() {
        let text = first.blocks.iter().find_map(|b| match b {
            Block::Text(t) => Some(t.as_str()),
            _ => None,
        });
        if first.role != "user" || text.is_none() || (task.is_some() && text != task) {
            return Err(format!(
                "sub-agent {id}: its first message is not the task its parent gave ({task:?}): {:?}",
                first.blocks
            ));
        }
    }
    child_end(child).map(|_| ())
}

/// A `spawn_agents` call of a transcript.
struct SpawnCall {
    id: String,
    /// The prompts asked for, in order.
    prompts: Vec<String>,
    /// The result the call got, if any.
    result: Option<String>,
}

/// The `spawn_agents` calls of a transcript.
fn spawn_calls(turns: &[Turn]) -> Vec<SpawnCall> {
    let mut out = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        for b in &t.blocks {
            let Block::ToolUse { id, name, input } = b else {
                continue;
            };
            if name != "spawn_agents" {
                continue;
            }
            let prompts = input["agents"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| x["prompt"].as_str().unwrap_or_default().to_string())
                        .collect()
                })
                .unwrap_or_default();
            let result = turns.get(i + 1).and_then(|next| {
                next.blocks.iter().find_map(|r| match r {
                    Block::ToolResult {
                        id: answered,
                        content,
                        ..
                    } if answered == id => Some(content.clone()),
                    _ => None,
                })
            });
            out.push(SpawnCall {
                id: id.clone(),
                prompts,
                result,
            });
        }
    }
    out
}

fn usage_sum(a: &pb::Usage, b: &pb::Usage) -> pb::Usage {
    pb::Usage {
        input_tokens: a.input_tokens + b.input_tokens,
        output_tokens: a.output_tokens + b.output_tokens,
        cache_creation_input_tokens: a.cache_creation_input_tokens + b.cache_creation_input_tokens,
        cache_read_input_tokens: a.cache_read_input_tokens + b.cache_read_input_tokens,
    }
}

/// Checks a parent (at rest, its transcript checked) against its
/// sub-agents (`children`: every conversation whose parent it is):
/// - every `spawn_agents` call is answered once (the chain says so) by
///   every child's result, each once, in the order asked, with the child's
///   id and what the child's transcript says it ended with; or by a
///   cancel's or a restart's text when it never ran or was cancelled;
/// - no child result appears twice in the parent;
/// - no child is orphaned: each names a spawn call of this parent and a
///   place in it, holds the task that place asked for, and has ended;
/// - the parent's sub-agent usage is its children's usage, each counted
///   once.
///
/// Returns how many spawn calls were answered with results.
pub fn family(
    parent: &pb::ConversationSummary,
    messages: &[pb::Message],
    children: &[Child],
) -> Result<usize, String> {
    let pid = &parent.id;
    let turns = turns_of(messages);
    let calls = spawn_calls(&turns);
    let all_results: Vec<&str> = turns
        .iter()
        .flat_map(|t| t.blocks.iter())
        .filter_map(|b| match b {
            Block::ToolResult { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let mut answered = 0;
    for SpawnCall {
        id: call,
        prompts,
        result,
    } in &calls
    {
        let Some(content) = result else {
            return Err(format!(
                "conversation {pid}: spawn_agents call {call} has no result"
            ));
        };
        let synthesis = format!("synthesis_{call}: ");
        let agent = |n: usize| format!("agent_{n}_{call}");
        let sections: usize = (1..=prompts.len())
            .map(|n| {
                all_results
                    .iter()
                    .map(|r| r.matches(&format!("## {} (", agent(n))).count())
                    .sum::<usize>()
            })
            .sum();
        if !content.starts_with(&synthesis) {
            let allowed = [
                texts::CANCELLED_BY_USER,
                texts::SKIPPED_DUE_TO_CANCELLATION,
                texts::SKIPPED_DUE_TO_RESTART,
            ];
            if !allowed.contains(&content.as_str()) {
                return Err(format!(
                    "conversation {pid}: spawn_agents call {call} was answered with {content:?}"
                ));
            }
            if sections > 0 {
                return Err(format!(
                    "conversation {pid}: spawn_agents call {call} was answered {content:?}, \
                     yet {sections} of its sub-agents' results are in the transcript"
                ));
            }
            continue;
        }
        answered += 1;
        if sections != prompts.len() {
            return Err(format!(
                "conversation {pid}: spawn_agents call {call} asked for {} sub-agent(s); \
                 their results appear {sections} time(s) in the transcript: {content:?}",
                prompts.len()
            ));
        }
        let head = format!("synthesis_{call}: {} sub-agent(s) ended", prompts.len());
        if !content.starts_with(&head) {
            return Err(format!(
                "conversation {pid}: spawn_agents call {call}: its result does not begin {head:?}: {content:?}"
            ));
        }
        let mut rest: &str = content;
        for n in 1..=prompts.len() {
            let marker = format!("\n\n## {} (conversation ", agent(n));
            let Some(at) = rest.find(&marker) else {
                return Err(format!(
                    "conversation {pid}: spawn_agents call {call}: {} is missing or out of order: {content:?}",
                    agent(n)
                ));
            };
            rest = &rest[at + marker.len()..];
            let section = rest.split("\n\n## agent_").next().unwrap_or_default();
            let (head, text) = section.split_once('\n').unwrap_or((section, ""));
            let Some((child_id, outcome)) = head.split_once(") ") else {
                return Err(format!(
                    "conversation {pid}: spawn_agents call {call}: a malformed section {head:?}"
                ));
            };
            let Some(child) = children
                .iter()
                .find(|c| c.summary.id == child_id && c.summary.agent_id == agent(n))
            else {
                return Err(format!(
                    "conversation {pid}: {} reported as conversation {child_id}, which is not its sub-agent",
                    agent(n)
                ));
            };
            let (success, want) = child_end(child)?;
            let want_outcome = if success { "succeeded" } else { "failed" };
            if outcome != want_outcome || text != want {
                return Err(format!(
                    "conversation {pid}: {} ({child_id}) was reported {outcome} {text:?}, \
                     but its transcript ends {want_outcome} {want:?}",
                    agent(n)
                ));
            }
        }
    }
    let mut used = pb::Usage::default();
    for c in children {
        let cid = &c.summary.id;
        if c.summary.sub_agent_parent_id != *pid {
            return Err(format!("sub-agent {cid} is not a child of {pid}"));
        }
        let place = calls.iter().find_map(|call| {
            let n: usize = c
                .summary
                .agent_id
                .strip_prefix("agent_")?
                .strip_suffix(&format!("_{}", call.id))?
                .parse()
                .ok()?;
            call.prompts.get(n.checked_sub(1)?).map(|p| p.as_str())
        });
        let Some(task) = place else {
            return Err(format!(
                "sub-agent {cid} ({}) is an orphan: no spawn_agents call of its parent {pid} names it",
                c.summary.agent_id
            ));
        };
        child(c, Some(task))?;
        used = usage_sum(&used, &c.summary.usage.unwrap_or_default());
    }
    let rolled = parent.sub_agents_usage.unwrap_or_default();
    if rolled != used {
        return Err(format!(
            "conversation {pid}: its sub-agents' usage is {rolled:?}, but its {} sub-agent(s) used {used:?} \
             (counted twice, or not at all)",
            children.len()
        ));
    }
    Ok(answered)
}

/// Checks one model request: a valid chain, and its messages are the first
/// messages of the conversation's stored transcript, as sent — what the
/// model saw was persisted before it was sent, so it survives any crash.
/// (The last message may since have grown: a cancel's marker and the next
/// prompt merge into the user message that ended the request.)
pub fn request(n: usize, body: &Value, stored: &[pb::Message], id: &str) -> Result<(), String> {
    let sent = request_turns(body).map_err(|e| format!("request #{n}: {e}"))?;
    chain(&sent, &format!("request #{n} (conversation {id})"), false)?;
    if sent.last().map(|t| t.role) != Some("user") {
        return Err(format!(
            "request #{n} (conversation {id}) does not end with a user message"
        ));
    }
    let want = as_sent(stored);
    let k = sent.len();
    let fits = k <= want.len()
        && want[..k - 1] == sent[..k - 1]
        && want[k - 1].role == sent[k - 1].role
        && want[k - 1].blocks.starts_with(&sent[k - 1].blocks);
    if !fits {
        let at = sent
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(sent.len().min(want.len()));
        return Err(format!(
            "request #{n} (conversation {id}) is not a prefix of the stored transcript: \
             it has {} messages, the store {} (as sent); first difference at message {}:\n  request: {:?}\n  stored:  {:?}",
            sent.len(),
            want.len(),
            at + 1,
            sent.get(at),
            want.get(at)
        ));
    }
    Ok(())
}

/// Checks the tools' effects in the conversation's working directory: no
/// bash call ran twice (each appends its own stamp to `log.txt`; a daemon
/// must never run a call again after a restart), a bash call recorded as a
/// success did append its stamp, and a write recorded as a success left
/// its content.
pub fn effects(id: &str, cwd: &std::path::Path, messages: &[pb::Message]) -> Result<(), String> {
    let log = std::fs::read_to_string(cwd.join("log.txt")).unwrap_or_default();
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for line in log.lines() {
        *counts.entry(line).or_default() += 1;
    }
    if let Some((stamp, n)) = counts.iter().find(|(_, n)| **n > 1) {
        return Err(format!(
            "conversation {id}: the bash call that writes {stamp:?} ran {n} times (see {}/log.txt)",
            cwd.display()
        ));
    }
    let turns = turns_of(messages);
    for pair in turns.windows(2) {
        for b in &pair[0].blocks {
            let Block::ToolUse {
                id: call,
                name,
                input,
            } = b
            else {
                continue;
            };
            let succeeded = pair[1]
                .blocks
                .iter()
                .any(|r| matches!(r, Block::ToolResult { id, is_error: false, .. } if id == call));
            if !succeeded {
                continue;
            }
            match name.as_str() {
                "bash" => {
                    let command = input["command"].as_str().unwrap_or_default();
                    let stamp = command
                        .split("echo ")
                        .nth(1)
                        .and_then(|rest| rest.split(" >>").next())
                        .unwrap_or_default();
                    if !stamp.is_empty() && !counts.contains_key(stamp) {
                        return Err(format!(
                            "conversation {id}: bash call {call} succeeded, but its stamp {stamp:?} is not in {}/log.txt",
                            cwd.display()
                        ));
                    }
                }
                "write" => {
                    let path = cwd.join(input["path"].as_str().unwrap_or_default());
                    let want = input["content"].as_str().unwrap_or_default();
                    let got = std::fs::read_to_string(&path).unwrap_or_default();
                    if got != want {
                        return Err(format!(
                            "conversation {id}: write call {call} succeeded, but {} holds {got:?}, not {want:?}",
                            path.display()
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(role: &'static str, blocks: Vec<Block>) -> Turn {
        Turn { role, blocks }
    }
    fn call(id: &str) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: "think".into(),
            input: Value::Null,
        }
    }
    fn result(id: &str) -> Block {
        Block::ToolResult {
            id: id.into(),
            content: "ok".into(),
            is_error: false,
        }
    }

    fn message(seq: u64, role: pb::Role, blocks: Vec<pb::content_block::Block>) -> pb::Message {
        pb::Message {
            seq,
            role: role as i32,
            content: blocks
                .into_iter()
                .map(|b| pb::ContentBlock { block: Some(b) })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn effects_catch_a_tool_run_twice_and_a_lost_write() {
        use pb::content_block::Block as B;
        let dir = tempfile::tempdir().unwrap();
        let call = |id: &str, name: &str, input: Value| {
            B::ToolUse(pb::ToolUseBlock {
                id: id.into(),
                name: name.into(),
                input_json: input.to_string(),
                ..Default::default()
            })
        };
        let ok = |id: &str| {
            B::ToolResult(pb::ToolResultBlock {
                images: Vec::new(),
                tool_use_id: id.into(),
                content: String::new(),
                is_error: false,
            })
        };
        let messages = [
            message(1, pb::Role::User, vec![]),
            message(
                2,
                pb::Role::Assistant,
                vec![
                    call(
                        "b",
                        "bash",
                        serde_json::json!({"command": "sleep 0.01; echo s1 >> log.txt"}),
                    ),
                    call(
                        "w",
                        "write",
                        serde_json::json!({"path": "f.txt", "content": "hi\n"}),
                    ),
                ],
            ),
            message(3, pb::Role::User, vec![ok("b"), ok("w")]),
        ];
        std::fs::write(dir.path().join("log.txt"), "s1\n").unwrap();
        std::fs::write(dir.path().join("f.txt"), "hi\n").unwrap();
        assert_eq!(effects("x", dir.path(), &messages), Ok(()));
        std::fs::write(dir.path().join("f.txt"), "other").unwrap();
        assert!(
            effects("x", dir.path(), &messages)
                .unwrap_err()
                .contains("write call w")
        );
        std::fs::write(dir.path().join("f.txt"), "hi\n").unwrap();
        std::fs::write(dir.path().join("log.txt"), "s1\ns1\n").unwrap();
        assert!(
            effects("x", dir.path(), &messages)
                .unwrap_err()
                .contains("ran 2 times")
        );
        std::fs::write(dir.path().join("log.txt"), "").unwrap();
        assert!(
            effects("x", dir.path(), &messages)
                .unwrap_err()
                .contains("not in")
        );
    }

    #[test]
    fn a_request_must_be_a_prefix_of_the_stored_transcript() {
        use pb::content_block::Block as B;
        let text = |t: &str| B::Text(pb::TextBlock { text: t.into() });
        let mut reply = message(2, pb::Role::Assistant, vec![text("done")]);
        reply.stop_reason = "end_turn".into();
        let stored = [
            message(1, pb::Role::User, vec![text("[crash c=1 t=1 k=2] go")]),
            reply,
            message(
                3,
                pb::Role::User,
                vec![text("[Request interrupted by user]")],
            ),
            message(4, pb::Role::User, vec![text("[crash c=1 t=2 k=2] again")]),
        ];
        let body = |msgs: Value| serde_json::json!({ "messages": msgs });
        let first = serde_json::json!({"role": "user", "content": [{"type": "text", "text": "[crash c=1 t=1 k=2] go"}]});
        assert_eq!(
            request(1, &body(serde_json::json!([first])), &stored, "x"),
            Ok(())
        );
        // The cancel marker and the next prompt merge into one user message.
        let merged = serde_json::json!([first,
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
            {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"},
                                         {"type": "text", "text": "[crash c=1 t=2 k=2] again"}]}]);
        assert_eq!(request(2, &body(merged), &stored, "x"), Ok(()));
        let lost = serde_json::json!([first,
            {"role": "assistant", "content": [{"type": "text", "text": "a reply the store lost"}]},
            {"role": "user", "content": [{"type": "text", "text": "more"}]}]);
        assert!(
            request(3, &body(lost), &stored, "x")
                .unwrap_err()
                .contains("not a prefix")
        );
        let count = |n: u64| pb::ConversationSummary {
            message_count: n,
            ..Default::default()
        };
        let none = Default::default();
        let first_cancelled = std::collections::HashSet::from([1]);
        // Turn 2 has no reply.
        let err = transcript("x", &count(4), &stored, &first_cancelled).unwrap_err();
        assert!(err.contains("turn 2"), "{err}");
        // Turn 1 ends with a cancel's marker: fine only if it was cancelled.
        assert!(transcript("x", &count(3), &stored[..3], &none).is_err());
        assert_eq!(
            transcript("x", &count(3), &stored[..3], &first_cancelled),
            Ok(())
        );
        assert_eq!(transcript("x", &count(2), &stored[..2], &none), Ok(()));
        assert!(
            transcript("x", &count(3), &stored[..2], &none)
                .unwrap_err()
                .contains("counts 3")
        );
    }

    #[test]
    fn chain_accepts_answered_calls_and_rejects_the_rest() {
        let ok = [
            t("user", vec![Block::Text("hi".into())]),
            t("assistant", vec![call("a"), call("b")]),
            t("user", vec![result("a"), result("b")]),
            t("assistant", vec![Block::Text("done".into())]),
        ];
        assert_eq!(chain(&ok, "x", false), Ok(()));
        let mut missing = ok.clone();
        missing[2].blocks.pop();
        assert!(
            chain(&missing, "x", false)
                .unwrap_err()
                .contains("answers [\"a\"]")
        );
        let mut twice = ok.clone();
        twice[2].blocks.push(result("b"));
        assert!(chain(&twice, "x", false).is_err());
        let mut doubled = ok.to_vec();
        doubled.insert(1, t("assistant", vec![Block::Text("partial".into())]));
        assert!(
            chain(&doubled, "x", true)
                .unwrap_err()
                .contains("alternate")
        );
        let orphan = [t("user", vec![result("z")])];
        let mut users = ok.to_vec();
        users.push(t(
            "user",
            vec![Block::Text("[Request interrupted by user]".into())],
        ));
        users.push(t("user", vec![Block::Text("next".into())]));
        assert!(chain(&users, "x", false).is_err());
        assert_eq!(chain(&users, "x", true), Ok(()));
        assert!(chain(&orphan, "x", true).is_err());
    }

    #[test]
    fn family_catches_a_result_twice_an_orphan_and_usage_counted_twice() {
        use pb::content_block::Block as B;
        let text = |t: &str| B::Text(pb::TextBlock { text: t.into() });
        let call = |id: &str, name: &str, input: Value| {
            B::ToolUse(pb::ToolUseBlock {
                id: id.into(),
                name: name.into(),
                input_json: input.to_string(),
                ..Default::default()
            })
        };
        let answer = |id: &str, content: &str| {
            B::ToolResult(pb::ToolResultBlock {
                images: Vec::new(),
                tool_use_id: id.into(),
                content: content.into(),
                is_error: false,
            })
        };
        let usage = |n: u64| pb::Usage {
            input_tokens: n,
            ..Default::default()
        };
        let child = |n: u64, prompt: &str, result: &str| {
            let input = serde_json::json!({"result": result, "success": true});
            Child {
                summary: pb::ConversationSummary {
                    id: format!("K{n}"),
                    sub_agent_parent_id: "P".into(),
                    agent_id: format!("agent_{n}_sp"),
                    message_count: 3,
                    usage: Some(usage(10 * n)),
                    ..Default::default()
                },
                messages: vec![
                    message(1, pb::Role::User, vec![text(prompt)]),
                    message(
                        2,
                        pb::Role::Assistant,
                        vec![call("s", "submit_result", input)],
                    ),
                    message(
                        3,
                        pb::Role::User,
                        vec![answer("s", texts::RESULT_SUBMITTED)],
                    ),
                ],
            }
        };
        let kids = vec![
            child(1, "[crash-sub a]", "one"),
            child(2, "[crash-sub b]", "two"),
        ];
        let spawn = serde_json::json!({"agents": [
            {"description": "a", "prompt": "[crash-sub a]"},
            {"description": "b", "prompt": "[crash-sub b]"}]});
        let synthesis = "synthesis_sp: 2 sub-agent(s) ended, 2 succeeded, 0 failed.\n\n\
            ## agent_1_sp (conversation K1) succeeded\none\n\n\
            ## agent_2_sp (conversation K2) succeeded\ntwo";
        let parent = |result: &str| {
            vec![
                message(1, pb::Role::User, vec![text("[crash c=1 t=1 k=2 s=2] go")]),
                message(
                    2,
                    pb::Role::Assistant,
                    vec![call("sp", "spawn_agents", spawn.clone())],
                ),
                message(3, pb::Role::User, vec![answer("sp", result)]),
            ]
        };
        let summary = |n: u64| pb::ConversationSummary {
            id: "P".into(),
            sub_agents_usage: Some(usage(n)),
            ..Default::default()
        };
        assert_eq!(family(&summary(30), &parent(synthesis), &kids), Ok(1));
        // Each child's usage once: 10 + 20.
        let err = family(&summary(50), &parent(synthesis), &kids).unwrap_err();
        assert!(err.contains("counted twice"), "{err}");
        // A result reported twice.
        let twice = format!("{synthesis}\n\n## agent_2_sp (conversation K2) succeeded\ntwo");
        let err = family(&summary(30), &parent(&twice), &kids).unwrap_err();
        assert!(err.contains("3 time(s)"), "{err}");
        // A result that is not what the child submitted.
        let wrong = synthesis.replace("\ntwo", "\nthree");
        let err = family(&summary(30), &parent(&wrong), &kids).unwrap_err();
        assert!(err.contains("was reported"), "{err}");
        // A child no spawn call names.
        let mut orphans = kids.clone();
        orphans.push(child(3, "[crash-sub c]", "three"));
        let err = family(&summary(60), &parent(synthesis), &orphans).unwrap_err();
        assert!(err.contains("orphan"), "{err}");
        // Cancelled: no result may be in the transcript; the children ended.
        assert_eq!(
            family(&summary(30), &parent(texts::CANCELLED_BY_USER), &kids),
            Ok(0)
        );
    }
}
