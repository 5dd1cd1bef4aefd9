//! The fake LLM checked over real HTTP with a plain client.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use super::*;

fn anthropic_request(stream: bool) -> serde_json::Value {
    json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    })
}

fn openai_request() -> serde_json::Value {
    json!({
        "model": "gpt-test",
        "stream": true,
        "messages": [{"role": "user", "content": "hi"}],
    })
}

async fn post(llm: &FakeLlm, path: &str, body: &serde_json::Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", llm.base_url()))
        .header("x-api-key", "test-key")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

fn names(events: &[SseEvent]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e.event.as_deref().unwrap_or(""))
        .collect()
}

/// Reads the body until it holds `n` complete events (or ends/fails).
/// Returns the text read and whether the body failed.
async fn read_events(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    buffer: &mut String,
    n: usize,
) -> Option<reqwest::Error> {
    while buffer.matches("\n\n").count() < n {
        match stream.next().await {
            Some(Ok(chunk)) => buffer.push_str(std::str::from_utf8(&chunk).unwrap()),
            Some(Err(e)) => return Some(e),
            None => return None,
        }
    }
    None
}

#[tokio::test]
async fn text_reply_is_anthropic_sse_byte_for_byte() {
    let llm = FakeLlm::start().await;
    llm.push(ReplyScript::new().text("Hello world").usage(12, 3).into());
    let response = post(&llm, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type"), Some("text/event-stream"));
    assert_eq!(header(&response, "request-id"), Some("req_fake_1"));
    let body = response.text().await.unwrap();
    assert_eq!(body, HELLO_WORLD.concat());
}

/// The reply to `text("Hello world").usage(12, 3)`, event by event.
const HELLO_WORLD: [&str; 7] = [
    concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_fake_1","type":"message","role":"assistant","content":[],"model":"claude-test","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}"#,
        "\n\n",
    ),
    concat!(
        "event: content_block_start\n",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        "\n\n",
    ),
    concat!(
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello "}}"#,
        "\n\n",
    ),
    concat!(
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"world"}}"#,
        "\n\n",
    ),
    concat!(
        "event: content_block_stop\n",
        r#"data: {"type":"content_block_stop","index":0}"#,
        "\n\n",
    ),
    concat!(
        "event: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}"#,
        "\n\n",
    ),
    concat!(
        "event: message_stop\n",
        r#"data: {"type":"message_stop"}"#,
        "\n\n",
    ),
];

/// Anthropic's legacy mid-stream error, as the Text Completions streaming
/// documentation shows it: the data has no top-level `type`.
const LEGACY_OVERLOADED: &str = concat!(
    "event: error\n",
    r#"data: {"error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
    "\n\n",
);

/// A legacy Text Completions event, which a Messages client does not know.
const LEGACY_COMPLETION: &str = concat!(
    "event: completion\n",
    r#"data: {"completion": " Hello", "stop_reason": null, "model": "claude-2.0"}"#,
    "\n\n",
);

/// A proxy's complaint where an event's JSON should be.
const NOT_JSON: &str = concat!(
    "event: content_block_delta\n",
    "data: upstream connect error or disconnect/reset before headers\n",
    "\n",
);

#[tokio::test]
async fn raw_blocks_go_out_verbatim_between_counted_events() {
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .text("Hello world")
            .usage(12, 3)
            .raw_after(3, LEGACY_COMPLETION)
            .raw_after(1, NOT_JSON)
            .raw_after(3, ": two at one count keep their order\n\n")
            .raw_after(99, LEGACY_OVERLOADED)
            .into(),
    );
    let body = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    let h = HELLO_WORLD;
    let expected = [
        h[0],
        NOT_JSON,
        h[1],
        h[2],
        LEGACY_COMPLETION,
        ": two at one count keep their order\n\n",
        h[3],
        h[4],
        h[5],
        h[6],
        LEGACY_OVERLOADED,
    ]
    .concat();
    assert_eq!(body, expected);
    assert!(llm.requests()[0].replied_at.is_some());
}

