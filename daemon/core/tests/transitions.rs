//! Data-driven tests of `transition()`.
//!
//! Every test goes through one helper, [`check`], which renders the outcome
//! (the new state and its effects, or the rejection) as compact text and
//! compares it with the expected text. When a test fails, the message shows
//! the actual rendering, ready to be reviewed and pasted.
//!
//! The rows of the seed's transition matrix (bedrock-state-machine-design.md)
//! are covered in the `matrix_*` tests, REJECT rows included; the rest follow
//! the behaviours of design.md §3 and the parity spec §1–§3, §5.

#![expect(clippy::unwrap_used)]

use agentd_core::budget::{Amounts, BudgetContext, BudgetKind, BudgetStop};
use agentd_core::effect::{Effect, LlmPurpose, Notice};
use agentd_core::event::{Event, LlmFailure, PromptHooks, RuleScope, Sending};
use agentd_core::loops::PastCall;
use agentd_core::message::{
    ContentBlock, Message, Reply, Role, StopReason, ToolCall, ToolResult, Usage,
};
use agentd_core::permission::{Decision, Mode, PermissionAsk, Policy};
use agentd_core::state::{
    ContextExhaustionBehavior, ConvContext, ConvState, ErrorKind, RetryWait, SubAgentResult,
    SubAgentRole, ToolRun,
};
use agentd_core::texts;
use agentd_core::transition::{Rejected, Transition, transition};
use agentd_core::{ContinuationChain, Conversation, QueuedMessage, ShellNote};
use serde_json::{Value, json};
use std::fmt::Write as _;

// ---------------------------------------------------------------------------
// The helper and its renderer.
// ---------------------------------------------------------------------------

/// Applies `event` to `state` and compares the rendered outcome with
/// `expect`. Lines are compared after trimming; blank lines are ignored, so
/// the expectation can be indented like the code around it.
#[track_caller]
fn check(conv: impl Into<Conversation>, ctx: &ConvContext, event: Event, expect: &str) {
    let conv = in_mode(conv, ctx);
    let first = transition(&conv, ctx, event.clone());
    // Purity: the same inputs give the same output.
    let second = transition(&conv, ctx, event);
    assert_eq!(first, second, "transition is not deterministic");
    let actual = render(&conv, &first);
    let expect = normalize(expect);
    if actual != expect {
        panic!(
            "\n--- state: {}\n--- expected:\n{}\n--- actual:\n{}\n",
            render_state(&conv.state),
            indent(&expect),
            indent(&actual)
        );
    }
}

/// `conv` in the mode of `ctx`'s policy: the runtime builds the policy in
/// the conversation's mode, and these tests set it there.
fn in_mode(conv: impl Into<Conversation>, ctx: &ConvContext) -> Conversation {
    Conversation {
        mode: ctx.policy.mode,
        ..conv.into()
    }
}

/// `transition` on `conv` in the mode of `ctx`'s policy.
fn run(
    conv: impl Into<Conversation>,
    ctx: &ConvContext,
    event: Event,
) -> Result<Transition, Rejected> {
    transition(&in_mode(conv, ctx), ctx, event)
}

fn normalize(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// The outcome of an event on `before`: the new state, what else of the
/// conversation changed, the effects.
fn render(before: &Conversation, result: &Result<Transition, Rejected>) -> String {
    match result {
        Err(rejected) => format!("REJECT {rejected}"),
        Ok(t) => {
            let after = &t.conversation;
            let mut out = render_state(&after.state);
            if after.mode != before.mode {
                write!(out, " mode={}", after.mode).unwrap();
            }
            let delivered = before.queue.len() - after.queue.len();
            if delivered > 0 {
                write!(out, " delivered={delivered}").unwrap();
            }
            let c = &after.corrections;
            if *c != before.corrections && !c.chains.is_empty() {
                let chains: Vec<String> = c
                    .chains
                    .iter()
                    .map(|ch| format!("{:?}:{}", ch.original_request, ch.attempts.len()))
                    .collect();
                write!(out, " corrections=[{}]", chains.join(" ")).unwrap();
            }
            if after.continuation != before.continuation {
                write!(out, " chain=[{}]", render_chain(&after.continuation)).unwrap();
            }
            let s = &after.sub_agents;
            if *s != before.sub_agents {
                write!(
                    out,
                    " sub_agents=[{} ${} counted={}]",
                    render_usage(&s.usage),
                    s.cost_usd,
                    s.counted.join(",")
                )
                .unwrap();
            }
            let n = &after.shell_notes;
            if *n != before.shell_notes {
                let pending: Vec<&str> = n.pending.iter().map(|p| p.shell_id.as_str()).collect();
                write!(
                    out,
                    " shell_notes=[{}] noted=[{}]",
                    pending.join(","),
                    n.noted.join(",")
                )
                .unwrap();
            }
            for effect in &t.effects {
                out.push_str("\n+ ");
                out.push_str(&render_effect(effect));
            }
            out
        }
    }
}

/// Where a conversation stands in its chain of continuations.
fn render_chain(c: &ContinuationChain) -> String {
    let mut out = format!("hop={}", c.hop);
    if let Some(parent) = &c.parent_id {
        write!(out, " parent={parent}").unwrap();
    }
    if let Some(next) = &c.continued_as {
        write!(out, " continued_as={next}").unwrap();
    }
    if c.continued_automatically {
        out.push_str(" automatically");
    }
    if c.pending {
        out.push_str(" pending");
    }
    out
}

fn render_state(state: &ConvState) -> String {
    let mut out = state.name().to_string();
    match state {
        ConvState::Idle => {}
        ConvState::AwaitingLlm { iteration } => write!(out, " iter={iteration}").unwrap(),
        ConvState::LlmRequesting {
            attempt,
            iteration,
            retry,
            early,
        } => {
            write!(out, " attempt={attempt} iter={iteration}").unwrap();
            if !early.is_empty() {
                write!(
                    out,
                    " early={} running={} answered={}",
                    early.calls.len(),
                    early.running.len(),
                    early.results.len(),
                )
                .unwrap();
            }
            if let Some(RetryWait { delay_ms, reason }) = retry {
                write!(out, " retry_in={delay_ms}ms reason={reason:?}").unwrap();
            }
        }
        ConvState::ToolExecuting(run) => {
            let calls: Vec<String> = run
                .calls
                .iter()
                .map(|c| format!("{}:{}", c.id, c.name))
                .collect();
            let results: Vec<String> = run
                .results
                .iter()
                .map(|r| {
                    if r.is_error {
                        format!("{}(err)", r.tool_use_id)
                    } else {
                        r.tool_use_id.clone()
                    }
                })
                .collect();
            write!(
                out,
                " iter={} calls=[{}] running=[{}] results=[{}]",
                run.iteration,
                calls.join(" "),
                run.running.join(" "),
                results.join(" ")
            )
            .unwrap();
            if let Some(ask) = &run.permission {
                write!(out, " ask={}", ask.request_id).unwrap();
            }
            if let Some(feedback) = &run.stop_with_feedback {
                write!(out, " stop_with_feedback={feedback:?}").unwrap();
            }
            if let Some(id) = &run.hooking {
                write!(out, " hooking={id}").unwrap();
            }
            for (id, verdict) in &run.hook_verdicts {
                write!(out, " hooked:{id}={verdict:?}").unwrap();
            }
        }
        ConvState::Cancelling { iteration } | ConvState::StopHooks { iteration } => {
            write!(out, " iter={iteration}").unwrap()
        }
        ConvState::AwaitingSubAgents {
            pending_ids,
            completed,
            agents,
            call_id,
            run,
        } => {
            let done: Vec<&str> = completed.iter().map(|r| r.agent_id.as_str()).collect();
            let calls: Vec<&str> = run.calls.iter().map(|c| c.id.as_str()).collect();
            let results: Vec<&str> = run.results.iter().map(|r| r.tool_use_id.as_str()).collect();
            write!(
                out,
                " call={call_id} agents=[{}] pending=[{}] completed=[{}] calls=[{}] results=[{}]",
                agents.join(" "),
                pending_ids.join(" "),
                done.join(" "),
                calls.join(" "),
                results.join(" ")
            )
            .unwrap();
        }
        ConvState::AwaitingContinuation {
            rejected_tool_calls,
            trigger_usage,
            attempt,
        } => {
            let names: Vec<&str> = rejected_tool_calls
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            write!(
                out,
                " attempt={attempt} rejected=[{}] usage={}",
                names.join(" "),
                render_usage(trigger_usage)
            )
            .unwrap();
        }
        ConvState::ContextExhausted {
            summary,
            final_usage,
        } => {
            write!(
                out,
                " usage={} summary={}",
                render_usage(final_usage),
                render_text(summary)
            )
            .unwrap();
        }
        ConvState::Error { message, kind } => {
            write!(out, " kind={} message={}", wire(kind), render_text(message)).unwrap();
        }
        ConvState::BudgetStopped { iteration, stop } => {
            write!(out, " iter={iteration} {}", render_stop(stop)).unwrap();
        }
    }
    out
}

fn render_stop(stop: &BudgetStop) -> String {
    format!(
        "budget={} limit={} spent={} raise_by={}",
        stop.kind.name(),
        stop.limit,
        stop.spent,
        stop.raise_by
    )
}

fn render_usage(u: &Usage) -> String {
    format!(
        "{}/{}/{}/{}",
        u.input_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens, u.output_tokens
    )
}

/// The serde name of a unit-like enum value (ErrorKind, Decision, StopReason).
fn wire<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value).unwrap() {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// Texts are shown quoted; the two long seed texts are abbreviated (their
/// exact wording is checked once, in `seed_texts_are_exact`).
fn render_text(text: &str) -> String {
    let interrupt = format!(
        "{}\n\n{}",
        texts::INTERRUPT_TOOL,
        texts::INTERRUPT_EXPLANATION
    );
    if text == interrupt {
        return "<INTERRUPT_TOOL+EXPLANATION>".to_string();
    }
    if let Some(rest) = text.strip_prefix(texts::CONTINUATION_PROMPT) {
        return format!("<CONTINUATION_PROMPT>{rest:?}");
    }
    format!("{text:?}")
}

fn render_block(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text { text } => format!("text {}", render_text(text)),
        ContentBlock::Thinking {
            thinking,
            signature,
        } => format!("thinking {thinking:?} sig={signature:?}"),
        ContentBlock::RedactedThinking { data } => format!("redacted {data:?}"),
        ContentBlock::ServerTool { block } => format!("server {block}"),
        ContentBlock::Image(image) => format!("image {} {}", image.describe(), image.sha256),
        ContentBlock::ToolUse { id, name, input } => format!("tool_use {id} {name} {input}"),
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            ..
        } => {
            let err = if *is_error { " ERR" } else { "" };
            format!("result {tool_use_id}{err} {}", render_text(content))
        }
    }
}

fn render_message(m: &Message) -> String {
    let mut head = match m.role {
        Role::User => "user".to_string(),
        Role::Assistant => "assistant".to_string(),
    };
    if let Some(stop) = &m.stop_reason {
        write!(head, " stop={}", stop.as_wire()).unwrap();
    }
    if m.interrupted {
        head.push_str(" interrupted");
    }
    if !m.kind.is_ordinary() {
        write!(head, " kind={}", wire(&m.kind)).unwrap();
    }
    let blocks: Vec<String> = m.content.iter().map(render_block).collect();
    format!("{head}: {}", blocks.join(" | "))
}

fn render_effect(effect: &Effect) -> String {
    match effect {
        Effect::AppendMessage { message } => format!("append {}", render_message(message)),
        Effect::RequestLlm { attempt, purpose } => match purpose {
            LlmPurpose::Turn => format!("request attempt={attempt} turn"),
            LlmPurpose::Continuation { prompt } => {
                format!(
                    "request attempt={attempt} continuation {}",
                    render_text(prompt)
                )
            }
        },
        Effect::AbortLlm => "abort_llm".to_string(),
        Effect::ScheduleRetry { attempt, delay_ms } => {
            format!("schedule_retry attempt={attempt} delay={delay_ms}ms")
        }
        Effect::CancelRetry => "cancel_retry".to_string(),
        Effect::ExecuteTool { call, background } => format!(
            "execute {} {} {}{}",
            call.id,
            call.name,
            call.input,
            if *background { " in background" } else { "" }
        ),
        Effect::AbortTools { tool_use_ids } => format!("abort_tools [{}]", tool_use_ids.join(" ")),
        Effect::AskPermission { ask } => {
            let options: Vec<String> = ask.options.iter().map(wire).collect();
            format!(
                "ask {} tool={}:{} reason={:?} options=[{}] rule={:?}",
                ask.request_id,
                ask.tool_use_id,
                ask.tool_name,
                ask.reason,
                options.join(" "),
                ask.suggested_rule
            )
        }
        Effect::PermissionResolved { ask, decision, by } => match by {
            Some(client) => format!(
                "resolved {} {} by {}",
                ask.request_id,
                wire(decision),
                client.name
            ),
            None => format!("resolved {} {}", ask.request_id, wire(decision)),
        },
        Effect::AddRule { rule, scope } => format!("add rule {} for {scope:?}", rule.spec()),
        Effect::Notify { notice } => match notice {
            Notice::Retrying {
                attempt,
                max_attempts,
                delay_ms,
                reason,
            } => format!(
                "notify retrying {attempt}/{max_attempts} in {delay_ms}ms reason={reason:?}"
            ),
            Notice::Error { message, kind } => {
                format!("notify error kind={} {}", wire(kind), render_text(message))
            }
            Notice::Info { message } => format!("notify info {}", render_text(message)),
            Notice::Recovered { message } => format!("notify recovered {}", render_text(message)),
            Notice::ContextWarning {
                used_tokens,
                context_window,
            } => format!("notify context_warning {used_tokens}/{context_window}"),
            Notice::ContinuationStarted {
                rejected_tools,
                manual,
            } => format!(
                "notify continuation_started rejected=[{}]{}",
                rejected_tools.join(" "),
                if *manual { " manual" } else { "" }
            ),
            Notice::ContextExhausted { summary } => {
                format!("notify context_exhausted {}", render_text(summary))
            }
            Notice::BudgetStopped { stop } => {
                format!("notify budget_stopped {}", render_stop(stop))
            }
            Notice::PlanSuggested { score, cues } => {
                format!("notify plan_suggested score={score} [{}]", cues.join("; "))
            }
            Notice::CorrectionAttempt {
                attempt,
                max_attempts,
                tool,
                error,
                fallback_request,
                fallback_tools,
            } => format!(
                "notify correction_attempt {attempt}/{max_attempts} tool={tool} error={error:?} fallback={fallback_request:?} tools=[{}]",
                fallback_tools.join(" ")
            ),
            Notice::CorrectionSucceeded { attempts, tool } => {
                format!("notify correction_success after {attempts} tool={tool}")
            }
            Notice::CorrectionFailed {
                attempts,
                tool,
                message,
                ..
            } => format!(
                "notify correction_failed after {attempts} tool={tool} {}",
                render_text(message)
            ),
        },
        Effect::PlanChanged { plan, change } => {
            format!("plan {} {}", plan.phase.as_str(), wire(change))
        }
        Effect::SpawnSubAgent {
            agent_id,
            prompt,
            description,
            model,
            read_only,
            agent_type,
        } => format!(
            "spawn {agent_id} {description:?} {prompt:?}{}{}{}",
            model
                .as_deref()
                .map(|m| format!(" model={m}"))
                .unwrap_or_default(),
            if *read_only { " read_only" } else { "" },
            agent_type
                .as_deref()
                .map(|t| format!(" type={t}"))
                .unwrap_or_default()
        ),
        Effect::CancelSubAgents { agent_ids } => {
            format!("cancel sub-agents [{}]", agent_ids.join(" "))
        }
        Effect::FinishSubAgent { outcome } => format!("finish sub-agent {outcome:?}"),
        Effect::RunPreToolHooks { call } => {
            format!(
                "run pre_tool_use hooks {} {} {}",
                call.id, call.name, call.input
            )
        }
        Effect::RunStopHooks => "run stop hooks".to_string(),
        Effect::AbortHooks => "abort hooks".to_string(),
        Effect::Enqueue => "enqueue".to_string(),
        Effect::RunPromptHooks => "run prompt hooks".to_string(),
        Effect::MarkCheckpoint { mark } => format!("mark checkpoint {mark}"),
        Effect::RestoreCheckpoint { mark, step_id } => {
            format!("restore checkpoint {mark} (step {step_id})")
        }
        Effect::ContinueInNewConversation => "continue in a new conversation".to_string(),
    }
}

// ---------------------------------------------------------------------------
// Builders.
// ---------------------------------------------------------------------------

const NOW: i64 = 1_000;

fn ctx() -> ConvContext {
    ConvContext {
        now_ms: NOW,
        ..ConvContext::default()
    }
}

fn text(s: &str) -> ContentBlock {
    ContentBlock::text(s)
}

fn tool_use(id: &str, name: &str, input: Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.to_string(),
        name: name.to_string(),
        input,
    }
}

