//! What a stream had produced when it stopped.
//!
//! A cancelled request returns `Err(LlmError::Cancelled)`, yet the state
//! machine wants the partial reply (`Event::LlmAborted { partial }`) so that
//! text the user already saw stays in the transcript. The caller folds the
//! stream events it receives into a [`PartialReply`] and takes the blocks
//! from it when the stream ends early.

use agentd_core::ContentBlock;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{StreamEvent, tool_input_from_json};

/// Content blocks assembled from [`StreamEvent`]s. Cloning it is cheap
/// however long the reply has grown (the text is shared, see
/// [`SharedText`]), so a snapshot can take it while the reply streams on.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PartialReply {
    blocks: BTreeMap<u32, Block>,
}

#[derive(Debug, Clone, PartialEq)]
enum Block {
    Text(SharedText),
    Thinking(SharedText),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
}

/// Bytes of text per piece of a [`SharedText`].
const PIECE: usize = 64 * 1024;

/// Text that grows at its end and is cheap to clone: pieces of about
/// [`PIECE`] bytes shared between clones. Only the last piece is ever
/// appended to, and it is copied first if a clone still holds it, so a
/// clone costs a copy of at most one piece, once, instead of the whole text.
#[derive(Debug, Clone, Default)]
struct SharedText {
    pieces: Vec<Arc<String>>,
}

impl SharedText {
    fn push_str(&mut self, more: &str) {
        match self.pieces.last_mut() {
            Some(last) if last.len() < PIECE => Arc::make_mut(last).push_str(more),
            _ => self.pieces.push(Arc::new(more.to_string())),
        }
    }

    fn to_text(&self) -> String {
        let mut text = String::with_capacity(self.pieces.iter().map(|p| p.len()).sum());
        for piece in &self.pieces {
            text.push_str(piece);
        }
        text
    }
}

impl PartialEq for SharedText {
    /// The same text, however it is cut into pieces.
    fn eq(&self, other: &Self) -> bool {
        let bytes = |t: &SharedText| {
            t.pieces
                .iter()
                .flat_map(|p| p.as_bytes().iter().copied())
                .collect::<Vec<u8>>()
        };
        bytes(self) == bytes(other)
    }
}

impl PartialReply {
    /// Nothing received yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Takes one event into account.
    pub(crate) fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta { index, text } => {
                if let Block::Text(all) = self
                    .blocks
                    .entry(*index)
                    .or_insert_with(|| Block::Text(SharedText::default()))
                {
                    all.push_str(text);
                }
            }
            StreamEvent::ThinkingDelta { index, text } => {
                if let Block::Thinking(all) = self
                    .blocks
                    .entry(*index)
                    .or_insert_with(|| Block::Thinking(SharedText::default()))
                {
                    all.push_str(text);
                }
            }
            StreamEvent::ToolUseBegin { index, id, name } => {
                self.blocks.insert(
                    *index,
                    Block::ToolUse {
                        id: id.clone(),
                        name: name.clone(),
                        json: String::new(),
                    },
                );
            }
            StreamEvent::ToolInputDelta {
                index,
                partial_json,
            } => {
                if let Some(Block::ToolUse { json, .. }) = self.blocks.get_mut(index) {
                    json.push_str(partial_json);
                }
            }
            StreamEvent::BlockEnd { .. } | StreamEvent::Usage(_) => {}
        }
    }

    /// The tool call of block `index` as the finished reply will have it
    /// (for a block that has ended), or None when that block is no tool
    /// call.
    pub(crate) fn tool_call(&self, index: u32) -> Option<agentd_core::ToolCall> {
        match self.blocks.get(&index)? {
            Block::ToolUse { id, name, json } => Some(agentd_core::ToolCall {
                id: id.clone(),
                name: name.clone(),
                input: tool_input_from_json(json),
            }),
            _ => None,
        }
    }

    /// The ids of the tool calls in the blocks before `index`, in order.
    pub(crate) fn tool_ids_before(&self, index: u32) -> Vec<String> {
        self.blocks
            .range(..index)
            .filter_map(|(_, b)| match b {
                Block::ToolUse { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect()
    }

    /// The blocks so far, in order. Reasoning has no signature (the stream
    /// events do not carry it) and tool calls may be incomplete; the state
    /// machine drops both from an interrupted reply.
    pub(crate) fn into_blocks(self) -> Vec<ContentBlock> {
        self.to_blocks()
    }

    /// The blocks so far, in order (see [`PartialReply::into_blocks`]).
    pub(crate) fn to_blocks(&self) -> Vec<ContentBlock> {
        self.blocks
            .values()
            .map(|block| match block {
                Block::Text(text) => ContentBlock::Text {
                    text: text.to_text(),
                },
                Block::Thinking(thinking) => ContentBlock::Thinking {
                    thinking: thinking.to_text(),
                    signature: String::new(),
                },
                Block::ToolUse { id, name, json } => ContentBlock::ToolUse {
                    id: id.clone(),
                    name: name.clone(),
                    input: tool_input_from_json(json),
                },
            })
            .collect()
    }

    /// Whether nothing was received yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn folds_events_into_blocks_in_index_order() {
        let mut partial = PartialReply::new();
        for event in [
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "hm".into(),
            },
            StreamEvent::BlockEnd { index: 0 },
            StreamEvent::ToolUseBegin {
                index: 2,
                id: "t".into(),
                name: "read".into(),
            },
            StreamEvent::ToolInputDelta {
                index: 2,
                partial_json: "{\"pa".into(),
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "Hel".into(),
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "lo".into(),
            },
        ] {
            partial.push(&event);
        }
        assert_eq!(
            partial.into_blocks(),
            vec![
                ContentBlock::Thinking {
                    thinking: "hm".into(),
                    signature: String::new()
                },
                ContentBlock::text("Hello"),
                ContentBlock::ToolUse {
                    id: "t".into(),
                    name: "read".into(),
                    input: Value::String("{\"pa".into())
                },
            ]
        );
        assert_eq!(PartialReply::new().into_blocks(), vec![]);
    }

    #[test]
    fn a_clone_shares_the_text_and_both_grow_apart_exactly() {
        let mut partial = PartialReply::new();
        let piece = "0123456789".repeat(1000);
        for _ in 0..20 {
            partial.push(&StreamEvent::TextDelta {
                index: 0,
                text: piece.clone(),
            });
        }
        let Some(Block::Text(text)) = partial.blocks.get(&0) else {
            panic!("a text block")
        };
        assert!(text.pieces.len() >= 3, "200 KB is cut into pieces");
        let first_pieces: Vec<_> = text.pieces.iter().map(Arc::as_ptr).collect();

        let snapshot = partial.clone();
        let Some(Block::Text(shared)) = snapshot.blocks.get(&0) else {
            panic!("a text block")
        };
        let shared_pieces: Vec<_> = shared.pieces.iter().map(Arc::as_ptr).collect();
        assert_eq!(shared_pieces, first_pieces, "the clone copied no text");

        partial.push(&StreamEvent::TextDelta {
            index: 0,
            text: "more".into(),
        });
        assert_eq!(
            snapshot.to_blocks(),
            vec![ContentBlock::text(piece.repeat(20))],
            "the clone keeps what it had"
        );
        assert_eq!(
            partial.clone().into_blocks(),
            vec![ContentBlock::text(format!("{}more", piece.repeat(20)))]
        );
        assert_ne!(partial, snapshot);
        assert!(!partial.is_empty());
        assert!(PartialReply::new().is_empty());
    }
}
