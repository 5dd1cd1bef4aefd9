//! The model the crash test talks to: a [`Responder`] that reads the
//! transcript in each request and decides the next reply from it, so a
//! request re-issued after a crash is answered like any other.
//!
//! Each user prompt carries a tag, `[crash c=C t=T k=K]`: conversation label
//! `C`, turn `T`, and the number `K` of tool rounds the turn should take.
//! While the turn has had fewer than `K` rounds, the reply asks for one to
//! three tools (`bash` with a short sleep, `write`, `read`, `think`, with
//! inputs that never repeat, so the doom-loop guard stays quiet); then it
//! ends the turn with text. A turn tagged `g=1` works in the git repository
//! of [`super::repo`]: most of its calls are `bash` commands that change
//! the repository's files (see [`git_busy`]). Replies stream slowly enough (a few ms per SSE
//! event) for a kill to land in the middle of one. What a reply contains is
//! a function of the seed, the tag and the round, so a run is reproducible.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::fake_llm::{ReplyScript, Responder, Script};

/// What a turn's prompt says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// The conversation's label (stable across kills, unlike nothing else).
    pub conv: u64,
    /// The turn within the conversation, from 1.
    pub turn: u64,
    /// Tool rounds the turn should take before the model ends it.
    pub rounds: u32,
    /// Sub-agents one of the turn's rounds spawns (`spawn_agents`); 0 for
    /// none.
    pub spawn: u32,
    /// The turn works in the git repository of [`super::repo`]: its
    /// commands change tracked files and create untracked ones.
    pub git: bool,
}

impl Tag {
    /// The prompt text of this turn.
    pub fn prompt(&self) -> String {
        let spawn = if self.spawn > 0 {
            format!(" s={}", self.spawn)
        } else {
            String::new()
        };
        let git = if self.git { " g=1" } else { "" };
        format!(
            "[crash c={} t={} k={}{spawn}{git}] Please do {} rounds of busy work, then stop.",
            self.conv, self.turn, self.rounds, self.rounds
        )
    }

    /// The tag at the start of `text`, if any.
    pub fn parse(text: &str) -> Option<Tag> {
        let rest = text.strip_prefix("[crash ")?;
        let inner = &rest[..rest.find(']')?];
        let (mut conv, mut turn, mut rounds, mut spawn, mut git) =
            (None, None, None, Some(0), Some(false));
        for part in inner.split_whitespace() {
            let (key, value) = part.split_once('=')?;
            match key {
                "c" => conv = value.parse().ok(),
                "t" => turn = value.parse().ok(),
                "k" => rounds = value.parse().ok(),
                "s" => spawn = value.parse().ok(),
                "g" => {
                    git = match value {
                        "1" => Some(true),
                        "0" => Some(false),
                        _ => None,
                    }
                }
                _ => return None,
            }
        }
        Some(Tag {
            conv: conv?,
            turn: turn?,
            rounds: rounds?,
            spawn: spawn?,
            git: git?,
        })
    }

    /// The round of the turn that spawns its sub-agents (when it does).
    pub fn spawn_round(&self, seed: u64) -> Option<u32> {
        (self.spawn > 0).then(|| {
            let roll = mix(&[seed, self.conv, self.turn, 0x5BA6]);
            (roll % u64::from(self.rounds.max(1))) as u32
        })
    }

    /// The id of the turn's `spawn_agents` call.
    pub fn spawn_call(&self, round: u32) -> String {
        format!("toolu_c{}_t{}_r{}_spawn", self.conv, self.turn, round)
    }
}

/// How a sub-agent of the crash test ends its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// `submit_result` with success.
    Submit,
    /// `submit_result` with `success: false`.
    Fail,
    /// Text only: it is reminded once, answers with text again, and its
    /// last text is its result.
    NoSubmit,
}

impl Ending {
    fn letter(self) -> char {
        match self {
            Ending::Submit => 's',
            Ending::Fail => 'f',
            Ending::NoSubmit => 'n',
        }
    }

    fn from_letter(s: &str) -> Option<Ending> {
        match s {
            "s" => Some(Ending::Submit),
            "f" => Some(Ending::Fail),
            "n" => Some(Ending::NoSubmit),
            _ => None,
        }
    }
}

/// What a sub-agent's task (its first prompt) says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubTag {
    /// The parent's label.
    pub conv: u64,
    /// The parent's turn that spawned it.
    pub turn: u64,
    /// Its place in the `spawn_agents` call, from 1 (`agent_{n}_…`).
    pub agent: u32,
    /// Tool rounds before it ends.
    pub rounds: u32,
    /// How it ends.
    pub ending: Ending,
}

