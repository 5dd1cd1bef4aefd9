//! Custom sub-agent types (issue 42 point 6): reading their files
//! (data-driven rows, and properties: no text panics the reader, and any
//! file written from valid fields reads back as those fields), the tool
//! names a type lists, the spawn tool's schema, and a typed child's call
//! of a tool its type does not list.

use agentd_core::agent_types::{AgentType, parse, tool_names};
use agentd_core::effect::Effect;
use agentd_core::event::Event;
use agentd_core::message::{ContentBlock, Reply, StopReason, Usage};
use agentd_core::state::{ConvContext, ConvState, SubAgentRole};
use agentd_core::tools::{SpawnRequest, spawn_agents_spec, spawn_agents_spec_with};
use agentd_core::transition::transition;
use agentd_core::{Conversation, Mode};
use proptest::prelude::*;
use serde_json::json;

/// Reads `text` as `a.md`: the type in one line per field, or the error.
fn read(text: &str) -> String {
    match parse("a.md", text) {
        Ok(p) => {
            let AgentType {
                name,
                description,
                tools,
                model,
                prompt,
            } = p.agent;
            let mut out = format!("name={name} description={description:?}");
            if let Some(tools) = tools {
                out.push_str(&format!(" tools={}", tools.join("|")));
            }
            if let Some(model) = model {
                out.push_str(&format!(" model={model}"));
            }
            out.push_str(&format!(" prompt={prompt:?}"));
            for w in p.warnings {
                out.push_str(&format!("\nwarning {w}"));
            }
            out
        }
        Err(e) => format!("error {e}"),
    }
}

fn check(text: &str, expect: &str) {
    assert_eq!(read(text), expect, "reading:\n{text}");
}

#[test]
fn files_read_as_their_front_matter_says() {
    check(
        "---\nname: reviewer\ndescription: Reviews code\ntools: read, grep, glob\nmodel: claude-haiku-4-5\n---\nYou review.\n",
        r#"name=reviewer description="Reviews code" tools=read|grep|glob model=claude-haiku-4-5 prompt="You review.""#,
    );
    // A YAML list, quotes, comments, blank lines; `inherit` is no model.
    check(
        "---\n# a reviewer\nname: \"reviewer\"\n\ndescription: 'Reviews: carefully'\ntools:\n  - Read\n  - Grep # searching\nmodel: inherit\n---\n\nLine one.\n\nLine two.\n",
        r#"name=reviewer description="Reviews: carefully" tools=Read|Grep prompt="Line one.\n\nLine two.""#,
    );
    // A flow list and a folded description.
    check(
        "---\nname: a\ndescription: >\n  Reads a lot\n  and reports.\ntools: [read, \"grep\"]\n---\nGo.",
        r#"name=a description="Reads a lot and reports." tools=read|grep prompt="Go.""#,
    );
    // `tools:` with nothing is not given: the parent's tools.
    check(
        "---\nname: a\ndescription: d\ntools:\n---\nGo.",
        r#"name=a description="d" prompt="Go.""#,
    );
    // Claude Code's other keys load with a warning naming their line.
    check(
        "---\nname: a\ndescription: d\ncolor: blue\n---\nGo.",
        "name=a description=\"d\" prompt=\"Go.\"\nwarning a.md:4: unknown key `color` is ignored",
    );
}

#[test]
fn bad_files_are_errors_naming_the_file_and_line() {
    let rows: &[(&str, &str)] = &[
        ("", "error a.md:1: expected front matter"),
        ("name: a\n", "error a.md:1: expected front matter"),
        (
            "---\nname: a\n",
            "error a.md:1: the front matter is not closed",
        ),
        (
            "---\ndescription: d\n---\nGo.",
            "error a.md:1: the front matter has no `name`",
        ),
        (
            "---\nname: a\n---\nGo.",
            "error a.md:1: the front matter has no `description`",
        ),
        (
            "---\nname: a\ndescription: d\n---\n  \n",
            "error a.md:1: no system prompt",
        ),
        (
            "---\nname: a\nname: b\n---\nGo.",
            "error a.md:3: `name` is given twice",
        ),
        (
            "---\nname: A b\ndescription: d\n---\nGo.",
            "error a.md:2: name \"A b\"",
        ),
        (
            "---\nname: a\njust words\n---\nGo.",
            "error a.md:3: expected `key: value`",
        ),
        (
            "---\n  - x\nname: a\n---\nGo.",
            "error a.md:2: an indented line",
        ),
        (
            "---\nname: a\ntools: [read, grep\n---\nGo.",
            "error a.md:3: a list opened",
        ),
        (
            "---\nname: \"a\n---\nGo.",
            "error a.md:2: a double quote is not closed",
        ),
        (
            "---\nname: 'a\n---\nGo.",
            "error a.md:2: a single quote is not closed",
        ),
        (
            "---\nname: \"a\\q\"\n---\nGo.",
            "error a.md:2: unknown escape",
        ),
        (
            "---\nname:\n  - a\n---\nGo.",
            "error a.md:2: `name` must be text",
        ),
        (
            "---\ntools:\n  read\n---\nGo.",
            "error a.md:2: expected `- item` lines",
        ),
        (
            "---\nname: a\n  more\n---\nGo.",
            "error a.md:2: a value on the key's line takes no indented lines",
        ),
        ("---\n: x\n---\nGo.", "error a.md:2: \"\" is not a key"),
    ];
    for (text, expect) in rows {
        let got = read(text);
        assert!(got.starts_with(expect), "reading {text:?}: {got}");
    }
}

