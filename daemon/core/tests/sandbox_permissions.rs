//! The permission model and the OS sandbox: `auto` mode runs sandboxed
//! commands unasked, leaving the sandbox always asks (except in bypass),
//! commands known to need the network ask when the sandbox cuts it, and
//! the hint a command stopped by the sandbox gets.

#![expect(clippy::unwrap_used)]

use agentd_core::message::ToolCall;
use agentd_core::permission::{
    Mode, Policy, Rule, Sandboxed, Verdict, needs_network, sandbox_hint,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn policy(mode: Mode, sandbox: Option<Sandboxed>, rules: &[&str]) -> Policy {
    let mut p = Policy::new(mode, "/w/p");
    p.sandbox = sandbox;
    p.rules = rules.iter().map(|r| r.parse::<Rule>().unwrap()).collect();
    p
}

fn call(input: Value) -> ToolCall {
    ToolCall {
        id: "t1".to_string(),
        name: "bash".to_string(),
        input,
    }
}

fn bash(command: &str) -> ToolCall {
    call(json!({ "command": command }))
}

fn unsandboxed(command: &str, why: &str) -> ToolCall {
    call(json!({ "command": command, "sandbox": "off", "justification": why }))
}

const NO_NET: Option<Sandboxed> = Some(Sandboxed { network: false });
const NET: Option<Sandboxed> = Some(Sandboxed { network: true });

fn asks(v: &Verdict, text: &str) -> bool {
    matches!(v, Verdict::Ask(reason) if reason.contains(text))
}

#[test]
fn auto_runs_sandboxed_commands_unasked() {
    let p = policy(Mode::Auto, NO_NET, &[]);
    for command in [
        "touch x",
        "cargo build",
        "rm -rf target",
        "echo hi > /etc/x",
        "sudo ls",
    ] {
        assert_eq!(p.evaluate(&bash(command)), Verdict::Allow, "{command}");
    }
    // File edits inside the working directory too, as in accept_edits.
    let write = ToolCall {
        id: "t2".to_string(),
        name: "write".to_string(),
        input: json!({"path": "src/a.rs", "content": "x"}),
    };
    assert_eq!(p.evaluate(&write), Verdict::Allow);
}

#[test]
fn auto_without_a_sandbox_asks_as_default_does() {
    let p = policy(Mode::Auto, None, &[]);
    assert!(asks(&p.evaluate(&bash("touch x")), "needs permission"));
}

#[test]
fn network_commands_ask_in_auto_when_the_sandbox_cuts_the_network() {
    let p = policy(Mode::Auto, NO_NET, &[]);
    for (command, shown) in [
        (
            "curl http://127.0.0.1:8080/",
            "`curl http://127.0.0.1:8080/`",
        ),
        ("git fetch origin", "`git fetch origin`"),
        ("sudo /usr/bin/wget x", "`/usr/bin/wget x`"),
        ("cargo install ripgrep", "`cargo install ripgrep`"),
        ("npm install", "`npm install`"),
    ] {
        let v = p.evaluate(&bash(command));
        assert_eq!(
            v,
            Verdict::Ask(format!(
                "{shown} needs the network, which the sandbox cuts off"
            )),
            "{command}"
        );
    }
    for command in ["git status", "cargo build", "npm test", "pip list"] {
        assert_eq!(p.evaluate(&bash(command)), Verdict::Allow, "{command}");
    }
    // With the network on, they run unasked.
    let p = policy(Mode::Auto, NET, &[]);
    assert_eq!(p.evaluate(&bash("curl http://x/")), Verdict::Allow);
}

#[test]
fn leaving_the_sandbox_always_asks_with_the_reason() {
    let call = unsandboxed("cargo build", "needs the registry");
    for (mode, rules) in [
        (Mode::Auto, &[][..]),
        (Mode::Default, &["allow bash"][..]),
        (Mode::AcceptEdits, &["allow bash(cargo build)"][..]),
        (Mode::Auto, &["allow bash(cargo:*)"][..]),
    ] {
        let v = policy(mode, NO_NET, rules).evaluate(&call);
        assert!(
            asks(&v, "run unsandboxed: needs the registry"),
            "{mode}: {v:?}"
        );
    }
    let v = policy(Mode::Auto, NET, &[]).evaluate(&unsandboxed("ls", " "));
    assert!(asks(&v, "run unsandboxed (no reason given)"), "{v:?}");
    // Bypass still bypasses; without a sandbox there is nothing to leave.
    assert_eq!(
        policy(Mode::Bypass, NO_NET, &[]).evaluate(&call),
        Verdict::Allow
    );
    let v = policy(Mode::Default, None, &[]).evaluate(&call);
    assert!(!asks(&v, "run unsandboxed"), "{v:?}");
}

#[test]
fn deny_rules_win_over_leaving_the_sandbox() {
    let p = policy(Mode::Auto, NO_NET, &["deny bash(rm:*)"]);
    assert!(matches!(
        p.evaluate(&unsandboxed("rm -rf /", "x")),
        Verdict::Deny(_)
    ));
    assert!(matches!(p.evaluate(&bash("rm -rf x")), Verdict::Deny(_)));
}

#[test]
fn needs_network_reads_the_line() {
    assert!(needs_network("curl -s http://x | jq ."));
    assert!(needs_network("cd x && git -q pull"));
    assert!(needs_network("sh -c 'wget x'"));
    assert!(!needs_network("git status; cargo test"));
    assert!(!needs_network("echo curl"));
    assert!(!needs_network("((("));
}

#[test]
fn the_hint_comes_with_sandbox_denials_only() {
    let hint = sandbox_hint(
        "touch: cannot touch '/x': Permission denied\n[exit code 1]",
        false,
    )
    .unwrap();
    assert!(
        hint.contains("ran inside the sandbox") && hint.contains("has no network"),
        "{hint}"
    );
    assert!(
        hint.contains("sandbox: \"off\" and a justification"),
        "{hint}"
    );
    let hint = sandbox_hint("curl: (6) Could not resolve host: x", true).unwrap();
    assert!(!hint.contains("no network"), "{hint}");
    assert_eq!(sandbox_hint("error[E0308]: mismatched types", false), None);
}

proptest! {
    /// Whatever the mode, the rules and the command: a call that leaves
    /// the sandbox is never allowed unasked, except in bypass mode.
    #[test]
    fn leaving_the_sandbox_is_never_allowed_unasked(
        mode in prop_oneof![Just(Mode::Default), Just(Mode::AcceptEdits), Just(Mode::Auto), Just(Mode::Bypass)],
        rule in prop_oneof![Just(None), Just(Some("allow bash")), Just(Some("allow bash(ls:*)")), Just(Some("allow bash(curl:*)"))],
        command in prop_oneof![Just("ls -la"), Just("curl http://x"), Just("touch a; ls")],
        network in any::<bool>(),
    ) {
        let rules: Vec<&str> = rule.into_iter().collect();
        let p = policy(mode, Some(Sandboxed { network }), &rules);
        let v = p.evaluate(&unsandboxed(command, "why"));
        if mode == Mode::Bypass {
            prop_assert_eq!(v, Verdict::Allow);
        } else {
            prop_assert!(asks(&v, "run unsandboxed: why"), "{:?}", v);
        }
    }
}
