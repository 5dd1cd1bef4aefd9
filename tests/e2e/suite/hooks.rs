//! Hooks (issue 18, point 2), with real shell scripts as hooks: what each
//! event's hook can do, that failures and timeouts are reported and killed,
//! that a cancel kills a running hook, and that a project's hooks run only
//! in a directory the user trusted.

use super::util::result_of;
use super::util::{Attached, agent_out, is_idle, send, tool};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, WAIT, wait_for};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// Writes `body` as an executable bash script `name` in `dir`; returns the
/// command that runs it.
fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
    format!("bash {}", path.display())
}

/// A `[[hooks.<stage>]]` table.
fn hook(stage: &str, matcher: Option<&str>, command: &str, timeout_ms: Option<u64>) -> String {
    let mut t = format!("[[hooks.{stage}]]\ncommand = {}\n", toml_str(command));
    if let Some(m) = matcher {
        t.push_str(&format!("matcher = {}\n", toml_str(m)));
    }
    if let Some(ms) = timeout_ms {
        t.push_str(&format!("timeout_ms = {ms}\n"));
    }
    t
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn hook_runs(frames: &[pb::AttachResponse]) -> Vec<pb::HookRan> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(Ev::HookRan(h)) => Some(h.clone()),
            _ => None,
        })
        .collect()
}

