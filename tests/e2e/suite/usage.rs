//! Usage people can see (issue 15, points 3 and 4): tokens and cost per
//! conversation in `agent ls` and `agent show`, reply by reply and per day
//! with `agent usage`, priced from the model table or the config, never
//! made up for an unknown model, and kept across a crash.

use super::util::{agent_out, create, send, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::Scenario;
use serde_json::Value;

fn reply(text: &str, input: u64, output: u64) -> Script {
    Script::Reply(ReplyScript::new().text(text).usage(input, output))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_cost_add_up_in_ls_show_and_the_daily_ledger_across_a_crash() {
    // $2 per million input tokens and $10 per million output tokens.
    let s = Scenario::new()
        .config(
            "[models.\"claude-test\"]\nprice = { input = 2.0, output = 10.0, cache_write = 2.5, cache_read = 0.2 }",
        )
        .scripts([
            reply("one", 10_000, 1_000),
            reply("two", 20_000, 2_000),
            reply("three", 5_000, 500),
        ])
        .start()
        .await;
    let (mut daemon, mut client, work) = (s.daemon, s.client, s.work);
    let a = create(&mut client, work.path(), "").await;
    send(&mut client, &a, "first").await;
    wait_state(&mut client, &a, pb::StateKind::Idle).await;
    send(&mut client, &a, "second").await;
    wait_state(&mut client, &a, pb::StateKind::Idle).await;
    let b = create(&mut client, work.path(), "").await;
    send(&mut client, &b, "third").await;
    wait_state(&mut client, &b, pb::StateKind::Idle).await;

    // a: 30k in, 3k out = $0.06 + $0.03; b: 5k in, 500 out = $0.01 + $0.005.
    let (ok, listed, err) = agent_out(&daemon, &["ls", "--json"]).await;
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let cost_of = |id: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .map(|c| c["cost_usd"].as_f64().unwrap())
            .unwrap()
    };
    assert!((cost_of(&a) - 0.09).abs() < 1e-9, "{listed:#}");
    assert!((cost_of(&b) - 0.015).abs() < 1e-9, "{listed:#}");
    let (_, table, _) = agent_out(&daemon, &["ls"]).await;
    let row = table
        .lines()
        .find(|l| a.starts_with(l.split(' ').next().unwrap()))
        .unwrap();
    assert!(row.contains("33.0k") && row.contains("$0.09"), "{table}");
    let (_, shown, _) = agent_out(&daemon, &["show", &a]).await;
    assert!(
        shown.ends_with(
            "33.0k tokens: 30000 in, 0 cache write, 0 cache read, 3000 out · cost $0.09\n"
        ),
        "{shown}"
    );
    let (_, replies, _) = agent_out(&daemon, &["usage", "--json", "--conversation", &a]).await;
    let replies: Value = serde_json::from_str(&replies).unwrap();
    assert_eq!(replies["lines"].as_array().unwrap().len(), 2, "{replies:#}");
    assert_eq!(replies["lines"][1]["usage"]["input_tokens"], 20_000);

    // The ledger survives a crash.
    daemon.kill9();
    daemon.restart().await;
    let (ok, ledger, err) = agent_out(&daemon, &["usage", "--json"]).await;
    assert!(ok, "{err}");
    let ledger: Value = serde_json::from_str(&ledger).unwrap();
    let total = &ledger["total"];
    assert_eq!(total["usage"]["input_tokens"], 35_000, "{ledger:#}");
    assert_eq!(total["usage"]["output_tokens"], 3_500, "{ledger:#}");
    assert!(
        (total["cost_usd"].as_f64().unwrap() - 0.105).abs() < 1e-9,
        "{ledger:#}"
    );
    assert_eq!(ledger["lines"][0]["model"], "claude-test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_a_price_shows_tokens_and_no_cost() {
    let s = Scenario::new()
        .conversation("")
        .script(reply("hi", 1_000, 100))
        .start()
        .await;
    let (d, mut client, id) = (s.daemon, s.client, s.id);
    send(&mut client, &id, "hello").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let (_, listed, _) = agent_out(&d, &["ls", "--json"]).await;
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["cost_usd"], Value::Null, "{listed:#}");
    let (_, table, _) = agent_out(&d, &["ls"]).await;
    assert!(
        table.lines().nth(1).unwrap().contains("1.1k    -"),
        "{table}"
    );
    let (_, ledger, _) = agent_out(&d, &["usage"]).await;
    assert!(ledger.contains("claude-test"), "{ledger}");
    assert!(
        d.log()
            .contains("model claude-test is not in agentd's table"),
        "said once in the log"
    );
}
