//! What a response body becomes for the model: HTML as Markdown, other
//! text as it is, anything else refused.

/// How a body is read, by its `Content-Type` (and its first bytes when
/// the type says nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyKind {
    Html,
    Text,
    Binary,
}

/// How much of the start of a body is looked at when its type is unknown.
const SNIFF_BYTES: usize = 1024;

/// The kind of a body of type `content_type` (may be empty) starting with
/// `start`.
pub(super) fn body_kind(content_type: &str, start: &[u8]) -> BodyKind {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let textual = mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime.as_str(),
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/ecmascript"
                | "application/toml"
                | "application/yaml"
                | "application/x-yaml"
                | "application/x-sh"
        );
    let sniff = &start[..start.len().min(SNIFF_BYTES)];
    if sniff.contains(&0) {
        return BodyKind::Binary;
    }
    match mime.as_str() {
        "text/html" | "application/xhtml+xml" => BodyKind::Html,
        "" | "application/octet-stream" if looks_like_html(sniff) => BodyKind::Html,
        "" if std::str::from_utf8(sniff).is_ok() => BodyKind::Text,
        _ if textual => BodyKind::Text,
        _ => BodyKind::Binary,
    }
}

fn looks_like_html(start: &[u8]) -> bool {
    let head = String::from_utf8_lossy(start)
        .trim_start()
        .to_ascii_lowercase();
    head.starts_with("<!doctype html") || head.starts_with("<html")
}

/// `body` as text for the model: Markdown for HTML (scripts, styles and
/// the page's chrome left out), else the text itself; invalid UTF-8 is
/// replaced, not refused.
pub(super) fn to_text(kind: BodyKind, body: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(body);
    match kind {
        BodyKind::Text => Ok(text.into_owned()),
        BodyKind::Html => htmd::HtmlToMarkdown::builder()
            .skip_tags(vec![
                "script", "style", "noscript", "template", "svg", "iframe", "head", "nav",
            ])
            .build()
            .convert(&text)
            .map(|md| tidy(&md))
            .map_err(|e| format!("the page's HTML could not be read: {e}")),
        BodyKind::Binary => Err("binary content".to_string()),
    }
}

/// Markdown without runs of blank lines (what is left of removed
/// elements).
fn tidy(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut blank = 0;
    for line in markdown.lines() {
        if line.trim().is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_type_and_content() {
        assert_eq!(body_kind("text/html; charset=utf-8", b"x"), BodyKind::Html);
        assert_eq!(body_kind("application/json", b"{}"), BodyKind::Text);
        assert_eq!(body_kind("application/ld+json", b"{}"), BodyKind::Text);
        assert_eq!(body_kind("text/plain", b"a\0b"), BodyKind::Binary);
        assert_eq!(body_kind("image/png", b"\x89PNG"), BodyKind::Binary);
        assert_eq!(body_kind("application/pdf", b"%PDF"), BodyKind::Binary);
        assert_eq!(body_kind("", b"  <!DOCTYPE html><p>x"), BodyKind::Html);
        assert_eq!(body_kind("", b"plain words"), BodyKind::Text);
        assert_eq!(body_kind("", b"\xff\xfe\x00"), BodyKind::Binary);
    }

    #[test]
    fn html_becomes_markdown_without_scripts() {
        let html = b"<html><head><title>T</title><style>p{}</style></head><body>\
            <script>alert(1)</script><h1>Serde</h1><p>A <a href=\"/x\">link</a> and \
            <code>code</code>.</p><ul><li>one</li><li>two</li></ul></body></html>";
        let md = to_text(BodyKind::Html, html).unwrap();
        assert!(md.starts_with("# Serde"), "{md}");
        assert!(md.contains("[link](/x)"), "{md}");
        assert!(md.contains("`code`"), "{md}");
        assert!(
            md.contains("*   one") || md.contains("- one") || md.contains("* one"),
            "{md}"
        );
        assert!(!md.contains("alert") && !md.contains("p{}"), "{md}");
        assert_eq!(to_text(BodyKind::Text, b"a\xffb").unwrap(), "a\u{fffd}b");
        assert!(to_text(BodyKind::Binary, b"x").is_err());
    }
}
