//! Long work that does not die (issue 15, points 1 and 2): the 80 % warning
//! every attached client sees, the 90 % threshold in the middle of a tool
//! round (the calls rejected and listed in the continuation request, the
//! seed's texts exact), the summary stored as a message of kind
//! `continuation`, `agent continue` starting the linked conversation seeded
//! with it, `[context] auto_continue` chaining windows with nobody
//! attached, cancel and failure of the continuation request, `agent
//! compact`, and a kill -9 while the summary is requested.
//!
//! The model's window is 10,000 tokens here: 80 % is 8,000, 90 % is 9,000.

use super::util::{
    Attached, agent_out, assert_valid_chain, get, send, text_of_message, wait_state,
};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{Gate, Recorded, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};
use std::time::Duration;

const WINDOW: &str = "[models.\"claude-test\"]\ncontext_window = 10000";

/// The seed's continuation prompt, written out here so a change of the
/// daemon's text fails this test (bedrock-state-machine-design.md,
/// "Continuation Prompt").
const SEED_PROMPT: &str = "The conversation context is nearly full. Please provide a brief continuation summary that could seed a new conversation.

Include:
1. Current task status (if any)
2. Key files or concepts discussed
3. Suggested next steps

Keep your response concise.";
const SEED_FALLBACK: &str = "Context limit reached. The continuation summary could not be generated. Please start a new conversation.";
const SEED_CANCELLED: &str = "Continuation cancelled by user.";

fn reply(text: &str, input: u64, output: u64) -> Script {
    Script::Reply(ReplyScript::new().text(text).usage(input, output))
}

/// The text of the last message of a recorded request.
fn last_text(req: &Recorded) -> String {
    let last = req.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_else(|| panic!("no messages: {:#}", req.body));
    texts_of(&last).join("")
}

