//! What the hooks of each stage decide together: a tool call's verdict,
//! text added to a result, a blocked prompt, a stop continued.

use agentd_core::ToolCall;
use agentd_core::hooks::HookVerdict;
use serde_json::{Value, json};

use super::ask::{Answer, Said, ask, failed, report};
use super::{Env, Hook, HookReport, NotificationKind, Stage};

/// What the `pre_tool_use` hooks of a call decided together.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PreToolUse {
    pub verdict: HookVerdict,
    /// The input the call runs with instead.
    pub new_input: Option<Value>,
}

/// Runs the `pre_tool_use` hooks of `call` in order. Each sees the input
/// as the hooks before it left it; the first `deny` (or exit 2) ends the
/// run; otherwise `ask` beats `allow` beats no decision.
pub(crate) async fn pre_tool_use(
    hooks: &[Hook],
    env: &Env,
    call: &ToolCall,
) -> (PreToolUse, Vec<HookReport>) {
    let mut reports = Vec::new();
    let mut input = call.input.clone();
    let mut replaced = false;
    let mut verdict = HookVerdict::None;
    for hook in hooks {
        let payload = env.payload(
            Stage::PreToolUse,
            json!({"tool_name": call.name, "tool_use_id": call.id, "tool_input": input}),
        );
        let (said, took) = ask(hook, env, &payload).await;
        match said {
            Said::Blocked(reason) => {
                reports.push(report(hook, "deny (exit 2)", took, None));
                verdict = HookVerdict::Deny(reason);
                break;
            }
            Said::Failed(e) => reports.push(failed(hook, took, e)),
            Said::Answered(answer) => {
                if answer.context.is_some() {
                    reports.push(failed(
                        hook,
                        took,
                        "`context` is not an answer of pre_tool_use",
                    ));
                    continue;
                }
                if let Some(new) = answer.input {
                    if new.is_object() {
                        input = new;
                        replaced = true;
                    } else {
                        reports.push(failed(hook, took, "`input` must be a JSON object"));
                        continue;
                    }
                }
                let reason = answer.reason.unwrap_or_default();
                let word = match answer.decision.as_deref() {
                    None => "none",
                    Some("allow") => {
                        if verdict == HookVerdict::None {
                            verdict = HookVerdict::Allow;
                        }
                        "allow"
                    }
                    Some("ask") => {
                        if !matches!(verdict, HookVerdict::Ask(_)) {
                            verdict = HookVerdict::Ask(reason.clone());
                        }
                        "ask"
                    }
                    Some("deny") => {
                        verdict = HookVerdict::Deny(reason);
                        reports.push(report(hook, "deny", took, None));
                        break;
                    }
                    Some(other) => {
                        reports.push(failed(
                            hook,
                            took,
                            format!("unknown decision {other:?} (expected allow, deny or ask)"),
                        ));
                        continue;
                    }
                };
                let word = if replaced && word == "none" {
                    "input replaced"
                } else {
                    word
                };
                reports.push(report(hook, word, took, None));
            }
        }
    }
    let new_input = replaced.then_some(input);
    (PreToolUse { verdict, new_input }, reports)
}

/// Runs the `post_tool_use` hooks of a call that ran; returns the text
/// they add to its result (their `context`, or stderr on exit 2).
pub(crate) async fn post_tool_use(
    hooks: &[Hook],
    env: &Env,
    call: &ToolCall,
    result: &str,
    is_error: bool,
) -> (Vec<String>, Vec<HookReport>) {
    let payload = env.payload(
        Stage::PostToolUse,
        json!({
            "tool_name": call.name,
            "tool_use_id": call.id,
            "tool_input": call.input,
            "tool_result": {"content": result, "is_error": is_error},
        }),
    );
    let mut added = Vec::new();
    let mut reports = Vec::new();
    for hook in hooks {
        let (said, took) = ask(hook, env, &payload).await;
        reports.push(match said {
            Said::Blocked(text) => {
                added.push(text);
                report(hook, "context (exit 2)", took, None)
            }
            Said::Failed(e) => failed(hook, took, e),
            Said::Answered(Answer {
                decision: None,
                input: None,
                context,
                reason: _,
            }) => match context.filter(|c| !c.trim().is_empty()) {
                Some(text) => {
                    added.push(text);
                    report(hook, "context", took, None)
                }
                None => report(hook, "none", took, None),
            },
            Said::Answered(_) => failed(hook, took, "post_tool_use answers with `context` only"),
        });
    }
    (added, reports)
}

