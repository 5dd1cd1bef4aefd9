//! Sub-agents (issue 16): a parent's `spawn_agents` call runs child
//! conversations concurrently, each scripted on its own by the fake LLM (a
//! marker in its prompt routes its requests), and their results come back
//! to the parent's tool_result in the order asked, each with the child's id.

use super::util::{
    assert_valid_chain, get, offered, requests_of, result_of, result_text, wait_state,
};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{Recorded, ReplyScript, Script};
use agent_tests::harness::Scenario;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The parent's reply that asks for one agent per prompt.
fn spawn(id: &str, prompts: &[&str]) -> Script {
    let agents: Vec<Value> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| json!({"description": format!("task {}", i + 1), "prompt": p}))
        .collect();
    Script::Reply(ReplyScript::new().tool_use(id, "spawn_agents", json!({ "agents": agents })))
}

fn submit(result: &str) -> Script {
    Script::Reply(ReplyScript::new().tool_use(
        "s1",
        "submit_result",
        json!({"result": result, "success": true}),
    ))
}

/// The parent spawns three children; each runs a tool round (a slow reply
/// first) and submits its result. The parent's next request carries the
/// three results in order with the children's ids; the children ran at
/// the same time; `agent ls` shows them under their parent.
#[tokio::test]
async fn three_children_run_concurrently_and_report_in_order() {
    let s = Scenario::new()
        .scripts([
            spawn(
                "toolu_spawn",
                &["[child-1] count", "[child-2] list", "[child-3] read"],
            ),
            Script::text("All three reported."),
        ])
        .conversation("Split the work [parent]")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake.clone(), s.client.clone(), s.id.clone());
    std::fs::write(s.work.path().join("a.txt"), "alpha\n").unwrap();
    // Each child's first reply takes about PACE × its events to stream.
    const PACE: Duration = Duration::from_millis(150);
    for k in 1..=3 {
        let marker = format!("[child-{k}]");
        fake.push_for(
            &marker,
            Script::Reply(
                ReplyScript::new()
                    .tool_use("r1", "read", json!({"path": "a.txt"}))
                    .pace(PACE),
            ),
        );
        fake.push_for(&marker, submit(&format!("result {k}")));
    }
    let started = Instant::now();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let elapsed = started.elapsed();

    let all = fake.requests();
    let parent = requests_of(&all, "[parent]");
    assert_eq!(parent.len(), 2, "the parent asked twice");
    assert_valid_chain(&parent[1]);
    let text = result_text(&result_of(&parent[1], "toolu_spawn"));
    assert!(
        text.starts_with("synthesis_toolu_spawn: 3 sub-agent(s) ended, 3 succeeded"),
        "{text}"
    );
    // In the order asked, each with its conversation's id and result.
    let list = super::util::listed(&mut client).await;
    let mut last = 0;
    let mut child_ids = Vec::new();
    for k in 1..=3 {
        let agent = format!("agent_{k}_toolu_spawn");
        let child = list
            .iter()
            .find(|c| c.agent_id == agent)
            .unwrap_or_else(|| panic!("no child {agent}: {list:#?}"));
        assert_eq!(child.sub_agent_parent_id, id);
        assert!(!child.user_initiated);
        assert_eq!(child.cwd, s.work.path().display().to_string());
        let head = format!(
            "## {agent} (conversation {}) succeeded\nresult {k}",
            child.id
        );
        let at = text
            .find(&head)
            .unwrap_or_else(|| panic!("{head:?} not in {text}"));
        assert!(at > last, "results out of order: {text}");
        last = at;
        child_ids.push(child.id.clone());
    }
    let me = list.iter().find(|c| c.id == id).unwrap();
    assert!(me.user_initiated && me.sub_agent_parent_id.is_empty());
    // Costs roll up: the parent's children usage is the sum of theirs.
    let mut sum = pb::Usage::default();
    for child in list.iter().filter(|c| c.sub_agent_parent_id == id) {
        let u = child.usage.unwrap();
        assert!(u.output_tokens > 0);
        sum.input_tokens += u.input_tokens;
        sum.output_tokens += u.output_tokens;
        sum.cache_creation_input_tokens += u.cache_creation_input_tokens;
        sum.cache_read_input_tokens += u.cache_read_input_tokens;
    }
    assert_eq!(me.sub_agents_usage.unwrap(), sum);

    // The children's tool set: no nesting, no mode upgrade, submit_result.
    for k in 1..=3 {
        let reqs = requests_of(&all, &format!("[child-{k}]"));
        assert_eq!(reqs.len(), 2, "child {k} asked twice");
        let tools = offered(&reqs[0]);
        assert!(tools.contains(&"submit_result".to_string()), "{tools:?}");
        assert!(!tools.contains(&"spawn_agents".to_string()), "{tools:?}");
        assert!(!tools.contains(&"request_mode_upgrade".to_string()));
        assert_valid_chain(&reqs[1]);
    }
    assert!(offered(&parent[0]).contains(&"spawn_agents".to_string()));
    assert!(!offered(&parent[0]).contains(&"submit_result".to_string()));

    // Concurrently: every child's first request arrived before any child's
    // slow first reply had finished streaming, and the whole took well
    // under the three slow replies one after another.
    let firsts: Vec<Recorded> = (1..=3)
        .map(|k| requests_of(&all, &format!("[child-{k}]"))[0].clone())
        .collect();
    let first_done = firsts
        .iter()
        .map(|r| r.replied_at.expect("streamed"))
        .min()
        .unwrap();
    for r in &firsts {
        assert!(r.arrived_at < first_done, "a child waited for another");
    }
    let one = firsts[0]
        .replied_at
        .unwrap()
        .duration_since(firsts[0].arrived_at)
        .unwrap();
    assert!(
        elapsed < one * 3,
        "3 children took {elapsed:?}; one slow reply takes {one:?}"
    );

    // `agent ls`: the children under their parent, in the order started;
    // `--flat` lists them as rows of their own.
    let (ok, out, err) = super::util::agent_out(&s.daemon, &["ls"]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // A row names its conversation by a prefix that tells it apart from
    // every other listed one (children made in the same millisecond share
    // their first 10 characters).
    let at = |id: &str| {
        let rows: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                let shown = l
                    .trim_start()
                    .trim_start_matches('└')
                    .split_whitespace()
                    .next();
                shown.is_some_and(|p| p.len() >= 10 && id.starts_with(p))
            })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(rows.len(), 1, "{id} not listed once:\n{out}");
        rows[0]
    };
    let parent_row = at(&id);
    assert!(!lines[parent_row].contains('└'), "{out}");
    for (k, child) in child_ids.iter().enumerate() {
        let row = at(child);
        assert_eq!(
            row,
            parent_row + 1 + k,
            "child {k} not under its parent:\n{out}"
        );
        assert!(lines[row].trim_start().starts_with('└'), "{out}");
        assert!(lines[row].contains("[sub-agent] task"), "{out}");
    }
    let (ok, flat, _) = super::util::agent_out(&s.daemon, &["ls", "--flat"]).await;
    assert!(ok && !flat.contains('└'), "{flat}");

    // Each child is a conversation at rest with its transcript.
    for child in &child_ids {
        let r = get(&mut client, child).await;
        assert_eq!(
            r.messages.len(),
            5,
            "prompt, read, its result, submit_result, its result"
        );
    }
}

