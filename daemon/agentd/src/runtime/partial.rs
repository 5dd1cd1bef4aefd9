//! The reply being streamed, rebuilt from stream events so that a client
//! attaching mid-reply sees what the others saw, and a cancel keeps it.

use crate::llm::StreamEvent;
use agentd_core::ContentBlock;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Block {
    Text(String),
    Thinking(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
}

/// A partial reply, keyed by content block index.
#[derive(Debug, Default, Clone)]
pub struct PartialReply {
    blocks: BTreeMap<u32, Block>,
}

impl PartialReply {
    /// Folds one stream event in.
    pub fn apply(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta { index, text } => {
                if let Block::Text(t) = self
                    .blocks
                    .entry(*index)
                    .or_insert_with(|| Block::Text(String::new()))
                {
                    t.push_str(text);
                }
            }
            StreamEvent::ThinkingDelta { index, text } => {
                if let Block::Thinking(t) = self
                    .blocks
                    .entry(*index)
                    .or_insert_with(|| Block::Thinking(String::new()))
                {
                    t.push_str(text);
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

    /// Forgets everything (a new attempt starts).
    pub fn clear(&mut self) {
        self.blocks.clear();
    }

    /// The blocks so far. Reasoning carries no signature (it was cut), and
    /// tool inputs that do not parse yet are kept as raw strings.
    pub fn blocks(&self) -> Vec<ContentBlock> {
        self.blocks
            .values()
            .map(|b| match b {
                Block::Text(t) => ContentBlock::text(t.clone()),
                Block::Thinking(t) => ContentBlock::Thinking {
                    thinking: t.clone(),
                    signature: String::new(),
                },
                Block::ToolUse { id, name, json } => ContentBlock::ToolUse {
                    id: id.clone(),
                    name: name.clone(),
                    input: serde_json::from_str(json)
                        .unwrap_or_else(|_| serde_json::Value::String(json.clone())),
                },
            })
            .collect()
    }
}
