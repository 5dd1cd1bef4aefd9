//! Images at the daemon's edge: a client's upload checked and given its
//! content address, and the base64 the providers send.
//!
//! The decisions (format by magic bytes, limits) are the core's
//! ([`agentd_core::ImageLimits::inspect`]); this module adds the SHA-256
//! that names an image in the store and in messages. Checking happens
//! before anything is stored, so a refused image leaves no trace.
//!
//! Messages hold only references (`ImageRef`); the bytes are in the store's
//! `images` tree, once per SHA-256 (`Store::put_image`), written before the
//! commit that appends or queues the message. sled recovers a prefix of its
//! writes, so no durable message refers to a missing image. The actor keeps
//! the transcript's base64 for providers (`RequestParts` in
//! `runtime/actor/model.rs`); of what clients get, only exports carry the
//! bytes, and an import stores nothing of a conversation whose image is
//! missing or does not match its SHA-256.

use std::collections::HashMap;
use std::sync::Arc;

use agentd_core::{ImageLimits, ImageRef, ImageRejected};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// An image a client sent, checked and ready to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StagedImage {
    /// What messages will refer to.
    pub image: ImageRef,
    /// Its bytes.
    pub bytes: bytes::Bytes,
}

/// Why a client's images were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub(crate) struct ImageError {
    /// Which image ("image 2 (shot.png)"), or "images" for the count.
    pub what: String,
    pub reason: ImageRejected,
}

/// Lower-case hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Checks one image and names it by its content.
pub(crate) fn stage_one(
    limits: &ImageLimits,
    bytes: bytes::Bytes,
) -> Result<StagedImage, ImageRejected> {
    let info = limits.inspect(&bytes)?;
    let (width, height) = info.dimensions.unwrap_or((0, 0));
    Ok(StagedImage {
        image: ImageRef {
            media_type: info.media_type,
            size: bytes.len() as u64,
            sha256: sha256_hex(&bytes),
            width,
            height,
        },
        bytes,
    })
}

/// Checks the images of one message: their number, then each one; the
/// first refusal names the image (1-based, with the client's name for it).
pub(crate) fn stage(
    limits: &ImageLimits,
    uploads: Vec<(bytes::Bytes, String)>,
) -> Result<Vec<StagedImage>, ImageError> {
    limits
        .check_count(uploads.len())
        .map_err(|reason| ImageError {
            what: "images".to_string(),
            reason,
        })?;
    uploads
        .into_iter()
        .enumerate()
        .map(|(i, (bytes, name))| {
            stage_one(limits, bytes).map_err(|reason| ImageError {
                what: if name.is_empty() {
                    format!("image {}", i + 1)
                } else {
                    format!("image {} ({name})", i + 1)
                },
                reason,
            })
        })
        .collect()
}

/// Standard base64 (with padding), as both providers take it.
pub(crate) fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes standard base64 (padding optional, line breaks allowed), as MCP
/// servers send images.
pub(crate) fn from_base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let compact: String = text.split_ascii_whitespace().collect();
    LENIENT.decode(compact)
}

/// The base64 of images a request refers to, by SHA-256. Shared between
/// the requests of a conversation: an image is encoded once.
pub(crate) type ImageData = Arc<HashMap<String, Arc<str>>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_names_images_by_content_and_refuses_by_content() {
        let limits = ImageLimits::default();
        let gif = bytes::Bytes::from_static(b"GIF89a\x02\0\x03\0\0\0\0;");
        let staged = stage(&limits, vec![(gif.clone(), "a.png".into())]).unwrap();
        assert_eq!(staged[0].image.media_type, agentd_core::ImageMediaType::Gif);
        assert_eq!((staged[0].image.width, staged[0].image.height), (2, 3));
        assert_eq!(staged[0].image.sha256, sha256_hex(&gif));
        assert_eq!(staged[0].image.sha256.len(), 64);
        let err = stage(
            &limits,
            vec![
                (gif, String::new()),
                (bytes::Bytes::from_static(b"hello"), "fake.png".into()),
            ],
        )
        .unwrap_err();
        assert_eq!(err.what, "image 2 (fake.png)");
        assert!(err.to_string().starts_with("image 2 (fake.png): not a PNG"));
    }

    #[test]
    fn sha256_is_the_standard_one() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(base64(b"\x89PNG"), "iVBORw==");
    }
}
