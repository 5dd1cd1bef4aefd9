//! Pruning old tool outputs from requests (issue 15, point 2): what is
//! pruned, that the request stays a valid chain and the newest outputs stay
//! whole, and that the cut only moves forward.

use agentd_core::message::{ContentBlock, Message, Role};
use agentd_core::prune::{PrunePlan, PrunePolicy, apply, plan};
use agentd_core::texts;
use proptest::prelude::*;
use serde_json::json;

/// A transcript: a prompt, then one round per entry of `outputs` (the
/// model calls `read`, the result is that many bytes).
fn transcript(outputs: &[usize]) -> Vec<Message> {
    let mut messages = vec![Message::user(vec![ContentBlock::text("go")], 0)];
    for (i, &bytes) in outputs.iter().enumerate() {
        messages.push(Message {
            role: Role::Assistant,
            ..Message::user(
                vec![ContentBlock::ToolUse {
                    id: format!("t{i}"),
                    name: "read".to_string(),
                    input: json!({"path": format!("f{i}")}),
                }],
                0,
            )
        });
        messages.push(Message::user(
            vec![ContentBlock::tool_result(
                format!("t{i}"),
                "x".repeat(bytes),
                false,
            )],
            0,
        ));
    }
    messages
}

fn result_of(m: &Message) -> Option<(&str, &str, bool)> {
    m.content.iter().find_map(|b| match b {
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            ..
        } => Some((tool_use_id.as_str(), content.as_str(), *is_error)),
        _ => None,
    })
}

#[test]
fn ten_rounds_of_eight_kilobytes_in_a_forty_thousand_token_window() {
    // 10 reads of 8,000 bytes (2,000 tokens each); a fifth of the window
    // (8,000 tokens) is protected: the newest 4 outputs fill it, the 5th
    // from the end overflows it and is kept too, the 5 before are pruned.
    let messages = transcript(&[8_000; 10]);
    let policy = PrunePolicy::for_window(40_000);
    let p = plan(&messages, 0, &policy).unwrap();
    let note = texts::tool_output_pruned(8_000);
    assert_eq!(
        note,
        "[This tool output (8 KB) was pruned from the context to make room; the transcript keeps it. Call the tool again if you need it.]"
    );
    assert_eq!(
        p,
        PrunePlan {
            // Round k's result is message 2k + 2; round 5's is kept.
            through: 12,
            results: 5,
            tokens: 5 * (2_000 - note.len() as u64 / 4),
        }
    );
    let sent = apply(&messages, p.through, &policy);
    let pruned: Vec<bool> = sent
        .iter()
        .filter_map(result_of)
        .map(|(_, content, _)| content == note)
        .collect();
    assert_eq!(
        pruned,
        [
            true, true, true, true, true, false, false, false, false, false
        ]
    );
    // Asked again with nothing new: nothing to do.
    assert_eq!(plan(&messages, p.through, &policy), None);
    // Small outputs are not worth it, nor is a gain under a twentieth.
    assert_eq!(plan(&transcript(&[1_000; 60]), 0, &policy), None);
    assert_eq!(plan(&transcript(&[8_000; 6]), 0, &policy), None);
}

#[test]
fn the_newest_output_is_kept_however_large() {
    let messages = transcript(&[400_000]);
    assert_eq!(plan(&messages, 0, &PrunePolicy::for_window(40_000)), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Whatever is pruned, the request is the same chain: same messages,
    /// roles, calls, result ids and error flags; messages from the cut on
    /// are untouched; a pruned output is exactly the note; the newest
    /// outputs worth the protected share are whole.
    #[test]
    fn a_pruned_request_is_the_same_chain_with_the_newest_outputs_whole(
        outputs in proptest::collection::vec(0usize..40_000, 0..40),
        window in 2_000u64..400_000,
        already_frac in 0.0f64..1.0,
    ) {
        let messages = transcript(&outputs);
        let policy = PrunePolicy::for_window(window);
        let already = (messages.len() as f64 * already_frac) as usize;
        let Some(p) = plan(&messages, already, &policy) else {
            return Ok(());
        };
        prop_assert!(p.through > already && p.through <= messages.len());
        prop_assert!(p.results > 0 && p.tokens >= policy.min_gain_tokens);
        let sent = apply(&messages, p.through, &policy);
        prop_assert_eq!(sent.len(), messages.len());
        for (i, (a, b)) in messages.iter().zip(&sent).enumerate() {
            prop_assert_eq!(a.role, b.role);
            prop_assert_eq!(a.tool_calls().collect::<Vec<_>>(), b.tool_calls().collect::<Vec<_>>());
            match (result_of(a), result_of(b)) {
                (None, None) => {}
                (Some((ida, ca, ea)), Some((idb, cb, eb))) => {
                    prop_assert_eq!(ida, idb);
                    prop_assert_eq!(ea, eb);
                    if i >= p.through {
                        prop_assert_eq!(ca, cb);
                    } else {
                        prop_assert!(cb == ca || cb == texts::tool_output_pruned(ca.len()));
                    }
                }
                _ => prop_assert!(false, "message {} lost or gained a result", i),
            }
        }
        // The kept outputs are worth more than the protected share.
        let kept: u64 = messages[p.through..]
            .iter()
            .filter_map(result_of)
            .map(|(_, c, _)| (c.len() as u64).div_ceil(4))
            .sum();
        prop_assert!(kept > policy.protect_tokens, "kept {} of {}", kept, policy.protect_tokens);
        // The cut only moves forward: right after a prune there is nothing
        // more to prune, and a prune later starts past it.
        prop_assert_eq!(plan(&messages, p.through, &policy), None);
    }
}
