//! The fake LLM driven over HTTP the way a provider client drives it: a
//! two-round tool loop, then the assertions a daemon test makes on the
//! requests it received.

use agent_tests::fake_llm::{FakeLlm, ReplyScript, Script, parse_sse};
use agent_tests::harness::WAIT;
use serde_json::{Value, json};

/// What a streaming client assembles from one Anthropic reply.
#[derive(Debug, Default)]
struct Assembled {
    text: String,
    tool_uses: Vec<(String, String, Value)>,
    stop_reason: String,
}

/// Sends one streaming Messages request and assembles the reply as a
/// provider client would: text deltas appended, tool input JSON collected
/// per block and parsed at `content_block_stop`.
async fn ask(llm: &FakeLlm, messages: &Value) -> Assembled {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", llm.base_url()))
        .header("x-api-key", "test-key")
        .header("anthropic-version", "2023-06-01")
        .json(&json!({
            "model": "claude-test",
            "max_tokens": 1024,
            "stream": true,
            "messages": messages,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let mut out = Assembled::default();
    let mut open_tool: Option<(String, String, String)> = None;
    for event in parse_sse(&body) {
        let data = event.json();
        match event.event.as_deref() {
            Some("content_block_start") if data["content_block"]["type"] == "tool_use" => {
                let block = &data["content_block"];
                open_tool = Some((
                    block["id"].as_str().unwrap().to_string(),
                    block["name"].as_str().unwrap().to_string(),
                    String::new(),
                ));
            }
            Some("content_block_delta") => match data["delta"]["type"].as_str().unwrap() {
                "text_delta" => out.text.push_str(data["delta"]["text"].as_str().unwrap()),
                "input_json_delta" => {
                    let (_, _, json) = open_tool.as_mut().unwrap();
                    json.push_str(data["delta"]["partial_json"].as_str().unwrap());
                }
                other => panic!("unexpected delta {other}"),
            },
            Some("content_block_stop") => {
                if let Some((id, name, json)) = open_tool.take() {
                    out.tool_uses
                        .push((id, name, serde_json::from_str(&json).unwrap()));
                }
            }
            Some("message_delta") => {
                out.stop_reason = data["delta"]["stop_reason"].as_str().unwrap().to_string();
            }
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn a_tool_loop_over_http() {
    let llm = FakeLlm::start().await;
    llm.push_all([
        ReplyScript::new()
            .text("I will list the files.")
            .tool_use(
                "toolu_01",
                "bash",
                json!({"command": "ls -la", "timeout": 5000}),
            )
            .into(),
        Script::text("There are two files."),
    ]);

    let mut messages = json!([{"role": "user", "content": "what is here?"}]);
    let first = ask(&llm, &messages).await;
    assert_eq!(first.text, "I will list the files.");
    assert_eq!(first.stop_reason, "tool_use");
    assert_eq!(
        first.tool_uses,
        [(
            "toolu_01".to_string(),
            "bash".to_string(),
            json!({"command": "ls -la", "timeout": 5000})
        )]
    );

    let messages_list = messages.as_array_mut().unwrap();
    messages_list.push(json!({"role": "assistant", "content": [
        {"type": "text", "text": first.text},
        {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": first.tool_uses[0].2},
    ]}));
    messages_list.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt\nb.txt"},
    ]}));
    let second = ask(&llm, &messages).await;
    assert_eq!(second.text, "There are two files.");
    assert_eq!(second.stop_reason, "end_turn");

    // What a daemon test asserts: the tool_result went back, in a user message.
    let requests = llm.wait_for_requests(2, WAIT).await;
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.path == "/v1/messages"));
    let last = &requests[1].body["messages"];
    assert_eq!(last[2]["role"], "user");
    assert_eq!(last[2]["content"][0]["tool_use_id"], "toolu_01");
    assert_eq!(llm.scripts_left(), 0);
}

#[tokio::test]
async fn retries_see_the_scripted_failures_first() {
    let llm = FakeLlm::start().await;
    llm.push_all([
        Script::overloaded(),
        Script::rate_limited(Some("0")),
        Script::text("finally"),
    ]);
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    let mut request_ids = Vec::new();
    loop {
        let response = client
            .post(format!("{}/v1/messages", llm.base_url()))
            .json(&json!({"model": "claude-test", "stream": true, "messages": []}))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
        request_ids.push(
            response.headers()["request-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
        if response.status() == 200 {
            break;
        }
    }
    assert_eq!(statuses, [529, 429, 200]);
    assert_eq!(request_ids, ["req_fake_1", "req_fake_2", "req_fake_3"]);
    assert_eq!(llm.requests().len(), 3);
}
