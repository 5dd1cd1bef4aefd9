//! Looking after the daemon with `agent`: `login` checks a key's shape and
//! stores it for the running daemon to pick up without a restart, `doctor`
//! reports where the key comes from, the model endpoint and, with
//! `--model`, whether the model answers, `daemon restart|status|logs|stop`
//! manage the process — and the key never shows up anywhere a person or a
//! client can read it.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use agent_proto::v1 as pb;
use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, TestDaemon, WAIT, client_bin, wait_for};
use tokio::io::AsyncWriteExt;

use super::util::{agent_out, wait_state};

const KEY: &str = "sk-ant-e2e-Zq8xW3kP0v7Yt2Lm";

/// `agent` with autostart on (restart must start a daemon), the test
/// daemon's socket and isolated XDG directories, the fake model's address,
/// and no key of any kind in its environment.
fn autostarting(d: &TestDaemon, fake_url: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(client_bin());
    cmd.arg("--socket").arg(&d.socket).current_dir(&d.work_dir);
    for (name, _) in std::env::vars_os() {
        let name_str = name.to_string_lossy();
        if ["AGENTD_", "ANTHROPIC_", "OPENAI_", "XDG_"]
            .iter()
            .any(|p| name_str.starts_with(p))
        {
            cmd.env_remove(name);
        }
    }
    let xdg = d.dir.path().join("xdg");
    cmd.env("XDG_CONFIG_HOME", xdg.join("config"))
        .env("XDG_DATA_HOME", xdg.join("data"))
        .env("XDG_STATE_HOME", xdg.join("state"))
        .env("XDG_RUNTIME_DIR", xdg.join("runtime"))
        .env("ANTHROPIC_BASE_URL", fake_url)
        .env("RUST_LOG", "agentd=debug")
        .env("NO_COLOR", "1");
    cmd
}

