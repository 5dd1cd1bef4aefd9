//! Extended thinking (issue 42 point 1): a request asks for it as the
//! model's config or the turn says, with `max_tokens` above the budget;
//! every signed `thinking` and every `redacted_thinking` block goes back
//! byte for byte in every later request of a tool loop — across a kill -9,
//! an `agent continue` and an export/import — and nothing unsigned ever
//! does (a cancel mid-thinking). The fake checks each request's thinking
//! as the API does (`fake_llm::thinking`), so a broken chain fails with 400.

use super::util::{Attached, agent_out, assert_valid_chain, get, send, wait_state};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{Gate, Recorded, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};
use std::time::Duration;

/// The model thinks with a 2048-token budget and may write 32000 tokens.
const THINKING: &str =
    "[models.\"claude-test\"]\nmax_output_tokens = 32000\nthinking = { budget_tokens = 2048 }";

/// Reply `n` of a tool loop: signed thinking (round 2 also a redacted
/// block), a word, and a read of `a{n}.txt` (each its own file: the same
/// read three times would be a doom loop).
fn round(n: usize) -> ReplyScript {
    let mut r = ReplyScript::new().thinking(&thought(n), &signature(n));
    if n == 2 {
        r = r.redacted_thinking(REDACTED);
    }
    r.text(&format!("Step {n}.")).tool_use(
        &format!("r{n}"),
        "read",
        json!({"path": format!("a{n}.txt")}),
    )
}

/// The files the rounds read.
fn files(dir: &std::path::Path) {
    for name in ["a.txt", "a1.txt", "a2.txt", "a3.txt", "a4.txt", "a5.txt"] {
        std::fs::write(dir.join(name), "alpha\n").unwrap();
    }
}

fn thought(n: usize) -> String {
    format!("Round {n}: I should read \"a.txt\" again.\nLine two.")
}

fn signature(n: usize) -> String {
    format!("EqQBCkgIARABGAIiQL+{n}/sig==")
}

const REDACTED: &str = "EmwKAhgBEgy3va3pzix/LafPsn4aDFqg+redacted==";

/// The final reply: thinking, then the answer.
fn last() -> Script {
    Script::Reply(
        ReplyScript::new()
            .thinking("All read.", "sig-final")
            .text("Done."),
    )
}

/// Every thinking and redacted_thinking block the request sends back, in
/// order, as JSON values.
fn sent_back(req: &Recorded) -> Vec<Value> {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "thinking" || b["type"] == "redacted_thinking")
        .collect()
}

/// The blocks rounds 1..=n produced, as they must be sent back.
fn produced(n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for k in 1..=n {
        out.push(json!({"type": "thinking", "thinking": thought(k), "signature": signature(k)}));
        if k == 2 {
            out.push(json!({"type": "redacted_thinking", "data": REDACTED}));
        }
    }
    out
}

/// The request's blocks are the rounds' byte for byte: the same values,
/// and each one's encoding found verbatim in the raw body.
fn assert_sent_back(req: &Recorded, rounds: usize) {
    assert_eq!(sent_back(req), produced(rounds), "{:#}", req.body);
    let raw = String::from_utf8_lossy(&req.raw_body);
    for block in produced(rounds) {
        let encoded = block.to_string();
        assert!(raw.contains(&encoded), "{encoded} verbatim in {raw}");
    }
}

