//! Images: recognition by magic bytes, dimensions from headers, limits, and
//! how the state machine puts images into user messages (issue 15, point 6).

use agentd_core::image::{ImageInfo, describe, dimensions, human_size};
use agentd_core::{
    ContentBlock, ConvContext, ConvState, Conversation, Effect, Event, ImageLimits, ImageMediaType,
    ImageRef, ImageRejected, QueuedMessage, Rejected, transition,
};
use proptest::prelude::*;

/// A PNG header (signature + IHDR) of `w`×`h`, padded.
fn png(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.extend_from_slice(&13u32.to_be_bytes());
    b.extend_from_slice(b"IHDR");
    b.extend_from_slice(&w.to_be_bytes());
    b.extend_from_slice(&h.to_be_bytes());
    b.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
    b
}

/// A JPEG with an APP0 segment, then a SOF0 of `w`×`h`.
fn jpeg(w: u16, h: u16) -> Vec<u8> {
    let mut b = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
    b.extend_from_slice(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
    b.extend_from_slice(&[0xFF, 0xC0, 0x00, 0x11, 0x08]);
    b.extend_from_slice(&h.to_be_bytes());
    b.extend_from_slice(&w.to_be_bytes());
    b.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
    b.extend_from_slice(&[0xFF, 0xD9]);
    b
}

fn gif(w: u16, h: u16) -> Vec<u8> {
    let mut b = b"GIF89a".to_vec();
    b.extend_from_slice(&w.to_le_bytes());
    b.extend_from_slice(&h.to_le_bytes());
    b.extend_from_slice(&[0, 0, 0, 0x3B]);
    b
}

/// A WebP whose first chunk is VP8X (extended) of `w`×`h`.
fn webp_vp8x(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&30u32.to_le_bytes());
    b.extend_from_slice(b"WEBPVP8X");
    b.extend_from_slice(&10u32.to_le_bytes());
    b.extend_from_slice(&[0, 0, 0, 0]);
    b.extend_from_slice(&(w - 1).to_le_bytes()[..3]);
    b.extend_from_slice(&(h - 1).to_le_bytes()[..3]);
    b
}

/// A lossless WebP (VP8L) of `w`×`h`.
fn webp_vp8l(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&26u32.to_le_bytes());
    b.extend_from_slice(b"WEBPVP8L");
    b.extend_from_slice(&5u32.to_le_bytes());
    b.push(0x2F);
    let bits = (w - 1) | ((h - 1) << 14);
    b.extend_from_slice(&bits.to_le_bytes());
    b
}

/// A lossy WebP (VP8) of `w`×`h`.
fn webp_vp8(w: u16, h: u16) -> Vec<u8> {
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&30u32.to_le_bytes());
    b.extend_from_slice(b"WEBPVP8 ");
    b.extend_from_slice(&10u32.to_le_bytes());
    b.extend_from_slice(&[0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a]);
    b.extend_from_slice(&w.to_le_bytes());
    b.extend_from_slice(&h.to_le_bytes());
    b
}

/// Name, bytes, the format they are, the dimensions their header says.
type Case = (
    &'static str,
    Vec<u8>,
    Option<ImageMediaType>,
    Option<(u32, u32)>,
);

#[test]
fn formats_are_recognised_by_their_magic_bytes_with_their_dimensions() {
    let cases: Vec<Case> = vec![
        (
            "png",
            png(1024, 768),
            Some(ImageMediaType::Png),
            Some((1024, 768)),
        ),
        (
            "jpeg",
            jpeg(640, 480),
            Some(ImageMediaType::Jpeg),
            Some((640, 480)),
        ),
        (
            "gif87",
            {
                let mut g = gif(3, 2);
                g[4] = b'7';
                g
            },
            Some(ImageMediaType::Gif),
            Some((3, 2)),
        ),
        (
            "gif89",
            gif(320, 200),
            Some(ImageMediaType::Gif),
            Some((320, 200)),
        ),
        (
            "webp vp8x",
            webp_vp8x(4000, 3000),
            Some(ImageMediaType::Webp),
            Some((4000, 3000)),
        ),
        (
            "webp vp8l",
            webp_vp8l(17, 9),
            Some(ImageMediaType::Webp),
            Some((17, 9)),
        ),
        (
            "webp vp8",
            webp_vp8(800, 600),
            Some(ImageMediaType::Webp),
            Some((800, 600)),
        ),
        (
            "png signature only",
            b"\x89PNG\r\n\x1a\n".to_vec(),
            Some(ImageMediaType::Png),
            None,
        ),
        ("text", b"hello, world".to_vec(), None, None),
        ("png named but text", b"PNG image".to_vec(), None, None),
        (
            "riff but wave",
            b"RIFF\0\0\0\0WAVEfmt ".to_vec(),
            None,
            None,
        ),
        ("truncated riff", b"RIFF\0\0\0\0WEB".to_vec(), None, None),
        ("jpeg without third byte", vec![0xFF, 0xD8], None, None),
        ("gif88", b"GIF88a\x01\0\x01\0".to_vec(), None, None),
        ("pdf", b"%PDF-1.7".to_vec(), None, None),
        ("empty", Vec::new(), None, None),
    ];
    for (name, bytes, kind, dims) in cases {
        let got = ImageMediaType::sniff(&bytes);
        assert_eq!(got, kind, "{name}");
        if let Some(kind) = got {
            assert_eq!(dimensions(kind, &bytes), dims, "{name}");
        }
    }
}

