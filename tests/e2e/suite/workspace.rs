//! What a conversation works in (issue 18): extra working directories given
//! with `agent run --add-dir`, and project instructions (AGENTS.md).

use super::util::agent_out;
use agent_tests::fake_llm::{Recorded, ReplyScript, Script};
use agent_tests::harness::Scenario;
use serde_json::{Value, json};

/// The tool result for `tool_use_id` in a recorded request.
fn result_of(req: &Recorded, tool_use_id: &str) -> Value {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == tool_use_id)
        .unwrap_or_else(|| panic!("no tool_result for {tool_use_id}: {:#}", req.body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_add_dir_lets_tools_reach_that_directory_and_no_other() {
    let extra = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(extra.path().join("notes.txt"), "extra notes\n").unwrap();
    std::fs::write(elsewhere.path().join("secret.txt"), "secret\n").unwrap();
    let extra_dir = extra.path().canonicalize().unwrap();
    let inside = extra_dir.join("notes.txt").display().to_string();
    let outside = elsewhere
        .path()
        .canonicalize()
        .unwrap()
        .join("secret.txt")
        .display()
        .to_string();
    let s = Scenario::new()
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .tool_use("in", "read", json!({"path": inside}))
                    .tool_use("out", "read", json!({"path": outside})),
            ),
            Script::text("done"),
        ])
        .start()
        .await;
    let (fake, d, work) = (s.fake, s.daemon, s.work);
    let (ok, out, err) = agent_out(
        &d,
        &[
            "run",
            "--cwd",
            &work.path().display().to_string(),
            "--add-dir",
            &extra.path().display().to_string(),
            "read both",
        ],
    )
    .await;
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}\n{}", d.log());
    let second = &fake.requests()[1];
    let read = result_of(second, "in");
    assert_ne!(read["is_error"], true, "{read:#}");
    assert!(
        read["content"].to_string().contains("extra notes"),
        "{read:#}"
    );
    let refused = result_of(second, "out");
    assert_eq!(refused["is_error"], true, "{refused:#}");
    assert!(
        refused["content"]
            .to_string()
            .contains("outside the working directory"),
        "{refused:#}"
    );

    // `agent show` says where the conversation works; an export keeps it.
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("conversation "))
        .unwrap()
        .trim()
        .to_string();
    let (ok, shown, _) = agent_out(&d, &["show", &id]).await;
    assert!(ok);
    assert!(
        shown.contains(&format!("also in {}", extra_dir.display())),
        "{shown}"
    );
    let (ok, exported, _) = agent_out(&d, &["export", &id]).await;
    assert!(ok);
    let line: Value = serde_json::from_str(exported.trim()).unwrap();
    assert_eq!(
        line["conversation"]["additional_dirs"],
        json!([extra_dir.display().to_string()])
    );
    // A directory that does not exist is refused before anything is created.
    let (ok, _, err) = agent_out(&d, &["run", "--add-dir", "/no/such/dir", "hi"]).await;
    assert!(!ok);
    assert!(err.contains("directory /no/such/dir"), "{err}");
}