fn assert_asks_thinking(req: &Recorded) {
    assert_eq!(
        req.body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048}),
        "{:#}",
        req.body
    );
    let max = req.body["max_tokens"].as_u64().unwrap();
    assert!(max > 2048, "max_tokens {max} exceeds the budget");
    assert_eq!(
        req.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    assert!(req.body.get("temperature").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_round_tool_loop_sends_every_thinking_block_back_across_a_kill9() {
    let held = Gate::new();
    let mut scripts: Vec<Script> = (1..=2).map(|n| Script::Reply(round(n))).collect();
    // Round 3 is cut by a kill -9 mid-thinking, and asked again after it.
    scripts.push(Script::Reply(round(3).hold_after(3, held.clone())));
    scripts.extend((3..=5).map(|n| Script::Reply(round(n))));
    scripts.push(last());
    let s = Scenario::new()
        .config(THINKING)
        .scripts(scripts)
        .conversation("")
        .start()
        .await;
    let (fake, mut d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    files(s.work.path());
    send(&mut client, &id, "read a.txt five times").await;
    fake.wait_for_requests(3, WAIT).await;
    // The third reply streams its thinking: the daemon dies mid-loop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    d.kill9();
    d.restart().await;
    let mut client = d.client().await;
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 7, "six requests, the third asked twice");
    for (i, req) in reqs.iter().enumerate() {
        assert_asks_thinking(req);
        assert_valid_chain(req);
        // Request i (0-based) follows `rounds` completed rounds: the cut
        // one completed nothing.
        let rounds = match i {
            0..=2 => i,
            _ => i - 1,
        };
        assert_sent_back(req, rounds);
    }
    assert!(
        !reqs[3].body.to_string().contains("\"signature\":\"\""),
        "nothing unsigned of the cut stream goes back"
    );
    // The transcript keeps the blocks too, the redacted one with its data.
    let stored: Vec<&pb::ThinkingBlock> = r
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match &b.block {
            Some(pb::content_block::Block::Thinking(t)) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(stored.len(), 7, "five rounds, one redacted, the last");
    assert_eq!(stored[2].redacted_data, REDACTED);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_and_import_keep_the_redacted_data_and_the_signatures() {
    let s = Scenario::new()
        .config(THINKING)
        .scripts([Script::Reply(round(1)), Script::Reply(round(2)), last()])
        .conversation("")
        .start()
        .await;
    let (d, mut client, id) = (s.daemon, s.client, s.id);
    files(s.work.path());
    send(&mut client, &id, "read twice").await;
    let original = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let (ok, exported, err) = agent_out(&d, &["export", &id]).await;
    assert!(ok, "{err}");
    assert!(exported.contains(REDACTED), "the export has the data");
    let file = d.dir.path().join("backup.jsonl");
    std::fs::write(&file, &exported).unwrap();

    let s2 = Scenario::new()
        .config(THINKING)
        .script(Script::Reply(
            ReplyScript::new().thinking("Again.", "sig-2").text("Yes."),
        ))
        .start()
        .await;
    let (fake2, d2) = (s2.fake, s2.daemon);
    let (ok, _, err) = agent_out(&d2, &["import", file.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    let mut client2 = d2.client().await;
    let restored = get(&mut client2, &id).await;
    assert_eq!(restored.messages, original.messages, "byte for byte");
    send(&mut client2, &id, "and once more?").await;
    wait_state(&mut client2, &id, pb::StateKind::Idle).await;
    let req = &fake2.requests()[0];
    assert_asks_thinking(req);
    let mut expected = produced(2);
    expected.push(json!({"type": "thinking", "thinking": "All read.", "signature": "sig-final"}));
    assert_eq!(
        sent_back(req),
        expected,
        "the imported blocks go back as they came"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continued_conversation_thinks_and_sends_its_own_blocks_back() {
    let window = format!("{THINKING}\ncontext_window = 10000");
    let s = Scenario::new()
        .config(&window)
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .thinking("Big.", "sig-big")
                    .text("full")
                    .usage(9_400, 100),
            ),
            Script::text("Summary: read a.txt next."),
            Script::Reply(round(1)),
            last(),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    files(s.work.path());
    send(&mut client, &id, "fill the context").await;
    wait_state(&mut client, &id, pb::StateKind::ContextExhausted).await;
    let summary = &fake.requests()[1];
    assert!(
        summary.body.get("thinking").is_none(),
        "a summary is asked without thinking: {:#}",
        summary.body
    );
    let (ok, out, err) = agent_out(&d, &["--json", "continue", &id]).await;
    assert!(ok, "{err}");
    let next: Value = serde_json::from_str(&out).unwrap();
    let next_id = next["id"].as_str().unwrap().to_string();
    wait_state(&mut client, &next_id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    // The continuation carries the summary, not the old blocks; its own
    // tool loop sends its blocks back.
    assert_asks_thinking(&reqs[2]);
    assert_sent_back(&reqs[2], 0);
    assert_asks_thinking(&reqs[3]);
    assert_sent_back(&reqs[3], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_thinking_leaves_a_chain_the_api_accepts() {
    let gate = Gate::new();
    let s = Scenario::new()
        .config(THINKING)
        .scripts([
            Script::Reply(round(1)),
            // Round 2 thinks and is cancelled before its signature.
            Script::Reply(
                ReplyScript::new()
                    .thinking("half a thought that never", "sig-never")
                    .tool_use("r2", "read", json!({"path": "a.txt"}))
                    .hold_after(4, gate.clone()),
            ),
            Script::Reply(
                ReplyScript::new()
                    .thinking("Fresh.", "sig-fresh")
                    .text("Okay."),
            ),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    files(s.work.path());
    let mut a = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "read").await;
    a.until(
        WAIT,
        |m| matches!(&m.event, Some(Ev::ThinkingDelta(t)) if t.text.contains("half")),
    )
    .await;
    client
        .cancel_conversation(pb::CancelConversationRequest {
            conversation_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    send(&mut client, &id, "go on").await;
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    let next = &reqs[2];
    assert_asks_thinking(next);
    assert_valid_chain(next);
    assert_sent_back(next, 1);
    assert!(!next.body.to_string().contains("half a thought"));
    let last = r.messages.last().unwrap();
    assert_eq!(
        last.role,
        pb::Role::Assistant as i32,
        "the fake accepted it"
    );
    drop(gate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_asks_for_thinking_and_the_next_does_not() {
    let s = Scenario::new()
        .scripts([
            Script::Reply(ReplyScript::new().thinking("Hm.", "sig-1").text("One.")),
            Script::text("Two."),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "think about it".into(),
            thinking: Some(pb::ThinkingChoice {
                budget_tokens: 3000,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    send(&mut client, &id, "and now?").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(
        reqs[0].body["thinking"],
        json!({"type": "enabled", "budget_tokens": 3000})
    );
    assert!(reqs[0].body["max_tokens"].as_u64().unwrap() > 3000);
    assert!(reqs[1].body.get("thinking").is_none(), "not asked again");
    let refused = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "x".into(),
            thinking: Some(pb::ThinkingChoice {
                effort: "extreme".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_reasoning_is_asked_by_effort_shown_and_never_sent_back() {
    let s = Scenario::new()
        .config("provider = \"openai\"\n[models.\"claude-test\"]\nthinking = { effort = \"high\" }")
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .thinking("Secret reasoning.", "")
                    .tool_use("call_1", "read", json!({"path": "a.txt"})),
            ),
            Script::text("Done."),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    files(s.work.path());
    let mut a = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "read it").await;
    a.until(
        WAIT,
        |m| matches!(&m.event, Some(Ev::ThinkingDelta(t)) if t.text.contains("reasoning")),
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body["reasoning_effort"], "high");
    assert!(
        !reqs[1].body.to_string().contains("Secret reasoning"),
        "{:#}",
        reqs[1].body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_think_asks_for_a_budget_and_shows_the_thinking_on_one_line() {
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new()
                .thinking("Let me weigh this.\nAt length.", "sig-1")
                .text("Forty-two."),
        ))
        .start()
        .await;
    let (fake, d) = (s.fake, s.daemon);
    let cwd = s.work.path().display().to_string();
    let (ok, out, err) =
        agent_out(&d, &["run", "--cwd", &cwd, "--think=3000", "what is it?"]).await;
    assert!(ok, "{err}");
    let req = &fake.requests()[0];
    assert_eq!(
        req.body["thinking"],
        json!({"type": "enabled", "budget_tokens": 3000})
    );
    assert!(out.contains("✻ thinking…"), "{out}");
    assert!(!out.contains("At length"), "collapsed: {out}");
    assert!(out.contains("Forty-two."), "{out}");
    let (ok, _, err) = agent_out(&d, &["run", "--cwd", &cwd, "--effort", "max", "x"]).await;
    assert!(!ok);
    assert!(err.contains("low, medium or high"), "{err}");
}