#[tokio::test]
async fn raw_error_after_ends_the_reply_with_a_legacy_error() {
    let llm = FakeLlm::start().await;
    llm.push_all([
        ReplyScript::new()
            .text("Hello world")
            .usage(12, 3)
            .raw_error_after(3, LEGACY_OVERLOADED)
            .into(),
        ReplyScript::new()
            .text("Hello world")
            .raw_error_after(3, LEGACY_OVERLOADED)
            .into(),
    ]);
    let r = post(&llm, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    assert_eq!(body, [h(0), h(1), h(2), LEGACY_OVERLOADED].concat());
    let events = parse_sse(&body);
    let error = events[3].json();
    assert_eq!(events[3].event.as_deref(), Some("error"));
    assert_eq!(error.get("type"), None, "the legacy shape has no `type`");
    assert_eq!(error["error"]["type"], "overloaded_error");

    // Raw SSE has no JSON counterpart: without streaming the answer is cut
    // (before or after its head, as the server manages).
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/messages", llm.base_url()))
        .json(&anthropic_request(false))
        .send()
        .await;
    match answer {
        Ok(r) => assert!(r.text().await.is_err()),
        Err(e) => assert!(!e.is_status(), "{e}"),
    }
}

fn h(i: usize) -> &'static str {
    HELLO_WORLD[i]
}

#[tokio::test]
async fn openai_raw_blocks_and_errors_are_verbatim_too() {
    // OpenRouter reports a failure after HTTP 200 with a numeric code.
    let openrouter_error = concat!(
        r#"data: {"id":"gen-1","object":"chat.completion.chunk","created":1,"model":"x","provider":"fake","error":{"code":502,"message":"Provider returned error"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}"#,
        "\n\n",
    );
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .text("a b c")
            .raw_after(1, ": OPENROUTER PROCESSING\n\n")
            .raw_error_after(2, openrouter_error)
            .into(),
    );
    let body = post(&llm, "/v1/chat/completions", &openai_request())
        .await
        .text()
        .await
        .unwrap();
    let events = parse_sse(&body);
    assert_eq!(events.len(), 3);
    assert_eq!(events[1].json()["choices"][0]["delta"]["content"], "a ");
    assert!(body.contains("\n\n: OPENROUTER PROCESSING\n\ndata: "));
    assert!(body.ends_with(openrouter_error));
    assert!(!body.contains("[DONE]"));
}

#[tokio::test]
async fn tool_use_reply_streams_input_json_in_fragments() {
    let llm = FakeLlm::start().await;
    // Keys in sorted order: the bytes are the same whether or not a
    // dependency turns on serde_json's preserve_order (agent-client-protocol
    // does, for every crate built with it).
    let input = json!({"limit": 20, "path": "src/main.rs"});
    llm.push(
        ReplyScript::new()
            .text("Let me look.")
            .tool_use("toolu_01", "read", input.clone())
            .into(),
    );
    let body = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();

    // `{"limit":20,"path":"src/main.rs"}` in 10-character fragments,
    // after the empty one Anthropic always sends first.
    let tool_part = concat!(
        "event: content_block_start\n",
        r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"read","input":{}}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"limit\":2"}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"0,\"path\":\""}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"src/main.r"}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"s\"}"}}"#,
        "\n\n",
        "event: content_block_stop\n",
        r#"data: {"type":"content_block_stop","index":1}"#,
        "\n\n",
        "event: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}"#,
        "\n\n",
    );
    assert!(body.contains(tool_part), "tool_use events differ:\n{body}");

    let events = parse_sse(&body);
    let json: String = events
        .iter()
        .filter_map(|e| {
            e.json()["delta"]["partial_json"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&json).unwrap(),
        input
    );
}

