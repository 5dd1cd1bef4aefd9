//! `@path` mentions (issue 42 point 7): which tokens of a message name a
//! path (data-driven on the tricky cases, and properties), and the message
//! a turn starts with when the daemon found files there.

use agentd_core::Conversation;
use agentd_core::effect::Effect;
use agentd_core::event::{Event, PromptHooks, Sending};
use agentd_core::image::{ImageMediaType, ImageRef};
use agentd_core::mention::{MAX_MENTIONS, MentionFound, Mentioned, mentions};
use agentd_core::message::ContentBlock;
use agentd_core::state::{ConvContext, ConvState};
use agentd_core::transition::transition;
use proptest::prelude::*;

#[test]
fn mentions_in_real_messages() {
    let cases: &[(&str, &[&str])] = &[
        ("look at @src/a.rs", &["src/a.rs"]),
        ("@README.md first", &["README.md"]),
        ("compare @a.rs and @b.rs.", &["a.rs", "b.rs"]),
        ("why does (@src/lib.rs) fail?", &["src/lib.rs"]),
        (
            "see @src/a.rs, @src/b.rs; and @c.txt!",
            &["src/a.rs", "src/b.rs", "c.txt"],
        ),
        ("mail me at me@example.com", &[]),
        ("ends with @", &[]),
        ("an @ alone", &[]),
        ("@\"my notes.txt\" and @\"unterminated", &["my notes.txt"]),
        ("@\"\" is nothing", &[]),
        ("twice @a.rs @a.rs", &["a.rs"]),
        ("`@src/a.rs`", &["src/a.rs"]),
        ("@../outside/secret.txt", &["../outside/secret.txt"]),
        ("@/etc/passwd?", &["/etc/passwd"]),
        ("user@@host", &[]),
        ("@@twice", &[]),
        ("line\n@next/line.rs", &["next/line.rs"]),
    ];
    for (text, expected) in cases {
        assert_eq!(mentions(text), *expected, "{text:?}");
    }
}

#[test]
fn at_most_max_mentions_are_taken() {
    let text: String = (0..MAX_MENTIONS + 5)
        .map(|i| format!("@f{i}.rs "))
        .collect();
    let found = mentions(&text);
    assert_eq!(found.len(), MAX_MENTIONS);
    assert_eq!(found[0], "f0.rs");
}

fn arb_path() -> impl Strategy<Value = String> {
    "[a-z0-9_]{1,6}(/[a-z0-9_]{1,6}){0,3}(\\.[a-z]{1,3})?"
}

proptest! {
    /// A path mentioned after a space, with any closing punctuation, is
    /// found as written, without the punctuation.
    #[test]
    fn a_mention_is_found_without_its_punctuation(
        before in "[A-Za-z ]{0,10}",
        path in arb_path(),
        punct in prop::sample::select(vec!["", ".", ",", "?", ")", "!", "...", ":"]),
        after in "[A-Za-z ]{0,10}",
    ) {
        let text = format!("{before} @{path}{punct} {after}");
        prop_assert_eq!(mentions(&text), vec![path]);
    }

    /// An `@` inside a word (an email address, a handle) is never a mention.
    #[test]
    fn an_at_inside_a_word_is_not_a_mention(local in "[a-z0-9.]{0,8}[a-z0-9]", domain in arb_path()) {
        let text = format!("write to {local}@{domain} today");
        prop_assert!(mentions(&text).is_empty());
    }

    /// Whatever the text, mentions are non-empty, unique, never end in
    /// closing punctuation, and each comes from an `@` in the text.
    #[test]
    fn mentions_are_well_formed(text in "[a-z @.,\"()/\\n]{0,40}") {
        let found = mentions(&text);
        prop_assert!(found.len() <= MAX_MENTIONS);
        for (i, m) in found.iter().enumerate() {
            prop_assert!(!m.trim().is_empty());
            prop_assert!(!found[..i].contains(m));
            let plain = format!("@{m}");
            let quoted = format!("@\"{m}\"");
            prop_assert!(text.contains(&plain) || text.contains(&quoted));
        }
    }
}

#[test]
fn a_turn_carries_the_files_after_the_text_unchanged() {
    let image = ImageRef {
        sha256: "ab".repeat(32),
        media_type: ImageMediaType::Png,
        width: 1,
        height: 1,
        size: 70,
    };
    let sending = Sending {
        hooks: PromptHooks::Passed,
        mentions: vec![
            Mentioned {
                path: "src/a.rs".into(),
                found: MentionFound::Text {
                    content: "     1\tfn main() {}\n".into(),
                },
            },
            Mentioned {
                path: "shot.png".into(),
                found: MentionFound::Image {
                    image: image.clone(),
                },
            },
            Mentioned {
                path: "../secret.txt".into(),
                found: MentionFound::Refused {
                    reason: "it is outside the conversation's directories".into(),
                },
            },
        ],
        ..Sending::default()
    };
    let text = "explain @src/a.rs and @shot.png, not @../secret.txt";
    let t = transition(
        &Conversation::with_state(ConvState::Idle),
        &ConvContext::default(),
        Event::UserMessage {
            text: text.into(),
            images: vec![],
            sending,
        },
    )
    .unwrap();
    let Some(Effect::AppendMessage { message }) = t.effects.first() else {
        panic!("{:?}", t.effects)
    };
    assert_eq!(
        message.content,
        vec![
            ContentBlock::text(text),
            ContentBlock::text("Contents of src/a.rs:\n     1\tfn main() {}\n"),
            ContentBlock::text("Image shot.png:"),
            ContentBlock::Image(image),
            ContentBlock::text(
                "[../secret.txt was not attached: it is outside the conversation's directories]"
            ),
        ]
    );
}
