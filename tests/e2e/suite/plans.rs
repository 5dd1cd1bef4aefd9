//! Plans (issue 17): plan mode asks the model for a plan and offers it no
//! tool that changes anything; the proposal is an approval request every
//! attached client sees; approve (with a mode), reject with feedback and
//! edit reach the model; the steps' progress is a stream of events, the
//! plan and its statuses survive a kill -9, a step whose dependency
//! failed is skipped, and with `[plan] auto_rollback_on_failure` a failed
//! step's changes are put back.

use super::util::{
    Attached, MUTATING, agent_out, assert_same_files, done, get, git, git_user_state, is_idle,
    is_request, relative_to, request_of, send, tool, tree_files, wait_state,
};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{Gate, Recorded, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};

fn four_steps() -> Value {
    json!({
        "intent": "Refactor the greeting module",
        "risk": "medium",
        "estimated_seconds": 15,
        "steps": [
            {"title": "Read the current code", "kind": "analyze", "files": ["greet.txt"], "estimated_seconds": 2},
            {"title": "Rewrite the greeting", "kind": "edit", "files": ["greet.txt"], "depends_on": ["1"]},
            {"title": "Check the file", "kind": "validate", "depends_on": ["2"]},
            {"title": "Run the tests", "kind": "test", "depends_on": ["2"]}
        ]
    })
}

fn update(id: &str, steps: Value) -> Script {
    tool(id, "update_plan", json!({ "steps": steps }))
}

fn plan_answer(answer: pb::plan_answer::Answer) -> Frame {
    Frame::Answer(pb::AnswerPermissionFrame {
        plan_answer: Some(pb::PlanAnswer {
            answer: Some(answer),
        }),
        ..Default::default()
    })
}

/// The (event, step id) of every step event among `frames`, in order.
fn step_events(frames: &[pb::AttachResponse]) -> Vec<(&'static str, String)> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(Ev::PlanStepStarted(s)) => Some(("started", s.step_id.clone())),
            Some(Ev::PlanStepCompleted(s)) => Some(("completed", s.step_id.clone())),
            Some(Ev::PlanStepFailed(s)) => Some(("failed", s.step_id.clone())),
            Some(Ev::PlanStepSkipped(s)) => Some(("skipped", s.step_id.clone())),
            _ => None,
        })
        .collect()
}

fn statuses(plan: &pb::Plan) -> Vec<String> {
    plan.steps.iter().map(|s| s.status.clone()).collect()
}

