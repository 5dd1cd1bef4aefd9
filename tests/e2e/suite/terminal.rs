//! The `agent` client in a pseudo-terminal, as a person runs it: what it
//! draws is read off the screen of a terminal emulator
//! ([`agent_tests::pty`]), never from raw bytes.

use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, WAIT};
use agent_tests::pty::PtySession;

const REPLY: &str = "Hello from the fake model, on a real terminal.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_shows_the_reply_on_an_80x24_terminal() {
    let s = Scenario::new().script(Script::text(REPLY)).start().await;
    let mut cmd = s.daemon.agent();
    cmd.args([
        "run",
        "--cwd",
        &s.work.path().display().to_string(),
        "hello",
    ]);
    let term = PtySession::spawn(cmd, 80, 24).unwrap();
    // The waits block: off the runtime, which serves the fake model.
    let (term, status) = tokio::task::spawn_blocking(move || {
        term.wait_for(REPLY, WAIT).unwrap();
        let status = term.wait_exit(WAIT).unwrap();
        (term, status)
    })
    .await
    .unwrap();
    assert!(
        status.success(),
        "agent run: {status}\n{}\nDaemon log:\n{}",
        term.dump(),
        s.daemon.log()
    );
    assert!(term.screen().contains(REPLY), "{}", term.dump());
    assert_eq!(s.fake.requests().len(), 1);
}