#[tokio::test]
async fn web_search_streams_server_tool_blocks() {
    let llm = FakeLlm::start().await;
    let script = ReplyScript::new()
        .web_search(
            "srvtoolu_1",
            "rust htmd",
            &[("https://docs.rs/htmd", "htmd")],
        )
        .text("Found.");
    llm.push(script.clone().into());
    llm.push(script.into());
    let body = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    let events = parse_sse(&body);
    let starts: Vec<serde_json::Value> = events
        .iter()
        .filter(|e| e.event.as_deref() == Some("content_block_start"))
        .map(|e| e.json()["content_block"].clone())
        .collect();
    assert_eq!(
        starts[0],
        json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}})
    );
    assert_eq!(starts[1]["type"], "web_search_tool_result");
    assert_eq!(starts[1]["tool_use_id"], "srvtoolu_1");
    assert_eq!(starts[1]["content"][0]["url"], "https://docs.rs/htmd");
    let query: String = events
        .iter()
        .filter(|e| e.json()["index"] == 0)
        .filter_map(|e| {
            e.json()["delta"]["partial_json"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(query, r#"{"query":"rust htmd"}"#);
    assert!(
        !events
            .iter()
            .any(|e| e.json()["index"] == 1 && e.event.as_deref() == Some("content_block_delta")),
        "a result has no delta"
    );
    assert!(body.contains(r#""stop_reason":"end_turn""#), "{body}");
    // Chat completions have no server tools: only the text goes out.
    let body = post(&llm, "/v1/chat/completions", &openai_request())
        .await
        .text()
        .await
        .unwrap();
    assert!(
        !body.contains("srvtoolu_1") && body.contains("Found."),
        "{body}"
    );
}

#[tokio::test]
async fn thinking_ping_and_unknown_events() {
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .thinking("Think hard", "sig-123")
            .text("ok")
            .with_ping()
            .with_unknown_event()
            .stop_reason("max_tokens")
            .into(),
    );
    let body = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    let events = parse_sse(&body);
    assert_eq!(
        names(&events),
        [
            "message_start",
            "fake_future_event",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    assert!(body.contains("event: ping\ndata: {\"type\": \"ping\"}\n\n"));
    assert_eq!(
        events[2].json()["content_block"],
        json!({"type": "thinking", "thinking": "", "signature": ""})
    );
    assert_eq!(
        events[4].json()["delta"],
        json!({"type": "thinking_delta", "thinking": "Think "})
    );
    assert_eq!(
        events[6].json()["delta"],
        json!({"type": "signature_delta", "signature": "sig-123"})
    );
    assert_eq!(events[11].json()["delta"]["stop_reason"], "max_tokens");
}

#[tokio::test]
async fn error_statuses_carry_anthropic_bodies_and_headers() {
    let llm = FakeLlm::start().await;
    llm.push_all([
        Script::rate_limited(Some("2")),
        Script::rate_limited(None),
        Script::overloaded(),
        Script::unauthorized(),
        Script::status(500).with_header("x-should-retry", "true"),
    ]);
    let request = anthropic_request(true);

    let r = post(&llm, "/v1/messages", &request).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "retry-after"), Some("2"));
    assert_eq!(header(&r, "request-id"), Some("req_fake_1"));
    assert_eq!(header(&r, "content-type"), Some("application/json"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");

    let r = post(&llm, "/v1/messages", &request).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "retry-after"), None);

    let r = post(&llm, "/v1/messages", &request).await;
    assert_eq!(r.status().as_u16(), 529);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );

    let r = post(&llm, "/v1/messages", &request).await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["error"]["type"],
        "authentication_error"
    );

    let r = post(&llm, "/v1/messages", &request).await;
    assert_eq!(r.status(), 500);
    assert_eq!(header(&r, "x-should-retry"), Some("true"));
    assert_eq!(header(&r, "request-id"), Some("req_fake_5"));
}

#[tokio::test]
async fn error_after_sends_an_error_event_and_ends() {
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .text("one two three")
            .error_after(3, "overloaded_error", "Overloaded")
            .into(),
    );
    let r = post(&llm, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    let events = parse_sse(&body);
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "error"
        ]
    );
    assert!(body.ends_with(concat!(
        "event: error\n",
        r#"data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        "\n\n"
    )));
}

#[tokio::test]
async fn drop_after_cuts_the_connection_after_n_events() {
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .text("one two three four")
            .drop_after(3)
            .into(),
    );
    let r = post(&llm, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let mut buffer = String::new();
    let error = read_events(&mut stream, &mut buffer, 100).await;
    assert!(
        error.is_some(),
        "the body should fail, got a clean end after:\n{buffer}"
    );
    assert_eq!(
        names(&parse_sse(&buffer)),
        [
            "message_start",
            "content_block_start",
            "content_block_delta"
        ]
    );
}

