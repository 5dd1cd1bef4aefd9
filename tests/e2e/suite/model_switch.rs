//! Switching models mid-conversation (issue 42 point 5): each model's
//! usage is counted and priced on its own, `agent send --model` switches
//! before the message, and a model whose window the conversation no
//! longer fits is refused with the numbers and reached by a continuation.
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
async fn each_model_is_counted_at_its_price_and_a_window_too_small_is_reached_by_a_continuation() {
    let s = Scenario::new()
        .config(CONFIG)
        .scripts([
            reply("first", 1_000, 100),
            reply("second", 500, 50),
            reply("Summary: the work so far.", 200, 20),
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

    // 550 tokens of context do not fit claude-small's 500: refused with the
    // numbers, and the message is not sent.
    let (ok, _, err) = agent_out(&daemon, &["send", &id, "--model", "claude-small", "three"]).await;
    assert!(!ok);
    assert!(
        err.contains("claude-small has a context window of 500 tokens and this conversation already uses 550 of context"),
        "{err}"
    );
    assert!(
        err.contains(&format!("agent continue {id} --model claude-small")),
        "{err}"
    );
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(
        get(&mut client, &id).await.conversation.unwrap().model,
        "claude-other"
    );

    // The way on: a continuation that talks to the small model.
    let (ok, _, err) = agent_out(&daemon, &["compact", &id]).await;
    assert!(ok, "{err}");
    wait_state(&mut client, &id, pb::StateKind::ContextExhausted).await;
    let (ok, out, err) = agent_out(&daemon, &["continue", &id, "--model", "claude-small"]).await;
    assert!(ok, "{err}");
    let next = out.split_whitespace().last().unwrap().to_string();
    wait_state(&mut client, &next, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(reqs[2].body["model"], "claude-other", "the summary");
    assert_eq!(reqs[3].body["model"], "claude-small");
    let next = get(&mut client, &next).await.conversation.unwrap();
    assert_eq!(next.model, "claude-small");
}
