//! `@path` mentions at the edge (issue 42 point 7): the core says which
//! tokens of a message name paths (`agentd_core::mention`); here each one
//! that names an existing file is read with the `read` tool, so the same
//! rules hold as when the model reads it: confined to the conversation's
//! directories (a refusal becomes a note, never the content), cut at the
//! output limit with `read`'s marker, an image as `read` returns it.
//! Tokens that name no file (a handle, a directory, a typo) stay text.

use agentd_core::mention::{MentionFound, Mentioned, mentions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::Actor;
use crate::images::StagedImage;
use crate::tools::ToolContext;

/// What a message's mentions attach, and the images among them (stored
/// with the message).
#[derive(Debug, Default)]
pub(super) struct Attached {
    pub(super) mentioned: Vec<Mentioned>,
    pub(super) images: Vec<StagedImage>,
}

impl Actor {
    /// Reads the files `text` mentions.
    pub(super) async fn read_mentions(&self, text: &str) -> Attached {
        let mut attached = Attached::default();
        let paths = mentions(text);
        if paths.is_empty() {
            return attached;
        }
        let ctx = self.tool_context(CancellationToken::new());
        for path in paths {
            if !names_a_file(&ctx, &path) {
                continue;
            }
            let out = self
                .shared
                .tools
                .run(
                    agentd_core::tools::Tool::Read.name(),
                    json!({ "path": path }),
                    &ctx,
                )
                .await;
            let found = if out.is_error {
                MentionFound::Refused {
                    reason: out.content,
                }
            } else if let Some(staged) = out.images.into_iter().next() {
                let image = staged.image.clone();
                attached.images.push(staged);
                MentionFound::Image { image }
            } else {
                MentionFound::Text {
                    content: out.content,
                }
            };
            attached.mentioned.push(Mentioned { path, found });
        }
        attached
    }
}

/// Whether `raw`, seen from the conversation's directory, is an existing
/// file (wherever it is: whether it may be read is `read`'s to say).
fn names_a_file(ctx: &ToolContext, raw: &str) -> bool {
    crate::tools::paths::resolve_real(&ctx.cwd, raw)
        .and_then(std::fs::metadata)
        .is_ok_and(|m| m.is_file())
}
