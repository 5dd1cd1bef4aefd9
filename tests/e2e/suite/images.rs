//! Images in user messages (issue 15, point 6; Done-when 3): `agent run
//! --image` reaches the model as a valid Anthropic image block and as an
//! OpenAI-compatible `image_url` part (the fake LLM decodes the base64 and
//! checks the magic bytes); an oversized image and a file that is no image
//! are refused with a clear error and nothing stored; export / import
//! carries the bytes and round-trips them byte for byte.

use super::util::{PIXEL_PNG, agent_out, get, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, TestDaemon};
use std::path::Path;

/// A GIF header of 640×480, padded to `len` bytes.
fn gif(len: usize) -> Vec<u8> {
    let mut b = b"GIF89a\x80\x02\xe0\x01\0\0\0".to_vec();
    b.resize(len, 0);
    b
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

/// The conversation id `agent run` printed ("conversation <id>").
fn created_id(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("conversation "))
        .unwrap_or_else(|| panic!("no conversation id in: {stderr}"))
        .trim()
        .to_string()
}

/// Stops the daemon and opens its store: (conversations, distinct images).
async fn stored(d: &mut TestDaemon) -> (usize, usize) {
    d.terminate().await;
    let store = agentd::Store::open(&d.data_dir.join("db")).unwrap();
    (store.conversation_ids().unwrap().len(), store.image_count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_from_agent_run_reaches_anthropic_as_a_base64_image_block() {
    let s = Scenario::new()
        .scripts([Script::text("A pixel."), Script::text("The same pixel.")])
        .start()
        .await;
    let (fake, mut d, mut client) = (s.fake, s.daemon, s.client);
    let cwd = s.work.path().display().to_string();
    let file = write(s.work.path(), "pixel.png", &PIXEL_PNG);
    let (ok, _, err) = agent_out(
        &d,
        &["run", "--cwd", &cwd, "--image", &file, "what is this?"],
    )
    .await;
    assert!(ok, "{err}");
    let id = created_id(&err);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.image_error, None);
    assert_eq!(r.images.len(), 1, "{:#}", r.body["messages"]);
    assert_eq!(r.images[0].media_type, "image/png");
    assert_eq!(r.images[0].bytes, PIXEL_PNG, "the bytes arrive intact");
    assert_eq!(r.images[0].at, "messages[0].content[0]");
    let content = &r.body["messages"][0]["content"];
    assert_eq!(content[0]["type"], "image");
    assert_eq!(content[0]["source"]["type"], "base64");
    assert_eq!(content[1]["type"], "text");
    assert_eq!(content[1]["text"], "what is this?");

    // The transcript refers to it; `show` and `--json` describe it.
    let (ok, shown, err) = agent_out(&d, &["show", &id]).await;
    assert!(ok, "{err}");
    assert!(shown.contains("[image: png 1×1, 70 B]"), "{shown}");
    let (ok, json, err) = agent_out(&d, &["show", "--json", &id]).await;
    assert!(ok, "{err}");
    assert!(
        json.contains("\"description\"") && json.contains("png 1×1, 70 B"),
        "{json}"
    );
    assert!(!json.contains("data_base64"), "no bytes outside exports");

    // The same image again, with `agent send`: stored once, sent twice.
    let (ok, _, err) = agent_out(&d, &["send", "--image", &file, &id, "and now?"]).await;
    assert!(ok, "{err}");
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].images.len(), 2);
    assert!(requests[1].images.iter().all(|i| i.bytes == PIXEL_PNG));
    let (conversations, images) = stored(&mut d).await;
    assert_eq!((conversations, images), (1, 1), "one image, stored once");
}

