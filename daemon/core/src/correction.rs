//! Self-correction with a limit (issue 17 point 6; seed
//! autonomous-plan-and-self-correction.md §4–§6).
//!
//! A tool that fails in a way another tool can get around says so in its
//! error with the `SELF_CORRECT_ATTEMPT:` signal line (and, optionally, a
//! `SELF_CORRECT_METADATA:` line with the seed's metadata as JSON). When the
//! results of a reply go back to the model, the first such failure makes
//! them carry the seed's re-engagement prompt with the fallback request.
//! Attempts are tracked per original request (the user message that started
//! the turn, keyed by a hash of its text) and capped at
//! [`MAX_CORRECTION_ATTEMPTS`]: the failure after the last attempt ends the
//! turn. A successful call of a suggested fallback tool after at least one
//! attempt closes the chain as a success.
//!
//! Everything here is pure; `transition` calls [`assess`] when a reply's
//! tool results are complete.

use crate::message::{ToolCall, ToolResult};
use serde::{Deserialize, Serialize};

/// The signal a failed tool result carries (seed §4).
pub const SIGNAL: &str = "SELF_CORRECT_ATTEMPT:";

/// The line that carries the signal's metadata, as JSON.
pub const METADATA: &str = "SELF_CORRECT_METADATA:";

/// Attempts per original request (seed §6: "limiting to 3 attempts").
pub const MAX_CORRECTION_ATTEMPTS: u32 = 3;

/// Chains kept per conversation: the oldest open chain is dropped beyond
/// this, so the record cannot grow without bound.
pub const MAX_CHAINS: usize = 16;

/// What a failed tool says about getting around its failure (seed §4:
/// the fallback request and the metadata).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorrectionSignal {
    /// The text after `SELF_CORRECT_ATTEMPT:`.
    pub fallback_request: String,
    /// The tool that failed.
    pub original_tool: String,
    /// Why it failed.
    pub original_error: String,
    /// The approach suggested instead, for people.
    pub suggested_approach: String,
    /// The tools the fallback uses (a success of one closes the chain).
    pub fallback_tools: Vec<String>,
}

/// The metadata line's JSON, named as in the seed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Metadata {
    original_tool: String,
    original_error: String,
    suggested_approach: String,
    fallback_tools: Vec<String>,
}

impl CorrectionSignal {
    /// The signal and metadata lines a tool appends to its error text.
    pub fn render(&self) -> String {
        let metadata = Metadata {
            original_tool: self.original_tool.clone(),
            original_error: self.original_error.clone(),
            suggested_approach: self.suggested_approach.clone(),
            fallback_tools: self.fallback_tools.clone(),
        };
        // Serializing strings and a list of strings cannot fail.
        let json = serde_json::to_string(&metadata).unwrap_or_default();
        format!(
            "{SIGNAL} {}\n{METADATA} {json}",
            self.fallback_request.trim()
        )
    }

    /// The signal a failed result of `call` carries, if any. Without a
    /// metadata line, the tool is the call's, the error is the text before
    /// the signal, and the approach is the fallback request itself.
    pub fn of(call_name: &str, result: &ToolResult) -> Option<CorrectionSignal> {
        if !result.is_error {
            return None;
        }
        let content = &result.content;
        let at = content
            .match_indices(SIGNAL)
            .map(|(i, _)| i)
            .find(|&i| i == 0 || content[..i].ends_with('\n'))?;
        let before = content[..at].trim();
        let rest = &content[at + SIGNAL.len()..];
        let (request, metadata) = match rest.find(&format!("\n{METADATA}")) {
            Some(m) => {
                let line = rest[m + 1 + METADATA.len()..]
                    .lines()
                    .next()
                    .unwrap_or_default();
                (
                    &rest[..m],
                    serde_json::from_str::<Metadata>(line.trim()).unwrap_or_default(),
                )
            }
            None => (rest, Metadata::default()),
        };
        let fallback_request = request.trim().to_string();
        if fallback_request.is_empty() {
            return None;
        }
        let or = |s: String, default: &str| {
            if s.trim().is_empty() {
                default.to_string()
            } else {
                s
            }
        };
        Some(CorrectionSignal {
            original_tool: or(metadata.original_tool, call_name),
            original_error: or(metadata.original_error, before),
            suggested_approach: or(metadata.suggested_approach, &fallback_request),
            fallback_tools: metadata.fallback_tools,
            fallback_request,
        })
    }
}

