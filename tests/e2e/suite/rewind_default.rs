//! `agent rewind ID` with no `--to` (issue 43 point 7): the code goes back
//! to the last turn that changed files, not to a last message that changed
//! nothing; with no such turn it says so, changes nothing and exits 1; and
//! `agent show` prints the numbers `--to` takes.

use super::util::{MUTATING, agent_out, create, create_with, listed, send, tool, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, TestDaemon};
use serde_json::json;

const NOTHING: &str = "nothing to rewind: no turn of this conversation changed files";

/// `agent ARGS`: its exit status, stdout and stderr.
async fn agent_status(d: &TestDaemon, args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::from(d.agent())
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The number `agent show` prints before the user message `text`.
fn number_of(show: &str, text: &str) -> String {
    let line = show
        .lines()
        .find(|l| l.ends_with(&format!(" > {text}")))
        .unwrap_or_else(|| panic!("no line for {text:?} in {show}"));
    let number = line.split(' ').next().unwrap();
    number.strip_prefix('#').unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_without_to_goes_back_to_the_last_turn_that_changed_files() {
    let s = Scenario::new()
        .scripts([
            // Message 1: a change; message 5: another; message 9: talk only.
            tool(
                "w1",
                "write",
                json!({"path": "f.txt", "content": "first\n"}),
            ),
            Script::text("wrote it"),
            tool(
                "w2",
                "write",
                json!({"path": "f.txt", "content": "second\n"}),
            ),
            Script::text("wrote it again"),
            Script::text("just words"),
            // The other conversation: words only.
            Script::text("hello"),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let mut client = s.client;
    let dir = work.path().canonicalize().unwrap();
    let file = dir.join("f.txt");
    std::fs::write(&file, "original\n").unwrap();
    let id = create_with(
        &mut client,
        &dir,
        "make the change",
        MUTATING,
        pb::PermissionMode::Unspecified,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    for text in ["change it again", "just talk"] {
        send(&mut client, &id, text).await;
        wait_state(&mut client, &id, pb::StateKind::Idle).await;
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "second\n");

    // `agent show` numbers each message the person sent, and only those.
    let (ok, show, err) = agent_out(&d, &["show", &id]).await;
    assert!(ok, "{err}");
    assert_eq!(number_of(&show, "make the change"), "1", "{show}");
    assert_eq!(number_of(&show, "change it again"), "5", "{show}");
    assert_eq!(number_of(&show, "just talk"), "9", "{show}");
    assert_eq!(show.matches(" > ").count(), 3, "{show}");

    // The last turn changed nothing: the rewind goes back past it, to the
    // turn of message 5, and says what it restored.
    let (ok, out, err) = agent_out(&d, &["rewind", &id]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("code rewound to before message 5: 1 restored, 0 removed"),
        "{out}"
    );
    assert!(
        out.contains(&format!("restored {}", file.display())),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "first\n");

    // `--to` with the number `agent show` printed rewinds that turn.
    let to = number_of(&show, "make the change");
    let (ok, out, err) = agent_out(&d, &["rewind", &id, "--to", &to]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("code rewound to before message 1: 1 restored, 0 removed"),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "original\n");

    // Those checkpoints are used up: nothing is left to rewind.
    let (code, out, err) = agent_status(&d, &["rewind", &id, "--both"]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains(NOTHING), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "original\n");

    // A conversation that never changed a file: the same, and nothing
    // forked; `--conversation` alone still forks before its last message.
    let other = create(&mut client, &dir, "say hello").await;
    wait_state(&mut client, &other, pb::StateKind::Idle).await;
    let before = listed(&mut client).await.len();
    let (code, out, err) = agent_status(&d, &["rewind", &other]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains(NOTHING), "{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(listed(&mut client).await.len(), before);
    let (ok, out, err) = agent_out(&d, &["--json", "rewind", &other, "--conversation"]).await;
    assert!(ok, "{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["message_seq"], 1, "{answer}");
    assert!(answer["forked"]["id"].is_string(), "{answer}");
}