impl SubTag {
    /// The task's prompt.
    pub fn prompt(&self) -> String {
        format!(
            "[crash-sub c={} t={} a={} k={} e={}] Do {} rounds of busy work, then report.",
            self.conv,
            self.turn,
            self.agent,
            self.rounds,
            self.ending.letter(),
            self.rounds
        )
    }

    /// The tag at the start of `text`, if any.
    pub fn parse(text: &str) -> Option<SubTag> {
        let rest = text.strip_prefix("[crash-sub ")?;
        let inner = &rest[..rest.find(']')?];
        let (mut conv, mut turn, mut agent, mut rounds, mut ending) =
            (None, None, None, None, None);
        for part in inner.split_whitespace() {
            let (key, value) = part.split_once('=')?;
            match key {
                "c" => conv = value.parse().ok(),
                "t" => turn = value.parse().ok(),
                "a" => agent = value.parse().ok(),
                "k" => rounds = value.parse().ok(),
                "e" => ending = Ending::from_letter(value),
                _ => return None,
            }
        }
        Some(SubTag {
            conv: conv?,
            turn: turn?,
            agent: agent?,
            rounds: rounds?,
            ending: ending?,
        })
    }

    /// The result it submits (for [`Ending::Submit`] and [`Ending::Fail`]).
    pub fn result(&self) -> String {
        format!(
            "agent {} of c{} t{} did {} rounds",
            self.agent, self.conv, self.turn, self.rounds
        )
    }

    /// Its final text (what counts for [`Ending::NoSubmit`]).
    pub fn last_text(&self) -> String {
        format!(
            "Agent {} of c{} t{} is done and submits nothing.",
            self.agent, self.conv, self.turn
        )
    }

    /// The sub-agents a turn spawns, drawn from `seed`.
    pub fn children(seed: u64, tag: Tag) -> Vec<SubTag> {
        (1..=tag.spawn)
            .map(|agent| {
                let mut rng = StdRng::seed_from_u64(mix(&[
                    seed,
                    tag.conv,
                    tag.turn,
                    u64::from(agent),
                    0xC41D,
                ]));
                let ending = match rng.random_range(0..20) {
                    0..=11 => Ending::Submit,
                    12..=14 => Ending::Fail,
                    _ => Ending::NoSubmit,
                };
                SubTag {
                    conv: tag.conv,
                    turn: tag.turn,
                    agent,
                    rounds: rng.random_range(1..=3),
                    ending,
                }
            })
            .collect()
    }
}

/// Whose request it is, and where it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// A turn of a conversation the test started, after this many tool
    /// rounds.
    Turn(Tag, u32),
    /// A sub-agent's task, after this many tool rounds.
    Child(SubTag, u32),
}