#[tokio::test]
async fn hold_after_waits_for_the_gate() {
    let llm = FakeLlm::start().await;
    let gate = Gate::new();
    llm.push(
        ReplyScript::new()
            .text("a b c")
            .hold_after(2, gate.clone())
            .into(),
    );
    let r = post(&llm, "/v1/messages", &anthropic_request(true)).await;
    let mut stream = r.bytes_stream();
    let mut buffer = String::new();
    assert!(read_events(&mut stream, &mut buffer, 2).await.is_none());
    assert_eq!(
        names(&parse_sse(&buffer)),
        ["message_start", "content_block_start"]
    );

    // Nothing more while the gate is closed.
    let more = tokio::time::timeout(Duration::from_millis(200), stream.next()).await;
    assert!(more.is_err(), "got data while held: {more:?}");

    gate.open();
    assert!(gate.is_open());
    assert!(read_events(&mut stream, &mut buffer, 100).await.is_none());
    let events = parse_sse(&buffer);
    assert_eq!(events.len(), 8);
    assert_eq!(names(&events).last(), Some(&"message_stop"));
}

#[tokio::test]
async fn requests_are_recorded_in_order() {
    let llm = FakeLlm::start().await;
    llm.set_default(Some(Script::text("again")));
    let before = SystemTime::now();
    let mut first = anthropic_request(true);
    first["system"] = json!("be brief");
    post(&llm, "/v1/messages", &first)
        .await
        .text()
        .await
        .unwrap();
    post(&llm, "/v1/chat/completions", &openai_request())
        .await
        .text()
        .await
        .unwrap();

    let requests = llm.wait_for_requests(2, Duration::from_secs(5)).await;
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].body, first);
    assert_eq!(requests[0].header("X-Api-Key"), Some("test-key"));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(requests[0].header("content-type"), Some("application/json"));
    assert!(requests[0].arrived_at >= before);
    assert!(requests[0].received_at >= requests[0].arrived_at);
    // The streamed reply was read to its end before the second request.
    let replied = requests[0]
        .replied_at
        .expect("the streamed reply's end is noted");
    assert!(replied >= requests[0].received_at);
    assert!(requests[1].arrived_at >= replied);
    assert!(requests[1].received_at >= requests[0].received_at);
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].body["model"], "gpt-test");
    assert_eq!(llm.requests().len(), 2);
}

