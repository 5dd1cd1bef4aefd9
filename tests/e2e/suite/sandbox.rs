//! The OS sandbox of bash (issue 41 point 2): an allowed command cannot
//! write outside the conversation's directories, read the daemon's
//! credentials or open a TCP connection; after an approved "run
//! unsandboxed" it can; in `auto` mode a sandboxed command runs unasked and
//! one that needs the network asks. Skipped, with the reason printed, where
//! the kernel has no Landlock.

use super::util::{
    Attached, answer_with_agent, done, get, is_idle, is_request, request_of, result_of, send, tool,
};
use agent_proto::v1 as pb;
use agent_tests::harness::{Scenario, Started, WAIT};
use serde_json::json;
use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

const CONFIG: &str = "[sandbox]\nmode = \"workspace-write\"\nnetwork = false\n";

/// The daemon's sandbox line; None (and the reason printed) when commands
/// run unconfined on this kernel.
async fn sandbox_on(s: &mut Started<String>) -> Option<String> {
    let info = s
        .client
        .get_daemon_info(pb::GetDaemonInfoRequest::default())
        .await
        .unwrap()
        .into_inner();
    if info.sandbox.starts_with("off") {
        eprintln!("skipped: the sandbox is {}", info.sandbox);
        return None;
    }
    Some(info.sandbox)
}

/// Whether `listener` (non-blocking) got a connection within a moment.
fn accepted(listener: &TcpListener) -> bool {
    for _ in 0..50 {
        if let Ok((mut stream, _)) = listener.accept() {
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = stream.read(&mut [0u8; 64]);
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_command_stays_inside_until_run_unsandboxed_is_approved() {
    // Outside every place the sandbox lets a command write: not the
    // conversation's directories and not a temp directory (a clone under
    // /tmp has its target directory there), so the user's home.
    let Some(home) = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .filter(|h| {
            h.is_absolute() && !h.starts_with("/tmp") && !h.starts_with(std::env::temp_dir())
        })
    else {
        eprintln!("skipped: no home directory outside the temp directories to write to");
        return;
    };
    let outside = tempfile::tempdir_in(&home).unwrap();
    let (listener, port) = listener();
    let target = outside.path().join("escaped");
    let mut s = Scenario::new()
        .config(CONFIG)
        .conversation("")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let Some(status) = sandbox_on(&mut s).await else {
        return;
    };
    assert!(
        status.starts_with("workspace-write, network off"),
        "{status}"
    );
    let credentials = s.daemon.user_config_dir().join("credentials.toml");
    std::fs::create_dir_all(credentials.parent().unwrap()).unwrap();
    std::fs::write(
        &credentials,
        "[anthropic]\napi_key = \"sk-ant-sandbox-secret\"\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &credentials,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let command = format!(
        "echo x > {}; cat {}; (exec 3<>/dev/tcp/127.0.0.1/{port}) && echo connected",
        target.display(),
        credentials.display()
    );
    s.fake.push_all([
        tool("in", "bash", json!({"command": command})),
        tool(
            "out",
            "bash",
            json!({"command": command, "sandbox": "off", "justification": "it must write there"}),
        ),
        done(),
    ]);
    let id = s.id.clone();
    let mut a = Attached::open(&mut s.client, &id, 0, "A").await;
    send(&mut s.client, &id, "go").await;

    // The unsandboxed run asks, with the model's reason, although `bash`
    // is allowed; meanwhile the sandboxed run was refused everything.
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(r.tool_use_id, "out");
    assert!(
        !r.options
            .contains(&(pb::PermissionDecision::AllowAlways as i32)),
        "an allow rule never lets a command out: {:?}",
        r.options
    );
    assert!(
        r.reason.contains("run unsandboxed: it must write there"),
        "{}",
        r.reason
    );
    assert!(!target.exists(), "the sandboxed command wrote outside");
    assert!(
        !accepted(&listener),
        "the sandboxed command reached the network"
    );
    answer_with_agent(&s.daemon, &mut s.client, "allow_once").await;
    a.until(WAIT, is_idle).await;

    let last = s.fake.requests().pop().unwrap();
    let inside = result_of(&last, "in")["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(inside.contains("Permission denied"), "{inside}");
    assert!(
        !inside.contains("api_key") && !inside.contains("connected"),
        "{inside}"
    );
    assert!(
        inside.contains("ran inside the sandbox") && inside.contains("sandbox: \"off\""),
        "{inside}"
    );
    let freed = result_of(&last, "out")["content"]
        .as_str()
        .unwrap()
        .to_string();
    // The key itself is redacted from every result; the file was read.
    assert!(
        freed.contains("api_key =") && freed.contains("connected"),
        "{freed}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "x\n");
    assert!(
        accepted(&listener),
        "the unsandboxed command did not connect"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_runs_sandboxed_commands_unasked_and_asks_for_the_network() {
    let (listener, port) = listener();
    let url = format!("http://127.0.0.1:{port}/");
    let mut s = Scenario::new()
        .config(CONFIG)
        .scripts([
            tool("t", "bash", json!({"command": "touch x"})),
            tool(
                "c",
                "bash",
                json!({"command": format!("curl -s -m 5 {url}; echo curl-exit=$?")}),
            ),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Auto)
        .start()
        .await;
    if sandbox_on(&mut s).await.is_none() {
        return;
    }
    let id = s.id.clone();
    let mut a = Attached::open(&mut s.client, &id, 0, "A").await;
    send(&mut s.client, &id, "go").await;
    let r = request_of(a.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(r.tool_use_id, "c", "touch x asked");
    assert!(
        s.work.path().join("x").exists(),
        "touch x did not run unasked"
    );
    assert!(
        r.reason
            .contains("needs the network, which the sandbox cuts off"),
        "{}",
        r.reason
    );
    // Approved, the command known to need the network gets it.
    answer_with_agent(&s.daemon, &mut s.client, "allow_once").await;
    a.until(WAIT, is_idle).await;
    assert!(accepted(&listener), "the approved curl did not connect");
    let got = get(&mut s.client, &id).await;
    assert_eq!(
        got.conversation.unwrap().mode,
        pb::PermissionMode::Auto as i32
    );
}
