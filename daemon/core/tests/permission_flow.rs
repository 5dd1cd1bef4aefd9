//! The policy inside `transition()`: what a permission request carries,
//! refusals by mode, and the doom-loop setting.

#![expect(clippy::unwrap_used)]

use agentd_core::Conversation;
use agentd_core::effect::Effect;
use agentd_core::event::Event;
use agentd_core::loops::PastCall;
use agentd_core::message::{ContentBlock, Reply, StopReason, ToolCall, Usage};
use agentd_core::permission::{Action, Decision, Mode, PermissionAsk, Policy, Rule};
use agentd_core::state::{ConvContext, ConvState, ToolRun};
use agentd_core::transition::{Transition, transition};
use serde_json::{Value, json};

fn ctx(policy: Policy) -> ConvContext {
    ConvContext {
        now_ms: 1_000,
        policy,
        ..ConvContext::default()
    }
}

fn policy(mode: Mode, rules: &[&str]) -> Policy {
    let mut p = Policy::new(mode, "/w/p");
    p.rules = rules.iter().map(|r| r.parse::<Rule>().unwrap()).collect();
    p
}

/// The model asks for `calls` (name, input) in one reply.
fn reply(ctx: &ConvContext, calls: &[(&str, Value)]) -> Transition {
    let content = calls
        .iter()
        .enumerate()
        .map(|(i, (name, input))| ContentBlock::ToolUse {
            id: format!("t{}", i + 1),
            name: name.to_string(),
            input: input.clone(),
        })
        .collect();
    let state = ConvState::LlmRequesting {
        attempt: 1,
        iteration: 1,
        retry: None,
        early: Default::default(),
    };
    let event = Event::LlmCompleted {
        reply: Reply {
            content,
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    };
    // The conversation is in the mode its policy was built in.
    let conv = Conversation {
        mode: ctx.policy.mode,
        ..state.into()
    };
    transition(&conv, ctx, event).unwrap()
}

fn ask(t: &Transition) -> &PermissionAsk {
    t.effects
        .iter()
        .find_map(|e| match e {
            Effect::AskPermission { ask } => Some(ask),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no permission request in {:#?}", t.effects))
}

fn executed(t: &Transition) -> Vec<String> {
    t.effects
        .iter()
        .filter_map(|e| match e {
            Effect::ExecuteTool { call, .. } => Some(call.name.clone()),
            _ => None,
        })
        .collect()
}

/// The results written back to the model, as (id, text, is_error).
fn results(t: &Transition) -> Vec<(String, String, bool)> {
    t.effects
        .iter()
        .filter_map(|e| match e {
            Effect::AppendMessage { message } => Some(message),
            _ => None,
        })
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } => Some((tool_use_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

const ALL_OPTIONS: [Decision; 5] = [
    Decision::AllowOnce,
    Decision::AllowAlways,
    Decision::Deny,
    Decision::DenyAndStop,
    Decision::Never,
];

#[test]
fn a_request_suggests_a_scoped_rule() {
    let c = ctx(policy(Mode::Default, &[]));
    let t = reply(&c, &[("bash", json!({"command": "cargo test -p x"}))]);
    let a = ask(&t);
    assert_eq!(a.suggested_rule, "bash(cargo test:*)");
    let mut bash_options = ALL_OPTIONS.to_vec();
    bash_options.push(Decision::Background);
    assert_eq!(a.options, bash_options);
    assert!(a.reason.contains("`cargo test -p x`"), "{}", a.reason);

    let t = reply(&c, &[("bash", json!({"command": "git status"}))]);
    assert_eq!(ask(&t).suggested_rule, "bash(git status)");

    let t = reply(&c, &[("edit", json!({"path": "src/x/a.rs"}))]);
    assert_eq!(ask(&t).suggested_rule, "edit(src/x/**)");

    let t = reply(&c, &[("kill_shell", json!({"shell_id": "s1"}))]);
    assert_eq!(ask(&t).suggested_rule, "kill_shell");
    assert_eq!(ask(&t).options, ALL_OPTIONS);
}

#[test]
fn no_always_or_never_without_a_narrow_rule() {
    let c = ctx(policy(Mode::Default, &[]));
    for input in [json!({"command": "echo 'unterminated"}), json!({})] {
        let t = reply(&c, &[("bash", input)]);
        let a = ask(&t);
        assert_eq!(a.suggested_rule, "bash");
        assert_eq!(
            a.options,
            [
                Decision::AllowOnce,
                Decision::Deny,
                Decision::DenyAndStop,
                Decision::Background
            ]
        );
    }
}

#[test]
fn background_is_offered_for_bash_only() {
    let c = ctx(policy(Mode::Default, &[]));
    let t = reply(&c, &[("bash", json!({"command": "sleep 100"}))]);
    assert!(ask(&t).options.contains(&Decision::Background));
    let t = reply(&c, &[("write", json!({"path": "a.txt", "content": "x"}))]);
    assert!(!ask(&t).options.contains(&Decision::Background));
}

#[test]
fn allowed_calls_run_and_denied_ones_answer_with_the_reason() {
    let c = ctx(policy(
        Mode::Default,
        &["allow bash(cargo test:*)", "deny bash(rm:*)"],
    ));
    let t = reply(&c, &[("bash", json!({"command": "cargo test"}))]);
    assert_eq!(executed(&t), ["bash"]);

    let t = reply(
        &c,
        &[
            ("bash", json!({"command": "rm -rf x"})),
            ("read", json!({"path": "a"})),
        ],
    );
    // The denial is the call's result; the read runs.
    assert_eq!(executed(&t), ["read"]);
    let ConvState::ToolExecuting(ToolRun { results, .. }) = &t.conversation.state else {
        panic!("{:?}", t.conversation.state)
    };
    assert!(results[0].is_error);
    assert!(
        results[0]
            .content
            .starts_with("Permission to use bash has been denied by the rule `deny bash(rm:*)`"),
        "{}",
        results[0].content
    );
}

#[test]
fn read_only_mode_refuses_mutating_tools_without_asking() {
    let c = ctx(policy(Mode::ReadOnly, &["allow write"]));
    let t = reply(&c, &[("write", json!({"path": "a", "content": "x"}))]);
    assert!(executed(&t).is_empty());
    assert!(
        !t.effects
            .iter()
            .any(|e| matches!(e, Effect::AskPermission { .. }))
    );
    let r = results(&t);
    assert_eq!(r.len(), 1);
    assert_eq!(
        r[0],
        (
            "t1".to_string(),
            "write is not available in read_only mode; use request_mode_upgrade to ask for write \
             access"
                .to_string(),
            true
        )
    );
    // The loop goes on.
    assert!(matches!(
        t.conversation.state,
        ConvState::LlmRequesting { .. }
    ));
}

/// An earlier call of round 0 that succeeded with no output.
fn past(call: &ToolCall) -> PastCall {
    PastCall::new(call, 0, None)
}

fn looping(doom_loop: Action) -> ConvContext {
    let mut p = policy(Mode::Default, &["allow bash"]);
    p.doom_loop = doom_loop;
    let call = |id: &str| ToolCall {
        id: id.to_string(),
        name: "bash".to_string(),
        input: json!({"command": "ls"}),
    };
    ConvContext {
        recent_calls: vec![past(&call("old1")), past(&call("old2"))],
        ..ctx(p)
    }
}

#[test]
fn doom_loop_setting_ask_allow_deny() {
    let input = json!({"command": "ls"});
    let t = reply(&looping(Action::Ask), &[("bash", input.clone())]);
    let a = ask(&t);
    assert!(
        a.reason
            .starts_with("doom loop: bash was called with identical input 3 times")
    );
    assert_eq!(
        a.options,
        [Decision::AllowOnce, Decision::Deny, Decision::DenyAndStop]
    );

    let t = reply(&looping(Action::Allow), &[("bash", input.clone())]);
    assert_eq!(executed(&t), ["bash"]);

    let t = reply(&looping(Action::Deny), &[("bash", input.clone())]);
    assert!(executed(&t).is_empty());
    let r = results(&t);
    assert_eq!(r.len(), 1);
    assert!(
        r[0].1.starts_with("doom loop: bash was called"),
        "{}",
        r[0].1
    );
    assert!(r[0].2);

    // A call the policy denies stays denied by the policy.
    let mut c = looping(Action::Allow);
    c.policy.rules.push("deny bash(ls)".parse().unwrap());
    let t = reply(&c, &[("bash", input)]);
    assert!(results(&t)[0].1.contains("deny bash(ls)"));
}

/// MCP tools (`mcp__SERVER__TOOL`) are a class of their own: unlike an
/// unknown name they ask by default, rules on the server's tools
/// (`mcp__github__*`) or on one tool hold them, and only the tools the
/// runtime lists as read-only (a trusted server's hint) run unasked, run
/// together, and stay allowed in read-only mode.
#[test]
fn mcp_tools_ask_by_default_and_follow_rules_and_trusted_hints() {
    let c = ctx(policy(Mode::Default, &[]));
    let t = reply(&c, &[("mcp__github__create_issue", json!({"title": "x"}))]);
    let a = ask(&t);
    assert_eq!(a.tool_name, "mcp__github__create_issue");
    assert_eq!(a.suggested_rule, "mcp__github__create_issue");
    assert!(executed(&t).is_empty());
    // An unknown name is not asked about: the tool layer refuses it.
    let t = reply(&c, &[("nonesuch", json!({}))]);
    assert_eq!(executed(&t), ["nonesuch"]);

    let c = ctx(policy(
        Mode::Default,
        &["allow mcp__github__*", "deny mcp__github__delete_repo"],
    ));
    let t = reply(&c, &[("mcp__github__create_issue", json!({}))]);
    assert_eq!(executed(&t), ["mcp__github__create_issue"]);
    let t = reply(&c, &[("mcp__github__delete_repo", json!({}))]);
    assert!(executed(&t).is_empty());
    assert!(results(&t)[0].1.contains("mcp__github__delete_repo"));
    // The wildcard stops at the server: another server's tool still asks.
    let t = reply(&c, &[("mcp__githubx__create_issue", json!({}))]);
    assert!(executed(&t).is_empty());
    ask(&t);

    let mut p = policy(Mode::ReadOnly, &[]);
    p.mcp_read_only = ["mcp__fs__list".to_string()].into_iter().collect();
    let c = ctx(p);
    let t = reply(
        &c,
        &[
            ("mcp__fs__list", json!({})),
            ("mcp__fs__list", json!({"dir": "b"})),
            ("mcp__fs__write", json!({})),
        ],
    );
    // The two read-only calls run together without asking; the write is
    // refused by the mode.
    assert_eq!(executed(&t), ["mcp__fs__list", "mcp__fs__list"]);
    assert!(
        t.effects
            .iter()
            .all(|e| !matches!(e, Effect::AskPermission { .. }))
    );
}
