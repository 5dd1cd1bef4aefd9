//! Permissions over the attach stream: suspension, first answer wins,
//! deny / deny-and-stop / always / never, no client attached, restarts,
//! doom loops, read-only mode and the mode upgrade.

use super::util::{
    Attached, answer_with_agent, assert_valid_chain, get, is_idle, kind_of, send, tool, wait_state,
};
use super::util::{done, is_request, request_of};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{Recorded, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};
use std::time::Duration;

fn resolved(frames: &[pb::AttachResponse]) -> Vec<pb::PermissionResolved> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(Ev::PermissionResolved(r)) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn answer(request_id: &str, decision: pb::PermissionDecision, feedback: &str) -> Frame {
    Frame::Answer(pb::AnswerPermissionFrame {
        request_id: request_id.to_string(),
        decision: decision as i32,
        feedback: feedback.to_string(),
        scope: pb::RuleScope::Unspecified as i32,
        ..Default::default()
    })
}

/// The tool results of the last message of a recorded request.
fn results(req: &Recorded) -> Vec<Value> {
    let last = req.body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    last["content"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_answer_wins_and_nothing_leaks_into_the_next_call() {
    let cmd = json!({"command": "echo once >> log.txt"});
    let s = Scenario::new()
        .scripts([
            tool("p1", "bash", cmd.clone()),
            tool("p2", "bash", cmd),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    let mut b = Attached::open(&mut client, &id, 0, "B").await;
    send(&mut client, &id, "log it").await;

    let ra = request_of(a.until(WAIT, is_request).await.last().unwrap());
    let rb = request_of(b.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(ra, rb, "both clients see the same request");
    assert_eq!(ra.tool_name, "bash");
    assert_eq!(
        ra.kind(),
        pb::ToolKind::Execute,
        "clients get the kind, not only the name"
    );
    assert_eq!(ra.tool_use_id, "p1");
    assert!(ra.summary.contains("echo once"), "{}", ra.summary);
    assert!(
        ra.options
            .contains(&(pb::PermissionDecision::AllowOnce as i32))
    );
    assert_eq!(
        kind_of(&get(&mut client, &id).await),
        pb::StateKind::AwaitingPermission
    );

    a.send(answer(
        &ra.request_id,
        pb::PermissionDecision::AllowOnce,
        "",
    ))
    .await;
    let a_frames = a
        .until(WAIT, |m| matches!(m.event, Some(Ev::PermissionResolved(_))))
        .await;
    let b_frames = b
        .until(WAIT, |m| matches!(m.event, Some(Ev::PermissionResolved(_))))
        .await;
    let begun = a
        .until(WAIT, |m| matches!(m.event, Some(Ev::ToolCallBegin(_))))
        .await;
    let Some(Ev::ToolCallBegin(begin)) = &begun.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(
        (begin.tool_use_id.as_str(), begin.kind()),
        ("p1", pb::ToolKind::Execute)
    );
    for r in [resolved(&a_frames), resolved(&b_frames)] {
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].request_id, ra.request_id);
        assert_eq!(r[0].decision, pb::PermissionDecision::AllowOnce as i32);
        assert_eq!(
            r[0].client_name, "A",
            "the resolved event names who answered"
        );
    }
    // B's late answer is refused, to B only.
    b.send(answer(
        &ra.request_id,
        pb::PermissionDecision::AllowOnce,
        "",
    ))
    .await;
    let refusal = b
        .until(WAIT, |m| {
            m.seq == 0 && matches!(m.event, Some(Ev::Error(_)))
        })
        .await;
    let Some(Ev::Error(e)) = &refusal.last().unwrap().event else {
        unreachable!()
    };
    assert!(
        e.message.contains("perm-p1") || e.message.contains("no permission request"),
        "{}",
        e.message
    );

    // The identical call asks again: the first answer did not leak.
    let again = a.until(WAIT, is_request).await;
    let r2 = request_of(again.last().unwrap());
    assert_eq!(r2.tool_use_id, "p2");
    a.send(answer(&r2.request_id, pb::PermissionDecision::Deny, ""))
        .await;
    a.until(WAIT, is_idle).await;

    assert_eq!(
        std::fs::read_to_string(work.path().join("log.txt")).unwrap(),
        "once\n",
        "ran exactly once"
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    for r in &reqs {
        assert_valid_chain(r);
    }
    let denied = &results(&reqs[2])[0];
    assert_eq!(denied["is_error"], true);
    assert_eq!(denied["content"], "Permission to use bash has been denied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_and_stop_skips_the_rest_and_sends_the_feedback() {
    let s = Scenario::new()
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .tool_use("w1", "write", json!({"path": "x.txt", "content": "x"}))
                    .tool_use("b1", "bash", json!({"command": "echo never"})),
            ),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "write it").await;
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(r.tool_use_id, "w1");
    assert!(
        r.diff.contains("+x"),
        "edits carry a diff preview: {:?}",
        r.diff
    );
    a.send(answer(
        &r.request_id,
        pb::PermissionDecision::DenyAndStop,
        "use y.txt instead",
    ))
    .await;
    a.until(WAIT, is_idle).await;

    assert!(!work.path().join("x.txt").exists());
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_valid_chain(&reqs[1]);
    let blocks = results(&reqs[1]);
    assert_eq!(blocks[0]["tool_use_id"], "w1");
    assert_eq!(blocks[0]["is_error"], true);
    let text = blocks[0]["content"].as_str().unwrap();
    assert!(
        text.starts_with("[Request interrupted by user for tool use]"),
        "{text}"
    );
    assert!(text.contains("STOP what you are doing"), "{text}");
    assert_eq!(blocks[1]["tool_use_id"], "b1");
    assert_eq!(blocks[1]["is_error"], true);
    assert!(
        blocks[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("Skipped")
    );
    assert_eq!(blocks[2]["type"], "text");
    assert_eq!(blocks[2]["text"], "use y.txt instead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_and_never_persist_across_a_restart() {
    let ok_cmd = json!({"command": "echo allowed >> out.txt"});
    let bad_cmd = json!({"command": "touch forbidden.txt"});
    let s = Scenario::new()
        .scripts([
            tool("a1", "bash", ok_cmd.clone()),
            tool("n1", "bash", bad_cmd.clone()),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut d, mut client, work, id) = (s.fake, s.daemon, s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "first").await;
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());
    assert!(
        r.options
            .contains(&(pb::PermissionDecision::AllowAlways as i32))
    );
    assert!(
        r.suggested_rule.starts_with("bash(echo allowed"),
        "{}",
        r.suggested_rule
    );
    a.send(answer(
        &r.request_id,
        pb::PermissionDecision::AllowAlways,
        "",
    ))
    .await;
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(r.tool_use_id, "n1");
    a.send(answer(&r.request_id, pb::PermissionDecision::Never, ""))
        .await;
    a.until(WAIT, is_idle).await;
    drop(a);
    assert_eq!(fake.requests().len(), 3);

    d.terminate().await;
    d.restart().await;
    let mut client = d.client().await;
    fake.push_all([
        tool("a2", "bash", ok_cmd),
        tool("n2", "bash", bad_cmd),
        done(),
    ]);
    send(&mut client, &id, "again").await;
    // Neither asks now: one is allowed, the other denied by the saved rules.
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert!(r.pending_permission.is_none());
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 6);
    assert_eq!(results(&reqs[4])[0]["is_error"], false);
    assert_eq!(results(&reqs[5])[0]["is_error"], true);
    assert_eq!(
        std::fs::read_to_string(work.path().join("out.txt")).unwrap(),
        "allowed\nallowed\n"
    );
    assert!(!work.path().join("forbidden.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_for_a_client_and_survives_a_restart() {
    let s = Scenario::new()
        .scripts([
            tool("q1", "bash", json!({"command": "echo hi > one.txt"})),
            done(),
            tool("q2", "bash", json!({"command": "echo hi > two.txt"})),
            done(),
        ])
        .conversation("one")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut d, mut client, work, id) = (s.fake, s.daemon, s.client, s.work, s.id);
    wait_state(&mut client, &id, pb::StateKind::AwaitingPermission).await;
    let out = tokio::process::Command::from(d.agent())
        .arg("ls")
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("waiting for permission"));

    // Nobody is attached; five seconds later a client attaches and sees it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut a = Attached::open(&mut client, &id, 0, "late").await;
    let snap = a.next(WAIT).await;
    let Some(Ev::Snapshot(s)) = &snap.event else {
        panic!("{snap:?}")
    };
    let pending = s
        .pending_permission
        .clone()
        .expect("the snapshot holds the request");
    assert_eq!(pending.tool_use_id, "q1");
    a.send(answer(
        &pending.request_id,
        pb::PermissionDecision::AllowOnce,
        "",
    ))
    .await;
    a.until(WAIT, is_idle).await;
    assert!(work.path().join("one.txt").exists());
    drop(a);

    // A request pending when the daemon stops is asked again after it starts.
    send(&mut client, &id, "two").await;
    wait_state(&mut client, &id, pb::StateKind::AwaitingPermission).await;
    d.terminate().await;
    d.restart().await;
    let mut client = d.client().await;
    let r = wait_state(&mut client, &id, pb::StateKind::AwaitingPermission).await;
    assert_eq!(r.pending_permission.unwrap().tool_use_id, "q2");
    let out = tokio::process::Command::from(d.agent())
        .args(["answer", &id, "allow_once"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert!(work.path().join("two.txt").exists());
    assert_eq!(fake.requests().len(), 4);
}

/// Plays `calls` (then a final reply) in default mode and expects the one
/// with id `asking` to raise the doom-loop request; answers it and waits
/// for the turn to end. Returns the request's reason.
async fn doom_loop_request(calls: Vec<(&str, serde_json::Value)>, asking: &str) -> String {
    let count = calls.len();
    let s = Scenario::new()
        .scripts(
            calls
                .into_iter()
                .map(|(id, input)| tool(id, "think", input))
                .chain([done()]),
        )
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "loop").await;
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(r.tool_use_id, asking, "{}", r.reason);
    a.send(answer(&r.request_id, pb::PermissionDecision::AllowOnce, ""))
        .await;
    a.until(WAIT, is_idle).await;
    assert_eq!(fake.requests().len(), count + 1, "every call ran");
    r.reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_identical_calls_raise_a_doom_loop_request() {
    let same = json!({"thought": "I should think about this again"});
    let calls = vec![("d1", same.clone()), ("d2", same.clone()), ("d3", same)];
    let reason = doom_loop_request(calls, "d3").await;
    assert!(reason.contains("doom loop"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_alternating_with_the_same_results_raise_a_doom_loop_request() {
    let a = json!({"thought": "maybe the bug is in the parser"});
    let b = json!({"thought": "no, it must be the lexer"});
    let calls = vec![
        ("a1", a.clone()),
        ("b1", b.clone()),
        ("a2", a.clone()),
        ("b2", b),
        ("a3", a),
    ];
    assert_eq!(
        doom_loop_request(calls, "a3").await,
        "doom loop: the same 2 calls (think → think) came 2 times in a row with the same results"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_mode_hides_mutating_tools_until_the_upgrade_is_approved() {
    let s = Scenario::new()
        .scripts([
            tool(
                "u1",
                "request_mode_upgrade",
                json!({"reason": "I need to fix the bug"}),
            ),
            tool("w1", "write", json!({"path": "fixed.txt", "content": "ok"})),
            done(),
        ])
        .conversation("")
        .allow(&["write"])
        .mode(pb::PermissionMode::ReadOnly)
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "fix it").await;
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(r.tool_name, "request_mode_upgrade");
    assert!(r.reason.contains("I need to fix the bug"), "{}", r.reason);
    a.send(answer(&r.request_id, pb::PermissionDecision::AllowOnce, ""))
        .await;
    a.until(WAIT, is_idle).await;

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    let names = |req: &Recorded| -> Vec<String> {
        req.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let first = names(&reqs[0]);
    for hidden in ["bash", "write", "edit", "patch"] {
        assert!(
            !first.contains(&hidden.to_string()),
            "{hidden} offered in read_only: {first:?}"
        );
    }
    assert!(
        first.contains(&"request_mode_upgrade".to_string()),
        "{first:?}"
    );
    assert!(first.contains(&"read".to_string()));
    let upgraded = &results(&reqs[1])[0];
    assert_eq!(upgraded["is_error"], false);
    assert!(
        names(&reqs[1]).contains(&"write".to_string()),
        "write is offered after the upgrade"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("fixed.txt")).unwrap(),
        "ok"
    );

    // Asking again outside read-only mode is an error, without a prompt.
    fake.push_all([
        tool("u2", "request_mode_upgrade", json!({"reason": "again"})),
        done(),
    ]);
    send(&mut client, &id, "again").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    let again = &results(&reqs[4])[0];
    assert_eq!(again["is_error"], true);
    assert_eq!(again["content"], "Already in Unrestricted mode");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bypass_needs_the_daemon_flag_and_bad_rules_are_refused() {
    let s = Scenario::new().start().await;
    let (mut client, work) = (s.client, s.work);
    let e = client
        .create_conversation(pb::CreateConversationRequest {
            cwd: work.path().display().to_string(),
            mode: pb::PermissionMode::Bypass as i32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(e.message().contains("--allow-bypass"), "{}", e.message());
    let e = client
        .create_conversation(pb::CreateConversationRequest {
            cwd: work.path().display().to_string(),
            allow_rules: vec!["bash(unclosed".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_prompts_or_waits_for_another_client() {
    let s = Scenario::new()
        .scripts([
            tool("y1", "bash", json!({"command": "echo yes > yes.txt"})),
            done(),
            tool("z1", "bash", json!({"command": "echo z > z.txt"})),
            done(),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let cwd = work.path().display().to_string();

    // --yes answers allow-once by itself.
    let out = tokio::process::Command::from(d.agent())
        .args(["run", "--yes", "--cwd", &cwd, "make yes.txt"])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(work.path().join("yes.txt").exists());

    // Without --yes and without a terminal, it shows the request and waits
    // for another client to answer.
    let child = tokio::process::Command::from(d.agent())
        .args(["run", "--cwd", &cwd, "make z.txt"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = d.client().await;
    answer_with_agent(&d, &mut client, "allow_once").await;
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    assert!(all.contains("echo z"), "the request was shown: {all}");
    assert!(all.contains("agent answer"), "it says how to answer: {all}");
    assert!(work.path().join("z.txt").exists());
}
