//! Custom sub-agent types (issue 42 point 6): a project type with a
//! read-only tool list, from a trusted project, and a type of the user's
//! config directory. The parent's spawn tool lists both; the typed child's
//! requests offer only its tools and carry its prompt, and its `bash` call
//! is refused with an error result even with an allow rule for bash;
//! `agent agents ls` lists both and says why an untrusted project's are
//! not loaded.

use super::util::{
    agent_out, assert_valid_chain, create_with, offered, requests_of, result_of, result_text,
    wait_state,
};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{Recorded, ReplyScript, Script};
use agent_tests::harness::Scenario;
use serde_json::{Value, json};

const REVIEWER: &str = "---\nname: reviewer\ndescription: Reviews code without changing it\ntools: read, grep, glob\nmodel: claude-haiku-4-5\n---\nYou are a careful reviewer. REVIEWER-PROMPT\n";
const SCOUT: &str = "---\nname: scout\ndescription: Finds where things are\ncolor: green\nmodel: no-such-model\n---\nYou find files.\n";

/// The names of the tools a request offered, sorted.
fn offered_sorted(req: &Recorded) -> Vec<String> {
    let mut names = offered(req);
    names.sort();
    names
}

#[tokio::test]
async fn a_read_only_project_type_runs_its_child_without_bash_and_is_listed() {
    let s = Scenario::new().start().await;
    let (fake, mut client, d) = (s.fake.clone(), s.client.clone(), &s.daemon);
    let work = s.work.path().canonicalize().unwrap();
    let dir = work.display().to_string();
    std::fs::create_dir_all(work.join(".agents/agents")).unwrap();
    std::fs::write(work.join(".agents/agents/reviewer.md"), REVIEWER).unwrap();
    let user_types = d.user_config_dir().join("agents");
    std::fs::create_dir_all(&user_types).unwrap();
    std::fs::write(user_types.join("scout.md"), SCOUT).unwrap();

    // Untrusted: only the user's type, and a note saying why and what to do.
    let (ok, out, err) = agent_out(d, &["agents", "ls", &dir]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("not trusted") && out.contains(&format!("agent trust {dir}")),
        "{out}"
    );
    assert!(
        out.contains("scout  user") && !out.contains("reviewer  project"),
        "{out}"
    );

    let (ok, _, err) = agent_out(d, &["trust", &dir]).await;
    assert!(ok, "{err}");
    let (ok, out, err) = agent_out(d, &["agents", "ls", &dir]).await;
    assert!(ok, "{err}");
    assert!(out.contains("reviewer  project  claude-haiku-4-5"), "{out}");
    assert!(
        out.contains("model no-such-model is not one agentd knows"),
        "{out}"
    );
    assert!(
        out.contains("  tools: read, grep, glob, submit_result"),
        "{out}"
    );
    assert!(out.contains("scout  user"), "{out}");
    assert!(
        out.contains("problem: ") && out.contains("unknown key `color` is ignored"),
        "{out}"
    );
    let (ok, out, err) = agent_out(d, &["agents", "ls", &dir, "--json"]).await;
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let types = listed["types"].as_array().unwrap();
    assert_eq!(types[0]["name"], "reviewer");
    assert_eq!(types[0]["origin"], "project");
    assert_eq!(types[0]["tools"], json!(["read", "grep", "glob"]));
    assert_eq!(types[1]["name"], "scout");
    assert_eq!(types[1]["tools"], Value::Null, "the parent's tools");

    // The parent spawns a reviewer; the child tries bash, then submits.
    std::fs::write(work.join("a.txt"), "alpha\n").unwrap();
    fake.push(Script::Reply(ReplyScript::new().tool_use(
        "toolu_spawn",
        "spawn_agents",
        json!({"agents": [{"description": "review", "prompt": "[child] review a.txt", "agent_type": "reviewer"}]}),
    )));
    fake.push(Script::text("Reviewed."));
    fake.push_for(
        "[child]",
        Script::Reply(ReplyScript::new().tool_use(
            "b1",
            "bash",
            json!({"command": "touch bash-ran"}),
        )),
    );
    fake.push_for(
        "[child]",
        Script::Reply(ReplyScript::new().tool_use(
            "s1",
            "submit_result",
            json!({"result": "looks fine", "success": true}),
        )),
    );
    // An allow rule for bash: the type, not a prompt, is what refuses it.
    let id = create_with(
        &mut client,
        &work,
        "Review it [parent]",
        &["bash"],
        pb::PermissionMode::Default,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;

    let all = fake.requests();
    let parent = requests_of(&all, "[parent]");
    assert_eq!(parent.len(), 2, "the parent asked twice");
    let spawn = parent[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "spawn_agents")
        .unwrap()
        .clone();
    assert_eq!(
        spawn["input_schema"]["properties"]["agents"]["items"]["properties"]["agent_type"]["enum"],
        json!(["reviewer", "scout"])
    );
    assert!(
        spawn["description"]
            .as_str()
            .unwrap()
            .contains("- reviewer: Reviews code without changing it")
    );
    assert!(offered_sorted(&parent[0]).contains(&"bash".to_string()));
    assert_eq!(parent[0].body["model"], "claude-test");
    let answer = result_text(&result_of(&parent[1], "toolu_spawn"));
    assert!(answer.contains("looks fine"), "{answer}");

    let child = requests_of(&all, "[child]");
    assert_eq!(child.len(), 2, "the child asked twice");
    for req in &child {
        assert_eq!(req.body["model"], "claude-haiku-4-5", "the type's model");
        assert_eq!(
            offered_sorted(req),
            ["glob", "grep", "read", "submit_result"]
        );
        assert!(req.body["system"].to_string().contains("REVIEWER-PROMPT"));
    }
    assert!(
        !parent[0].body["system"]
            .to_string()
            .contains("REVIEWER-PROMPT")
    );
    let refused = result_of(&child[1], "b1");
    assert_eq!(refused["is_error"], true, "{refused}");
    let text = result_text(&refused);
    assert!(
        text.contains("bash is not available to this sub-agent: its type allows only read, grep, glob, submit_result"),
        "{text}"
    );
    assert_valid_chain(&child[1]);
    assert!(!work.join("bash-ran").exists(), "bash ran");
}

/// A typed child is resumed after a kill -9 with the type it was spawned
/// as, kept on its record: its file changed meanwhile (bash allowed, a new
/// prompt) and the request asked again still offers only `read` and carries
/// the first prompt.
#[tokio::test]
async fn a_typed_child_resumes_after_a_crash_with_the_type_it_was_spawned_as() {
    let mut s = Scenario::new().start().await;
    let (fake, mut client) = (s.fake.clone(), s.client.clone());
    let user_types = s.daemon.user_config_dir().join("agents");
    std::fs::create_dir_all(&user_types).unwrap();
    let file = user_types.join("reader.md");
    std::fs::write(
        &file,
        "---\nname: reader\ndescription: Reads\ntools: [Read]\n---\nFIRST-PROMPT\n",
    )
    .unwrap();
    fake.push(Script::Reply(ReplyScript::new().tool_use(
        "toolu_r",
        "spawn_agents",
        json!({"agents": [{"description": "read", "prompt": "[held-reader] go", "agent_type": "reader"}]}),
    )));
    fake.push(Script::text("Read."));
    let gate = agent_tests::fake_llm::Gate::new();
    fake.push_for(
        "[held-reader]",
        Script::Reply(
            ReplyScript::new()
                .text("working")
                .hold_after(2, gate.clone()),
        ),
    );
    fake.push_for(
        "[held-reader]",
        Script::Reply(ReplyScript::new().tool_use(
            "s1",
            "submit_result",
            json!({"result": "read it", "success": true}),
        )),
    );
    let work = s.work.path().to_path_buf();
    let id = create_with(
        &mut client,
        &work,
        "Read it [parent-r]",
        &[],
        pb::PermissionMode::Default,
    )
    .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while requests_of(&fake.requests(), "[held-reader]").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the child did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    s.daemon.kill9();
    gate.open();
    std::fs::write(
        &file,
        "---\nname: reader\ndescription: Reads\ntools: [Read, Bash]\n---\nSECOND-PROMPT\n",
    )
    .unwrap();
    s.daemon.restart().await;
    let mut client = s.daemon.client().await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let child = requests_of(&fake.requests(), "[held-reader]");
    assert!(child.len() >= 2, "the child was not asked again");
    for req in &child {
        assert_eq!(offered_sorted(req), ["read", "submit_result"]);
        let system = req.body["system"].to_string();
        assert!(system.contains("FIRST-PROMPT") && !system.contains("SECOND-PROMPT"));
    }
}

/// A spawn that names a type nobody defined ends that child at once with
/// a result saying so and which types there are; the parent goes on.
#[tokio::test]
async fn an_unknown_type_fails_its_child_with_the_types_available() {
    let s = Scenario::new()
        .scripts([
            Script::Reply(ReplyScript::new().tool_use(
                "toolu_n",
                "spawn_agents",
                json!({"agents": [{"description": "x", "prompt": "[nobody] go", "agent_type": "nope"}]}),
            )),
            Script::text("Noted."),
        ])
        .conversation("Spawn a stranger [parent-n]")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake.clone(), s.client.clone(), s.id.clone());
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let all = fake.requests();
    assert!(requests_of(&all, "[nobody]").is_empty(), "the child ran");
    let parent = requests_of(&all, "[parent-n]");
    let result = result_of(&parent[1], "toolu_n");
    let text = result_text(&result);
    assert!(
        text.contains("there is no sub-agent type `nope` (available: none;"),
        "{text}"
    );
    assert_eq!(result["is_error"], true, "{result}");
}
