//! Prompt caching (issue 15, point 7): with the breakpoints the daemon
//! places, what a request caches is the start of the next request, byte for
//! byte, within a turn and across turns; and over a long task most input
//! is read from the cache, as a server with a prompt cache counts it.

use super::util::{send, tool, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::Script;
use agent_tests::harness::Scenario;
use serde_json::json;

/// How the daemon marks a breakpoint in a request body.
const MARK: &[u8] = br#","cache_control":{"type":"ephemeral"}"#;

fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

/// `body` without its breakpoint marks: a server compares content, and the
/// last mark moves to the newest message with every request.
fn without_marks(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i..].starts_with(MARK) {
            i += MARK.len();
        } else {
            out.push(body[i]);
            i += 1;
        }
    }
    out
}

/// A turn of `rounds` think calls, then an answer.
fn turn(tag: &str, rounds: usize) -> impl Iterator<Item = Script> {
    let tag = tag.to_string();
    (0..rounds)
        .map(move |i| {
            tool(
                &format!("{tag}{i}"),
                "think",
                json!({"thought": format!("{tag}: step {i}, read the next file")}),
            )
        })
        .chain([Script::text("Done with this part.")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_begins_with_what_the_one_before_cached() {
    let s = Scenario::new()
        .scripts(turn("a", 20).chain(turn("b", 3)))
        .conversation("look around")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    send(&mut client, &id, "and a bit more").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 21 + 4, "two turns: 21 and 4 requests");
    for (k, pair) in requests.windows(2).enumerate() {
        let (this, next) = (&pair[0].raw_body, &pair[1].raw_body);
        let marks = find_all(this, MARK);
        assert_eq!(
            marks.len(),
            3,
            "request {k}: the system prompt, the tools and the last message are marked"
        );
        let cached = without_marks(&this[..marks[2]]);
        let next = without_marks(next);
        let same = cached.iter().zip(&next).take_while(|(a, b)| a == b).count();
        assert_eq!(
            same,
            cached.len(),
            "request {} does not begin with the {} bytes request {k} cached; they differ from byte \
             {same}: {:?} against {:?}",
            k + 1,
            cached.len(),
            String::from_utf8_lossy(&cached[same..(same + 120).min(cached.len())]),
            String::from_utf8_lossy(&next[same..(same + 120).min(next.len())]),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifty_round_task_reads_most_of_its_input_from_the_cache() {
    let s = Scenario::new()
        .scripts(turn("c", 50))
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    fake.emulate_prompt_cache();
    send(&mut client, &id, "work through the files one by one").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let conversation = client
        .get_conversation(pb::GetConversationRequest {
            conversation_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let usage = conversation
        .conversation
        .and_then(|c| c.usage)
        .expect("the conversation's usage");
    let input =
        usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
    let share = usage.cache_read_input_tokens as f64 / input as f64;
    eprintln!(
        "51 requests: {input} input tokens, {} read from the cache ({:.1} %), {} written, {} uncached",
        usage.cache_read_input_tokens,
        share * 100.0,
        usage.cache_creation_input_tokens,
        usage.input_tokens
    );
    assert!(
        share > 0.9,
        "only {:.1} % of the input was read from the cache: {usage:?}",
        share * 100.0
    );
}