#[test]
fn media_types_round_trip_through_their_mime_names() {
    for t in ImageMediaType::ALL {
        assert_eq!(ImageMediaType::from_mime(t.mime()), Some(t));
        assert!(t.mime().ends_with(t.name()));
    }
    assert_eq!(ImageMediaType::from_mime("image/svg+xml"), None);
}

#[test]
fn limits_refuse_with_messages_that_say_why() {
    let limits = ImageLimits {
        max_bytes: 100,
        max_per_message: 2,
        max_dimension: 1000,
    };
    assert_eq!(
        limits.inspect(&png(10, 20)),
        Ok(ImageInfo {
            media_type: ImageMediaType::Png,
            dimensions: Some((10, 20))
        })
    );
    let err = limits.inspect(b"not an image at all").unwrap_err();
    assert!(matches!(err, ImageRejected::NotAnImage { .. }));
    assert!(
        err.to_string()
            .contains("not a PNG, JPEG, GIF or WebP image"),
        "{err}"
    );
    assert!(err.to_string().contains("6e 6f 74 20"), "{err}");
    let mut big = png(10, 10);
    big.resize(101, 0);
    let err = limits.inspect(&big).unwrap_err();
    assert_eq!(
        err,
        ImageRejected::TooLarge {
            size: 101,
            max: 100
        }
    );
    assert!(err.to_string().contains("101 bytes"), "{err}");
    let err = limits.inspect(&png(1001, 5)).unwrap_err();
    assert!(err.to_string().contains("1001×5"), "{err}");
    assert_eq!(limits.inspect(&[]), Err(ImageRejected::Empty));
    assert_eq!(limits.check_count(2), Ok(()));
    let err = limits.check_count(3).unwrap_err();
    assert_eq!(
        err.to_string(),
        "3 images in one message, more than the limit of 2"
    );
}

#[test]
fn descriptions_are_one_short_line() {
    assert_eq!(
        describe("png", 120 * 1024, 1024, 768),
        "png 1024×768, 120 KB"
    );
    assert_eq!(describe("gif", 500, 0, 0), "gif, 500 B");
    assert_eq!(human_size(3 * 1024 * 1024 + 400 * 1024), "3.4 MB");
}

proptest! {
    /// Any bytes at all: recognition and dimension reading never panic, and
    /// whatever is recognised starts with that format's signature.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Some(kind) = ImageMediaType::sniff(&bytes) {
            let _ = dimensions(kind, &bytes);
            let head: &[u8] = match kind {
                ImageMediaType::Png => b"\x89PNG",
                ImageMediaType::Jpeg => &[0xFF, 0xD8, 0xFF],
                ImageMediaType::Gif => b"GIF8",
                ImageMediaType::Webp => b"RIFF",
            };
            prop_assert!(bytes.starts_with(head));
        }
        let _ = ImageLimits::default().inspect(&bytes);
    }

    /// Dimensions read from every format's header are the ones written.
    #[test]
    fn dimensions_round_trip(w in 1u16..16000, h in 1u16..16000) {
        let (w32, h32) = (u32::from(w), u32::from(h));
        prop_assert_eq!(dimensions(ImageMediaType::Png, &png(w32, h32)), Some((w32, h32)));
        prop_assert_eq!(dimensions(ImageMediaType::Jpeg, &jpeg(w, h)), Some((w32, h32)));
        prop_assert_eq!(dimensions(ImageMediaType::Gif, &gif(w, h)), Some((w32, h32)));
        prop_assert_eq!(dimensions(ImageMediaType::Webp, &webp_vp8x(w32, h32)), Some((w32, h32)));
        prop_assert_eq!(dimensions(ImageMediaType::Webp, &webp_vp8l(w32.min(16384), h32.min(16384))), Some((w32, h32)));
    }

    /// A JPEG header cut anywhere is "unknown", never a panic or a wrong
    /// size.
    #[test]
    fn truncated_jpeg_headers_are_unknown(w in 1u16..9000, h in 1u16..9000, cut in 0usize..40) {
        let full = jpeg(w, h);
        let cut = cut.min(full.len());
        match dimensions(ImageMediaType::Jpeg, &full[..cut]) {
            None => {}
            Some(d) => prop_assert_eq!(d, (u32::from(w), u32::from(h))),
        }
    }

    /// The size limit is exact: at the limit accepted, one byte over refused.
    #[test]
    fn size_limit_is_exact(max in 30u64..500, over in 0u64..3) {
        let limits = ImageLimits { max_bytes: max, ..ImageLimits::default() };
        let mut bytes = png(1, 1);
        bytes.resize((max + over) as usize, 0);
        let result = limits.inspect(&bytes);
        if over == 0 {
            prop_assert!(result.is_ok());
        } else {
            prop_assert_eq!(result, Err(ImageRejected::TooLarge { size: max + over, max }));
        }
    }
}

