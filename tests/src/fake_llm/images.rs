//! What the fake LLM checks of the images in a request, as the real APIs
//! do: an Anthropic `image` block must be `{"type":"image","source":
//! {"type":"base64","media_type":…,"data":…}}`, an OpenAI-compatible image
//! an `image_url` part of a user message whose URL is a `data:` URL; the
//! base64 must decode, and the bytes must be the format the media type
//! names (checked by their magic bytes here, independently of the daemon).
//! A request with a bad image is answered 400 `invalid_request_error`,
//! like the real services answer it.

use base64::Engine as _;
use serde_json::Value;

use super::server::Format;

/// An image a request carried, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedImage {
    /// Where it was, e.g. `messages[0].content[1]`.
    pub at: String,
    /// The media type the request named, e.g. `image/png`.
    pub media_type: String,
    /// The decoded bytes.
    pub bytes: Vec<u8>,
}

/// The media type the bytes' magic says, independent of the daemon's code.
fn magic_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]) {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

fn decode(at: &str, media_type: &str, data: &str) -> Result<ReceivedImage, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("{at}: the image's base64 data does not decode: {e}"))?;
    match magic_type(&bytes) {
        Some(t) if t == media_type => Ok(ReceivedImage {
            at: at.to_string(),
            media_type: media_type.to_string(),
            bytes,
        }),
        Some(t) => Err(format!(
            "{at}: image data is {t} but media_type says {media_type}"
        )),
        None => Err(format!(
            "{at}: could not process image: not a supported image format"
        )),
    }
}

/// Every image of an Anthropic Messages body: image blocks of messages and
/// of `tool_result` contents.
fn anthropic(body: &Value) -> Result<Vec<ReceivedImage>, String> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let messages = body["messages"].as_array().unwrap_or(&empty);
    for (i, m) in messages.iter().enumerate() {
        let Some(blocks) = m["content"].as_array() else {
            continue;
        };
        for (j, b) in blocks.iter().enumerate() {
            let at = format!("messages[{i}].content[{j}]");
            let mut check = |at: String, b: &Value| -> Result<(), String> {
                if m["role"] != "user" {
                    return Err(format!("{at}: image in a {} message", m["role"]));
                }
                let source = &b["source"];
                if source["type"] != "base64" {
                    return Err(format!("{at}: image source type must be base64"));
                }
                let media_type = source["media_type"].as_str().unwrap_or_default();
                if !matches!(
                    media_type,
                    "image/png" | "image/jpeg" | "image/gif" | "image/webp"
                ) {
                    return Err(format!("{at}: unsupported media_type {media_type:?}"));
                }
                let data = source["data"]
                    .as_str()
                    .ok_or_else(|| format!("{at}: image source without data"))?;
                out.push(decode(&at, media_type, data)?);
                Ok(())
            };
            match b["type"].as_str() {
                Some("image") => check(at, b)?,
                Some("tool_result") => {
                    if let Some(parts) = b["content"].as_array() {
                        for (k, p) in parts.iter().enumerate() {
                            match p["type"].as_str() {
                                Some("image") => check(format!("{at}.content[{k}]"), p)?,
                                Some("text") => {}
                                other => {
                                    return Err(format!(
                                        "{at}.content[{k}]: tool_result content of type {other:?}"
                                    ));
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// Every image of a chat-completions body: `image_url` parts of user
/// messages (no other role may carry them).
fn openai(body: &Value) -> Result<Vec<ReceivedImage>, String> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let messages = body["messages"].as_array().unwrap_or(&empty);
    for (i, m) in messages.iter().enumerate() {
        let Some(parts) = m["content"].as_array() else {
            continue;
        };
        for (j, p) in parts.iter().enumerate() {
            let at = format!("messages[{i}].content[{j}]");
            match p["type"].as_str() {
                Some("image_url") => {
                    if m["role"] != "user" {
                        return Err(format!("{at}: image_url part in a {} message", m["role"]));
                    }
                    let url = p["image_url"]["url"].as_str().unwrap_or_default();
                    let rest = url
                        .strip_prefix("data:")
                        .ok_or_else(|| format!("{at}: image URL is not a data URL"))?;
                    let (media_type, data) = rest
                        .split_once(";base64,")
                        .ok_or_else(|| format!("{at}: data URL is not base64"))?;
                    out.push(decode(&at, media_type, data)?);
                }
                Some("text") => {}
                other => return Err(format!("{at}: content part of type {other:?}")),
            }
        }
    }
    Ok(out)
}

/// The images of a request body in `format`, or what is wrong with one.
pub(crate) fn received(format: Format, body: &Value) -> Result<Vec<ReceivedImage>, String> {
    match format {
        Format::Anthropic => anthropic(body),
        Format::OpenAi => openai(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

    #[test]
    fn anthropic_image_blocks_are_decoded_and_checked() {
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
            {"type": "text", "text": "what is it?"}
        ]}]});
        let images = received(Format::Anthropic, &body).unwrap();
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].at, "messages[0].content[0]");
        assert!(images[0].bytes.starts_with(b"\x89PNG"));
        let wrong = json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG_B64}}
        ]}]});
        let err = received(Format::Anthropic, &wrong).unwrap_err();
        assert!(
            err.contains("image/png but media_type says image/jpeg"),
            "{err}"
        );
    }

    #[test]
    fn openai_image_parts_must_be_data_urls_in_user_messages() {
        let url = format!("data:image/png;base64,{PNG_B64}");
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": url}}
        ]}]});
        assert_eq!(received(Format::OpenAi, &body).unwrap().len(), 1);
        let tool = json!({"messages": [{"role": "tool", "content": [
            {"type": "image_url", "image_url": {"url": url}}
        ]}]});
        assert!(received(Format::OpenAi, &tool).is_err());
        let remote = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
        ]}]});
        assert!(received(Format::OpenAi, &remote).is_err());
    }
}
