//! What an MCP tool's result becomes for the model.
//!
//! Text blocks pass as they are and an embedded text resource passes with
//! its URI as a header. An image goes to a model that takes images as an
//! image of the tool result (checked like a user's image: by its bytes,
//! within `[images]`'s limits), with a one-line mention in the text where
//! it was. Other binary content (audio, blobs, and images a model cannot
//! take or that fail the check) becomes a one-line placeholder with its
//! MIME type and size: the model learns what the tool gave without the
//! daemon pasting base64 into its context.

use crate::images::StagedImage;
use crate::tools::ToolOutput;
use agentd_core::ImageLimits;
use rmcp::model::{CallToolResult, RawContent, ResourceContents};

/// The output of a call of `tool` on `server` that returned `result`;
/// `images`: the limits of images for a model that takes them.
pub(super) fn to_output(
    server: &str,
    tool: &str,
    result: CallToolResult,
    images: Option<ImageLimits>,
) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    let mut staged: Vec<StagedImage> = Vec::new();
    for content in result.content {
        parts.push(match content.raw {
            RawContent::Text(t) => t.text,
            RawContent::Image(i) => match images {
                Some(limits) => match image(&limits, &i.data, staged.len()) {
                    Ok(image) => {
                        let line = format!(
                            "[image {}: {}, attached]",
                            staged.len() + 1,
                            image.image.describe()
                        );
                        staged.push(image);
                        line
                    }
                    Err(why) => format!(
                        "[image: {}, {} bytes, not passed to the model: {why}]",
                        i.mime_type,
                        decoded_len(&i.data)
                    ),
                },
                None => placeholder("image", &i.mime_type, &i.data),
            },
            RawContent::Audio(a) => placeholder("audio", &a.mime_type, &a.data),
            RawContent::Resource(r) => match r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("[resource {uri}]\n{text}")
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => format!(
                    "[resource {uri}: {}, {} bytes of binary data, not shown]",
                    mime_type.as_deref().unwrap_or("unknown type"),
                    decoded_len(&blob)
                ),
            },
            RawContent::ResourceLink(l) => format!("[resource link: {} ({})]", l.uri, l.name),
        });
    }
    if parts.is_empty()
        && let Some(structured) = result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    let label = format!("{server}/{tool}");
    if result.is_error == Some(true) {
        let text = if text.trim().is_empty() {
            "(no message)".to_string()
        } else {
            text
        };
        return ToolOutput::error(format!(
            "MCP server `{server}`: tool `{tool}` failed: {text}"
        ));
    }
    let first = text.lines().next().unwrap_or("").trim();
    let summary = if first.is_empty() {
        format!("{label}: (empty result)")
    } else {
        format!("{label}: {}", crate::tools::one_line(first, 80))
    };
    ToolOutput {
        images: staged,
        ..ToolOutput::ok(text, summary)
    }
}

/// An MCP image (base64 `data`) checked as the `already`+1-th image of the
/// result. The MIME type the server names is not trusted: the bytes say.
fn image(limits: &ImageLimits, data: &str, already: usize) -> Result<StagedImage, String> {
    limits.check_count(already + 1).map_err(|e| e.to_string())?;
    let bytes = crate::images::from_base64(data)
        .map_err(|e| format!("its data is not valid base64 ({e})"))?;
    crate::images::stage_one(limits, bytes.into()).map_err(|e| e.to_string())
}

fn placeholder(kind: &str, mime_type: &str, base64: &str) -> String {
    format!(
        "[{kind}: {mime_type}, {} bytes; {kind} content from MCP tools is not passed to the model]",
        decoded_len(base64)
    )
}

/// The size of what the base64 text `data` encodes (padding and line
/// breaks not counted).
fn decoded_len(data: &str) -> usize {
    let n = data
        .bytes()
        .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'))
        .count();
    n * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::Content;

    #[test]
    fn text_passes_and_binary_becomes_a_placeholder() {
        let result = CallToolResult::success(vec![
            Content::text("hello"),
            Content::image("aGVsbG8=", "image/png"),
            Content::embedded_text("file:///a.txt", "inside"),
        ]);
        let out = to_output("srv", "t", result, None);
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "hello\n[image: image/png, 5 bytes; image content from MCP tools is not passed to the model]\n[resource file:///a.txt]\ninside"
        );
        assert_eq!(out.summary, "srv/t: hello");
    }

    #[test]
    fn an_error_result_names_the_server() {
        let out = to_output(
            "srv",
            "t",
            CallToolResult::error(vec![Content::text("boom")]),
            None,
        );
        assert!(out.is_error);
        assert_eq!(out.content, "MCP server `srv`: tool `t` failed: boom");
    }

    /// A 1×1 PNG.
    const PNG: &[u8] = &[
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F,
        0x15, 0xC4, 0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00,
        0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49,
        0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
    ];

    #[test]
    fn images_go_to_a_model_that_takes_them_checked_by_their_bytes() {
        let limits = ImageLimits {
            max_per_message: 2,
            ..ImageLimits::default()
        };
        let png = crate::images::base64(PNG);
        let result = CallToolResult::success(vec![
            Content::text("shot:"),
            // The MIME type a server names is not what decides.
            Content::image(png.clone(), "image/jpeg"),
            Content::image("aGVsbG8=", "image/png"),
            Content::image("not base64!", "image/png"),
            Content::image(png.clone(), "image/png"),
            Content::image(png, "image/png"),
        ]);
        let out = to_output("srv", "t", result, Some(limits));
        assert!(!out.is_error);
        assert_eq!(out.images.len(), 2);
        assert_eq!(out.images[0].bytes.as_ref(), PNG);
        assert_eq!(
            out.images[0].image.media_type,
            agentd_core::ImageMediaType::Png
        );
        let lines: Vec<&str> = out.content.lines().collect();
        assert_eq!(lines[0], "shot:");
        assert_eq!(lines[1], "[image 1: png 1×1, 67 B, attached]");
        assert!(
            lines[2].starts_with("[image: image/png, 5 bytes, not passed to the model: not a PNG"),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains("not valid base64"), "{}", lines[3]);
        assert_eq!(lines[4], "[image 2: png 1×1, 67 B, attached]");
        assert!(
            lines[5].contains("not passed to the model") && lines[5].contains("2"),
            "the third image is one too many: {}",
            lines[5]
        );
    }
}
