//! A reply laid out as a format-neutral sequence of steps, which the
//! Anthropic and OpenAI encoders turn into SSE events.

use std::ops::Range;

use super::script::{Block, DEFAULT_JSON_CHUNK_CHARS, DEFAULT_USAGE, ReplyScript};

/// One logical event of a reply. Deltas point into their block's text by
/// byte range, so a plan holds no per-delta strings.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    MessageStart,
    Ping,
    Unknown,
    BlockStart(usize),
    Delta { block: usize, range: Range<usize> },
    Signature(usize),
    BlockStop(usize),
    MessageDelta,
    MessageStop,
}

/// Everything an encoder needs to write one request's reply.
#[derive(Debug)]
pub(crate) struct Plan {
    pub script: ReplyScript,
    pub steps: Vec<Step>,
    /// For each block, its position among the tool_use blocks (OpenAI's
    /// `tool_calls[].index`).
    pub tool_ordinal: Vec<usize>,
    /// Echoed from the request's `model`.
    pub model: String,
    /// `msg_fake_N` / `chatcmpl-fake-N`.
    pub seq: u64,
    /// Unix seconds at the request, for OpenAI's `created`.
    pub created: u64,
    pub input_tokens: u64,
    /// Input tokens read from and written to the prompt cache (0 unless the
    /// fake emulates one).
    pub cache_read_tokens: u64,
    pub cache_creation_tokens: u64,
    pub output_tokens: u64,
    pub stop_reason: String,
}

impl Plan {
    pub(super) fn new(script: ReplyScript, model: String, seq: u64, created: u64) -> Plan {
        let mut steps = vec![Step::MessageStart];
        if script.unknown_event {
            steps.push(Step::Unknown);
        }
        let mut ping_pending = script.ping;
        if ping_pending && script.blocks.is_empty() {
            steps.push(Step::Ping);
            ping_pending = false;
        }
        let mut tool_ordinal = Vec::with_capacity(script.blocks.len());
        let mut tools = 0;
        for (i, block) in script.blocks.iter().enumerate() {
            tool_ordinal.push(tools);
            steps.push(Step::BlockStart(i));
            if ping_pending {
                steps.push(Step::Ping);
                ping_pending = false;
            }
            let deltas = |ranges: Vec<Range<usize>>| {
                ranges
                    .into_iter()
                    .map(move |range| Step::Delta { block: i, range })
            };
            match block {
                Block::Text(text) => steps.extend(deltas(split_text(text, script.chunk_chars))),
                Block::Deltas { n, each } => {
                    steps.reserve(*n);
                    steps.extend((0..*n).map(|_| Step::Delta {
                        block: i,
                        range: 0..each.len(),
                    }));
                }
                Block::Thinking { text, .. } => {
                    steps.extend(deltas(split_text(text, script.chunk_chars)));
                    steps.push(Step::Signature(i));
                }
                Block::Redacted(_) => {}
                Block::ToolUse { raw_json, .. } => {
                    tools += 1;
                    // Anthropic opens every tool input with an empty fragment.
                    steps.push(Step::Delta {
                        block: i,
                        range: 0..0,
                    });
                    let n = script.json_chunk_chars.unwrap_or(DEFAULT_JSON_CHUNK_CHARS);
                    steps.extend(deltas(split_chars(raw_json, n)));
                }
                Block::Server { raw_json, .. } if !raw_json.is_empty() => {
                    steps.push(Step::Delta {
                        block: i,
                        range: 0..0,
                    });
                    let n = script.json_chunk_chars.unwrap_or(DEFAULT_JSON_CHUNK_CHARS);
                    steps.extend(deltas(split_chars(raw_json, n)));
                }
                Block::Server { .. } => {}
            }
            steps.push(Step::BlockStop(i));
        }
        steps.push(Step::MessageDelta);
        steps.push(Step::MessageStop);
        let (input_tokens, output_tokens) = script.usage.unwrap_or(DEFAULT_USAGE);
        let stop_reason = script.effective_stop_reason().to_string();
        Plan {
            script,
            steps,
            tool_ordinal,
            model,
            seq,
            created,
            input_tokens,
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
            output_tokens,
            stop_reason,
        }
    }

    /// The text a delta step carries (without any timestamp).
    pub(super) fn delta_text(&self, block: usize, range: &Range<usize>) -> &str {
        let source = match &self.script.blocks[block] {
            Block::Text(text) => text,
            Block::Deltas { each, .. } => each,
            Block::Thinking { text, .. } => text,
            Block::Redacted(data) => data,
            Block::ToolUse { raw_json, .. } | Block::Server { raw_json, .. } => raw_json,
        };
        &source[range.clone()]
    }
}

/// Word by word (each word keeps the whitespace that follows it), or in
/// groups of `chunk_chars` characters.
pub(crate) fn split_text(text: &str, chunk_chars: Option<usize>) -> Vec<Range<usize>> {
    match chunk_chars {
        Some(n) => split_chars(text, n),
        None => split_words(text),
    }
}

fn split_words(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev_space = false;
    for (i, c) in text.char_indices() {
        if prev_space && !c.is_whitespace() {
            out.push(start..i);
            start = i;
        }
        prev_space = c.is_whitespace();
    }
    if start < text.len() {
        out.push(start..text.len());
    }
    out
}

/// Groups of `n` characters (never splitting a UTF-8 sequence).
pub(crate) fn split_chars(text: &str, n: usize) -> Vec<Range<usize>> {
    let n = n.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    for (count, (i, _)) in text.char_indices().enumerate() {
        if count > 0 && count % n == 0 {
            out.push(start..i);
            start = i;
        }
    }
    if start < text.len() {
        out.push(start..text.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str, ranges: Vec<Range<usize>>) -> Vec<&str> {
        ranges.into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn words_keep_their_trailing_whitespace() {
        let t = "Hello  from the\nfake LLM ";
        assert_eq!(
            pieces(t, split_words(t)),
            ["Hello  ", "from ", "the\n", "fake ", "LLM "]
        );
        assert_eq!(pieces(" lead", split_words(" lead")), [" ", "lead"]);
        assert!(split_words("").is_empty());
    }

    #[test]
    fn char_groups_respect_utf8() {
        let t = "aé☃bcd";
        assert_eq!(pieces(t, split_chars(t, 2)), ["aé", "☃b", "cd"]);
        assert_eq!(pieces(t, split_chars(t, 4)), ["aé☃b", "cd"]);
        assert!(split_chars("", 3).is_empty());
    }
}
