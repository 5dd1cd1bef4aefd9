//! Images in messages: what an image is (by its bytes, never by a file name),
//! the reference a message keeps, and the limits a user's image must meet.
//!
//! The core never holds an image's bytes in a message: a message keeps an
//! [`ImageRef`] (type, size, SHA-256, dimensions) and the daemon keeps the
//! bytes once per distinct image, content-addressed (see the store). What
//! is decided here is pure: which format a byte string is (its magic
//! bytes), its dimensions when the header says them, and whether a set of
//! images meets the limits.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The image formats the providers accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageMediaType {
    Png,
    Jpeg,
    Gif,
    Webp,
}

impl ImageMediaType {
    /// Every format, in a fixed order.
    pub const ALL: [ImageMediaType; 4] = [
        ImageMediaType::Png,
        ImageMediaType::Jpeg,
        ImageMediaType::Gif,
        ImageMediaType::Webp,
    ];

    /// The MIME type, e.g. `image/png` (what the providers' wire formats say).
    pub fn mime(self) -> &'static str {
        match self {
            ImageMediaType::Png => "image/png",
            ImageMediaType::Jpeg => "image/jpeg",
            ImageMediaType::Gif => "image/gif",
            ImageMediaType::Webp => "image/webp",
        }
    }

    /// The short name people see, e.g. `png`.
    pub fn name(self) -> &'static str {
        match self {
            ImageMediaType::Png => "png",
            ImageMediaType::Jpeg => "jpeg",
            ImageMediaType::Gif => "gif",
            ImageMediaType::Webp => "webp",
        }
    }

    /// Parses a MIME type (as [`ImageMediaType::mime`] writes it).
    pub fn from_mime(mime: &str) -> Option<Self> {
        ImageMediaType::ALL.into_iter().find(|t| t.mime() == mime)
    }

    /// The format `bytes` are in, by their magic bytes; None when they are
    /// none of the four.
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageMediaType::Png)
        } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(ImageMediaType::Jpeg)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(ImageMediaType::Gif)
        } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
            Some(ImageMediaType::Webp)
        } else {
            None
        }
    }
}

impl fmt::Display for ImageMediaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An image as a message refers to it; the bytes live elsewhere, keyed by
/// `sha256`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageRef {
    pub media_type: ImageMediaType,
    /// Size of the bytes.
    pub size: u64,
    /// SHA-256 of the bytes, lower-case hex (64 characters).
    pub sha256: String,
    /// Pixels, when the header says (0: unknown).
    #[serde(default)]
    pub width: u32,
    #[serde(default)]
    pub height: u32,
}

impl ImageRef {
    /// One line for people: `png 1024×768, 120 KB` (dimensions only when
    /// known).
    pub fn describe(&self) -> String {
        describe(self.media_type.name(), self.size, self.width, self.height)
    }
}

/// `png 1024×768, 120 KB`: the one-line description of an image of
/// `media` (a short name), `size` bytes and the given pixels (0: unknown).
pub fn describe(media: &str, size: u64, width: u32, height: u32) -> String {
    let size = human_size(size);
    if width > 0 && height > 0 {
        format!("{media} {width}×{height}, {size}")
    } else {
        format!("{media}, {size}")
    }
}

/// `512 B`, `120 KB`, `3.4 MB` (powers of 1024).
pub fn human_size(bytes: u64) -> String {
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

/// The dimensions (width, height) the header of an image of `media_type`
/// states, when it states them within the bytes given. Never fails: a
/// truncated or odd header is just "unknown".
pub fn dimensions(media_type: ImageMediaType, bytes: &[u8]) -> Option<(u32, u32)> {
    match media_type {
        ImageMediaType::Png => png_dimensions(bytes),
        ImageMediaType::Jpeg => jpeg_dimensions(bytes),
        ImageMediaType::Gif => gif_dimensions(bytes),
        ImageMediaType::Webp => webp_dimensions(bytes),
    }
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(3)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], 0]))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// PNG: the IHDR chunk comes first, width and height big-endian.
fn png_dimensions(b: &[u8]) -> Option<(u32, u32)> {
    if b.get(12..16)? != b"IHDR" {
        return None;
    }
    Some((be32(b, 16)?, be32(b, 20)?))
}

/// GIF: the logical screen size, little-endian, after the signature.
fn gif_dimensions(b: &[u8]) -> Option<(u32, u32)> {
    Some((u32::from(le16(b, 6)?), u32::from(le16(b, 8)?)))
}

/// JPEG: the first start-of-frame segment (SOF0…SOF15 except DHT, JPG and
/// DAC) holds height then width, big-endian.
fn jpeg_dimensions(b: &[u8]) -> Option<(u32, u32)> {
    let mut at = 2usize;
    loop {
        // Fill bytes (0xFF runs) may precede a marker.
        while *b.get(at)? == 0xFF && *b.get(at + 1)? == 0xFF {
            at += 1;
        }
        if *b.get(at)? != 0xFF {
            return None;
        }
        let marker = *b.get(at + 1)?;
        at += 2;
        match marker {
            // Markers without a length.
            0x01 | 0xD0..=0xD7 => continue,
            // End of image or start of scan before any frame header.
            0xD9 | 0xDA => return None,
            _ => {}
        }
        let len = usize::from(be16(b, at)?);
        if len < 2 {
            return None;
        }
        if matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
            let height = be16(b, at + 3)?;
            let width = be16(b, at + 5)?;
            return Some((u32::from(width), u32::from(height)));
        }
        at = at.checked_add(len)?;
    }
}

