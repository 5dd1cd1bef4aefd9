//! Background shells owned by the daemon: polling, the CLI, the background
//! answer, shutdown and crash, limits.

use super::util::{
    Attached, agent_out, assert_valid_chain, create_with, is_idle, processes_matching, send, tool,
    wait_state, workdir,
};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::{Scenario, TestDaemon, WAIT, wait_for};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The first `sh-…` id in `text`.
fn shell_id(text: &str) -> Option<String> {
    let start = text.find("sh-")?;
    let id: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    Some(id)
}

/// The text of the tool results of the last message of a request body.
fn last_results(body: &Value) -> Vec<String> {
    super::util::last_content(body)
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn assistant_turns(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0)
}

/// A `sleep` command line unique to this test process, so leftovers of an
/// earlier failed run cannot be mistaken for this run's processes.
fn unique_sleep(base: u32) -> String {
    format!("sleep {base}.{}", std::process::id())
}

/// A model that starts `command` in the background and then follows the
/// steps: poll, wait, poll again, finish.
fn background_then_poll(command: &'static str) -> agent_tests::fake_llm::Responder {
    Arc::new(move |body: &Value| {
        let id = shell_id(&body["messages"].to_string()).unwrap_or_default();
        match assistant_turns(body) {
            0 => tool(
                "b1",
                "bash",
                json!({"command": command, "run_in_background": true}),
            ),
            1 => tool("o1", "bash_output", json!({"shell_id": id})),
            2 => tool("w1", "bash", json!({"command": "sleep 1.5"})),
            3 => tool("o2", "bash_output", json!({"shell_id": id})),
            _ => Script::Reply(ReplyScript::new().text("done")),
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_polls_a_background_shell_and_sees_each_line_once() {
    // The shell id is only known at run time: the model's next step reads it
    // from the previous tool result.
    let s = Scenario::new()
        .responder(background_then_poll(
            "for i in $(seq 1 5); do echo $i; sleep 0.2; done",
        ))
        .conversation("count")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 5);
    for r in &reqs {
        assert_valid_chain(r);
    }
    let started = &last_results(&reqs[1].body)[0];
    assert!(started.contains("sh-"), "{started}");
    let poll1 = &last_results(&reqs[2].body)[0];
    let poll2 = &last_results(&reqs[4].body)[0];
    let lines: Vec<String> = format!("{poll1}\n{poll2}")
        .lines()
        .filter(|l| l.trim().parse::<u32>().is_ok())
        .map(|l| l.trim().to_string())
        .collect();
    assert_eq!(
        lines,
        ["1", "2", "3", "4", "5"],
        "each line exactly once across polls:\n{poll1}\n---\n{poll2}"
    );
    assert!(poll2.contains("exited (code 0)"), "{poll2}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_lists_follows_and_kills_a_shell() {
    let s = Scenario::new()
        .scripts([
            tool(
                "b1",
                "bash",
                json!({"command": format!("echo started; {n} & {n}; wait", n = unique_sleep(300)), "run_in_background": true}),
            ),
            Script::Reply(ReplyScript::new().text("left it running")),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let (ok, _, err) = agent_out(
        &d,
        &[
            "run",
            "--allow",
            "bash",
            "--cwd",
            &work.path().display().to_string(),
            "start a server",
        ],
    )
    .await;
    assert!(ok, "{err}");
    // The client that started it has gone; the shell lives on.
    let (ok, out, err) = agent_out(&d, &["--json", "shells"]).await;
    assert!(ok, "{err}");
    let sid = shell_id(&out).expect("the shell is listed");
    assert!(out.contains("running"), "{out}");
    wait_for("both sleeps", WAIT, || {
        processes_matching(&unique_sleep(300)).len() >= 2
    })
    .await;

    let follow = tokio::process::Command::from(d.agent())
        .args(["shells", "output", "--follow", &sid])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ok, _, err) = agent_out(&d, &["shells", "kill", &sid]).await;
    assert!(ok, "{err}");
    let followed = tokio::time::timeout(WAIT, follow.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&followed.stdout).contains("started"));
    wait_for(
        "no process of the group left",
        Duration::from_secs(3),
        || processes_matching(&unique_sleep(300)).is_empty(),
    )
    .await;
    let (_, out, _) = agent_out(&d, &["shells", "--all"]).await;
    assert!(out.contains("killed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_answer_moves_a_call_to_a_shell() {
    let s = Scenario::new()
        .scripts([
            tool(
                "b1",
                "bash",
                json!({"command": "sleep 0.3; echo from the background"}),
            ),
            Script::Reply(ReplyScript::new().text("ok")),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "go").await;
    let frames = a
        .until(WAIT, |m| {
            matches!(m.event, Some(Ev::PermissionRequested(_)))
        })
        .await;
    let Some(Ev::PermissionRequested(r)) = &frames.last().unwrap().event else {
        unreachable!()
    };
    let r = r.request.clone().unwrap();
    assert!(
        r.options
            .contains(&(pb::PermissionDecision::Background as i32))
    );
    a.send(Frame::Answer(pb::AnswerPermissionFrame {
        request_id: r.request_id.clone(),
        decision: pb::PermissionDecision::Background as i32,
        ..Default::default()
    }))
    .await;
    let frames = a.until(WAIT, is_idle).await;
    assert!(
        frames
            .iter()
            .any(|m| matches!(m.event, Some(Ev::ShellStarted(_)))),
        "attached clients hear of the shell"
    );
    let reqs = fake.requests();
    let result = &last_results(&reqs[1].body)[0];
    assert!(
        result.starts_with("Command moved to background (shell ID: sh-"),
        "{result}"
    );
    let sid = shell_id(result).unwrap();
    let a_end = a
        .until(WAIT, |m| matches!(m.event, Some(Ev::ShellExited(_))))
        .await;
    let Some(Ev::ShellExited(e)) = &a_end.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(e.shell.as_ref().unwrap().id, sid);
    assert_eq!(
        e.shell.as_ref().unwrap().status,
        pb::ShellStatus::Exited as i32
    );
}

/// Starts a background shell running two `needle` processes; returns its
/// working directory (kept alive by the caller).
async fn start_long_shell(d: &TestDaemon, needle: &str) -> tempfile::TempDir {
    let mut client = d.client().await;
    let work = workdir();
    let command = format!("{needle} & {needle}; wait");
    let id = create_with(
        &mut client,
        work.path(),
        "",
        &["bash"],
        pb::PermissionMode::Default,
    )
    .await;
    client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: command,
            ..Default::default()
        })
        .await
        .unwrap();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    wait_for("the shell's processes", WAIT, || {
        processes_matching(needle).len() >= 2
    })
    .await;
    work
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_shells_and_a_crash_leaves_them_lost_without_orphans() {
    // The model runs the user's message as a background command.
    let s = Scenario::new()
        .responder(Arc::new(|body: &Value| {
            if assistant_turns(body) == 0 {
                let messages = body["messages"].as_array().unwrap();
                let text = messages.last().unwrap()["content"][0]["text"]
                    .as_str()
                    .unwrap_or("true")
                    .to_string();
                tool(
                    "b1",
                    "bash",
                    json!({"command": text, "run_in_background": true}),
                )
            } else {
                Script::Reply(ReplyScript::new().text("started"))
            }
        }))
        .start()
        .await;
    let mut d = s.daemon;

    let _w1 = start_long_shell(&d, &unique_sleep(301)).await;
    d.terminate().await;
    wait_for("SIGTERM to kill the shell", Duration::from_secs(3), || {
        processes_matching(&unique_sleep(301)).is_empty()
    })
    .await;
    d.restart().await;
    let (_, out, _) = agent_out(&d, &["shells", "--all"]).await;
    assert!(out.contains("killed"), "{out}");

    let _w2 = start_long_shell(&d, &unique_sleep(302)).await;
    d.kill9();
    assert!(
        processes_matching(&unique_sleep(302)).len() >= 2,
        "a crash leaves the processes"
    );
    d.restart().await;
    wait_for("orphans to be killed", WAIT, || {
        processes_matching(&unique_sleep(302)).is_empty()
    })
    .await;
    let (_, out, _) = agent_out(&d, &["shells", "--all"]).await;
    assert!(out.contains("lost"), "{out}");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_unknown_shells_get_clear_errors() {
    let big = "yes | head -c 50000000";
    let s = Scenario::new()
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .tool_use(
                        "l1",
                        "bash",
                        json!({"command": "sleep 1.7", "run_in_background": true}),
                    )
                    .tool_use(
                        "l2",
                        "bash",
                        json!({"command": "sleep 1.8", "run_in_background": true}),
                    )
                    .tool_use(
                        "l3",
                        "bash",
                        json!({"command": "sleep 1.9", "run_in_background": true}),
                    ),
            ),
            tool("u1", "bash_output", json!({"shell_id": "sh-nope00"})),
            // Let the two finish, so the conversation may start another.
            tool("z1", "bash", json!({"command": "sleep 2.5"})),
            tool(
                "big",
                "bash",
                json!({"command": big, "run_in_background": true}),
            ),
            Script::Reply(ReplyScript::new().text("done")),
        ])
        .config("[shells]\nmax_per_conversation = 2\nmax_total = 4\nmax_output_bytes = 1048576\n")
        .start()
        .await;
    let (fake, d, mut client) = (s.fake, s.daemon, s.client);
    let rss_before = rss_kib(d.pid());
    let work = workdir();
    let id = create_with(
        &mut client,
        work.path(),
        "go",
        &["bash"],
        pb::PermissionMode::Default,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    let limits = last_results(&reqs[1].body);
    assert!(
        limits[0].contains("sh-") && limits[1].contains("sh-"),
        "{limits:?}"
    );
    assert!(
        limits[2].contains("too many"),
        "the third is refused: {limits:?}"
    );
    let unknown = &last_results(&reqs[2].body)[0];
    assert!(unknown.contains("unknown shell sh-nope00"), "{unknown}");

    // Unknown ids over gRPC.
    let e = client
        .kill_shell(pb::KillShellRequest {
            shell_id: "sh-nope00".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = client
        .read_shell_output(pb::ReadShellOutputRequest {
            shell_id: "sh-nope00".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    // 50 MB of output against a 1 MiB cap: kept on disk up to the cap, and
    // the daemon's memory stays small.
    let big_id = shell_id(&last_results(&reqs[4].body)[0]).unwrap();
    let mut last = None;
    for _ in 0..300 {
        let shells = client
            .list_shells(pb::ListShellsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .shells;
        let s = shells.into_iter().find(|s| s.id == big_id).unwrap();
        if s.status != pb::ShellStatus::Running as i32 {
            last = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = last.expect("the big shell ended");
    assert!(
        s.output_bytes <= 1_048_576 + 200,
        "output capped: {}",
        s.output_bytes
    );
    let mut stream = client
        .read_shell_output(pb::ReadShellOutputRequest {
            shell_id: big_id.clone(),
            offset: 0,
            follow: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut all = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        all.extend_from_slice(&chunk.data);
    }
    assert!(
        String::from_utf8_lossy(&all).contains("output beyond"),
        "the cap is marked"
    );
    let rss = rss_kib(d.pid());
    println!("daemon RSS: {rss_before} KiB at start, {rss} KiB after 50 MB of shell output");
    assert!(
        rss.saturating_sub(rss_before) < 32 * 1024,
        "daemon RSS grew from {rss_before} to {rss} KiB"
    );
}
