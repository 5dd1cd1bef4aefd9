//! What a conversation works in (issue 18): extra working directories given
//! with `agent run --add-dir`, and project instructions (AGENTS.md).

use super::util::result_of;
use super::util::{Attached, agent_out, create, create_with, is_idle, send, tool};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{Recorded, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};

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

/// The `system` field of a recorded request, as the model got it.
fn system_of(req: &Recorded) -> String {
    match &req.body["system"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        other => panic!("no system prompt: {other:#}"),
    }
}

fn instructions_events(frames: &[pb::AttachResponse]) -> Vec<pb::Instructions> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(Ev::InstructionsLoaded(i)) => Some(i.clone()),
            _ => None,
        })
        .collect()
}

fn paths(i: &pb::Instructions) -> Vec<String> {
    i.files.iter().map(|f| f.path.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_agents_md_files_reach_the_model_in_order_and_edits_take_effect_next_turn() {
    let s = Scenario::new()
        .scripts([
            // Turn 1: a tool round, during which the model edits a file.
            tool(
                "w",
                "bash",
                json!({"command": "echo 'mid-turn edit' >> AGENTS.md"}),
            ),
            Script::text("one"),
            Script::text("two"),
            Script::text("three"),
        ])
        .start()
        .await;
    let (fake, d, mut client, work) = (s.fake, s.daemon, s.client, s.work);
    let repo = work.path().canonicalize().unwrap();
    std::fs::create_dir(repo.join(".git")).unwrap();
    let sub = repo.join("crates/app");
    std::fs::create_dir_all(&sub).unwrap();
    let user = d.user_config_dir();
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("AGENTS.md"), "USER: answer in English.\n").unwrap();
    std::fs::write(repo.join("AGENTS.md"), "ROOT: run cargo test.\n").unwrap();
    std::fs::write(repo.join("crates/CLAUDE.md"), "MIDDLE: claude file.\n").unwrap();
    std::fs::write(sub.join("AGENTS.md"), "LEAF: use tabs.\n").unwrap();
    let expected = vec![
        user.join("AGENTS.md").display().to_string(),
        repo.join("AGENTS.md").display().to_string(),
        repo.join("crates/CLAUDE.md").display().to_string(),
        sub.join("AGENTS.md").display().to_string(),
    ];
    let id = create_with(
        &mut client,
        &sub,
        "",
        &["bash"],
        pb::PermissionMode::Unspecified,
    )
    .await;
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;

    // Turn 1: all four, in order; the edit made during the turn does not
    // change the system prompt within it.
    send(&mut client, &id, "first").await;
    let turn1 = watcher.until(WAIT, is_idle).await;
    let loaded = instructions_events(&turn1);
    assert_eq!(loaded.len(), 1, "{turn1:?}");
    assert_eq!(paths(&loaded[0]), expected);
    let reqs = fake.requests();
    let system = system_of(&reqs[0]);
    let at: Vec<usize> = ["USER:", "ROOT:", "MIDDLE:", "LEAF:"]
        .iter()
        .map(|m| {
            system
                .find(m)
                .unwrap_or_else(|| panic!("{m} missing: {system}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{system}");
    assert_eq!(system_of(&reqs[1]), system, "stable within a turn");
    assert!(!system.contains("mid-turn edit"));

    // Turn 2: the edit is read, and said.
    send(&mut client, &id, "second").await;
    let turn2 = watcher.until(WAIT, is_idle).await;
    assert_eq!(instructions_events(&turn2).len(), 1, "{turn2:?}");
    let system2 = system_of(&fake.requests()[2]);
    assert!(system2.contains("mid-turn edit"), "{system2}");

    // Turn 3: nothing changed: the same bytes, no event.
    send(&mut client, &id, "third").await;
    let turn3 = watcher.until(WAIT, is_idle).await;
    assert!(instructions_events(&turn3).is_empty(), "{turn3:?}");
    assert_eq!(
        fake.requests()[3].body["system"],
        fake.requests()[2].body["system"]
    );

    // `agent show --context` lists them.
    let (ok, out, err) = agent_out(&d, &["show", "--context", &id]).await;
    assert!(ok, "{err}");
    let listed: Vec<&str> = out
        .lines()
        .map(|l| l.split("  ").next().unwrap_or(""))
        .collect();
    assert_eq!(listed, expected, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instructions_over_the_limit_are_cut_with_a_note() {
    let s = Scenario::new()
        .config("[instructions]\nmax_bytes = 100")
        .script(Script::text("ok"))
        .start()
        .await;
    let (fake, mut client, work) = (s.fake, s.client, s.work);
    std::fs::write(
        work.path().join("AGENTS.md"),
        format!("KEEP{}", "z".repeat(500)),
    )
    .unwrap();
    let id = create(&mut client, work.path(), "").await;
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "go").await;
    let frames = watcher.until(WAIT, is_idle).await;
    let loaded = instructions_events(&frames);
    assert!(loaded[0].truncated, "{loaded:?}");
    assert_eq!(loaded[0].files[0].bytes, 504);
    let system = system_of(&fake.requests()[0]);
    assert!(
        system.contains(&format!("KEEP{}", "z".repeat(96))),
        "{system}"
    );
    assert!(!system.contains(&"z".repeat(97)), "{system}");
    assert!(
        system.ends_with("[Instructions truncated: 100 of 504 bytes shown (the limit is `max_bytes` in the [instructions] section of agentd's config).]"),
        "{system}"
    );
}
