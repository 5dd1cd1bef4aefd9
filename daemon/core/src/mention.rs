//! `@path` mentions in a user's message (issue 42 point 7): which tokens
//! name a path ([`mentions`], pure), and the blocks the model gets for
//! what the daemon found there ([`blocks`]). Reading the files is the
//! daemon's, with the rules of `read` (confinement, size cap, images).
//!
//! A mention is an `@` that starts a word (at the start of the text, after
//! whitespace or an opening bracket or quote) followed by a path: up to the
//! next whitespace, without the punctuation that ends a sentence or closes
//! a bracket (`see @src/a.rs.` names `src/a.rs`), or a quoted path
//! (`@"my notes.txt"`). So an email address (`a@b.com`), an `@` alone or
//! at the end, and an unterminated quote are plain text. Each path is
//! named once, in the order of first mention, at most [`MAX_MENTIONS`].

use serde::{Deserialize, Serialize};

use crate::image::ImageRef;
use crate::message::ContentBlock;

/// The most paths one message attaches.
pub const MAX_MENTIONS: usize = 20;

/// Characters that may come before the `@` of a mention.
const OPENERS: &[char] = &['(', '[', '{', '"', '\'', '`', '<'];
/// Characters a path does not end with (they end the sentence around it).
const CLOSERS: &[char] = &[
    '.', ',', ';', ':', '!', '?', ')', ']', '}', '"', '\'', '`', '>',
];

/// The paths `text` mentions, in order, each once.
pub fn mentions(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut prev: Option<char> = None;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let after = &rest[c.len_utf8()..];
        let starts_word = prev.is_none_or(|p| p.is_whitespace() || OPENERS.contains(&p));
        if c == '@' && starts_word {
            let (path, used) = mention_at(after);
            if let Some(path) = path
                && !found.contains(&path)
                && found.len() < MAX_MENTIONS
            {
                found.push(path);
            }
            if used > 0 {
                prev = after[..used].chars().last();
                rest = &after[used..];
                continue;
            }
        }
        prev = Some(c);
        rest = after;
    }
    found
}

/// The path of a mention whose `@` comes just before `after`, and how many
/// bytes of `after` it takes.
fn mention_at(after: &str) -> (Option<String>, usize) {
    if let Some(quoted) = after.strip_prefix('"') {
        return match quoted.find('"') {
            Some(end) if !quoted[..end].trim().is_empty() && !quoted[..end].contains('\n') => {
                (Some(quoted[..end].to_string()), end + 2)
            }
            _ => (None, 0),
        };
    }
    let word_end = after.find(char::is_whitespace).unwrap_or(after.len());
    let word = after[..word_end].trim_end_matches(CLOSERS);
    if word.is_empty() || word.contains('@') {
        (None, 0)
    } else {
        (Some(word.to_string()), word.len())
    }
}

/// What the daemon found at a mentioned path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "found", rename_all = "snake_case")]
pub enum MentionFound {
    /// A text file: what `read` returns for it (numbered lines, cut at
    /// its size limit with its marker).
    Text { content: String },
    /// An image, as `read` returns it (stored by its content).
    Image { image: ImageRef },
    /// A file it does not attach (outside the conversation's directories,
    /// binary, unreadable): why, never its content.
    Refused { reason: String },
}

/// A mentioned path (as the user wrote it) and what was found there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mentioned {
    pub path: String,
    #[serde(flatten)]
    pub found: MentionFound,
}

/// The blocks that follow the user's text, one per mention (an image has
/// its path in a text block before it).
pub fn blocks(mentioned: &[Mentioned]) -> Vec<ContentBlock> {
    let mut out = Vec::new();
    for m in mentioned {
        match &m.found {
            MentionFound::Text { content } => {
                out.push(ContentBlock::text(crate::texts::mention_contents(
                    &m.path, content,
                )));
            }
            MentionFound::Image { image } => {
                out.push(ContentBlock::text(crate::texts::mention_image(&m.path)));
                out.push(ContentBlock::Image(image.clone()));
            }
            MentionFound::Refused { reason } => {
                out.push(ContentBlock::text(crate::texts::mention_refused(
                    &m.path, reason,
                )));
            }
        }
    }
    out
}
