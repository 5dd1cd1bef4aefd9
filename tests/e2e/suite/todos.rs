//! The todo list (issue 42 point 4): `update_plan` in default mode with no
//! plan keeps the model's checklist; every client sees it, it survives a
//! kill -9 (replayed to a client that resumes, in the snapshot of a new
//! one), the terminal shows it as a panel at 80 columns, `--json` and ACP
//! carry it, and a busy turn without a list is reminded once.

use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{Gate, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};

use super::util::{Attached, done, get, is_idle, result_of, send, tool, wait_state};

fn todo(id: &str, items: &[(&str, &str)]) -> Script {
    tool(id, "update_plan", todo_input(items))
}

fn todo_input(items: &[(&str, &str)]) -> Value {
    json!({"steps": items
        .iter()
        .map(|(title, status)| json!({"title": title, "status": status}))
        .collect::<Vec<_>>()})
}

fn items(plan: &pb::Plan) -> Vec<(String, String)> {
    plan.steps
        .iter()
        .map(|s| (s.title.clone(), s.status.clone()))
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(t, s)| (t.to_string(), s.to_string()))
        .collect()
}

const FIRST: &[(&str, &str)] = &[
    ("Read the parser", "in_progress"),
    ("Fix the off-by-one", "pending"),
    ("Run the tests", "pending"),
];
const SECOND: &[(&str, &str)] = &[
    ("Read the parser", "completed"),
    ("Fix the off-by-one", "in_progress"),
    ("Run the tests", "pending"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_todo_list_in_default_mode_is_stored_and_replayed_after_kill9() {
    let gate = Gate::new();
    let s = Scenario::new()
        .scripts([
            todo("t1", FIRST),
            todo("t2", SECOND),
            // The daemon is killed while this reply is held.
            Script::Reply(
                ReplyScript::new()
                    .text("working")
                    .hold_after(0, gate.clone()),
            ),
            Script::text("after the restart"),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "fix the parser").await;
    let frames = a
        .until(WAIT, |m| {
            matches!(&m.event, Some(Ev::TodoUpdated(t)) if t.plan.as_ref().is_some_and(|p| items(p) == pairs(SECOND)))
        })
        .await;
    let lists: Vec<&pb::Plan> = frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(Ev::TodoUpdated(t)) => t.plan.as_ref(),
            _ => None,
        })
        .collect();
    assert_eq!(lists.len(), 2, "{frames:#?}");
    assert_eq!(items(lists[0]), pairs(FIRST));
    assert!(lists.iter().all(|p| p.phase == "todo"));
    // No approval was asked: the conversation stayed in default mode.
    assert!(
        !frames
            .iter()
            .any(|m| matches!(m.event, Some(Ev::PermissionRequested(_))))
    );
    // The seq of the first list: a client that saw up to it resumes there.
    let first_seq = frames
        .iter()
        .find(|m| matches!(m.event, Some(Ev::TodoUpdated(_))))
        .unwrap()
        .seq;
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.requests().len() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "no third request");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let reqs = fake.requests();
    let first_result = result_of(&reqs[1], "t1");
    assert_eq!(
        first_result["content"].as_str().unwrap_or_default(),
        "Todo list updated.\n[>] 1. Read the parser\n[ ] 2. Fix the off-by-one\n[ ] 3. Run the tests\n",
        "{first_result}"
    );
    drop(a);
    d.kill9();
    d.restart().await;
    let mut client = d.client().await;

    // Stored with the conversation.
    let r = get(&mut client, &id).await;
    let plan = r.plan.expect("the list is stored");
    assert_eq!(plan.phase, "todo");
    assert_eq!(items(&plan), pairs(SECOND));

    // A client that resumes gets the later list replayed from the store.
    let mut b = Attached::open(&mut client, &id, first_seq, "B").await;
    let replayed = b
        .until(WAIT, |m| matches!(m.event, Some(Ev::TodoUpdated(_))))
        .await;
    let Some(Ev::TodoUpdated(t)) = &replayed.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(items(t.plan.as_ref().unwrap()), pairs(SECOND));

    // A new client sees the current list in its snapshot.
    let mut c = Attached::open(&mut client, &id, 0, "C").await;
    let snap = c.next(WAIT).await;
    let Some(Ev::Snapshot(snapshot)) = &snap.event else {
        panic!("{snap:?}")
    };
    assert_eq!(items(snapshot.plan.as_ref().unwrap()), pairs(SECOND));
    gate.open();
    // The turn goes on after the restart, and ends.
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(items(&r.plan.unwrap()), pairs(SECOND));
    assert_eq!(fake.requests().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_turn_without_a_list_is_reminded_once() {
    let reads = |prefix: &str| {
        let mut reply = ReplyScript::new();
        for i in 0..5 {
            reply = reply.tool_use(
                &format!("{prefix}{i}"),
                "read",
                json!({"path": format!("{prefix}{i}.txt")}),
            );
        }
        Script::Reply(reply)
    };
    let s = Scenario::new()
        .scripts([reads("a"), reads("b"), reads("c"), done()])
        .config("[plan]\ntodo_reminder_after = 8\n")
        .conversation("")
        .start()
        .await;
    for prefix in ["a", "b", "c"] {
        for i in 0..5 {
            std::fs::write(s.work.path().join(format!("{prefix}{i}.txt")), "notes\n").unwrap();
        }
    }
    let mut client = s.client;
    let mut a = Attached::open(&mut client, &s.id, 0, "A").await;
    send(&mut client, &s.id, "look around").await;
    a.until(WAIT, is_idle).await;
    let reqs = s.fake.requests();
    assert_eq!(reqs.len(), 4);
    let reminded: Vec<bool> = reqs[1..]
        .iter()
        .map(|r| {
            super::util::last_content(&r.body).iter().any(|b| {
                b["type"] == "text"
                    && b["text"].as_str().unwrap_or_default().starts_with(
                        "[REMINDER: This turn has made many tool calls and there is no todo list.]",
                    )
            })
        })
        .collect();
    // 5 calls, then 10 (reminded), then 15 (not again).
    assert_eq!(reminded, [false, true, false]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_shows_the_list_as_a_panel_at_80_columns() {
    use agent_tests::pty::PtySession;
    let long = "Fix the off-by-one in the tokenizer that drops the last character of every quoted string it reads";
    let gate = Gate::new();
    let s = Scenario::new()
        .scripts([
            todo(
                "t1",
                &[("Read the parser", "in_progress"), (long, "pending")],
            ),
            todo(
                "t2",
                &[("Read the parser", "completed"), (long, "in_progress")],
            ),
            Script::Reply(
                ReplyScript::new()
                    .text("Done for now.")
                    .hold_after(0, gate.clone()),
            ),
        ])
        .start()
        .await;
    let mut cmd = s.daemon.agent();
    cmd.args([
        "--color",
        "always",
        "run",
        "--cwd",
        &s.work.path().display().to_string(),
        "fix the parser",
    ]);
    let term = PtySession::spawn(cmd, 80, 24).unwrap();
    let (term, status, during) = tokio::task::spawn_blocking(move || {
        // While the model works, the spinner line names the item in
        // progress, updated in place.
        term.wait_for("◐ Fix the off-by-one", WAIT).unwrap();
        let during = term.contents_with_scrollback();
        gate.open();
        term.wait_for("Done for now.", WAIT).unwrap();
        let status = term.wait_exit(WAIT).unwrap();
        (term, status, during)
    })
    .await
    .unwrap();
    assert!(status.success(), "{}", term.dump());
    // No raw JSON line per update, and no panel yet while the turn runs.
    assert!(!during.contains("update_plan"), "{during}");
    assert!(!during.contains("Todo list ·"), "{during}");
    let screen = term.contents_with_scrollback();
    // The panel once, as the list stands at the end, wrapped at a word
    // with a hanging indent.
    assert_eq!(screen.matches("Todo list ·").count(), 1, "{}", term.dump());
    assert!(
        screen.contains(
            "Todo list · 1/2 done\n  ☒ Read the parser\n  ◐ Fix the off-by-one in the tokenizer that drops the last character of every\n    quoted string it reads"
        ),
        "{}",
        term.dump()
    );
    assert!(
        screen.lines().all(|l| l.chars().count() <= 80),
        "{}",
        term.dump()
    );
    assert!(
        !screen.contains("\"status\""),
        "no raw JSON: {}",
        term.dump()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_and_json_output_carry_the_list() {
    let s = Scenario::new()
        .scripts([
            todo("t1", FIRST),
            todo("t2", SECOND),
            Script::text("ok"),
            todo("t3", FIRST),
            Script::text("ok again"),
        ])
        .start()
        .await;
    let cwd = s.work.path().display().to_string();
    let (ok, out, err) =
        super::util::agent_out(&s.daemon, &["run", "--cwd", &cwd, "fix the parser"]).await;
    assert!(ok, "{err}");
    // Piped: the list once, as it stood at the end of the turn.
    assert_eq!(out.matches("Todo list ·").count(), 1, "{out}");
    assert!(
        out.contains(
            "Todo list · 1/3 done\n  ☒ Read the parser\n  ◐ Fix the off-by-one\n  ☐ Run the tests\n"
        ),
        "{out}"
    );
    let (ok, out, err) =
        super::util::agent_out(&s.daemon, &["--json", "run", "--cwd", &cwd, "again"]).await;
    assert!(ok, "{err}");
    let updates: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "todo_updated")
        .collect();
    assert_eq!(updates.len(), 1, "{out}");
    let plan = &updates[0]["todo_updated"]["plan"];
    assert_eq!(plan["phase"], "todo", "{out}");
    assert_eq!(plan["steps"][0]["title"], "Read the parser");
    assert_eq!(plan["steps"][0]["status"], "in_progress");
}