/// A message of only an image (issue 40, point 4): the service and the
/// core accept it, and so must every layer between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_of_only_an_image_is_sent() {
    let s = Scenario::new()
        .scripts([Script::text("hello"), Script::text("A pixel.")])
        .conversation("hi")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: String::new(),
            images: vec![pb::ImageUpload {
                data: PIXEL_PNG.to_vec(),
                name: "pixel.png".into(),
            }],
            ..Default::default()
        })
        .await
        .unwrap_or_else(|status| panic!("an image alone was refused: {status:?}"));
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let r = &requests[1];
    assert_eq!(r.image_error, None);
    assert_eq!(r.images.len(), 1, "{:#}", r.body["messages"]);
    assert_eq!(r.images[0].bytes, PIXEL_PNG);
    let last = &r.body["messages"][2]["content"];
    assert_eq!(last[0]["type"], "image", "{last:#}");
    assert!(
        last.as_array()
            .is_some_and(|blocks| blocks.iter().all(|b| b["type"] != "text")),
        "no empty text block next to the image: {last:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_reaches_an_openai_compatible_server_as_a_data_url_part() {
    let s = Scenario::new()
        .config("provider = \"openai\"")
        .script(Script::text("A pixel."))
        .start()
        .await;
    let (fake, d, mut client) = (s.fake, s.daemon, s.client);
    let cwd = s.work.path().display().to_string();
    let file = write(s.work.path(), "pixel.png", &PIXEL_PNG);
    let (ok, _, err) = agent_out(&d, &["run", "--cwd", &cwd, "--image", &file, "describe"]).await;
    assert!(ok, "{err}");
    let id = created_id(&err);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.image_error, None);
    assert_eq!(r.images.len(), 1);
    assert_eq!(r.images[0].bytes, PIXEL_PNG);
    let user = r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    let parts = user["content"].as_array().unwrap();
    assert_eq!(parts[0]["type"], "image_url");
    assert!(
        parts[0]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,iVBORw0KGgo")
    );
    assert_eq!(
        parts[1],
        serde_json::json!({"type": "text", "text": "describe"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_image_is_refused_and_nothing_is_stored() {
    let s = Scenario::new()
        .config("[images]\nmax_bytes = 1000")
        .start()
        .await;
    let (fake, mut d) = (s.fake, s.daemon);
    let cwd = s.work.path().display().to_string();
    let big = write(s.work.path(), "big.gif", &gif(1001));
    let (ok, _, err) = agent_out(&d, &["run", "--cwd", &cwd, "--image", &big, "look"]).await;
    assert!(!ok, "refused");
    assert!(
        err.contains("image 1 (big.gif): the image is 1001 bytes")
            && err.contains("more than the limit of 1000 bytes"),
        "a clear error: {err}"
    );
    // At the limit it is taken.
    let fits = write(s.work.path(), "fits.gif", &gif(1000));
    fake.push(Script::text("ok"));
    let (ok, _, err) = agent_out(&d, &["run", "--cwd", &cwd, "--image", &fits, "look"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        fake.requests().len(),
        1,
        "only the image that fits was sent"
    );
    assert_eq!(fake.requests()[0].images[0].bytes.len(), 1000);
    let (conversations, images) = stored(&mut d).await;
    assert_eq!(
        (conversations, images),
        (1, 1),
        "the refused run left nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_no_image_is_refused_by_its_content_and_nothing_is_stored() {
    let s = Scenario::new()
        .script(Script::text("hello"))
        .conversation("hi")
        .start()
        .await;
    let (fake, mut d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let before = get(&mut client, &id).await.messages;
    let cwd = s.work.path().display().to_string();
    // Named .png, but text inside.
    let fake_png = write(s.work.path(), "fake.png", b"this is not a png at all");
    let (ok, _, err) = agent_out(&d, &["run", "--cwd", &cwd, "--image", &fake_png, "look"]).await;
    assert!(!ok);
    assert!(
        err.contains("image 1 (fake.png): not a PNG, JPEG, GIF or WebP image"),
        "{err}"
    );
    let (ok, _, err) = agent_out(&d, &["send", "--image", &fake_png, &id, "look"]).await;
    assert!(!ok);
    assert!(err.contains("not a PNG, JPEG, GIF or WebP image"), "{err}");
    // Over gRPC: INVALID_ARGUMENT, and the second image is named.
    let refused = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "two".into(),
            images: vec![
                pb::ImageUpload {
                    data: PIXEL_PNG.to_vec(),
                    name: "ok.png".into(),
                },
                pb::ImageUpload {
                    data: b"GIF88a".to_vec(),
                    name: "odd.gif".into(),
                },
            ],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused
            .message()
            .starts_with("image 2 (odd.gif): not a PNG"),
        "{refused:?}"
    );
    assert_eq!(
        get(&mut client, &id).await.messages,
        before,
        "nothing appended"
    );
    assert_eq!(fake.requests().len(), 1, "the model saw none of it");
    let (conversations, images) = stored(&mut d).await;
    assert_eq!(
        (conversations, images),
        (1, 0),
        "no image, no new conversation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_and_import_round_trip_images_byte_for_byte() {
    let s = Scenario::new()
        .scripts([Script::text("A pixel."), Script::text("Still a pixel.")])
        .start()
        .await;
    let (d, mut client) = (s.daemon, s.client);
    let cwd = s.work.path().display().to_string();
    let png = write(s.work.path(), "pixel.png", &PIXEL_PNG);
    let gif_bytes = gif(300);
    let gif_file = write(s.work.path(), "screen.gif", &gif_bytes);
    let (ok, _, err) = agent_out(
        &d,
        &[
            "run",
            "--cwd",
            &cwd,
            "--image",
            &png,
            "--image",
            &gif_file,
            "two images",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let id = created_id(&err);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let original = get(&mut client, &id).await;

    let (ok, exported, err) = agent_out(&d, &["export", &id]).await;
    assert!(ok, "{err}");
    assert!(
        exported.contains("data_base64"),
        "the export carries the bytes"
    );
    let file = d.dir.path().join("backup.jsonl");
    std::fs::write(&file, &exported).unwrap();

    let s2 = Scenario::new().script(Script::text("seen")).start().await;
    let (fake2, d2, mut client2) = (s2.fake, s2.daemon, s2.client);
    let (ok, _, err) = agent_out(&d2, &["import", &file.display().to_string()]).await;
    assert!(ok, "{err}");
    let restored = get(&mut client2, &id).await;
    assert_eq!(restored.messages, original.messages, "messages round-trip");
    // The bytes come back identical, from the second daemon's own store.
    let mut stream = client2
        .export_conversations(pb::ExportConversationsRequest {
            conversation_ids: vec![id.clone()],
        })
        .await
        .unwrap()
        .into_inner();
    let again = stream.message().await.unwrap().unwrap();
    let mut datas: Vec<Vec<u8>> = again.images.iter().map(|i| i.data.clone()).collect();
    datas.sort();
    let mut expected = vec![PIXEL_PNG.to_vec(), gif_bytes.clone()];
    expected.sort();
    assert_eq!(datas, expected, "byte-identical after export and import");
    // And the imported conversation sends them to its model.
    let (ok, _, err) = agent_out(&d2, &["send", &id, "again"]).await;
    assert!(ok, "{err}");
    wait_state(&mut client2, &id, pb::StateKind::Idle).await;
    let r = &fake2.requests()[0];
    assert_eq!(r.image_error, None);
    assert_eq!(r.images.len(), 2);
    assert_eq!(r.images[0].bytes, PIXEL_PNG);
    assert_eq!(r.images[1].bytes, gif_bytes);

    // A damaged export (bytes that do not match their SHA-256) is refused.
    let damaged = exported.replace(&base64_of(&PIXEL_PNG), &base64_of(&gif(70)));
    assert_ne!(damaged, exported);
    let other = d2.dir.path().join("damaged.jsonl");
    std::fs::write(&other, damaged.replace(&id, &fresh_id(&id))).unwrap();
    let (ok, _, err) = agent_out(&d2, &["import", &other.display().to_string()]).await;
    assert!(!ok);
    assert!(err.contains("the export is damaged"), "{err}");
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Another valid ULID than `id` (its last character changed).
fn fresh_id(id: &str) -> String {
    let mut s = id.to_string();
    let last = s.pop().unwrap();
    s.push(if last == 'Z' { 'Y' } else { 'Z' });
    s
}

/// `read` of an image file, for a model that takes images (the config says
/// so for the test's model): the image reaches the model with the tool
/// result, as an image block inside the `tool_result` (Anthropic) or as an
/// `image_url` part of a user message right after the tool message
/// (OpenAI-compatible); the transcript keeps a reference and the store the
/// bytes, once. A model that does not take images gets an error result
/// that names it, and the request carries no image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_gives_an_image_file_to_a_model_that_takes_images() {
    use super::util::{send, tool};
    use serde_json::json;
    for (provider, takes_images) in [("anthropic", true), ("openai", true), ("anthropic", false)] {
        let mut config = format!("provider = \"{provider}\"");
        if takes_images {
            config.push_str("\n\n[models.\"claude-test\"]\nimages = true");
        }
        let s = Scenario::new()
            .config(&config)
            .scripts([
                tool("r1", "read", json!({"path": "shot.bin"})),
                Script::text("A pixel."),
            ])
            .conversation("")
            .start()
            .await;
        let (fake, mut d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
        // Named by its content, not its extension.
        write(s.work.path(), "shot.bin", &PIXEL_PNG);
        send(&mut client, &id, "look at shot.bin").await;
        wait_state(&mut client, &id, pb::StateKind::Idle).await;
        let requests = fake.requests();
        assert_eq!(requests.len(), 2, "{provider}");
        let r = &requests[1];
        assert_eq!(r.image_error, None, "{provider}");
        let messages = r.body["messages"].as_array().unwrap();
        if !takes_images {
            assert!(r.images.is_empty());
            let result = &messages[2]["content"][0];
            assert_eq!(result["is_error"], true, "{result:#}");
            assert!(
                result["content"].as_str().unwrap().contains(
                    "shot.bin is a png image, and the model claude-test does not take images"
                ),
                "{result:#}"
            );
            continue;
        }
        assert_eq!(r.images.len(), 1, "{provider}: {:#}", r.body["messages"]);
        assert_eq!(
            r.images[0].bytes, PIXEL_PNG,
            "{provider}: the bytes arrive intact"
        );
        let said = "shot.bin is an image (png 1×1, 70 B); it follows.";
        if provider == "anthropic" {
            assert_eq!(r.images[0].at, "messages[2].content[0].content[1]");
            let result = &messages[2]["content"][0];
            assert_eq!(result["type"], "tool_result");
            assert_eq!(result["content"][0], json!({"type": "text", "text": said}));
        } else {
            // system, user, assistant (the call), tool, user (its image).
            assert_eq!(messages[3]["role"], "tool");
            assert_eq!(messages[3]["content"], said);
            assert_eq!(messages[4]["role"], "user");
            assert_eq!(
                messages[4]["content"][0]["text"],
                "The image(s) the tool call r1 returned:"
            );
            assert_eq!(r.images[0].at, "messages[4].content[1]");
        }
        // The transcript describes it; the store has it once.
        let (ok, json, err) = agent_out(&d, &["show", "--json", &id]).await;
        assert!(ok, "{err}");
        assert!(json.contains("png 1×1, 70 B"), "{json}");
        let (_, images) = stored(&mut d).await;
        assert_eq!(images, 1, "{provider}");
        // After a restart the bytes come from the store.
        d.restart().await;
        let mut client = d.client().await;
        fake.push(Script::text("Still a pixel."));
        send(&mut client, &id, "and after a restart?").await;
        wait_state(&mut client, &id, pb::StateKind::Idle).await;
        let r = &fake.requests()[2];
        assert_eq!(r.image_error, None, "{provider}");
        assert_eq!(r.images.len(), 1, "{provider}");
        assert_eq!(r.images[0].bytes, PIXEL_PNG, "{provider}");
    }
}
