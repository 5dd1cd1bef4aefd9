//! Export and import: a conversation and its images read back from an
//! export, validated.

use super::{brief, image_from, message_from, mode_from, usage_from};
use crate::store::{ConversationRecord, ForkOrigin, Setup};
use agent_proto::v1 as pb;
use agentd_core::{ContinuationChain, ConvState, Conversation, ErrorKind, Message};
use tonic::Status;

/// A conversation from an export, validated. Conversations exported
/// mid-turn come back at rest (Idle): the work in flight belonged to the
/// daemon that exported them.
pub(crate) fn exported_from(
    e: &pb::ExportedConversation,
) -> Result<(ConversationRecord, Vec<Message>), Status> {
    let c = e
        .conversation
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("exported conversation without its record"))?;
    let id = ulid::Ulid::from_string(&c.id)
        .map_err(|err| {
            Status::invalid_argument(format!("invalid conversation id {:?}: {err}", brief(&c.id)))
        })?
        .to_string();
    let mut messages = Vec::with_capacity(e.messages.len());
    for (i, m) in e.messages.iter().enumerate() {
        if m.seq != i as u64 + 1 {
            return Err(Status::invalid_argument(format!(
                "conversation {id}: message {} is out of sequence (expected {})",
                m.seq,
                i + 1
            )));
        }
        messages.push(message_from(m)?);
    }
    let additional_dirs = c
        .additional_dirs
        .iter()
        .map(|d| {
            let path = std::path::PathBuf::from(d);
            if path.is_absolute() {
                Ok(path)
            } else {
                Err(Status::invalid_argument(format!(
                    "conversation {id}: additional directory {:?} is not an absolute path",
                    brief(d)
                )))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    for rule in &c.allow_rules {
        agentd_core::Rule::parse(rule, agentd_core::Action::Allow).map_err(|err| {
            Status::invalid_argument(format!("conversation {id}: rule {:?}: {err}", brief(rule)))
        })?;
    }
    let allow_rules = c.allow_rules.clone();
    let state = match c.state.as_ref() {
        Some(s) if s.kind == pb::StateKind::Error as i32 => ConvState::Error {
            message: s.error_message.clone(),
            kind: match pb::ErrorKind::try_from(s.error_kind) {
                Ok(pb::ErrorKind::Auth) => ErrorKind::Auth,
                Ok(pb::ErrorKind::RateLimit) => ErrorKind::RateLimit,
                Ok(pb::ErrorKind::Network) => ErrorKind::Network,
                Ok(pb::ErrorKind::InvalidRequest) => ErrorKind::InvalidRequest,
                Ok(pb::ErrorKind::ContextExhausted) => ErrorKind::ContextExhausted,
                Ok(pb::ErrorKind::Budget) => ErrorKind::Budget,
                _ => ErrorKind::Unknown,
            },
        },
        _ => ConvState::Idle,
    };
    let record = ConversationRecord {
        id,
        title: c.title.clone(),
        cwd: std::path::PathBuf::from(&c.cwd),
        model: c.model.clone(),
        created_at_ms: c.created_at_ms,
        updated_at_ms: c.updated_at_ms,
        conversation: Conversation {
            state,
            mode: mode_from(c.mode)?,
            continuation: ContinuationChain {
                parent_id: non_empty(&c.parent_conversation_id),
                continued_as: non_empty(&c.continued_as),
                ..ContinuationChain::default()
            },
            ..Conversation::default()
        },
        setup: Setup {
            additional_dirs,
            allow_rules,
            // An export names its MCP servers but not their commands: an
            // imported conversation runs none of its own (a file should
            // not bring commands to run with it).
            mcp_servers: Vec::new(),
        },
        message_count: messages.len() as u64,
        usage: c.usage.as_ref().map(usage_from).unwrap_or_default(),
        fork: ForkOrigin {
            forked_from: non_empty(&c.forked_from),
            forked_at: c.forked_at_message,
        },
        ..ConversationRecord::default()
    };
    Ok((record, messages))
}

/// The images of an export: each one's bytes must be an image and must
/// have the SHA-256 it is named by (the size limits of the importing
/// daemon do not apply: they were checked when the image was sent).
pub(crate) fn exported_images(
    e: &pb::ExportedConversation,
) -> Result<Vec<crate::images::StagedImage>, Status> {
    let anything = agentd_core::ImageLimits {
        max_bytes: u64::MAX,
        max_per_message: usize::MAX,
        max_dimension: u32::MAX,
    };
    e.images
        .iter()
        .map(|i| {
            let named = image_from(i)?;
            let staged = crate::images::stage_one(&anything, bytes::Bytes::from(i.data.clone()))
                .map_err(|reason| {
                    Status::invalid_argument(format!("image {}: {reason}", named.sha256))
                })?;
            if staged.image.sha256 != named.sha256 {
                return Err(Status::invalid_argument(format!(
                    "image {}: its bytes have SHA-256 {} (the export is damaged)",
                    named.sha256, staged.image.sha256
                )));
            }
            Ok(staged)
        })
        .collect()
}

/// `s`, or None when it is empty.
fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}
