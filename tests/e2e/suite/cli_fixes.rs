//! Small breaks of the `agent` client found by trying it from outside: shell
//! ids abbreviated, the prompt's keys on `agent answer`, a colourless
//! `agentd.log`, a reconnecting client that announced itself, and a reader
//! that goes away (`agent show ID | head`).

use super::util::{agent_out, autostarting_agent, send, tool, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{FakeLlm, Script};
use agent_tests::harness::{Scenario, WAIT, wait_for};
use serde_json::json;
use std::time::Duration;

/// A command that lives a while, unique to this test process.
fn sleeper(tag: &str) -> String {
    format!("echo {tag}; sleep 60.{}", std::process::id())
}

/// The shortest prefix of `id` that `other` does not share.
fn unique_prefix<'a>(id: &'a str, other: &str) -> &'a str {
    let common = id
        .bytes()
        .zip(other.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    &id[..common + 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_ids_may_be_abbreviated_to_a_unique_prefix() {
    let s = Scenario::new()
        .scripts([
            tool(
                "b1",
                "bash",
                json!({"command": sleeper("first"), "run_in_background": true}),
            ),
            tool(
                "b2",
                "bash",
                json!({"command": sleeper("second"), "run_in_background": true}),
            ),
            Script::text("both running"),
        ])
        .conversation("start two")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (d, mut client, id) = (s.daemon, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let shells = client
        .list_shells(pb::ListShellsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .shells;
    let first = shells.iter().find(|s| s.command.contains("first")).unwrap();
    let second = shells
        .iter()
        .find(|s| s.command.contains("second"))
        .unwrap();
    let (a, b) = (first.id.as_str(), second.id.as_str());
    let prefix = unique_prefix(a, b);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, out, _) = agent_out(&d, &["shells", "output", a]).await;
        if out.contains("first") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no output from {a}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A unique prefix, with or without `sh-`, in any case.
    for typed in [
        prefix.to_string(),
        prefix.trim_start_matches("sh-").to_string(),
        prefix.to_uppercase(),
    ] {
        let (ok, out, err) = agent_out(&d, &["shells", "output", &typed]).await;
        assert!(ok, "`agent shells output {typed}`: {err}");
        assert!(out.contains("first"), "{typed}: {out}");
    }

    // One that fits both, and one that fits neither.
    let (ok, _, err) = agent_out(&d, &["shells", "kill", "sh-"]).await;
    assert!(!ok);
    let (x, y) = if a < b { (a, b) } else { (b, a) };
    assert!(
        err.contains(&format!("ambiguous shell prefix sh- (matches {x} and {y})")),
        "{err}"
    );
    let absent = ["sh-2", "sh-3", "sh-4"]
        .into_iter()
        .find(|p| !a.starts_with(p) && !b.starts_with(p))
        .unwrap();
    let (ok, _, err) = agent_out(&d, &["shells", "kill", absent]).await;
    assert!(!ok);
    assert!(err.contains(&format!("unknown shell {absent}")), "{err}");

    // Kill by prefix; the full id is named back.
    let (ok, out, err) = agent_out(&d, &["shells", "kill", prefix]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("shell {a} killed"));
    let (ok, _, err) = agent_out(&d, &["shells", "kill", b]).await;
    assert!(ok, "{err}");
    let killed = client
        .list_shells(pb::ListShellsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .shells;
    assert!(
        killed
            .iter()
            .all(|s| s.status == pb::ShellStatus::Killed as i32),
        "{killed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_answer_takes_the_keys_the_prompt_shows() {
    let s = Scenario::new()
        .scripts([
            tool("t1", "bash", json!({"command": "echo one"})),
            tool("t2", "bash", json!({"command": "echo two"})),
            Script::text("done"),
        ])
        .conversation("run two commands")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::AwaitingPermission).await;
    let (ok, out, err) = agent_out(&d, &["answer", &id, "y"]).await;
    assert!(ok, "`agent answer ID y`: {err}");
    assert_eq!(out.trim(), "answered: allow once");
    wait_state(&mut client, &id, pb::StateKind::AwaitingPermission).await;
    let (ok, out, err) = agent_out(&d, &["answer", &id, "N"]).await;
    assert!(ok, "`agent answer ID N`: {err}");
    assert_eq!(out.trim(), "answered: deny");
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let requests = fake.requests();
    let result = |i: usize| {
        let messages = requests[i].body["messages"].as_array().unwrap().clone();
        messages.last().unwrap()["content"][0].clone()
    };
    let ran = result(1);
    assert!(
        ran["content"].as_str().unwrap().starts_with("one\n"),
        "{ran}"
    );
    assert_ne!(ran["is_error"], true, "{ran}");
    assert_eq!(result(2)["is_error"], true, "{}", result(2));

    let (ok, _, err) = agent_out(&d, &["answer", &id, "q"]).await;
    assert!(!ok, "an unknown key is refused");
    assert!(
        err.contains("allow_once"),
        "the refusal lists the choices: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_autostarted_daemon_writes_no_colour_codes_into_its_log() {
    let fake = FakeLlm::start().await;
    let root = tempfile::tempdir().unwrap();
    let (mut agent, runtime, data) = autostarting_agent(&fake, root.path());
    // What a person's shell passes on: no NO_COLOR, and a log level that
    // makes the daemon write lines.
    let out = agent
        .arg("ls")
        .env("RUST_LOG", "agentd=debug")
        .output()
        .await
        .unwrap();
    let pid = std::fs::read_to_string(data.join("agentd/agentd.lock")).unwrap_or_default();
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
    let log_path = runtime.join("agentd/agentd.log");
    stop();
    wait_for("the autostarted daemon to stop", WAIT, || {
        !runtime.join("agentd/agentd.sock").exists()
    })
    .await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("listening"), "the daemon logged: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "no escape codes in agentd.log:\n{}",
        log.escape_debug()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_client_does_not_announce_itself_as_attached() {
    let s = Scenario::new()
        .scripts([Script::text("before"), Script::text("after the restart")])
        .conversation("")
        .start()
        .await;
    let (mut d, mut client, id) = (s.daemon, s.client, s.id);
    send(&mut client, &id, "one").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    // Another client first, so this one's id (c2) differs from the one the
    // restarted daemon gives it (c1): a stale own id must not hide its join.
    let _observer = super::util::Attached::open(&mut client, &id, 0, "observer").await;
    let mut attach = super::util::spawn_agent(&d, &["attach", &id]);
    let agent_pid = attach.id().unwrap();
    let stdin = attach.stdin.take().unwrap();
    // What it prints, read as it comes.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(attach.stdout.take().unwrap()).lines();
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut seen = seen.lock().unwrap();
                seen.push_str(&line);
                seen.push('\n');
            }
        })
    };
    let printed = |what: &'static str| {
        let seen = seen.clone();
        wait_for(what, WAIT, move || seen.lock().unwrap().contains(what))
    };
    printed("before").await;
    d.kill9();
    tokio::time::sleep(Duration::from_millis(300)).await;
    d.restart().await;
    printed("reconnected").await;
    let mut client = d.client().await;
    send(&mut client, &id, "two").await;
    printed("after the restart").await;
    // Anything it would print about itself comes before the reply.
    drop(stdin);
    let out = tokio::time::timeout(WAIT, attach.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    reader.await.unwrap();
    let stdout = seen.lock().unwrap().clone();
    assert!(stdout.contains("reconnected"), "{stdout}");
    assert!(
        stdout.contains("after the restart"),
        "it came back: {stdout}"
    );
    assert!(
        !stdout.contains(&format!(":{agent_pid} attached")),
        "its own return is \"reconnected\", not someone attaching:\n{stdout}"
    );
    assert!(
        !stdout.lines().any(|l| l.ends_with(" attached")),
        "nobody else attached:\n{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_is_not_a_warning_in_the_log() {
    let s = Scenario::new()
        .scripts((0..3).flat_map(|i| {
            [
                tool(&format!("t{i}"), "think", json!({"thought": "first"})),
                Script::text("done"),
            ]
        }))
        .start()
        .await;
    let d = s.daemon;
    let cwd = d.work_dir.display().to_string();
    // `agent run` attaches, streams the turn and exits: its connection
    // ends without a half-close, as every terminal that closes does.
    for _ in 0..3 {
        let (ok, _, err) = agent_out(&d, &["run", "--cwd", &cwd, "go"]).await;
        assert!(ok, "agent run: {err}");
    }
    // The daemon notices each departure; give it a moment to log.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = d.log();
    assert!(
        !log.contains("WARN agentd::grpc") && !log.contains("closing an Attach stream"),
        "a client leaving is routine, not a warning:\n{log}"
    );
}

/// `agent show ID | head`, `agent completions bash | head`, `agent man |
/// head`: the reader goes before the command is done writing. The command
/// stops quietly with status 0, as other tools do: no panic (status 101),
/// no "Broken pipe (os error 32)" on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_goes_away_ends_every_command_quietly() {
    let s = Scenario::new()
        .scripts([Script::text("a reply to print")])
        .conversation("say something")
        .start()
        .await;
    let (d, mut client, id) = (s.daemon, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let commands: [&[&str]; 6] = [
        &["show", &id],
        &["show", &id, "--json"],
        &["ls"],
        &["export"],
        &["completions", "bash"],
        &["man"],
    ];
    for args in commands {
        // The read end is closed before the command starts, so its first
        // write fails however little it prints.
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = d
            .agent()
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("the client runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "agent {args:?}: {}: {stderr}",
            out.status
        );
        assert!(stderr.is_empty(), "agent {args:?} said: {stderr}");
    }
}
