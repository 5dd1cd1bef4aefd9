//! Budgets the daemon enforces (issue 15, point 5): a reached budget holds
//! the turn before its next model request, in an error state that names
//! the budget and the amounts; every attached client is asked; a raise
//! (from `agent budget raise`, or an Attach frame) lets the held request go
//! out; "stop" ends the turn; and spending is the ledger's, which a
//! restart does not reset.
//!
//! Prices: $2 per million input tokens, $10 per million output tokens. A
//! reply of 2,000 in and 500 out costs $0.004 + $0.005 = $0.009.

use super::util::{Attached, agent_out, create, get, send, wait_state};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};

const CONFIG: &str = "[models.\"claude-test\"]
price = { input = 2.0, output = 10.0, cache_write = 2.5, cache_read = 0.2 }

[budget]
per_conversation_usd = 0.005
per_day_usd = 0.02
";

fn summary(r: &pb::GetConversationResponse) -> &pb::ConversationSummary {
    r.conversation.as_ref().unwrap()
}

fn is_budget_stopped(m: &pb::AttachResponse) -> bool {
    matches!(m.event, Some(Ev::BudgetStopped(_)))
}

fn is_budget_resolved(m: &pb::AttachResponse) -> bool {
    matches!(m.event, Some(Ev::BudgetResolved(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holds_the_turn_a_raise_lets_it_go_on_and_a_restart_keeps_the_spending() {
    let s = Scenario::new()
        .config(CONFIG)
        .scripts([
            // Conversation A, round 1: a tool call costing $0.009, over
            // the conversation's $0.005.
            Script::Reply(
                ReplyScript::new()
                    .text("Listing.")
                    .tool_use("b1", "bash", json!({"command": "echo budgeted"}))
                    .usage(2_000, 500),
            ),
            // Round 2, after the raise: $0.009 more (A: $0.018).
            Script::Reply(ReplyScript::new().text("Done.").usage(2_000, 500)),
        ])
        .conversation("")
        .allow(&["bash"])
        .start()
        .await;
    let (fake, mut daemon, mut client, a, work) = (s.fake, s.daemon, s.client, s.id, s.work);
    let mut one = Attached::open(&mut client, &a, 0, "terminal one").await;
    let mut two = Attached::open(&mut client, &a, 0, "terminal two").await;
    send(&mut client, &a, "list the files").await;

    // The reply's tool ran; the next request is held at the budget.
    for terminal in [&mut one, &mut two] {
        let frames = terminal.until(WAIT, is_budget_stopped).await;
        let Some(Ev::BudgetStopped(b)) = &frames.last().unwrap().event else {
            unreachable!()
        };
        let stop = b.stop.as_ref().unwrap();
        assert_eq!(stop.budget, "per_conversation_usd");
        assert!(stop.usd);
        assert_eq!(
            (stop.limit, stop.spent, stop.raise_by),
            (5_000, 9_000, 5_000)
        );
        assert_eq!(
            stop.text,
            "Budget reached: per_conversation_usd is $0.0050 and $0.0090 was spent by this conversation. \
The turn stopped before its next model request; raise the budget to go on."
        );
    }
    let held = wait_state(&mut client, &a, pb::StateKind::Error).await;
    let state = summary(&held).state.as_ref().unwrap();
    assert_eq!(state.error_kind, pb::ErrorKind::Budget as i32);
    assert!(
        state
            .error_message
            .contains("per_conversation_usd is $0.0050")
    );
    assert!(summary(&held).budget_stop.is_some());
    assert_eq!(fake.requests().len(), 1, "the held request went out");
    // The tool's result is stored; nothing is lost by the hold.
    assert!(
        held.messages
            .iter()
            .any(|m| format!("{m:?}").contains("budgeted")),
        "{held:?}"
    );

    // A raise too small holds it again, with the new limit.
    let (ok, out, err) = agent_out(&daemon, &["budget", "raise", &a, "--by", "0.001"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("still reached"), "{out}");
    let r = get(&mut client, &a).await;
    assert_eq!(summary(&r).budget_stop.as_ref().unwrap().limit, 6_000);
    assert_eq!(fake.requests().len(), 1);

    // A raise by the default (the budget again) lets it go on.
    let (ok, out, err) = agent_out(&daemon, &["budget", "raise", &a]).await;
    assert!(ok, "{err}");
    assert!(out.contains("goes on"), "{out}");
    let frames = one.until(WAIT, is_budget_resolved).await;
    let Some(Ev::BudgetResolved(resolved)) = &frames.last().unwrap().event else {
        unreachable!()
    };
    assert!(resolved.raised);
    let r = wait_state(&mut client, &a, pb::StateKind::Idle).await;
    assert!(summary(&r).budget_stop.is_none());
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let second = serde_json::to_string(&requests[1].body).unwrap();
    assert!(
        second.contains("budgeted"),
        "the tool result went with it: {second}"
    );
    assert!((summary(&r).cost_usd.unwrap() - 0.018).abs() < 1e-9);

    // The daemon restarts: today's spending ($0.018 of $0.02) is the
    // ledger's.
    drop((one, two));
    daemon.terminate().await;
    daemon.restart().await;
    let mut client = daemon.client().await;
    let (ok, ledger, err) = agent_out(&daemon, &["usage", "--json"]).await;
    assert!(ok, "{err}");
    let ledger: Value = serde_json::from_str(&ledger).unwrap();
    let day = ledger["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["budget"] == "per_day_usd")
        .cloned()
        .unwrap_or_else(|| panic!("{ledger:#}"));
    assert_eq!(day["spent"], 18_000, "{ledger:#}");
    assert_eq!(day["limit"], 20_000, "{ledger:#}");

    // Conversation B pushes today's spending over the daily budget with
    // one reply ($0.009, over its own $0.005 too, but its turn ends there).
    fake.push(Script::Reply(
        ReplyScript::new().text("B").usage(2_000, 500),
    ));
    // Conversation C's reply, once the daily budget is raised: $0.0003.
    fake.push(Script::Reply(
        ReplyScript::new().text("C done.").usage(100, 10),
    ));
    let b = create(&mut client, work.path(), "").await;
    send(&mut client, &b, "one thing").await;
    wait_state(&mut client, &b, pb::StateKind::Idle).await;
    assert_eq!(fake.requests().len(), 3);

    // Conversation C: held at the daily budget before its first request;
    // an attached client answers "stop", then sends again and raises.
    let c = create(&mut client, work.path(), "").await;
    let mut three = Attached::open(&mut client, &c, 0, "terminal three").await;
    send(&mut client, &c, "another").await;
    let frames = three.until(WAIT, is_budget_stopped).await;
    let Some(Ev::BudgetStopped(stopped)) = &frames.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(stopped.stop.as_ref().unwrap().budget, "per_day_usd");
    assert_eq!(stopped.stop.as_ref().unwrap().spent, 27_000);
    assert_eq!(fake.requests().len(), 3);
    three
        .send(pb::attach_request::Frame::Budget(pb::BudgetAnswerFrame {
            raise: false,
            raise_by: None,
        }))
        .await;
    // Held and stopped are both ERROR: the hold is what goes away.
    let deadline = tokio::time::Instant::now() + WAIT;
    let r = loop {
        let r = get(&mut client, &c).await;
        if summary(&r).budget_stop.is_none() {
            break r;
        }
        assert!(tokio::time::Instant::now() < deadline, "still held: {r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        summary(&r).state.as_ref().unwrap().kind,
        pb::StateKind::Error as i32
    );
    assert!(
        summary(&r)
            .state
            .as_ref()
            .unwrap()
            .error_message
            .starts_with("The turn was stopped at the budget: per_day_usd"),
        "{r:?}"
    );
    let frames = three.until(WAIT, is_budget_resolved).await;
    let Some(Ev::BudgetResolved(resolved)) = &frames.last().unwrap().event else {
        unreachable!()
    };
    assert!(!resolved.raised);
    assert_eq!(resolved.by.as_ref().unwrap().name, "terminal three");
    // Answering when nothing is held is refused.
    let refused = client
        .answer_budget(pb::AnswerBudgetRequest {
            conversation_id: c.clone(),
            raise: true,
            raise_by: None,
            client_name: "script".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused}");

    send(&mut client, &c, "please").await;
    three.until(WAIT, is_budget_stopped).await;
    three
        .send(pb::attach_request::Frame::Budget(pb::BudgetAnswerFrame {
            raise: true,
            raise_by: Some(1.0),
        }))
        .await;
    wait_state(&mut client, &c, pb::StateKind::Idle).await;
    assert_eq!(fake.requests().len(), 4);

    // The raise is today's, for every conversation, and durable.
    drop(three);
    daemon.kill9();
    daemon.restart().await;
    let (_, ledger, _) = agent_out(&daemon, &["usage"]).await;
    assert!(
        ledger.contains("budget per_day_usd: $0.0273 of $1.02 spent (raised by $1.00)"),
        "{ledger}"
    );
}
