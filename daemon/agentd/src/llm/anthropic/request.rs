//! The body of a Messages request: the transcript sanitized and merged as
//! the API accepts it, with cache breakpoints, serialized straight from the
//! borrowed transcript (and its settled prefix reused from earlier requests).

use agentd_core::{ContentBlock, ImageRef, Message, Role, ThinkingParams};
use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

use crate::llm::{EncodedPrefix, LlmRequest};

/// The JSON body of a streaming Messages request, serialized straight from
/// the borrowed transcript (no intermediate `Value` tree: a long transcript
/// is sent every round, so this runs once per model request). Message
/// groups that can no longer change are taken from the conversation's
/// cache and added to it.
pub(super) fn request_body(req: &LlmRequest) -> Result<Vec<u8>, serde_json::Error> {
    let system = (!req.system.is_empty()).then(|| {
        [WireText {
            kind: "text",
            text: &req.system,
            cache_control: Some(EPHEMERAL),
        }]
    });
    let last_tool = req.tools.len().checked_sub(1);
    let tools: Vec<WireTool<'_>> = req
        .tools
        .iter()
        .enumerate()
        .map(|(i, t)| WireTool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.input_schema,
            cache_control: (Some(i) == last_tool).then_some(EPHEMERAL),
        })
        .collect();
    // The server tool goes first, so the breakpoint on the last tool
    // covers it too.
    let tools = req
        .web_search
        .map(|max_uses| WireToolOut::Server(WebSearchTool::new(max_uses)))
        .into_iter()
        .chain(tools.into_iter().map(WireToolOut::Client))
        .collect();
    let (thinking, output_config) = thinking(req.thinking);
    let mut body = serde_json::to_vec(&WireRequest {
        model: &req.model,
        max_tokens: req.max_tokens,
        system,
        tools,
        thinking,
        output_config,
    })?;
    // `{...}` → `{...,"messages":[...],"stream":true}`
    body.pop();
    body.extend_from_slice(b",\"messages\":[");
    let groups = message_groups(&req.messages, req.web_search.is_some());
    // Every group but the last is followed by one of the other role, so
    // no later message can join it: its encoding is final, and cached.
    let settled = groups.len().saturating_sub(1);
    let mut cache = req.cache.lock();
    let reused = match cache.as_ref() {
        Some(p) if p.groups > 0 && p.groups <= settled && groups[p.groups - 1].end == p.covered => {
            body.extend_from_slice(&p.bytes);
            p.groups
        }
        _ => 0,
    };
    if settled > reused {
        let prefix = match cache.as_mut() {
            Some(p) if reused > 0 => p,
            _ => cache.insert(EncodedPrefix {
                covered: 0,
                groups: 0,
                bytes: Vec::new(),
            }),
        };
        let start = prefix.bytes.len();
        for (i, group) in groups.iter().enumerate().take(settled).skip(reused) {
            if i > 0 {
                prefix.bytes.push(b',');
            }
            serde_json::to_writer(&mut prefix.bytes, &group.encode(false, &req.images))?;
        }
        prefix.covered = groups[settled - 1].end;
        prefix.groups = settled;
        body.extend_from_slice(&prefix.bytes[start..]);
    }
    if let Some(last) = groups.last() {
        if settled > 0 {
            body.push(b',');
        }
        serde_json::to_writer(&mut body, &last.encode(true, &req.images))?;
    }
    drop(cache);
    body.extend_from_slice(b"],\"stream\":true}");
    Ok(body)
}

/// The body without its messages and `stream` (added by hand after them).
#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<[WireText<'a>; 1]>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireToolOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<WireThinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfig>,
}

/// `{"type":"enabled","budget_tokens":N}` or `{"type":"adaptive"}`.
#[derive(Serialize)]
struct WireThinking {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    budget_tokens: Option<u32>,
}