fn tool_names(req: &Recorded) -> Vec<String> {
    req.body["tools"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The tool result the model got for `tool_use_id`, searched in every
/// message of a recorded request.
fn result_text(req: &Recorded, tool_use_id: &str) -> (String, bool) {
    for m in req.body["messages"].as_array().unwrap() {
        if let Some(blocks) = m["content"].as_array() {
            for b in blocks {
                if b["type"] == "tool_result" && b["tool_use_id"] == tool_use_id {
                    let text = match &b["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    return (text, b["is_error"] == true);
                }
            }
        }
    }
    panic!("no result for {tool_use_id}")
}

fn in_order(a: &str, b: &str) -> (&'static str, String) {
    let kind = match a {
        "started" => "started",
        "completed" => "completed",
        "failed" => "failed",
        _ => "skipped",
    };
    (kind, b.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_approved_by_one_client_runs_its_steps_and_survives_kill9() {
    let gate = Gate::new();
    let s = Scenario::new()
        .scripts([
            tool("p1", "propose_plan", four_steps()),
            update("u1", json!([{"id": "1", "status": "in_progress"}])),
            Script::Reply(
                ReplyScript::new()
                    .tool_use(
                        "u2",
                        "update_plan",
                        json!({"steps": [{"id": "1", "status": "completed"}, {"id": "2", "status": "in_progress"}]}),
                    )
                    .tool_use(
                        "w1",
                        "write",
                        json!({"path": "greet.txt", "content": "hello, plan\n"}),
                    ),
            ),
            update("u3", json!([{"id": "2", "status": "completed"}])),
            // The daemon is killed while this request is in flight.
            Script::Hang,
            // Re-issued after the restart; held until a client watches.
            Script::Reply(
                ReplyScript::new()
                    .tool_use(
                        "u4",
                        "update_plan",
                        json!({"steps": [{"id": "3", "status": "in_progress"}]}),
                    )
                    .hold_after(0, gate.clone()),
            ),
            update(
                "u5",
                json!([{"id": "3", "status": "completed"}, {"id": "4", "status": "in_progress"}]),
            ),
            update("u6", json!([{"id": "4", "status": "completed"}])),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Plan)
        .start()
        .await;
    let (fake, mut d, mut client, work, id) = (s.fake, s.daemon, s.client, s.work, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    let mut b = Attached::open(&mut client, &id, 0, "B").await;
    send(&mut client, &id, "refactor the greeting module").await;

    // Both clients see the same approval request, with the plan.
    let ra = request_of(a.until(WAIT, is_request).await.last().unwrap());
    let rb = request_of(b.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(ra, rb);
    assert_eq!(ra.tool_name, "propose_plan");
    assert!(
        ra.options.is_empty(),
        "a plan offers no permission decision"
    );
    let plan = ra.plan.clone().expect("the request carries the plan");
    assert_eq!(plan.intent, "Refactor the greeting module");
    assert_eq!(plan.risk, "medium");
    assert_eq!(plan.steps.len(), 4);
    assert_eq!(plan.phase, "proposed");

    // The first request was a planning one: told to plan, nothing mutating.
    let first = &fake.requests()[0];
    assert!(
        first.body["system"]
            .to_string()
            .contains("You are in plan mode"),
        "{}",
        first.body["system"]
    );
    let names = tool_names(first);
    assert!(names.contains(&"propose_plan".to_string()), "{names:?}");
    for mutating in ["bash", "write", "edit", "patch", "kill_shell"] {
        assert!(
            !names.contains(&mutating.to_string()),
            "{mutating} offered: {names:?}"
        );
    }

    // A approves with accept_edits; B sees it resolved, and a late answer
    // of B is refused.
    a.send(plan_answer(pb::plan_answer::Answer::Approve(
        pb::PlanApprove {
            mode: pb::PermissionMode::AcceptEdits as i32,
        },
    )))
    .await;
    let b_frames = b
        .until(WAIT, |m| matches!(m.event, Some(Ev::PlanConfirmed(_))))
        .await;
    assert!(
        b_frames
            .iter()
            .any(|m| matches!(&m.event, Some(Ev::PermissionResolved(r)) if r.client_name == "A"))
    );
    let Some(Ev::PlanConfirmed(c)) = &b_frames.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(c.mode, pb::PermissionMode::AcceptEdits as i32);
    assert!(!c.edited);
    b.send(plan_answer(pb::plan_answer::Answer::Reject(
        pb::PlanReject {
            feedback: "too late".into(),
        },
    )))
    .await;
    let refusal = b
        .until(WAIT, |m| {
            m.seq == 0 && matches!(m.event, Some(Ev::Error(_)))
        })
        .await;
    assert!(
        matches!(&refusal.last().unwrap().event, Some(Ev::Error(e)) if e.message.contains("no permission request"))
    );

    // Steps 1 and 2 run; the daemon is killed while the model is asked
    // what comes next.
    let before = a
        .until(
            WAIT,
            |m| matches!(&m.event, Some(Ev::PlanStepCompleted(s)) if s.step_id == "2"),
        )
        .await;
    assert_eq!(
        step_events(&before),
        [
            in_order("started", "1"),
            in_order("completed", "1"),
            in_order("started", "2"),
            in_order("completed", "2"),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("greet.txt")).unwrap(),
        "hello, plan\n"
    );
    let approved = fake.requests()[1].clone();
    let (text, is_error) = result_text(&approved, "p1");
    assert!(!is_error);
    assert!(
        text.starts_with("The user approved the plan. Permission mode is now accept_edits."),
        "{text}"
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.requests().len() < 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hanging request never came"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(a);
    drop(b);
    d.kill9();
    d.restart().await;
    let mut client = d.client().await;

    // The plan and its statuses are intact.
    let r = get(&mut client, &id).await;
    let plan = r.plan.clone().expect("the plan is stored");
    assert_eq!(plan.phase, "approved");
    assert_eq!(
        statuses(&plan),
        ["completed", "completed", "pending", "pending"]
    );
    assert_eq!(
        r.conversation.as_ref().unwrap().mode,
        pb::PermissionMode::AcceptEdits as i32
    );

    // The turn goes on: steps 3 and 4 start and complete.
    let mut c = Attached::open(&mut client, &id, 0, "C").await;
    let snap = c.next(WAIT).await;
    let Some(Ev::Snapshot(snapshot)) = &snap.event else {
        panic!("{snap:?}")
    };
    assert_eq!(
        statuses(snapshot.plan.as_ref().unwrap())[..2],
        ["completed", "completed"]
    );
    gate.open();
    let after = c.until(WAIT, is_idle).await;
    assert_eq!(
        step_events(&after),
        [
            in_order("started", "3"),
            in_order("completed", "3"),
            in_order("started", "4"),
            in_order("completed", "4"),
        ]
    );
    let r = get(&mut client, &id).await;
    assert_eq!(
        statuses(r.plan.as_ref().unwrap()),
        ["completed", "completed", "completed", "completed"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_dependency_failed_is_skipped() {
    let s = Scenario::new()
        .scripts([
            tool("p1", "propose_plan", four_steps()),
            update("u1", json!([{"id": "1", "status": "in_progress"}])),
            update(
                "u2",
                json!([{"id": "1", "status": "completed"}, {"id": "2", "status": "in_progress"}]),
            ),
            update(
                "u3",
                json!([{"id": "2", "status": "failed", "note": "the file is locked"}]),
            ),
            // The model tries to go on with a step that depends on it.
            update("u4", json!([{"id": "3", "status": "in_progress"}])),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Plan)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "refactor the greeting module").await;
    a.until(WAIT, is_request).await;
    a.send(plan_answer(pb::plan_answer::Answer::Approve(
        pb::PlanApprove {
            mode: pb::PermissionMode::Default as i32,
        },
    )))
    .await;
    let frames = a.until(WAIT, is_idle).await;
    assert_eq!(
        step_events(&frames),
        [
            in_order("started", "1"),
            in_order("completed", "1"),
            in_order("started", "2"),
            in_order("failed", "2"),
            in_order("skipped", "3"),
            in_order("skipped", "4"),
        ]
    );
    let reqs = fake.requests();
    let (text, is_error) = result_text(&reqs[5], "u4");
    assert!(is_error);
    assert!(text.contains("step `3` is already skipped"), "{text}");
    let r = get(&mut client, &id).await;
    let plan = r.plan.unwrap();
    assert_eq!(
        statuses(&plan),
        ["completed", "failed", "skipped", "skipped"]
    );
    assert_eq!(plan.steps[1].note, "the file is locked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejection_feedback_reaches_the_model_and_an_edit_is_what_it_is_told() {
    let revised = json!({
        "intent": "Refactor the greeting module, tests first",
        "risk": "low",
        "steps": [
            {"title": "Write a test for the greeting", "kind": "test"},
            {"title": "Rewrite the greeting", "kind": "edit", "depends_on": ["1"]}
        ]
    });
    let s = Scenario::new()
        .scripts([
            tool("p1", "propose_plan", four_steps()),
            tool("p2", "propose_plan", revised),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Plan)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "refactor the greeting module").await;
    let first = request_of(a.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(first.tool_use_id, "p1");
    a.send(plan_answer(pb::plan_answer::Answer::Reject(
        pb::PlanReject {
            feedback: "write the tests first".into(),
        },
    )))
    .await;
    let frames = a.until(WAIT, is_request).await;
    assert!(frames.iter().any(
        |m| matches!(&m.event, Some(Ev::PlanRejected(r)) if r.feedback == "write the tests first")
    ));
    let second = request_of(frames.last().unwrap());
    assert_eq!(second.tool_use_id, "p2", "a revised plan is proposed");
    let reqs = fake.requests();
    let (text, is_error) = result_text(&reqs[1], "p1");
    assert!(is_error);
    assert!(text.contains("write the tests first"), "{text}");
    // Still planning: the revision was asked for in plan mode.
    assert!(
        reqs[1].body["system"]
            .to_string()
            .contains("You are in plan mode")
    );

    // An edit that is not a plan is refused, to this client, and changes
    // nothing.
    let bad = vec![pb::PlanStep {
        id: "1".into(),
        title: "x".into(),
        kind: "edit".into(),
        dependencies: vec!["9".into()],
        ..Default::default()
    }];
    a.send(plan_answer(pb::plan_answer::Answer::Edit(pb::PlanEdit {
        steps: bad,
        mode: pb::PermissionMode::Default as i32,
    })))
    .await;
    let refusal = a
        .until(WAIT, |m| {
            m.seq == 0 && matches!(m.event, Some(Ev::Error(_)))
        })
        .await;
    assert!(
        matches!(&refusal.last().unwrap().event, Some(Ev::Error(e)) if e.message.contains("not a step listed before it")),
        "{refusal:?}"
    );

    // The user's own list is approved; the model is told exactly that list.
    let edited = vec![
        pb::PlanStep {
            id: "a".into(),
            title: "Write a failing test".into(),
            kind: "test".into(),
            files: vec!["greet_test.txt".into()],
            ..Default::default()
        },
        pb::PlanStep {
            id: "b".into(),
            title: "Make it pass".into(),
            kind: "edit".into(),
            dependencies: vec!["a".into()],
            files: vec!["greet.txt".into()],
            ..Default::default()
        },
    ];
    a.send(plan_answer(pb::plan_answer::Answer::Edit(pb::PlanEdit {
        steps: edited,
        mode: pb::PermissionMode::Default as i32,
    })))
    .await;
    let frames = a.until(WAIT, is_idle).await;
    assert!(
        frames
            .iter()
            .any(|m| matches!(&m.event, Some(Ev::PlanConfirmed(c)) if c.edited))
    );
    let reqs = fake.requests();
    let (text, is_error) = result_text(&reqs[2], "p2");
    assert!(!is_error);
    assert!(
        text.contains(
            "a. [test] Write a failing test {greet_test.txt}\nb. [edit] Make it pass (after a) {greet.txt}\n"
        ),
        "{text}"
    );
    assert!(
        !reqs[2].body["system"]
            .to_string()
            .contains("You are in plan mode")
    );
    let r = get(&mut client, &id).await;
    let plan = r.plan.unwrap();
    assert_eq!(plan.phase, "approved");
    let titles: Vec<&str> = plan.steps.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(titles, ["Write a failing test", "Make it pass"]);
    assert_eq!(
        r.conversation.unwrap().mode,
        pb::PermissionMode::Default as i32
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detect_require_enters_plan_mode_and_the_cli_answers_and_shows_the_plan() {
    let s = Scenario::new()
        .config("[plan]\ndetect = \"require\"\n")
        .scripts([
            tool("p1", "propose_plan", four_steps()),
            update("u1", json!([{"id": "1", "status": "in_progress"}])),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    send(
        &mut client,
        &id,
        "refactor the greeting module and move the helpers to util.rs",
    )
    .await;
    let r = wait_state(&mut client, &id, pb::StateKind::AwaitingPermission).await;
    assert_eq!(
        r.conversation.as_ref().unwrap().mode,
        pb::PermissionMode::Plan as i32,
        "a request that deserves a plan entered plan mode"
    );
    let first = &fake.requests()[0];
    assert!(
        first.body["system"]
            .to_string()
            .contains("You are in plan mode")
    );
    assert!(!tool_names(first).contains(&"write".to_string()));

    let (ok, out, err) = agent_out(&d, &["plan", &id, "approve_edits"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("plan approved (accept_edits)"), "{out}");
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(
        r.conversation.as_ref().unwrap().mode,
        pb::PermissionMode::AcceptEdits as i32
    );
    let (ok, out, err) = agent_out(&d, &["show", &id]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("plan (approved): Refactor the greeting module"),
        "{out}"
    );
    assert!(out.contains("[>] 1. Read the current code"), "{out}");
    assert!(out.contains("[ ] 4. Run the tests"), "{out}");
    let (ok, out, err) = agent_out(&d, &["show", "--json", &id]).await;
    assert!(ok, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["plan"]["steps"][0]["status"], "in_progress");
    assert_eq!(shown["plan"]["steps"][3]["status"], "pending");
    // Nothing is pending now: a second answer is refused.
    let (ok, _, err) = agent_out(&d, &["plan", &id, "reject", "--feedback", "no"]).await;
    assert!(!ok);
    assert!(err.contains("no permission request"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_events_are_replayed_to_a_client_resuming_after_a_restart() {
    let s = Scenario::new()
        .scripts([
            tool("p1", "propose_plan", four_steps()),
            update("u1", json!([{"id": "1", "status": "in_progress"}])),
            update("u2", json!([{"id": "1", "status": "completed"}])),
            done(),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Plan)
        .start()
        .await;
    let (mut d, mut client, id) = (s.daemon, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    a.next(WAIT).await;
    send(&mut client, &id, "refactor the greeting module").await;
    // A resume names the last event it saw: the user's message, stored (a
    // resume from before the first stored event gets a snapshot instead).
    let mut live = a
        .until(WAIT, |m| matches!(m.event, Some(Ev::MessageAppended(_))))
        .await;
    let first_seq = live.last().unwrap().seq;
    // The plan is generated before its approval request is asked.
    live.extend(a.until(WAIT, is_request).await);
    a.send(plan_answer(pb::plan_answer::Answer::Approve(
        pb::PlanApprove {
            mode: pb::PermissionMode::Default as i32,
        },
    )))
    .await;
    live.extend(a.until(WAIT, is_idle).await);
    let plan_events = |frames: &[pb::AttachResponse]| -> Vec<String> {
        frames
            .iter()
            .filter_map(|m| match &m.event {
                Some(Ev::PlanGenerated(_)) => Some("generated".to_string()),
                Some(Ev::PlanConfirmed(_)) => Some("confirmed".to_string()),
                Some(Ev::PlanStepStarted(s)) => Some(format!("started {}", s.step_id)),
                Some(Ev::PlanStepCompleted(s)) => Some(format!("completed {}", s.step_id)),
                _ => None,
            })
            .collect()
    };
    let expected = ["generated", "confirmed", "started 1", "completed 1"];
    assert_eq!(plan_events(&live), expected);
    drop(a);
    d.kill9();
    d.restart().await;
    let mut client = d.client().await;
    let mut b = Attached::open(&mut client, &id, first_seq, "B").await;
    let replayed = b
        .until(
            WAIT,
            |m| matches!(&m.event, Some(Ev::PlanStepCompleted(s)) if s.step_id == "1"),
        )
        .await;
    assert!(
        matches!(replayed[0].event, Some(Ev::Resumed(_))),
        "{:?}",
        replayed[0]
    );
    assert_eq!(plan_events(&replayed), expected);
}

/// A git repository for a plan to change: three committed files, a staged
/// change and an untracked file of the user's.
fn plan_repo(dir: &std::path::Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Test User"]);
    git(dir, &["config", "user.email", "test@example.com"]);
    std::fs::write(dir.join("greet.txt"), "hello\n").unwrap();
    std::fs::write(dir.join("readme.txt"), "The greeting says hello.\n").unwrap();
    std::fs::write(dir.join("log.txt"), "first entry\n").unwrap();
    std::fs::write(dir.join("staged.txt"), "staged v1\n").unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "first"]);
    std::fs::write(dir.join("staged.txt"), "staged v2\n").unwrap();
    git(dir, &["add", "staged.txt"]);
    std::fs::write(dir.join("notes.txt"), "the user's untracked notes\n").unwrap();
}

/// A plan whose first step completes after a `write`, and whose second
/// changes files with `edit`, `write` and a `bash` command (a tracked file
/// changed, two files created, one in a new directory) and then fails; the
/// third depends on the second.
fn failing_plan() -> Vec<Script> {
    vec![
        tool(
            "p1",
            "propose_plan",
            json!({
                "intent": "Change the greeting",
                "risk": "low",
                "steps": [
                    {"title": "Write the new greeting", "kind": "edit", "files": ["greet.txt"]},
                    {"title": "Update the readme and the log", "kind": "edit",
                     "files": ["readme.txt", "log.txt"], "depends_on": ["1"]},
                    {"title": "Run the tests", "kind": "test", "depends_on": ["2"]}
                ]
            }),
        ),
        update("u1", json!([{"id": "1", "status": "in_progress"}])),
        tool(
            "w1",
            "write",
            json!({"path": "greet.txt", "content": "hello, plan\n"}),
        ),
        update(
            "u2",
            json!([{"id": "1", "status": "completed"}, {"id": "2", "status": "in_progress"}]),
        ),
        tool(
            "e1",
            "edit",
            json!({"path": "readme.txt", "old_string": "says hello", "new_string": "says hello, plan"}),
        ),
        tool(
            "w2",
            "write",
            json!({"path": "greet.txt", "content": "hello again\n"}),
        ),
        tool(
            "b1",
            "bash",
            json!({"command": "echo appended by step 2 >> log.txt && echo made > made.txt \
                               && mkdir -p sub && echo deep > sub/new.txt && echo bash ran"}),
        ),
        update(
            "u3",
            json!([{"id": "2", "status": "failed", "note": "the tests fail"}]),
        ),
        done(),
    ]
}

/// What a run of [`failing_plan`] left.
struct FailedStep {
    s: agent_tests::harness::Started<String>,
    /// The frames an attached client saw from its approval to the end of
    /// the turn.
    frames: Vec<pb::AttachResponse>,
    /// The repository before the plan.
    before: std::collections::BTreeMap<String, Vec<u8>>,
    git_before: super::util::GitUserState,
}

/// Runs [`failing_plan`] in a git repository, with `config` added to the
/// daemon's.
async fn run_failing_plan(config: &str) -> FailedStep {
    let mut s = Scenario::new()
        .config(config)
        .scripts(failing_plan())
        .conversation("")
        .allow(MUTATING)
        .mode(pb::PermissionMode::Plan)
        .start()
        .await;
    let dir = s.work.path().to_path_buf();
    plan_repo(&dir);
    let before = tree_files(&dir);
    let git_before = git_user_state(&dir);
    let id = s.id.clone();
    let mut a = Attached::open(&mut s.client, &id, 0, "A").await;
    send(&mut s.client, &id, "change the greeting").await;
    a.until(WAIT, is_request).await;
    a.send(plan_answer(pb::plan_answer::Answer::Approve(
        pb::PlanApprove {
            mode: pb::PermissionMode::Default as i32,
        },
    )))
    .await;
    let frames = a.until(WAIT, is_idle).await;
    assert_eq!(
        step_events(&frames),
        [
            in_order("started", "1"),
            in_order("completed", "1"),
            in_order("started", "2"),
            in_order("failed", "2"),
            in_order("skipped", "3"),
        ]
    );
    // Every call of the step ran and succeeded.
    let reqs = s.fake.requests();
    let last = reqs.last().unwrap();
    for call in ["w1", "e1", "w2", "b1"] {
        let (text, is_error) = result_text(last, call);
        assert!(!is_error, "{call}: {text}");
    }
    assert!(result_text(last, "b1").0.contains("bash ran"));
    FailedStep {
        s,
        frames,
        before,
        git_before,
    }
}

fn code_rewound(frames: &[pb::AttachResponse]) -> Vec<(u64, pb::CodeRewound)> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(Ev::CodeRewound(c)) => Some((m.seq, c.clone())),
            _ => None,
        })
        .collect()
}

fn notices(frames: &[pb::AttachResponse]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(Ev::Notice(n)) => Some(n.message.clone()),
            _ => None,
        })
        .collect()
}

/// Issue 44: with `[plan] auto_rollback_on_failure`, a failed
/// step's changes — by `edit`, `write` and `bash` in a git repository — are
/// put back byte for byte as they were when the step started (what the
/// step before it did stays; what it created is removed), the user's index
/// and refs are untouched, and the client is told by a `code_rewound` event
/// that names the step and a notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_is_rolled_back_when_auto_rollback_is_on() {
    let run = run_failing_plan("[plan]\nauto_rollback_on_failure = true\n").await;
    let dir = run.s.work.path();
    let mut want = run.before.clone();
    want.insert("greet.txt".into(), b"hello, plan\n".to_vec());
    assert_same_files(&tree_files(dir), &want, "after the rollback");
    assert_eq!(git_user_state(dir), run.git_before);

    // The client was told, after the step failed: the files by name.
    let rewound = code_rewound(&run.frames);
    assert_eq!(rewound.len(), 1, "{rewound:?}");
    let (seq, c) = &rewound[0];
    let failed_at = run
        .frames
        .iter()
        .find(|m| matches!(&m.event, Some(Ev::PlanStepFailed(s)) if s.step_id == "2"))
        .unwrap()
        .seq;
    assert!(*seq > failed_at, "the rollback is told after the failure");
    assert_eq!(c.plan_step_id, "2");
    assert_eq!(c.message_seq, 0);
    let names = |paths: &[String]| {
        let mut v: Vec<String> = paths.iter().map(|p| relative_to(dir, p)).collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&c.restored),
        ["greet.txt", "log.txt", "readme.txt"],
        "{c:?}"
    );
    assert_eq!(names(&c.removed), ["made.txt", "sub/new.txt"], "{c:?}");
    assert!(c.skipped.is_empty(), "{c:?}");
    assert_eq!(c.untracked_commands, 0);
    let told = notices(&run.frames);
    assert!(
        told.iter()
            .any(|n| n.contains("plan step 2 failed")
                && n.contains("3 file(s) restored and 2 removed")),
        "{told:?}"
    );
}

/// The same failed step with the option off (the default): nothing is
/// rolled back and nothing says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_is_left_as_it_is_when_auto_rollback_is_off() {
    let mut run = run_failing_plan("").await;
    let dir = run.s.work.path().to_path_buf();
    let mut want = run.before.clone();
    want.insert("greet.txt".into(), b"hello again\n".to_vec());
    want.insert(
        "readme.txt".into(),
        b"The greeting says hello, plan.\n".to_vec(),
    );
    want.insert(
        "log.txt".into(),
        b"first entry\nappended by step 2\n".to_vec(),
    );
    want.insert("made.txt".into(), b"made\n".to_vec());
    want.insert("sub/new.txt".into(), b"deep\n".to_vec());
    assert_same_files(&tree_files(&dir), &want, "after the failed step");
    assert_eq!(git_user_state(&dir), run.git_before);
    assert!(code_rewound(&run.frames).is_empty());
    let told = notices(&run.frames);
    assert!(!told.iter().any(|n| n.contains("plan step")), "{told:?}");
    // The turn's checkpoints are all still there for a rewind.
    let id = run.s.id.clone();
    let r = get(&mut run.s.client, &id).await;
    assert_eq!(r.checkpoints.len(), 1, "{:?}", r.checkpoints);
    assert_eq!(r.checkpoints[0].message_seq, 1);
}