/// SIGKILLs the process it holds when dropped (a failing test's daemon).
struct StopOnDrop(Option<i32>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

async fn run(mut cmd: tokio::process::Command, args: &[&str]) -> (bool, String, String) {
    let out = cmd.args(args).output().await.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_doctor_and_restart_and_the_key_is_never_shown() {
    let s = Scenario::new().env("ANTHROPIC_API_KEY", "").start().await;
    let (fake, d, mut client) = (s.fake, s.daemon, s.client);
    let mut seen = Vec::new();

    // No key anywhere: the daemon runs, and doctor says what to do.
    let (ok, out, _) = agent_out(&d, &["doctor"]).await;
    assert!(!ok, "doctor must fail without a key:\n{out}");
    assert!(out.contains("FAIL credentials"), "{out}");
    assert!(out.contains("agent login"), "{out}");
    assert!(fake.requests().is_empty(), "nothing is sent without a key");

    // `echo KEY | agent login`: stored 0600 in the daemon's config dir.
    let (status, login_out, login_err) = login(&d, &[], KEY).await;
    assert_eq!(status, Some(0), "{login_out}{login_err}");
    let file = d.user_config_dir().join("credentials.toml");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(std::fs::read_to_string(&file).unwrap().contains(KEY));
    seen.push(("login", login_out));

    // Doctor shows the endpoint and spends no model request by default.
    let (ok, doctor, err) = agent_out(&d, &["doctor"]).await;
    assert!(ok, "{doctor}{err}\n{}", d.log());
    let endpoint = format!("ok   endpoint     {} (anthropic, model ", fake.base_url());
    assert!(doctor.contains(&endpoint), "{doctor}");
    assert!(doctor.contains("not checked"), "{doctor}");
    assert!(doctor.contains("agent doctor --model"), "{doctor}");
    assert!(fake.requests().is_empty(), "doctor paid for a request");
    seen.push(("doctor without --model", doctor));

    // The running daemon uses it at once; the model check reaches the fake
    // with the key in its header.
    fake.push(Script::text("OK"));
    let (ok, doctor, err) = agent_out(&d, &["doctor", "--model"]).await;
    assert!(ok, "{doctor}{err}\n{}", d.log());
    assert!(doctor.contains("credentials file"), "{doctor}");
    assert!(doctor.contains(&file.display().to_string()), "{doctor}");
    assert!(doctor.contains("answers"), "{doctor}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));
    seen.push(("doctor", doctor));

    // A turn, streamed through Attach events as `agent --json run` prints them.
    fake.push(Script::text("Hello there."));
    let (ok, events, err) = agent_out(&d, &["--json", "run", "say hello"]).await;
    assert!(ok, "{events}{err}");
    assert!(events.contains("Hello there."), "{events}");
    seen.push(("attach events", events));
    let (ok, export, _) = agent_out(&d, &["export"]).await;
    assert!(ok);
    assert!(export.contains("Hello there."), "{export}");
    seen.push(("export", export));
    let listed = super::util::listed(&mut client).await;
    assert_eq!(listed.len(), 1);
    let id = listed[0].id.clone();

    // Restart: a new process with the same arguments, the conversation kept.
    let old_pid = d.pid();
    let (ok, out, err) = run(autostarting(&d, &fake.base_url()), &["daemon", "restart"]).await;
    assert!(ok, "{out}{err}\n{}", d.log());
    assert!(out.contains(&format!("pid {old_pid} → ")), "{out}");
    assert!(
        !err.contains("from this terminal"),
        "no key was passed: {err}"
    );
    let (ok, status, _) = run(
        autostarting(&d, &fake.base_url()),
        &["--json", "daemon", "status"],
    )
    .await;
    assert!(ok, "{status}");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let new_pid = status["pid"].as_u64().unwrap();
    // The restarted daemon is nobody's child here: end it if the test fails.
    let mut restarted = StopOnDrop(Some(i32::try_from(new_pid).unwrap()));
    assert_ne!(new_pid, u64::from(old_pid));
    assert_eq!(status["credentials"], "credentials file");
    let new_log = d.dir.path().join("agentd.log");
    assert_eq!(status["log_file"], new_log.display().to_string());
    let mut client = d.client().await;
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(r.conversation.unwrap().id, id, "the conversation survived");

    // The restarted daemon answers with the stored key too.
    fake.push(Script::text("OK"));
    let (ok, doctor, err) = run(autostarting(&d, &fake.base_url()), &["doctor", "--model"]).await;
    assert!(ok, "{doctor}{err}");
    assert_eq!(
        fake.requests().last().unwrap().header("x-api-key"),
        Some(KEY)
    );
    seen.push(("doctor after restart", doctor));
    let (ok, logs, _) = run(
        autostarting(&d, &fake.base_url()),
        &["daemon", "logs", "-n", "1000"],
    )
    .await;
    assert!(ok);
    assert!(logs.contains("agentd listening"), "{logs}");
    seen.push(("daemon logs", logs));

    // Logout: the key is gone and the next request says so (no restart).
    let (ok, out, _) = agent_out(&d, &["logout"]).await;
    assert!(ok, "{out}");
    assert!(!file.exists());
    let (ok, doctor, _) = agent_out(&d, &["doctor"]).await;
    assert!(!ok, "{doctor}");
    assert!(doctor.contains("FAIL credentials"), "{doctor}");

    let (ok, out, err) = agent_out(&d, &["daemon", "stop"]).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains(&format!("pid {new_pid}")), "{out}");
    wait_for("the socket to go", WAIT, || !d.socket.exists()).await;
    restarted.0 = None;
    let (_, out, _) = agent_out(&d, &["daemon", "status"]).await;
    assert!(out.contains("not running"), "{out}");

    seen.push(("test daemon log", d.log()));
    seen.push((
        "restarted daemon log",
        std::fs::read_to_string(&new_log).unwrap(),
    ));
    for (what, text) in &seen {
        assert!(!text.is_empty(), "{what} is empty");
        assert!(!text.contains(KEY), "the key appears in {what}:\n{text}");
        assert!(
            !text.contains(&KEY[..12]),
            "part of the key appears in {what}"
        );
    }
}

/// `agent login ARGS` with `key` on its stdin: its exit status, stdout
/// and stderr.
async fn login(d: &TestDaemon, args: &[&str], key: &str) -> (Option<i32>, String, String) {
    let mut login = tokio::process::Command::from(d.agent())
        .arg("login")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = login.stdin.take().unwrap();
    stdin
        .write_all(format!("{key}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = login.wait_with_output().await.unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_refuses_a_key_of_the_wrong_shape_and_check_asks_the_model() {
    let s = Scenario::new().env("ANTHROPIC_API_KEY", "").start().await;
    let (fake, d) = (s.fake, s.daemon);
    let file = d.user_config_dir().join("credentials.toml");

    // A paste gone wrong: refused with exit 2, nothing stored, not echoed.
    for bad in ["sk-ant-e2e-Zq8x W3kP0v7Yt2Lm", "sk-ant"] {
        let (code, out, err) = login(&d, &[], bad).await;
        assert_eq!(code, Some(2), "{out}{err}");
        assert!(err.contains("agent: "), "{err}");
        assert!(!out.contains(bad) && !err.contains(bad), "{out}{err}");
        assert!(!file.exists(), "a refused key was stored");
    }

    // A good key, then one tiny request through the daemon.
    fake.push(Script::text("OK"));
    let (code, out, err) = login(&d, &["--check"], KEY).await;
    assert_eq!(code, Some(0), "{out}{err}\n{}", d.log());
    assert!(out.contains("stored the anthropic key"), "{out}");
    assert!(out.contains("ok   model"), "{out}");
    assert!(out.contains("answers"), "{out}");
    assert!(!out.contains(KEY) && !err.contains(KEY), "{out}{err}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));

    // The model failing is said, with exit 1 (the key stays stored).
    fake.push(Script::unauthorized());
    let (code, out, err) = login(&d, &["--check"], KEY).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("FAIL model"), "{out}");
    assert!(file.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_checks_the_prefix_only_for_the_providers_own_api() {
    // The fake stands in for another server: its keys are its own.
    let s = Scenario::new().env("ANTHROPIC_API_KEY", "").start().await;
    let (code, out, err) = login(&s.daemon, &[], "token-abc123456").await;
    assert_eq!(code, Some(0), "{out}{err}");

    // Against Anthropic's own API, a key without `sk-ant-` is refused.
    let s = Scenario::new()
        .env("ANTHROPIC_API_KEY", "")
        .env("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
        .start()
        .await;
    let d = s.daemon;
    let (code, out, err) = login(&d, &[], "token-abc123456").await;
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("`sk-ant-`"), "{err}");
    assert!(!err.contains("token-abc"), "{err}");
    assert!(!d.user_config_dir().join("credentials.toml").exists());
    let (ok, doctor, _) = agent_out(&d, &["doctor"]).await;
    assert!(
        doctor.contains("endpoint     https://api.anthropic.com (anthropic"),
        "{ok} {doctor}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_shows_both_and_never_starts_a_daemon() {
    let s = Scenario::new().start().await;
    let (fake, d) = (s.fake, s.daemon);
    let (ok, out, _) = run(autostarting(&d, &fake.base_url()), &["--version"]).await;
    assert!(ok);
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        out.starts_with(&format!(
            "agent {version}\nagentd {version} (pid {})",
            d.pid()
        )),
        "{out}"
    );

    // The socket from AGENTD_SOCKET this time (no --socket flag).
    let nowhere = d.dir.path().join("none/agentd.sock");
    let mut cmd = tokio::process::Command::new(client_bin());
    cmd.env("AGENTD_SOCKET", &nowhere)
        .env("AGENTD_BIN", agent_tests::harness::daemon_bin());
    let out = cmd.arg("--version").output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("daemon: not running\n"), "{text}");
    assert!(!nowhere.exists(), "--version must not start a daemon");
}
