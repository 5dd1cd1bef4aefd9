//! What a stream had produced when it stopped.
//!
//! A cancelled request returns `Err(LlmError::Cancelled)`, yet the state
//! machine wants the partial reply (`Event::LlmAborted { partial }`) so that
//! text the user already saw stays in the transcript. The caller folds the
//! stream events it receives into a [`PartialReply`] and takes the blocks
//! from it when the stream ends early.

use agentd_core::ContentBlock;
use std::collections::BTreeMap;

use super::{StreamEvent, tool_input_from_json};

/// Content blocks assembled from [`StreamEvent`]s.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartialReply {
    blocks: BTreeMap<u32, Block>,
}

#[derive(Debug, Clone, PartialEq)]
enum Block {
    Text(String),
    Thinking(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
}

impl PartialReply {
    /// Nothing received yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one event into account.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta { index, text } => {
                if let Block::Text(all) = self
                    .blocks
                    .entry(*index)
                    .or_insert_with(|| Block::Text(String::new()))
                {
                    all.push_str(text);
                }
            }
            StreamEvent::ThinkingDelta { index, text } => {
                if let Block::Thinking(all) = self
                    .blocks
                    .entry(*index)
                    .or_insert_with(|| Block::Thinking(String::new()))
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

    /// The blocks so far, in order. Reasoning has no signature (the stream
    /// events do not carry it) and tool calls may be incomplete; the state
    /// machine drops both from an interrupted reply.
    pub fn into_blocks(self) -> Vec<ContentBlock> {
        self.blocks
            .into_values()
            .map(|block| match block {
                Block::Text(text) => ContentBlock::Text { text },
                Block::Thinking(thinking) => ContentBlock::Thinking {
                    thinking,
                    signature: String::new(),
                },
                Block::ToolUse { id, name, json } => ContentBlock::ToolUse {
                    id,
                    name,
                    input: tool_input_from_json(&json),
                },
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
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
}
