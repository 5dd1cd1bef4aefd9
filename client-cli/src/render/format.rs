//! Small text helpers every part of the client shares: one line of
//! something, durations, ages, sizes, home-relative paths, image and client
//! labels.

use agent_proto::v1 as pb;

pub(super) fn client_label(c: &pb::ClientInfo) -> String {
    name_or_id(&c.name, &c.client_id).to_string()
}

pub(super) fn name_or_id<'a>(name: &'a str, id: &'a str) -> &'a str {
    if name.is_empty() { id } else { name }
}

/// The first non-empty line of `s`, cut to `max` characters (with `…`).
pub fn one_line(s: &str, max: usize) -> String {
    let first = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    truncate_chars(first, max)
}

pub(super) fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `850ms`, `1.2s`, `42s`, `3m05s`.
pub fn format_duration_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 10_000 {
        format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
    } else if ms < 60_000 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// `12s`, `5m`, `3h`, `4d`.
pub fn format_age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < 48 * 3600 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86_400)
    }
}

/// `/home/me/proj` → `~/proj`.
pub fn shorten_home(path: &str) -> String {
    match std::env::var("HOME") {
        Ok(home) if !home.is_empty() && home != "/" => match path.strip_prefix(&home) {
            Some("") => "~".to_string(),
            Some(rest) if rest.starts_with('/') => format!("~{rest}"),
            _ => path.to_string(),
        },
        _ => path.to_string(),
    }
}

/// A file size for people: "812 B", "1.2 KB", "3.4 MB".
pub(super) fn size(bytes: u64) -> String {
    match bytes {
        0..1000 => format!("{bytes} B"),
        1000..1_000_000 => format!("{:.1} KB", bytes as f64 / 1000.0),
        _ => format!("{:.1} MB", bytes as f64 / 1_000_000.0),
    }
}

pub(super) fn lower_first(s: &str) -> String {
    let mut chars = s.trim().chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// One line for an image: `png 1024×768, 120 KB` (dimensions when the
/// daemon knew them).
pub fn image_description(i: &pb::ImageBlock) -> String {
    let kind = i.media_type.strip_prefix("image/").unwrap_or(&i.media_type);
    let size = human_bytes(i.size);
    if i.width > 0 && i.height > 0 {
        format!("{kind} {}×{}, {size}", i.width, i.height)
    } else {
        format!("{kind}, {size}")
    }
}

/// `512 B`, `120 KB`, `3.4 MB` (powers of 1024).
pub fn human_bytes(bytes: u64) -> String {
    const KB: u64 = 1024;
    const MB: u64 = 1024 * 1024;
    if bytes < KB {
        format!("{bytes} B")
    } else if bytes < MB {
        format!("{} KB", bytes.div_ceil(KB))
    } else {
        format!("{:.1} MB", bytes as f64 / MB as f64)
    }
}