/// The text of a tool_result block as recorded (a string or text blocks).
/// The text blocks of the last message of a recorded request.
fn last_user_text(req: &Recorded) -> String {
    let last = req.body["messages"].as_array().unwrap().last().unwrap();
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect(),
        _ => String::new(),
    }
}

/// A child that tries to spawn gets an error result (no nesting); a child
/// that ends without submit_result is told once, then its last text
/// counts; a child whose context fills up fails at once, and the parent
/// sees the failure.
#[tokio::test]
async fn children_cannot_nest_are_reminded_and_fail_on_a_full_context() {
    let s = Scenario::new()
        .config("[models.\"claude-test\"]\ncontext_window = 10000")
        .scripts([
            spawn(
                "toolu_p",
                &["[nest] try", "[lazy] think", "[huge] read a lot"],
            ),
            Script::text("Noted."),
        ])
        .conversation("Three kinds of child [parent2]")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake.clone(), s.client.clone(), s.id.clone());
    fake.push_for(
        "[nest]",
        Script::Reply(ReplyScript::new().tool_use(
            "n1",
            "spawn_agents",
            json!({"agents": [{"description": "deeper", "prompt": "[deeper] x"}]}),
        )),
    );
    fake.push_for("[nest]", submit("could not nest"));
    fake.push_for("[lazy]", Script::text("I think the answer is 7."));
    fake.push_for("[lazy]", Script::text("Still 7."));
    fake.push_for(
        "[huge]",
        Script::Reply(
            ReplyScript::new()
                .text("Reading everything.")
                .tool_use("h1", "read", json!({"path": "a.txt"}))
                .usage(9_500, 10),
        ),
    );
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let all = fake.requests();
    assert!(requests_of(&all, "[deeper]").is_empty(), "a child nested");

    let nest = requests_of(&all, "[nest]");
    assert_eq!(nest.len(), 2);
    let refused = result_of(&nest[1], "n1");
    assert_eq!(refused["is_error"], true);
    assert_eq!(
        result_text(&refused),
        "spawn_agents is not available to sub-agents: a sub-agent cannot start sub-agents"
    );

    let lazy = requests_of(&all, "[lazy]");
    assert_eq!(lazy.len(), 2, "told once, then its text counts");
    assert!(
        last_user_text(&lazy[1]).starts_with("You ended your turn without calling submit_result."),
        "{}",
        last_user_text(&lazy[1])
    );

    let huge = requests_of(&all, "[huge]");
    assert_eq!(huge.len(), 1, "no continuation, no second request");

    let parent = requests_of(&all, "[parent2]");
    assert_eq!(parent.len(), 2);
    assert_valid_chain(&parent[1]);
    let text = result_text(&result_of(&parent[1], "toolu_p"));
    assert!(
        text.starts_with("synthesis_toolu_p: 3 sub-agent(s) ended, 2 succeeded, 1 failed."),
        "{text}"
    );
    let one = text.find("## agent_1_toolu_p (conversation ").unwrap();
    let two = text.find("## agent_2_toolu_p (conversation ").unwrap();
    let three = text.find("## agent_3_toolu_p (conversation ").unwrap();
    assert!(one < two && two < three, "{text}");
    assert!(
        text[one..two].contains(") succeeded\ncould not nest"),
        "{text}"
    );
    assert!(
        text[two..three]
            .contains(") succeeded\n[no submit_result: the sub-agent's last text]\nStill 7."),
        "{text}"
    );
    assert!(
        text[three..].contains(") failed\nThe sub-agent failed: Context window exhausted"),
        "{text}"
    );
    // The failed child is in the error state, like any failed conversation.
    let list = super::util::listed(&mut client).await;
    let huge_child = list
        .iter()
        .find(|c| c.agent_id == "agent_3_toolu_p")
        .unwrap();
    let r = get(&mut client, &huge_child.id).await;
    assert_eq!(super::util::kind_of(&r), pb::StateKind::Error);
}