fn call(id: &str, name: &str, input: Value) -> ToolCall {
    ToolCall {
        id: id.to_string(),
        name: name.to_string(),
        input,
    }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn reply(content: Vec<ContentBlock>, stop: StopReason) -> Event {
    reply_with_usage(content, stop, usage(100, 20))
}

fn reply_with_usage(content: Vec<ContentBlock>, stop: StopReason, usage: Usage) -> Event {
    Event::LlmCompleted {
        reply: Reply {
            content,
            stop_reason: stop,
            usage,
        },
    }
}

fn user_msg(s: &str) -> Event {
    Event::UserMessage {
        text: s.to_string(),
        images: vec![],
        sending: Default::default(),
    }
}

fn failed(kind: ErrorKind, retryable: bool, retry_after_ms: Option<u64>, jitter: u16) -> Event {
    Event::LlmFailed {
        failure: LlmFailure {
            kind,
            retryable,
            message: "HTTP 529 overloaded".to_string(),
            retry_after_ms,
        },
        jitter_permille: jitter,
    }
}

fn done(id: &str, content: &str) -> Event {
    Event::ToolCompleted {
        result: ToolResult::new(id, content, false),
    }
}

fn answer(request_id: &str, decision: Decision, feedback: Option<&str>) -> Event {
    Event::PermissionAnswered {
        request_id: request_id.to_string(),
        decision,
        feedback: feedback.map(str::to_string),
        scope: RuleScope::Conversation,
        by: None,
    }
}

fn requesting(attempt: u32, iteration: u32) -> ConvState {
    ConvState::LlmRequesting {
        attempt,
        iteration,
        retry: None,
        early: Default::default(),
    }
}

fn waiting_retry(attempt: u32, iteration: u32) -> ConvState {
    ConvState::LlmRequesting {
        attempt,
        iteration,
        retry: Some(RetryWait {
            delay_ms: 1_500,
            reason: "HTTP 529 overloaded".to_string(),
        }),
        early: Default::default(),
    }
}

/// A tool run of `calls` (id, name) with inputs `{"arg": id}`; `running` ids
/// run, `finished` ids have a successful result "out-<id>".
fn tools(iteration: u32, calls: &[(&str, &str)], running: &[&str], finished: &[&str]) -> ConvState {
    ConvState::ToolExecuting(ToolRun {
        iteration,
        calls: calls
            .iter()
            .map(|(id, name)| call(id, name, json!({ "arg": id })))
            .collect(),
        results: finished
            .iter()
            .map(|id| ToolResult::new(*id, format!("out-{id}"), false))
            .collect(),
        running: running.iter().map(|s| s.to_string()).collect(),
        permission: None,
        stop_with_feedback: None,
        ..ToolRun::default()
    })
}

/// `tools(..)` with a permission request pending for `asked`, as a user
/// policy (not the doom-loop detector) would raise it: every option offered.
fn asking(iteration: u32, calls: &[(&str, &str)], finished: &[&str], asked: &str) -> ConvState {
    let ConvState::ToolExecuting(mut run) = tools(iteration, calls, &[], finished) else {
        unreachable!()
    };
    let c = run.calls.iter().find(|c| c.id == asked).unwrap().clone();
    run.permission = Some(PermissionAsk {
        request_id: format!("perm-{asked}"),
        tool_use_id: c.id.clone(),
        tool_name: c.name.clone(),
        input: c.input.clone(),
        reason: "bash may change files".to_string(),
        options: vec![
            Decision::AllowOnce,
            Decision::AllowAlways,
            Decision::Deny,
            Decision::DenyAndStop,
            Decision::Never,
        ],
        suggested_rule: c.name.clone(),
    });
    ConvState::ToolExecuting(run)
}

fn continuation(attempt: u32) -> ConvState {
    ConvState::AwaitingContinuation {
        rejected_tool_calls: vec![call("t1", "bash", json!({}))],
        trigger_usage: usage(180_000, 1_000),
        attempt,
    }
}

fn exhausted_state() -> ConvState {
    ConvState::ContextExhausted {
        summary: "we were fixing the test".to_string(),
        final_usage: usage(181_000, 1_200),
    }
}

fn error_state() -> ConvState {
    ConvState::Error {
        message: "HTTP 401 invalid x-api-key".to_string(),
        kind: ErrorKind::Auth,
    }
}

/// The parent's reply asked for `t1` (spawn_agents, three agents) then
/// `t2` (read); the agents in `pending` still run, `agent_1_t1` has ended.
fn sub_agents(pending: &[&str]) -> ConvState {
    let agents: Vec<String> = (1..=3).map(|n| format!("agent_{n}_t1")).collect();
    ConvState::AwaitingSubAgents {
        pending_ids: pending.iter().map(|s| s.to_string()).collect(),
        completed: vec![finished_agent("agent_1_t1", "found it", true).1],
        agents,
        call_id: "t1".to_string(),
        run: Box::new(ToolRun {
            iteration: 2,
            calls: vec![
                call("t1", "spawn_agents", spawn_input(3)),
                call("t2", "read", json!({"path": "a.txt"})),
            ],
            ..ToolRun::default()
        }),
    }
}

/// A spawn_agents input asking for `n` agents.
fn spawn_input(n: usize) -> Value {
    let agents: Vec<Value> = (1..=n)
        .map(|i| json!({"description": format!("task {i}"), "prompt": format!("do task {i}")}))
        .collect();
    json!({ "agents": agents })
}

/// A child's end as the runtime reports it (its conversation id is `C` and
/// the agent's number).
fn finished_agent(agent_id: &str, result: &str, success: bool) -> (Event, SubAgentResult) {
    let r = SubAgentResult {
        agent_id: agent_id.to_string(),
        result: result.to_string(),
        success,
        conversation_id: format!("C{}", &agent_id[6..7]),
    };
    (
        Event::SubAgentFinished {
            result: r.clone(),
            usage: Usage::default(),
            cost_usd: 0.0,
        },
        r,
    )
}

/// The context of a sub-agent.
fn child_ctx(reminded: bool) -> ConvContext {
    ConvContext {
        exhaustion: ContextExhaustionBehavior::IntentionallyUnhandled,
        sub_agent: Some(SubAgentRole { reminded }),
        ..ctx()
    }
}

/// A context whose last two tool calls were `bash {"cmd":"ls"}`: a third
/// identical call makes the doom-loop detector ask.
fn doom_ctx() -> ConvContext {
    ConvContext {
        recent_calls: vec![
            PastCall::new(&call("old1", "bash", json!({"cmd": "ls"})), 0, None),
            PastCall::new(&call("old2", "bash", json!({"cmd": "ls"})), 1, None),
        ],
        ..ctx()
    }
}

// ---------------------------------------------------------------------------
// The seed's texts.
// ---------------------------------------------------------------------------

#[test]
fn seed_texts_are_exact() {
    assert_eq!(texts::CANCELLED_BY_USER, "Cancelled by user");
    assert_eq!(
        texts::SKIPPED_DUE_TO_CANCELLATION,
        "Skipped due to cancellation"
    );
    assert_eq!(texts::INTERRUPT_USER, "[Request interrupted by user]");
    assert_eq!(
        texts::INTERRUPT_TOOL,
        "[Request interrupted by user for tool use]"
    );
    assert_eq!(
        texts::INTERRUPT_EXPLANATION,
        "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it \
         was a file edit, the new_string was NOT written to the file). STOP what you are doing and \
         wait for the user to tell you how to proceed."
    );
    assert_eq!(texts::AGENT_IS_BUSY, "agent is busy");
    assert_eq!(texts::CANCELLATION_IN_PROGRESS, "cancellation in progress");
    assert_eq!(texts::CONTEXT_EXHAUSTED, "context exhausted");
    assert_eq!(
        texts::ERR_MAX_ITERATIONS,
        "Maximum conversation iterations reached"
    );
    assert_eq!(
        texts::permission_denied("bash"),
        "Permission to use bash has been denied"
    );
    // Seed 000, Appendix B.
    assert_eq!(texts::ERR_STREAM_ABORTED, "Stream aborted by user");
    assert_eq!(
        texts::tool_execution_error("bash", "it broke"),
        "Error executing bash: it broke"
    );
    assert_eq!(
        texts::CONTINUATION_PROMPT,
        "The conversation context is nearly full. Please provide a brief continuation summary that \
         could seed a new conversation.\n\nInclude:\n1. Current task status (if any)\n2. Key files \
         or concepts discussed\n3. Suggested next steps\n\nKeep your response concise."
    );
    assert_eq!(
        texts::CONTINUATION_FALLBACK,
        "Context limit reached. The continuation summary could not be generated. Please start a new conversation."
    );
    assert_eq!(
        texts::CONTINUATION_CANCELLED,
        "Continuation cancelled by user."
    );
    assert_eq!(
        texts::reengagement_prompt("Write the whole file with `write`."),
        "The previous approach failed. Here's a more direct strategy:\nWrite the whole file with \
         `write`.\n\nPlease generate new tool calls using the suggested approach."
    );
    assert_eq!(agentd_core::correction::SIGNAL, "SELF_CORRECT_ATTEMPT:");
    assert_eq!(agentd_core::correction::MAX_CORRECTION_ATTEMPTS, 3);
    assert_eq!(texts::continuation_prompt(&[]), texts::CONTINUATION_PROMPT);
    assert_eq!(
        texts::continuation_prompt(&["bash".to_string(), "write".to_string()]),
        format!(
            "{}\n\nNote: The following tool calls were requested but not executed due to context limits:\n- bash\n- write\n",
            texts::CONTINUATION_PROMPT
        )
    );
}

// ---------------------------------------------------------------------------
// The seed's transition matrix, row by row.
// ---------------------------------------------------------------------------

#[test]
fn matrix_idle_user_message_requests_the_model() {
    // Idle + UserMessage -> AwaitingLlm -> (internal) LlmRequesting{1}: the
    // live loop passes through AwaitingLlm inside one transition.
    check(
        ConvState::Idle,
        &ctx(),
        user_msg("fix the failing test"),
        r#"
        LlmRequesting attempt=1 iter=1
        + append user: text "fix the failing test"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn matrix_awaiting_llm_issues_the_request() {
    // AwaitingLlm is met at rest only in a store written before a crash.
    check(
        ConvState::AwaitingLlm { iteration: 3 },
        &ctx(),
        Event::DaemonRestarted,
        r#"
        LlmRequesting attempt=1 iter=3
        + notify recovered "agentd restarted: re-issuing the model request"
        + request attempt=1 turn
        "#,
    );
    check(
        ConvState::AwaitingLlm { iteration: 3 },
        &ctx(),
        user_msg("hello?"),
        "REJECT agent is busy",
    );
}

#[test]
fn matrix_end_turn_without_tools_goes_idle() {
    check(
        requesting(1, 1),
        &ctx(),
        reply(vec![text("All tests pass.")], StopReason::EndTurn),
        r#"
        Idle
        + append assistant stop=end_turn: text "All tests pass."
        "#,
    );
}

#[test]
fn matrix_reply_with_tools_executes_the_first() {
    check(
        requesting(1, 1),
        &ctx(),
        reply(
            vec![
                text("Let me fix it."),
                tool_use("t1", "edit", json!({"path": "a.rs"})),
                tool_use("t2", "bash", json!({"cmd": "cargo test"})),
            ],
            StopReason::ToolUse,
        ),
        r#"
        ToolExecuting iter=1 calls=[t1:edit t2:bash] running=[t1] results=[]
        + append assistant stop=tool_use: text "Let me fix it." | tool_use t1 edit {"path":"a.rs"} | tool_use t2 bash {"cmd":"cargo test"}
        + execute t1 edit {"path":"a.rs"}
        "#,
    );
}

#[test]
fn matrix_retryable_error_schedules_a_retry() {
    check(
        requesting(1, 1),
        &ctx(),
        failed(ErrorKind::RateLimit, true, None, 0),
        r#"
        LlmRequesting attempt=2 iter=1 retry_in=500ms reason="HTTP 529 overloaded"
        + schedule_retry attempt=2 delay=500ms
        + notify retrying 2/3 in 500ms reason="HTTP 529 overloaded"
        "#,
    );
    check(
        requesting(2, 4),
        &ctx(),
        failed(ErrorKind::Network, true, None, 500),
        r#"
        LlmRequesting attempt=3 iter=4 retry_in=1500ms reason="HTTP 529 overloaded"
        + schedule_retry attempt=3 delay=1500ms
        + notify retrying 3/3 in 1500ms reason="HTTP 529 overloaded"
        "#,
    );
}

#[test]
fn matrix_retry_timeout_requests_again() {
    check(
        waiting_retry(2, 1),
        &ctx(),
        Event::RetryDue,
        r#"
        LlmRequesting attempt=2 iter=1
        + request attempt=2 turn
        "#,
    );
}

#[test]
fn matrix_retryable_error_at_last_attempt_fails() {
    check(
        requesting(3, 1),
        &ctx(),
        failed(ErrorKind::RateLimit, true, None, 0),
        r#"
        Error kind=rate_limit message="Failed after 3 attempts: HTTP 529 overloaded"
        + notify error kind=rate_limit "Failed after 3 attempts: HTTP 529 overloaded"
        "#,
    );
}

#[test]
fn matrix_non_retryable_error_fails_at_once() {
    check(
        requesting(1, 1),
        &ctx(),
        failed(ErrorKind::Auth, false, None, 0),
        r#"
        Error kind=auth message="HTTP 529 overloaded"
        + notify error kind=auth "HTTP 529 overloaded"
        "#,
    );
}

#[test]
fn matrix_cancel_while_requesting_aborts_the_stream() {
    check(
        requesting(1, 2),
        &ctx(),
        Event::UserCancel,
        r#"
        Cancelling iter=2
        + abort_llm
        "#,
    );
}

#[test]
fn matrix_user_message_while_requesting_is_rejected() {
    check(
        requesting(1, 1),
        &ctx(),
        user_msg("and also"),
        "REJECT agent is busy",
    );
    check(
        waiting_retry(2, 1),
        &ctx(),
        user_msg("and also"),
        "REJECT agent is busy",
    );
}

/// A user message sent as `sending`.
fn user_msg_sent(s: &str, sending: Sending) -> Event {
    Event::UserMessage {
        text: s.to_string(),
        images: vec![],
        sending,
    }
}

const QUEUE_IF_BUSY: Sending = Sending {
    queue_if_busy: true,
    hooks: PromptHooks::Passed,
    other_in_hooks: false,
    thinking: None,
    mentions: Vec::new(),
};

#[test]
fn a_message_sent_to_queue_if_busy_is_enqueued_while_a_turn_runs_or_a_cancel_completes() {
    for state in [
        requesting(1, 1),
        waiting_retry(2, 1),
        ConvState::StopHooks { iteration: 1 },
    ] {
        check(
            state.clone(),
            &ctx(),
            user_msg_sent("and also", QUEUE_IF_BUSY),
            &format!("{}\n+ enqueue", render_state(&state)),
        );
    }
    check(
        ConvState::Cancelling { iteration: 1 },
        &ctx(),
        user_msg_sent("and also", QUEUE_IF_BUSY),
        "Cancelling iter=1\n+ enqueue",
    );
    check(
        ConvState::Cancelling { iteration: 1 },
        &ctx(),
        user_msg("and also"),
        "REJECT cancellation in progress",
    );
}

#[test]
fn a_message_to_queue_is_still_refused_when_it_is_empty_or_the_context_is_exhausted() {
    check(
        requesting(1, 1),
        &ctx(),
        user_msg_sent("  ", QUEUE_IF_BUSY),
        "REJECT message text is empty",
    );
    check(
        ConvState::ContextExhausted {
            summary: "s".into(),
            final_usage: Usage::default(),
        },
        &ctx(),
        user_msg_sent("more", QUEUE_IF_BUSY),
        "REJECT context exhausted",
    );
}

#[test]
fn a_message_whose_prompt_hooks_are_due_asks_for_them_and_changes_nothing() {
    let due = Sending {
        hooks: PromptHooks::Due,
        ..QUEUE_IF_BUSY
    };
    check(
        ConvState::Idle,
        &ctx(),
        user_msg_sent("fix it", due.clone()),
        "Idle\n+ run prompt hooks",
    );
    // A turn runs: the hooks do not run; it is queued as asked.
    check(
        requesting(1, 1),
        &ctx(),
        user_msg_sent("fix it", due),
        "LlmRequesting attempt=1 iter=1\n+ enqueue",
    );
}

#[test]
fn another_message_in_its_prompt_hooks_counts_as_a_running_turn() {
    let other = Sending {
        other_in_hooks: true,
        ..Sending::default()
    };
    check(
        ConvState::Idle,
        &ctx(),
        user_msg_sent("me too", other.clone()),
        "REJECT agent is busy",
    );
    check(
        ConvState::Idle,
        &ctx(),
        user_msg_sent(
            "me too",
            Sending {
                queue_if_busy: true,
                ..other.clone()
            },
        ),
        "Idle\n+ enqueue",
    );
    // What the state refuses anyway is refused for that reason.
    check(
        ConvState::ContextExhausted {
            summary: "s".into(),
            final_usage: Usage::default(),
        },
        &ctx(),
        user_msg_sent("me too", other),
        "REJECT context exhausted",
    );
}

#[test]
fn matrix_last_tool_completes_and_the_results_go_back() {
    check(
        tools(1, &[("t1", "edit"), ("t2", "bash")], &["t2"], &["t1"]),
        &ctx(),
        done("t2", "ok: 3 passed"),
        r#"
        LlmRequesting attempt=1 iter=2
        + append user: result t1 "out-t1" | result t2 "ok: 3 passed"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn matrix_tool_completes_and_the_next_starts() {
    check(
        tools(1, &[("t1", "edit"), ("t2", "bash")], &["t1"], &[]),
        &ctx(),
        done("t1", "edited"),
        r#"
        ToolExecuting iter=1 calls=[t1:edit t2:bash] running=[t2] results=[t1]
        + execute t2 bash {"arg":"t2"}
        "#,
    );
}

#[test]
fn matrix_cancel_while_tools_run_writes_synthetic_results() {
    check(
        tools(
            1,
            &[("t1", "edit"), ("t2", "bash"), ("t3", "write")],
            &["t2"],
            &["t1"],
        ),
        &ctx(),
        Event::UserCancel,
        r#"
        Idle
        + abort_tools [t2]
        + append user: result t1 "out-t1" | result t2 ERR "Cancelled by user" | result t3 ERR "Skipped due to cancellation"
        "#,
    );
}

#[test]
fn matrix_user_message_while_tools_run_is_rejected() {
    check(
        tools(1, &[("t1", "bash")], &["t1"], &[]),
        &ctx(),
        user_msg("wait"),
        "REJECT agent is busy",
    );
    check(
        asking(1, &[("t1", "bash")], &[], "t1"),
        &ctx(),
        user_msg("wait"),
        "REJECT agent is busy",
    );
}

#[test]
fn matrix_cancelling_reply_goes_idle() {
    check(
        ConvState::Cancelling { iteration: 1 },
        &ctx(),
        reply(
            vec![text("I will now"), tool_use("t1", "bash", json!({}))],
            StopReason::ToolUse,
        ),
        r#"
        Idle
        + append assistant interrupted: text "I will now"
        + append user: text "[Request interrupted by user]"
        "#,
    );
}

#[test]
fn matrix_user_message_while_cancelling_is_rejected() {
    check(
        ConvState::Cancelling { iteration: 1 },
        &ctx(),
        user_msg("hello"),
        "REJECT cancellation in progress",
    );
}

#[test]
fn matrix_error_user_message_requests_the_model() {
    check(
        error_state(),
        &ctx(),
        user_msg("try again"),
        r#"
        LlmRequesting attempt=1 iter=1
        + append user: text "try again"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn matrix_sub_agents() {
    // Idle/ToolExecuting + SpawnSubAgents: the reply's spawn_agents call
    // starts its agents, in order, under the seed's synthesis ids.
    check(
        requesting(1, 1),
        &ctx(),
        reply(
            vec![
                tool_use("t1", "spawn_agents", spawn_input(2)),
                tool_use("t2", "read", json!({"path": "a.txt"})),
            ],
            StopReason::ToolUse,
        ),
        r#"
        AwaitingSubAgents call=t1 agents=[agent_1_t1 agent_2_t1] pending=[agent_1_t1 agent_2_t1] completed=[] calls=[t1 t2] results=[]
        + append assistant stop=tool_use: tool_use t1 spawn_agents {"agents":[{"description":"task 1","prompt":"do task 1"},{"description":"task 2","prompt":"do task 2"}]} | tool_use t2 read {"path":"a.txt"}
        + spawn agent_1_t1 "task 1" "do task 1"
        + spawn agent_2_t1 "task 2" "do task 2"
        "#,
    );
    check(
        sub_agents(&["agent_2_t1", "agent_3_t1"]),
        &ctx(),
        finished_agent("agent_3_t1", "done", true).0,
        r#"
        AwaitingSubAgents call=t1 agents=[agent_1_t1 agent_2_t1 agent_3_t1] pending=[agent_2_t1] completed=[agent_1_t1 agent_3_t1] calls=[t1 t2] results=[] sub_agents=[0/0/0/0 $0 counted=C3]
        "#,
    );
    // AwaitingSubAgents + SubAgentResult(last): the call's result carries
    // every child's result in the order asked, and the run goes on.
    check(
        sub_agents(&["agent_2_t1"]),
        &ctx(),
        finished_agent("agent_2_t1", "no luck", false).0,
        r#"
        ToolExecuting iter=2 calls=[t1:spawn_agents t2:read] running=[t2] results=[t1] sub_agents=[0/0/0/0 $0 counted=C2]
        + execute t2 read {"path":"a.txt"}
        "#,
    );
    // The spawn call alone: its result goes back at once, successes and
    // failures, each with the child's conversation id.
    let mut alone = sub_agents(&["agent_3_t1"]);
    if let ConvState::AwaitingSubAgents { completed, run, .. } = &mut alone {
        run.calls.truncate(1);
        completed.push(finished_agent("agent_2_t1", "no luck", false).1);
    }
    check(
        alone,
        &ctx(),
        finished_agent("agent_3_t1", "fixed", true).0,
        r#"
        LlmRequesting attempt=1 iter=3 sub_agents=[0/0/0/0 $0 counted=C3]
        + append user: result t1 "synthesis_t1: 3 sub-agent(s) ended, 2 succeeded, 1 failed.\n\n## agent_1_t1 (conversation C1) succeeded\nfound it\n\n## agent_2_t1 (conversation C2) failed\nno luck\n\n## agent_3_t1 (conversation C3) succeeded\nfixed"
        + request attempt=1 turn
        "#,
    );
    check(
        sub_agents(&["agent_2_t1"]),
        &ctx(),
        finished_agent("agent_1_t1", "again", true).0,
        r#"
        REJECT SubAgentFinished does not apply in state AwaitingSubAgents
        "#,
    );
    check(
        sub_agents(&["agent_2_t1"]),
        &ctx(),
        user_msg("status?"),
        "REJECT agent is busy",
    );
}

#[test]
fn spawn_agents_with_bad_input_is_an_error_result() {
    check(
        requesting(1, 1),
        &ctx(),
        reply(
            vec![tool_use("t1", "spawn_agents", json!({"agents": []}))],
            StopReason::ToolUse,
        ),
        r#"
        LlmRequesting attempt=1 iter=2
        + append assistant stop=tool_use: tool_use t1 spawn_agents {"agents":[]}
        + append user: result t1 ERR "spawn_agents: `agents` is empty"
        + request attempt=1 turn
        "#,
    );
    check(
        requesting(1, 1),
        &ctx(),
        reply(
            vec![tool_use("t1", "spawn_agents", spawn_input(11))],
            StopReason::ToolUse,
        ),
        r#"
        LlmRequesting attempt=1 iter=2
        + append assistant stop=tool_use: tool_use t1 spawn_agents {"agents":[{"description":"task 1","prompt":"do task 1"},{"description":"task 2","prompt":"do task 2"},{"description":"task 3","prompt":"do task 3"},{"description":"task 4","prompt":"do task 4"},{"description":"task 5","prompt":"do task 5"},{"description":"task 6","prompt":"do task 6"},{"description":"task 7","prompt":"do task 7"},{"description":"task 8","prompt":"do task 8"},{"description":"task 9","prompt":"do task 9"},{"description":"task 10","prompt":"do task 10"},{"description":"task 11","prompt":"do task 11"}]}
        + append user: result t1 ERR "spawn_agents: 11 agents asked for; at most 10 per call"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn cancel_cascades_to_the_sub_agents() {
    check(
        sub_agents(&["agent_2_t1", "agent_3_t1"]),
        &ctx(),
        Event::UserCancel,
        r#"
        Idle
        + cancel sub-agents [agent_2_t1 agent_3_t1]
        + append user: result t1 ERR "Cancelled by user" | result t2 ERR "Skipped due to cancellation"
        "#,
    );
    // A child's result that arrives after the cancel changes nothing.
    check(
        ConvState::Idle,
        &ctx(),
        finished_agent("agent_2_t1", "late", true).0,
        r#"
        REJECT SubAgentFinished does not apply in state Idle
        "#,
    );
}

#[test]
fn restart_watches_the_pending_sub_agents_again() {
    check(
        sub_agents(&["agent_2_t1", "agent_3_t1"]),
        &ctx(),
        Event::DaemonRestarted,
        r#"
        AwaitingSubAgents call=t1 agents=[agent_1_t1 agent_2_t1 agent_3_t1] pending=[agent_2_t1 agent_3_t1] completed=[agent_1_t1] calls=[t1 t2] results=[]
        + notify recovered "agentd restarted: waiting for the sub-agents still running"
        + spawn agent_2_t1 "task 2" "do task 2"
        + spawn agent_3_t1 "task 3" "do task 3"
        "#,
    );
    check(
        sub_agents(&["agent_2_t1"]),
        &ctx(),
        Event::DaemonStopping,
        r#"
        AwaitingSubAgents call=t1 agents=[agent_1_t1 agent_2_t1 agent_3_t1] pending=[agent_2_t1] completed=[agent_1_t1] calls=[t1 t2] results=[]
        "#,
    );
}

#[test]
fn sub_agents_cannot_nest_or_upgrade() {
    check(
        requesting(1, 1),
        &child_ctx(false),
        reply(
            vec![
                tool_use("t1", "spawn_agents", spawn_input(1)),
                tool_use("t2", "request_mode_upgrade", json!({"reason": "x"})),
            ],
            StopReason::ToolUse,
        ),
        r#"
        LlmRequesting attempt=1 iter=2
        + append assistant stop=tool_use: tool_use t1 spawn_agents {"agents":[{"description":"task 1","prompt":"do task 1"}]} | tool_use t2 request_mode_upgrade {"reason":"x"}
        + append user: result t1 ERR "spawn_agents is not available to sub-agents: a sub-agent cannot start sub-agents" | result t2 ERR "request_mode_upgrade is not available to sub-agents: a sub-agent keeps the mode it was given"
        + request attempt=1 turn
        "#,
    );
    // submit_result outside a sub-agent.
    check(
        requesting(1, 1),
        &ctx(),
        reply(
            vec![tool_use("t1", "submit_result", json!({"result": "x"}))],
            StopReason::ToolUse,
        ),
        r#"
        LlmRequesting attempt=1 iter=2
        + append assistant stop=tool_use: tool_use t1 submit_result {"result":"x"}
        + append user: result t1 ERR "submit_result is only available to sub-agents; answer the user directly"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn submit_result_ends_the_sub_agent() {
    check(
        requesting(1, 3),
        &child_ctx(false),
        reply(
            vec![
                text("Done."),
                tool_use(
                    "t1",
                    "submit_result",
                    json!({"result": "42", "success": true}),
                ),
                tool_use("t2", "read", json!({"path": "a.txt"})),
            ],
            StopReason::ToolUse,
        ),
        r#"
        Idle
        + append assistant stop=tool_use: text "Done." | tool_use t1 submit_result {"result":"42","success":true} | tool_use t2 read {"path":"a.txt"}
        + append user: result t1 "Result submitted to the parent conversation." | result t2 ERR "Skipped: the sub-agent already submitted its result"
        + finish sub-agent Submitted { result: "42", success: true }
        "#,
    );
    // Bad input is an error result the model sees, after the read that
    // ran first.
    check(
        tools(3, &[("t1", "read"), ("t2", "submit_result")], &["t1"], &[]),
        &child_ctx(false),
        done("t1", "contents"),
        r#"
        LlmRequesting attempt=1 iter=4
        + append user: result t1 "contents" | result t2 ERR "submit_result: `result` must be a string"
        + request attempt=1 turn
        "#,
    );
    check(
        requesting(1, 3),
        &child_ctx(false),
        reply(
            vec![tool_use("t1", "submit_result", json!({"success": "yes"}))],
            StopReason::ToolUse,
        ),
        r#"
        LlmRequesting attempt=1 iter=4
        + append assistant stop=tool_use: tool_use t1 submit_result {"success":"yes"}
        + append user: result t1 ERR "submit_result: `result` must be a string"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn a_sub_agent_without_submit_result_is_reminded_once() {
    check(
        requesting(1, 3),
        &child_ctx(false),
        reply(vec![text("All done.")], StopReason::EndTurn),
        r#"
        LlmRequesting attempt=1 iter=4
        + append assistant stop=end_turn: text "All done."
        + append user: text "You ended your turn without calling submit_result. Call submit_result now with your final result (success false if the task could not be done); the conversation that started you receives only what you submit."
        + request attempt=1 turn
        "#,
    );
    check(
        requesting(1, 4),
        &child_ctx(true),
        reply(vec![text("Really done.")], StopReason::EndTurn),
        r#"
        Idle
        + append assistant stop=end_turn: text "Really done."
        + finish sub-agent LastText
        "#,
    );
}

#[test]
fn a_sub_agent_fails_or_is_cancelled_at_once() {
    check(
        requesting(1, 2),
        &child_ctx(false),
        reply_with_usage(
            vec![text("Reading more."), tool_use("t1", "read", json!({}))],
            StopReason::ToolUse,
            usage(190_000, 10),
        ),
        r#"
        Error kind=context_exhausted message="Context window exhausted"
        + append assistant stop=tool_use: text "Reading more."
        + notify error kind=context_exhausted "Context window exhausted"
        + notify context_warning 190010/200000
        + finish sub-agent Failed { message: "Context window exhausted" }
        "#,
    );
    check(
        tools(2, &[("t1", "bash")], &["t1"], &[]),
        &child_ctx(false),
        Event::UserCancel,
        r#"
        Idle
        + abort_tools [t1]
        + append user: result t1 ERR "Cancelled by user"
        + finish sub-agent Cancelled
        "#,
    );
    check(
        ConvState::Cancelling { iteration: 2 },
        &child_ctx(false),
        Event::LlmAborted {
            partial: vec![text("Partial")],
        },
        r#"
        Idle
        + append assistant interrupted: text "Partial"
        + append user: text "[Request interrupted by user]"
        + finish sub-agent Cancelled
        "#,
    );
    check(
        requesting(3, 2),
        &child_ctx(false),
        failed(ErrorKind::Auth, false, None, 0),
        r#"
        Error kind=auth message="HTTP 529 overloaded"
        + notify error kind=auth "HTTP 529 overloaded"
        + finish sub-agent Failed { message: "HTTP 529 overloaded" }
        "#,
    );
}

#[test]
fn matrix_threshold_reply_asks_for_a_continuation() {
    // 90% of 200,000 is 180,000 tokens, counted over every input kind.
    let big = Usage {
        input_tokens: 100_000,
        cache_creation_input_tokens: 30_000,
        cache_read_input_tokens: 49_000,
        output_tokens: 1_000,
    };
    check(
        requesting(1, 5),
        &ctx(),
        reply_with_usage(
            vec![
                text("Next I will run the tests."),
                tool_use("t1", "bash", json!({"cmd": "cargo test"})),
                tool_use("t2", "read", json!({"path": "a"})),
            ],
            StopReason::ToolUse,
            big,
        ),
        r#"
        AwaitingContinuation attempt=1 rejected=[bash read] usage=100000/30000/49000/1000
        + append assistant stop=tool_use: text "Next I will run the tests."
        + notify continuation_started rejected=[bash read]
        + request attempt=1 continuation <CONTINUATION_PROMPT>"\n\nNote: The following tool calls were requested but not executed due to context limits:\n- bash\n- read\n"
        + notify context_warning 180000/200000
        "#,
    );
    // Only tool calls: nothing of the reply is kept.
    check(
        requesting(1, 5),
        &ctx(),
        reply_with_usage(
            vec![tool_use("t1", "bash", json!({}))],
            StopReason::ToolUse,
            usage(179_000, 1_000),
        ),
        r#"
        AwaitingContinuation attempt=1 rejected=[bash] usage=179000/0/0/1000
        + notify continuation_started rejected=[bash]
        + request attempt=1 continuation <CONTINUATION_PROMPT>"\n\nNote: The following tool calls were requested but not executed due to context limits:\n- bash\n"
        + notify context_warning 180000/200000
        "#,
    );
    // Just below the threshold: the loop goes on.
    check(
        requesting(1, 5),
        &ctx(),
        reply_with_usage(
            vec![text("Done.")],
            StopReason::EndTurn,
            usage(179_000, 999),
        ),
        r#"
        Idle
        + append assistant stop=end_turn: text "Done."
        + notify context_warning 179999/200000
        "#,
    );
    // An unknown window (0) never triggers.
    let unknown = ConvContext {
        context_window: 0,
        ..ctx()
    };
    check(
        requesting(1, 5),
        &unknown,
        reply_with_usage(
            vec![text("Done.")],
            StopReason::EndTurn,
            usage(10_000_000, 0),
        ),
        r#"
        Idle
        + append assistant stop=end_turn: text "Done."
        "#,
    );
}

#[test]
fn matrix_threshold_reply_of_a_sub_agent_fails() {
    let sub = ConvContext {
        exhaustion: ContextExhaustionBehavior::IntentionallyUnhandled,
        ..ctx()
    };
    check(
        requesting(1, 2),
        &sub,
        reply_with_usage(
            vec![text("Reading more."), tool_use("t1", "read", json!({}))],
            StopReason::ToolUse,
            usage(190_000, 10),
        ),
        r#"
        Error kind=context_exhausted message="Context window exhausted"
        + append assistant stop=tool_use: text "Reading more."
        + notify error kind=context_exhausted "Context window exhausted"
        + notify context_warning 190010/200000
        "#,
    );
}

#[test]
fn matrix_continuation_response_exhausts_the_context() {
    check(
        continuation(1),
        &ctx(),
        Event::ContinuationCompleted {
            summary: "Task: fix test. Next: run cargo test.".to_string(),
            usage: usage(1_000, 300),
        },
        r#"
        ContextExhausted usage=181000/0/0/1300 summary="Task: fix test. Next: run cargo test."
        + append assistant kind=continuation: text "Task: fix test. Next: run cargo test."
        + notify context_exhausted "Task: fix test. Next: run cargo test."
        "#,
    );
    // The same, reported as an ordinary model reply.
    check(
        continuation(2),
        &ctx(),
        reply_with_usage(
            vec![text("Summary.")],
            StopReason::EndTurn,
            usage(1_000, 300),
        ),
        r#"
        ContextExhausted usage=181000/0/0/1300 summary="Summary."
        + append assistant kind=continuation: text "Summary."
        + notify context_exhausted "Summary."
        "#,
    );
}

#[test]
fn an_exhausted_context_is_continued_by_the_daemon_when_it_is_on_and_the_chain_allows() {
    let on = ConvContext {
        auto_continue: agentd_core::state::AutoContinue {
            enabled: true,
            max_hops: 3,
        },
        ..ctx()
    };
    // `state` at `hop` in its chain, continued already if `continued`.
    let at = |state: ConvState, hop: u32, continued: bool| Conversation {
        continuation: ContinuationChain {
            hop,
            continued_as: continued.then(|| "c2".to_string()),
            ..ContinuationChain::default()
        },
        ..state.into()
    };
    let completed = || Event::ContinuationCompleted {
        summary: "S.".to_string(),
        usage: usage(1_000, 300),
    };
    check(
        at(continuation(1), 2, false),
        &on,
        completed(),
        r#"
        ContextExhausted usage=181000/0/0/1300 summary="S." chain=[hop=2 pending]
        + append assistant kind=continuation: text "S."
        + notify context_exhausted "S."
        + continue in a new conversation
        "#,
    );
    check(
        continuation(3),
        &on,
        Event::ContinuationFailed {
            error: "HTTP 500".to_string(),
        },
        &format!(
            "ContextExhausted usage=180000/0/0/1000 summary={fallback:?} chain=[hop=0 pending]
            + append assistant kind=continuation: text {fallback:?}
            + notify context_exhausted {fallback:?}
            + continue in a new conversation",
            fallback = texts::CONTINUATION_FALLBACK
        ),
    );
    // Not at the end of the chain, nor twice, nor when it is off.
    for (conv, c) in [
        (at(continuation(1), 3, false), &on),
        (at(continuation(1), 0, true), &on),
        (at(continuation(1), 0, false), &ctx()),
    ] {
        let t = run(conv, c, completed()).unwrap();
        assert!(!t.effects.contains(&Effect::ContinueInNewConversation));
        assert!(!t.conversation.continuation.pending, "nothing is owed");
    }
    // Nor when the context was exhausted already.
    let exhausted = run(continuation(1), &ctx(), completed())
        .unwrap()
        .conversation
        .state;
    assert!(
        run(exhausted, &on, Event::DaemonRestarted).map_or(true, |t| !t
            .effects
            .contains(&Effect::ContinueInNewConversation))
    );
}

#[test]
fn a_continuation_made_is_recorded_with_what_it_took_and_nothing_is_owed_any_more() {
    let owed = |pending: bool| Conversation {
        queue: ["first", "second"]
            .iter()
            .enumerate()
            .map(|(n, t)| QueuedMessage {
                id: format!("q{n}"),
                ..QueuedMessage::text(*t)
            })
            .collect(),
        continuation: ContinuationChain {
            hop: 1,
            parent_id: Some("c0".to_string()),
            pending,
            ..ContinuationChain::default()
        },
        ..exhausted_state().into()
    };
    let continued_as = |id: &str, automatically: bool, taken: &[&str]| Event::ContinuedAs {
        id: id.to_string(),
        automatically,
        taken: taken.iter().map(|t| t.to_string()).collect(),
    };
    check(
        owed(true),
        &ctx(),
        continued_as("c2", true, &["q0"]),
        "ContextExhausted usage=181000/0/0/1200 summary=\"we were fixing the test\" delivered=1 chain=[hop=1 parent=c0 continued_as=c2 automatically]",
    );
    // By hand (`agent continue`), taking every queued message.
    check(
        owed(false),
        &ctx(),
        continued_as("c2", false, &["q0", "q1"]),
        "ContextExhausted usage=181000/0/0/1200 summary=\"we were fixing the test\" delivered=2 chain=[hop=1 parent=c0 continued_as=c2]",
    );
    // Recorded once: the same continuation again is refused.
    let done = run(owed(true), &ctx(), continued_as("c2", true, &[]))
        .unwrap()
        .conversation;
    check(
        done,
        &ctx(),
        continued_as("c2", true, &[]),
        "REJECT ContinuedAs does not apply in state ContextExhausted",
    );
}

#[test]
fn the_chain_of_a_continuation_is_one_hop_further_than_its_parent() {
    for (parent_hop, hop) in [(0, 1), (1, 2), (7, 8), (u32::MAX, u32::MAX)] {
        let chain = ContinuationChain::continuing("p".to_string(), parent_hop);
        assert_eq!(
            chain,
            ContinuationChain {
                parent_id: Some("p".to_string()),
                hop,
                ..ContinuationChain::default()
            }
        );
    }
    let auto = |max_hops| agentd_core::state::AutoContinue {
        enabled: true,
        max_hops,
    };
    // (hop, continued, max_hops) -> owed
    for (hop, continued, max_hops, owed) in [
        (0, false, 3, true),
        (2, false, 3, true),
        (3, false, 3, false),
        (0, true, 3, false),
        (0, false, 0, false),
    ] {
        let chain = ContinuationChain {
            hop,
            continued_as: continued.then(|| "next".to_string()),
            ..ContinuationChain::default()
        };
        assert_eq!(
            chain.owed(&auto(max_hops)),
            owed,
            "{hop} {continued} {max_hops}"
        );
    }
}

#[test]
fn a_sub_agents_usage_is_counted_once_with_the_end_it_reports() {
    let ended = |agent: &str, input: u64, cost_usd: f64| Event::SubAgentFinished {
        result: finished_agent(agent, "done", true).1,
        usage: usage(input, 10),
        cost_usd,
    };
    check(
        sub_agents(&["agent_2_t1", "agent_3_t1"]),
        &ctx(),
        ended("agent_3_t1", 100, 0.25),
        r#"
        AwaitingSubAgents call=t1 agents=[agent_1_t1 agent_2_t1 agent_3_t1] pending=[agent_2_t1] completed=[agent_1_t1 agent_3_t1] calls=[t1 t2] results=[] sub_agents=[100/0/0/10 $0.25 counted=C3]
        "#,
    );
    // Counted already (its end is reported again after a restart, and the
    // parent still waits for it): taken, not counted twice.
    let counted = Conversation {
        sub_agents: agentd_core::SubAgents {
            usage: usage(100, 10),
            cost_usd: 0.25,
            counted: vec!["C3".to_string()],
        },
        ..sub_agents(&["agent_2_t1", "agent_3_t1"]).into()
    };
    check(
        counted.clone(),
        &ctx(),
        ended("agent_3_t1", 100, 0.25),
        r#"
        AwaitingSubAgents call=t1 agents=[agent_1_t1 agent_2_t1 agent_3_t1] pending=[agent_2_t1] completed=[agent_1_t1 agent_3_t1] calls=[t1 t2] results=[]
        "#,
    );
    // A late end is refused: the runtime counts it with `SubAgents::count`.
    check(
        ConvState::Idle,
        &ctx(),
        ended("agent_2_t1", 100, 0.25),
        "REJECT SubAgentFinished does not apply in state Idle",
    );
    let mut late = counted.sub_agents.clone();
    assert!(late.count("C2", &usage(5, 1), 0.5));
    assert!(!late.count("C2", &usage(5, 1), 0.5), "counted once");
    assert!(!late.count("", &usage(5, 1), 0.5), "a child without an id");
    assert_eq!(
        (late.usage, late.cost_usd, late.counted),
        (
            usage(105, 11),
            0.75,
            vec!["C3".to_string(), "C2".to_string()]
        )
    );
}

#[test]
fn matrix_continuation_failure_uses_the_fallback() {
    check(
        continuation(3),
        &ctx(),
        Event::ContinuationFailed {
            error: "HTTP 500".to_string(),
        },
        r#"
        ContextExhausted usage=180000/0/0/1000 summary="Context limit reached. The continuation summary could not be generated. Please start a new conversation."
        + append assistant kind=continuation: text "Context limit reached. The continuation summary could not be generated. Please start a new conversation."
        + notify context_exhausted "Context limit reached. The continuation summary could not be generated. Please start a new conversation."
        "#,
    );
}

#[test]
fn matrix_continuation_cancel() {
    check(
        continuation(1),
        &ctx(),
        Event::UserCancel,
        r#"
        ContextExhausted usage=180000/0/0/1000 summary="Continuation cancelled by user."
        + abort_llm
        + append assistant kind=continuation: text "Continuation cancelled by user."
        + notify context_exhausted "Continuation cancelled by user."
        "#,
    );
    check(
        continuation(1),
        &ctx(),
        user_msg("hi"),
        "REJECT agent is busy",
    );
}

#[test]
fn matrix_context_exhausted_rejects_user_messages() {
    check(
        exhausted_state(),
        &ctx(),
        user_msg("one more thing"),
        "REJECT context exhausted",
    );
}

#[test]
fn matrix_context_exhausted_ignores_everything_else() {
    let s = "ContextExhausted usage=181000/0/0/1200 summary=\"we were fixing the test\"";
    check(exhausted_state(), &ctx(), Event::UserCancel, s);
    check(exhausted_state(), &ctx(), Event::DaemonRestarted, s);
    let not_applicable: Vec<Event> = vec![
        reply(vec![text("late")], StopReason::EndTurn),
        failed(ErrorKind::Network, true, None, 0),
        Event::LlmAborted {
            partial: vec![text("late")],
        },
        Event::RetryDue,
        done("t1", "late"),
        Event::ContinuationFailed {
            error: "x".to_string(),
        },
        Event::ContinuedFrom {
            parent_id: "01OLD".to_string(),
            summary: "s".to_string(),
            texts: Vec::new(),
            images: Vec::new(),
        },
    ];
    for event in not_applicable {
        let name = event.name();
        check(
            exhausted_state(),
            &ctx(),
            event,
            &format!("REJECT {name} does not apply in state ContextExhausted"),
        );
    }
    check(
        exhausted_state(),
        &ctx(),
        answer("perm-t1", Decision::AllowOnce, None),
        "REJECT no permission request is pending (it was already answered)",
    );
    check(
        exhausted_state(),
        &ctx(),
        Event::UserTriggerContinuation,
        "REJECT context exhausted",
    );
}

#[test]
fn matrix_idle_user_trigger_continuation() {
    check(
        ConvState::Idle,
        &ctx(),
        Event::UserTriggerContinuation,
        r#"
        AwaitingContinuation attempt=1 rejected=[] usage=0/0/0/0
        + notify continuation_started rejected=[] manual
        + request attempt=1 continuation <CONTINUATION_PROMPT>""
        "#,
    );
    // REQ-BED-023: the trigger starts from the last reply's usage.
    let used = ConvContext {
        last_usage: usage(165_000, 2_000),
        ..ctx()
    };
    check(
        ConvState::Idle,
        &used,
        Event::UserTriggerContinuation,
        r#"
        AwaitingContinuation attempt=1 rejected=[] usage=165000/0/0/2000
        + notify continuation_started rejected=[] manual
        + request attempt=1 continuation <CONTINUATION_PROMPT>""
        "#,
    );
    // Only from Idle: busy states say so, as for a message.
    check(
        requesting(1, 1),
        &ctx(),
        Event::UserTriggerContinuation,
        "REJECT agent is busy",
    );
    check(
        continuation(1),
        &ctx(),
        Event::UserTriggerContinuation,
        "REJECT agent is busy",
    );
    check(
        ConvState::Cancelling { iteration: 1 },
        &ctx(),
        Event::UserTriggerContinuation,
        "REJECT cancellation in progress",
    );
    check(
        error_state(),
        &ctx(),
        Event::UserTriggerContinuation,
        "REJECT UserTriggerContinuation does not apply in state Error",
    );
}

#[test]
fn warning_once_per_crossing_of_eighty_percent() {
    // 80 % of 200,000 is 160,000 tokens, counted as the threshold is.
    let below = ConvContext {
        last_usage: usage(150_000, 1_000),
        ..ctx()
    };
    check(
        requesting(1, 2),
        &below,
        reply_with_usage(
            vec![
                text("Reading."),
                tool_use("t1", "read", json!({"path": "a"})),
            ],
            StopReason::ToolUse,
            usage(159_000, 1_000),
        ),
        r#"
        ToolExecuting iter=2 calls=[t1:read] running=[t1] results=[]
        + append assistant stop=tool_use: text "Reading." | tool_use t1 read {"path":"a"}
        + execute t1 read {"path":"a"}
        + notify context_warning 160000/200000
        "#,
    );
    // Already above: no second warning.
    let above = ConvContext {
        last_usage: usage(160_000, 0),
        ..ctx()
    };
    check(
        requesting(1, 3),
        &above,
        reply_with_usage(vec![text("Done.")], StopReason::EndTurn, usage(170_000, 10)),
        r#"
        Idle
        + append assistant stop=end_turn: text "Done."
        "#,
    );
    // Straight past 90 %: the warning, and the continuation.
    check(
        requesting(1, 3),
        &below,
        reply_with_usage(vec![text("Done.")], StopReason::EndTurn, usage(185_000, 10)),
        r#"
        AwaitingContinuation attempt=1 rejected=[] usage=185000/0/0/10
        + append assistant stop=end_turn: text "Done."
        + notify continuation_started rejected=[]
        + request attempt=1 continuation <CONTINUATION_PROMPT>""
        + notify context_warning 185010/200000
        "#,
    );
    // An unknown window never warns.
    let unknown = ConvContext {
        context_window: 0,
        ..ctx()
    };
    check(
        requesting(1, 1),
        &unknown,
        reply_with_usage(
            vec![text("Done.")],
            StopReason::EndTurn,
            usage(10_000_000, 0),
        ),
        r#"
        Idle
        + append assistant stop=end_turn: text "Done."
        "#,
    );
}

#[test]
fn a_continued_conversation_starts_with_the_summary() {
    check(
        ConvState::Idle,
        &ctx(),
        Event::ContinuedFrom {
            parent_id: "01OLD".to_string(),
            summary: "Task: fix test.".to_string(),
            texts: Vec::new(),
            images: Vec::new(),
        },
        r#"
        LlmRequesting attempt=1 iter=1
        + append user kind=continued: text "This conversation continues conversation 01OLD, whose context window was full. Its continuation summary:\n\nTask: fix test." | text "Continue the task from where the previous conversation left off."
        + request attempt=1 turn
        "#,
    );
    // The messages queued in the old one go with it, in order.
    check(
        ConvState::Idle,
        &ctx(),
        Event::ContinuedFrom {
            parent_id: "01OLD".to_string(),
            summary: "S.".to_string(),
            texts: vec!["also run clippy".to_string(), "and fmt".to_string()],
            images: Vec::new(),
        },
        r#"
        LlmRequesting attempt=1 iter=1
        + append user kind=continued: text "This conversation continues conversation 01OLD, whose context window was full. Its continuation summary:\n\nS." | text "also run clippy" | text "and fmt"
        + request attempt=1 turn
        "#,
    );
    // A queued message's images go with it, after its text; one that was
    // only images has no empty text block.
    let shot = agentd_core::ImageRef {
        media_type: agentd_core::ImageMediaType::Png,
        size: 70,
        sha256: "ab".repeat(32),
        width: 1,
        height: 1,
    };
    check(
        ConvState::Idle,
        &ctx(),
        Event::ContinuedFrom {
            parent_id: "01OLD".to_string(),
            summary: "S.".to_string(),
            texts: vec!["look".to_string(), String::new()],
            images: vec![vec![shot.clone()], vec![shot]],
        },
        &format!(
            r#"
        LlmRequesting attempt=1 iter=1
        + append user kind=continued: text "This conversation continues conversation 01OLD, whose context window was full. Its continuation summary:\n\nS." | text "look" | image png 1×1, 70 B {sha} | image png 1×1, 70 B {sha}
        + request attempt=1 turn
        "#,
            sha = "ab".repeat(32)
        ),
    );
    check(
        requesting(1, 1),
        &ctx(),
        Event::ContinuedFrom {
            parent_id: "01OLD".to_string(),
            summary: "S.".to_string(),
            texts: Vec::new(),
            images: Vec::new(),
        },
        "REJECT ContinuedFrom does not apply in state LlmRequesting",
    );
}

// ---------------------------------------------------------------------------
// Retries.
// ---------------------------------------------------------------------------

#[test]
fn retry_backoff_doubles_with_equal_jitter() {
    // Attempt n waits base * 2^(n-1), capped, half of it fixed and half
    // scaled by the jitter draw.
    let ctx = ConvContext {
        max_attempts: 10,
        ..ctx()
    };
    let cases = [
        (1, 0, 500),
        (1, 999, 999),
        (1, 1000, 999), // draws above 999 are clamped
        (2, 0, 1_000),
        (3, 500, 3_000),
        (5, 0, 8_000),
        (6, 999, 29_985), // 32 s is capped to 30 s
        (9, 0, 15_000),
    ];
    for (attempt, jitter, delay) in cases {
        let next = attempt + 1;
        check(
            requesting(attempt, 1),
            &ctx,
            failed(ErrorKind::Network, true, None, jitter),
            &format!(
                r#"
                LlmRequesting attempt={next} iter=1 retry_in={delay}ms reason="HTTP 529 overloaded"
                + schedule_retry attempt={next} delay={delay}ms
                + notify retrying {next}/10 in {delay}ms reason="HTTP 529 overloaded"
                "#
            ),
        );
    }
}

#[test]
fn retry_after_is_honoured_without_jitter() {
    check(
        requesting(1, 1),
        &ctx(),
        failed(ErrorKind::RateLimit, true, Some(7_000), 999),
        r#"
        LlmRequesting attempt=2 iter=1 retry_in=7000ms reason="HTTP 529 overloaded"
        + schedule_retry attempt=2 delay=7000ms
        + notify retrying 2/3 in 7000ms reason="HTTP 529 overloaded"
        "#,
    );
    // Exactly the limit is still waited for.
    check(
        requesting(2, 1),
        &ctx(),
        failed(ErrorKind::RateLimit, true, Some(120_000), 0),
        r#"
        LlmRequesting attempt=3 iter=1 retry_in=120000ms reason="HTTP 529 overloaded"
        + schedule_retry attempt=3 delay=120000ms
        + notify retrying 3/3 in 120000ms reason="HTTP 529 overloaded"
        "#,
    );
}

#[test]
fn retry_after_above_the_limit_is_not_retried() {
    check(
        requesting(1, 1),
        &ctx(),
        failed(ErrorKind::RateLimit, true, Some(120_001), 0),
        r#"
        Error kind=rate_limit message="HTTP 529 overloaded"
        + notify error kind=rate_limit "HTTP 529 overloaded"
        "#,
    );
    check(
        requesting(2, 1),
        &ctx(),
        failed(ErrorKind::RateLimit, true, Some(3_600_000), 0),
        r#"
        Error kind=rate_limit message="Failed after 2 attempts: HTTP 529 overloaded"
        + notify error kind=rate_limit "Failed after 2 attempts: HTTP 529 overloaded"
        "#,
    );
}

#[test]
fn retry_exhaustion_keeps_the_kind() {
    for (kind, name) in [
        (ErrorKind::RateLimit, "rate_limit"),
        (ErrorKind::Network, "network"),
        (ErrorKind::Unknown, "unknown"),
    ] {
        check(
            requesting(3, 7),
            &ctx(),
            failed(kind, true, None, 0),
            &format!(
                r#"
                Error kind={name} message="Failed after 3 attempts: HTTP 529 overloaded"
                + notify error kind={name} "Failed after 3 attempts: HTTP 529 overloaded"
                "#
            ),
        );
    }
    // With a single attempt allowed, nothing is retried.
    let once = ConvContext {
        max_attempts: 1,
        ..ctx()
    };
    check(
        requesting(1, 1),
        &once,
        failed(ErrorKind::Network, true, None, 0),
        r#"
        Error kind=network message="HTTP 529 overloaded"
        + notify error kind=network "HTTP 529 overloaded"
        "#,
    );
}

#[test]
fn retry_non_retryable_fails_at_once_whatever_the_attempt() {
    check(
        requesting(2, 1),
        &ctx(),
        failed(ErrorKind::InvalidRequest, false, Some(1_000), 0),
        r#"
        Error kind=invalid_request message="HTTP 529 overloaded"
        + notify error kind=invalid_request "HTTP 529 overloaded"
        "#,
    );
}

#[test]
fn retry_events_out_of_place_are_not_applicable() {
    // A timer that fires while a request is in flight, a reply or failure
    // while a retry is scheduled: stale, and refused.
    check(
        requesting(1, 1),
        &ctx(),
        Event::RetryDue,
        "REJECT RetryDue does not apply in state LlmRequesting",
    );
    check(
        waiting_retry(2, 1),
        &ctx(),
        reply(vec![text("late")], StopReason::EndTurn),
        "REJECT LlmCompleted does not apply in state LlmRequesting",
    );
    check(
        waiting_retry(2, 1),
        &ctx(),
        failed(ErrorKind::Network, true, None, 0),
        "REJECT LlmFailed does not apply in state LlmRequesting",
    );
    check(
        ConvState::Idle,
        &ctx(),
        Event::RetryDue,
        "REJECT RetryDue does not apply in state Idle",
    );
}

#[test]
fn retry_of_the_continuation_request() {
    check(
        continuation(1),
        &ctx(),
        failed(ErrorKind::Network, true, None, 0),
        r#"
        AwaitingContinuation attempt=2 rejected=[bash] usage=180000/0/0/1000
        + schedule_retry attempt=2 delay=500ms
        "#,
    );
    check(
        continuation(2),
        &ctx(),
        Event::RetryDue,
        r#"
        AwaitingContinuation attempt=2 rejected=[bash] usage=180000/0/0/1000
        + request attempt=2 continuation <CONTINUATION_PROMPT>"\n\nNote: The following tool calls were requested but not executed due to context limits:\n- bash\n"
        "#,
    );
    let fallback = r#"
        ContextExhausted usage=180000/0/0/1000 summary="Context limit reached. The continuation summary could not be generated. Please start a new conversation."
        + append assistant kind=continuation: text "Context limit reached. The continuation summary could not be generated. Please start a new conversation."
        + notify context_exhausted "Context limit reached. The continuation summary could not be generated. Please start a new conversation."
        "#;
    // Exhausted, not retryable, or a retry-after longer than we wait.
    check(
        continuation(3),
        &ctx(),
        failed(ErrorKind::Network, true, None, 0),
        fallback,
    );
    check(
        continuation(1),
        &ctx(),
        failed(ErrorKind::Auth, false, None, 0),
        fallback,
    );
    check(
        continuation(1),
        &ctx(),
        failed(ErrorKind::RateLimit, true, Some(600_000), 0),
        fallback,
    );
}

// ---------------------------------------------------------------------------
// Cancel in every state.
// ---------------------------------------------------------------------------

#[test]
fn cancel_at_rest_changes_nothing() {
    check(ConvState::Idle, &ctx(), Event::UserCancel, "Idle");
    check(
        error_state(),
        &ctx(),
        Event::UserCancel,
        r#"Error kind=auth message="HTTP 401 invalid x-api-key""#,
    );
    check(
        exhausted_state(),
        &ctx(),
        Event::UserCancel,
        r#"ContextExhausted usage=181000/0/0/1200 summary="we were fixing the test""#,
    );
    check(
        ConvState::Cancelling { iteration: 2 },
        &ctx(),
        Event::UserCancel,
        "Cancelling iter=2",
    );
}

#[test]
fn cancel_before_the_request_is_issued() {
    check(
        ConvState::AwaitingLlm { iteration: 1 },
        &ctx(),
        Event::UserCancel,
        r#"
        Idle
        + append user: text "[Request interrupted by user]"
        "#,
    );
}

#[test]
fn cancel_while_waiting_for_a_retry() {
    check(
        waiting_retry(2, 1),
        &ctx(),
        Event::UserCancel,
        r#"
        Idle
        + cancel_retry
        + append user: text "[Request interrupted by user]"
        "#,
    );
}

#[test]
fn cancel_stream_keeps_the_partial_text_marked_interrupted() {
    check(
        ConvState::Cancelling { iteration: 1 },
        &ctx(),
        Event::LlmAborted {
            partial: vec![
                ContentBlock::Thinking {
                    thinking: "hmm".to_string(),
                    signature: "sig".to_string(),
                },
                ContentBlock::Thinking {
                    thinking: "unsigned, cut off".to_string(),
                    signature: String::new(),
                },
                text("I'll start by"),
                text(""),
                tool_use("t1", "bash", json!("{\"cmd\": \"ca")),
            ],
        },
        r#"
        Idle
        + append assistant interrupted: thinking "hmm" sig="sig" | text "I'll start by"
        + append user: text "[Request interrupted by user]"
        "#,
    );
    // Nothing but thinking or an unfinished tool call: only the marker.
    check(
        ConvState::Cancelling { iteration: 1 },
        &ctx(),
        Event::LlmAborted {
            partial: vec![
                ContentBlock::RedactedThinking {
                    data: "x".to_string(),
                },
                tool_use("t1", "bash", json!({})),
            ],
        },
        r#"
        Idle
        + append user: text "[Request interrupted by user]"
        "#,
    );
    check(
        ConvState::Cancelling { iteration: 1 },
        &ctx(),
        Event::LlmAborted { partial: vec![] },
        r#"
        Idle
        + append user: text "[Request interrupted by user]"
        "#,
    );
}

#[test]
fn cancel_stream_that_failed_meanwhile() {
    check(
        ConvState::Cancelling { iteration: 1 },
        &ctx(),
        failed(ErrorKind::Network, true, None, 0),
        r#"
        Idle
        + append user: text "[Request interrupted by user]"
        "#,
    );
}

#[test]
fn cancel_abort_report_out_of_place_is_not_applicable() {
    check(
        ConvState::Idle,
        &ctx(),
        Event::LlmAborted {
            partial: vec![text("late")],
        },
        "REJECT LlmAborted does not apply in state Idle",
    );
    check(
        requesting(1, 1),
        &ctx(),
        Event::LlmAborted {
            partial: vec![text("late")],
        },
        "REJECT LlmAborted does not apply in state LlmRequesting",
    );
}

#[test]
fn cancel_tools_answers_every_call_in_the_models_order() {
    // t3 finished before t1 (concurrent reads); t1 and t2 still run; t4 and
    // t5 have not started.
    let ConvState::ToolExecuting(mut run) = tools(
        1,
        &[
            ("t1", "read"),
            ("t2", "grep"),
            ("t3", "glob"),
            ("t4", "bash"),
            ("t5", "read"),
        ],
        &["t1", "t2"],
        &[],
    ) else {
        unreachable!()
    };
    run.results.push(ToolResult::new("t3", "no match", true));
    check(
        ConvState::ToolExecuting(run),
        &ctx(),
        Event::UserCancel,
        r#"
        Idle
        + abort_tools [t1 t2]
        + append user: result t1 ERR "Cancelled by user" | result t2 ERR "Cancelled by user" | result t3 ERR "no match" | result t4 ERR "Skipped due to cancellation" | result t5 ERR "Skipped due to cancellation"
        "#,
    );
}

#[test]
fn cancel_while_a_permission_request_is_pending() {
    check(
        asking(
            2,
            &[("t1", "read"), ("t2", "bash"), ("t3", "write")],
            &["t1"],
            "t2",
        ),
        &ctx(),
        Event::UserCancel,
        r#"
        Idle
        + resolved perm-t2 cancelled
        + append user: result t1 "out-t1" | result t2 ERR "Cancelled by user" | result t3 ERR "Skipped due to cancellation"
        "#,
    );
}

#[test]
fn cancel_while_waiting_for_sub_agents() {
    check(
        sub_agents(&["agent_3_t1"]),
        &ctx(),
        Event::UserCancel,
        r#"
        Idle
        + cancel sub-agents [agent_3_t1]
        + append user: result t1 ERR "Cancelled by user" | result t2 ERR "Skipped due to cancellation"
        "#,
    );
    // A state stored without its tool run (none is written so now) ends
    // with the interrupt marker.
    check(
        ConvState::AwaitingSubAgents {
            pending_ids: vec!["a1".to_string()],
            completed: Vec::new(),
            agents: Vec::new(),
            call_id: String::new(),
            run: Box::default(),
        },
        &ctx(),
        Event::UserCancel,
        r#"
        Idle
        + cancel sub-agents [a1]
        + append user: text "[Request interrupted by user]"
        "#,
    );
}

#[test]
fn cancel_then_late_tool_results_are_not_applicable() {
    check(
        ConvState::Idle,
        &ctx(),
        done("t1", "late"),
        "REJECT ToolCompleted does not apply in state Idle",
    );
}

// ---------------------------------------------------------------------------
// Concurrency: read-only runs together, mutation alone, results in order.
// ---------------------------------------------------------------------------

#[test]
fn concurrency_consecutive_reads_start_together_and_a_mutation_waits() {
    let calls = [
        ("t1", "read"),
        ("t2", "grep"),
        ("t3", "bash"),
        ("t4", "glob"),
        ("t5", "think"),
    ];
    let content: Vec<ContentBlock> = calls
        .iter()
        .map(|(id, name)| tool_use(id, name, json!({ "arg": id })))
        .collect();
    check(
        requesting(1, 1),
        &ctx(),
        reply(content, StopReason::ToolUse),
        r#"
        ToolExecuting iter=1 calls=[t1:read t2:grep t3:bash t4:glob t5:think] running=[t1 t2] results=[]
        + append assistant stop=tool_use: tool_use t1 read {"arg":"t1"} | tool_use t2 grep {"arg":"t2"} | tool_use t3 bash {"arg":"t3"} | tool_use t4 glob {"arg":"t4"} | tool_use t5 think {"arg":"t5"}
        + execute t1 read {"arg":"t1"}
        + execute t2 grep {"arg":"t2"}
        "#,
    );
    // t2 finishes first: t1 still runs, so the mutation does not start.
    check(
        tools(1, &calls, &["t1", "t2"], &[]),
        &ctx(),
        done("t2", "2 matches"),
        "ToolExecuting iter=1 calls=[t1:read t2:grep t3:bash t4:glob t5:think] running=[t1] results=[t2]",
    );
    // Then t1: bash starts alone.
    let ConvState::ToolExecuting(mut run) = tools(1, &calls, &["t1"], &[]) else {
        unreachable!()
    };
    run.results.push(ToolResult::new("t2", "2 matches", false));
    check(
        ConvState::ToolExecuting(run.clone()),
        &ctx(),
        done("t1", "file"),
        r#"
        ToolExecuting iter=1 calls=[t1:read t2:grep t3:bash t4:glob t5:think] running=[t3] results=[t2 t1]
        + execute t3 bash {"arg":"t3"}
        "#,
    );
    // Then bash: the two reads after it start together.
    run.results.push(ToolResult::new("t1", "file", false));
    run.running = vec!["t3".to_string()];
    check(
        ConvState::ToolExecuting(run.clone()),
        &ctx(),
        done("t3", "ran"),
        r#"
        ToolExecuting iter=1 calls=[t1:read t2:grep t3:bash t4:glob t5:think] running=[t4 t5] results=[t2 t1 t3]
        + execute t4 glob {"arg":"t4"}
        + execute t5 think {"arg":"t5"}
        "#,
    );
    // The last two finish out of order; the results go back in the model's.
    run.results.push(ToolResult::new("t3", "ran", false));
    run.results.push(ToolResult::new("t5", "thought", false));
    run.running = vec!["t4".to_string()];
    check(
        ConvState::ToolExecuting(run),
        &ctx(),
        done("t4", "a.rs"),
        r#"
        LlmRequesting attempt=1 iter=2
        + append user: result t1 "file" | result t2 "2 matches" | result t3 "ran" | result t4 "a.rs" | result t5 "thought"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn concurrency_mutations_run_one_at_a_time() {
    check(
        requesting(1, 1),
        &ctx(),
        reply(
            vec![
                tool_use("t1", "write", json!({"path": "a"})),
                tool_use("t2", "read", json!({"path": "a"})),
                tool_use("t3", "grep", json!({"q": "x"})),
            ],
            StopReason::ToolUse,
        ),
        r#"
        ToolExecuting iter=1 calls=[t1:write t2:read t3:grep] running=[t1] results=[]
        + append assistant stop=tool_use: tool_use t1 write {"path":"a"} | tool_use t2 read {"path":"a"} | tool_use t3 grep {"q":"x"}
        + execute t1 write {"path":"a"}
        "#,
    );
    check(
        tools(1, &[("t1", "bash"), ("t2", "edit")], &["t1"], &[]),
        &ctx(),
        done("t1", "ok"),
        r#"
        ToolExecuting iter=1 calls=[t1:bash t2:edit] running=[t2] results=[t1]
        + execute t2 edit {"arg":"t2"}
        "#,
    );
}

#[test]
fn concurrency_stale_and_duplicate_completions_are_not_applicable() {
    let s = tools(1, &[("t1", "read"), ("t2", "bash")], &["t1"], &[]);
    check(
        s.clone(),
        &ctx(),
        done("t2", "early"),
        "REJECT ToolCompleted does not apply in state ToolExecuting",
    );
    check(
        s.clone(),
        &ctx(),
        done("zz", "?"),
        "REJECT ToolCompleted does not apply in state ToolExecuting",
    );
    let finished = tools(1, &[("t1", "read"), ("t2", "bash")], &["t2"], &["t1"]);
    check(
        finished,
        &ctx(),
        done("t1", "again"),
        "REJECT ToolCompleted does not apply in state ToolExecuting",
    );
    check(
        asking(1, &[("t1", "bash")], &[], "t1"),
        &ctx(),
        done("t1", "not started"),
        "REJECT ToolCompleted does not apply in state AwaitingPermission",
    );
}

// ---------------------------------------------------------------------------
// Stop reasons.
// ---------------------------------------------------------------------------

#[test]
fn stop_pause_turn_continues_the_turn() {
    check(
        requesting(1, 3),
        &ctx(),
        reply(vec![text("Searching the web…")], StopReason::PauseTurn),
        r#"
        LlmRequesting attempt=1 iter=4
        + append assistant stop=pause_turn: text "Searching the web…"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn stop_reasons_that_end_the_turn_with_a_notice() {
    let cases = [
        (
            StopReason::Refusal,
            "The model declined to continue (refusal).",
        ),
        (
            StopReason::MaxTokens,
            "The reply reached the max_tokens limit.",
        ),
        (
            StopReason::Other("weird_new_reason".to_string()),
            "The model stopped with an unknown reason: weird_new_reason",
        ),
        (
            StopReason::ToolUse,
            "The model stopped for tool use but asked for no tool.",
        ),
        (
            StopReason::ContentFiltered,
            "The provider filtered the reply.",
        ),
        (
            StopReason::GuardrailIntervened,
            "The provider filtered the reply.",
        ),
        (
            StopReason::ModelContextWindowExceeded,
            "The model's context window was exceeded.",
        ),
    ];
    for (stop, notice) in cases {
        let wire = stop.as_wire().to_string();
        check(
            requesting(1, 1),
            &ctx(),
            reply(vec![text("Partial answer")], stop),
            &format!(
                r#"
                Idle
                + append assistant stop={wire}: text "Partial answer"
                + notify info {notice:?}
                "#
            ),
        );
    }
    check(
        requesting(1, 1),
        &ctx(),
        reply(vec![text("Done")], StopReason::StopSequence),
        r#"
        Idle
        + append assistant stop=stop_sequence: text "Done"
        "#,
    );
    // An empty reply appends nothing.
    check(
        requesting(1, 1),
        &ctx(),
        reply(vec![], StopReason::EndTurn),
        "Idle",
    );
}

#[test]
fn stop_tool_calls_are_answered_whatever_the_stop_reason() {
    check(
        requesting(1, 1),
        &ctx(),
        reply(
            vec![tool_use("t1", "read", json!({"path": "a"}))],
            StopReason::MaxTokens,
        ),
        r#"
        ToolExecuting iter=1 calls=[t1:read] running=[t1] results=[]
        + append assistant stop=max_tokens: tool_use t1 read {"path":"a"}
        + execute t1 read {"path":"a"}
        "#,
    );
}

#[test]
fn reply_empty_text_blocks_are_not_kept() {
    // Providers stream them (e.g. before a tool call) but refuse them when
    // they are sent back.
    check(
        requesting(1, 1),
        &ctx(),
        reply(
            vec![text(""), tool_use("t1", "read", json!({"path": "a"}))],
            StopReason::ToolUse,
        ),
        r#"
        ToolExecuting iter=1 calls=[t1:read] running=[t1] results=[]
        + append assistant stop=tool_use: tool_use t1 read {"path":"a"}
        + execute t1 read {"path":"a"}
        "#,
    );
    check(
        requesting(1, 1),
        &ctx(),
        reply(vec![text("")], StopReason::EndTurn),
        "Idle",
    );
}

#[test]
fn stop_reason_wire_names_round_trip() {
    for name in [
        "end_turn",
        "tool_use",
        "max_tokens",
        "stop_sequence",
        "content_filtered",
        "guardrail_intervened",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
        "something_new",
    ] {
        assert_eq!(StopReason::from_wire(name).as_wire(), name);
    }
}

// ---------------------------------------------------------------------------
// The iteration guard.
// ---------------------------------------------------------------------------

#[test]
fn iteration_guard_stops_the_turn_after_the_results() {
    check(
        tools(100, &[("t1", "read")], &["t1"], &[]),
        &ctx(),
        done("t1", "x"),
        r#"
        Error kind=unknown message="Maximum conversation iterations reached"
        + append user: result t1 "x"
        + notify error kind=unknown "Maximum conversation iterations reached"
        "#,
    );
    check(
        tools(99, &[("t1", "read")], &["t1"], &[]),
        &ctx(),
        done("t1", "x"),
        r#"
        LlmRequesting attempt=1 iter=100
        + append user: result t1 "x"
        + request attempt=1 turn
        "#,
    );
    let two = ConvContext {
        max_iterations: 2,
        ..ctx()
    };
    check(
        requesting(1, 2),
        &two,
        reply(vec![text("more")], StopReason::PauseTurn),
        r#"
        Error kind=unknown message="Maximum conversation iterations reached"
        + append assistant stop=pause_turn: text "more"
        + notify error kind=unknown "Maximum conversation iterations reached"
        "#,
    );
    // A new user message starts counting again.
    check(
        ConvState::Error {
            message: texts::ERR_MAX_ITERATIONS.to_string(),
            kind: ErrorKind::Unknown,
        },
        &two,
        user_msg("go on"),
        r#"
        LlmRequesting attempt=1 iter=1
        + append user: text "go on"
        + request attempt=1 turn
        "#,
    );
}

// ---------------------------------------------------------------------------
// Daemon restart in every state.
// ---------------------------------------------------------------------------

#[test]
fn restart_at_rest_changes_nothing() {
    check(ConvState::Idle, &ctx(), Event::DaemonRestarted, "Idle");
    check(
        error_state(),
        &ctx(),
        Event::DaemonRestarted,
        r#"Error kind=auth message="HTTP 401 invalid x-api-key""#,
    );
    check(
        exhausted_state(),
        &ctx(),
        Event::DaemonRestarted,
        r#"ContextExhausted usage=181000/0/0/1200 summary="we were fixing the test""#,
    );
}

#[test]
fn restart_reissues_the_model_request() {
    let expect = r#"
        LlmRequesting attempt=1 iter=4
        + notify recovered "agentd restarted: re-issuing the model request"
        + request attempt=1 turn
        "#;
    check(requesting(2, 4), &ctx(), Event::DaemonRestarted, expect);
    check(waiting_retry(3, 4), &ctx(), Event::DaemonRestarted, expect);
}

#[test]
fn restart_completes_a_cancellation() {
    check(
        ConvState::Cancelling { iteration: 2 },
        &ctx(),
        Event::DaemonRestarted,
        r#"
        Idle
        + notify recovered "agentd restarted: completing the cancellation"
        + append user: text "[Request interrupted by user]"
        "#,
    );
}

#[test]
fn restart_answers_tools_that_were_running_or_waiting() {
    check(
        tools(
            3,
            &[("t1", "read"), ("t2", "bash"), ("t3", "write")],
            &["t2"],
            &["t1"],
        ),
        &ctx(),
        Event::DaemonRestarted,
        r#"
        LlmRequesting attempt=1 iter=4
        + notify recovered "agentd restarted: tools that were running have unknown effects"
        + append user: result t1 "out-t1" | result t2 ERR "agentd restarted while this tool was running; its effects are unknown" | result t3 ERR "Skipped: agentd restarted before this tool ran"
        + request attempt=1 turn
        "#,
    );
    // At the iteration limit the results are written and the turn stops.
    check(
        tools(100, &[("t1", "bash")], &["t1"], &[]),
        &ctx(),
        Event::DaemonRestarted,
        r#"
        Error kind=unknown message="Maximum conversation iterations reached"
        + notify recovered "agentd restarted: tools that were running have unknown effects"
        + append user: result t1 ERR "agentd restarted while this tool was running; its effects are unknown"
        + notify error kind=unknown "Maximum conversation iterations reached"
        "#,
    );
}

#[test]
fn restart_asks_the_pending_permission_again() {
    check(
        asking(1, &[("t1", "read"), ("t2", "bash")], &["t1"], "t2"),
        &ctx(),
        Event::DaemonRestarted,
        r#"
        AwaitingPermission iter=1 calls=[t1:read t2:bash] running=[] results=[t1] ask=perm-t2
        + notify recovered "agentd restarted: asking the pending permission request again"
        + ask perm-t2 tool=t2:bash reason="bash may change files" options=[allow_once allow_always deny deny_and_stop never] rule="bash"
        "#,
    );
}

#[test]
fn restart_while_waiting_for_sub_agents_or_a_continuation() {
    check(
        sub_agents(&["agent_3_t1"]),
        &ctx(),
        Event::DaemonRestarted,
        r#"
        AwaitingSubAgents call=t1 agents=[agent_1_t1 agent_2_t1 agent_3_t1] pending=[agent_3_t1] completed=[agent_1_t1] calls=[t1 t2] results=[]
        + notify recovered "agentd restarted: waiting for the sub-agents still running"
        + spawn agent_3_t1 "task 3" "do task 3"
        "#,
    );
    check(
        continuation(2),
        &ctx(),
        Event::DaemonRestarted,
        r#"
        AwaitingContinuation attempt=2 rejected=[bash] usage=180000/0/0/1000
        + notify recovered "agentd restarted: re-issuing the continuation request"
        + request attempt=2 continuation <CONTINUATION_PROMPT>"\n\nNote: The following tool calls were requested but not executed due to context limits:\n- bash\n"
        "#,
    );
}

// ---------------------------------------------------------------------------
// Permission answers.
// ---------------------------------------------------------------------------

#[test]
fn permission_doom_loop_asks_on_the_third_identical_call() {
    check(
        requesting(1, 1),
        &doom_ctx(),
        reply(
            vec![
                tool_use("t1", "bash", json!({"cmd": "ls"})),
                tool_use("t2", "read", json!({"path": "b"})),
            ],
            StopReason::ToolUse,
        ),
        r#"
        AwaitingPermission iter=1 calls=[t1:bash t2:read] running=[] results=[] ask=perm-t1
        + append assistant stop=tool_use: tool_use t1 bash {"cmd":"ls"} | tool_use t2 read {"path":"b"}
        + ask perm-t1 tool=t1:bash reason="doom loop: bash was called with identical input 3 times in a row" options=[allow_once deny deny_and_stop] rule="bash"
        "#,
    );
    // A different input, or only one earlier call, does not ask.
    let once = ConvContext {
        recent_calls: vec![PastCall::new(
            &call("old1", "bash", json!({"cmd": "ls"})),
            0,
            None,
        )],
        ..ctx()
    };
    check(
        requesting(1, 1),
        &once,
        reply(
            vec![tool_use("t1", "bash", json!({"cmd": "ls"}))],
            StopReason::ToolUse,
        ),
        r#"
        ToolExecuting iter=1 calls=[t1:bash] running=[t1] results=[]
        + append assistant stop=tool_use: tool_use t1 bash {"cmd":"ls"}
        + execute t1 bash {"cmd":"ls"}
        "#,
    );
}

#[test]
fn permission_doom_loop_within_one_reply_waits_for_the_running_reads() {
    // Three identical reads: the first two start together, the third asks
    // once nothing runs.
    let same = json!({"path": "x"});
    check(
        requesting(1, 1),
        &ctx(),
        reply(
            vec![
                tool_use("t1", "read", same.clone()),
                tool_use("t2", "read", same.clone()),
                tool_use("t3", "read", same.clone()),
            ],
            StopReason::ToolUse,
        ),
        r#"
        ToolExecuting iter=1 calls=[t1:read t2:read t3:read] running=[t1 t2] results=[]
        + append assistant stop=tool_use: tool_use t1 read {"path":"x"} | tool_use t2 read {"path":"x"} | tool_use t3 read {"path":"x"}
        + execute t1 read {"path":"x"}
        + execute t2 read {"path":"x"}
        "#,
    );
    let run = ToolRun {
        iteration: 1,
        calls: vec![
            call("t1", "read", same.clone()),
            call("t2", "read", same.clone()),
            call("t3", "read", same.clone()),
        ],
        results: vec![ToolResult::new("t1", "x", false)],
        running: vec!["t2".to_string()],
        permission: None,
        stop_with_feedback: None,
        ..ToolRun::default()
    };
    check(
        ConvState::ToolExecuting(run),
        &ctx(),
        done("t2", "x"),
        r#"
        AwaitingPermission iter=1 calls=[t1:read t2:read t3:read] running=[] results=[t1 t2] ask=perm-t3
        + ask perm-t3 tool=t3:read reason="doom loop: read was called with identical input 3 times in a row" options=[allow_once deny deny_and_stop] rule="read"
        "#,
    );
}

/// The doom-loop state: bash `ls` a third time (t1), then a read (t2).
fn doom_asking() -> ConvState {
    run(
        requesting(1, 1),
        &doom_ctx(),
        reply(
            vec![
                tool_use("t1", "bash", json!({"cmd": "ls"})),
                tool_use("t2", "read", json!({"path": "b"})),
            ],
            StopReason::ToolUse,
        ),
    )
    .unwrap()
    .conversation
    .state
}

#[test]
fn a_resolution_carries_the_request_it_ends_with_its_call() {
    // The audit trail names the call an answer allowed or denied: the
    // core hands over the request, the runtime keeps no copy to match.
    let resolved_ask = |state: &ConvState, ctx: &ConvContext, event: Event| {
        let t = run(state.clone(), ctx, event).unwrap();
        t.effects.into_iter().find_map(|e| match e {
            Effect::PermissionResolved { ask, .. } => Some(ask),
            _ => None,
        })
    };
    let asking_doom = doom_asking();
    let pending = asking_doom.pending_permission().cloned();
    assert_eq!(pending.as_ref().map(|a| a.tool_name.as_str()), Some("bash"));
    for event in [
        answer("perm-t1", Decision::AllowOnce, None),
        answer("", Decision::Deny, None),
        Event::UserCancel,
    ] {
        assert_eq!(resolved_ask(&asking_doom, &doom_ctx(), event), pending);
    }
}

#[test]
fn permission_allow_once_runs_the_call() {
    check(
        doom_asking(),
        &doom_ctx(),
        answer("perm-t1", Decision::AllowOnce, None),
        r#"
        ToolExecuting iter=1 calls=[t1:bash t2:read] running=[t1] results=[]
        + resolved perm-t1 allow_once
        + execute t1 bash {"cmd":"ls"}
        "#,
    );
    // When it completes, the rest continues.
    let allowed = run(
        doom_asking(),
        &doom_ctx(),
        answer("perm-t1", Decision::AllowOnce, None),
    )
    .unwrap()
    .conversation
    .state;
    check(
        allowed,
        &doom_ctx(),
        done("t1", "a b c"),
        r#"
        ToolExecuting iter=1 calls=[t1:bash t2:read] running=[t2] results=[t1]
        + execute t2 read {"path":"b"}
        "#,
    );
}

#[test]
fn permission_allow_always_runs_the_call() {
    check(
        asking(1, &[("t1", "bash")], &[], "t1"),
        &ctx(),
        answer("perm-t1", Decision::AllowAlways, None),
        r#"
        ToolExecuting iter=1 calls=[t1:bash] running=[t1] results=[]
        + resolved perm-t1 allow_always
        + execute t1 bash {"arg":"t1"}
        "#,
    );
}

#[test]
fn permission_deny_answers_and_the_loop_goes_on() {
    check(
        doom_asking(),
        &doom_ctx(),
        answer("perm-t1", Decision::Deny, None),
        r#"
        ToolExecuting iter=1 calls=[t1:bash t2:read] running=[t2] results=[t1(err)]
        + resolved perm-t1 deny
        + execute t2 read {"path":"b"}
        "#,
    );
    // Denying the last call sends the results and asks the model again.
    check(
        asking(1, &[("t1", "read"), ("t2", "bash")], &["t1"], "t2"),
        &ctx(),
        answer("perm-t2", Decision::Deny, None),
        r#"
        LlmRequesting attempt=1 iter=2
        + resolved perm-t2 deny
        + append user: result t1 "out-t1" | result t2 ERR "Permission to use bash has been denied"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn permission_never_denies_permanently() {
    check(
        asking(1, &[("t1", "bash")], &[], "t1"),
        &ctx(),
        answer("perm-t1", Decision::Never, None),
        r#"
        LlmRequesting attempt=1 iter=2
        + resolved perm-t1 never
        + append user: result t1 ERR "Permission to use bash has been permanently denied"
        + request attempt=1 turn
        "#,
    );
    // The doom-loop request does not offer it.
    check(
        doom_asking(),
        &doom_ctx(),
        answer("perm-t1", Decision::Never, None),
        "REJECT decision Never is not offered for this request",
    );
    check(
        doom_asking(),
        &doom_ctx(),
        answer("perm-t1", Decision::Background, None),
        "REJECT decision Background is not offered for this request",
    );
    check(
        doom_asking(),
        &doom_ctx(),
        answer("perm-t1", Decision::Cancelled, None),
        "REJECT decision Cancelled is not offered for this request",
    );
}

#[test]
fn permission_deny_and_stop_without_feedback_ends_the_turn() {
    check(
        asking(
            1,
            &[
                ("t1", "read"),
                ("t2", "bash"),
                ("t3", "write"),
                ("t4", "read"),
            ],
            &["t1"],
            "t2",
        ),
        &ctx(),
        answer("perm-t2", Decision::DenyAndStop, None),
        r#"
        Idle
        + resolved perm-t2 deny_and_stop
        + append user: result t1 "out-t1" | result t2 ERR <INTERRUPT_TOOL+EXPLANATION> | result t3 ERR "Skipped: the user stopped this reply at an earlier tool" | result t4 ERR "Skipped: the user stopped this reply at an earlier tool"
        "#,
    );
    // Whitespace-only feedback is no feedback.
    check(
        asking(1, &[("t1", "bash")], &[], "t1"),
        &ctx(),
        answer("perm-t1", Decision::DenyAndStop, Some("  \n")),
        r#"
        Idle
        + resolved perm-t1 deny_and_stop
        + append user: result t1 ERR <INTERRUPT_TOOL+EXPLANATION>
        "#,
    );
}

#[test]
fn permission_deny_and_stop_with_feedback_starts_a_new_request() {
    // The feedback rides in the same user message as the results, and the
    // model is asked again as for a new user turn.
    check(
        doom_asking(),
        &doom_ctx(),
        answer(
            "perm-t1",
            Decision::DenyAndStop,
            Some("use cargo nextest instead"),
        ),
        r#"
        LlmRequesting attempt=1 iter=1
        + resolved perm-t1 deny_and_stop
        + append user: result t1 ERR <INTERRUPT_TOOL+EXPLANATION> | result t2 ERR "Skipped: the user stopped this reply at an earlier tool" | text "use cargo nextest instead"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn permission_answers_that_do_not_match() {
    check(
        doom_asking(),
        &doom_ctx(),
        answer("perm-t9", Decision::AllowOnce, None),
        r#"REJECT unknown permission request "perm-t9""#,
    );
    // An empty id answers whatever is pending.
    check(
        doom_asking(),
        &doom_ctx(),
        answer("", Decision::Deny, None),
        r#"
        ToolExecuting iter=1 calls=[t1:bash t2:read] running=[t2] results=[t1(err)]
        + resolved perm-t1 deny
        + execute t2 read {"path":"b"}
        "#,
    );
    // Nothing pending: a second answer, or an answer in another state.
    let no_pending = "REJECT no permission request is pending (it was already answered)";
    check(
        tools(1, &[("t1", "bash")], &["t1"], &[]),
        &ctx(),
        answer("perm-t1", Decision::AllowOnce, None),
        no_pending,
    );
    check(
        ConvState::Idle,
        &ctx(),
        answer("perm-t1", Decision::Deny, None),
        no_pending,
    );
    check(
        requesting(1, 1),
        &ctx(),
        answer("perm-t1", Decision::Deny, None),
        no_pending,
    );
}

// ---------------------------------------------------------------------------
// User messages.
// ---------------------------------------------------------------------------

#[test]
fn user_message_must_have_text() {
    check(
        ConvState::Idle,
        &ctx(),
        user_msg(""),
        "REJECT message text is empty",
    );
    check(
        ConvState::Idle,
        &ctx(),
        user_msg(" \n\t"),
        "REJECT message text is empty",
    );
}

/// `state` with the request pending for its call `asked` offering `options`.
fn asking_with(state: ConvState, asked: &str, options: &[Decision]) -> ConvState {
    let ConvState::ToolExecuting(mut run) = state else {
        unreachable!()
    };
    let c = run.calls.iter().find(|c| c.id == asked).unwrap().clone();
    run.permission = Some(PermissionAsk {
        request_id: format!("perm-{asked}"),
        tool_use_id: c.id.clone(),
        tool_name: c.name.clone(),
        input: c.input.clone(),
        reason: "needs approval".to_string(),
        options: options.to_vec(),
        suggested_rule: c.name.clone(),
    });
    ConvState::ToolExecuting(run)
}

fn project_ctx(mode: Mode) -> ConvContext {
    ConvContext {
        policy: Policy::new(mode, "/w/p"),
        ..ctx()
    }
}

fn one_call(name: &str, input: Value) -> ConvState {
    ConvState::ToolExecuting(ToolRun {
        iteration: 1,
        calls: vec![call("t1", name, input)],
        results: Vec::new(),
        running: Vec::new(),
        permission: None,
        stop_with_feedback: None,
        ..ToolRun::default()
    })
}

fn answered_by(decision: Decision, scope: RuleScope, name: &str) -> Event {
    Event::PermissionAnswered {
        request_id: "perm-t1".to_string(),
        decision,
        feedback: None,
        scope,
        by: Some(agentd_core::ClientInfo::local(
            "c7",
            name,
            agentd_core::ClientRole::Driver,
        )),
    }
}

#[test]
fn permission_allow_always_adds_the_rule_where_the_answer_asked() {
    let state = asking_with(
        // Keys in sorted order, as the expected text prints them with or
        // without serde_json's preserve_order.
        one_call("write", json!({"content": "", "path": "/w/p/src/x/a.rs"})),
        "t1",
        &[Decision::AllowOnce, Decision::AllowAlways, Decision::Deny],
    );
    check(
        state,
        &project_ctx(Mode::Default),
        answered_by(Decision::AllowAlways, RuleScope::Project, "ann@laptop"),
        r#"
        ToolExecuting iter=1 calls=[t1:write] running=[t1] results=[]
        + resolved perm-t1 allow_always by ann@laptop
        + add rule allow edit(src/x/**) for Project
        + execute t1 write {"content":"","path":"/w/p/src/x/a.rs"}
        "#,
    );
}

#[test]
fn permission_background_runs_the_command_as_a_background_shell() {
    let state = asking_with(
        one_call("bash", json!({"command": "cargo build"})),
        "t1",
        &[Decision::AllowOnce, Decision::Deny, Decision::Background],
    );
    check(
        state,
        &project_ctx(Mode::Default),
        answered_by(Decision::Background, RuleScope::Conversation, "bob"),
        r#"
        ToolExecuting iter=1 calls=[t1:bash] running=[t1] results=[]
        + resolved perm-t1 background by bob
        + execute t1 bash {"command":"cargo build"} in background
        "#,
    );
}

#[test]
fn permission_mode_upgrade_changes_the_mode_with_its_result() {
    let c = project_ctx(Mode::ReadOnly);
    let state = asking_with(
        ConvState::ToolExecuting(ToolRun {
            iteration: 2,
            calls: vec![
                call("t1", "request_mode_upgrade", json!({"reason": "fix it"})),
                call("t2", "write", json!({"path": "/w/p/a.txt", "content": "x"})),
            ],
            results: Vec::new(),
            running: Vec::new(),
            permission: None,
            stop_with_feedback: None,
            ..ToolRun::default()
        }),
        "t1",
        &[Decision::AllowOnce, Decision::Deny, Decision::DenyAndStop],
    );
    check(
        state,
        &c,
        answered_by(Decision::AllowOnce, RuleScope::Conversation, "ann"),
        r#"
        AwaitingPermission iter=2 calls=[t1:request_mode_upgrade t2:write] running=[] results=[t1] ask=perm-t2 mode=default
        + resolved perm-t1 allow_once by ann
        + notify info "permission mode is now default"
        + ask perm-t2 tool=t2:write reason="write a.txt needs permission" options=[allow_once allow_always deny deny_and_stop never] rule="edit(a.txt)"
        "#,
    );
}

// ---------------------------------------------------------------------------
// Hooks: pre_tool_use in the permission order, stop hooks.
// ---------------------------------------------------------------------------

/// Default mode in /w/p, with a pre_tool_use hook on `matcher` and the
/// given rules (`"deny bash(git push:*)"`).
fn hooked_ctx(matcher: &str, rules: &[&str]) -> ConvContext {
    use agentd_core::hooks::HookMatchers;
    use agentd_core::permission::Rule;
    let mut ctx = project_ctx(Mode::Default);
    ctx.policy.rules = rules.iter().map(|r| r.parse::<Rule>().unwrap()).collect();
    ctx.hooks = HookMatchers {
        pre_tool_use: vec![Some(
            Rule::parse(matcher, agentd_core::Action::Deny).unwrap(),
        )],
        ..HookMatchers::default()
    };
    ctx
}

fn bash_reply(id: &str, command: &str) -> Event {
    reply(
        vec![tool_use(id, "bash", json!({ "command": command }))],
        StopReason::ToolUse,
    )
}

fn hooked(verdict: agentd_core::HookVerdict, new_input: Option<Value>) -> Event {
    Event::PreToolHooksDecided {
        tool_use_id: "t1".to_string(),
        verdict,
        new_input,
    }
}

fn hooking(command: &str) -> ConvState {
    let ConvState::ToolExecuting(mut run) = one_call("bash", json!({ "command": command })) else {
        unreachable!()
    };
    run.hooking = Some("t1".to_string());
    ConvState::ToolExecuting(run)
}

#[test]
fn a_call_a_hook_matches_waits_for_the_hooks_and_others_do_not() {
    let ctx = hooked_ctx("bash(git push:*)", &["allow bash(ls)"]);
    check(
        requesting(1, 1),
        &ctx,
        bash_reply("t1", "git push origin main"),
        r#"
        ToolExecuting iter=1 calls=[t1:bash] running=[] results=[] hooking=t1
        + append assistant stop=tool_use: tool_use t1 bash {"command":"git push origin main"}
        + run pre_tool_use hooks t1 bash {"command":"git push origin main"}
        "#,
    );
    check(
        requesting(1, 1),
        &ctx,
        bash_reply("t1", "ls"),
        r#"
        ToolExecuting iter=1 calls=[t1:bash] running=[t1] results=[]
        + append assistant stop=tool_use: tool_use t1 bash {"command":"ls"}
        + execute t1 bash {"command":"ls"}
        "#,
    );
}

#[test]
fn a_deny_rule_decides_before_the_hook_runs() {
    let ctx = hooked_ctx("bash", &["deny bash(git push:*)"]);
    check(
        requesting(1, 1),
        &ctx,
        bash_reply("t1", "git push"),
        r#"
        LlmRequesting attempt=1 iter=2
        + append assistant stop=tool_use: tool_use t1 bash {"command":"git push"}
        + append user: result t1 ERR "Permission to use bash has been denied by the rule `deny bash(git push:*)` (`git push`)"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn a_hook_deny_is_the_tool_result_with_its_reason() {
    let ctx = hooked_ctx("bash", &[]);
    check(
        hooking("git push"),
        &ctx,
        hooked(
            agentd_core::HookVerdict::Deny("no pushes on Friday".into()),
            None,
        ),
        r#"
        LlmRequesting attempt=1 iter=2
        + append user: result t1 ERR "A pre_tool_use hook blocked this bash call: no pushes on Friday"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn a_hook_allow_runs_the_replaced_input_without_asking() {
    let ctx = hooked_ctx("bash", &[]);
    check(
        hooking("git push"),
        &ctx,
        hooked(
            agentd_core::HookVerdict::Allow,
            Some(json!({"command": "git push --dry-run"})),
        ),
        r#"
        ToolExecuting iter=1 calls=[t1:bash] running=[t1] results=[] hooked:t1=Allow
        + execute t1 bash {"command":"git push --dry-run"}
        "#,
    );
}

#[test]
fn a_replaced_input_is_judged_by_the_deny_rules_again() {
    let ctx = hooked_ctx("bash", &["deny bash(rm:*)"]);
    check(
        hooking("ls"),
        &ctx,
        hooked(
            agentd_core::HookVerdict::Allow,
            Some(json!({"command": "rm -rf /"})),
        ),
        r#"
        LlmRequesting attempt=1 iter=2
        + append user: result t1 ERR "Permission to use bash has been denied by the rule `deny bash(rm:*)` (`rm -rf /`)"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn a_hook_ask_raises_a_request_and_no_decision_leaves_it_to_the_mode() {
    let ctx = hooked_ctx("bash", &["allow bash(ls)"]);
    check(
        hooking("ls"),
        &ctx,
        hooked(
            agentd_core::HookVerdict::Ask("first push of the day".into()),
            None,
        ),
        r#"
        AwaitingPermission iter=1 calls=[t1:bash] running=[] results=[] ask=perm-t1 hooked:t1=Ask("first push of the day")
        + ask perm-t1 tool=t1:bash reason="a pre_tool_use hook asks: first push of the day" options=[allow_once allow_always deny deny_and_stop never background] rule="bash(ls)"
        "#,
    );
    check(
        hooking("ls"),
        &ctx,
        hooked(agentd_core::HookVerdict::None, None),
        r#"
        ToolExecuting iter=1 calls=[t1:bash] running=[t1] results=[] hooked:t1=None
        + execute t1 bash {"command":"ls"}
        "#,
    );
    check(
        hooking("make"),
        &ctx,
        hooked(agentd_core::HookVerdict::None, None),
        r#"
        AwaitingPermission iter=1 calls=[t1:bash] running=[] results=[] ask=perm-t1 hooked:t1=None
        + ask perm-t1 tool=t1:bash reason="bash `make` needs permission" options=[allow_once allow_always deny deny_and_stop never background] rule="bash(make)"
        "#,
    );
}

#[test]
fn cancel_while_hooks_run_stops_them_and_answers_the_call() {
    let ctx = hooked_ctx("bash", &[]);
    check(
        hooking("ls"),
        &ctx,
        Event::UserCancel,
        r#"
        Idle
        + abort hooks
        + append user: result t1 ERR "Cancelled by user"
        "#,
    );
    check(
        hooking("ls"),
        &ctx,
        Event::DaemonStopping,
        r#"
        AwaitingLlm iter=2
        + abort hooks
        + append user: result t1 ERR "Skipped: agentd was stopped before this tool ran"
        "#,
    );
    check(
        hooking("ls"),
        &ctx,
        Event::DaemonRestarted,
        r#"
        LlmRequesting attempt=1 iter=2
        + notify recovered "agentd restarted: tools that were running have unknown effects"
        + append user: result t1 ERR "Skipped: agentd restarted before this tool ran"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn a_stale_hook_answer_is_not_applicable() {
    let ctx = hooked_ctx("bash", &[]);
    check(
        one_call("bash", json!({"command": "ls"})),
        &ctx,
        hooked(agentd_core::HookVerdict::Allow, None),
        r#"
        REJECT PreToolHooksDecided does not apply in state ToolExecuting
        "#,
    );
    check(
        ConvState::Idle,
        &ctx,
        Event::StopHooksDecided {
            continue_with: Some("more".into()),
        },
        r#"
        REJECT StopHooksDecided does not apply in state Idle
        "#,
    );
}

fn stop_ctx(continued: u32) -> ConvContext {
    ConvContext {
        hooks: agentd_core::HookMatchers {
            stop: true,
            max_stop_continuations: 2,
            stop_continuations: continued,
            ..Default::default()
        },
        ..ctx()
    }
}

#[test]
fn stop_hooks_run_when_the_model_ends_its_turn_until_the_cap() {
    let done = || reply(vec![text("Done.")], StopReason::EndTurn);
    check(
        requesting(1, 3),
        &stop_ctx(0),
        done(),
        r#"
        StopHooks iter=3
        + append assistant stop=end_turn: text "Done."
        + run stop hooks
        "#,
    );
    check(
        requesting(1, 3),
        &stop_ctx(2),
        done(),
        r#"
        Idle
        + append assistant stop=end_turn: text "Done."
        "#,
    );
    let stopping = ConvState::StopHooks { iteration: 3 };
    check(
        stopping.clone(),
        &stop_ctx(0),
        Event::StopHooksDecided {
            continue_with: Some("the tests still fail".into()),
        },
        r#"
        LlmRequesting attempt=1 iter=4
        + append user: text "[stop hook] the tests still fail"
        + request attempt=1 turn
        "#,
    );
    check(
        stopping.clone(),
        &stop_ctx(0),
        Event::StopHooksDecided {
            continue_with: None,
        },
        r#"
        Idle
        "#,
    );
    check(
        stopping.clone(),
        &stop_ctx(0),
        user_msg("hi"),
        r#"
        REJECT agent is busy
        "#,
    );
    check(
        stopping.clone(),
        &stop_ctx(0),
        Event::UserCancel,
        r#"
        Idle
        + abort hooks
        "#,
    );
    check(
        stopping,
        &stop_ctx(0),
        Event::DaemonRestarted,
        r#"
        Idle
        + notify recovered "agentd restarted: the stop hooks were interrupted; the turn ended"
        "#,
    );
}

#[test]
fn stop_continuations_are_counted_since_the_last_message_a_person_wrote() {
    use agentd_core::hooks::stop_continuations;
    let user = |t: &str| Message::user(vec![text(t)], NOW);
    let assistant = |t: &str| Message {
        role: Role::Assistant,
        content: vec![text(t)],
        created_at_ms: NOW,
        usage: None,
        stop_reason: None,
        interrupted: false,
        kind: Default::default(),
    };
    let results = Message::user(vec![ContentBlock::tool_result("t1", "ok", false)], NOW);
    let stop = user(&texts::stop_hook_message("again"));
    assert_eq!(stop_continuations(&[]), 0);
    assert_eq!(
        stop_continuations(&[stop.clone(), user("fix it"), assistant("ok")]),
        0
    );
    assert_eq!(
        stop_continuations(&[
            stop.clone(),
            user("fix it"),
            assistant("ok"),
            stop.clone(),
            assistant("ok"),
            results,
            assistant("ok"),
            stop,
        ]),
        2
    );
}

// ---------------------------------------------------------------------------
// Queued user messages (issue 14): delivered at a model request boundary, or
// as the next turn when a turn ends normally; kept after a cancel or failure.
// ---------------------------------------------------------------------------

fn queued(state: ConvState, texts: &[&str]) -> Conversation {
    Conversation {
        queue: texts.iter().map(|t| QueuedMessage::text(*t)).collect(),
        ..state.into()
    }
}

#[test]
fn queued_messages_follow_the_tool_results_into_the_next_request() {
    check(
        queued(
            tools(1, &[("t1", "edit"), ("t2", "bash")], &["t2"], &["t1"]),
            &["also run the linter", "and commit"],
        ),
        &ctx(),
        done("t2", "ok: 3 passed"),
        r#"
        LlmRequesting attempt=1 iter=2 delivered=2
        + append user: result t1 "out-t1" | result t2 "ok: 3 passed" | text "also run the linter" | text "and commit"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn queued_messages_wait_while_tools_still_run() {
    check(
        queued(
            tools(1, &[("t1", "edit"), ("t2", "bash")], &["t1"], &[]),
            &["later"],
        ),
        &ctx(),
        done("t1", "edited"),
        r#"
        ToolExecuting iter=1 calls=[t1:edit t2:bash] running=[t2] results=[t1]
        + execute t2 bash {"arg":"t2"}
        "#,
    );
}

#[test]
fn queued_messages_start_the_next_turn_when_the_reply_ends_it() {
    check(
        queued(requesting(1, 3), &["now the docs"]),
        &ctx(),
        reply(vec![text("Done.")], StopReason::EndTurn),
        r#"
        LlmRequesting attempt=1 iter=1 delivered=1
        + append assistant stop=end_turn: text "Done."
        + append user: text "now the docs"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn a_retry_is_not_a_boundary_for_queued_messages() {
    check(
        queued(waiting_retry(2, 1), &["wait"]),
        &ctx(),
        Event::RetryDue,
        r#"
        LlmRequesting attempt=2 iter=1
        + request attempt=2 turn
        "#,
    );
}

#[test]
fn queued_messages_stay_queued_after_a_cancel_and_go_with_the_next_message() {
    check(
        queued(tools(1, &[("t1", "bash")], &["t1"], &[]), &["kept"]),
        &ctx(),
        Event::UserCancel,
        r#"
        Idle
        + abort_tools [t1]
        + append user: result t1 ERR "Cancelled by user"
        "#,
    );
    check(
        queued(ConvState::Idle, &["kept"]),
        &ctx(),
        user_msg("go on"),
        r#"
        LlmRequesting attempt=1 iter=1 delivered=1
        + append user: text "kept" | text "go on"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn queued_messages_stay_queued_when_the_turn_fails_or_the_context_is_exhausted() {
    check(
        queued(requesting(3, 1), &["kept"]),
        &ctx(),
        failed(ErrorKind::Auth, false, None, 0),
        r#"
        Error kind=auth message="HTTP 529 overloaded"
        + notify error kind=auth "HTTP 529 overloaded"
        "#,
    );
}

#[test]
fn a_deny_and_stop_keeps_queued_messages_like_a_cancel() {
    check(
        queued(asking(1, &[("t1", "bash")], &[], "t1"), &["kept"]),
        &ctx(),
        answer("perm-t1", Decision::DenyAndStop, None),
        r#"
        Idle
        + resolved perm-t1 deny_and_stop
        + append user: result t1 ERR <INTERRUPT_TOOL+EXPLANATION>
        "#,
    );
}

// ---------------------------------------------------------------------------
// Budgets (issue 15 point 5): checked at each model request boundary.
// ---------------------------------------------------------------------------

/// A context whose daily dollar budget ($5) is spent down to `spent`
/// micro-dollars, raised by `raised`.
fn budget_ctx(spent: u64, raised: u64) -> ConvContext {
    ConvContext {
        budget: BudgetContext {
            configured: Amounts {
                per_day_usd: Some(5_000_000),
                ..Amounts::default()
            },
            raised: Amounts {
                per_day_usd: (raised > 0).then_some(raised),
                ..Amounts::default()
            },
            spent: Amounts {
                per_day_usd: Some(spent),
                ..Amounts::default()
            },
        },
        ..ctx()
    }
}

fn budget_stopped(iteration: u32) -> ConvState {
    ConvState::BudgetStopped {
        iteration,
        stop: BudgetStop {
            kind: BudgetKind::PerDayUsd,
            limit: 5_000_000,
            spent: 5_100_000,
            raise_by: 5_000_000,
        },
    }
}

#[test]
fn budget_with_room_lets_the_request_go() {
    check(
        ConvState::Idle,
        &budget_ctx(4_999_999, 0),
        user_msg("go on"),
        r#"
        LlmRequesting attempt=1 iter=1
        + append user: text "go on"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn budget_reached_holds_the_next_round_after_the_tool_results() {
    check(
        tools(2, &[("t1", "bash")], &["t1"], &[]),
        &budget_ctx(5_100_000, 0),
        done("t1", "ok"),
        r#"
        BudgetStopped iter=3 budget=per_day_usd limit=5000000 spent=5100000 raise_by=5000000
        + append user: result t1 "ok"
        + notify budget_stopped budget=per_day_usd limit=5000000 spent=5100000 raise_by=5000000
        "#,
    );
}

#[test]
fn budget_reached_holds_a_new_turn_with_its_message_stored() {
    check(
        ConvState::Idle,
        &budget_ctx(5_000_000, 0),
        user_msg("one more thing"),
        r#"
        BudgetStopped iter=1 budget=per_day_usd limit=5000000 spent=5000000 raise_by=5000000
        + append user: text "one more thing"
        + notify budget_stopped budget=per_day_usd limit=5000000 spent=5000000 raise_by=5000000
        "#,
    );
}

#[test]
fn a_childs_spending_counts_toward_its_parents_budget_with_its_end() {
    // The parent waits for its last child; the spawn call is its only call,
    // so the child's end leads to the next model request.
    let mut last = sub_agents(&["agent_3_t1"]);
    if let ConvState::AwaitingSubAgents { run, .. } = &mut last {
        run.calls.truncate(1);
    }
    let ctx = ConvContext {
        budget: BudgetContext {
            configured: Amounts {
                per_conversation_usd: Some(1_000_000),
                per_conversation_tokens: Some(10_000),
                ..Amounts::default()
            },
            raised: Amounts::default(),
            // Its own replies, and the $0.25 and 100 tokens its sub-agents
            // spent before.
            spent: Amounts {
                per_conversation_usd: Some(600_000),
                per_conversation_tokens: Some(1_000),
                ..Amounts::default()
            },
        },
        ..ctx()
    };
    let conv = Conversation {
        sub_agents: agentd_core::SubAgents {
            usage: usage(90, 10),
            cost_usd: 0.25,
            counted: vec!["C1".to_string()],
        },
        ..last.into()
    };
    let ended = |cost_usd: f64| Event::SubAgentFinished {
        result: finished_agent("agent_3_t1", "fixed", true).1,
        usage: usage(90, 10),
        cost_usd,
    };
    let stop = |t: Transition| match t.conversation.state {
        ConvState::BudgetStopped { stop, .. } => Some((stop.kind, stop.spent)),
        _ => None,
    };
    // $0.30 more: $0.90 spent, the request goes.
    assert_eq!(stop(run(conv.clone(), &ctx, ended(0.3)).unwrap()), None);
    // $0.50 more: $1.10, the budget holds the request back.
    assert_eq!(
        stop(run(conv.clone(), &ctx, ended(0.5)).unwrap()),
        Some((BudgetKind::PerConversationUsd, 1_100_000))
    );
    // Counted before (a report again after a restart): not counted twice.
    let counted = Conversation {
        sub_agents: agentd_core::SubAgents {
            counted: vec!["C1".to_string(), "C3".to_string()],
            ..conv.sub_agents.clone()
        },
        ..conv.clone()
    };
    assert_eq!(stop(run(counted, &ctx, ended(0.5)).unwrap()), None);
    // Tokens alike: 9,000 more billed reach the 10,000.
    let many = Event::SubAgentFinished {
        result: finished_agent("agent_3_t1", "fixed", true).1,
        usage: usage(8_990, 10),
        cost_usd: 0.0,
    };
    assert_eq!(
        stop(run(conv, &ctx, many).unwrap()),
        Some((BudgetKind::PerConversationTokens, 10_000))
    );
}

#[test]
fn budget_raised_sends_the_held_request() {
    check(
        budget_stopped(3),
        &budget_ctx(5_100_000, 5_000_000),
        Event::BudgetAnswered { raise: true },
        r#"
        LlmRequesting attempt=1 iter=3
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn budget_raised_too_little_stops_again_with_the_new_limit() {
    check(
        budget_stopped(3),
        &budget_ctx(5_100_000, 50_000),
        Event::BudgetAnswered { raise: true },
        r#"
        BudgetStopped iter=3 budget=per_day_usd limit=5050000 spent=5100000 raise_by=5000000
        + notify budget_stopped budget=per_day_usd limit=5050000 spent=5100000 raise_by=5000000
        "#,
    );
}

#[test]
fn budget_not_raised_ends_the_turn_in_error() {
    let expect = format!(
        "Error kind=budget message={:?}\n+ notify error kind=budget {:?}",
        "The turn was stopped at the budget: per_day_usd is $5.00 and $5.10 was spent.",
        "The turn was stopped at the budget: per_day_usd is $5.00 and $5.10 was spent.",
    );
    check(
        budget_stopped(3),
        &budget_ctx(5_100_000, 0),
        Event::BudgetAnswered { raise: false },
        &expect,
    );
    // A cancel of a held turn is the same answer.
    check(
        budget_stopped(3),
        &budget_ctx(5_100_000, 0),
        Event::UserCancel,
        &expect,
    );
}

#[test]
fn budget_stopped_rests_through_a_restart_and_refuses_other_answers() {
    check(
        budget_stopped(2),
        &budget_ctx(5_100_000, 0),
        Event::DaemonRestarted,
        "BudgetStopped iter=2 budget=per_day_usd limit=5000000 spent=5100000 raise_by=5000000",
    );
    check(
        ConvState::Idle,
        &budget_ctx(5_100_000, 0),
        Event::BudgetAnswered { raise: true },
        "REJECT BudgetAnswered does not apply in state Idle",
    );
    check(
        budget_stopped(2),
        &budget_ctx(5_100_000, 0),
        Event::UserTriggerContinuation,
        "REJECT UserTriggerContinuation does not apply in state BudgetStopped",
    );
}

#[test]
fn budget_reached_text_names_the_budget_and_the_amounts() {
    let ConvState::BudgetStopped { stop, .. } = budget_stopped(1) else {
        unreachable!()
    };
    assert_eq!(
        texts::budget_reached(&stop),
        "Budget reached: per_day_usd is $5.00 and $5.10 was spent today, by every conversation. \
The turn stopped before its next model request; raise the budget to go on."
    );
}

// ---------------------------------------------------------------------------
// Self-correction (issue 17 point 6).
// ---------------------------------------------------------------------------

/// An edit of `id` failing with the signal (as `tools/edit.rs` words it).
fn edit_failed_with_signal(id: &str) -> Event {
    let signal = agentd_core::CorrectionSignal {
        fallback_request: "Read a.txt and write it whole with `write`.".to_string(),
        original_tool: "edit".to_string(),
        original_error: "old_string not found in a.txt".to_string(),
        suggested_approach: "whole-file write".to_string(),
        fallback_tools: vec!["write".to_string()],
    };
    Event::ToolCompleted {
        result: ToolResult::new(
            id,
            format!("old_string not found in a.txt\n\n{}", signal.render()),
            true,
        ),
    }
}

/// `state` with "fix a.txt" the current request, `attempts` made.
fn correcting(state: ConvState, attempts: usize) -> Conversation {
    let mut corrections = agentd_core::Corrections::default().starting("fix a.txt");
    if attempts > 0 {
        let key = corrections.current.as_ref().unwrap().key.clone();
        corrections
            .chains
            .push(agentd_core::correction::CorrectionChain {
                key,
                original_request: "fix a.txt".to_string(),
                attempts: (0..attempts)
                    .map(|i| agentd_core::correction::CorrectionAttempt {
                        tool: "edit".to_string(),
                        error: "old_string not found in a.txt".to_string(),
                        timestamp_ms: i as i64,
                        fallback_strategy: "Read a.txt and write it whole with `write`."
                            .to_string(),
                        fallback_tools: vec!["write".to_string()],
                    })
                    .collect(),
                max_attempts: 3,
            });
    }
    Conversation {
        corrections,
        ..state.into()
    }
}

#[test]
fn a_signal_failure_re_engages_the_model_with_the_seed_prompt() {
    let prompt = texts::reengagement_prompt("Read a.txt and write it whole with `write`.");
    check(
        correcting(tools(1, &[("t1", "edit")], &["t1"], &[]), 0),
        &ctx(),
        edit_failed_with_signal("t1"),
        &format!(
            r#"
            LlmRequesting attempt=1 iter=2 corrections=["fix a.txt":1]
            + append user: result t1 ERR "old_string not found in a.txt\n\nSELF_CORRECT_ATTEMPT: Read a.txt and write it whole with `write`.\nSELF_CORRECT_METADATA: {{\"originalTool\":\"edit\",\"originalError\":\"old_string not found in a.txt\",\"suggestedApproach\":\"whole-file write\",\"fallbackTools\":[\"write\"]}}" | text {prompt:?}
            + notify correction_attempt 1/3 tool=edit error="old_string not found in a.txt" fallback="Read a.txt and write it whole with `write`." tools=[write]
            + request attempt=1 turn
            "#
        ),
    );
    // The third attempt is still an attempt.
    check(
        correcting(tools(3, &[("t1", "edit")], &["t1"], &[]), 2),
        &ctx(),
        edit_failed_with_signal("t1"),
        &format!(
            r#"
            LlmRequesting attempt=1 iter=4 corrections=["fix a.txt":3]
            + append user: result t1 ERR "old_string not found in a.txt\n\nSELF_CORRECT_ATTEMPT: Read a.txt and write it whole with `write`.\nSELF_CORRECT_METADATA: {{\"originalTool\":\"edit\",\"originalError\":\"old_string not found in a.txt\",\"suggestedApproach\":\"whole-file write\",\"fallbackTools\":[\"write\"]}}" | text {prompt:?}
            + notify correction_attempt 3/3 tool=edit error="old_string not found in a.txt" fallback="Read a.txt and write it whole with `write`." tools=[write]
            + request attempt=1 turn
            "#
        ),
    );
}

#[test]
fn the_failure_after_the_last_attempt_ends_the_turn() {
    let message = "Self-correction stopped: edit failed again after 3 correction attempts (the limit). Last error: old_string not found in a.txt";
    check(
        correcting(tools(4, &[("t1", "edit")], &["t1"], &[]), 3),
        &ctx(),
        edit_failed_with_signal("t1"),
        &format!(
            r#"
            Error kind=unknown message={message:?}
            + append user: result t1 ERR "old_string not found in a.txt\n\nSELF_CORRECT_ATTEMPT: Read a.txt and write it whole with `write`.\nSELF_CORRECT_METADATA: {{\"originalTool\":\"edit\",\"originalError\":\"old_string not found in a.txt\",\"suggestedApproach\":\"whole-file write\",\"fallbackTools\":[\"write\"]}}" | text {message:?}
            + notify correction_failed after 3 tool=edit {message:?}
            + notify error kind=unknown {message:?}
            "#
        ),
    );
}

#[test]
fn a_fallback_success_closes_the_chain_and_other_results_do_not() {
    check(
        correcting(tools(2, &[("t2", "write")], &["t2"], &[]), 1),
        &ctx(),
        done("t2", "wrote a.txt"),
        r#"
        LlmRequesting attempt=1 iter=3
        + append user: result t2 "wrote a.txt"
        + notify correction_success after 1 tool=write
        + request attempt=1 turn
        "#,
    );
    // A read is no fallback: the chain stays open, nothing is said.
    check(
        correcting(tools(2, &[("t2", "read")], &["t2"], &[]), 1),
        &ctx(),
        done("t2", "contents"),
        r#"
        LlmRequesting attempt=1 iter=3
        + append user: result t2 "contents"
        + request attempt=1 turn
        "#,
    );
    // Without a chain a success is just a success.
    check(
        correcting(tools(1, &[("t2", "write")], &["t2"], &[]), 0),
        &ctx(),
        done("t2", "wrote a.txt"),
        r#"
        LlmRequesting attempt=1 iter=2
        + append user: result t2 "wrote a.txt"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn a_user_message_names_the_request_corrections_count_against() {
    let t = run(ConvState::Idle, &ctx(), user_msg("fix a.txt")).unwrap();
    let corrections = t.conversation.corrections;
    assert_eq!(
        corrections.current,
        Some(agentd_core::correction::OriginalRequest::new("fix a.txt"))
    );
    assert!(corrections.chains.is_empty());
    // An open chain of another request is kept.
    let t = run(correcting(ConvState::Idle, 2), &ctx(), user_msg("other")).unwrap();
    let corrections = t.conversation.corrections;
    assert_eq!(corrections.current.unwrap().text, "other");
    assert_eq!(corrections.chains.len(), 1);
}

#[test]
fn a_turn_thinks_as_the_message_that_started_it_asked() {
    use agentd_core::{Effort, Thinking};
    let asked = Sending {
        thinking: Some(Thinking::Budget(5_000)),
        ..QUEUE_IF_BUSY
    };
    let started = transition(
        &Conversation::with_state(ConvState::Idle),
        &ctx(),
        user_msg_sent("think hard", asked),
    )
    .unwrap();
    assert_eq!(started.conversation.thinking, Some(Thinking::Budget(5_000)));
    // A request of the turn keeps it.
    let running = Conversation {
        thinking: Some(Thinking::Budget(5_000)),
        queue: vec![
            QueuedMessage {
                thinking: Some(Thinking::Effort(Effort::High)),
                ..QueuedMessage::text("then this")
            },
            QueuedMessage::text("and this"),
        ],
        ..requesting(1, 1).into()
    };
    let ended = transition(
        &running,
        &ctx(),
        reply(vec![ContentBlock::text("done")], StopReason::EndTurn),
    )
    .unwrap();
    // The queued messages start the next turn, which thinks as the latest
    // one that asked said.
    assert_eq!(
        ended.conversation.thinking,
        Some(Thinking::Effort(Effort::High))
    );
    // A message that asks nothing goes back to the model's configuration.
    let plain = transition(
        &Conversation {
            thinking: Some(Thinking::Off),
            ..ConvState::Idle.into()
        },
        &ctx(),
        user_msg_sent("hi", QUEUE_IF_BUSY),
    )
    .unwrap();
    assert_eq!(plain.conversation.thinking, None);
}

// ---------------------------------------------------------------------------
// Background shells that end (issue 41 point 3).
// ---------------------------------------------------------------------------

fn shell_note(id: &str) -> ShellNote {
    ShellNote {
        shell_id: id.to_string(),
        command: "make test".to_string(),
        status: "exit code 2".to_string(),
        tail: "FAILED: 1 test\n".to_string(),
    }
}

fn shell_ended(id: &str) -> Event {
    Event::ShellEnded {
        note: shell_note(id),
    }
}

/// A conversation in `state` with the ends of `pending` shells not yet
/// told (and taken).
fn with_notes(state: ConvState, pending: &[&str]) -> Conversation {
    let mut conv = Conversation::with_state(state);
    for id in pending {
        conv.shell_notes.take(&shell_note(id));
    }
    conv
}

fn wake_ctx() -> ConvContext {
    ConvContext {
        wake_on_shell_exit: true,
        ..ctx()
    }
}

#[test]
fn the_note_of_an_ended_shell_reads_as_the_model_is_told() {
    assert_eq!(
        texts::shell_ended(&shell_note("sh-abc")),
        "[background shell] Shell sh-abc ended (exit code 2). Command: make test\n\
         Last lines of its output:\nFAILED: 1 test\n\
         (bash_output with shell_id sh-abc reads what was not read yet.)"
    );
    let quiet = ShellNote {
        tail: " \n".to_string(),
        ..shell_note("sh-q")
    };
    assert_eq!(
        texts::shell_ended(&quiet),
        "[background shell] Shell sh-q ended (exit code 2). Command: make test\nIt printed nothing."
    );
}

#[test]
fn a_shell_that_ends_during_a_turn_is_told_at_the_next_model_request() {
    check(
        requesting(1, 1),
        &ctx(),
        shell_ended("sh-a"),
        "LlmRequesting attempt=1 iter=1 shell_notes=[sh-a] noted=[sh-a]",
    );
    check(
        with_notes(tools(1, &[("t1", "bash")], &["t1"], &[]), &["sh-a"]),
        &ctx(),
        done("t1", "ok"),
        r#"
        LlmRequesting attempt=1 iter=2 shell_notes=[] noted=[sh-a]
        + append user: result t1 "ok" | text "[background shell] Shell sh-a ended (exit code 2). Command: make test\nLast lines of its output:\nFAILED: 1 test\n(bash_output with shell_id sh-a reads what was not read yet.)"
        + request attempt=1 turn
        "#,
    );
}

#[test]
fn an_idle_conversation_hears_of_an_ended_shell_with_the_next_message_or_wakes() {
    check(
        ConvState::Idle,
        &ctx(),
        shell_ended("sh-a"),
        "Idle shell_notes=[sh-a] noted=[sh-a]",
    );
    let t = run(
        with_notes(ConvState::Idle, &["sh-a"]),
        &ctx(),
        user_msg("go on"),
    )
    .unwrap();
    assert!(t.conversation.shell_notes.pending.is_empty());
    let Effect::AppendMessage { message } = &t.effects[0] else {
        panic!("{:?}", t.effects);
    };
    assert_eq!(
        message.content.len(),
        2,
        "the note, then the message: {:?}",
        message.content
    );
    assert!(matches!(&message.content[1], ContentBlock::Text { text } if text == "go on"));

    // With wake_on_exit, the end starts a turn whose message is the note.
    for idle in [ConvState::Idle, error_state()] {
        let t = run(idle, &wake_ctx(), shell_ended("sh-b")).unwrap();
        assert_eq!(t.conversation.state, requesting(1, 1));
        assert!(t.conversation.shell_notes.pending.is_empty());
        assert!(
            matches!(&t.effects[0], Effect::AppendMessage { message }
                if message.content == [ContentBlock::text(texts::shell_ended(&shell_note("sh-b")))]),
            "{:?}",
            t.effects
        );
    }
    // A busy conversation is not woken: the note waits.
    check(
        requesting(1, 1),
        &wake_ctx(),
        shell_ended("sh-a"),
        "LlmRequesting attempt=1 iter=1 shell_notes=[sh-a] noted=[sh-a]",
    );
}

#[test]
fn a_turn_that_ends_with_notes_pending_wakes_again_only_when_configured() {
    let end = || reply(vec![text("done")], StopReason::EndTurn);
    let t = run(with_notes(requesting(1, 1), &["sh-a"]), &ctx(), end()).unwrap();
    assert_eq!(t.conversation.state, ConvState::Idle);
    assert_eq!(t.conversation.shell_notes.pending.len(), 1, "still pending");
    let t = run(with_notes(requesting(1, 1), &["sh-a"]), &wake_ctx(), end()).unwrap();
    assert_eq!(t.conversation.state, requesting(1, 1));
    assert!(t.conversation.shell_notes.pending.is_empty());
    // A cancel never wakes it.
    let t = run(
        with_notes(requesting(1, 1), &["sh-a"]),
        &wake_ctx(),
        Event::UserCancel,
    )
    .unwrap();
    assert_eq!(t.conversation.shell_notes.pending.len(), 1);
}

#[test]
fn the_end_of_a_shell_is_taken_once_even_when_reported_again() {
    let conv = with_notes(ConvState::Idle, &[]);
    let t = run(conv, &ctx(), shell_ended("sh-a")).unwrap();
    let again = run(t.conversation.clone(), &ctx(), shell_ended("sh-a"));
    assert!(
        matches!(again, Err(Rejected::NotApplicable { .. })),
        "{again:?}"
    );
    // Delivered, and reported once more after a restart: still refused.
    let t = run(t.conversation, &ctx(), user_msg("hi")).unwrap();
    assert!(t.conversation.shell_notes.pending.is_empty());
    assert!(run(t.conversation, &ctx(), shell_ended("sh-a")).is_err());
}

#[test]
fn a_message_to_queue_waits_for_a_continuation_the_daemon_owes() {
    let mut conv: Conversation = ConvState::ContextExhausted {
        summary: "s".into(),
        final_usage: Usage::default(),
    }
    .into();
    conv.continuation.pending = true;
    let t = transition(&conv, &ctx(), user_msg_sent("more", QUEUE_IF_BUSY)).unwrap();
    assert_eq!(t.effects, [Effect::Enqueue]);
    assert_eq!(t.conversation.state, conv.state);
    // Not asked to queue: refused as before.
    assert_eq!(
        transition(&conv, &ctx(), user_msg("more"))
            .unwrap_err()
            .to_string(),
        "context exhausted"
    );
}