/// `{"effort":"high"}`: how hard an adaptive model thinks.
#[derive(Serialize)]
struct OutputConfig {
    effort: &'static str,
}

/// The request's `thinking` and `output_config`. (No temperature or
/// `top_k` is ever sent, which thinking requires.)
fn thinking(params: Option<ThinkingParams>) -> (Option<WireThinking>, Option<OutputConfig>) {
    match params {
        None | Some(ThinkingParams::Effort(_)) => (None, None),
        Some(ThinkingParams::Budget { budget_tokens }) => (
            Some(WireThinking {
                kind: "enabled",
                budget_tokens: Some(budget_tokens),
            }),
            None,
        ),
        Some(ThinkingParams::Adaptive { effort }) => (
            Some(WireThinking {
                kind: "adaptive",
                budget_tokens: None,
            }),
            effort.map(|e| OutputConfig { effort: e.as_str() }),
        ),
    }
}

/// The beta a request needs: a thinking budget with tools thinks between
/// tool calls only with interleaved thinking (adaptive thinking
/// interleaves by itself).
pub(super) fn beta(req: &LlmRequest) -> Option<&'static str> {
    matches!(req.thinking, Some(ThinkingParams::Budget { .. }))
        .then_some("interleaved-thinking-2025-05-14")
}

/// `{"type": "ephemeral"}`: a prompt-cache breakpoint.
#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize)]
struct WireText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// A tool as offered: one of ours, or one the API runs itself.
#[derive(Serialize)]
#[serde(untagged)]
enum WireToolOut<'a> {
    Client(WireTool<'a>),
    Server(WebSearchTool),
}

/// Anthropic's server-side web search (`[web] search`):
/// `{"type":"web_search_20250305","name":"web_search","max_uses":N}`.
#[derive(Serialize)]
struct WebSearchTool {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'static str,
    max_uses: u32,
}

impl WebSearchTool {
    fn new(max_uses: u32) -> Self {
        WebSearchTool {
            kind: "web_search_20250305",
            name: "web_search",
            max_uses,
        }
    }
}

#[derive(Serialize)]
struct WireMessageOut<'a> {
    role: &'static str,
    content: Vec<WireBlockOut<'a>>,
}

/// A content block as sent; `cache_control` marks the end of the cached
/// prefix (set on one block at most).
#[derive(Serialize)]
struct WireBlockOut<'a> {
    #[serde(flatten)]
    block: Option<BlockOut<'a>>,
    /// A server tool's block, sent as it came (`block` is then `None`).
    #[serde(flatten)]
    server: Option<&'a serde_json::Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockOut<'a> {
    Text {
        text: &'a str,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: ToolInput<'a>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ToolResultOut<'a>,
        is_error: bool,
    },
    /// `{"type":"image","source":{"type":"base64","media_type":…,"data":…}}`
    Image {
        source: ImageSource<'a>,
    },
}

/// A tool result's content: its text, or (when the tool returned images)
/// a text block and the image blocks.
#[derive(Serialize)]
#[serde(untagged)]
enum ToolResultOut<'a> {
    Text(&'a str),
    Blocks(Vec<BlockOut<'a>>),
}

/// Where an image block's bytes are: inline, base64.
#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'static str,
    data: &'a str,
}

/// Sent in place of an image whose bytes the store no longer has, so the
/// model is told rather than silently shown less.
const MISSING_IMAGE: &str =
    "[an image was attached here, but its bytes are missing from the daemon's store]";

/// A tool call's input; one that is not a JSON object (the raw text of
/// invalid JSON) is sent as `{}`, which the API accepts.
struct ToolInput<'a>(&'a Value);

impl Serialize for ToolInput<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => map.serialize(s),
            _ => s.serialize_map(Some(0))?.end(),
        }
    }
}