/// Cancelling the parent while three children run (one in a `sleep`, two
/// waiting for the model) stops every child and kills the process; the
/// parent's spawn call is answered "Cancelled by user" and its chain stays
/// valid.
#[tokio::test]
async fn cancelling_the_parent_cancels_every_child() {
    let s = Scenario::new()
        .scripts([spawn(
            "toolu_c",
            &["[sleeper] wait", "[slow-1] think", "[slow-2] think"],
        )])
        .conversation("Fan out then stop [parent3]")
        .allow(&["bash"])
        .start()
        .await;
    let (fake, mut client, id) = (s.fake.clone(), s.client.clone(), s.id.clone());
    let needle = "sleep 31.4159";
    fake.push_for(
        "[sleeper]",
        Script::Reply(ReplyScript::new().tool_use("b1", "bash", json!({"command": needle}))),
    );
    let gate = agent_tests::fake_llm::Gate::new();
    for marker in ["[slow-1]", "[slow-2]"] {
        fake.push_for(
            marker,
            Script::Reply(
                ReplyScript::new()
                    .text("thinking hard")
                    .hold_after(2, gate.clone()),
            ),
        );
    }
    // Every child is under way: the sleep runs, the others stream.
    let deadline = Instant::now() + Duration::from_secs(20);
    while super::util::processes_matching(needle).is_empty()
        || requests_of(&fake.requests(), "[slow-2]").is_empty()
        || requests_of(&fake.requests(), "[slow-1]").is_empty()
    {
        assert!(Instant::now() < deadline, "children did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        super::util::kind_of(&get(&mut client, &id).await),
        pb::StateKind::AwaitingSubAgents
    );
    client
        .cancel_conversation(pb::CancelConversationRequest {
            conversation_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let list = super::util::listed(&mut client).await;
    let children: Vec<String> = list
        .iter()
        .filter(|c| c.sub_agent_parent_id == id)
        .map(|c| c.id.clone())
        .collect();
    assert_eq!(children.len(), 3);
    for child in &children {
        wait_state(&mut client, child, pb::StateKind::Idle).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !super::util::processes_matching(needle).is_empty() {
        assert!(Instant::now() < deadline, "the child's sleep still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gate.open();
    // The spawn call's synthetic result, then a valid chain on the next turn.
    let r = get(&mut client, &id).await;
    let last = r.messages.last().unwrap();
    let answered: Vec<(String, String)> = last
        .content
        .iter()
        .filter_map(|b| match &b.block {
            Some(pb::content_block::Block::ToolResult(t)) => {
                Some((t.tool_use_id.clone(), t.content.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        answered,
        vec![("toolu_c".to_string(), "Cancelled by user".to_string())]
    );
    fake.push(Script::text("ok"));
    super::util::send(&mut client, &id, "go on").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let parent = requests_of(&fake.requests(), "[parent3]");
    assert_eq!(parent.len(), 2);
    assert_valid_chain(&parent[1]);
    // The cancelled children's late ends changed nothing in the parent.
    assert_eq!(
        get(&mut client, &id).await.messages.len(),
        r.messages.len() + 2
    );
}

/// kill -9 while one child has ended and another is mid-request: after the
/// restart the child in flight goes on (its request is issued again), the
/// ended one's result is kept, and the parent gets both, once each, and
/// goes on.
#[tokio::test]
async fn a_crash_mid_fan_out_loses_and_duplicates_nothing() {
    let mut s = Scenario::new()
        .scripts([
            spawn("toolu_k", &["[quick] go", "[held] go"]),
            Script::text("Both in."),
        ])
        .conversation("Survive a crash [parent4]")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake.clone(), s.client.clone(), s.id.clone());
    fake.push_for("[quick]", submit("quick result"));
    let gate = agent_tests::fake_llm::Gate::new();
    fake.push_for(
        "[held]",
        Script::Reply(
            ReplyScript::new()
                .text("working")
                .hold_after(2, gate.clone()),
        ),
    );
    fake.push_for("[held]", submit("held result"));
    // The quick child has ended (its end is in the parent) and the held
    // one streams.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = get(&mut client, &id).await;
        let quick_done = requests_of(&fake.requests(), "[quick]").len() == 1
            && list_children(&mut client, &id).await.iter().any(|c| {
                c.agent_id == "agent_1_toolu_k"
                    && c.state.as_ref().map(|s| s.kind) == Some(pb::StateKind::Idle as i32)
            });
        if quick_done
            && !requests_of(&fake.requests(), "[held]").is_empty()
            && super::util::kind_of(&r) == pb::StateKind::AwaitingSubAgents
        {
            break;
        }
        assert!(Instant::now() < deadline, "the fan-out did not get going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.daemon.kill9();
    gate.open();
    s.daemon.restart().await;
    let mut client = s.daemon.client().await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let all = fake.requests();
    assert_eq!(
        requests_of(&all, "[quick]").len(),
        1,
        "the ended child ran again"
    );
    assert_eq!(
        requests_of(&all, "[held]").len(),
        2,
        "the held child was asked again"
    );
    let parent = requests_of(&all, "[parent4]");
    assert_eq!(parent.len(), 2, "the parent asked twice");
    assert_valid_chain(&parent[1]);
    let text = result_text(&result_of(&parent[1], "toolu_k"));
    assert_eq!(text.matches("## agent_1_toolu_k").count(), 1, "{text}");
    assert_eq!(text.matches("## agent_2_toolu_k").count(), 1, "{text}");
    assert!(text.contains("succeeded\nquick result"), "{text}");
    assert!(text.contains("succeeded\nheld result"), "{text}");
    // No orphan: every child of the parent is at rest with its result.
    for c in list_children(&mut client, &id).await {
        assert_eq!(
            c.state.as_ref().map(|s| s.kind),
            Some(pb::StateKind::Idle as i32)
        );
    }
}

async fn list_children(
    client: &mut agent_proto::v1::agent_service_client::AgentServiceClient<
        tonic::transport::Channel,
    >,
    parent: &str,
) -> Vec<pb::ConversationSummary> {
    super::util::listed(client)
        .await
        .into_iter()
        .filter(|c| c.sub_agent_parent_id == parent)
        .collect()
}

/// With one slot per call, kill -9 while the first child streams and its
/// sibling waits for the slot: after the restart the recovered child and
/// the sibling run one after the other, never at once — recovered and new
/// children share `[sub_agents] max_concurrent`.
#[tokio::test]
async fn a_recovered_child_holds_its_slot_after_a_crash() {
    let mut s = Scenario::new()
        .config("[sub_agents]\nmax_concurrent = 1")
        .scripts([
            spawn("toolu_slot", &["[slot-a] go", "[slot-b] go"]),
            Script::text("Both in, one at a time."),
        ])
        .conversation("One slot [parent5]")
        .allow(&["bash"])
        .start()
        .await;
    let (fake, id) = (s.fake.clone(), s.id.clone());
    let gate = agent_tests::fake_llm::Gate::new();
    fake.push_for(
        "[slot-a]",
        Script::Reply(
            ReplyScript::new()
                .text("working")
                .hold_after(2, gate.clone()),
        ),
    );
    // Asked again after the restart: a tool round long enough for a
    // sibling without a slot to start meanwhile.
    fake.push_for(
        "[slot-a]",
        Script::Reply(ReplyScript::new().tool_use(
            "b1",
            "bash",
            json!({"command": "sleep 1; echo a"}),
        )),
    );
    fake.push_for("[slot-a]", submit("a result"));
    // The sibling's only reply streams for about a second.
    fake.push_for(
        "[slot-b]",
        Script::Reply(
            ReplyScript::new()
                .text("reporting")
                .tool_use(
                    "s1",
                    "submit_result",
                    json!({"result": "b result", "success": true}),
                )
                .pace(Duration::from_millis(150)),
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while requests_of(&fake.requests(), "[slot-a]").is_empty() {
        assert!(Instant::now() < deadline, "the first child did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        requests_of(&fake.requests(), "[slot-b]").is_empty(),
        "the second child started without a slot"
    );
    s.daemon.kill9();
    gate.open();
    s.daemon.restart().await;
    let mut client = s.daemon.client().await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let all = fake.requests();
    let a = requests_of(&all, "[slot-a]");
    let b = requests_of(&all, "[slot-b]");
    assert_eq!(a.len(), 3, "the first child: asked, asked again, submitted");
    assert_eq!(b.len(), 1);
    // After the restart the first child runs from its request asked again
    // to its last one (a one-second tool between them); the second from
    // its request to the end of its reply. One slot: they do not overlap.
    let (a_from, a_to) = (a[1].arrived_at, a[2].arrived_at);
    let (b_from, b_to) = (b[0].arrived_at, b[0].replied_at.unwrap());
    assert!(
        b_to <= a_from || b_from >= a_to,
        "the two children ran at once with one slot: the recovered one from {a_from:?} \
         to {a_to:?}, the other from {b_from:?} to {b_to:?}"
    );
    let parent = requests_of(&all, "[parent5]");
    assert_eq!(parent.len(), 2, "the parent asked twice");
    assert_valid_chain(&parent[1]);
    let text = result_text(&result_of(&parent[1], "toolu_slot"));
    assert!(text.contains("succeeded\na result"), "{text}");
    assert!(text.contains("succeeded\nb result"), "{text}");
}

/// The parent's first reply, slowed down so a client can attach before
/// the children start.
fn spawn_slowly(id: &str, prompts: &[&str]) -> Script {
    let agents: Vec<Value> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| json!({"description": format!("task {}", i + 1), "prompt": p}))
        .collect();
    Script::Reply(
        ReplyScript::new()
            .tool_use(id, "spawn_agents", json!({ "agents": agents }))
            .pace(Duration::from_millis(150)),
    )
}

/// The sub-agent an event on the parent's stream is about.
fn sub_agent_of(m: &pb::AttachResponse) -> Option<(&'static str, pb::SubAgentRef)> {
    use pb::attach_response::Event as E;
    match &m.event {
        Some(E::SubAgentStarted(e)) => Some(("started", e.sub_agent.clone()?)),
        Some(E::SubAgentStateChanged(e)) => Some(("state", e.sub_agent.clone()?)),
        Some(E::SubAgentToolCallBegin(t)) => Some(("begin", t.sub_agent.clone()?)),
        Some(E::SubAgentToolCallEnd(t)) => Some(("end", t.sub_agent.clone()?)),
        Some(E::SubAgentFinished(f)) => Some(("finished", f.sub_agent.clone()?)),
        _ => None,
    }
}

fn resolved(m: &pb::AttachResponse) -> Option<pb::PermissionResolved> {
    match &m.event {
        Some(pb::attach_response::Event::PermissionResolved(r)) => Some(r.clone()),
        _ => None,
    }
}

/// Done-when 3: a child's bash permission request reaches a client attached
/// to the PARENT, naming the child, and that client answers "allow always"
/// on the parent's stream; the parent's and the child's streams both see
/// the resolution naming who answered; the sibling then runs the same
/// command without asking. The parent's stream also shows each child's
/// start, states, tool calls and end.
#[tokio::test]
async fn a_childs_request_is_answered_from_the_parent_and_covers_its_siblings() {
    use super::util::{Attached, is_idle, is_request, request_of};
    use agent_tests::harness::WAIT;
    let s = Scenario::new()
        .scripts([
            spawn_slowly("toolu_a", &["[asker] go", "[sibling] go"]),
            Script::text("Both done."),
        ])
        .conversation("Ask through me [parent5]")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake.clone(), s.client.clone(), s.id.clone());
    let command = "echo sibling-rule-ok";
    fake.push_for(
        "[asker]",
        Script::Reply(ReplyScript::new().tool_use("b1", "bash", json!({ "command": command }))),
    );
    fake.push_for("[asker]", submit("asked and ran"));
    // The sibling asks for the same command only once the first answer is in.
    let gate = agent_tests::fake_llm::Gate::new();
    fake.push_for(
        "[sibling]",
        Script::Reply(
            ReplyScript::new()
                .text("my turn")
                .tool_use("b2", "bash", json!({ "command": command }))
                .hold_after(2, gate.clone()),
        ),
    );
    fake.push_for("[sibling]", submit("ran without asking"));

    let mut parent = Attached::open(&mut client, &id, 0, "parent-watcher").await;
    let mut seen = parent.until(WAIT, is_request).await;
    let request = request_of(seen.last().unwrap());
    assert_eq!(request.tool_name, "bash");
    assert_eq!(request.sub_agent_id, "agent_1_toolu_a");
    assert_eq!(request.sub_agent_description, "task 1");
    let child_id = request.sub_agent_conversation_id.clone();
    assert!(!child_id.is_empty() && child_id != id);
    // The child's own clients see the same request.
    let mut child = Attached::open(&mut client, &child_id, 0, "child-watcher").await;
    let snapshot = child.next(WAIT).await;
    match &snapshot.event {
        Some(pb::attach_response::Event::Snapshot(snap)) => {
            let pending = snap.pending_permission.as_ref().expect("pending");
            assert_eq!(pending.request_id, request.request_id);
            assert_eq!(pending.sub_agent_id, "agent_1_toolu_a");
        }
        other => panic!("not a snapshot: {other:?}"),
    }
    // Answered from the parent's stream: allow always, this conversation.
    parent
        .send(pb::attach_request::Frame::Answer(
            pb::AnswerPermissionFrame {
                request_id: request.request_id.clone(),
                decision: pb::PermissionDecision::AllowAlways as i32,
                scope: pb::RuleScope::Conversation as i32,
                ..Default::default()
            },
        ))
        .await;
    for (stream, frames) in [
        (
            "parent",
            parent.until(WAIT, |m| resolved(m).is_some()).await,
        ),
        ("child", child.until(WAIT, |m| resolved(m).is_some()).await),
    ] {
        let r = resolved(frames.last().unwrap()).unwrap();
        assert_eq!(r.request_id, request.request_id, "{stream}");
        assert_eq!(
            r.decision,
            pb::PermissionDecision::AllowAlways as i32,
            "{stream}"
        );
        assert_eq!(r.client_name, "parent-watcher", "{stream}");
        if stream == "parent" {
            seen.extend(frames);
        }
    }
    gate.open();
    seen.extend(parent.until(WAIT, is_idle).await);

    // Only the first child asked; the sibling's call ran under the rule.
    let asked: Vec<String> = seen
        .iter()
        .filter(|m| is_request(m))
        .map(|m| request_of(m).sub_agent_id)
        .collect();
    assert!(
        asked.iter().all(|a| a == "agent_1_toolu_a"),
        "the sibling asked: {asked:?}"
    );
    let sibling = requests_of(&fake.requests(), "[sibling]");
    assert_eq!(sibling.len(), 2);
    let ran = result_of(&sibling[1], "b2");
    assert_ne!(ran["is_error"], true, "{ran}");
    assert!(result_text(&ran).contains("sibling-rule-ok"), "{ran}");
    let parent_reqs = requests_of(&fake.requests(), "[parent5]");
    assert_eq!(parent_reqs.len(), 2);
    let text = result_text(&result_of(&parent_reqs[1], "toolu_a"));
    assert!(text.contains("2 succeeded"), "{text}");

    // One line per child event on the parent's stream, naming the child.
    for agent in ["agent_1_toolu_a", "agent_2_toolu_a"] {
        let kinds: Vec<&str> = seen
            .iter()
            .filter_map(sub_agent_of)
            .filter(|(_, r)| r.agent_id == agent)
            .map(|(k, r)| {
                assert!(!r.conversation_id.is_empty() && r.conversation_id != id);
                assert!(r.description.starts_with("task "), "{r:?}");
                k
            })
            .collect();
        for kind in ["started", "state", "begin", "end", "finished"] {
            assert!(kinds.contains(&kind), "{agent}: no {kind} in {kinds:?}");
        }
        let started = kinds.iter().position(|k| *k == "started").unwrap();
        let finished = kinds.iter().position(|k| *k == "finished").unwrap();
        assert!(started < finished, "{kinds:?}");
    }
    let calls: Vec<pb::SubAgentToolCall> = seen
        .iter()
        .filter_map(|m| match &m.event {
            Some(pb::attach_response::Event::SubAgentToolCallEnd(t)) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert!(
        calls
            .iter()
            .any(|t| t.tool_name == "bash" && !t.is_error && t.tool_use_id == "b2"),
        "{calls:?}"
    );
    let finished: Vec<pb::SubAgentFinished> = seen
        .iter()
        .filter_map(|m| match &m.event {
            Some(pb::attach_response::Event::SubAgentFinished(f)) => Some(f.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 2, "{finished:?}");
    for f in &finished {
        assert!(f.success);
        assert!(f.usage.unwrap().output_tokens > 0);
    }
    assert!(finished.iter().any(|f| f.summary == "ran without asking"));
}

/// A child's background shell is listed for its parent (marked with the
/// child) and killed from there; the child's bash request is answered with
/// `agent answer PARENT` (the only request pending under it).
#[tokio::test]
async fn a_childs_shells_are_seen_and_killed_from_the_parent() {
    let s = Scenario::new()
        .scripts([
            spawn("toolu_sh", &["[shell-child] go"]),
            Script::text("Shell started."),
        ])
        .conversation("Shells below me [parent6]")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake.clone(), s.client.clone(), s.id.clone());
    let needle = "sleep 27.1828";
    fake.push_for(
        "[shell-child]",
        Script::Reply(ReplyScript::new().tool_use(
            "bg1",
            "bash",
            json!({"command": needle, "run_in_background": true}),
        )),
    );
    fake.push_for("[shell-child]", submit("shell running"));
    // The child asks; a person answers with the parent's id.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let asking = list_children(&mut client, &id).await.iter().any(|c| {
            c.state.as_ref().map(|s| s.kind) == Some(pb::StateKind::AwaitingPermission as i32)
        });
        if asking {
            break;
        }
        assert!(Instant::now() < deadline, "the child did not ask");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (ok, out, err) = super::util::agent_out(&s.daemon, &["answer", &id, "y"]).await;
    assert!(ok, "{out}{err}");
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let child = list_children(&mut client, &id).await.remove(0);

    let listed = client
        .list_shells(pb::ListShellsRequest {
            conversation_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .shells;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let shell = &listed[0];
    assert_eq!(shell.conversation_id, child.id, "marked with the child");
    assert!(shell.command.contains(needle));
    assert_eq!(shell.status, pb::ShellStatus::Running as i32);
    // Another conversation's shells are not listed for this one.
    let other = super::util::create(&mut client, s.work.path(), "").await;
    let none = client
        .list_shells(pb::ListShellsRequest {
            conversation_id: other,
        })
        .await
        .unwrap()
        .into_inner()
        .shells;
    assert!(none.is_empty(), "{none:?}");

    let (ok, out, err) = super::util::agent_out(&s.daemon, &["shells", &id]).await;
    assert!(ok, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with(&shell.id))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("(sub-agent)"), "{out}");
    let (ok, out, err) = super::util::agent_out(&s.daemon, &["shells", "kill", &shell.id]).await;
    assert!(ok, "{out}{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !super::util::processes_matching(needle).is_empty() {
        assert!(Instant::now() < deadline, "the child's shell still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A child's request pending at a kill -9 is asked again after the
/// restart, and a client that attaches to the parent then gets it (naming
/// the child) and answers it there with AnswerPermission on the parent's id.
#[tokio::test]
async fn a_childs_pending_request_reaches_the_parent_after_a_restart() {
    use super::util::{Attached, is_idle, is_request, request_of};
    use agent_tests::harness::WAIT;
    let mut s = Scenario::new()
        .scripts([
            spawn("toolu_r", &["[restart-asker] go"]),
            Script::text("Answered after the crash."),
        ])
        .conversation("Ask across a crash [parent7]")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake.clone(), s.client.clone(), s.id.clone());
    fake.push_for(
        "[restart-asker]",
        Script::Reply(ReplyScript::new().tool_use(
            "b1",
            "bash",
            json!({ "command": "echo after-the-crash" }),
        )),
    );
    fake.push_for("[restart-asker]", submit("ran after the crash"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let child = loop {
        let asking = list_children(&mut client, &id).await.into_iter().find(|c| {
            c.state.as_ref().map(|s| s.kind) == Some(pb::StateKind::AwaitingPermission as i32)
        });
        if let Some(c) = asking {
            break c;
        }
        assert!(Instant::now() < deadline, "the child did not ask");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    s.daemon.kill9();
    s.daemon.restart().await;
    let mut client = s.daemon.client().await;
    let mut parent = Attached::open(&mut client, &id, 0, "after-restart").await;
    let frames = parent.until(WAIT, is_request).await;
    let request = request_of(frames.last().unwrap());
    assert_eq!(request.sub_agent_conversation_id, child.id);
    assert_eq!(request.sub_agent_id, "agent_1_toolu_r");
    client
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: id.clone(),
            request_id: request.request_id.clone(),
            decision: pb::PermissionDecision::AllowOnce as i32,
            client_name: "unary".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let rest = parent.until(WAIT, is_idle).await;
    assert!(
        rest.iter().any(|m| resolved(m)
            .is_some_and(|r| r.request_id == request.request_id && r.client_name == "unary")),
        "{rest:?}"
    );
    let asker = requests_of(&fake.requests(), "[restart-asker]");
    let ran = result_of(asker.last().unwrap(), "b1");
    assert!(result_text(&ran).contains("after-the-crash"), "{ran}");
    // A second answer to the same request is refused: the first one won.
    let again = client
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: child.id.clone(),
            request_id: request.request_id.clone(),
            decision: pb::PermissionDecision::Deny as i32,
            ..Default::default()
        })
        .await;
    assert!(again.is_err(), "{again:?}");
}
