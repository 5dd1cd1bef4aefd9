//! The model the crash test talks to: a [`Responder`] that reads the
//! transcript in each request and decides the next reply from it, so a
//! request re-issued after a crash is answered like any other.
//!
//! Each user prompt carries a tag, `[crash c=C t=T k=K]`: conversation label
//! `C`, turn `T`, and the number `K` of tool rounds the turn should take.
//! While the turn has had fewer than `K` rounds, the reply asks for one to
//! three tools (`bash` with a short sleep, `write`, `read`, `think`, with
//! inputs that never repeat, so the doom-loop guard stays quiet); then it
//! ends the turn with text. Replies stream slowly enough (a few ms per SSE
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
}

impl Tag {
    /// The prompt text of this turn.
    pub fn prompt(&self) -> String {
        format!(
            "[crash c={} t={} k={}] Please do {} rounds of busy work, then stop.",
            self.conv, self.turn, self.rounds, self.rounds
        )
    }

    /// The tag at the start of `text`, if any.
    pub fn parse(text: &str) -> Option<Tag> {
        let rest = text.strip_prefix("[crash ")?;
        let inner = &rest[..rest.find(']')?];
        let (mut conv, mut turn, mut rounds) = (None, None, None);
        for part in inner.split_whitespace() {
            let (key, value) = part.split_once('=')?;
            match key {
                "c" => conv = value.parse().ok(),
                "t" => turn = value.parse().ok(),
                "k" => rounds = value.parse().ok(),
                _ => return None,
            }
        }
        Some(Tag {
            conv: conv?,
            turn: turn?,
            rounds: rounds?,
        })
    }
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
    let messages = body["messages"].as_array()?;
    let (at, tag) = messages.iter().enumerate().rev().find_map(|(i, m)| {
        if m["role"] != "user" {
            return None;
        }
        texts(m).into_iter().find_map(Tag::parse).map(|t| (i, t))
    })?;
    let rounds = messages[at + 1..]
        .iter()
        .filter(|m| m["role"] == "assistant" && has_tool_use(m))
        .count();
    Some((tag, u32::try_from(rounds).unwrap_or(u32::MAX)))
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
    let n: u64 = rng.random_range(1..=3);
    for j in 0..n {
        let id = format!("toolu_c{}_t{}_r{}_{}", tag.conv, tag.turn, round, j);
        let stamp = format!("c{}-t{}-r{}-{}", tag.conv, tag.turn, round, j);
        let (name, input) = match rng.random_range(0..10) {
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
                    "path": format!("t{}_r{}_{}.txt", tag.turn, round, j),
                    "content": format!("{stamp}: {}\n", words(&mut rng, 2..12)),
                }),
            ),
            // The limit only makes each call differ from the last.
            6..=7 => (
                "read",
                json!({"path": "log.txt", "limit": 1000 + tag.turn * 100 + u64::from(round) * 4 + j}),
            ),
            _ => (
                "think",
                json!({"thought": format!("{stamp}: {}", words(&mut rng, 4..16))}),
            ),
        };
        script = script.tool_use(&id, name, input);
    }
    script.pace(pace)
}

/// The responder for the fake LLM. With `faults` > 0, that share of model
/// rounds fails its first attempt (a 529, or an `overloaded_error` in the
/// middle of the stream) so the daemon retries; the next attempt at the
/// same round succeeds, so no turn ends in Error.
pub fn responder(seed: u64, faults: f64) -> Responder {
    let failed: Mutex<HashSet<(u64, u64, u32)>> = Mutex::default();
    Arc::new(move |body: &Value| {
        let Some((tag, round)) = position(body) else {
            return Script::text("crash-test responder: no tagged prompt in this request.");
        };
        let roll = mix(&[seed, tag.conv, tag.turn, u64::from(round), 0xFA17]);
        if (roll % 10_000) as f64 / 10_000.0 < faults {
            let mut failed = failed.lock().unwrap_or_else(PoisonError::into_inner);
            if failed.insert((tag.conv, tag.turn, round)) {
                return if roll.is_multiple_of(2) {
                    Script::overloaded()
                } else {
                    Script::Reply(reply(seed, tag, round).chunk_chars(3).error_after(
                        4,
                        "overloaded_error",
                        "Overloaded",
                    ))
                };
            }
        }
        Script::Reply(reply(seed, tag, round))
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
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tags_round_trip_and_reject_other_text() {
        let tag = Tag {
            conv: 12,
            turn: 3,
            rounds: 5,
        };
        assert_eq!(Tag::parse(&tag.prompt()), Some(tag));
        assert_eq!(Tag::parse("hello"), None);
        assert_eq!(Tag::parse("[crash c=1 t=2]"), None);
        assert_eq!(Tag::parse("[crash c=1 t=x k=2]"), None);
    }

    #[test]
    fn rounds_are_counted_from_the_last_tagged_prompt() {
        let old = Tag {
            conv: 1,
            turn: 1,
            rounds: 1,
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
        };
        let a = format!("{:?}", reply(7, tag, 1));
        assert_eq!(a, format!("{:?}", reply(7, tag, 1)));
        assert_ne!(a, format!("{:?}", reply(8, tag, 1)));
        assert!(a.contains("ToolUse"));
        assert!(!format!("{:?}", reply(7, tag, 2)).contains("ToolUse"));
    }
}