impl<'a> BlockOut<'a> {
    /// An image block, or the note sent when its bytes are missing.
    fn image(image: &'a ImageRef, images: &'a HashMap<String, Arc<str>>) -> Self {
        match images.get(&image.sha256) {
            Some(data) => BlockOut::Image {
                source: ImageSource {
                    kind: "base64",
                    media_type: image.media_type.mime(),
                    data,
                },
            },
            None => BlockOut::Text {
                text: MISSING_IMAGE,
            },
        }
    }

    fn of(block: &'a ContentBlock, images: &'a HashMap<String, Arc<str>>) -> Self {
        match block {
            ContentBlock::Image(image) => BlockOut::image(image, images),
            ContentBlock::Text { text } => BlockOut::Text { text },
            ContentBlock::Thinking {
                thinking,
                signature,
            } => BlockOut::Thinking {
                thinking,
                signature,
            },
            ContentBlock::RedactedThinking { data } => BlockOut::RedactedThinking { data },
            // `Group::encode` sends these as they are; never reached.
            ContentBlock::ServerTool { .. } => BlockOut::Text { text: "" },
            ContentBlock::ToolUse { id, name, input } => BlockOut::ToolUse {
                id,
                name,
                input: ToolInput(input),
            },
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                images: attached,
            } => BlockOut::ToolResult {
                tool_use_id,
                // A text-only result keeps the plain string form, so the
                // bytes of every request without images stay as they were
                // (the cached prefix).
                content: if attached.is_empty() {
                    ToolResultOut::Text(content)
                } else {
                    let mut blocks = Vec::with_capacity(attached.len() + 1);
                    if !content.is_empty() {
                        blocks.push(BlockOut::Text { text: content });
                    }
                    blocks.extend(attached.iter().map(|i| BlockOut::image(i, images)));
                    ToolResultOut::Blocks(blocks)
                },
                is_error: *is_error,
            },
        }
    }

    /// Thinking blocks cannot carry a cache breakpoint.
    fn cacheable(&self) -> bool {
        matches!(
            self,
            BlockOut::Text { .. }
                | BlockOut::ToolUse { .. }
                | BlockOut::ToolResult { .. }
                | BlockOut::Image { .. }
        )
    }
}

/// Consecutive messages of one role, merged, as the API accepts them (see
/// the module docs); `end` is the index after its last message in the
/// transcript.
struct Group<'a> {
    role: Role,
    blocks: Vec<&'a ContentBlock>,
    end: usize,
}

impl<'a> Group<'a> {
    /// The message as sent; the last one of a request carries the
    /// breakpoint that ends the cached prefix.
    fn encode(&self, last: bool, images: &'a HashMap<String, Arc<str>>) -> WireMessageOut<'a> {
        let mut blocks = self.blocks.clone();
        if self.role == Role::User {
            // Stable: the results keep their order, and so does the rest.
            blocks.sort_by_key(|b| !matches!(b, ContentBlock::ToolResult { .. }));
        }
        let mut content: Vec<WireBlockOut<'a>> = blocks
            .into_iter()
            .map(|b| match b {
                ContentBlock::ServerTool {
                    block: Value::Object(server),
                } => WireBlockOut {
                    block: None,
                    server: Some(server),
                    cache_control: None,
                },
                _ => WireBlockOut {
                    block: Some(BlockOut::of(b, images)),
                    server: None,
                    cache_control: None,
                },
            })
            .collect();
        if last
            && let Some(block) = content
                .iter_mut()
                .rev()
                .find(|b| b.block.as_ref().is_some_and(BlockOut::cacheable))
        {
            block.cache_control = Some(EPHEMERAL);
        }
        let role = match self.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        WireMessageOut { role, content }
    }
}

/// The transcript in groups as the API accepts it: empty messages and
/// blocks dropped, runs of one role merged. Server tools' blocks go back
/// when the request offers the server tool (`search`), and are left out
/// when it does not (the API knows no call of a tool it was not given).
fn message_groups(messages: &[Message], search: bool) -> Vec<Group<'_>> {
    let mut merged: Vec<Group<'_>> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let blocks = message.content.iter().filter(|b| is_sendable(b, search));
        match merged.last_mut() {
            Some(group) if group.role == message.role => {
                group.blocks.extend(blocks);
                group.end = i + 1;
            }
            _ => {
                let run: Vec<&ContentBlock> = blocks.collect();
                if !run.is_empty() {
                    merged.push(Group {
                        role: message.role,
                        blocks: run,
                        end: i + 1,
                    });
                }
            }
        }
    }
    merged
}

