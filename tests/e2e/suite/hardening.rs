//! Faults found by driving the daemon from outside (issue 13): tool answers
//! that misled (a glob leaving the working directory, a write outside it
//! that did not say so), a loop explained as bogus commands, and answers
//! with an enum value out of range.

use super::util::{
    Attached, answer_with_agent, create_with, get, is_idle, kind_of, send, tool, wait_state,
};
use super::util::{done, is_request, request_of, result_of};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::json;
use std::path::{Path, PathBuf};

fn answer(request_id: &str, decision: pb::PermissionDecision, scope: i32) -> Frame {
    Frame::Answer(pb::AnswerPermissionFrame {
        request_id: request_id.to_string(),
        decision: decision as i32,
        feedback: String::new(),
        scope,
        ..Default::default()
    })
}

/// A directory next to `work` (so `../<name>` reaches it), with two files.
fn sibling_with_files(work: &Path) -> (tempfile::TempDir, String, PathBuf) {
    let outside = tempfile::Builder::new()
        .prefix("outside-")
        .tempdir_in(work.parent().unwrap())
        .unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
    std::fs::write(outside.path().join("other.txt"), "o").unwrap();
    let name = outside
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let real = outside.path().canonicalize().unwrap();
    (outside, name, real)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glob_outside_the_working_directory_is_refused() {
    let s = Scenario::new().start().await;
    let (fake, mut client, work) = (s.fake, s.client, s.work);
    std::fs::write(work.path().join("inside.txt"), "i").unwrap();
    std::fs::create_dir(work.path().join("sub")).unwrap();
    let (_outside, name, real) = sibling_with_files(work.path());
    let absolute = format!("{}/*", real.display());
    fake.push_all([
        Script::Reply(
            ReplyScript::new()
                .tool_use("g1", "glob", json!({"pattern": format!("../{name}/*")}))
                .tool_use("g2", "glob", json!({"pattern": absolute}))
                .tool_use(
                    "g3",
                    "glob",
                    json!({"pattern": format!("sub/../../{name}/*.txt")}),
                )
                .tool_use("g4", "glob", json!({"pattern": "*.txt"})),
        ),
        done(),
    ]);
    let id = create_with(
        &mut client,
        work.path(),
        "",
        &[],
        pb::PermissionMode::Default,
    )
    .await;
    send(&mut client, &id, "find the files").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    for g in ["g1", "g2", "g3"] {
        let r = result_of(&reqs[1], g);
        let text = r["content"].as_str().unwrap_or_default();
        assert_eq!(r["is_error"], true, "{g}: {r}");
        assert!(
            text.contains("outside the working directory"),
            "{g} must refuse like read and grep do, got: {text}"
        );
        assert!(!text.contains("No files match"), "{g}: {text}");
    }
    let inside = result_of(&reqs[1], "g4");
    assert_eq!(inside["content"].as_str().unwrap().trim(), "inside.txt");

    // An additional directory stays searchable through `..`.
    fake.push_all([
        tool("g5", "glob", json!({"pattern": format!("../{name}/*.txt")})),
        done(),
    ]);
    let created = client
        .create_conversation(pb::CreateConversationRequest {
            cwd: work.path().display().to_string(),
            additional_dirs: vec![real.display().to_string()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .conversation
        .unwrap()
        .id;
    send(&mut client, &created, "find them there").await;
    wait_state(&mut client, &created, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    let listed = result_of(reqs.last().unwrap(), "g5");
    let text = listed["content"].as_str().unwrap();
    assert_ne!(listed["is_error"], true, "{listed}");
    assert!(
        text.contains("secret.txt") && text.contains("other.txt"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_outside_the_working_directory_says_so() {
    let s = Scenario::new().start().await;
    let (fake, d, mut client, work) = (s.fake, s.daemon, s.client, s.work);
    let (_outside, name, real) = sibling_with_files(work.path());
    let target = real.join("new.txt");
    fake.push_all([
        tool(
            "w1",
            "write",
            json!({"path": target.display().to_string(), "content": "x"}),
        ),
        done(),
    ]);
    let id = create_with(
        &mut client,
        work.path(),
        "",
        &[],
        pb::PermissionMode::Default,
    )
    .await;
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "write it").await;
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());
    let wanted = format!("outside the working directory: {}", target.display());
    assert!(
        r.reason.contains(&wanted),
        "the request must say the path is outside; reason: {:?}, summary: {:?}",
        r.reason,
        r.summary
    );
    a.send(answer(&r.request_id, pb::PermissionDecision::Deny, 0))
        .await;
    a.until(WAIT, is_idle).await;
    assert!(!target.exists());

    // The `agent` prompt shows it on a line of its own. An edit through
    // `..` this time: the path shown is where it really goes.
    fake.push_all([
        tool(
            "e1",
            "edit",
            json!({"path": format!("../{name}/secret.txt"), "old_string": "s", "new_string": "t"}),
        ),
        done(),
    ]);
    let cwd = work.path().display().to_string();
    let child = tokio::process::Command::from(d.agent())
        .args(["run", "--cwd", &cwd, "edit the secret"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    answer_with_agent(&d, &mut client, "deny").await;
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let secret = real.join("secret.txt");
    let line = format!("outside the working directory: {}", secret.display());
    assert!(
        stdout.lines().any(|l| l.trim_start().starts_with(&line)),
        "the prompt shows {line:?} on its own line:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_is_explained_by_its_body_and_its_rule_is_usable() {
    let command = "for f in *.txt; do wc -l \"$f\"; done";
    let s = Scenario::new()
        .scripts([
            tool("b1", "bash", json!({"command": command})),
            tool("b2", "bash", json!({"command": command})),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    std::fs::write(work.path().join("a.txt"), "1\n2\n").unwrap();
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "count lines").await;
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());
    assert!(
        r.reason.contains("`wc -l \"$f\"`"),
        "the reason names the command in the loop: {:?}",
        r.reason
    );
    for bogus in ["`do ", "`done`", "`for "] {
        assert!(
            !r.reason.contains(bogus),
            "loop keywords are not commands; reason: {:?}",
            r.reason
        );
    }
    assert_eq!(
        r.suggested_rule, "bash(for f in *.txt ; do wc -l \"$f\" ; done)",
        "the rule allows exactly the loop shown"
    );
    assert!(
        r.options
            .contains(&(pb::PermissionDecision::AllowAlways as i32))
    );
    a.send(answer(
        &r.request_id,
        pb::PermissionDecision::AllowAlways,
        pb::RuleScope::Conversation as i32,
    ))
    .await;
    // The rule it added lets the same loop run again without asking.
    let frames = a.until(WAIT, is_idle).await;
    assert_eq!(
        frames.iter().filter(|m| is_request(m)).count(),
        0,
        "the second loop ran under the added rule"
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    for b in ["b1", "b2"] {
        let out = result_of(&reqs[2], b);
        assert!(
            out["content"].as_str().unwrap().contains("2 a.txt"),
            "{b}: {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_scope_42_is_refused() {
    let s = Scenario::new()
        .scripts([
            tool("w1", "write", json!({"path": "x.txt", "content": "x"})),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (mut client, work, id) = (s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "write it").await;
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());

    let refused = client
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: id.clone(),
            request_id: r.request_id.clone(),
            decision: pb::PermissionDecision::AllowAlways as i32,
            scope: 42,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("42"), "{}", refused.message());

    a.send(answer(
        &r.request_id,
        pb::PermissionDecision::AllowAlways,
        42,
    ))
    .await;
    let frames = a
        .until(WAIT, |m| {
            m.seq == 0 && matches!(m.event, Some(Ev::Error(_)))
        })
        .await;
    let Some(Ev::Error(e)) = &frames.last().unwrap().event else {
        unreachable!()
    };
    assert!(e.message.contains("42"), "{}", e.message);
    assert_eq!(
        kind_of(&get(&mut client, &id).await),
        pb::StateKind::AwaitingPermission,
        "neither answer was taken"
    );
    assert!(!work.path().join("x.txt").exists());

    a.send(answer(&r.request_id, pb::PermissionDecision::AllowOnce, 1))
        .await;
    a.until(WAIT, is_idle).await;
    assert!(work.path().join("x.txt").exists());
}