/// One attempt of a chain (seed §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorrectionAttempt {
    /// The tool that failed.
    pub tool: String,
    /// Why.
    pub error: String,
    /// When (Unix ms, from the context's clock reading).
    pub timestamp_ms: i64,
    /// The fallback request the model was sent.
    pub fallback_strategy: String,
    /// The tools the fallback uses.
    #[serde(default)]
    pub fallback_tools: Vec<String>,
}

/// The correction chain of one original request (seed §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorrectionChain {
    /// The hash of `original_request` ([`request_key`]).
    pub key: String,
    pub original_request: String,
    pub attempts: Vec<CorrectionAttempt>,
    pub max_attempts: u32,
}

/// The request a turn works on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalRequest {
    pub key: String,
    pub text: String,
}

impl OriginalRequest {
    pub fn new(text: &str) -> OriginalRequest {
        OriginalRequest {
            key: request_key(text),
            text: text.to_string(),
        }
    }
}

/// A conversation's correction tracking: persisted with its state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Corrections {
    /// The user request the current (or last) turn works on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<OriginalRequest>,
    /// Open chains, oldest first: one per original request that had an
    /// attempt and neither succeeded nor failed for good yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<CorrectionChain>,
}

impl Corrections {
    /// Whether there is nothing to keep.
    pub fn is_empty(&self) -> bool {
        self.current.is_none() && self.chains.is_empty()
    }

    /// The open chain of the current request.
    pub fn current_chain(&self) -> Option<&CorrectionChain> {
        let key = &self.current.as_ref()?.key;
        self.chains.iter().find(|c| c.key == *key)
    }

    /// These corrections with `text` as the request a new turn works on.
    pub fn starting(&self, text: &str) -> Corrections {
        Corrections {
            current: Some(OriginalRequest::new(text)),
            chains: self.chains.clone(),
        }
    }
}

