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
        content: m.content.iter().map(block).collect(),
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
    use pb::content_block::Block;
    let block = match b {
        ContentBlock::Text { text } => Block::Text(pb::TextBlock { text: text.clone() }),
        ContentBlock::Thinking {
            thinking,
            signature,
        } => Block::Thinking(pb::ThinkingBlock {
            thinking: thinking.clone(),
            signature: signature.clone(),
        }),
        ContentBlock::RedactedThinking { .. } => Block::Thinking(pb::ThinkingBlock {
            thinking: "[redacted reasoning]".to_string(),
            signature: String::new(),
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
        }),
        other => return block(&other),
    };
    pb::ContentBlock { block: Some(block) }
}

pub(crate) fn block_from(b: &pb::ContentBlock) -> Result<ContentBlock, Status> {
    use pb::content_block::Block;
    match &b.block {
        Some(Block::Text(t)) => Ok(ContentBlock::text(t.text.clone())),
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
        None => Err(Status::invalid_argument("content block without a kind")),
    }
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