/// The text blocks of a message of a recorded request.
fn texts_of(message: &Value) -> Vec<String> {
    match &message["content"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .map(|b| b["text"].as_str().unwrap_or_default().to_string())
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether a request offered tools.
fn offers_tools(req: &Recorded) -> bool {
    req.body["tools"].as_array().is_some_and(|t| !t.is_empty())
}

fn summary_of(r: &pb::GetConversationResponse) -> &pb::ConversationSummary {
    r.conversation.as_ref().unwrap()
}

/// The messages of kind `continuation` of a transcript, as text.
fn continuation_messages(r: &pb::GetConversationResponse) -> Vec<String> {
    r.messages
        .iter()
        .filter(|m| m.kind == pb::MessageKind::Continuation as i32)
        .map(text_of_message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warning_at_80_then_90_mid_tool_round_then_continue_in_a_linked_conversation() {
    let gate = Gate::new();
    let s = Scenario::new()
        .config(WINDOW)
        .scripts([
            // Round 1: a read, 82 % full: the warning.
            Script::Reply(
                ReplyScript::new()
                    .text("Reading the test.")
                    .tool_use("r1", "read", json!({"path": "notes.txt"}))
                    .usage(8_000, 200),
            ),
            // Round 2, held until a message is queued: 91 % full, with two
            // tool calls that are rejected.
            Script::Reply(
                ReplyScript::new()
                    .text("Now I will fix it.")
                    .tool_use("b1", "bash", json!({"command": "cargo test"}))
                    .tool_use("w1", "write", json!({"path": "a.rs", "content": "x"}))
                    .usage(9_000, 100)
                    .hold_after(0, gate.clone()),
            ),
            // The continuation summary.
            reply(
                "Task: fix the failing test in a.rs. Next: run cargo test.",
                300,
                50,
            ),
            // The continued conversation's first reply.
            reply("Carrying on with the summary.", 1_000, 20),
        ])
        .conversation("")
        .allow(&["bash", "write"])
        .mode(pb::PermissionMode::AcceptEdits)
        .start()
        .await;
    let (fake, d, mut client, id, work) = (s.fake, s.daemon, s.client, s.id, s.work);
    std::fs::write(work.path().join("notes.txt"), "the test fails").unwrap();
    let mut one = Attached::open(&mut client, &id, 0, "terminal one").await;
    let mut two = Attached::open(&mut client, &id, 0, "terminal two").await;
    // `agent attach` follows the conversation when it is continued.
    let mut attach = tokio::process::Command::from(d.agent())
        .args(["--json", "attach", &id])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let attach_stdin = attach.stdin.take().unwrap();
    send(&mut client, &id, "fix the failing test").await;

    // 80 %: every attached client is told, once.
    for client in [&mut one, &mut two] {
        let seen = client
            .until(WAIT, |m| matches!(m.event, Some(Ev::ContextWarning(_))))
            .await;
        let Some(Ev::ContextWarning(w)) = &seen.last().unwrap().event else {
            unreachable!()
        };
        assert_eq!((w.used_tokens, w.context_window), (8_200, 10_000));
    }
    // While round 2 is held, a message is queued.
    fake.wait_for_requests(2, WAIT).await;
    let queued = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "also update the docs".into(),
            queue_if_busy: true,
            images: vec![pb::ImageUpload {
                data: super::util::PIXEL_PNG.to_vec(),
                name: "shot.png".into(),
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!queued.queued_id.is_empty(), "queued: {queued:?}");
    gate.open();

    // 90 % mid-tool-round: the calls are rejected and listed.
    for client in [&mut one, &mut two] {
        let seen = client
            .until(WAIT, |m| matches!(m.event, Some(Ev::ContextExhausted(_))))
            .await;
        let started = seen
            .iter()
            .find_map(|m| match &m.event {
                Some(Ev::ContinuationStarted(c)) => Some(c.clone()),
                _ => None,
            })
            .expect("continuation_started");
        assert_eq!(started.rejected_tools, ["bash", "write"]);
        assert!(!started.manual);
        assert!(
            !seen.iter().any(|m| matches!(m.event, Some(Ev::ToolCallBegin(ref t)) if t.tool_use_id == "b1" || t.tool_use_id == "w1")),
            "a rejected call never ran"
        );
        let warnings = seen
            .iter()
            .filter(|m| matches!(m.event, Some(Ev::ContextWarning(_))))
            .count();
        assert_eq!(warnings, 0, "no second warning above 80 %");
        let Some(Ev::ContextExhausted(e)) = &seen.last().unwrap().event else {
            unreachable!()
        };
        assert_eq!(
            e.summary,
            "Task: fix the failing test in a.rs. Next: run cargo test."
        );
    }
    let r = wait_state(&mut client, &id, pb::StateKind::ContextExhausted).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3, "two rounds and the continuation request");
    let continuation = &reqs[2];
    assert!(
        !offers_tools(continuation),
        "the continuation request is tool-less"
    );
    assert_eq!(
        last_text(continuation),
        format!(
            "{SEED_PROMPT}\n\nNote: The following tool calls were requested but not executed due to context limits:\n- bash\n- write\n"
        )
    );
    assert_valid_chain(continuation);
    assert!(
        !continuation.body.to_string().contains("\"b1\""),
        "the rejected calls are not in the transcript"
    );
    assert!(
        !continuation
            .body
            .to_string()
            .contains("also update the docs"),
        "the queued message is not delivered to the summary request"
    );
    // The summary is a message of kind `continuation`; the queue stays.
    assert_eq!(
        continuation_messages(&r),
        ["Task: fix the failing test in a.rs. Next: run cargo test."]
    );
    assert_eq!(summary_of(&r).queued.len(), 1);
    assert!(summary_of(&r).context_warning);
    assert_eq!(summary_of(&r).context_tokens, 9_100);
    let (_, shown, _) = agent_out(&d, &["show", "--json", &id]).await;
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let kinds: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.last(), Some(&"continuation"), "{shown:#}");
    // Read-only now.
    let refused = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "one more thing".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert_eq!(refused.message(), "context exhausted");
    let (_, table, _) = agent_out(&d, &["ls"]).await;
    assert!(table.contains("!ctx 91%"), "ls marks it: {table}");

    // `agent continue`: a linked conversation seeded with the summary and
    // the queued message, same directory, model, mode and rules.
    let (ok, out, err) = agent_out(&d, &["--json", "continue", &id[..12]]).await;
    assert!(ok, "{err}");
    let next: Value = serde_json::from_str(&out).unwrap();
    let next_id = next["id"].as_str().unwrap().to_string();
    assert_ne!(next_id, id);
    assert_eq!(next["parent_conversation_id"], id.as_str());
    let old = get(&mut client, &id).await;
    assert_eq!(summary_of(&old).continued_as, next_id);
    assert!(summary_of(&old).queued.is_empty(), "the queue moved along");
    let new = wait_state(&mut client, &next_id, pb::StateKind::Idle).await;
    let c = summary_of(&new);
    assert_eq!(c.parent_conversation_id, id);
    assert_eq!(c.cwd, summary_of(&old).cwd);
    assert_eq!(c.model, summary_of(&old).model);
    assert_eq!(c.mode, pb::PermissionMode::AcceptEdits as i32);
    assert_eq!(c.allow_rules, ["bash", "write"]);
    assert_eq!(new.messages[0].kind, pb::MessageKind::Continued as i32);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    let first = &reqs[3];
    let first_message = &first.body["messages"][0];
    assert_eq!(
        texts_of(first_message),
        [
            format!(
                "This conversation continues conversation {id}, whose context window was full. Its continuation summary:\n\nTask: fix the failing test in a.rs. Next: run cargo test."
            ),
            "also update the docs".to_string(),
        ]
    );
    assert_eq!(first.body["messages"].as_array().unwrap().len(), 1);
    // The queued message's image went along with it.
    assert_eq!(first.image_error, None);
    assert_eq!(first.images.len(), 1);
    assert_eq!(first.images[0].bytes, super::util::PIXEL_PNG);
    assert!(offers_tools(first));
    // Asked again: the same conversation, nothing new.
    let again = client
        .continue_conversation(pb::ContinueConversationRequest {
            conversation_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.conversation.unwrap().id, next_id);
    // Attached clients are told the new id.
    for client in [&mut one, &mut two] {
        let seen = client
            .until(WAIT, |m| {
                matches!(m.event, Some(Ev::ConversationContinued(_)))
            })
            .await;
        let Some(Ev::ConversationContinued(c)) = &seen.last().unwrap().event else {
            unreachable!()
        };
        assert_eq!(
            (c.conversation_id.as_str(), c.hop, c.automatic),
            (next_id.as_str(), 1, false)
        );
    }
    // A client that attaches later is told where it goes on.
    let mut late = Attached::open(&mut client, &id, 0, "late").await;
    let seen = late
        .until(WAIT, |m| {
            matches!(m.event, Some(Ev::ConversationContinued(_)))
        })
        .await;
    assert!(matches!(seen[0].event, Some(Ev::Snapshot(_))));
    let Some(Ev::ConversationContinued(c)) = &seen.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(
        (c.conversation_id.as_str(), seen.last().unwrap().seq),
        (next_id.as_str(), 0)
    );
    // `agent ls` and `agent show` show the link.
    let (_, table, _) = agent_out(&d, &["ls"]).await;
    assert!(table.contains(&format!("→ {}", &next_id[..10])), "{table}");
    assert!(table.contains(&format!("← {}", &id[..10])), "{table}");
    let (_, shown, _) = agent_out(&d, &["show", &next_id]).await;
    assert!(shown.contains(&format!("continues {id}")), "{shown}");
    // `agent attach` followed into the new conversation.
    wait_for_attach_to_follow(&mut attach, attach_stdin, &next_id).await;
    // Compacting an exhausted conversation is refused.
    let (ok, _, err) = agent_out(&d, &["compact", &id]).await;
    assert!(!ok && err.contains("context exhausted"), "{err}");
}

/// Ends `agent --json attach` (its stdin closes) once it has shown the
/// snapshot of `next`: it subscribed to the continuation by itself.
async fn wait_for_attach_to_follow(
    attach: &mut tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    next: &str,
) {
    use tokio::io::AsyncBufReadExt;
    let stdout = attach.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let followed = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if event["type"] == "snapshot" && event["snapshot"]["conversation"]["id"] == next {
                return true;
            }
        }
        false
    })
    .await;
    drop(stdin);
    let _ = tokio::time::timeout(WAIT, attach.wait()).await;
    assert_eq!(followed, Ok(true), "agent attach followed to {next}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_continue_chains_three_windows_with_nobody_attached() {
    let s = Scenario::new()
        .config(&format!(
            "{WINDOW}\n\n[context]\nauto_continue = true\nmax_hops = 2"
        ))
        .scripts([
            reply("window one is full", 9_500, 10),
            reply("Summary one.", 100, 10),
            reply("window two is full", 9_600, 10),
            reply("Summary two.", 100, 10),
            reply("window three is full", 9_700, 10),
            reply("Summary three.", 100, 10),
        ])
        .conversation("a long unattended task")
        .start()
        .await;
    let (fake, d, mut client, first) = (s.fake, s.daemon, s.client, s.id);
    fake.wait_for_requests(6, WAIT).await;
    let mut chain = vec![first.clone()];
    for _ in 0..2 {
        let last = chain.last().unwrap().clone();
        let deadline = tokio::time::Instant::now() + WAIT;
        let next = loop {
            let r = get(&mut client, &last).await;
            let next = summary_of(&r).continued_as.clone();
            if !next.is_empty() {
                break next;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{last} never continued"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        chain.push(next);
    }
    let third = wait_state(&mut client, &chain[2], pb::StateKind::ContextExhausted).await;
    assert_eq!(summary_of(&third).parent_conversation_id, chain[1]);
    assert_eq!(
        summary_of(&third).continued_as,
        "",
        "max_hops = 2: the third window is not continued by itself"
    );
    assert_eq!(continuation_messages(&third), ["Summary three."]);
    let second = get(&mut client, &chain[1]).await;
    assert_eq!(summary_of(&second).parent_conversation_id, chain[0]);
    let mut late = Attached::open(&mut client, &chain[0], 0, "late").await;
    let seen = late
        .until(WAIT, |m| {
            matches!(m.event, Some(Ev::ConversationContinued(_)))
        })
        .await;
    let Some(Ev::ConversationContinued(c)) = &seen.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(
        (c.conversation_id.as_str(), c.hop, c.automatic),
        (chain[1].as_str(), 1, true)
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 6, "nothing more was asked");
    // Each window begins with the summary of the one before.
    assert!(texts_of(&reqs[2].body["messages"][0])[0].ends_with("Summary one."));
    assert!(texts_of(&reqs[4].body["messages"][0])[0].ends_with("Summary two."));
    assert_eq!(last_text(&reqs[1]), SEED_PROMPT);
    let log = d.log();
    assert_eq!(
        log.matches("continued automatically").count(),
        2,
        "each hop is logged"
    );
    // A person can still go on past the limit.
    fake.push(reply("done", 100, 10));
    let (ok, out, err) = agent_out(&d, &["continue", &chain[2]]).await;
    assert!(ok, "{err}");
    assert!(
        out.starts_with(&format!("continued {} as ", chain[2])),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_failure_of_the_continuation_request_give_the_seeds_texts_and_compact_works_from_idle()
 {
    let gate = Gate::new();
    let s = Scenario::new()
        .config(WINDOW)
        .scripts([
            // A: 95 %, and its continuation request is held, then cancelled.
            reply("full", 9_400, 100),
            Script::Reply(
                ReplyScript::new()
                    .text("never seen")
                    .hold_after(0, gate.clone()),
            ),
            // B: 95 %, and its continuation request fails (400: no retry).
            reply("full", 9_400, 100),
            Script::status(400),
            // C: 85 %, then compacted by hand.
            reply("almost full", 8_400, 100),
            reply("Compacted summary.", 100, 10),
        ])
        .start()
        .await;
    let (fake, d, mut client, work) = (s.fake, s.daemon, s.client, s.work);

    let a = super::util::create(&mut client, work.path(), "first").await;
    fake.wait_for_requests(2, WAIT).await;
    wait_state(&mut client, &a, pb::StateKind::AwaitingContinuation).await;
    let (ok, _, err) = agent_out(&d, &["cancel", &a]).await;
    assert!(ok, "{err}");
    let r = wait_state(&mut client, &a, pb::StateKind::ContextExhausted).await;
    assert_eq!(continuation_messages(&r), [SEED_CANCELLED]);
    gate.open();

    let b = super::util::create(&mut client, work.path(), "second").await;
    let r = wait_state(&mut client, &b, pb::StateKind::ContextExhausted).await;
    assert_eq!(continuation_messages(&r), [SEED_FALLBACK]);
    assert_eq!(fake.requests().len(), 4, "a 400 is not retried");

    // C: compact from Idle, starting from the last reply's usage.
    let c = super::util::create(&mut client, work.path(), "third").await;
    let r = wait_state(&mut client, &c, pb::StateKind::Idle).await;
    assert!(summary_of(&r).context_warning, "85 % is past the warning");
    let (ok, out, err) = agent_out(&d, &["compact", &c]).await;
    assert!(ok, "{err}");
    assert!(out.contains("compacting"), "{out}");
    let r = wait_state(&mut client, &c, pb::StateKind::ContextExhausted).await;
    assert_eq!(continuation_messages(&r), ["Compacted summary."]);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 6);
    assert_eq!(
        last_text(&reqs[5]),
        SEED_PROMPT,
        "no rejected calls to list"
    );
    assert!(!offers_tools(&reqs[5]));
    // Compacting a busy or exhausted conversation is refused clearly.
    let refused = client
        .compact_conversation(pb::CompactConversationRequest {
            conversation_id: c.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    // Continuing a conversation that is not exhausted is refused too.
    let d_id = super::util::create(&mut client, work.path(), "").await;
    let refused = client
        .continue_conversation(pb::ContinueConversationRequest {
            conversation_id: d_id,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(refused.message().contains("not exhausted"), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_the_continuation_request_reissues_it_once_and_stores_one_summary() {
    let s = Scenario::new()
        .config(WINDOW)
        .scripts([
            reply("full", 9_400, 100),
            Script::Reply(
                ReplyScript::new()
                    .deltas(400, "lost ")
                    .pace(Duration::from_millis(10)),
            ),
            reply("The one summary that counts.", 100, 10),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "work until the context is full").await;
    let mut deltas = 0;
    a.until(WAIT, |m| {
        deltas +=
            usize::from(matches!(&m.event, Some(Ev::TextDelta(t)) if t.text.contains("lost")));
        deltas >= 5
    })
    .await;
    d.kill9();
    d.restart().await;
    let mut client = d.client().await;
    let r = wait_state(&mut client, &id, pb::StateKind::ContextExhausted).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3, "the continuation request is re-issued once");
    assert_eq!(
        reqs[1].body["messages"], reqs[2].body["messages"],
        "the re-issued request is the same request"
    );
    assert_eq!(last_text(&reqs[2]), SEED_PROMPT);
    assert_eq!(continuation_messages(&r), ["The one summary that counts."]);
    assert!(
        !r.messages
            .iter()
            .any(|m| text_of_message(m).contains("lost")),
        "nothing of the cut stream is stored"
    );
    // Nothing more happens after the recovery.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.requests().len(), 3);
    assert_eq!(get(&mut client, &id).await.messages.len(), r.messages.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_ends_with_status_3_at_exhaustion_and_says_how_to_go_on() {
    // The reply waits until `agent run` is attached: a notice sent before
    // a client subscribes is not part of its snapshot (the messages and
    // the state are), and this test reads the notice.
    let gate = Gate::new();
    let s = Scenario::new()
        .config(WINDOW)
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .text("Reading.")
                    .tool_use("r1", "read", json!({"path": "x"}))
                    .usage(9_200, 100)
                    .hold_after(0, gate.clone()),
            ),
            reply("Summary for later.", 100, 10),
        ])
        .start()
        .await;
    let (d, work, mut client) = (s.daemon, s.work, s.client);
    let cwd = work.path().display().to_string();
    let run = tokio::process::Command::from(d.agent())
        .args(["run", "--cwd", &cwd, "do the long thing"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    let id = loop {
        let listed = client
            .list_conversations(pb::ListConversationsRequest::default())
            .await
            .unwrap()
            .into_inner();
        if let Some(c) = listed.conversations.first() {
            break c.id.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no conversation");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;
    let others = |clients: &[pb::ClientInfo]| clients.iter().any(|c| c.name != "watcher");
    let first = watcher.next(WAIT).await;
    let attached = matches!(&first.event, Some(Ev::Snapshot(snap)) if others(&snap.clients));
    if !attached {
        watcher
            .until(WAIT, |m| {
                matches!(&m.event, Some(Ev::ClientAttached(a))
                    if a.client.as_ref().is_some_and(|c| c.name != "watcher"))
            })
            .await;
    }
    gate.open();
    let out = run.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("not executed: read"), "{stdout}");
    assert!(stdout.contains("Summary for later."), "{stdout}");
    assert!(stderr.contains("agent continue "), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_follows_automatic_hops_to_the_end_of_the_task() {
    // Two windows fill up; the daemon continues twice by itself; the third
    // conversation ends its turn. `agent run` follows the work from the
    // first conversation to the last and exits as that turn ended; with
    // `max_hops = 2` a third exhaustion would end it with status 3.
    let s = Scenario::new()
        .config(&format!(
            "{WINDOW}\n\n[context]\nauto_continue = true\nmax_hops = 2"
        ))
        .scripts([
            reply("window one is full", 9_500, 10),
            reply("Summary one.", 100, 10),
            reply("window two is full", 9_600, 10),
            reply("Summary two.", 100, 10),
            reply("All done in window three.", 500, 10),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let cwd = work.path().display().to_string();
    let out = tokio::process::Command::from(d.agent())
        .args(["run", "--cwd", &cwd, "a long task"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for seen in [
        "window one is full",
        "continued automatically as",
        "window two is full",
        "All done in window three.",
    ] {
        assert!(
            stdout.contains(seen),
            "{seen:?} missing:\n{stdout}\n{stderr}"
        );
    }
    assert!(
        stdout.find("window two").unwrap() < stdout.find("All done").unwrap(),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_an_automatic_hop_makes_the_continuation_once() {
    let gate = Gate::new();
    let s = Scenario::new()
        .config(&format!("{WINDOW}\n\n[context]\nauto_continue = true"))
        .scripts([
            reply("window one is full", 9_500, 10),
            reply("Summary one.", 100, 10),
            // The continuation's first request: held, and the daemon dies.
            Script::Reply(
                ReplyScript::new()
                    .text("never seen")
                    .hold_after(0, gate.clone()),
            ),
            reply("Going on after the restart.", 100, 10),
        ])
        .conversation("a long task")
        .start()
        .await;
    let (fake, mut d, id) = (s.fake, s.daemon, s.id);
    fake.wait_for_requests(3, WAIT).await;
    d.kill9();
    gate.open();
    d.restart().await;
    let mut client = d.client().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let next = loop {
        let r = get(&mut client, &id).await;
        let next = summary_of(&r).continued_as.clone();
        if !next.is_empty() {
            break next;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never marked continued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let r = wait_state(&mut client, &next, pb::StateKind::Idle).await;
    assert_eq!(summary_of(&r).parent_conversation_id, id);
    let listed = super::util::listed(&mut client).await;
    assert_eq!(listed.len(), 2, "one continuation, not two: {listed:#?}");
    let reqs = fake.requests();
    assert_eq!(
        reqs.len(),
        4,
        "the continuation's first request is re-issued once"
    );
    assert_eq!(reqs[2].body["messages"], reqs[3].body["messages"]);
    assert_eq!(
        r.messages
            .iter()
            .filter(|m| m.kind == pb::MessageKind::Continued as i32)
            .count(),
        1
    );
}

/// A task of `rounds` reads of an 8.7 KB file in a 40,000-token window,
/// with `[context] prune_tool_outputs` as given, against a fake that
/// counts usage from the request bodies as a prompt-caching server would.
/// Returns the rounds done before the task ended or the context was
/// exhausted, whether it was exhausted, the share of input read from the
/// cache, and the largest request (tokens).
async fn read_task(prune: bool, rounds: usize) -> (usize, bool, f64, u64) {
    let responder: agent_tests::fake_llm::Responder = std::sync::Arc::new(move |body: &Value| {
        let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        if !tools {
            return Script::text("Task: read big.txt again and again. Next: go on.");
        }
        let done = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count();
        if done < rounds {
            Script::Reply(ReplyScript::new().tool_use(
                &format!("r{done}"),
                "read",
                // A different limit each time, or the doom-loop check asks.
                json!({"path": "big.txt", "limit": 1000 + done}),
            ))
        } else {
            Script::text("Read it all.")
        }
    });
    let s = Scenario::new()
        .config(&format!(
            "[models.\"claude-test\"]\ncontext_window = 40000\n\n[context]\nprune_tool_outputs = {prune}"
        ))
        .responder(responder)
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let line = "the quick brown fox jumps over the lazy dog, again and again, line after line";
    let text: String = (0..100).map(|i| format!("{line} {i}\n")).collect();
    std::fs::write(s.work.path().join("big.txt"), text).unwrap();
    fake.emulate_prompt_cache();
    send(&mut client, &id, "read big.txt again and again").await;
    let deadline = std::time::Instant::now() + WAIT;
    let end = loop {
        let r = get(&mut client, &id).await;
        let kind = summary_of(&r).state.as_ref().map(|s| s.kind);
        if kind == Some(pb::StateKind::Idle as i32)
            || kind == Some(pb::StateKind::ContextExhausted as i32)
        {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the task did not end: {kind:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Every request, pruned or not, is a valid chain.
    for r in fake.requests() {
        assert_valid_chain(&r);
    }
    let exhausted =
        summary_of(&end).state.as_ref().unwrap().kind == pb::StateKind::ContextExhausted as i32;
    let results = end
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter(
            |b| matches!(&b.block, Some(pb::content_block::Block::ToolResult(r)) if !r.is_error),
        )
        .count();
    // Every output is whole in the transcript, whatever requests sent.
    for m in &end.messages {
        for b in &m.content {
            if let Some(pb::content_block::Block::ToolResult(r)) = &b.block
                && !r.is_error
            {
                assert!(r.content.contains("line after line 99"), "{}", r.content);
            }
        }
    }
    let usage = summary_of(&end).usage.unwrap();
    let input =
        usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
    let largest = fake
        .requests()
        .iter()
        .map(|r| r.body.to_string().len() as u64 / 4)
        .max()
        .unwrap();
    (
        results,
        exhausted,
        usage.cache_read_input_tokens as f64 / input as f64,
        largest,
    )
}

/// Pruning old tool outputs puts off the summary (issue 15, point 2), and
/// this is the measurement the issue asks for: the same task, with and
/// without it, in one run. Without pruning the 40,000-token window is
/// exhausted after a dozen reads; with it, 60 reads finish in one window,
/// and most of the input is still read from the prompt cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_old_tool_outputs_puts_off_the_summary() {
    let (without, exhausted, share_without, largest_without) = read_task(false, 60).await;
    let (with, exhausted_with, share_with, largest_with) = read_task(true, 60).await;
    eprintln!(
        "40,000-token window, reads of 8.7 KB: without pruning {without} reads, then {}; cache read {:.1} %, largest request {largest_without} tokens",
        if exhausted { "exhausted" } else { "done" },
        share_without * 100.0
    );
    eprintln!(
        "with pruning {with} reads, {}; cache read {:.1} %, largest request {largest_with} tokens",
        if exhausted_with { "exhausted" } else { "done" },
        share_with * 100.0
    );
    assert!(exhausted, "without pruning the window fills");
    assert!(without < 20, "{without}");
    assert!(!exhausted_with, "with pruning the task ends in its window");
    assert_eq!(with, 60);
    assert!(largest_with < 36_000, "{largest_with}");
    assert!(
        share_with > 0.6,
        "pruning costs the cache only at each cut: {share_with}"
    );
}