/// What the hooks before a user message said.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Prompt {
    /// Send it, with this context after the text (empty: none).
    Send { context: Vec<String> },
    /// Refuse it, telling the user why.
    Block(String),
}

/// Runs the `session_start` hooks (for a conversation's first message)
/// then the `user_prompt_submit` hooks, in order, until one blocks.
pub(crate) async fn before_prompt(
    session_start: &[Hook],
    prompt_submit: &[Hook],
    env: &Env,
    text: &str,
) -> (Prompt, Vec<HookReport>) {
    let mut context = Vec::new();
    let mut reports = Vec::new();
    let start = env.payload(Stage::SessionStart, json!({}));
    let submit = env.payload(Stage::UserPromptSubmit, json!({"prompt": text}));
    for hook in session_start.iter().chain(prompt_submit) {
        let payload = if hook.stage == Stage::SessionStart {
            &start
        } else {
            &submit
        };
        let (said, took) = ask(hook, env, payload).await;
        let can_block = hook.stage == Stage::UserPromptSubmit;
        match said {
            Said::Blocked(reason) if can_block => {
                reports.push(report(hook, "block (exit 2)", took, None));
                return (Prompt::Block(reason), reports);
            }
            Said::Blocked(_) => reports.push(failed(
                hook,
                took,
                "exited with 2, which session_start hooks cannot use to block",
            )),
            Said::Failed(e) => reports.push(failed(hook, took, e)),
            Said::Answered(answer) => {
                if answer.input.is_some() {
                    reports.push(failed(
                        hook,
                        took,
                        format!("`input` is not an answer of {}", hook.stage.as_str()),
                    ));
                    continue;
                }
                match answer.decision.as_deref() {
                    Some("block") if can_block => {
                        reports.push(report(hook, "block", took, None));
                        let reason = answer.reason.unwrap_or_default();
                        return (Prompt::Block(reason), reports);
                    }
                    Some(other) => {
                        reports.push(failed(
                            hook,
                            took,
                            format!("unknown decision {other:?} for {}", hook.stage.as_str()),
                        ));
                        continue;
                    }
                    None => {}
                }
                match answer.context.filter(|c| !c.trim().is_empty()) {
                    Some(text) => {
                        context.push(text);
                        reports.push(report(hook, "context", took, None));
                    }
                    None => reports.push(report(hook, "none", took, None)),
                }
            }
        }
    }
    (Prompt::Send { context }, reports)
}

/// Runs the `stop` hooks; the first that wants the model to go on (its
/// `decision: "continue"` with a reason, or exit 2 with stderr) wins.
pub(crate) async fn stop(
    hooks: &[Hook],
    env: &Env,
    last_reply: &str,
) -> (Option<String>, Vec<HookReport>) {
    let payload = env.payload(Stage::Stop, json!({"last_reply": last_reply}));
    let mut reports = Vec::new();
    for hook in hooks {
        let (said, took) = ask(hook, env, &payload).await;
        match said {
            Said::Blocked(reason) => {
                reports.push(report(hook, "continue (exit 2)", took, None));
                return (Some(reason), reports);
            }
            Said::Failed(e) => reports.push(failed(hook, took, e)),
            Said::Answered(answer) => match answer.decision.as_deref() {
                None if answer.input.is_none() && answer.context.is_none() => {
                    reports.push(report(hook, "none", took, None));
                }
                Some("continue") if answer.input.is_none() && answer.context.is_none() => {
                    let reason = answer.reason.unwrap_or_default();
                    if reason.trim().is_empty() {
                        reports.push(failed(
                            hook,
                            took,
                            "`continue` needs a `reason` for the model",
                        ));
                        continue;
                    }
                    reports.push(report(hook, "continue", took, None));
                    return (Some(reason), reports);
                }
                _ => reports.push(failed(
                    hook,
                    took,
                    "stop hooks answer with `decision: \"continue\"` and a `reason` only"
                        .to_string(),
                )),
            },
        }
    }
    (None, reports)
}

/// Runs the notification hooks of `kind`; their answers are not read, but
/// a failure is reported.
pub(crate) async fn notify(
    hooks: &[Hook],
    env: &Env,
    kind: NotificationKind,
    message: &str,
) -> Vec<HookReport> {
    let payload = env.payload(
        Stage::Notification,
        json!({"kind": kind.as_str(), "message": message}),
    );
    let mut reports = Vec::new();
    for hook in hooks {
        let (said, took) = ask(hook, env, &payload).await;
        reports.push(match said {
            Said::Failed(e) => failed(hook, took, e),
            Said::Blocked(_) | Said::Answered(_) => report(hook, "sent", took, None),
        });
    }
    reports
}