/// The key of an original request: FNV-1a (64 bits) of its text, in hex.
/// Stable across builds and platforms, unlike std's hasher, because it is
/// persisted.
pub fn request_key(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// What the results of a reply mean for self-correction.
#[derive(Debug, Clone, PartialEq)]
pub enum Assessment {
    /// Nothing to do.
    None,
    /// A fallback tool succeeded after `attempts` attempts: the chain is
    /// closed.
    Succeeded {
        attempts: u32,
        tool: String,
        corrections: Corrections,
    },
    /// A signal within the limit: the model is re-engaged (attempt
    /// `attempt` of `max_attempts`).
    Attempt {
        attempt: u32,
        max_attempts: u32,
        signal: CorrectionSignal,
        corrections: Corrections,
    },
    /// A signal after the last attempt: the turn ends.
    Exhausted {
        attempts: u32,
        signal: CorrectionSignal,
        corrections: Corrections,
    },
}

/// Judges the finished results of a reply (`calls` in the model's order,
/// `results` in any order). The first signal in the model's order counts
/// (one attempt per round); without one, a successful call of a fallback
/// tool of the current chain's last attempt (of any tool, when the attempt
/// named none) closes the chain.
pub fn assess(
    corrections: &Corrections,
    calls: &[ToolCall],
    results: &[ToolResult],
    now_ms: i64,
) -> Assessment {
    let result_of = |id: &str| results.iter().find(|r| r.tool_use_id == id);
    let signal = calls
        .iter()
        .find_map(|call| result_of(&call.id).and_then(|r| CorrectionSignal::of(&call.name, r)));
    let mut next = corrections.clone();
    let current = next
        .current
        .clone()
        .unwrap_or_else(|| OriginalRequest::new(""));
    let position = next.chains.iter().position(|c| c.key == current.key);
    let Some(signal) = signal else {
        let Some(i) = position else {
            return Assessment::None;
        };
        let chain = &next.chains[i];
        let Some(last) = chain.attempts.last() else {
            return Assessment::None;
        };
        let succeeded = calls.iter().find(|call| {
            let fits = last.fallback_tools.is_empty() || last.fallback_tools.contains(&call.name);
            fits && result_of(&call.id).is_some_and(|r| !r.is_error)
        });
        return match succeeded {
            Some(call) => {
                let attempts = chain.attempts.len() as u32;
                next.chains.remove(i);
                Assessment::Succeeded {
                    attempts,
                    tool: call.name.clone(),
                    corrections: next,
                }
            }
            None => Assessment::None,
        };
    };
    let i = match position {
        Some(i) => i,
        None => {
            next.chains.push(CorrectionChain {
                key: current.key.clone(),
                original_request: current.text.clone(),
                attempts: Vec::new(),
                max_attempts: MAX_CORRECTION_ATTEMPTS,
            });
            if next.chains.len() > MAX_CHAINS {
                next.chains.remove(0);
            }
            next.chains.len() - 1
        }
    };
    let chain = &mut next.chains[i];
    let max_attempts = chain.max_attempts.min(MAX_CORRECTION_ATTEMPTS);
    let made = chain.attempts.len() as u32;
    if made >= max_attempts {
        next.chains.remove(i);
        return Assessment::Exhausted {
            attempts: made,
            signal,
            corrections: next,
        };
    }
    chain.attempts.push(CorrectionAttempt {
        tool: signal.original_tool.clone(),
        error: signal.original_error.clone(),
        timestamp_ms: now_ms,
        fallback_strategy: signal.fallback_request.clone(),
        fallback_tools: signal.fallback_tools.clone(),
    });
    Assessment::Attempt {
        attempt: made + 1,
        max_attempts,
        signal,
        corrections: next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_signal_reads_back_the_same() {
        let signal = CorrectionSignal {
            fallback_request: "Write the whole file with `write`.".into(),
            original_tool: "edit".into(),
            original_error: "old_string not found".into(),
            suggested_approach: "whole-file write".into(),
            fallback_tools: vec!["write".into()],
        };
        let text = format!("old_string not found in a.txt\n\n{}", signal.render());
        let result = ToolResult::new("t1", text, true);
        assert_eq!(CorrectionSignal::of("edit", &result), Some(signal));
    }

    #[test]
    fn a_bare_signal_line_takes_its_defaults_from_the_result() {
        let result = ToolResult::new("t1", "it broke\nSELF_CORRECT_ATTEMPT: try bash", true);
        let signal = CorrectionSignal::of("mcp_x", &result).unwrap();
        assert_eq!(signal.original_tool, "mcp_x");
        assert_eq!(signal.original_error, "it broke");
        assert_eq!(signal.fallback_request, "try bash");
        assert!(signal.fallback_tools.is_empty());
    }

    #[test]
    fn no_signal_in_successes_or_mid_line_mentions() {
        let ok = ToolResult::new("t1", "SELF_CORRECT_ATTEMPT: x", false);
        assert_eq!(CorrectionSignal::of("edit", &ok), None);
        let quoted = ToolResult::new("t1", "grep found SELF_CORRECT_ATTEMPT: x", true);
        assert_eq!(CorrectionSignal::of("grep", &quoted), None);
        let empty = ToolResult::new("t1", "SELF_CORRECT_ATTEMPT:   ", true);
        assert_eq!(CorrectionSignal::of("edit", &empty), None);
    }

    #[test]
    fn keys_are_stable() {
        assert_eq!(request_key(""), "cbf29ce484222325");
        assert_eq!(request_key("a"), "af63dc4c8601ec8c");
        assert_ne!(request_key("fix it"), request_key("fix it!"));
    }
}
