//! Switching models mid-conversation (issue 42 point 5): each model's
//! usage is counted and priced on its own, `agent send --model` switches
//! before the message, and a switch to a model whose window the
//! conversation no longer fits continues it there after a summary.
//!
//! Prices: claude-test $2/$10 per million input/output tokens,
//! claude-other $4/$20, claude-small $1/$5 with a window of 500 tokens.

use super::util::{agent_out, get, send, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::Scenario;

const CONFIG: &str = "[models.\"claude-test\"]
price = { input = 2.0, output = 10.0, cache_write = 0.0, cache_read = 0.0 }

[models.\"claude-other\"]
price = { input = 4.0, output = 20.0, cache_write = 0.0, cache_read = 0.0 }

[models.\"claude-small\"]
context_window = 500
price = { input = 1.0, output = 5.0, cache_write = 0.0, cache_read = 0.0 }
";

fn reply(text: &str, input: u64, output: u64) -> Script {
    Script::Reply(ReplyScript::new().text(text).usage(input, output))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_model_is_counted_at_its_price_and_a_switch_to_a_window_too_small_continues() {
    let s = Scenario::new()
        .config(CONFIG)
        .scripts([
            reply("first", 1_000, 100),
            reply("second", 500, 50),
            // A summary takes a model a while: the message sent with the
            // switch arrives while it is written.
            Script::Reply(
                ReplyScript::new()
                    .text("Summary: the work so far.")
                    .usage(200, 20)
                    .pace(std::time::Duration::from_millis(20)),
            ),
            reply("going on small", 100, 10),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, daemon, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    send(&mut client, &id, "one").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;

    // `agent send --model` switches first, then sends.
    let (ok, _, err) = agent_out(&daemon, &["send", &id, "--model", "claude-other", "two"]).await;
    assert!(ok, "{err}");
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs[0].body["model"], "claude-test");
    assert_eq!(reqs[1].body["model"], "claude-other");

    // Each model's usage at its own price: $0.003 and $0.003, not the whole
    // usage at the last model's ($0.009).
    let c = get(&mut client, &id).await.conversation.unwrap();
    let by_model: Vec<(&str, u64, u64, Option<f64>)> = c
        .usage_by_model
        .iter()
        .map(|m| {
            let u = m.usage.unwrap_or_default();
            (
                m.model.as_str(),
                u.input_tokens,
                u.output_tokens,
                m.cost_usd,
            )
        })
        .collect();
    assert_eq!(
        by_model,
        [
            ("claude-other", 500, 50, Some(0.003)),
            ("claude-test", 1_000, 100, Some(0.003)),
        ]
    );
    assert!(
        (c.cost_usd.unwrap() - 0.006).abs() < 1e-9,
        "{:?}",
        c.cost_usd
    );
    let (ok, out, err) = agent_out(&daemon, &["--color", "never", "show", &id]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("  claude-test: 1.1k tokens · cost <$0.01"),
        "{out}"
    );
    assert!(
        out.contains("  claude-other: 550 tokens · cost <$0.01"),
        "{out}"
    );
    let (ok, json, err) = agent_out(&daemon, &["--json", "show", &id]).await;
    assert!(ok, "{err}");
    assert!(json.contains("\"usage_by_model\""), "{json}");

    // 550 tokens of context do not fit claude-small's 500: at rest the
    // switch is a continuation. claude-other (whose window holds them)
    // writes the summary, the conversation goes on in a new one talking to
    // claude-small, and the message sent with the switch goes with it.
    let (ok, out, err) =
        agent_out(&daemon, &["send", &id, "--model", "claude-small", "three"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("queued"), "{out}");
    let mut next = String::new();
    for _ in 0..300 {
        next = get(&mut client, &id)
            .await
            .conversation
            .unwrap()
            .continued_as;
        if !next.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!next.is_empty(), "not continued; log: {}", daemon.log());
    wait_state(&mut client, &next, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(reqs[2].body["model"], "claude-other", "the summary");
    assert_eq!(reqs[3].body["model"], "claude-small");
    let sent = reqs[3].body["messages"].to_string();
    assert!(sent.contains("Summary: the work so far."), "{sent}");
    assert!(sent.contains("three"), "{sent}");
    let old = get(&mut client, &id).await.conversation.unwrap();
    assert_eq!(old.model, "claude-other", "the old one never talked to it");
    let next = get(&mut client, &next).await.conversation.unwrap();
    assert_eq!(next.model, "claude-small");
}
