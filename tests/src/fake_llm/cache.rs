//! Anthropic's prompt cache, as the fake can tell it from request bodies
//! (`FakeLlm::emulate_prompt_cache`), so that a test sees the usage a real
//! server would report for the bodies the daemon sends.
//!
//! What Anthropic documents: the cached prefix runs through `tools`,
//! `system` and `messages` in that order, block by block; a block marked
//! `cache_control` ends a prefix that is written to the cache; a later
//! request reads the longest cached prefix ending at one of its own
//! breakpoints or at one of the 20 blocks before each (the marks themselves
//! are not part of what is compared). Tokens are counted as a quarter of the
//! bytes of each block's JSON, which is all a ratio needs.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// How many blocks before a breakpoint a lookup also tries.
const LOOKBACK: usize = 20;

/// The prefixes cached so far, by hash.
#[derive(Debug, Default)]
pub(crate) struct PromptCache {
    prefixes: HashSet<u64>,
}

/// What one request's input cost, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CacheUsage {
    pub uncached: u64,
    pub written: u64,
    pub read: u64,
}

impl PromptCache {
    /// Looks `body` (a Messages request) up and writes its breakpoints'
    /// prefixes.
    pub(crate) fn request(&mut self, body: &Value) -> CacheUsage {
        let (blocks, breakpoints) = blocks(body);
        // Running hash and token count of each prefix `blocks[..=i]`.
        let mut hashes = Vec::with_capacity(blocks.len());
        let mut tokens = Vec::with_capacity(blocks.len());
        let (mut hash, mut total) = (0u64, 0u64);
        for block in &blocks {
            let mut h = DefaultHasher::new();
            (hash, block).hash(&mut h);
            hash = h.finish();
            total += (block.len() as u64).div_ceil(4);
            hashes.push(hash);
            tokens.push(total);
        }
        let read = breakpoints
            .iter()
            .flat_map(|&b| (b.saturating_sub(LOOKBACK)..=b).rev())
            .filter(|&i| self.prefixes.contains(&hashes[i]))
            .map(|i| tokens[i])
            .max()
            .unwrap_or(0);
        let through_last = breakpoints.last().map_or(0, |&b| tokens[b]);
        for &b in &breakpoints {
            self.prefixes.insert(hashes[b]);
        }
        let written = through_last.saturating_sub(read);
        CacheUsage {
            uncached: total - read - written,
            written,
            read,
        }
    }
}

/// The body's blocks in cache order, each as its JSON without
/// `cache_control` (a message's first block carries its role), and the
/// indices of the blocks that were marked.
fn blocks(body: &Value) -> (Vec<String>, Vec<usize>) {
    let mut blocks = Vec::new();
    let mut marked = Vec::new();
    let mut add = |block: &Value, prefix: &str| {
        let mut block = block.clone();
        let was_marked = block
            .as_object_mut()
            .is_some_and(|o| o.remove("cache_control").is_some());
        if was_marked {
            marked.push(blocks.len());
        }
        blocks.push(format!("{prefix}{block}"));
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        add(tool, "tool:");
    }
    match &body["system"] {
        Value::Array(system) => system.iter().for_each(|b| add(b, "system:")),
        Value::Null => {}
        text => add(text, "system:"),
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        match &message["content"] {
            Value::Array(content) => {
                for (i, b) in content.iter().enumerate() {
                    add(b, if i == 0 { role } else { "" });
                }
            }
            text => add(text, role),
        }
    }
    (blocks, marked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(messages: usize, mark_last: bool) -> Value {
        let messages: Vec<Value> = (0..messages)
            .map(|i| {
                let mut block =
                    json!({"type": "text", "text": format!("message {i} {}", "x".repeat(400))});
                if mark_last && i + 1 == messages {
                    block["cache_control"] = json!({"type": "ephemeral"});
                }
                json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": [block]})
            })
            .collect();
        json!({
            "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
            "messages": messages,
        })
    }

    #[test]
    fn a_request_reads_what_the_one_before_wrote_even_with_the_mark_moved() {
        let mut cache = PromptCache::default();
        let first = cache.request(&body(3, true));
        assert_eq!(first.read, 0);
        assert!(first.written > 0);
        let second = cache.request(&body(5, true));
        assert_eq!(
            second.read, first.written,
            "the first request's prefix is read"
        );
        assert!(second.written > 0 && second.uncached == 0);
    }

    #[test]
    fn a_changed_block_before_the_breakpoint_misses() {
        let mut cache = PromptCache::default();
        let first = cache.request(&body(3, true));
        let mut changed = body(5, true);
        changed["messages"][0]["content"][0]["text"] = json!("edited");
        let usage = cache.request(&changed);
        // Only the system prompt's prefix is still cached.
        assert!(
            usage.read > 0 && usage.read * 10 < first.written,
            "{usage:?}"
        );
    }

    #[test]
    fn no_breakpoint_nothing_cached() {
        let mut cache = PromptCache::default();
        let mut b = body(2, false);
        b["system"] = json!("plain");
        assert_eq!(cache.request(&b).read + cache.request(&b).read, 0);
    }
}