#[test]
fn listed_tools_read_as_ours_and_the_rest_are_named() {
    let list =
        |names: &[&str]| tool_names(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(
        list(&[
            "Read",
            "grep",
            "Glob",
            "read",
            "BashOutput",
            "mcp__docs__search"
        ]),
        (
            ["read", "grep", "glob", "bash_output", "mcp__docs__search"]
                .map(String::from)
                .to_vec(),
            Vec::new()
        )
    );
    let (names, problems) = list(&["read", "Frobnicate", "spawn_agents", "submit_result"]);
    assert_eq!(names, ["read"]);
    assert_eq!(
        problems,
        [
            "unknown tool `Frobnicate` is left out",
            "tool `spawn_agents` is not available to sub-agents"
        ]
    );
}

#[test]
fn the_spawn_tool_lists_the_types_and_an_agent_may_name_one() {
    let plain = spawn_agents_spec();
    assert_eq!(spawn_agents_spec_with(&[]), plain);
    assert!(
        plain
            .input_schema
            .pointer("/properties/agents/items/properties/agent_type")
            .is_none()
    );
    let typed = spawn_agents_spec_with(&[
        ("reviewer".into(), "Reviews code".into()),
        ("scout".into(), "Finds files".into()),
    ]);
    let param = typed
        .input_schema
        .pointer("/properties/agents/items/properties/agent_type")
        .unwrap();
    assert_eq!(param["enum"], json!(["reviewer", "scout"]));
    assert!(
        param["description"]
            .as_str()
            .unwrap()
            .contains("- scout: Finds files")
    );
    assert!(typed.description.contains("- reviewer: Reviews code"));

    let input = json!({"agents": [
        {"description": "d", "prompt": "p", "agent_type": "reviewer"},
        {"description": "d", "prompt": "p"}
    ]});
    let request = SpawnRequest::parse(&input).unwrap();
    assert_eq!(request.agents[0].agent_type.as_deref(), Some("reviewer"));
    assert_eq!(request.agents[1].agent_type, None);
    let bad = json!({"agents": [{"description": "d", "prompt": "p", "agent_type": 3}]});
    assert_eq!(
        SpawnRequest::parse(&bad).unwrap_err(),
        "spawn_agents: agents[0].agent_type must be a non-empty string"
    );
}

/// A child limited to read, grep and glob calls `bash` and `read` in one
/// reply, in bypass mode: bash is refused with an error result naming what
/// the type allows, read runs.
#[test]
fn a_typed_child_is_refused_a_tool_its_type_does_not_list() {
    let mut ctx = ConvContext {
        now_ms: 1,
        sub_agent: Some(SubAgentRole::default()),
        agent_tools: Some(["read", "grep", "glob"].map(String::from).to_vec()),
        ..ConvContext::default()
    };
    ctx.policy.mode = Mode::Bypass;
    let conv: Conversation = ConvState::Idle.into();
    let t = transition(
        &conv,
        &ctx,
        Event::UserMessage {
            text: "task".into(),
            images: Vec::new(),
            sending: Default::default(),
        },
    )
    .unwrap();
    let reply = Event::LlmCompleted {
        reply: Reply {
            content: vec![
                ContentBlock::ToolUse {
                    id: "b1".into(),
                    name: "bash".into(),
                    input: json!({"command": "touch x"}),
                },
                ContentBlock::ToolUse {
                    id: "r1".into(),
                    name: "read".into(),
                    input: json!({"path": "a.txt"}),
                },
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    };
    let mut conv = t.conversation;
    let mut effects = Vec::new();
    let t = transition(&conv, &ctx, reply).unwrap();
    conv = t.conversation;
    effects.extend(t.effects);
    let executed: Vec<String> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::ExecuteTool { call, .. } => Some(call.name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(executed, ["read"], "{effects:#?}");
    let refused = format!("{conv:?}{effects:?}");
    assert!(
        refused.contains(
            "bash is not available to this sub-agent: its type allows only read, grep, glob, submit_result"
        ),
        "{refused}"
    );
}

/// A name, description, model or tool as the generator writes one.
fn word() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_-]{0,12}"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    /// No text panics the reader; an error names the file and a line.
    #[test]
    fn arbitrary_text_never_panics(text in "(---\n)?(([a-z:\\[\\]\"'# >|-]|\n| ){0,80}\n)?(---\n)?.{0,40}") {
        if let Err(e) = parse("x.md", &text) {
            prop_assert!(e.starts_with("x.md:"), "{e}");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse("x.md", &String::from_utf8_lossy(&bytes));
    }

    /// A file written from valid fields, in any of the list forms, reads
    /// back as those fields.
    #[test]
    fn a_written_file_reads_back(
        name in word(),
        description in "[A-Za-z][A-Za-z0-9 ,.:]{0,30}[a-z]",
        tools in prop::option::of(prop::collection::vec(word(), 1..5)),
        model in prop::option::of(word()),
        form in 0..3u8,
        prompt in "[A-Za-z][A-Za-z0-9 .\n]{0,60}[a-z]",
    ) {
        prop_assume!(model.as_deref() != Some("inherit"));
        let mut text = format!("---\nname: {name}\ndescription: \"{description}\"\n");
        if let Some(tools) = &tools {
            match form {
                0 => text.push_str(&format!("tools: {}\n", tools.join(", "))),
                1 => text.push_str(&format!("tools: [{}]\n", tools.join(", "))),
                _ => {
                    text.push_str("tools:\n");
                    for t in tools {
                        text.push_str(&format!("  - {t}\n"));
                    }
                }
            }
        }
        if let Some(model) = &model {
            text.push_str(&format!("model: {model}\n"));
        }
        text.push_str(&format!("---\n{prompt}\n"));
        let parsed = parse("x.md", &text).unwrap();
        prop_assert!(parsed.warnings.is_empty());
        prop_assert_eq!(parsed.agent, AgentType {
            name,
            description,
            tools,
            model,
            prompt: prompt.trim().to_string(),
        });
    }
}