/// A reply depends on a few fields read without the whole JSON tree; the
/// tree a test reads is the body all the same, and a body that is not JSON,
/// or whose `stream` is not a bool, is answered and recorded as before.
#[tokio::test]
async fn odd_bodies_are_answered_and_recorded_whole() {
    let llm = FakeLlm::start().await;
    llm.set_default(Some(Script::text("ok")));
    let reply: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/messages", llm.base_url()))
        .body("not json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reply["model"], "claude-fake", "{reply}");
    let mut odd = anthropic_request(true);
    odd["stream"] = json!("yes");
    odd["tools"] = json!([{"name": "t", "description": "an image tool", "input_schema": {}}]);
    let reply: serde_json::Value = post(&llm, "/v1/messages", &odd).await.json().await.unwrap();
    assert_eq!(reply["model"], "claude-test", "{reply}");
    // An array is no request object, whatever serde could read from it.
    let array = json!([true, "claude-array"]);
    let reply: serde_json::Value = post(&llm, "/v1/messages", &array)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(reply["model"], "claude-fake", "{reply}");
    let requests = llm.requests();
    assert_eq!(requests[0].body, json!("not json"));
    assert_eq!(requests[1].body, odd);
    assert!(requests[1].images.is_empty());
    assert_eq!(requests[2].body, array);
}

#[tokio::test]
#[should_panic(expected = "fake LLM: expected 1 request(s)")]
async fn wait_for_requests_panics_on_timeout() {
    let llm = FakeLlm::start().await;
    llm.wait_for_requests(1, Duration::from_millis(50)).await;
}

#[tokio::test]
async fn wait_for_requests_wakes_on_arrival() {
    let llm = FakeLlm::start().await;
    llm.push(Script::text("hi"));
    let waiter = {
        let llm = llm.clone();
        tokio::spawn(async move { llm.wait_for_requests(1, Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(waiter.await.unwrap().len(), 1);
}

#[tokio::test]
async fn openai_format_from_the_same_script() {
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .thinking("hmm", "sig")
            .text("Hi there")
            .tool_use("call_1", "bash", json!({"command": "ls"}))
            .usage(7, 4)
            .into(),
    );
    let r = post(&llm, "/v1/chat/completions", &openai_request()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), Some("text/event-stream"));
    let body = r.text().await.unwrap();
    let created = parse_sse(&body)[0].json()["created"].as_u64().unwrap();
    let head = format!(
        r#"data: {{"id":"chatcmpl-fake-1","object":"chat.completion.chunk","created":{created},"model":"gpt-test","#
    );
    let chunk = |rest: &str| format!("{head}{rest}\n\n");
    let expected = [
        chunk(r#""choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#),
        chunk(r#""choices":[{"index":0,"delta":{"reasoning_content":"hmm"},"logprobs":null,"finish_reason":null}]}"#),
        chunk(r#""choices":[{"index":0,"delta":{"content":"Hi "},"logprobs":null,"finish_reason":null}]}"#),
        chunk(r#""choices":[{"index":0,"delta":{"content":"there"},"logprobs":null,"finish_reason":null}]}"#),
        chunk(
            r#""choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"bash","arguments":""}}]},"logprobs":null,"finish_reason":null}]}"#,
        ),
        chunk(
            r#""choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\""}}]},"logprobs":null,"finish_reason":null}]}"#,
        ),
        chunk(
            r#""choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":\"ls\"}"}}]},"logprobs":null,"finish_reason":null}]}"#,
        ),
        chunk(r#""choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}"#),
        chunk(r#""choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}"#),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    assert_eq!(body, expected);
}

#[tokio::test]
async fn openai_faults_count_chunks() {
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .text("a b c")
            .error_after(2, "server_error", "boom")
            .into(),
    );
    let body = post(&llm, "/v1/chat/completions", &openai_request())
        .await
        .text()
        .await
        .unwrap();
    let events = parse_sse(&body);
    assert_eq!(events.len(), 3);
    assert_eq!(events[1].json()["choices"][0]["delta"]["content"], "a ");
    assert_eq!(
        events[2].json(),
        json!({"error": {"message": "boom", "type": "server_error", "code": null}})
    );
    assert!(!body.contains("[DONE]"));
}

#[tokio::test]
async fn no_script_left_is_a_clear_500() {
    let llm = FakeLlm::start().await;
    let r = post(&llm, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(r.status(), 500);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["message"], "fake LLM: no script left");
}

#[tokio::test]
async fn queue_first_then_default() {
    let llm = FakeLlm::start().await;
    llm.push(Script::text("first"));
    llm.set_default(Some(Script::text("default")));
    assert_eq!(llm.scripts_left(), 1);
    let mut texts = Vec::new();
    for _ in 0..3 {
        let body = post(&llm, "/v1/messages", &anthropic_request(true))
            .await
            .text()
            .await
            .unwrap();
        let text: String = parse_sse(&body)
            .iter()
            .filter_map(|e| e.json()["delta"]["text"].as_str().map(str::to_string))
            .collect();
        texts.push(text);
    }
    assert_eq!(texts, ["first", "default", "default"]);
    assert_eq!(llm.scripts_left(), 0);
    llm.set_default(None);
    assert_eq!(
        post(&llm, "/v1/messages", &anthropic_request(true))
            .await
            .status(),
        500
    );
}

#[tokio::test]
async fn a_responder_answers_from_the_body_after_the_queue() {
    let llm = FakeLlm::start().await;
    llm.push(Script::text("queued"));
    llm.set_default(Some(Script::text("default")));
    llm.set_responder(Some(std::sync::Arc::new(|body: &serde_json::Value| {
        let said = body["messages"][0]["content"].as_str().unwrap_or("?");
        Script::text(&format!("you said {said}"))
    })));
    let text_of = |body: &str| -> String {
        parse_sse(body)
            .iter()
            .filter_map(|e| e.json()["delta"]["text"].as_str().map(str::to_string))
            .collect()
    };
    let mut texts = Vec::new();
    for _ in 0..2 {
        let body = post(&llm, "/v1/messages", &anthropic_request(true))
            .await
            .text()
            .await
            .unwrap();
        texts.push(text_of(&body));
    }
    assert_eq!(texts, ["queued", "you said hi"]);
    // Unknown paths take nothing from the queue or the responder.
    assert_eq!(post(&llm, "/v2/nothing", &json!({})).await.status(), 404);
    llm.set_responder(None);
    let body = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(text_of(&body), "default");
    assert_eq!(llm.requests().len(), 4, "every request is recorded");
}

#[tokio::test]
async fn hang_never_answers_but_is_recorded() {
    let llm = FakeLlm::start().await;
    llm.push(Script::Hang);
    let result = reqwest::Client::new()
        .post(format!("{}/v1/messages", llm.base_url()))
        .json(&anthropic_request(true))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(result.unwrap_err().is_timeout());
    assert_eq!(llm.requests().len(), 1);
}

#[tokio::test]
async fn unknown_paths_get_404_without_taking_a_script() {
    let llm = FakeLlm::start().await;
    llm.push(Script::text("kept"));
    let r = post(&llm, "/v1/v1/messages", &anthropic_request(true)).await;
    assert_eq!(r.status(), 404);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "not_found_error");
    assert_eq!(llm.scripts_left(), 1);
    assert_eq!(llm.requests()[0].path, "/v1/v1/messages");
}

#[tokio::test]
async fn non_streaming_requests_get_the_whole_message() {
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .text("Hi")
            .tool_use("toolu_9", "glob", json!({"pattern": "*.rs"}))
            .into(),
    );
    let r = post(&llm, "/v1/messages", &anthropic_request(false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), Some("application/json"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["id"], "msg_fake_1");
    assert_eq!(body["stop_reason"], "tool_use");
    assert_eq!(
        body["content"],
        json!([
            {"type": "text", "text": "Hi"},
            {"type": "tool_use", "id": "toolu_9", "name": "glob", "input": {"pattern": "*.rs"}},
        ])
    );
}

#[tokio::test]
async fn many_deltas_stream_quickly() {
    let llm = FakeLlm::start().await;
    let n = 100_000;
    llm.push(ReplyScript::new().deltas(n, "x").into());
    let started = Instant::now();
    let r = post(&llm, "/v1/messages", &anthropic_request(true)).await;
    let body = r.text().await.unwrap();
    let deltas = body.matches("\"text_delta\"").count();
    let elapsed = started.elapsed();
    assert_eq!(deltas, n);
    eprintln!("{n} deltas streamed in {elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(60),
        "{n} deltas took {elapsed:?}"
    );
}

#[tokio::test]
async fn pace_slows_every_event() {
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .text("a b")
            .pace(Duration::from_millis(20))
            .into(),
    );
    let started = Instant::now();
    let body = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    // 7 events, 20 ms before each.
    assert_eq!(parse_sse(&body).len(), 7);
    assert!(
        started.elapsed() >= Duration::from_millis(140),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn timestamps_mark_each_delta_with_its_send_time() {
    let llm = FakeLlm::start().await;
    llm.push(ReplyScript::new().deltas(3, "tok").timestamps().into());
    let before = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let body = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    let after = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let texts: Vec<String> = parse_sse(&body)
        .iter()
        .filter_map(|e| e.json()["delta"]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(texts.len(), 3);
    for text in texts {
        let rest = text.strip_prefix("⟨t=").unwrap();
        let (nanos, tail) = rest.split_once('⟩').unwrap();
        let nanos: u128 = nanos.parse().unwrap();
        assert!(before <= nanos && nanos <= after);
        assert_eq!(tail, "tok");
    }
}

#[tokio::test]
async fn chunk_chars_splits_text_in_groups() {
    let llm = FakeLlm::start().await;
    llm.push(ReplyScript::new().text("abcdefg").chunk_chars(3).into());
    let body = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    let texts: Vec<String> = parse_sse(&body)
        .iter()
        .filter_map(|e| e.json()["delta"]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(texts, ["abc", "def", "g"]);
}

#[tokio::test]
async fn raw_tool_use_sends_malformed_json_verbatim() {
    let llm = FakeLlm::start().await;
    llm.push(
        ReplyScript::new()
            .raw_tool_use("toolu_x", "write", "{\"path\": \"a")
            .into(),
    );
    let body = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    let json: String = parse_sse(&body)
        .iter()
        .filter_map(|e| {
            e.json()["delta"]["partial_json"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(json, "{\"path\": \"a");
    assert!(body.contains(r#""stop_reason":"tool_use""#));
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_server() {
    let llm = FakeLlm::start().await;
    let addr = llm.addr();
    let clone = llm.clone();
    drop(llm);
    // A clone keeps it alive.
    assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
    drop(clone);
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "the listener did not close");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_client_leaving_a_held_stream_counts_as_a_disconnect() {
    let llm = FakeLlm::start().await;
    let gate = Gate::new();
    llm.push(
        ReplyScript::new()
            .text("a b c")
            .hold_after(2, gate.clone())
            .into(),
    );
    llm.push(Script::text("complete"));
    let r = post(&llm, "/v1/messages", &anthropic_request(true)).await;
    let mut stream = r.bytes_stream();
    let mut buffer = String::new();
    assert!(read_events(&mut stream, &mut buffer, 2).await.is_none());
    assert_eq!(llm.disconnects(), 0);
    drop(stream);
    llm.wait_for_disconnects(1, Duration::from_secs(5)).await;

    // A reply read to its end, and a scripted drop, do not count.
    post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await
        .unwrap();
    llm.push(ReplyScript::new().text("x").drop_after(1).into());
    let _ = post(&llm, "/v1/messages", &anthropic_request(true))
        .await
        .text()
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(llm.disconnects(), 1);
}

#[tokio::test]
async fn a_client_giving_up_on_a_hang_counts_as_a_disconnect() {
    let llm = FakeLlm::start().await;
    llm.push(Script::Hang);
    let result = reqwest::Client::new()
        .post(format!("{}/v1/messages", llm.base_url()))
        .json(&anthropic_request(true))
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(result.is_err());
    llm.wait_for_disconnects(1, Duration::from_secs(5)).await;
}

#[tokio::test]
#[should_panic(expected = "fake LLM: expected 1 client disconnect(s)")]
async fn wait_for_disconnects_panics_on_timeout() {
    let llm = FakeLlm::start().await;
    llm.wait_for_disconnects(1, Duration::from_millis(50)).await;
}

#[test]
fn a_script_file_gives_its_replies_in_order_and_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let good = write(
        "good.json",
        r#"[{"text": "looking"}, {"text": "and", "tool": "read", "input": {"path": "a"}}]"#,
    );
    let scripts = script_file(&good).unwrap();
    assert_eq!(scripts.len(), 2);
    assert!(matches!(&scripts[1], Script::Reply(r) if r.blocks.len() == 2));
    for (text, says) in [
        (r#"{"text": "x"}"#, "not a JSON array"),
        (r#"[{"text": 1}]"#, r#"reply 0: "text" is not a string"#),
        (
            r#"[{"text": "a"}, {"tool": 3}]"#,
            r#"reply 1: "tool" is not a string"#,
        ),
        (
            r#"[{"input": {}}]"#,
            r#"reply 0 has neither "text" nor "tool""#,
        ),
    ] {
        let err = script_file(&write("bad.json", text)).unwrap_err();
        assert!(err.contains(says), "{text}: {err}");
    }
    let err = script_file(&dir.path().join("none.json").display().to_string()).unwrap_err();
    assert!(err.contains("cannot read"), "{err}");
}
