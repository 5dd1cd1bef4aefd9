//! A running command's output reaches every attached client as it is
//! produced, and `agent run` shows it folded under the call.

use super::util::{Attached, agent_out, tool};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_output_streams_to_agent_run_and_to_a_second_client() {
    // The command waits for the file `go`, so the second client is
    // attached before the lines it must see are printed.
    let command = "echo line-1; while [ ! -f go ]; do sleep 0.05; done; \
                   for i in 2 3 4; do echo line-$i; sleep 0.2; done";
    let s = Scenario::new()
        .scripts([
            tool("b1", "bash", json!({"command": command})),
            Script::Reply(ReplyScript::new().text("done")),
        ])
        .start()
        .await;
    let (d, mut client, work) = (s.daemon, s.client, s.work);
    let run = tokio::process::Command::from(d.agent())
        .args([
            "run",
            "--allow",
            "bash",
            "--cwd",
            &work.path().display().to_string(),
            "count",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    let id = tokio::time::timeout(WAIT, async {
        loop {
            let listed = client
                .list_conversations(pb::ListConversationsRequest::default())
                .await
                .unwrap()
                .into_inner();
            if let Some(c) = listed.conversations.first() {
                return c.id.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("agent run created a conversation");
    let mut b = Attached::open(&mut client, &id, 0, "B").await;
    let first = b.next(WAIT).await;
    assert!(matches!(first.event, Some(Ev::Snapshot(_))), "{first:?}");
    std::fs::write(work.path().join("go"), "").unwrap();

    let frames = b
        .until(WAIT, |m| matches!(m.event, Some(Ev::ToolCallEnd(_))))
        .await;
    let live: String = frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(Ev::ToolOutputDelta(d)) if d.tool_use_id == "b1" => Some(d.text.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        live.ends_with("line-2\nline-3\nline-4\n"),
        "the second client saw the output live: {live:?}"
    );
    let Some(Ev::ToolCallEnd(end)) = &frames.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(end.output_lines, 4);
    assert_eq!(end.output_head, ["line-1", "line-2", "line-3", "line-4"]);

    let out = tokio::time::timeout(WAIT, run.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("  │ line-1\n  │ line-2\n  │ line-3\n  │ line-4\n  ⎿ ok exit code 0"),
        "{stdout}"
    );

    // The transcript has the whole output; nothing live was stored.
    let (ok, shown, err) = agent_out(&d, &["--json", "show", &id]).await;
    assert!(ok, "{err}");
    assert!(shown.contains("line-4"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_commands_output_is_shown_by_agent_run() {
    // The call streams slowly, so `agent run` is attached before it runs
    // (attached later, it would show the transcript's result instead).
    let call = ReplyScript::new()
        .tool_use("b1", "bash", json!({"command": "echo hi"}))
        .pace(Duration::from_millis(150));
    let s = Scenario::new()
        .scripts([
            Script::Reply(call),
            Script::Reply(ReplyScript::new().text("done")),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let (ok, out, err) = agent_out(
        &d,
        &[
            "run",
            "--allow",
            "bash",
            "--cwd",
            &work.path().display().to_string(),
            "say hi",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("⏺ bash: echo hi\n  │ hi\n  ⎿ ok exit code 0"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_show_full_prints_a_long_output_whole() {
    let s = Scenario::new()
        .scripts([
            tool("b1", "bash", json!({"command": "seq 1 60"})),
            Script::Reply(ReplyScript::new().text("counted")),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let cwd = work.path().display().to_string();
    let (ok, run, err) = agent_out(&d, &["run", "--allow", "bash", "--cwd", &cwd, "count"]).await;
    assert!(ok, "{err}");
    // Folded as it ran.
    assert!(run.contains("more lines"), "{run}");
    assert!(!run.contains("│ 30\n"), "{run}");
    let id = err
        .split_whitespace()
        .find(|w| w.len() == 26)
        .unwrap_or_else(|| panic!("no conversation id in {err}"));
    let (ok, full, err) = agent_out(&d, &["show", "--full", id]).await;
    assert!(ok, "{err}");
    for n in 1..=60 {
        assert!(full.contains(&format!("  │ {n}\n")), "{n} missing:\n{full}");
    }
    let (ok, short, err) = agent_out(&d, &["show", id]).await;
    assert!(ok, "{err}");
    assert!(!short.contains("│ 30\n"), "{short}");
}
