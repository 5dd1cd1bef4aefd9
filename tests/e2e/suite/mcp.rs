//! MCP servers (issue 18, point 3), with a real server built on rmcp's
//! server side (`test-mcp-server`): over stdio (text and image results, an
//! error, a tool list change, a crash and the restart, permission rules on
//! `mcp__…` names, shutdown with the daemon) and over streamable HTTP (a
//! trusted read-only hint), and `agent mcp ls`.

use super::util::{
    Attached, agent_out, create_with, is_idle, is_request, processes_matching, request_of,
    result_of, send, tool, wait_state,
};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{Recorded, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT, wait_for};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

fn server_bin() -> &'static str {
    env!("CARGO_BIN_EXE_test-mcp-server")
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn content_of(result: &Value) -> String {
    match &result["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

fn tool_names(req: &Recorded) -> Vec<String> {
    req.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The pid the echo tool reports: `echo: TEXT (pid N)`.
fn echo_pid(text: &str) -> u32 {
    text.rsplit_once("(pid ")
        .and_then(|(_, rest)| rest.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
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

fn calls(pairs: &[(&str, &str, Value)]) -> Script {
    let mut reply = ReplyScript::new();
    for (id, name, input) in pairs {
        reply = reply.tool_use(id, name, input.clone());
    }
    Script::Reply(reply)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_gives_results_errors_list_changes_and_restarts_after_a_crash() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("calls.log");
    let config = format!(
        "[mcp.servers.t]\ncommand = {}\nargs = [\"stdio\"]\nenv = {{ TEST_MCP_LOG = {} }}\n",
        toml_str(server_bin()),
        toml_str(&log.display().to_string()),
    );
    let s = Scenario::new()
        .config(&config)
        .scripts([
            calls(&[
                ("e1", "mcp__t__echo", json!({"text": "hi"})),
                ("p1", "mcp__t__picture", json!({})),
                ("f1", "mcp__t__fail", json!({})),
            ]),
            tool("g1", "mcp__t__grow", json!({})),
            tool("k1", "mcp__t__peek", json!({})),
            tool("c1", "mcp__t__crash", json!({})),
            tool("e2", "mcp__t__echo", json!({"text": "again"})),
            Script::text("done"),
        ])
        .conversation("")
        // Rules on the tools let them run. `peek` has none: the server
        // marks it read-only, but the config does not trust the server, so
        // it asks like any other MCP tool.
        .allow(&[
            "mcp__t__echo",
            "mcp__t__picture",
            "mcp__t__fail",
            "mcp__t__grow",
            "mcp__t__crash",
        ])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, daemon, work, id) = (s.fake, s.client, s.daemon, s.work, s.id);

    // Configured, not started until a conversation needs it.
    let (ok, out, err) = agent_out(&daemon, &["mcp", "ls"]).await;
    assert!(ok, "{err}");
    assert!(out.starts_with("t  not started  stdio  "), "{out}");
    assert!(!log.exists(), "the server ran before it was needed");

    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "use the tools").await;
    let frames = a.until(WAIT, is_request).await;
    let ask = request_of(frames.last().unwrap());
    assert_eq!(ask.tool_name, "mcp__t__peek");
    client
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: id.clone(),
            request_id: ask.request_id.clone(),
            decision: pb::PermissionDecision::AllowOnce as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    a.until(WAIT, is_idle).await;

    let reqs = fake.requests();
    assert_eq!(
        reqs.len(),
        6,
        "{:#?}",
        reqs.iter().map(|r| &r.body["messages"]).collect::<Vec<_>>()
    );
    // The server's tools with its schemas, after the built-in ones.
    let names = tool_names(&reqs[0]);
    for t in [
        "mcp__t__echo",
        "mcp__t__picture",
        "mcp__t__fail",
        "mcp__t__peek",
        "mcp__t__grow",
        "mcp__t__crash",
    ] {
        assert!(names.contains(&t.to_string()), "{t} not offered: {names:?}");
    }
    assert!(!names.contains(&"mcp__t__extra".to_string()));
    let echo = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__t__echo")
        .unwrap();
    assert_eq!(echo["input_schema"]["properties"]["text"]["type"], "string");

    // Text, an image as a placeholder, an error naming the server.
    let e1 = result_of(&reqs[1], "e1");
    assert_eq!(e1["is_error"], false, "{e1}");
    let first_pid = echo_pid(&content_of(&e1));
    let p1 = content_of(&result_of(&reqs[1], "p1"));
    assert!(
        p1.starts_with("a red dot\n[image: image/png, 70 bytes;"),
        "{p1}"
    );
    let f1 = result_of(&reqs[1], "f1");
    assert_eq!(f1["is_error"], true);
    assert_eq!(
        content_of(&f1),
        "MCP server `t`: tool `fail` failed: the disk is on fire"
    );

    // The list change is picked up by the next request.
    assert_eq!(content_of(&result_of(&reqs[2], "g1")), "grown");
    assert!(tool_names(&reqs[2]).contains(&"mcp__t__extra".to_string()));

    assert_eq!(content_of(&result_of(&reqs[3], "k1")), "peeked");

    // The crash is an error naming the server; the next call starts it again.
    let c1 = result_of(&reqs[4], "c1");
    assert_eq!(c1["is_error"], true);
    assert!(
        content_of(&c1).starts_with("MCP server `t`: `crash` failed: the server exited"),
        "{c1}"
    );
    let e2 = result_of(&reqs[5], "e2");
    let second_pid = echo_pid(&content_of(&e2));
    assert_ne!(first_pid, second_pid, "the server was not restarted");
    assert!(gone(first_pid));

    // A second conversation in the same directory shares the process.
    fake.push_all([
        tool("e3", "mcp__t__echo", json!({"text": "shared"})),
        Script::text("done"),
    ]);
    let other = create_with(
        &mut client,
        work.path(),
        "and you",
        &["mcp__t__echo"],
        pb::PermissionMode::Default,
    )
    .await;
    wait_for("the second conversation's requests", WAIT, || {
        fake.requests().len() == 8
    })
    .await;
    wait_state(&mut client, &other, pb::StateKind::Idle).await;
    let e3 = content_of(&result_of(&fake.requests()[7], "e3"));
    assert_eq!(echo_pid(&e3), second_pid, "not shared: {e3}");

    let (ok, out, err) = agent_out(&daemon, &["mcp", "ls"]).await;
    assert!(ok, "{err}");
    let head = out.lines().next().unwrap();
    assert!(head.starts_with("t  running  stdio  "), "{out}");
    assert!(head.contains("restarts: 1"), "{out}");
    assert!(head.contains(&format!("pid {second_pid}")), "{out}");
    assert!(out.contains("last error: the server exited"), "{out}");
    assert!(out.contains("  mcp__t__echo  Echoes text"), "{out}");

    // Every call reached the server, in order, once.
    let logged = std::fs::read_to_string(&log).unwrap();
    let tools: Vec<&str> = logged
        .lines()
        .filter_map(|l| l.split_once(' ').map(|x| x.1))
        .collect();
    assert_eq!(
        tools,
        [
            "echo", "picture", "fail", "grow", "peek", "crash", "echo", "echo"
        ]
    );

    // The daemon's shutdown takes the server with it.
    let mut daemon = daemon;
    daemon.terminate().await;
    wait_for("the MCP server to stop", WAIT, || gone(second_pid)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_and_a_server_given_with_agent_run() {
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("url");
    let mut server = tokio::process::Command::new(server_bin())
        .arg("http")
        .arg(&url_file)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_for("the HTTP MCP server", WAIT, || url_file.exists()).await;
    let url = std::fs::read_to_string(&url_file).unwrap();
    // This model takes images: an MCP image reaches it as an image.
    let config = format!(
        "[mcp.servers.h]\nurl = {}\ntrust = true\ntimeout_ms = 500\n\n[models.\"claude-test\"]\nimages = true\n",
        toml_str(&url)
    );
    let s = Scenario::new()
        .config(&config)
        .scripts([
            // A trusted server's read-only tools run without any rule (and
            // together); the --mcp server's tool runs by the --allow rule.
            calls(&[
                ("k1", "mcp__h__peek", json!({})),
                ("w1", "mcp__h__slow", json!({"ms": 5000})),
                ("s1", "mcp__s__echo", json!({"text": "from run"})),
                ("p1", "mcp__s__picture", json!({})),
            ]),
            Script::text("done"),
        ])
        .start()
        .await;
    let (fake, daemon, work) = (s.fake, s.daemon, s.work);
    let mcp = format!("s={} stdio", server_bin());
    let (ok, out, err) = agent_out(
        &daemon,
        &[
            "run",
            "--cwd",
            &work.path().display().to_string(),
            "--mcp",
            &mcp,
            "--allow",
            "mcp__s__*",
            "go",
        ],
    )
    .await;
    assert!(ok, "stdout: {out}\nstderr: {err}\nlog: {}", daemon.log());
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let names = tool_names(&reqs[0]);
    assert!(names.contains(&"mcp__h__echo".to_string()), "{names:?}");
    assert!(names.contains(&"mcp__s__echo".to_string()), "{names:?}");
    // The HTTP server has no `crash`.
    assert!(!names.contains(&"mcp__h__crash".to_string()), "{names:?}");
    assert_eq!(content_of(&result_of(&reqs[1], "k1")), "peeked");
    // A call past the server's time limit is an error naming the server.
    let w1 = result_of(&reqs[1], "w1");
    assert_eq!(w1["is_error"], true);
    assert_eq!(
        content_of(&w1),
        "MCP server `h`: `slow` timed out after 500 ms"
    );
    let s1 = content_of(&result_of(&reqs[1], "s1"));
    assert!(s1.starts_with("echo: from run (pid "), "{s1}");
    // The image, checked by its bytes, inside the tool result; its place in
    // the text says so.
    let p1 = result_of(&reqs[1], "p1");
    assert_eq!(
        content_of(&p1),
        "a red dot\n[image 1: png 1×1, 70 B, attached]"
    );
    assert_eq!(reqs[1].image_error, None);
    assert_eq!(reqs[1].images.len(), 1, "{p1:#}");
    assert!(reqs[1].images[0].bytes.starts_with(b"\x89PNG"));
    assert!(
        reqs[1].images[0].at.ends_with(".content[1]"),
        "{}",
        reqs[1].images[0].at
    );

    let (ok, out, err) = agent_out(&daemon, &["--json", "mcp", "ls"]).await;
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(out.trim()).unwrap();
    let servers = listed["servers"].as_array().unwrap();
    let h = servers.iter().find(|s| s["name"] == "h").unwrap();
    assert_eq!(h["state"], "running");
    assert_eq!(h["transport"], "http");
    assert_eq!(h["trusted"], true);
    assert_eq!(h["source"], "config");
    let peek = h["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__h__peek")
        .unwrap();
    assert_eq!(peek["read_only"], true);
    let s = servers.iter().find(|s| s["name"] == "s").unwrap();
    assert_eq!(s["source"], "conversation");
    assert_eq!(s["state"], "running");
    assert_eq!(
        Path::new(s["cwd"].as_str().unwrap()),
        work.path().canonicalize().unwrap()
    );
    let _ = server.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), server.wait()).await;
}

/// The daemon's shutdown waits for every task it started (issue 40 point
/// 1): with a background shell and an MCP server running, SIGTERM ends
/// both, every task ends without the drain's deadline, and it is prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_every_task_with_a_background_shell_and_an_mcp_server_running() {
    let sleeper = format!("sleep 41.{}", std::process::id());
    let config = format!(
        "[mcp.servers.t]\ncommand = {}\nargs = [\"stdio\"]\n",
        toml_str(server_bin()),
    );
    let s = Scenario::new()
        .config(&config)
        .scripts([
            tool("e1", "mcp__t__echo", json!({"text": "hi"})),
            tool(
                "b1",
                "bash",
                json!({"command": sleeper, "run_in_background": true}),
            ),
            Script::text("both running"),
        ])
        .conversation("start both")
        .allow(&["mcp__t__echo", "bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, mut daemon, id) = (s.fake, s.client, s.daemon, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3, "the echo, the shell and the end");
    let server = echo_pid(&content_of(&result_of(&reqs[1], "e1")));
    assert!(!gone(server), "the MCP server runs");
    assert!(
        !processes_matching(&sleeper).is_empty(),
        "the background shell runs"
    );

    let started = std::time::Instant::now();
    let status = daemon.terminate().await;
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(5), "stopping took {took:?}");
    let log = daemon.log();
    assert!(log.contains("every task ended"), "{log}");
    assert!(!log.contains("did not end"), "{log}");
    wait_for("the MCP server to stop", WAIT, || gone(server)).await;
    wait_for("the background shell to stop", WAIT, || {
        processes_matching(&sleeper).is_empty()
    })
    .await;
}