/// Whether the API would accept the block: it rejects empty text blocks,
/// and a thinking block without its signature cannot be verified (such
/// blocks come from other providers or from an interrupted stream).
fn is_sendable(block: &ContentBlock, search: bool) -> bool {
    match block {
        ContentBlock::ServerTool { block } => search && block.is_object(),
        ContentBlock::Text { text } => !text.is_empty(),
        ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {
            agentd_core::thinking::goes_back(block)
        }
        ContentBlock::Image(_) | ContentBlock::ToolUse { .. } | ContentBlock::ToolResult { .. } => {
            true
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::llm::testkit::message;
    use serde_json::json;

    /// The body as JSON, to compare with `json!`.
    pub(crate) fn request_body(req: &LlmRequest) -> Value {
        serde_json::from_slice(&super::request_body(req).unwrap()).unwrap()
    }
    use agentd_core::ToolSpec;
    use std::sync::Arc;

    fn tool_use(id: &str, input: Value) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "read".into(),
            input,
        }
    }

    pub(crate) fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> LlmRequest {
        LlmRequest {
            thinking: None,
            model: "claude-test".into(),
            system: "You are terse.".into(),
            messages: Arc::new(messages),
            tools: tools.into(),
            cache: Default::default(),
            images: Default::default(),
            web_search: None,
            max_tokens: 1024,
        }
    }

    pub(crate) fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} things"),
            input_schema: json!({ "type": "object", "properties": {} }),
        }
    }

    /// With `[web] search`, the server tool is offered first and a reply's
    /// search blocks go back as they came; without it, they are left out.
    #[test]
    fn web_search_is_offered_and_its_blocks_go_back_unchanged() {
        let call = json!({"type": "server_tool_use", "id": "srv_1", "name": "web_search",
            "input": {"query": "q"}});
        let result = json!({"type": "web_search_tool_result", "tool_use_id": "srv_1",
            "content": [{"type": "web_search_result", "url": "https://a", "encrypted_content": "Eo=="}]});
        let mut req = request(
            vec![
                message(Role::User, vec![ContentBlock::text("look it up")]),
                message(
                    Role::Assistant,
                    vec![
                        ContentBlock::ServerTool {
                            block: call.clone(),
                        },
                        ContentBlock::ServerTool {
                            block: result.clone(),
                        },
                        ContentBlock::text("Done."),
                    ],
                ),
                message(Role::User, vec![ContentBlock::text("thanks")]),
            ],
            vec![spec("read")],
        );
        req.web_search = Some(3);
        let body = request_body(&req);
        assert_eq!(
            body["tools"][0],
            json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 3})
        );
        assert_eq!(body["tools"][1]["name"], "read");
        assert_eq!(body["tools"][1]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["messages"][1]["content"][0], call);
        assert_eq!(body["messages"][1]["content"][1], result);
        req.web_search = None;
        req.cache = Default::default();
        let body = request_body(&req);
        assert_eq!(body["tools"].as_array().unwrap().len(), 1);
        assert_eq!(
            body["messages"][1]["content"],
            json!([{"type": "text", "text": "Done."}])
        );
    }

    #[test]
    fn thinking_is_asked_as_the_model_takes_it_and_signed_blocks_go_back() {
        use agentd_core::Effort;
        let signed = ContentBlock::Thinking {
            thinking: "hm".into(),
            signature: "sig==".into(),
        };
        let cut = ContentBlock::Thinking {
            thinking: "half a tho".into(),
            signature: String::new(),
        };
        let mut req = request(
            vec![
                message(Role::User, vec![ContentBlock::text("go")]),
                message(
                    Role::Assistant,
                    vec![
                        signed,
                        ContentBlock::RedactedThinking {
                            data: "ZW5j".into(),
                        },
                        cut,
                        tool_use("t1", json!({})),
                    ],
                ),
                message(
                    Role::User,
                    vec![ContentBlock::tool_result("t1", "ok", false)],
                ),
            ],
            vec![spec("read")],
        );
        req.thinking = Some(ThinkingParams::Budget {
            budget_tokens: 2_048,
        });
        req.max_tokens = 4_096;
        let body = request_body(&req);
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(body["max_tokens"], json!(4096));
        assert!(body.get("temperature").is_none() && body.get("output_config").is_none());
        assert_eq!(
            body["messages"][1]["content"],
            json!([
                {"type": "thinking", "thinking": "hm", "signature": "sig=="},
                {"type": "redacted_thinking", "data": "ZW5j"},
                {"type": "tool_use", "id": "t1", "name": "read", "input": {}},
            ])
        );
        assert_eq!(beta(&req), Some("interleaved-thinking-2025-05-14"));
        req.thinking = Some(ThinkingParams::Adaptive {
            effort: Some(Effort::High),
        });
        let body = request_body(&req);
        assert_eq!(body["thinking"], json!({"type": "adaptive"}));
        assert_eq!(body["output_config"], json!({"effort": "high"}));
        assert_eq!(beta(&req), None);
        req.thinking = None;
        let body = request_body(&req);
        assert!(body.get("thinking").is_none());
        assert_eq!(beta(&req), None);
    }

    #[test]
    fn body_has_system_tools_and_stream_with_cache_breakpoints() {
        let req = request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![spec("read"), spec("write")],
        );
        let body = request_body(&req);
        assert_eq!(
            body,
            json!({
                "model": "claude-test",
                "max_tokens": 1024,
                "system": [{ "type": "text", "text": "You are terse.", "cache_control": { "type": "ephemeral" } }],
                "tools": [
                    { "name": "read", "description": "read things", "input_schema": { "type": "object", "properties": {} } },
                    { "name": "write", "description": "write things", "input_schema": { "type": "object", "properties": {} },
                      "cache_control": { "type": "ephemeral" } },
                ],
                "messages": [
                    { "role": "user", "content": [{ "type": "text", "text": "hi", "cache_control": { "type": "ephemeral" } }] },
                ],
                "stream": true,
            })
        );
    }

    #[test]
    fn empty_tools_and_system_are_omitted() {
        let mut req = request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![],
        );
        req.system = "".into();
        let body = request_body(&req);
        assert!(body.get("tools").is_none());
        assert!(body.get("system").is_none());
    }

    #[test]
    fn transcript_is_sanitized_merged_and_cached_at_the_tail() {
        let messages = vec![
            Message::user(vec![ContentBlock::text("first")], 0),
            Message::user(vec![ContentBlock::text("")], 0),
            Message::user(vec![ContentBlock::text("second")], 0),
            message(
                Role::Assistant,
                vec![
                    ContentBlock::Thinking {
                        thinking: "hmm".into(),
                        signature: "sig".into(),
                    },
                    ContentBlock::Thinking {
                        thinking: "unsigned".into(),
                        signature: String::new(),
                    },
                    ContentBlock::text("calling"),
                    tool_use("t1", json!({ "path": "a" })),
                ],
            ),
            message(Role::Assistant, vec![]),
            message(
                Role::Assistant,
                vec![tool_use("t2", Value::String("{\"path\":".into()))],
            ),
            Message::user(vec![ContentBlock::text("also this")], 0),
            Message::user(
                vec![
                    ContentBlock::tool_result("t1", "contents", false),
                    ContentBlock::tool_result("t2", "bad input", true),
                ],
                0,
            ),
        ];
        let body = request_body(&request(messages, vec![]));
        assert_eq!(
            body["messages"],
            json!([
                { "role": "user", "content": [
                    { "type": "text", "text": "first" },
                    { "type": "text", "text": "second" },
                ] },
                { "role": "assistant", "content": [
                    { "type": "thinking", "thinking": "hmm", "signature": "sig" },
                    { "type": "text", "text": "calling" },
                    { "type": "tool_use", "id": "t1", "name": "read", "input": { "path": "a" } },
                    { "type": "tool_use", "id": "t2", "name": "read", "input": {} },
                ] },
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "t1", "content": "contents", "is_error": false },
                    { "type": "tool_result", "tool_use_id": "t2", "content": "bad input", "is_error": true },
                    { "type": "text", "text": "also this", "cache_control": { "type": "ephemeral" } },
                ] },
            ])
        );
    }

    proptest::proptest! {
        /// The encoding reused from earlier requests of a conversation is
        /// byte for byte what encoding the whole transcript gives, however
        /// the transcript grew (merged runs, empty messages, results).
        #[test]
        fn the_cached_prefix_changes_no_byte(
            steps in proptest::collection::vec((0u8..6, 1usize..4), 1..40),
        ) {
            let shared = request(vec![], vec![spec("read")]);
            let mut transcript = Vec::new();
            for (n, (kind, grow)) in steps.into_iter().enumerate() {
                for k in 0..grow {
                    let id = format!("t{n}_{k}");
                    transcript.push(match kind {
                        0 => Message::user(vec![ContentBlock::text(format!("u{n}"))], 0),
                        1 => Message::user(vec![ContentBlock::tool_result(id, "r", k == 1)], 0),
                        2 => message(Role::Assistant, vec![ContentBlock::text(format!("a{n}"))]),
                        3 => message(Role::Assistant, vec![tool_use(&id, json!({ "n": n }))]),
                        4 => message(Role::Assistant, vec![]),
                        _ => Message::user(vec![ContentBlock::text("")], 0),
                    });
                }
                let mut cached = shared.clone();
                cached.messages = Arc::new(transcript.clone());
                let mut fresh = cached.clone();
                fresh.cache = Default::default();
                let a = super::request_body(&cached).unwrap();
                let b = super::request_body(&fresh).unwrap();
                proptest::prop_assert_eq!(
                    String::from_utf8_lossy(&a),
                    String::from_utf8_lossy(&b)
                );
                let parsed: Value = serde_json::from_slice(&a).unwrap();
                proptest::prop_assert_eq!(&parsed["stream"], &json!(true));
            }
        }
    }

    #[test]
    fn a_cache_from_another_transcript_shape_is_not_reused() {
        let u = |t: &str| Message::user(vec![ContentBlock::text(t)], 0);
        let a = |t: &str| message(Role::Assistant, vec![ContentBlock::text(t)]);
        let mut req = request(vec![u("one"), a("two"), u("three")], vec![]);
        super::request_body(&req).unwrap();
        // Two settled groups again, but ending elsewhere in the transcript.
        req.messages = Arc::new(vec![u("x"), u("y"), a("z"), u("w")]);
        let reused = super::request_body(&req).unwrap();
        req.cache = Default::default();
        assert_eq!(reused, super::request_body(&req).unwrap());
    }

    #[test]
    fn tail_breakpoint_skips_thinking_blocks() {
        let messages = vec![message(
            Role::Assistant,
            vec![
                ContentBlock::text("partial"),
                ContentBlock::RedactedThinking { data: "xyz".into() },
            ],
        )];
        let body = request_body(&request(messages, vec![]));
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                { "type": "text", "text": "partial", "cache_control": { "type": "ephemeral" } },
                { "type": "redacted_thinking", "data": "xyz" },
            ])
        );
    }
}
