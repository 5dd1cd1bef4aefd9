//! Pruning old tool outputs from model requests, before a summary is
//! needed (issue 15, point 2).
//!
//! A long task fills its context mostly with what tools printed: files
//! read, test runs, searches. Once a conversation's last reply fills the
//! warning share of the window (80 %), the daemon may send the oldest large
//! tool outputs as a one-line note instead, keeping the newest ones whole;
//! the transcript in the store stays intact (`agent show`, exports), only
//! requests change. Pruned outputs stay pruned: the cut only moves forward,
//! so the requests after a prune share their start again and the prompt
//! cache pays for a prune once.
//!
//! Everything here is pure: what to prune is decided from the transcript
//! and the window; tokens are estimated as a quarter of the bytes, which is
//! what a decision of this kind needs.

use crate::image::human_size;
use crate::message::{ContentBlock, Message};

/// How pruning decides, from the model's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunePolicy {
    /// The newest tool outputs, up to this many tokens, are never pruned.
    pub protect_tokens: u64,
    /// Outputs smaller than this are left alone (they cost little).
    pub min_tokens: u64,
    /// A prune that would save less than this is not worth the cache it
    /// costs.
    pub min_gain_tokens: u64,
}

impl PrunePolicy {
    /// The policy for a window of `window` tokens: the newest outputs
    /// worth a fifth of it are kept, outputs under 500 tokens (2 KB) are
    /// left alone, and a prune must save a twentieth of it.
    pub fn for_window(window: u64) -> PrunePolicy {
        PrunePolicy {
            protect_tokens: window / 5,
            min_tokens: 500,
            min_gain_tokens: window / 20,
        }
    }
}

/// A prune worth doing: tool outputs of the messages before `through` are
/// pruned (`results` of them, about `tokens` tokens saved in all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunePlan {
    pub through: usize,
    pub results: usize,
    pub tokens: u64,
}

/// Estimated tokens of `bytes` bytes of text.
fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// Estimated tokens of a tool result: its text and about 1,500 per image.
fn result_tokens(content: &str, images: usize) -> u64 {
    tokens(content.len()) + 1_500 * images as u64
}

/// Whether a tool result of `content` with `images` images is large
/// enough to prune.
fn prunable(policy: &PrunePolicy, content: &str, images: usize) -> bool {
    result_tokens(content, images) >= policy.min_tokens
}

/// What to prune now, given that the messages before `already` are pruned
/// already: the cut moves to just before the newest tool outputs worth
/// `protect_tokens`, if the outputs it newly covers save at least
/// `min_gain_tokens`. None: nothing worth pruning.
pub fn plan(messages: &[Message], already: usize, policy: &PrunePolicy) -> Option<PrunePlan> {
    // From the newest message back, find the first one whose tool outputs
    // no longer fit in the protected share.
    let mut protected = 0u64;
    let mut through = 0usize;
    for (i, message) in messages.iter().enumerate().rev() {
        for block in &message.content {
            if let ContentBlock::ToolResult {
                content, images, ..
            } = block
            {
                protected += result_tokens(content, images.len());
            }
        }
        if protected > policy.protect_tokens {
            // The message that overflowed the protected share is kept too,
            // so the newest output is never pruned however large it is.
            through = i;
            break;
        }
    }
    if through <= already {
        return None;
    }
    let (mut results, mut saved) = (0usize, 0u64);
    for message in &messages[already..through] {
        for block in &message.content {
            if let ContentBlock::ToolResult {
                content, images, ..
            } = block
                && prunable(policy, content, images.len())
            {
                results += 1;
                saved += result_tokens(content, images.len()).saturating_sub(tokens(
                    crate::texts::tool_output_pruned(content.len()).len(),
                ));
            }
        }
    }
    (saved >= policy.min_gain_tokens && results > 0).then_some(PrunePlan {
        through,
        results,
        tokens: saved,
    })
}

/// The transcript as requests send it once the messages before `through`
/// are pruned: their large tool outputs (text and images) become a note.
/// Nothing else changes, so a request stays a valid chain.
pub fn apply(messages: &[Message], through: usize, policy: &PrunePolicy) -> Vec<Message> {
    messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            if i >= through {
                return message.clone();
            }
            let mut message = message.clone();
            for block in &mut message.content {
                if let ContentBlock::ToolResult {
                    content, images, ..
                } = block
                    && prunable(policy, content, images.len())
                {
                    *content = crate::texts::tool_output_pruned(content.len());
                    images.clear();
                }
            }
            message
        })
        .collect()
}

/// `12 KB`: the size a pruned note names.
pub(crate) fn size(bytes: usize) -> String {
    human_size(bytes as u64)
}