/// WebP: the first chunk is VP8 (lossy), VP8L (lossless) or VP8X
/// (extended), each with its own way of saying the size.
fn webp_dimensions(b: &[u8]) -> Option<(u32, u32)> {
    match b.get(12..16)? {
        b"VP8 " => {
            // Frame tag (3 bytes), start code 9d 01 2a, then 14-bit sizes.
            if b.get(23..26)? != [0x9d, 0x01, 0x2a] {
                return None;
            }
            let w = u32::from(le16(b, 26)? & 0x3FFF);
            let h = u32::from(le16(b, 28)? & 0x3FFF);
            Some((w, h))
        }
        b"VP8L" => {
            if *b.get(20)? != 0x2F {
                return None;
            }
            let bits = le32(b, 21)?;
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        b"VP8X" => Some((le24(b, 24)? + 1, le24(b, 27)? + 1)),
        _ => None,
    }
}

/// What one image is, read from its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    pub media_type: ImageMediaType,
    /// Width and height, when the header says.
    pub dimensions: Option<(u32, u32)>,
}

/// How big and how many images a message may carry (`[images]` in the
/// daemon's config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// Largest image, in bytes.
    pub max_bytes: u64,
    /// Most images in one message.
    pub max_per_message: usize,
    /// Largest width or height, in pixels (checked when the header says).
    pub max_dimension: u32,
}

impl Default for ImageLimits {
    /// Anthropic's limits: at most 5 MB of base64 per image (so 3.75 MiB
    /// of bytes), 8000 pixels a side, and 20 images per message as its
    /// apps allow (its API takes up to 100 per request).
    fn default() -> Self {
        ImageLimits {
            max_bytes: 3_932_160,
            max_per_message: 20,
            max_dimension: 8000,
        }
    }
}

/// Why an image was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRejected {
    /// No bytes at all.
    Empty,
    /// The bytes are none of PNG, JPEG, GIF, WebP; `head` is their first
    /// bytes in hex, to help tell what they are.
    NotAnImage { head: String },
    /// Larger than `max_bytes`.
    TooLarge { size: u64, max: u64 },
    /// Wider or taller than `max_dimension`.
    TooManyPixels { width: u32, height: u32, max: u32 },
    /// More images in one message than `max_per_message`.
    TooMany { count: usize, max: usize },
}

impl fmt::Display for ImageRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageRejected::Empty => f.write_str("the image is empty (0 bytes)"),
            ImageRejected::NotAnImage { head } => write!(
                f,
                "not a PNG, JPEG, GIF or WebP image (images are recognised by their content; \
                 the file starts with {head})"
            ),
            ImageRejected::TooLarge { size, max } => write!(
                f,
                "the image is {size} bytes ({}), more than the limit of {max} bytes ({})",
                human_size(*size),
                human_size(*max)
            ),
            ImageRejected::TooManyPixels { width, height, max } => write!(
                f,
                "the image is {width}×{height} pixels, more than the limit of {max} pixels a side"
            ),
            ImageRejected::TooMany { count, max } => write!(
                f,
                "{count} images in one message, more than the limit of {max}"
            ),
        }
    }
}

impl std::error::Error for ImageRejected {}

impl ImageLimits {
    /// Checks the number of images of one message.
    pub fn check_count(&self, count: usize) -> Result<(), ImageRejected> {
        if count > self.max_per_message {
            return Err(ImageRejected::TooMany {
                count,
                max: self.max_per_message,
            });
        }
        Ok(())
    }

    /// Reads and checks one image: its format by content, its size and
    /// (when the header says) its dimensions.
    pub fn inspect(&self, bytes: &[u8]) -> Result<ImageInfo, ImageRejected> {
        if bytes.is_empty() {
            return Err(ImageRejected::Empty);
        }
        let Some(media_type) = ImageMediaType::sniff(bytes) else {
            let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
            return Err(ImageRejected::NotAnImage {
                head: head.join(" "),
            });
        };
        let size = bytes.len() as u64;
        if size > self.max_bytes {
            return Err(ImageRejected::TooLarge {
                size,
                max: self.max_bytes,
            });
        }
        let dimensions = dimensions(media_type, bytes);
        if let Some((width, height)) = dimensions
            && (width > self.max_dimension || height > self.max_dimension)
        {
            return Err(ImageRejected::TooManyPixels {
                width,
                height,
                max: self.max_dimension,
            });
        }
        Ok(ImageInfo {
            media_type,
            dimensions,
        })
    }
}