fn content_of(result: &Value) -> String {
    match &result["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

async fn read_pid(path: &Path) -> u32 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(tokio::time::Instant::now() < deadline, "no pid in {path:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_tool_use_deny_reaches_the_model_with_its_reason_before_allow_rules() {
    let hooks = tempfile::tempdir().unwrap();
    // It also keeps what it got on stdin, to check the JSON object.
    let deny = script(
        hooks.path(),
        "deny.sh",
        r#"cat > "$PWD/hook-input.json"
echo '{"decision": "deny", "reason": "no pushes on Fridays"}'"#,
    );
    let s = Scenario::new()
        .config(&hook("pre_tool_use", Some("bash(git push:*)"), &deny, None))
        .scripts([
            tool("p1", "bash", json!({"command": "git push origin main"})),
            Script::text("ok, no push"),
        ])
        .conversation("")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut daemon, mut client, work, id) = (s.fake, s.daemon, s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "push it").await;
    let frames = a.until(WAIT, is_idle).await;
    // A durable event before the hook ran: the user's message.
    let first = frames
        .iter()
        .find(|m| matches!(m.event, Some(Ev::MessageAppended(_))))
        .unwrap()
        .seq;

    let runs = hook_runs(&frames);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].stage, "pre_tool_use");
    assert_eq!(runs[0].decision, "deny");

    // The record of what the hook decided survives a restart: a client
    // resuming from before it is told again.
    drop(a);
    daemon.terminate().await;
    daemon.restart().await;
    let mut client = daemon.client().await;
    let mut again = Attached::open(&mut client, &id, first, "B").await;
    let replayed = again
        .until(WAIT, |m| matches!(m.event, Some(Ev::HookRan(_))))
        .await;
    assert!(
        matches!(replayed[0].event, Some(Ev::Resumed(_))),
        "resumed from the store, not a snapshot: {replayed:?}"
    );
    assert_eq!(hook_runs(&replayed), runs);
    assert!(runs[0].command.contains("deny.sh"), "{:?}", runs[0].command);
    assert!(runs[0].error.is_empty());
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let result = result_of(&reqs[1], "p1");
    assert_eq!(result["is_error"], true);
    assert!(
        content_of(&result).contains("no pushes on Fridays"),
        "the model sees the reason: {result}"
    );
    let input: Value = serde_json::from_str(
        &std::fs::read_to_string(work.path().join("hook-input.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(input["event"], "pre_tool_use");
    assert_eq!(input["conversation_id"], id.as_str());
    assert_eq!(input["tool_name"], "bash");
    assert_eq!(input["tool_input"]["command"], "git push origin main");
    let cwd = work.path().canonicalize().unwrap();
    assert_eq!(input["cwd"], cwd.display().to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_2_blocks_with_stderr_and_calls_no_matcher_matches_run_at_once() {
    let hooks = tempfile::tempdir().unwrap();
    let block = script(
        hooks.path(),
        "block.sh",
        "echo 'rm is not allowed here; use trash' >&2\nexit 2",
    );
    let s = Scenario::new()
        .config(&hook("pre_tool_use", Some("bash(rm:*)"), &block, None))
        .script(Script::Reply(
            agent_tests::fake_llm::ReplyScript::new()
                .tool_use("r1", "bash", json!({"command": "rm -rf build"}))
                .tool_use("e1", "bash", json!({"command": "echo fine > fine.txt"})),
        ))
        .script(Script::text("done"))
        .conversation("")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    std::fs::create_dir(work.path().join("build")).unwrap();
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "clean").await;
    let frames = a.until(WAIT, is_idle).await;

    let runs = hook_runs(&frames);
    assert_eq!(runs.len(), 1, "only the rm call has a hook: {runs:?}");
    assert_eq!(runs[0].decision, "deny (exit 2)");
    assert!(work.path().join("build").exists(), "rm did not run");
    assert!(work.path().join("fine.txt").exists(), "the other call ran");
    let reqs = fake.requests();
    let blocked = result_of(&reqs[1], "r1");
    assert_eq!(blocked["is_error"], true);
    assert!(
        content_of(&blocked).contains("rm is not allowed here; use trash"),
        "{blocked}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_tool_use_hook_rewrites_the_input_and_post_tool_use_adds_to_the_result() {
    let hooks = tempfile::tempdir().unwrap();
    let rewrite = script(
        hooks.path(),
        "rewrite.sh",
        r#"echo '{"input": {"command": "echo rewritten > out.txt"}}'"#,
    );
    let post = script(
        hooks.path(),
        "post.sh",
        r#"cat > "$PWD/post-input.json"
echo '{"context": "lint: 0 warnings"}'"#,
    );
    let config = format!(
        "{}\n{}",
        hook("pre_tool_use", Some("bash"), &rewrite, None),
        hook("post_tool_use", None, &post, None)
    );
    let s = Scenario::new()
        .config(&config)
        .scripts([
            tool("w1", "bash", json!({"command": "echo original > out.txt"})),
            Script::text("done"),
        ])
        .conversation("")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "write it").await;
    let frames = a.until(WAIT, is_idle).await;

    assert_eq!(
        std::fs::read_to_string(work.path().join("out.txt")).unwrap(),
        "rewritten\n",
        "the tool ran with the new input"
    );
    let begin = frames
        .iter()
        .find_map(|m| match &m.event {
            Some(Ev::ToolCallBegin(b)) => Some(b.clone()),
            _ => None,
        })
        .unwrap();
    assert!(begin.input_json.contains("rewritten"), "{begin:?}");
    let runs = hook_runs(&frames);
    let decisions: Vec<(&str, &str)> = runs
        .iter()
        .map(|r| (r.stage.as_str(), r.decision.as_str()))
        .collect();
    assert_eq!(
        decisions,
        [
            ("pre_tool_use", "input replaced"),
            ("post_tool_use", "context")
        ]
    );
    let result = result_of(&fake.requests()[1], "w1");
    assert!(
        content_of(&result).ends_with("lint: 0 warnings"),
        "the addition is in the result: {result}"
    );
    let input: Value = serde_json::from_str(
        &std::fs::read_to_string(work.path().join("post-input.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(input["event"], "post_tool_use");
    assert_eq!(input["tool_input"]["command"], "echo rewritten > out.txt");
    assert_eq!(input["tool_result"]["is_error"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_hook_makes_the_agent_continue_once() {
    let hooks = tempfile::tempdir().unwrap();
    let stop = script(
        hooks.path(),
        "stop.sh",
        r#"if [ ! -e "$PWD/continued" ]; then
  touch "$PWD/continued"
  echo '{"decision": "continue", "reason": "run the tests before you stop"}'
fi"#,
    );
    let s = Scenario::new()
        .config(&hook("stop", None, &stop, None))
        .scripts([Script::text("I fixed it."), Script::text("Tests pass.")])
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "fix it").await;
    let frames = a.until(WAIT, is_idle).await;

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "one continuation, then the turn ends");
    let last = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert!(
        last.to_string()
            .contains("[stop hook] run the tests before you stop"),
        "the reason goes to the model as a user message: {last}"
    );
    let runs = hook_runs(&frames);
    let decisions: Vec<&str> = runs.iter().map(|r| r.decision.as_str()).collect();
    assert_eq!(decisions, ["continue", "none"]);
    assert!(
        frames.iter().any(|m| matches!(&m.event,
            Some(Ev::StateChanged(s)) if s.state.as_ref().map(|s| s.kind) == Some(pb::StateKind::StopHooks as i32))),
        "clients see the stop hooks run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_hook_writes_a_file_when_a_permission_request_waits() {
    let hooks = tempfile::tempdir().unwrap();
    let notify = script(hooks.path(), "notify.sh", r#"cat > "$PWD/notified.json""#);
    let s = Scenario::new()
        .config(&hook(
            "notification",
            Some("permission_request"),
            &notify,
            None,
        ))
        .scripts([
            tool("b1", "bash", json!({"command": "echo hi > hi.txt"})),
            Script::text("ok"),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (mut client, work, id) = (s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "say hi").await;
    let frames = a
        .until(WAIT, |m| {
            matches!(m.event, Some(Ev::PermissionRequested(_)))
        })
        .await;
    let request = match &frames.last().unwrap().event {
        Some(Ev::PermissionRequested(r)) => r.request.clone().unwrap(),
        _ => unreachable!(),
    };
    let file = work.path().join("notified.json");
    wait_for("the notification hook wrote its file", WAIT, || {
        std::fs::read_to_string(&file)
            .ok()
            .is_some_and(|t| t.ends_with('}'))
    })
    .await;
    let sent: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(sent["event"], "notification");
    assert_eq!(sent["kind"], "permission_request");
    assert!(sent["message"].as_str().unwrap().contains("bash"), "{sent}");
    a.send(agent_proto::v1::attach_request::Frame::Answer(
        pb::AnswerPermissionFrame {
            request_id: request.request_id,
            decision: pb::PermissionDecision::Deny as i32,
            feedback: String::new(),
            scope: pb::RuleScope::Unspecified as i32,
            ..Default::default()
        },
    ))
    .await;
    let mut seen = frames;
    seen.extend(a.until(WAIT, is_idle).await);
    assert!(!work.path().join("hi.txt").exists());
    if hook_runs(&seen).is_empty() {
        seen.extend(
            a.until(WAIT, |m| matches!(m.event, Some(Ev::HookRan(_))))
                .await,
        );
    }
    let runs = hook_runs(&seen);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        (runs[0].stage.as_str(), runs[0].decision.as_str()),
        ("notification", "sent")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_hook_is_killed_at_its_timeout_and_reported() {
    let hooks = tempfile::tempdir().unwrap();
    let hang = script(
        hooks.path(),
        "hang.sh",
        r#"echo $$ > "$PWD/hook.pid"
sleep 30"#,
    );
    let s = Scenario::new()
        .config(&hook("pre_tool_use", None, &hang, Some(300)))
        .scripts([
            tool("b1", "bash", json!({"command": "echo ran > ran.txt"})),
            Script::text("done"),
        ])
        .conversation("")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (mut client, work, id) = (s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    let started = std::time::Instant::now();
    send(&mut client, &id, "run it").await;
    let frames = a.until(WAIT, is_idle).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the turn did not wait for the hook's sleep"
    );
    let runs = hook_runs(&frames);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].decision, "failed");
    assert!(
        runs[0].error.contains("timed out after 300 ms"),
        "{:?}",
        runs[0]
    );
    let pid = read_pid(&work.path().join("hook.pid")).await;
    assert!(gone(pid), "the hook's process was killed");
    // A failed hook is no decision: the allow rule ran the call.
    assert!(work.path().join("ran.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_kills_the_hook_that_runs() {
    let hooks = tempfile::tempdir().unwrap();
    let hang = script(
        hooks.path(),
        "hang.sh",
        r#"echo $$ > "$PWD/hook.pid"
sleep 30"#,
    );
    let s = Scenario::new()
        .config(&hook("pre_tool_use", None, &hang, Some(60_000)))
        .scripts([tool("b1", "bash", json!({"command": "echo ran > ran.txt"}))])
        .conversation("")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "run it").await;
    let pid = read_pid(&work.path().join("hook.pid")).await;
    client
        .cancel_conversation(pb::CancelConversationRequest {
            conversation_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    a.until(WAIT, is_idle).await;
    wait_for("the hook was killed", WAIT, || gone(pid)).await;
    assert!(!work.path().join("ran.txt").exists());
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_hook_runs_only_once_its_directory_is_trusted() {
    let s = Scenario::new()
        .scripts([
            tool("b1", "bash", json!({"command": "echo one > one.txt"})),
            Script::text("done"),
            tool("b2", "bash", json!({"command": "echo two > two.txt"})),
            Script::text("done"),
        ])
        .conversation("")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, d, work, id) = (s.fake, s.client, s.daemon, s.work, s.id);
    let project = work.path().canonicalize().unwrap();
    std::fs::create_dir(project.join(".agentd")).unwrap();
    let deny = script(
        &project.join(".agentd"),
        "deny.sh",
        r#"touch "$PWD/hook-ran"
echo '{"decision": "deny", "reason": "the project says no"}'"#,
    );
    std::fs::write(
        project.join(".agentd/config.toml"),
        hook("pre_tool_use", None, &deny, None),
    )
    .unwrap();

    // Untrusted (a cloned repository): the hook does not run.
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "one").await;
    a.until(WAIT, is_idle).await;
    assert!(
        !project.join("hook-ran").exists(),
        "an untrusted project's hook ran"
    );
    assert!(project.join("one.txt").exists());

    // Trusted with `agent trust DIR`: it runs from the next message on.
    let dir = project.display().to_string();
    let (ok, out, err) = agent_out(&d, &["trust", &dir]).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("trusted"), "{out}");
    let (ok, out, _) = agent_out(&d, &["trust", "--list"]).await;
    assert!(ok && out.lines().any(|l| l == dir), "{out}");
    send(&mut client, &id, "two").await;
    a.until(WAIT, is_idle).await;
    assert!(project.join("hook-ran").exists());
    assert!(
        !project.join("two.txt").exists(),
        "the project hook denied it"
    );
    let result = result_of(&fake.requests()[3], "b2");
    assert!(
        content_of(&result).contains("the project says no"),
        "{result}"
    );

    let (ok, out, err) = agent_out(&d, &["untrust", &dir]).await;
    assert!(ok && out.contains("no longer trusted"), "{out}{err}");
    let (_, out, _) = agent_out(&d, &["trust", "--list"]).await;
    assert!(!out.contains(&dir), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_prompt_submit_hook_blocks_a_message_or_adds_context() {
    let hooks = tempfile::tempdir().unwrap();
    let check = script(
        hooks.path(),
        "check.sh",
        r#"if grep -q secret; then echo 'that looks like a secret' >&2; exit 2; fi
echo '{"context": "(the user is on call today)"}'"#,
    );
    let s = Scenario::new()
        .config(&hook("user_prompt_submit", None, &check, None))
        .script(Script::text("noted"))
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let refused = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "the secret is hunter2".to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("that looks like a secret"),
        "{refused:?}"
    );
    assert!(fake.requests().is_empty(), "a blocked message is not sent");
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "fix the build").await;
    let frames = a.until(WAIT, is_idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    let first = reqs[0].body["messages"][0].to_string();
    assert!(first.contains("fix the build"), "{first}");
    assert!(first.contains("(the user is on call today)"), "{first}");
    let runs = hook_runs(&frames);
    assert!(
        runs.iter()
            .any(|r| r.stage == "user_prompt_submit" && r.decision == "context"),
        "{runs:?}"
    );
}

/// Issue 39, point 3: trust is checked on the canonical directory (an
/// imported `cwd` of `<trusted>/../evil` is not under `<trusted>`), and
/// holds for the project file as it was when trusted: after a change (a
/// `git pull`) its hooks stop, the user is told how to trust it again, and
/// they run once it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_holds_for_the_canonical_directory_and_the_file_as_it_was_trusted() {
    let s = Scenario::new()
        .scripts((0..4).map(|_| Script::text("noted")))
        .start()
        .await;
    let (mut client, d) = (s.client, s.daemon);
    let base = s.work.path().canonicalize().unwrap();
    let (trusted, evil) = (base.join("trusted"), base.join("evil"));
    for (dir, marker) in [(&trusted, "trusted-ran"), (&evil, "evil-ran")] {
        std::fs::create_dir_all(dir.join(".agentd")).unwrap();
        let touch = format!("touch {}", base.join(marker).display());
        std::fs::write(
            dir.join(".agentd/config.toml"),
            hook("user_prompt_submit", None, &touch, None),
        )
        .unwrap();
    }
    let (ok, out, err) = agent_out(&d, &["trust", &trusted.display().to_string()]).await;
    assert!(ok, "{out}{err}");

    // An import whose cwd climbs out of the trusted directory.
    let dotted = format!("{}/../evil", trusted.display());
    let id = "01JDXYZABCDEFGHJKMNPQRSTV9";
    client
        .import_conversations(futures::stream::iter([pb::ExportedConversation {
            conversation: Some(pb::ConversationSummary {
                id: id.to_string(),
                cwd: dotted,
                model: "claude-test".to_string(),
                mode: pb::PermissionMode::Default as i32,
                ..Default::default()
            }),
            ..Default::default()
        }]))
        .await
        .unwrap();
    let mut a = Attached::open(&mut client, id, 0, "A").await;
    send(&mut client, id, "one").await;
    a.until(WAIT, is_idle).await;
    assert!(
        !base.join("evil-ran").exists(),
        "an untrusted project's hook ran"
    );

    // In the trusted project its hook runs.
    let mine = super::util::create(&mut client, &trusted, "").await;
    let mut b = Attached::open(&mut client, &mine, 0, "B").await;
    send(&mut client, &mine, "two").await;
    b.until(WAIT, is_idle).await;
    assert!(base.join("trusted-ran").exists());

    // Changed after the trust: refused, and the user is told what to do.
    std::fs::remove_file(base.join("trusted-ran")).unwrap();
    let changed = format!("touch {}", base.join("changed-ran").display());
    std::fs::write(
        trusted.join(".agentd/config.toml"),
        hook("user_prompt_submit", None, &changed, None),
    )
    .unwrap();
    send(&mut client, &mine, "three").await;
    let frames = b.until(WAIT, is_idle).await;
    assert!(
        !base.join("changed-ran").exists(),
        "a changed hook ran unasked"
    );
    let seen = format!("{frames:?}");
    assert!(
        seen.contains("it changed since its directory was trusted")
            && seen.contains(&format!("run `agent trust {}`", trusted.display())),
        "{seen}"
    );
    let (ok, out, err) = agent_out(&d, &["trust", &trusted.display().to_string()]).await;
    assert!(ok, "{out}{err}");
    send(&mut client, &mine, "four").await;
    b.until(WAIT, is_idle).await;
    assert!(base.join("changed-ran").exists(), "trusted again, it runs");
}

/// Issue 39, point 10: a trusted project file that holds more than hooks
/// (an `[mcp]` section) is not used, and the client — not only the daemon's
/// log — is told why, from the conversation's first turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_file_with_an_mcp_section_is_refused_and_the_client_is_told() {
    let s = Scenario::new().script(Script::text("noted")).start().await;
    let (mut client, d) = (s.client, s.daemon);
    let project = s.work.path().canonicalize().unwrap();
    std::fs::create_dir_all(project.join(".agentd")).unwrap();
    let touch = format!("touch {}", project.join("hook-ran").display());
    std::fs::write(
        project.join(".agentd/config.toml"),
        format!(
            "{}\n[mcp.servers.x]\ncommand = \"sh\"\n",
            hook("user_prompt_submit", None, &touch, None)
        ),
    )
    .unwrap();
    let (ok, out, err) = agent_out(&d, &["trust", &project.display().to_string()]).await;
    assert!(ok, "{out}{err}");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(super::util::frame(pb::attach_request::Frame::Create(
        pb::CreateAndSubscribe {
            create: Some(pb::CreateConversationRequest {
                cwd: project.display().to_string(),
                prompt: "hello".to_string(),
                ..Default::default()
            }),
            client_name: "A".to_string(),
            ..Default::default()
        },
    )))
    .await
    .unwrap();
    let rx = client
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut a = Attached { tx, rx };
    let frames = a.until(WAIT, is_idle).await;
    let seen = format!("{frames:?}");
    assert!(
        seen.contains("project hooks in") && seen.contains("mcp"),
        "the client is told: {seen}"
    );
    assert!(!project.join("hook-ran").exists());
}
