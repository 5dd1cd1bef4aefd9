//! Shells that report back (issue 41 point 3): the end of a background
//! shell reaches the model's next request, or starts a turn with
//! `[shells] wake_on_exit`; a running command moves to the background or
//! is killed from any client.

use super::util::{assert_valid_chain, done, processes_matching, result_of, tool, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT, wait_for};
use serde_json::{Value, json};

/// Every text block of the last message of a request body.
fn last_texts(body: &Value) -> Vec<String> {
    super::util::last_content(body)
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The notes of ended shells in a request body (anywhere in it).
fn notes(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str().map(str::to_string))
        .filter(|t| t.starts_with("[background shell] "))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_shell_that_ends_reaches_the_next_request_once() {
    let s = Scenario::new()
        .scripts([
            tool(
                "b1",
                "bash",
                json!({"command": "echo one; echo from-the-shell; exit 3", "run_in_background": true}),
            ),
            tool("w1", "bash", json!({"command": "sleep 1"})),
            tool("w2", "bash", json!({"command": "true"})),
            done(),
        ])
        .conversation("start it")
        .allow(&["bash"])
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    for r in &reqs {
        assert_valid_chain(r);
    }
    // Started in request 2's results; ended during `sleep 1`: told with
    // request 3's results, after them.
    assert!(notes(&reqs[1].body).is_empty());
    let told = last_texts(&reqs[2].body);
    assert_eq!(told.len(), 1, "{told:?}");
    let note = &told[0];
    assert!(
        note.starts_with("[background shell] Shell sh-") && note.contains("ended (exit code 3)"),
        "{note}"
    );
    assert!(
        note.contains("Command: echo one; echo from-the-shell; exit 3")
            && note.contains("one\nfrom-the-shell"),
        "{note}"
    );
    // Once: request 4 carries it in the transcript only, not again.
    assert_eq!(notes(&reqs[3].body), std::slice::from_ref(note));
    assert!(last_texts(&reqs[3].body).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wake_on_exit_a_shell_that_ends_starts_a_turn() {
    let s = Scenario::new()
        .config("[shells]\nwake_on_exit = true\n")
        .scripts([
            tool(
                "b1",
                "bash",
                json!({"command": "sleep 1; echo built", "run_in_background": true}),
            ),
            Script::Reply(ReplyScript::new().text("it builds in the background")),
            Script::Reply(ReplyScript::new().text("the build finished")),
        ])
        .conversation("build it")
        .allow(&["bash"])
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    wait_for("the woken turn's request", WAIT, || {
        fake.requests().len() >= 3
    })
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    assert_valid_chain(&reqs[2]);
    let messages = reqs[2].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    assert_eq!(last["role"], "user");
    let told = last_texts(&reqs[2].body);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("ended (exit code 0)") && told[0].contains("built"),
        "{}",
        told[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_lost_in_a_crash_is_told_once_across_restarts() {
    let sleep = format!("sleep 300.{}", std::process::id());
    let s = Scenario::new()
        .scripts([
            tool(
                "b1",
                "bash",
                json!({"command": sleep.clone(), "run_in_background": true}),
            ),
            Script::Reply(ReplyScript::new().text("running")),
            Script::Reply(ReplyScript::new().text("noted")),
            Script::Reply(ReplyScript::new().text("still noted")),
        ])
        .conversation("serve")
        .allow(&["bash"])
        .start()
        .await;
    let (fake, mut d, id) = (s.fake, s.daemon, s.id);
    let mut client = s.client;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    d.kill9();
    d.restart().await;
    let mut client = d.client().await;
    super::util::send(&mut client, &id, "what happened?").await;
    wait_for("the next request", WAIT, || fake.requests().len() >= 3).await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let told = notes(&fake.requests()[2].body);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("ended (lost: agentd restarted while it ran)") && told[0].contains(&sleep),
        "{}",
        told[0]
    );
    // Taken and stored: another restart does not tell it again.
    d.terminate().await;
    d.restart().await;
    let mut client = d.client().await;
    super::util::send(&mut client, &id, "and now?").await;
    wait_for("the request after", WAIT, || fake.requests().len() >= 4).await;
    assert_eq!(notes(&fake.requests()[3].body), told);
}

/// A conversation whose model runs `command` in the foreground and then
/// says "done"; returns once the command runs (`needle` is in its command
/// line).
async fn running_command(command: &str, needle: &str) -> agent_tests::harness::Started<String> {
    let s = Scenario::new()
        .scripts([tool("c1", "bash", json!({"command": command})), done()])
        .conversation("run it")
        .allow(&["bash"])
        .start()
        .await;
    wait_for("the command to run", WAIT, || {
        !processes_matching(needle).is_empty()
    })
    .await;
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_moves_a_running_command_to_the_background() {
    let sleep = format!("sleep 301.{}", std::process::id());
    let s = running_command(&format!("echo started; {sleep}; echo never"), &sleep).await;
    let (fake, d, id) = (s.fake, s.daemon, s.id);
    let mut second = d.client().await;
    let moved = second
        .background_command(pb::BackgroundCommandRequest {
            conversation_id: id.clone(),
            tool_use_id: "c1".into(),
            client_name: "second".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(moved.shell_id.starts_with("sh-"), "{moved:?}");
    let mut client = s.client;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let result = result_of(&reqs[1], "c1");
    let text = result["content"].as_str().unwrap_or_default();
    assert!(
        text.starts_with(&format!(
            "Command moved to background (shell ID: {}) by second.",
            moved.shell_id
        )) && text.contains("Output so far:\nstarted"),
        "{result}"
    );
    assert_ne!(result["is_error"], true);
    // It runs on as that shell, listed and killable.
    let listed = second
        .list_shells(pb::ListShellsRequest {
            conversation_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .shells;
    assert!(
        listed.iter().any(|sh| sh.id == moved.shell_id),
        "{listed:?}"
    );
    assert!(!processes_matching(&sleep).is_empty(), "still running");
    second
        .kill_shell(pb::KillShellRequest {
            shell_id: moved.shell_id.clone(),
        })
        .await
        .unwrap();
    wait_for("the shell to be killed", WAIT, || {
        processes_matching(&sleep).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_kills_a_running_command_and_the_turn_goes_on() {
    let sleep = format!("sleep 302.{}", std::process::id());
    let s = running_command(&format!("echo started; {sleep}"), &sleep).await;
    let (fake, d, id) = (s.fake, s.daemon, s.id);
    let mut second = d.client().await;
    second
        .kill_command(pb::KillCommandRequest {
            conversation_id: id.clone(),
            tool_use_id: String::new(),
            client_name: "second".into(),
        })
        .await
        .unwrap();
    let mut client = s.client;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert!(processes_matching(&sleep).is_empty());
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "the model got the result and answered");
    let result = result_of(&reqs[1], "c1");
    let text = result["content"].as_str().unwrap_or_default();
    assert!(
        text.starts_with(
            "Killed by the user (second): the command and every process it started were stopped."
        ) && text.contains("started"),
        "{result}"
    );
    assert_eq!(result["is_error"], true);
    // Nothing runs now: a second kill is NOT_FOUND.
    let again = second
        .kill_command(pb::KillCommandRequest {
            conversation_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::NotFound, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_b_in_the_terminal_moves_a_running_command_to_the_background() {
    use agent_tests::pty::PtySession;
    let sleep = format!("sleep 303.{}", std::process::id());
    let s = Scenario::new()
        .scripts([
            tool(
                "c1",
                "bash",
                json!({"command": format!("echo started; {sleep}")}),
            ),
            Script::text("It runs in the background now."),
        ])
        .start()
        .await;
    let mut cmd = s.daemon.agent();
    cmd.current_dir(s.work.path());
    let term = PtySession::spawn(cmd, 100, 30).unwrap();
    let needle = sleep.clone();
    let term = tokio::task::spawn_blocking(move || {
        term.wait_for("/help for commands", WAIT).unwrap();
        term.send("serve it").unwrap();
        term.enter().unwrap();
        term.wait_for("allow?", WAIT).unwrap();
        term.send("y").unwrap();
        term.wait_for("Ctrl-B to background", WAIT).unwrap();
        term.wait_for("started", WAIT).unwrap();
        assert!(!processes_matching(&needle).is_empty(), "{}", term.dump());
        term.send_bytes(b"\x02").unwrap();
        term.wait_for("It runs in the background now.", WAIT)
            .unwrap();
        term
    })
    .await
    .unwrap();
    let reqs = s.fake.requests();
    assert_eq!(reqs.len(), 2, "{}", term.dump());
    let result = result_of(&reqs[1], "c1");
    let text = result["content"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("Command moved to background (shell ID: sh-"),
        "{result}"
    );
    let shell_id: String = text["Command moved to background (shell ID: ".len()..]
        .chars()
        .take_while(|c| *c != ')')
        .collect();
    assert!(!processes_matching(&sleep).is_empty(), "the shell runs on");
    let mut client = s.client;
    client
        .kill_shell(pb::KillShellRequest { shell_id })
        .await
        .unwrap();
    wait_for("the shell to be killed", WAIT, || {
        processes_matching(&sleep).is_empty()
    })
    .await;
}
