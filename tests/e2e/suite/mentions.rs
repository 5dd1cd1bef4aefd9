//! `@path` mentions (issue 42 point 7): a file a message mentions reaches
//! the model as its own block with its path, the user's text unchanged; a
//! path outside the conversation's directories gets a note, never the
//! content; a word that names no file stays text; an image goes as the
//! image `read` makes; and the stored transcript carries the blocks after
//! a restart.

use agent_tests::fake_llm::Script;
use agent_tests::harness::Scenario;
use serde_json::Value;

use super::util::{PIXEL_PNG, get, send, text_of_message, wait_state};
use agent_proto::v1 as pb;

/// The content blocks of the last user message a request carried.
fn last_user_blocks(body: &Value) -> Vec<Value> {
    super::util::last_content(body)
}

fn texts(blocks: &[Value]) -> Vec<String> {
    blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mentioned_file_is_attached_and_an_outside_one_is_not() {
    let s = Scenario::new()
        .scripts([Script::text("seen"), Script::text("seen again")])
        .config("[models.\"claude-test\"]\nimages = true")
        .conversation("")
        .start()
        .await;
    let (fake, mut d, mut client, work, id) = (s.fake, s.daemon, s.client, s.work, s.id);
    std::fs::create_dir_all(work.path().join("src")).unwrap();
    std::fs::write(
        work.path().join("src/a.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    std::fs::write(work.path().join("shot.png"), PIXEL_PNG).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-CONTENT\n").unwrap();
    let text = format!(
        "explain @src/a.rs, look at @shot.png, not @{} and ask @someone",
        secret.display()
    );
    send(&mut client, &id, &text).await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;

    let reqs = fake.requests();
    let blocks = last_user_blocks(&reqs[0].body);
    let t = texts(&blocks);
    // The user's text first, unchanged; then one block per file.
    assert_eq!(t[0], text);
    assert_eq!(
        t[1],
        "Contents of src/a.rs:\n     1\tfn main() {\n     2\t    println!(\"hi\");\n     3\t}\n"
    );
    assert_eq!(t[2], "Image shot.png:");
    assert!(
        blocks.iter().any(|b| b["type"] == "image"),
        "the image goes as an image block: {blocks:#?}"
    );
    assert!(
        t[3].starts_with(&format!("[{} was not attached: path", secret.display()))
            && t[3].contains("is outside the working directory"),
        "{}",
        t[3]
    );
    assert_eq!(t.len(), 4, "`@someone` names no file: {t:#?}");
    assert!(
        !reqs[0].body.to_string().contains("TOP-SECRET-CONTENT"),
        "the outside file's content never reaches the model"
    );

    // The stored transcript carries the blocks: after a restart, the next
    // request sends them again.
    d.kill9();
    d.restart().await;
    let mut client = d.client().await;
    let r = get(&mut client, &id).await;
    let first = text_of_message(&r.messages[0]);
    assert!(first.contains("Contents of src/a.rs:"), "{first}");
    send(&mut client, &id, "and now?").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    let again = reqs.last().unwrap().body["messages"][0]["content"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(texts(&again)[1], t[1]);
}

/// A message queued while a turn runs attaches its files too: read when it
/// is queued, delivered with it at the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_message_attaches_its_files() {
    use agent_tests::fake_llm::{Gate, ReplyScript};
    let gate = Gate::new();
    let s = Scenario::new()
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .text("working")
                    .hold_after(0, gate.clone()),
            ),
            Script::text("read both"),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    std::fs::write(work.path().join("b.txt"), "queued file\n").unwrap();
    send(&mut client, &id, "start").await;
    wait_state(&mut client, &id, pb::StateKind::LlmRequesting).await;
    client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "also @b.txt".into(),
            queue_if_busy: true,
            ..Default::default()
        })
        .await
        .unwrap();
    gate.open();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    let t = texts(&last_user_blocks(&reqs.last().unwrap().body));
    assert!(
        t.contains(&"also @b.txt".to_string())
            && t.contains(&"Contents of b.txt:\n     1\tqueued file\n".to_string()),
        "{t:#?}"
    );
}
