//! The web (issue 42 point 3): `web_fetch` of a page from a local HTTP
//! server comes to the model as Markdown; a loopback address is refused
//! unless a rule names its host (a bare `web_fetch` rule, or an "allow
//! once", does not); a host a rule allows is fetched without a permission
//! request, one no rule allows asks with the host in the request; and a
//! web search's blocks (`server_tool_use`, `web_search_tool_result`) go
//! back to the model unchanged, never answered as calls of ours.

use super::util::{done, get, result_of, send, tool, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

/// A page the local server serves at every path.
const PAGE: &str = "<!doctype html><html><head><title>Doc</title><script>var x = 1;</script>\
    </head><body><h1>Serde guide</h1><p>Derive <code>Serialize</code> and \
    <a href=\"/more\">read more</a>.</p><ul><li>fast</li><li>safe</li></ul></body></html>";

/// Serves [`PAGE`] as HTML on 127.0.0.1; returns the port.
fn serve() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{PAGE}",
                PAGE.len()
            );
        }
    });
    port
}

fn fetch(id: &str, url: &str) -> Script {
    tool(id, "web_fetch", json!({ "url": url }))
}

/// The text of the tool result for `id` the model got, and whether it is
/// an error.
fn result(fake: &agent_tests::fake_llm::FakeLlm, n: usize, id: &str) -> (String, bool) {
    let requests = fake.requests();
    let r = result_of(&requests[n], id);
    (
        r["content"].as_str().unwrap_or_default().to_string(),
        r["is_error"] == true,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_an_allowed_host_is_fetched_as_markdown_without_asking() {
    let port = serve();
    let url = format!("http://localhost:{port}/guide");
    let s = Scenario::new()
        .scripts([fetch("f1", &url), done()])
        .conversation("read the guide")
        .allow(&["web_fetch(domain:localhost)"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let idle = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert!(idle.pending_permission.is_none());
    fake.wait_for_requests(2, WAIT).await;
    let (text, is_error) = result(&fake, 1, "f1");
    assert!(!is_error, "{text}");
    assert!(text.starts_with(&format!("URL: {url}\n")), "{text}");
    assert!(text.contains("# Serde guide"), "{text}");
    assert!(
        text.contains("Derive `Serialize` and [read more](/more)."),
        "{text}"
    );
    assert!(text.contains("fast") && text.contains("safe"), "{text}");
    assert!(!text.contains("<h1>") && !text.contains("var x"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_is_refused_unless_a_rule_names_it() {
    let port = serve();
    // Each call its own page: the same call three times is a doom loop.
    let url = |n: u8| format!("http://127.0.0.1:{port}/guide{n}");
    let s = Scenario::new()
        .scripts([
            fetch("f1", &url(1)),
            fetch("f2", &url(2)),
            fetch("f3", &url(3)),
            done(),
        ])
        .conversation("read the guide")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut answer = async |decision: pb::PermissionDecision| {
        let waiting = wait_state(&mut client, &id, pb::StateKind::AwaitingPermission).await;
        let ask = waiting.pending_permission.unwrap();
        assert_eq!(ask.tool_name, "web_fetch");
        assert_eq!(ask.kind(), pb::ToolKind::Fetch);
        assert!(ask.reason.contains("127.0.0.1"), "{}", ask.reason);
        assert_eq!(ask.suggested_rule, "web_fetch(domain:127.0.0.1)");
        client
            .answer_permission(pb::AnswerPermissionRequest {
                conversation_id: id.clone(),
                request_id: ask.request_id,
                decision: decision as i32,
                ..Default::default()
            })
            .await
            .unwrap();
    };
    // No rule: asked; allowed once, the address is still refused.
    answer(pb::PermissionDecision::AllowOnce).await;
    fake.wait_for_requests(2, WAIT).await;
    let (text, is_error) = result(&fake, 1, "f1");
    assert!(is_error, "{text}");
    assert!(text.contains("a loopback address"), "{text}");
    assert!(text.contains("allow web_fetch(domain:127.0.0.1)"), "{text}");
    // "Always" adds the rule that names the host: fetched.
    answer(pb::PermissionDecision::AllowAlways).await;
    fake.wait_for_requests(3, WAIT).await;
    let (text, is_error) = result(&fake, 2, "f2");
    assert!(!is_error && text.contains("# Serde guide"), "{text}");
    // And from then on without asking.
    let idle = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert!(idle.pending_permission.is_none());
    let (text, is_error) = result(&fake, 3, "f3");
    assert!(!is_error && text.contains("# Serde guide"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_rule_fetches_without_asking_but_never_reaches_loopback() {
    let port = serve();
    let s = Scenario::new()
        .scripts([fetch("f1", &format!("http://127.0.0.1:{port}/")), done()])
        .conversation("read it")
        .allow(&["web_fetch"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    fake.wait_for_requests(2, WAIT).await;
    let (text, is_error) = result(&fake, 1, "f1");
    assert!(is_error && text.contains("a loopback address"), "{text}");
}

/// The server tool's blocks of the assistant messages of a request body.
fn server_blocks(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "server_tool_use" || b["type"] == "web_search_tool_result")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_search_blocks_go_back_unchanged() {
    let search = ReplyScript::new()
        .web_search(
            "srvtoolu_01",
            "serde derive",
            &[
                ("https://serde.rs/derive.html", "Derive"),
                ("https://docs.rs/serde", "serde"),
            ],
        )
        .text("Serde derives it.");
    let s = Scenario::new()
        .config("[web]\nsearch = true\nsearch_max_uses = 2")
        .scripts([search.into(), done()])
        .conversation("how does serde derive work?")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let first = &fake.wait_for_requests(1, WAIT).await[0];
    assert_eq!(
        first.body["tools"][0],
        json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 2})
    );
    // The search is no call of ours: the turn ended with the reply.
    let shown = get(&mut client, &id).await;
    assert_eq!(shown.messages.len(), 2, "{:?}", shown.messages);
    let lines: Vec<String> = shown.messages[1]
        .content
        .iter()
        .filter_map(|b| match &b.block {
            Some(pb::content_block::Block::ServerTool(s)) => Some(s.summary.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(lines, ["", "searched: serde derive (2 results)"]);

    send(&mut client, &id, "thanks").await;
    let requests = fake.wait_for_requests(2, WAIT).await;
    let expected = vec![
        json!({"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search",
               "input": {"query": "serde derive"}}),
        json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
            {"type": "web_search_result", "url": "https://serde.rs/derive.html", "title": "Derive",
             "encrypted_content": "RW5jcnlwdGVk0", "page_age": null},
            {"type": "web_search_result", "url": "https://docs.rs/serde", "title": "serde",
             "encrypted_content": "RW5jcnlwdGVk1", "page_age": null}]}),
    ];
    assert_eq!(server_blocks(&requests[1].body), expected);
    let tool_results = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .count();
    assert_eq!(tool_results, 0, "nothing answers a server tool's call");
}
