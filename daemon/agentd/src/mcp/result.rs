//! What an MCP tool's result becomes for the model.
//!
//! Tool results here are text (`agentd_core::ToolResult::content`), so text
//! blocks pass as they are, an embedded text resource passes with its URI
//! as a header, and binary content (images, audio, blobs) becomes a
//! one-line placeholder with its MIME type and size: the model learns what
//! the tool gave without the daemon pasting base64 into its context.

use crate::tools::ToolOutput;
use rmcp::model::{CallToolResult, RawContent, ResourceContents};

/// The output of a call of `tool` on `server` that returned `result`.
pub(super) fn to_output(server: &str, tool: &str, result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for content in result.content {
        parts.push(match content.raw {
            RawContent::Text(t) => t.text,
            RawContent::Image(i) => placeholder("image", &i.mime_type, &i.data),
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
    ToolOutput::ok(text, summary)
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
        let out = to_output("srv", "t", result);
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
        );
        assert!(out.is_error);
        assert_eq!(out.content, "MCP server `srv`: tool `t` failed: boom");
    }
}
