//! Messages and their content blocks and images, both ways: to clients, and
//! from clients (imports, uploads), checked.

use super::{brief, usage, usage_from};
use agent_proto::v1 as pb;
use agentd_core::{ContentBlock, Message, MessageKind, Role};
use tonic::Status;

pub(crate) fn message(seq: u64, m: &Message) -> pb::Message {
    pb::Message {
        seq,
        role: match m.role {
            Role::User => pb::Role::User,
            Role::Assistant => pb::Role::Assistant,
        } as i32,
        content: m.content.iter().map(|b| block_in(b, &m.content)).collect(),
        created_at_ms: m.created_at_ms,
        usage: m.usage.as_ref().map(usage),
        stop_reason: m
            .stop_reason
            .as_ref()
            .map(|s| s.as_wire().to_string())
            .unwrap_or_default(),
        interrupted: m.interrupted,
        kind: message_kind(m.kind) as i32,
    }
}

pub(crate) fn message_from(m: &pb::Message) -> Result<Message, Status> {
    let role = match pb::Role::try_from(m.role) {
        Ok(pb::Role::User) => Role::User,
        Ok(pb::Role::Assistant) => Role::Assistant,
        _ => {
            return Err(Status::invalid_argument(format!(
                "message {} has no valid role",
                m.seq
            )));
        }
    };
    Ok(Message {
        role,
        content: m.content.iter().map(block_from).collect::<Result<_, _>>()?,
        created_at_ms: m.created_at_ms,
        usage: m.usage.as_ref().map(usage_from),
        stop_reason: (!m.stop_reason.is_empty())
            .then(|| agentd_core::StopReason::from_wire(&m.stop_reason)),
        interrupted: m.interrupted,
        kind: message_kind_from(m.kind)?,
    })
}

pub(crate) fn message_kind(k: MessageKind) -> pb::MessageKind {
    match k {
        MessageKind::Ordinary => pb::MessageKind::Ordinary,
        MessageKind::Continuation => pb::MessageKind::Continuation,
        MessageKind::Continued => pb::MessageKind::Continued,
    }
}

fn message_kind_from(k: i32) -> Result<MessageKind, Status> {
    match pb::MessageKind::try_from(k) {
        Ok(pb::MessageKind::Ordinary) => Ok(MessageKind::Ordinary),
        Ok(pb::MessageKind::Continuation) => Ok(MessageKind::Continuation),
        Ok(pb::MessageKind::Continued) => Ok(MessageKind::Continued),
        Err(_) => Err(Status::invalid_argument(format!(
            "{k} is not a message kind"
        ))),
    }
}

pub(crate) fn block(b: &ContentBlock) -> pb::ContentBlock {
    block_in(b, std::slice::from_ref(b))
}

/// [`block`] of a block of the message whose blocks are `content` (a
/// search's line names the query its call in the same message asked).
fn block_in(b: &ContentBlock, content: &[ContentBlock]) -> pb::ContentBlock {
    use pb::content_block::Block;
    let block = match b {
        ContentBlock::Text { text } => Block::Text(pb::TextBlock { text: text.clone() }),
        ContentBlock::Thinking {
            thinking,
            signature,
        } => Block::Thinking(pb::ThinkingBlock {
            thinking: thinking.clone(),
            signature: signature.clone(),
            redacted_data: String::new(),
        }),
        ContentBlock::RedactedThinking { data } => Block::Thinking(pb::ThinkingBlock {
            thinking: REDACTED.to_string(),
            signature: String::new(),
            redacted_data: data.clone(),
        }),
        ContentBlock::ToolUse { id, name, input } => Block::ToolUse(pb::ToolUseBlock {
            id: id.clone(),
            name: name.clone(),
            input_json: input.to_string(),
            kind: super::tool_kind(name),
        }),
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            images,
        } => Block::ToolResult(pb::ToolResultBlock {
            tool_use_id: tool_use_id.clone(),
            content: content.clone(),
            is_error: *is_error,
            images: images.iter().map(image).collect(),
        }),
        ContentBlock::Image(i) => Block::Image(image(i)),
        ContentBlock::ServerTool { block } => Block::ServerTool(pb::ServerToolBlock {
            json: block.to_string(),
            summary: agentd_core::server_tools::line(content, block).unwrap_or_default(),
        }),
    };
    pb::ContentBlock { block: Some(block) }
}

