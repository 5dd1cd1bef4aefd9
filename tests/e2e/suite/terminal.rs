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

/// The content blocks of the last message of a recorded request.
fn last_blocks(req: &agent_tests::fake_llm::Recorded) -> Vec<serde_json::Value> {
    req.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .cloned()
        .unwrap_or_default()
}

/// `agent` alone, as a person uses it all day, at one terminal size: type
/// a prompt, watch the spinner while the model thinks, read the reply as
/// rendered markdown, answer a bash permission with one key and see the
/// command's output, type a second message while the command runs and see
/// it reach the model after the tool result, cancel a turn with Ctrl-C,
/// leave with Ctrl-D, and come back with `agent -c`.
async fn interactive_session_at(cols: u16, rows: u16) {
    use agent_tests::fake_llm::{Gate, ReplyScript};
    let thinking = Gate::new();
    let stuck = Gate::new();
    let s = Scenario::new()
        .scripts([
            // Turn 1: held before its first event, so the spinner shows.
            Script::Reply(
                ReplyScript::new()
                    .text("# Findings\n\nThe **answer** is below:\n\n- first item\n- second item\n")
                    .hold_after(0, thinking.clone()),
            ),
            // Turn 2: a bash call that asks, runs for a while, and prints.
            Script::Reply(ReplyScript::new().tool_use(
                "b1",
                "bash",
                serde_json::json!({
                    "command": "printf 'out-%s\\n' 1; sleep 3; printf 'out-%s\\n' 2",
                    "description": "print two lines, slowly"
                }),
            )),
            Script::text("Both lines are there."),
            // Turn 3: never answers until cancelled.
            Script::Reply(
                ReplyScript::new()
                    .text("never")
                    .hold_after(0, stuck.clone()),
            ),
            // After `agent -c`: a prompt file's message.
            Script::text("Hello, team."),
        ])
        .start()
        .await;
    let mut cmd = s.daemon.agent();
    cmd.args(["--color", "always"]);
    let term = PtySession::spawn(cmd, cols, rows).unwrap();
    let fake = s.fake.clone();
    let term = tokio::task::spawn_blocking(move || {
        term.wait_for("/help for commands", WAIT).unwrap();
        term.send("what is there?").unwrap();
        term.enter().unwrap();
        term.wait_for("thinking", WAIT).unwrap();
        thinking.open();
        term.wait_for("second item", WAIT).unwrap();
        // Markdown is rendered: no `#` heading marker, no `**`, bullets.
        let text = term.contents_with_scrollback();
        assert!(
            text.contains("Findings") && !text.contains("# Findings"),
            "{}",
            term.dump()
        );
        assert!(!text.contains("**answer**"), "{}", term.dump());
        assert!(text.contains("• first item"), "{}", term.dump());

        // Turn 2: one key answers the permission request.
        term.send("run it").unwrap();
        term.enter().unwrap();
        term.wait_for("allow?", WAIT).unwrap();
        // The request shows the model's description of the command.
        term.wait_for("print two lines, slowly", WAIT).unwrap();
        // The answer and the next message typed at once (one read): the
        // keys after the answer are not lost, and the message is queued
        // while the command runs.
        term.send("yalso check the tests").unwrap();
        term.enter().unwrap();
        term.wait_for("allow once (you)", WAIT).unwrap();
        term.wait_for("queued", WAIT).unwrap();
        // The command's output is shown, not just its exit code.
        term.wait_for("out-1", WAIT).unwrap();
        term.wait_for("out-2", WAIT).unwrap();
        term.wait_for("Both lines are there.", WAIT).unwrap();
        term
    })
    .await
    .unwrap();
    // The queued message reached the model once, right after the tool result.
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "{}", term.dump());
    let blocks = last_blocks(&requests[2]);
    assert_eq!(blocks[0]["type"], "tool_result", "{blocks:?}");
    assert!(
        blocks[1..].iter().any(|b| b["text"]
            .as_str()
            .is_some_and(|t| t.contains("also check the tests"))),
        "{blocks:?}"
    );

    let term = tokio::task::spawn_blocking(move || {
        // Turn 3: Ctrl-C cancels it.
        term.send("one more thing").unwrap();
        term.enter().unwrap();
        // The spinner of this turn, on the input line now (not an old one).
        term.wait_until("the spinner", WAIT, |screen| {
            screen
                .contents()
                .lines()
                .any(|l| l.contains("thinking") && l.contains("Ctrl-C cancels"))
        })
        .unwrap();
        term.ctrl_c().unwrap();
        term.wait_for("cancelling the turn", WAIT).unwrap();
        // The turn ends: the prompt (the last line) is idle again.
        term.wait_until("an idle prompt", WAIT, |screen| {
            screen
                .contents()
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .is_some_and(|l| l.starts_with('›') && !l.contains("Ctrl-C cancels"))
        })
        .unwrap();
        // Ctrl-D leaves; the conversation stays.
        term.ctrl_d().unwrap();
        let status = term.wait_exit(WAIT).unwrap();
        assert!(status.success(), "{status}\n{}", term.dump());
        assert!(
            term.contents_with_scrollback().contains("agent -c"),
            "{}",
            term.dump()
        );
        term
    })
    .await
    .unwrap();
    stuck.open();
    drop(term);

    // `agent -c` continues the newest conversation of this directory.
    let commands = s.daemon.work_dir.join(".agentd/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(commands.join("greet.md"), "Say hello to $ARGUMENTS.\n").unwrap();
    let mut cmd = s.daemon.agent();
    cmd.arg("-c");
    let again = PtySession::spawn(cmd, cols, rows).unwrap();
    tokio::task::spawn_blocking(move || {
        again.wait_for("Both lines are there.", WAIT).unwrap();
        again.wait_for("conversation ", WAIT).unwrap();
        // Ctrl-O shows the last tool result whole.
        again.send_bytes(b"\x0f").unwrap();
        again.wait_for("— the whole result (", WAIT).unwrap();
        // Shift-Tab switches to the next mode, `/mode` and `/model` change
        // the conversation; the line saying so comes from the daemon's
        // event, and the status line follows.
        again.send_bytes(b"\x1b[Z").unwrap();
        again.wait_for("· mode accept_edits · model", WAIT).unwrap();
        again.send("/mode plan").unwrap();
        again.enter().unwrap();
        again.wait_for("· mode plan · model", WAIT).unwrap();
        again.send("/mode accept-edits").unwrap();
        again.enter().unwrap();
        again
            .wait_until("accept_edits set again", WAIT, |screen| {
                let contents = screen.contents();
                let last = contents.lines().rfind(|l| l.contains("· mode "));
                last.is_some_and(|l| l.contains("· mode accept_edits · model"))
            })
            .unwrap();
        again.send("/model claude-other-2").unwrap();
        again.enter().unwrap();
        again
            .wait_for("· mode accept_edits · model claude-other-2", WAIT)
            .unwrap();
        again.send("/add-dir /tmp").unwrap();
        again.enter().unwrap();
        again.wait_for("· also in /tmp", WAIT).unwrap();
        again.send("/mode").unwrap();
        again.enter().unwrap();
        again.wait_for("mode: accept_edits;", WAIT).unwrap();
        again.send("/mode yolo").unwrap();
        again.enter().unwrap();
        again.wait_for("unknown mode \"yolo\"", WAIT).unwrap();
        // Tab completes a command.
        again.send("/exp").unwrap();
        again.send_bytes(b"\t").unwrap();
        again.wait_for("› /expand", WAIT).unwrap();
        again.send_bytes(b"\x15").unwrap();
        // `# …` is noted in AGENTS.md; a prompt file is a command.
        again.send("# keep replies short").unwrap();
        again.enter().unwrap();
        again.wait_for("noted in", WAIT).unwrap();
        again.send("/greet the team").unwrap();
        again.enter().unwrap();
        again.wait_for("Hello, team.", WAIT).unwrap();
        // `/clear` says what it did.
        again.send("/clear").unwrap();
        again.enter().unwrap();
        again
            .wait_for("New conversation: your next message starts it.", WAIT)
            .unwrap();
        again
            .wait_for("(the last one stays: `agent attach ", WAIT)
            .unwrap();
        again.ctrl_d().unwrap();
        assert!(again.wait_exit(WAIT).unwrap().success(), "{}", again.dump());
    })
    .await
    .unwrap();
    let agents_md = std::fs::read_to_string(s.daemon.work_dir.join("AGENTS.md")).unwrap();
    assert_eq!(agents_md, "- keep replies short\n");
    let last = fake.requests().pop().unwrap();
    assert!(
        last_blocks(&last)
            .iter()
            .any(|b| b["text"] == "Say hello to the team."),
        "{:#}",
        last.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_session_at_80x24() {
    interactive_session_at(80, 24).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_session_at_160x45() {
    interactive_session_at(160, 45).await;
}