fn image(n: u8) -> ImageRef {
    ImageRef {
        media_type: ImageMediaType::Png,
        size: 100 + u64::from(n),
        sha256: format!("{n:064x}"),
        width: 1,
        height: 1,
    }
}

fn appended(effects: &[Effect]) -> Vec<Vec<ContentBlock>> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::AppendMessage { message } => Some(message.content.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_user_message_puts_its_images_before_its_text() {
    let ctx = ConvContext::default();
    let t = transition(
        &Conversation::with_state(ConvState::Idle),
        &ctx,
        Event::UserMessage {
            text: "what is this?".into(),
            images: vec![image(1), image(2)],
            sending: Default::default(),
        },
    )
    .unwrap();
    assert_eq!(
        appended(&t.effects),
        vec![vec![
            ContentBlock::Image(image(1)),
            ContentBlock::Image(image(2)),
            ContentBlock::text("what is this?"),
        ]]
    );
    assert!(matches!(
        t.conversation.state,
        ConvState::LlmRequesting { .. }
    ));
}

#[test]
fn an_image_alone_is_a_message_but_nothing_at_all_is_not() {
    let ctx = ConvContext::default();
    let t = transition(
        &Conversation::with_state(ConvState::Idle),
        &ctx,
        Event::UserMessage {
            text: "  ".into(),
            images: vec![image(3)],
            sending: Default::default(),
        },
    )
    .unwrap();
    assert_eq!(
        appended(&t.effects),
        vec![vec![ContentBlock::Image(image(3))]]
    );
    let refused = transition(
        &Conversation::with_state(ConvState::Idle),
        &ctx,
        Event::UserMessage {
            text: " ".into(),
            images: vec![],
            sending: Default::default(),
        },
    );
    assert_eq!(refused, Err(Rejected::EmptyMessage));
}

#[test]
fn queued_images_follow_their_own_text() {
    // A turn ends normally with two messages queued, the second with an
    // image and no text: the next turn's message carries them in order.
    let ctx = ConvContext::default();
    let conv = Conversation {
        queue: vec![
            QueuedMessage::text("first"),
            QueuedMessage {
                images: vec![image(7)],
                ..QueuedMessage::text("")
            },
        ],
        ..Conversation::with_state(ConvState::LlmRequesting {
            attempt: 1,
            iteration: 1,
            retry: None,
            early: Default::default(),
        })
    };
    let reply = agentd_core::Reply {
        content: vec![ContentBlock::text("done")],
        stop_reason: agentd_core::StopReason::EndTurn,
        usage: agentd_core::Usage::default(),
    };
    let t = transition(&conv, &ctx, Event::LlmCompleted { reply }).unwrap();
    assert!(t.conversation.queue.is_empty(), "both delivered");
    let messages = appended(&t.effects);
    assert_eq!(
        messages.last().unwrap(),
        &vec![ContentBlock::text("first"), ContentBlock::Image(image(7))]
    );
}

#[test]
fn image_blocks_round_trip_through_json_as_stored() {
    let block = ContentBlock::Image(image(9));
    let json = serde_json::to_value(&block).unwrap();
    assert_eq!(json["type"], "image");
    assert_eq!(json["media_type"], "png");
    let back: ContentBlock = serde_json::from_value(json).unwrap();
    assert_eq!(back, block);
    // A stored event from before images has no `images` field.
    let event: Event =
        serde_json::from_value(serde_json::json!({"event": "user_message", "text": "hi"})).unwrap();
    assert_eq!(
        event,
        Event::UserMessage {
            text: "hi".into(),
            images: vec![],
            sending: Default::default(),
        }
    );
}