/// [`block`] for a block of our own: its text moves instead of being copied.
pub(super) fn block_owned(b: ContentBlock) -> pb::ContentBlock {
    use pb::content_block::Block;
    let block = match b {
        ContentBlock::Text { text } => Block::Text(pb::TextBlock { text }),
        ContentBlock::Thinking {
            thinking,
            signature,
        } => Block::Thinking(pb::ThinkingBlock {
            thinking,
            signature,
            redacted_data: String::new(),
        }),
        other => return block(&other),
    };
    pb::ContentBlock { block: Some(block) }
}

pub(crate) fn block_from(b: &pb::ContentBlock) -> Result<ContentBlock, Status> {
    use pb::content_block::Block;
    match &b.block {
        Some(Block::Text(t)) => Ok(ContentBlock::text(t.text.clone())),
        Some(Block::Thinking(t)) if !t.redacted_data.is_empty() => {
            Ok(ContentBlock::RedactedThinking {
                data: t.redacted_data.clone(),
            })
        }
        Some(Block::Thinking(t)) => Ok(ContentBlock::Thinking {
            thinking: t.thinking.clone(),
            signature: t.signature.clone(),
        }),
        Some(Block::ToolUse(t)) => Ok(ContentBlock::ToolUse {
            id: t.id.clone(),
            name: t.name.clone(),
            input: serde_json::from_str(&t.input_json).map_err(|e| {
                Status::invalid_argument(format!("tool_use {} has invalid input JSON: {e}", t.id))
            })?,
        }),
        Some(Block::ToolResult(t)) => Ok(ContentBlock::ToolResult {
            tool_use_id: t.tool_use_id.clone(),
            content: t.content.clone(),
            is_error: t.is_error,
            images: t.images.iter().map(image_from).collect::<Result<_, _>>()?,
        }),
        Some(Block::Image(i)) => Ok(ContentBlock::Image(image_from(i)?)),
        Some(Block::ServerTool(s)) => server_block_from(&s.json),
        None => Err(Status::invalid_argument("content block without a kind")),
    }
}

/// A server tool's block from its JSON: an object whose `type` is one of a
/// server tool's.
fn server_block_from(json: &str) -> Result<ContentBlock, Status> {
    let block: serde_json::Value = serde_json::from_str(json).map_err(|e| {
        Status::invalid_argument(format!(
            "server tool block {}: invalid JSON: {e}",
            brief(json)
        ))
    })?;
    match block.get("type").and_then(serde_json::Value::as_str) {
        Some(kind) if agentd_core::server_tools::is_server_block(kind) => {
            Ok(ContentBlock::ServerTool { block })
        }
        _ => Err(Status::invalid_argument(format!(
            "server tool block {}: its `type` is not a server tool's \
             (server_tool_use or …_tool_result)",
            brief(json)
        ))),
    }
}

/// What a redacted thinking block says to clients (its data is for the
/// model).
const REDACTED: &str = "[redacted reasoning]";

/// The thinking a client asked for a turn; unset: the model's.
pub(crate) fn thinking_from(
    choice: Option<&pb::ThinkingChoice>,
) -> Result<Option<agentd_core::Thinking>, Status> {
    use agentd_core::{Effort, Thinking};
    let Some(c) = choice else {
        return Ok(None);
    };
    let effort = match c.effort.as_str() {
        "" => None,
        e => Some(Effort::parse(e).ok_or_else(|| {
            Status::invalid_argument(format!(
                "thinking effort {:?} is not one of low, medium, high",
                brief(e)
            ))
        })?),
    };
    Ok(Some(match (c.off, c.budget_tokens, effort) {
        (true, 0, None) => Thinking::Off,
        (true, ..) => {
            return Err(Status::invalid_argument(
                "thinking cannot be off and have a budget or an effort",
            ));
        }
        (false, 0, None) => Thinking::On,
        (false, 0, Some(e)) => Thinking::Effort(e),
        (false, b, None) => Thinking::Budget(b),
        (false, _, Some(_)) => {
            return Err(Status::invalid_argument(
                "thinking takes a budget or an effort, not both",
            ));
        }
    }))
}

/// An image as clients see it in messages: its description, no bytes.
pub(crate) fn image(i: &agentd_core::ImageRef) -> pb::ImageBlock {
    pb::ImageBlock {
        media_type: i.media_type.mime().to_string(),
        size: i.size,
        sha256: i.sha256.clone(),
        width: i.width,
        height: i.height,
        data: Vec::new(),
    }
}

