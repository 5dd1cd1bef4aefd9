//! The `agent` client against a real daemon: autostart, one-line errors,
//! and the standard gRPC services (health, reflection).

use super::util::{agent_out, autostarting_agent, create, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{FakeLlm, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT, client_bin, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_starts_the_daemon_when_none_answers() {
    let fake = FakeLlm::start().await;
    let root = tempfile::tempdir().unwrap();
    let (mut agent, runtime, data) = autostarting_agent(&fake, root.path());
    let out = agent.arg("ls").output().await.unwrap();
    let lock = data.join("agentd/agentd.lock");
    let pid = std::fs::read_to_string(&lock).unwrap_or_default();
    let stop = || {
        if let Ok(pid) = pid.trim().parse::<i32>() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    };
    if !out.status.success() {
        stop();
        panic!("agent ls failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(
        runtime.join("agentd/agentd.sock").exists(),
        "the daemon listens on the default socket"
    );
    stop();
    wait_for("the autostarted daemon to stop", WAIT, || {
        !runtime.join("agentd/agentd.sock").exists()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_clear_line() {
    let s = Scenario::new().start().await;
    let (fake, d, mut client, work) = (s.fake, s.daemon, s.client, s.work);

    let nowhere = d.dir.path().join("nowhere.sock");
    let out = tokio::process::Command::new(client_bin())
        .arg("--socket")
        .arg(&nowhere)
        .arg("--no-autostart")
        .arg("ls")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no daemon at"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let (ok, _, err) = agent_out(&d, &["show", "01ZZZZZZZZ"]).await;
    assert!(!ok);
    assert!(err.contains("unknown conversation"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let a = create(&mut client, work.path(), "").await;
    let b = create(&mut client, work.path(), "").await;
    let common: String = a
        .chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    let (ok, _, err) = agent_out(&d, &["show", &common]).await;
    assert!(!ok);
    assert!(err.contains("ambiguous"), "{err}");

    fake.push(Script::Reply(
        ReplyScript::new()
            .text("x")
            .hold_after(2, agent_tests::fake_llm::Gate::new()),
    ));
    let (ok, _, _) = agent_out(&d, &["send", &a, "first"]).await;
    assert!(ok);
    wait_state(&mut client, &a, pb::StateKind::LlmRequesting).await;
    // `--no-queue` keeps the seed's refusal (queueing is tested in queue.rs).
    let (ok, _, err) = agent_out(&d, &["send", "--no-queue", &a, "second"]).await;
    assert!(!ok);
    assert!(err.contains("agent is busy"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer() {
    let s = Scenario::new().start().await;
    let d = s.daemon;
    let channel = agent_tests::harness::connect_uds(&d.socket).await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: agent_proto::SERVICE_NAME.to_string(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let mut reflection = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let reply = stream.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
        panic!("unexpected reflection reply: {reply:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&agent_proto::SERVICE_NAME.to_string()),
        "{names:?}"
    );
}

/// `agent ls` shows the newest conversations a page at a time, and the
/// RPC pages through all of them without losing or repeating one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_pages_newest_first() {
    let s = Scenario::new().start().await;
    let (d, mut client, work) = (s.daemon, s.client, s.work);
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(create(&mut client, work.path(), "").await);
    }
    ids.reverse(); // newest first

    let mut seen = Vec::new();
    let mut before_id = String::new();
    loop {
        let page = client
            .list_conversations(pb::ListConversationsRequest {
                limit: 2,
                before_id: before_id.clone(),
                archived: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.conversations.len() <= 2);
        seen.extend(page.conversations.into_iter().map(|c| c.id));
        if page.next_before_id.is_empty() {
            break;
        }
        before_id = page.next_before_id;
    }
    assert_eq!(seen, ids);

    let (ok, out, err) = agent_out(&d, &["ls", "-n", "2"]).await;
    assert!(ok, "{err}");
    let shown: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(shown.len(), 2, "{out}");
    assert!(shown[0].starts_with(&ids[0][..10]), "{out}");
    assert!(shown[1].starts_with(&ids[1][..10]), "{out}");
    assert!(err.contains("agent ls --all"), "{err}");

    let (ok, out, err) = agent_out(&d, &["ls", "--all"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 1 + ids.len(), "{out}");
    assert!(!err.contains("--all"), "{err}");
}

/// The README's offline set-up command (`tests/demo.sh`) plays
/// `tests/demo/session.json`: every scripted call must still be a call this
/// daemon runs without an error, in a copy of the repository as the demo
/// makes it, so that the demo cannot silently rot when a tool changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offline_demo_session_runs_to_its_end() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let session = root.join("tests/demo/session.json");
    let scripts = agent_tests::fake_llm::script_file(&session.display().to_string()).unwrap();
    let calls = scripts.len() - 1;
    let s = Scenario::new().scripts(scripts).start().await;
    let (fake, d) = (s.fake, s.daemon);
    // A small repository like the scratch clone: the README's first line and
    // one commit, so that `git log` and `git diff` have something to show.
    let repo = d.work_dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::copy(root.join("README.md"), repo.join("README.md")).unwrap();
    std::fs::write(repo.join("main.rs"), "fn main() {}\n").unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=demo", "-c", "user.email=demo@example.com"])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "start"]);
    let cwd = repo.display().to_string();
    let (ok, _, err) = agent_out(
        &d,
        &["run", "--yes", "--cwd", &cwd, "look around and add a note"],
    )
    .await;
    assert!(ok, "agent run: {err}");
    let requests = fake.requests();
    assert_eq!(requests.len(), calls + 1, "one request per scripted reply");
    for (i, request) in requests.iter().enumerate().skip(1) {
        let messages = request.body["messages"].as_array().unwrap();
        let results: Vec<_> = messages
            .last()
            .and_then(|m| m["content"].as_array())
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .collect();
        assert_eq!(results.len(), 1, "request {i}: {:#}", request.body);
        assert_ne!(
            results[0]["is_error"],
            true,
            "the demo's call {} failed: {:#}",
            i - 1,
            results[0]
        );
    }
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    assert!(readme.contains("edited by the offline demo"), "{readme}");
}
