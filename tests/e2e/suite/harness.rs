//! The harness itself, checked against `stub-agentd` (a stand-in that only
//! listens on the socket), so it is known to work before the daemon does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_proto::v1::ListConversationsRequest;
use agent_tests::fake_llm::FakeLlm;
use agent_tests::harness::{DaemonOptions, TestDaemon, WAIT, client_bin, daemon_bin, wait_for};
use nix::sys::signal::kill;
use nix::unistd::Pid;

fn stub() -> Option<PathBuf> {
    Some(PathBuf::from(env!("CARGO_BIN_EXE_stub-agentd")))
}

fn alive(pid: u32) -> bool {
    kill(Pid::from_raw(i32::try_from(pid).unwrap()), None).is_ok()
}

fn same_file(a: &Path, b: &Path) -> bool {
    a.canonicalize().unwrap() == b.canonicalize().unwrap()
}

#[test]
fn binaries_are_found_next_to_the_test() {
    assert!(same_file(
        &daemon_bin(),
        Path::new(env!("CARGO_BIN_EXE_test-agentd"))
    ));
    assert!(same_file(
        &client_bin(),
        Path::new(env!("CARGO_BIN_EXE_test-agent"))
    ));
}

#[tokio::test]
async fn start_passes_dirs_config_env_and_args() {
    let llm = FakeLlm::start().await;
    let daemon = TestDaemon::start_with(
        &llm,
        DaemonOptions {
            extra_config: "[permissions]\nmode = \"auto\"".to_string(),
            env: vec![("AGENTD_TEST_MARKER".to_string(), "1".to_string())],
            args: vec!["--verbose-stub".to_string()],
            daemon_bin: stub(),
        },
    )
    .await;
    let log = daemon.log();
    assert!(
        log.contains(&format!("ANTHROPIC_BASE_URL={}", llm.base_url())),
        "{log}"
    );
    assert!(log.contains("--verbose-stub"), "{log}");
    assert!(log.contains(&daemon.socket.display().to_string()), "{log}");
    assert!(
        log.contains(&daemon.data_dir.display().to_string()),
        "{log}"
    );

    let config = std::fs::read_to_string(&daemon.config_path).unwrap();
    assert!(config.starts_with(
        "model = \"claude-test\"\n\n[retry]\nbase_delay_ms = 50\nmax_delay_ms = 500\n"
    ));
    assert!(config.contains("[permissions]\nmode = \"auto\""));
    assert!(daemon.work_dir.is_dir());
    assert!(daemon.socket.starts_with(daemon.dir.path()));

    let mut client = daemon.client().await;
    let listed = client
        .list_conversations(ListConversationsRequest::default())
        .await
        .unwrap();
    assert!(listed.into_inner().conversations.is_empty());
}

#[tokio::test]
async fn terminate_restart_and_kill9() {
    let llm = FakeLlm::start().await;
    let mut daemon = TestDaemon::start_with(
        &llm,
        DaemonOptions {
            daemon_bin: stub(),
            ..DaemonOptions::default()
        },
    )
    .await;
    let first = daemon.pid();
    let status = daemon.terminate().await;
    assert!(status.success(), "{status}");
    assert!(daemon.log().contains("SIGTERM, exiting"));
    assert!(!alive(first));

    daemon.restart().await;
    let second = daemon.pid();
    assert_ne!(first, second);
    daemon
        .client()
        .await
        .list_conversations(ListConversationsRequest::default())
        .await
        .unwrap();

    daemon.kill9();
    assert!(!alive(second));
    // The socket file of the killed daemon is still there; the next one binds anew.
    assert!(daemon.socket.exists());
    daemon.restart().await;
    daemon
        .client()
        .await
        .list_conversations(ListConversationsRequest::default())
        .await
        .unwrap();
    assert!(daemon.log().contains("restarting"));

    let third = daemon.pid();
    drop(daemon);
    assert!(!alive(third), "Drop must kill the daemon");
}

#[tokio::test]
#[should_panic(expected = "failing at start as asked")]
async fn a_daemon_that_dies_at_start_fails_with_its_log() {
    let llm = FakeLlm::start().await;
    let opts = DaemonOptions {
        args: vec!["--fail-at-start".to_string()],
        daemon_bin: stub(),
        ..DaemonOptions::default()
    };
    TestDaemon::start_with(&llm, opts).await;
}

#[tokio::test]
async fn agent_command_is_preset() {
    let llm = FakeLlm::start().await;
    let daemon = TestDaemon::start_with(
        &llm,
        DaemonOptions {
            daemon_bin: stub(),
            ..DaemonOptions::default()
        },
    )
    .await;
    let cmd = daemon.agent();
    assert!(same_file(Path::new(cmd.get_program()), &client_bin()));
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        args,
        [
            "--socket",
            &daemon.socket.display().to_string(),
            "--no-autostart"
        ]
    );
    assert_eq!(cmd.get_current_dir(), Some(daemon.work_dir.as_path()));
}

#[tokio::test]
async fn wait_for_polls_until_true() {
    let mut calls = 0;
    wait_for("the third call", WAIT, || {
        calls += 1;
        calls == 3
    })
    .await;
    assert_eq!(calls, 3);
}

#[tokio::test]
#[should_panic(expected = "timed out after 50ms waiting for the impossible")]
async fn wait_for_names_what_timed_out() {
    wait_for("the impossible", Duration::from_millis(50), || false).await;
}