/// An image reference from a client (an import), checked.
pub(crate) fn image_from(i: &pb::ImageBlock) -> Result<agentd_core::ImageRef, Status> {
    let media_type = agentd_core::ImageMediaType::from_mime(&i.media_type).ok_or_else(|| {
        Status::invalid_argument(format!(
            "image {}: {:?} is not an image type agentd takes (image/png, image/jpeg, image/gif, image/webp)",
            brief(&i.sha256),
            brief(&i.media_type)
        ))
    })?;
    if i.sha256.len() != 64
        || !i
            .sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(Status::invalid_argument(format!(
            "image {:?}: sha256 must be 64 lower-case hex digits",
            brief(&i.sha256)
        )));
    }
    Ok(agentd_core::ImageRef {
        media_type,
        size: i.size,
        sha256: i.sha256.clone(),
        width: i.width,
        height: i.height,
    })
}

/// The images a client sends with a message, checked against the limits:
/// INVALID_ARGUMENT naming the image and the reason when one is refused.
pub(crate) fn uploads(
    limits: &agentd_core::ImageLimits,
    uploads: Vec<pb::ImageUpload>,
) -> Result<Vec<crate::images::StagedImage>, Status> {
    crate::images::stage(
        limits,
        uploads
            .into_iter()
            .map(|u| (bytes::Bytes::from(u.data), u.name))
            .collect(),
    )
    .map_err(|e| Status::invalid_argument(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_core::{Effort, Thinking};

    #[test]
    fn reasoning_survives_an_export_and_an_import_byte_for_byte() {
        for b in [
            ContentBlock::Thinking {
                thinking: "Let me look.".into(),
                signature: "c2ln+/==".into(),
            },
            ContentBlock::RedactedThinking {
                data: "EmwKAhgBEgy3va3pzix/LafPsn4a".into(),
            },
        ] {
            assert_eq!(block_from(&block(&b)).unwrap(), b);
            assert_eq!(block_from(&block_owned(b.clone())).unwrap(), b);
        }
        // Clients see that a redacted block is one.
        let shown = block(&ContentBlock::RedactedThinking { data: "x".into() });
        let Some(pb::content_block::Block::Thinking(t)) = shown.block else {
            panic!("{shown:?}");
        };
        assert_eq!(t.thinking, REDACTED);
    }

    #[test]
    fn server_tool_blocks_survive_an_export_and_are_shown_in_a_line() {
        let call = ContentBlock::ServerTool {
            block: serde_json::json!({"type": "server_tool_use", "id": "srv_1",
                "name": "web_search", "input": {"query": "htmd"}}),
        };
        let result = ContentBlock::ServerTool {
            block: serde_json::json!({"type": "web_search_tool_result", "tool_use_id": "srv_1",
                "content": [{"type": "web_search_result", "url": "https://x", "encrypted_content": "Eo8=", "title": "t"}]}),
        };
        let m = Message {
            role: Role::Assistant,
            content: vec![call.clone(), result.clone()],
            created_at_ms: 1,
            usage: None,
            stop_reason: None,
            interrupted: false,
            kind: MessageKind::Ordinary,
        };
        let shown = message(2, &m);
        let summary = |b: &pb::ContentBlock| match &b.block {
            Some(pb::content_block::Block::ServerTool(s)) => s.summary.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(summary(&shown.content[0]), "");
        assert_eq!(summary(&shown.content[1]), "searched: htmd (1 result)");
        assert_eq!(message_from(&shown).unwrap(), m);
        let bad = |json: &str| pb::ContentBlock {
            block: Some(pb::content_block::Block::ServerTool(pb::ServerToolBlock {
                json: json.into(),
                summary: String::new(),
            })),
        };
        assert!(
            block_from(&bad("{"))
                .unwrap_err()
                .message()
                .contains("invalid JSON")
        );
        let err = block_from(&bad(r#"{"type":"tool_use"}"#)).unwrap_err();
        assert!(err.message().contains("not a server tool's"), "{err}");
    }

    #[test]
    fn a_clients_thinking_choice_is_checked() {
        let choice = |off, budget_tokens, effort: &str| pb::ThinkingChoice {
            off,
            budget_tokens,
            effort: effort.into(),
        };
        assert_eq!(thinking_from(None).unwrap(), None);
        let ok = |c| thinking_from(Some(&c)).unwrap();
        assert_eq!(ok(choice(false, 0, "")), Some(Thinking::On));
        assert_eq!(ok(choice(true, 0, "")), Some(Thinking::Off));
        assert_eq!(ok(choice(false, 5000, "")), Some(Thinking::Budget(5000)));
        assert_eq!(
            ok(choice(false, 0, "High")),
            Some(Thinking::Effort(Effort::High))
        );
        for bad in [
            choice(false, 0, "max"),
            choice(true, 1, ""),
            choice(false, 1, "low"),
        ] {
            let status = thinking_from(Some(&bad)).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad:?}");
        }
    }
}