/// The texts of a request message's content (a string or text blocks).
pub(crate) fn texts(message: &Value) -> Vec<&str> {
    match &message["content"] {
        Value::String(s) => vec![s.as_str()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether a request message holds a `tool_use` block.
fn has_tool_use(message: &Value) -> bool {
    message["content"]
        .as_array()
        .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_use"))
}

/// Where a request stands: the tag of the turn in progress and how many
/// tool rounds it has had. `None` when no user message carries a tag.
pub fn position(body: &Value) -> Option<(Tag, u32)> {
    match locate(body)? {
        Position::Turn(tag, rounds) => Some((tag, rounds)),
        Position::Child(..) => None,
    }
}

/// Where a request stands: a sub-agent's (its first message carries a
/// [`SubTag`]) or a turn's (the last tagged user message), with the tool
/// rounds since the tag.
pub fn locate(body: &Value) -> Option<Position> {
    let messages = body["messages"].as_array()?;
    let rounds_after = |at: usize| {
        let n = messages[at + 1..]
            .iter()
            .filter(|m| m["role"] == "assistant" && has_tool_use(m))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    };
    if let Some(sub) = messages
        .first()
        .and_then(|m| texts(m).into_iter().find_map(SubTag::parse))
    {
        return Some(Position::Child(sub, rounds_after(0)));
    }
    let (at, tag) = messages.iter().enumerate().rev().find_map(|(i, m)| {
        if m["role"] != "user" {
            return None;
        }
        texts(m).into_iter().find_map(Tag::parse).map(|t| (i, t))
    })?;
    Some(Position::Turn(tag, rounds_after(at)))
}

/// The reply to a request at `position`, drawn from `seed`.
pub fn reply(seed: u64, tag: Tag, round: u32) -> ReplyScript {
    let mut rng = StdRng::seed_from_u64(mix(&[seed, tag.conv, tag.turn, u64::from(round)]));
    let pace = Duration::from_millis(rng.random_range(1..=5));
    if round >= tag.rounds {
        return ReplyScript::new()
            .text(&format!(
                "Turn {} of conversation {} is done after {} rounds.",
                tag.turn, tag.conv, tag.rounds
            ))
            .pace(pace);
    }
    let mut script = ReplyScript::new();
    if rng.random_bool(0.7) {
        script = script.text(&format!(
            "Round {} of {}: {}.",
            round + 1,
            tag.rounds,
            words(&mut rng, 3..8)
        ));
    }
    if tag.spawn_round(seed) == Some(round) {
        // Now and then a read-only call first, answered before the spawn.
        if rng.random_bool(0.5) {
            let stamp = format!("c{}-t{}-r{}-pre", tag.conv, tag.turn, round);
            script = script.tool_use(
                &format!("toolu_c{}_t{}_r{}_pre", tag.conv, tag.turn, round),
                "think",
                json!({"thought": format!("{stamp}: {}", words(&mut rng, 4..10))}),
            );
        }
        let agents: Vec<Value> = SubTag::children(seed, tag)
            .iter()
            .map(
                |c| json!({"description": format!("crash task {}", c.agent), "prompt": c.prompt()}),
            )
            .collect();
        return script
            .tool_use(
                &tag.spawn_call(round),
                "spawn_agents",
                json!({ "agents": agents }),
            )
            .pace(pace);
    }
    let n: u64 = rng.random_range(1..=3);
    for j in 0..n {
        let id = format!("toolu_c{}_t{}_r{}_{}", tag.conv, tag.turn, round, j);
        let stamp = format!("c{}-t{}-r{}-{}", tag.conv, tag.turn, round, j);
        let path = format!("t{}_r{}_{}.txt", tag.turn, round, j);
        let limit = 1000 + tag.turn * 100 + u64::from(round) * 4 + j;
        let (name, input) = if tag.git && rng.random_bool(0.7) {
            git_busy(&mut rng, &stamp)
        } else {
            busy(&mut rng, &stamp, &path, limit)
        };
        script = script.tool_use(&id, name, input);
    }
    script.pace(pace)
}

/// A sub-agent's reply at tool round `round`, drawn from `seed`: busy
/// tools until its rounds are done, then its ending.
pub fn child_reply(seed: u64, sub: SubTag, round: u32) -> ReplyScript {
    let mut rng = StdRng::seed_from_u64(mix(&[
        seed,
        sub.conv,
        sub.turn,
        u64::from(sub.agent),
        u64::from(round),
        0xC41E,
    ]));
    let pace = Duration::from_millis(rng.random_range(1..=5));
    let mut script = ReplyScript::new();
    if round >= sub.rounds {
        script = match sub.ending {
            Ending::NoSubmit => script.text(&sub.last_text()),
            Ending::Submit | Ending::Fail => script.text("Reporting.").tool_use(
                &format!("toolu_c{}_t{}_a{}_submit", sub.conv, sub.turn, sub.agent),
                "submit_result",
                json!({"result": sub.result(), "success": sub.ending == Ending::Submit}),
            ),
        };
        return script.pace(pace);
    }
    if rng.random_bool(0.5) {
        script = script.text(&format!(
            "Sub-round {}: {}.",
            round + 1,
            words(&mut rng, 2..6)
        ));
    }
    let n: u64 = rng.random_range(1..=2);
    for j in 0..n {
        let id = format!(
            "toolu_c{}_t{}_a{}_r{}_{}",
            sub.conv, sub.turn, sub.agent, round, j
        );
        let stamp = format!(
            "c{}-t{}-a{}-r{}-{}",
            sub.conv, sub.turn, sub.agent, round, j
        );
        let path = format!("t{}_a{}_r{}_{}.txt", sub.turn, sub.agent, round, j);
        let limit = 50_000 + sub.turn * 100 + u64::from(sub.agent) * 20 + u64::from(round) * 4 + j;
        let (name, input) = busy(&mut rng, &stamp, &path, limit);
        script = script.tool_use(&id, name, input);
    }
    script.pace(pace)
}

/// One busy tool call: `bash` with a short sleep that appends `stamp` to
/// `log.txt`, a `write` of `path`, a `read` of the log (`limit` only makes
/// each call differ from the last), or a `think`.
fn busy(rng: &mut StdRng, stamp: &str, path: &str, limit: u64) -> (&'static str, Value) {
    match rng.random_range(0..10) {
        0..=3 => {
            // Mostly short sleeps; now and then one long enough for a
            // kill to find it running.
            let sleep = if rng.random_bool(0.2) {
                format!("0.{}", rng.random_range(1..=3))
            } else {
                format!("0.0{}", rng.random_range(1..=9))
            };
            (
                "bash",
                json!({"command": format!("sleep {sleep}; echo {stamp} >> log.txt")}),
            )
        }
        4..=5 => (
            "write",
            json!({
                "path": path,
                "content": format!("{stamp}: {}\n", words(rng, 2..12)),
            }),
        ),
        6..=7 => ("read", json!({"path": "log.txt", "limit": limit})),
        _ => (
            "think",
            json!({"thought": format!("{stamp}: {}", words(rng, 4..16))}),
        ),
    }
}

/// One `bash` call of a git turn (in the repository of [`super::repo`]):
/// it appends `stamp` to `log.txt` (a tracked file, so `check::effects`
/// finds each successful call's stamp once), makes one or two changes of
/// the repository's files, sleeps (a kill then finds it between its
/// checkpoint and its end, its first changes made), and, after the sleep,
/// makes one more. The changes: a tracked file appended to, overwritten,
/// deleted or renamed (the same few files again and again, so calls and
/// turns change what earlier ones changed), and untracked files created,
/// some in a directory of their own. Every command succeeds whatever
/// earlier calls left.
pub fn git_busy(rng: &mut StdRng, stamp: &str) -> (&'static str, Value) {
    let change = |rng: &mut StdRng| {
        let tracked = format!("src/f{:02}.txt", rng.random_range(0..super::repo::TRACKED));
        match rng.random_range(0..10) {
            0..=2 => format!("echo {stamp} edit >> {tracked}"),
            3 => format!("printf '{stamp}\\001\\377\\n' > {tracked}"),
            4 => format!("rm -f {tracked}"),
            5 => format!("{{ mv -f {tracked} {tracked}.moved 2>/dev/null || true; }}"),
            6..=7 => format!("echo {stamp} new > {stamp}.new"),
            _ => format!("mkdir -p made/{stamp} && echo {stamp} deep > made/{stamp}/file.txt"),
        }
    };
    let first = change(rng);
    let second = if rng.random_bool(0.5) {
        format!(" && {}", change(rng))
    } else {
        String::new()
    };
    let sleep = if rng.random_bool(0.2) {
        format!("0.{}", rng.random_range(1..=3))
    } else {
        format!("0.0{}", rng.random_range(1..=9))
    };
    let last = change(rng);
    (
        "bash",
        json!({"command": format!("echo {stamp} >> log.txt && {first}{second} && sleep {sleep} && {last}")}),
    )
}

/// The responder for the fake LLM. With `faults` > 0, that share of model
/// rounds fails its first attempt (a 529, or an `overloaded_error` in the
/// middle of the stream) so the daemon retries; the next attempt at the
/// same round succeeds, so no turn ends in Error.
pub fn responder(seed: u64, faults: f64) -> Responder {
    let failed: Mutex<HashSet<(u64, u64, u32, u32)>> = Mutex::default();
    Arc::new(move |body: &Value| {
        let (key, script) = match locate(body) {
            Some(Position::Turn(tag, round)) => {
                ((tag.conv, tag.turn, 0, round), reply(seed, tag, round))
            }
            Some(Position::Child(sub, round)) => (
                (sub.conv, sub.turn, sub.agent, round),
                child_reply(seed, sub, round),
            ),
            None => {
                return Script::text("crash-test responder: no tagged prompt in this request.");
            }
        };
        let (conv, turn, agent, round) = key;
        let roll = mix(&[seed, conv, turn, u64::from(agent), u64::from(round), 0xFA17]);
        if (roll % 10_000) as f64 / 10_000.0 < faults {
            let mut failed = failed.lock().unwrap_or_else(PoisonError::into_inner);
            if failed.insert(key) {
                return if roll.is_multiple_of(2) {
                    Script::overloaded()
                } else {
                    Script::Reply(script.chunk_chars(3).error_after(
                        4,
                        "overloaded_error",
                        "Overloaded",
                    ))
                };
            }
        }
        Script::Reply(script)
    })
}

const WORDS: &[&str] = &[
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
];

fn words(rng: &mut StdRng, n: std::ops::Range<usize>) -> String {
    let n = rng.random_range(n);
    (0..n)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

/// SplitMix64 over several words: a seed for one reply.
pub(crate) fn mix(parts: &[u64]) -> u64 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15;
    for &p in parts {
        h ^= p;
        h = h.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h = z ^ (z >> 31);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_reject_other_text() {
        let tag = Tag {
            conv: 12,
            turn: 3,
            rounds: 5,
            spawn: 0,
            git: false,
        };
        assert_eq!(Tag::parse(&tag.prompt()), Some(tag));
        assert_eq!(Tag::parse("hello"), None);
        assert_eq!(Tag::parse("[crash c=1 t=2]"), None);
        assert_eq!(Tag::parse("[crash c=1 t=x k=2]"), None);
    }

    #[test]
    fn git_turns_round_trip_and_their_commands_log_their_stamp_first() {
        let tag = Tag {
            conv: 2,
            turn: 1,
            rounds: 3,
            spawn: 0,
            git: true,
        };
        assert!(tag.prompt().starts_with("[crash c=2 t=1 k=3 g=1]"));
        assert_eq!(Tag::parse(&tag.prompt()), Some(tag));
        assert_eq!(Tag::parse("[crash c=2 t=1 k=3 g=2]"), None);
        let mut rng = StdRng::seed_from_u64(5);
        for n in 0..50 {
            let stamp = format!("c2-t1-r0-{n}");
            let (name, input) = git_busy(&mut rng, &stamp);
            assert_eq!(name, "bash");
            let command = input["command"].as_str().unwrap();
            // `check::effects` finds a call's stamp after the first `echo`.
            assert!(
                command.starts_with(&format!("echo {stamp} >> log.txt && ")),
                "{command}"
            );
            assert!(command.contains(" && sleep 0."), "{command}");
        }
        let git_replies = (0..tag.rounds)
            .map(|round| format!("{:?}", reply(3, tag, round)))
            .collect::<String>();
        assert!(git_replies.contains("log.txt && "), "{git_replies}");
    }

    #[test]
    fn rounds_are_counted_from_the_last_tagged_prompt() {
        let old = Tag {
            conv: 1,
            turn: 1,
            rounds: 1,
            spawn: 0,
            git: false,
        };
        let new = Tag { turn: 2, ..old };
        let tool = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "think", "input": {}}]});
        let result = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "ok"}]});
        let body = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": old.prompt()}]},
            tool, result,
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
            {"role": "user", "content": [{"type": "text", "text": new.prompt()}]},
            tool, result, tool, result,
        ]});
        assert_eq!(position(&body), Some((new, 2)));
        assert_eq!(position(&json!({"messages": []})), None);
    }

    #[test]
    fn replies_are_reproducible_and_end_the_turn_after_k_rounds() {
        let tag = Tag {
            conv: 4,
            turn: 1,
            rounds: 2,
            spawn: 0,
            git: false,
        };
        let a = format!("{:?}", reply(7, tag, 1));
        assert_eq!(a, format!("{:?}", reply(7, tag, 1)));
        assert_ne!(a, format!("{:?}", reply(8, tag, 1)));
        assert!(a.contains("ToolUse"));
        assert!(!format!("{:?}", reply(7, tag, 2)).contains("ToolUse"));
    }

    #[test]
    fn sub_agent_tasks_round_trip_and_route_their_requests() {
        let tag = Tag {
            conv: 3,
            turn: 2,
            rounds: 3,
            spawn: 3,
            git: false,
        };
        assert_eq!(Tag::parse(&tag.prompt()), Some(tag));
        let children = SubTag::children(9, tag);
        assert_eq!(children.len(), 3);
        for (n, c) in children.iter().enumerate() {
            assert_eq!(c.agent as usize, n + 1);
            assert_eq!(SubTag::parse(&c.prompt()), Some(*c));
            assert_eq!(Tag::parse(&c.prompt()), None);
        }
        let round = tag.spawn_round(9).unwrap();
        assert!(round < tag.rounds);
        let spawned = format!("{:?}", reply(9, tag, round));
        assert!(spawned.contains("spawn_agents"), "{spawned}");
        assert!(spawned.contains(&children[2].prompt()), "{spawned}");
        // A child's request is routed by its first message, whatever the
        // parent's tag says.
        let child = children[0];
        let call = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "think", "input": {}}]});
        let result = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "ok"}]});
        let body = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": child.prompt()}]},
            call, result,
        ]});
        assert_eq!(locate(&body), Some(Position::Child(child, 1)));
        assert_eq!(position(&body), None);
        let last = format!("{:?}", child_reply(9, child, child.rounds));
        match child.ending {
            Ending::NoSubmit => assert!(!last.contains("submit_result"), "{last}"),
            Ending::Submit | Ending::Fail => assert!(last.contains("submit_result"), "{last}"),
        }
        assert!(format!("{:?}", child_reply(9, child, 0)).contains("ToolUse"));
    }
}
