//! Code in replies highlighted by `agent-highlight`, the client's
//! co-process (here `test-agent-highlight`, which the harness gives the
//! client), and shown plain without it.

use agent_tests::fake_llm::Script;
use agent_tests::harness::Scenario;

const REPLY: &str = "```rust\nfn main() {}\n```\n\n```nosuchlang\nx = 1\n```\n";

/// `agent --color always run` against a model that answers [`REPLY`], with
/// `env` added: its stdout.
async fn coloured_run(env: &[(&str, &str)]) -> String {
    let s = Scenario::new().script(Script::text(REPLY)).start().await;
    let mut cmd = tokio::process::Command::from(s.daemon.agent());
    cmd.args(["--color", "always", "run", "--cwd"])
        .arg(s.work.path())
        .arg("show me code");
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = cmd.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\n{}",
        s.daemon.log()
    );
    assert!(!stderr.contains("highlight"), "{stderr}");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coloured_code_is_highlighted_and_unknown_languages_are_not() {
    let out = coloured_run(&[("COLORTERM", "")]).await;
    let lines: Vec<&str> = out.lines().collect();
    let fence = lines.iter().position(|l| *l == "\x1b[2m```rust\x1b[0m");
    let Some(i) = fence else {
        panic!("no rust fence in {out:?}");
    };
    assert!(lines[i + 1].contains("\x1b[38;5;"), "{out:?}");
    assert!(lines[i + 1].contains("fn"), "{out:?}");
    assert_eq!(lines[i + 2], "\x1b[2m```\x1b[0m", "{out:?}");
    assert!(
        out.contains("\x1b[2m```nosuchlang\x1b[0m\nx = 1\n\x1b[2m```\x1b[0m\n"),
        "{out:?}"
    );

    let truecolor = coloured_run(&[("COLORTERM", "truecolor")]).await;
    assert!(truecolor.contains("\x1b[38;2;"), "{truecolor:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_highlighter_code_is_shown_plain() {
    let missing = tempfile::tempdir().unwrap();
    let program = missing.path().join("agent-highlight");
    let out = coloured_run(&[("AGENT_HIGHLIGHT_BIN", &program.display().to_string())]).await;
    assert!(
        out.contains("\x1b[2m```rust\x1b[0m\nfn main() {}\n\x1b[2m```\x1b[0m\n"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_which_highlighter_is_used() {
    let s = Scenario::new().start().await;
    let doctor = |env: Option<&std::path::Path>| {
        let mut cmd = tokio::process::Command::from(s.daemon.agent());
        cmd.arg("doctor");
        if let Some(program) = env {
            cmd.env("AGENT_HIGHLIGHT_BIN", program);
        }
        async move {
            let out = cmd.output().await.unwrap();
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find(|l| l.contains("highlighting"))
                .unwrap_or_else(|| panic!("no highlighting line: {out:?}"))
                .to_string()
        }
    };
    let used = doctor(None).await;
    let program = agent_tests::harness::highlight_bin();
    assert!(used.starts_with("ok   highlighting "), "{used}");
    assert!(used.contains(&program.display().to_string()), "{used}");

    let missing = tempfile::tempdir().unwrap();
    let broken = doctor(Some(&missing.path().join("agent-highlight"))).await;
    assert!(broken.starts_with("FAIL highlighting "), "{broken}");
}
