//! Plans: the detection heuristic on real prompts (data-driven, both sides
//! of the threshold), the reading of proposals and edits, and property
//! tests of the step transitions.

#![expect(clippy::unwrap_used, clippy::expect_used)]

use agentd_core::plan::{
    PLAN_THRESHOLD, Plan, PlanPhase, StepDraft, StepKind, StepStatus, StepUpdate, file_mentions,
    parse_steps_text, plan_score, should_create_plan, updates_from_input,
};
use proptest::prelude::*;
use serde_json::json;

// ---------------------------------------------------------------------------
// shouldCreatePlan on real prompts.
// ---------------------------------------------------------------------------

/// Prompts people type into coding agents, and whether each deserves a
/// plan. Simple questions, one-line fixes and single-file changes do not;
/// refactors, moves across files, migrations and design work do.
const PROMPTS: &[(&str, bool)] = &[
    // Below the threshold.
    ("fix the failing test", false),
    ("what does this function do?", false),
    ("run cargo test and tell me what fails", false),
    ("add a doc comment to parse_config", false),
    ("why is the build slow?", false),
    ("explain the error in src/main.rs", false),
    ("fix the typo in README.md", false),
    ("bump the log level to debug", false),
    ("show me where the socket path is chosen", false),
    ("add a --verbose flag to the CLI", false),
    ("format the code", false),
    ("what's the difference between Arc and Rc?", false),
    ("implement Display for Token", false),
    ("rename the variable x to count in lib.rs", false),
    ("remove the unused import in src/store.rs", false),
    ("write a unit test for the tokenizer", false),
    ("how do I run only the e2e tests?", false),
    ("commit the changes with a good message", false),
    ("check whether clippy passes", false),
    (
        "make the error message clearer when the config file is missing",
        false,
    ),
    // At or above it.
    (
        "refactor the authentication module into separate files for tokens and sessions",
        true,
    ),
    (
        "move the retry logic from src/llm/anthropic.rs and src/llm/openai.rs into src/llm/retry.rs",
        true,
    ),
    (
        "extract the permission checks into their own module and update every caller",
        true,
    ),
    ("migrate the store from sled to redb", true),
    (
        "implement a plugin architecture so tools can be loaded at runtime",
        true,
    ),
    (
        "restructure the client so rendering and networking live in separate layers",
        true,
    ),
    (
        "upgrade tokio to 1.40 and fix whatever breaks across the codebase",
        true,
    ),
    (
        "rewrite the parser in src/parse.rs and src/lexer.rs to use nom",
        true,
    ),
    (
        "split handlers.rs into one file per endpoint and move the shared helpers to util.rs",
        true,
    ),
    (
        "redesign the config loading: defaults, file, environment, flags",
        true,
    ),
    (
        "update Cargo.toml, src/lib.rs, src/cli.rs and README.md for the new --json flag",
        true,
    ),
    (
        "replace the reqwest dependency with hyper in every crate",
        true,
    ),
    (
        "extract an interface for the storage backend and implement it for postgres",
        true,
    ),
    (
        "rename Session to Conversation everywhere and update all the tests",
        true,
    ),
    (
        "refactor error handling to use thiserror across all modules",
        true,
    ),
    ("implement the new caching layer for the API client", true),
];

fn check(prompt: &str, expected: bool) -> Option<String> {
    let score = plan_score(prompt);
    let got = should_create_plan(prompt);
    assert_eq!(got, score.score >= PLAN_THRESHOLD);
    (got != expected).then(|| {
        format!(
            "{prompt:?}: expected {expected}, got {got} (score {}, cues {:?})",
            score.score, score.cues
        )
    })
}

#[test]
fn should_create_plan_on_real_prompts() {
    let below = PROMPTS.iter().filter(|(_, e)| !e).count();
    let above = PROMPTS.iter().filter(|(_, e)| *e).count();
    assert!(below >= 15 && above >= 15, "{below} below, {above} above");
    let wrong: Vec<String> = PROMPTS.iter().filter_map(|(p, e)| check(p, *e)).collect();
    assert!(wrong.is_empty(), "misjudged:\n{}", wrong.join("\n"));
}

#[test]
fn file_mentions_are_paths_and_known_extensions() {
    assert_eq!(
        file_mentions("see src/main.rs, Cargo.toml and `lib/` (and main.rs.)"),
        vec!["src/main.rs", "Cargo.toml", "lib/", "main.rs"]
    );
    assert!(file_mentions("version 1.40 costs $3.50 at https://x.io/a").is_empty());
    assert_eq!(file_mentions("a.rs a.rs"), vec!["a.rs"]);
}

// ---------------------------------------------------------------------------
// Reading proposals and edits.
// ---------------------------------------------------------------------------

fn four_steps() -> serde_json::Value {
    json!({
        "intent": "Refactor authentication module",
        "risk": "medium",
        "estimated_seconds": 15,
        "steps": [
            {"title": "Analyze current architecture", "kind": "analyze", "files": ["src/auth.rs"], "estimated_seconds": 2},
            {"title": "Execute refactoring operations", "kind": "edit", "files": ["src/auth.rs", "src/token.rs"], "depends_on": ["1"]},
            {"title": "Validate changes", "kind": "validate", "depends_on": [2]},
            {"id": "t", "title": "Run tests", "kind": "test", "depends_on": ["2"]}
        ]
    })
}

#[test]
fn a_proposal_reads_with_defaults() {
    let plan = Plan::from_input(&four_steps(), "toolu_1").unwrap();
    assert_eq!(plan.phase, PlanPhase::Proposed);
    assert_eq!(plan.steps.len(), 4);
    let ids: Vec<&str> = plan.steps.iter().map(|s| s.id()).collect();
    assert_eq!(ids, ["1", "2", "3", "t"]);
    assert_eq!(plan.steps[2].draft.dependencies, ["2"]);
    assert!(plan.steps.iter().all(|s| s.status == StepStatus::Pending));
    assert_eq!(plan.files(), ["src/auth.rs", "src/token.rs"]);
    let shown = plan.render_box();
    assert!(
        shown.contains("Intent: Refactor authentication module"),
        "{shown}"
    );
    assert!(
        shown.contains("Risk Level: MEDIUM | Estimated Duration: 15s | Files Affected: 2"),
        "{shown}"
    );
    assert!(
        shown.contains("  1. [ANALYZE] Analyze current architecture (2s)"),
        "{shown}"
    );
}

#[test]
fn bad_proposals_say_what_is_wrong() {
    let cases = [
        (json!([]), "must be an object"),
        (json!({"risk": "low", "steps": []}), "`intent`"),
        (
            json!({"intent": "x", "risk": "huge", "steps": []}),
            "`risk`",
        ),
        (json!({"intent": "x", "steps": []}), "at least one step"),
        (
            json!({"intent": "x", "steps": [{"title": "a", "kind": "dance"}]}),
            "`kind`",
        ),
        (
            json!({"intent": "x", "steps": [{"title": "", "kind": "edit"}]}),
            "needs a title",
        ),
        (
            json!({"intent": "x", "steps": [{"title": "a", "kind": "edit", "depends_on": ["2"]}, {"title": "b", "kind": "test"}]}),
            "not a step listed before it",
        ),
        (
            json!({"intent": "x", "steps": [{"id": "a", "title": "a", "kind": "edit"}, {"id": "a", "title": "b", "kind": "test"}]}),
            "two steps have the id `a`",
        ),
        (
            json!({"intent": "x", "steps": [{"id": "a", "title": "a", "kind": "edit", "depends_on": ["a"]}]}),
            "depends on itself",
        ),
    ];
    for (input, expected) in cases {
        let e = Plan::from_input(&input, "t").unwrap_err();
        assert!(e.0.contains(expected), "{input}: {e}");
    }
}

#[test]
fn the_text_format_reads_back() {
    let plan = Plan::from_input(&four_steps(), "toolu_1").unwrap();
    let text = plan.steps_text();
    assert_eq!(
        text.lines().nth(1),
        Some("2. [edit] Execute refactoring operations (after 1) {src/auth.rs, src/token.rs}")
    );
    let back = parse_steps_text(&text).unwrap();
    let drafts: Vec<StepDraft> = plan
        .steps
        .iter()
        .map(|s| StepDraft {
            estimate_secs: None,
            ..s.draft.clone()
        })
        .collect();
    assert_eq!(back, drafts);
    let edited =
        parse_steps_text("# my edit\n1. [analyze] Look\n\n2. [test] Run (after 1)\n").unwrap();
    assert_eq!(edited.len(), 2);
    assert_eq!(edited[1].kind, StepKind::Test);
    assert_eq!(edited[1].dependencies, ["1"]);
    for bad in [
        "1 [edit] x",
        "1. edit x",
        "1. [edit x",
        "1. [fly] x",
        "1. [edit] x (after 2)",
    ] {
        assert!(parse_steps_text(bad).is_err(), "{bad}");
    }
}

#[test]
fn update_inputs_read() {
    let ups = updates_from_input(&json!({"steps": [{"id": 1, "status": "in_progress"}, {"id": "2", "status": "failed", "note": "no"}]})).unwrap();
    assert_eq!(ups[0].id, "1");
    assert_eq!(ups[1].status, StepStatus::Failed);
    assert!(updates_from_input(&json!({"steps": [{"id": "1", "status": "done"}]})).is_err());
    assert!(updates_from_input(&json!({})).is_err());
}

// ---------------------------------------------------------------------------
// Step transitions.
// ---------------------------------------------------------------------------

fn approved(input: serde_json::Value) -> Plan {
    let mut plan = Plan::from_input(&input, "toolu_1").unwrap();
    plan.phase = PlanPhase::Approved;
    plan
}

fn up(id: &str, status: StepStatus) -> StepUpdate {
    StepUpdate {
        id: id.to_string(),
        status,
        note: None,
    }
}

#[test]
fn steps_run_in_dependency_order_and_failures_skip_dependents() {
    use StepStatus::*;
    let plan = approved(four_steps());
    // Nothing is updated before approval.
    assert!(
        Plan::from_input(&four_steps(), "x")
            .unwrap()
            .apply(&[up("1", InProgress)])
            .is_err()
    );
    // No completion before start.
    let e = plan.apply(&[up("1", Completed)]).unwrap_err();
    assert!(e.0.contains("has not started"), "{e}");
    // Dependencies first.
    let e = plan.apply(&[up("2", InProgress)]).unwrap_err();
    assert!(e.0.contains("depends on 1 which is not completed"), "{e}");
    let (plan, changes) = plan
        .apply(&[up("1", InProgress), up("1", Completed), up("2", InProgress)])
        .unwrap();
    assert_eq!(changes.len(), 3);
    // A failure skips what depends on it, directly or not.
    let (plan, changes) = plan.apply(&[up("2", Failed)]).unwrap();
    let moved: Vec<(&str, StepStatus)> =
        changes.iter().map(|c| (c.step_id.as_str(), c.to)).collect();
    assert_eq!(moved, [("2", Failed), ("3", Skipped), ("t", Skipped)]);
    assert!(plan.is_finished());
    let e = plan.apply(&[up("3", InProgress)]).unwrap_err();
    assert!(e.0.contains("already skipped"), "{e}");
    // All or nothing.
    let fresh = approved(four_steps());
    assert!(
        fresh
            .apply(&[up("1", InProgress), up("9", Completed)])
            .is_err()
    );
    assert!(fresh.apply(&[]).is_err());
}

/// A random plan: `n` steps, each depending on some earlier ones.
fn arb_plan() -> impl Strategy<Value = Plan> {
    (1usize..8)
        .prop_flat_map(|n| {
            let deps: Vec<_> = (0..n)
                .map(|i| proptest::collection::vec(0..i.max(1), 0..=i.min(3)))
                .collect();
            (Just(n), deps)
        })
        .prop_map(|(n, deps)| {
            let steps: Vec<serde_json::Value> = (0..n)
                .map(|i| {
                    let mut d: Vec<String> = deps[i]
                        .iter()
                        .filter(|&&j| j < i)
                        .map(|j| (j + 1).to_string())
                        .collect();
                    d.sort();
                    d.dedup();
                    json!({"title": format!("step {}", i + 1), "kind": "edit", "depends_on": d})
                })
                .collect();
            approved(json!({"intent": "x", "risk": "low", "steps": steps}))
        })
}

fn arb_update(n: usize) -> impl Strategy<Value = StepUpdate> {
    (0..n + 1, proptest::sample::select(StepStatus::ALL.to_vec())).prop_map(|(i, status)| {
        StepUpdate {
            id: (i + 1).to_string(),
            status,
            note: None,
        }
    })
}

fn arb_run() -> impl Strategy<Value = (Plan, Vec<Vec<StepUpdate>>)> {
    arb_plan().prop_flat_map(|plan| {
        let n = plan.steps.len();
        let updates =
            proptest::collection::vec(proptest::collection::vec(arb_update(n), 0..4), 0..25);
        (Just(plan), updates)
    })
}

/// The invariants every reachable plan holds.
fn check_invariants(plan: &Plan) {
    for step in &plan.steps {
        let deps: Vec<StepStatus> = step
            .draft
            .dependencies
            .iter()
            .map(|d| plan.step(d).unwrap().status)
            .collect();
        if matches!(
            step.status,
            StepStatus::InProgress | StepStatus::Completed | StepStatus::Failed
        ) {
            assert!(
                deps.iter().all(|s| *s == StepStatus::Completed),
                "step {} is {:?} with dependencies {deps:?}",
                step.id(),
                step.status
            );
        }
        if deps
            .iter()
            .any(|s| matches!(s, StepStatus::Failed | StepStatus::Skipped))
        {
            assert_eq!(step.status, StepStatus::Skipped, "step {}", step.id());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Whatever updates arrive: a refused update changes nothing; an
    /// accepted one changes only what the rules allow (no completion before
    /// start, final statuses final), reports every change it made, and
    /// leaves a plan where started steps had their dependencies completed
    /// and steps with a failed or skipped dependency are skipped.
    #[test]
    fn step_transitions_hold_their_rules((plan, batches) in arb_run()) {
        let mut plan = plan;
        check_invariants(&plan);
        for batch in batches {
            match plan.apply(&batch) {
                Err(e) => prop_assert!(!e.0.is_empty()),
                Ok((next, changes)) => {
                    for change in &changes {
                        prop_assert!(
                            change.from.may_become(change.to),
                            "{:?} -> {:?}", change.from, change.to
                        );
                    }
                    for (before, after) in plan.steps.iter().zip(&next.steps) {
                        prop_assert_eq!(&before.draft, &after.draft);
                        if before.status.is_final() {
                            prop_assert_eq!(before.status, after.status);
                        }
                        if before.status != after.status {
                            let last = changes.iter().rev().find(|c| c.step_id == after.id());
                            prop_assert_eq!(last.map(|c| c.to), Some(after.status));
                        }
                        if before.status == StepStatus::Pending {
                            prop_assert!(!matches!(after.status, StepStatus::Completed | StepStatus::Failed)
                                || batch.iter().any(|u| u.id == after.id() && u.status == StepStatus::InProgress));
                        }
                    }
                    check_invariants(&next);
                    plan = next;
                }
            }
        }
    }

    /// Running the steps in order always completes a plan.
    #[test]
    fn steps_in_order_complete_the_plan(plan in arb_plan()) {
        let mut plan = plan;
        let ids: Vec<String> = plan.steps.iter().map(|s| s.id().to_string()).collect();
        for id in ids {
            let (next, changes) = plan.apply(&[up(&id, StepStatus::InProgress), up(&id, StepStatus::Completed)]).unwrap();
            prop_assert_eq!(changes.len(), 2);
            plan = next;
        }
        prop_assert!(plan.steps.iter().all(|s| s.status == StepStatus::Completed));
    }
}

// ---------------------------------------------------------------------------
// The plan tools in the transition function.
// ---------------------------------------------------------------------------

mod flow {
    use super::*;
    use agentd_core::Conversation;
    use agentd_core::effect::{Effect, Notice};
    use agentd_core::event::Event;
    use agentd_core::message::{ContentBlock, Reply, StopReason, Usage};
    use agentd_core::permission::{Decision, Mode, Policy};
    use agentd_core::plan::{PlanAnswer, PlanDetect, PlanEvent};
    use agentd_core::state::{ConvContext, ConvState};
    use agentd_core::transition::{Rejected, Transition, transition};

    fn ctx(mode: Mode) -> ConvContext {
        ConvContext {
            policy: Policy::new(mode, "/work"),
            ..ConvContext::default()
        }
    }

    fn reply_calling(calls: &[(&str, &str, serde_json::Value)]) -> Event {
        Event::LlmCompleted {
            reply: Reply {
                content: calls
                    .iter()
                    .map(|(id, name, input)| ContentBlock::ToolUse {
                        id: id.to_string(),
                        name: name.to_string(),
                        input: input.clone(),
                    })
                    .collect(),
                stop_reason: StopReason::ToolUse,
                usage: Usage::default(),
            },
        }
    }

    fn requesting() -> ConvState {
        ConvState::LlmRequesting {
            attempt: 1,
            iteration: 1,
            retry: None,
            early: Default::default(),
        }
    }

    /// The results the transition sends back to the model, by call id.
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

    /// `state` in `mode`.
    fn in_mode(state: ConvState, mode: Mode) -> Conversation {
        Conversation {
            mode,
            ..state.into()
        }
    }

    fn proposed(mode: Mode) -> (ConvContext, Conversation) {
        let c = ctx(mode);
        let t = transition(
            &in_mode(requesting(), mode),
            &c,
            reply_calling(&[("p1", "propose_plan", four_steps())]),
        )
        .unwrap();
        let at = t
            .effects
            .iter()
            .position(|e| matches!(e, Effect::PlanChanged { change: PlanEvent::Generated, plan } if plan.steps.len() == 4))
            .expect("plan_generated");
        let Effect::AskPermission { ask } = &t.effects[at + 1] else {
            panic!("{:?}", t.effects)
        };
        assert_eq!(ask.request_id, "plan-p1");
        assert_eq!(
            ask.options,
            [
                Decision::ApprovePlan,
                Decision::RejectPlan,
                Decision::EditPlan
            ]
        );
        assert_eq!(t.conversation.state.name(), "AwaitingPermission");
        (c, t.conversation)
    }

    fn answer(answer: PlanAnswer) -> Event {
        Event::PlanAnswered {
            request_id: String::new(),
            answer,
            by: None,
        }
    }

    #[test]
    fn approval_switches_mode_and_tells_the_model() {
        let (c, state) = proposed(Mode::Plan);
        // A permission decision does not answer a plan.
        let refused = transition(
            &state,
            &c,
            Event::PermissionAnswered {
                request_id: String::new(),
                decision: Decision::AllowOnce,
                feedback: None,
                scope: Default::default(),
                by: None,
            },
        );
        assert!(matches!(refused, Err(Rejected::DecisionNotOffered(_))));
        let refused = transition(
            &state,
            &c,
            answer(PlanAnswer::Approve { mode: Mode::Bypass }),
        );
        assert!(matches!(refused, Err(Rejected::InvalidPlanAnswer(_))));
        let t = transition(
            &state,
            &c,
            answer(PlanAnswer::Approve {
                mode: Mode::AcceptEdits,
            }),
        )
        .unwrap();
        assert_eq!(t.conversation.mode, Mode::AcceptEdits);
        let res = results(&t);
        assert_eq!(res.len(), 1);
        assert!(!res[0].2);
        assert!(
            res[0]
                .1
                .starts_with("The user approved the plan. Permission mode is now accept_edits.")
        );
        assert!(t.effects.iter().any(|e| matches!(
            e,
            Effect::PlanChanged { change: PlanEvent::Confirmed { mode: Mode::AcceptEdits, edited: false }, plan }
                if plan.phase == PlanPhase::Approved
        )));
        assert_eq!(t.conversation.state.name(), "LlmRequesting");
    }

    #[test]
    fn rejection_carries_the_feedback_and_stays_in_plan_mode() {
        let (c, state) = proposed(Mode::Plan);
        let t = transition(
            &state,
            &c,
            answer(PlanAnswer::Reject {
                feedback: "do the tests first".into(),
            }),
        )
        .unwrap();
        assert_eq!(t.conversation.mode, Mode::Plan);
        let res = results(&t);
        assert!(res[0].2);
        assert!(res[0].1.contains("do the tests first"), "{}", res[0].1);
        assert_eq!(t.conversation.state.name(), "LlmRequesting");
    }

    #[test]
    fn an_edit_is_what_the_model_is_told() {
        let (c, state) = proposed(Mode::Plan);
        let steps = parse_steps_text(
            "1. [test] Write the failing test\n2. [edit] Fix it (after 1) {src/a.rs}\n",
        )
        .unwrap();
        let bad = parse_steps_text("1. [test] x\n")
            .unwrap()
            .into_iter()
            .chain(parse_steps_text("1. [edit] y\n").unwrap())
            .collect();
        let refused = transition(
            &state,
            &c,
            answer(PlanAnswer::Edit {
                steps: bad,
                mode: Mode::Default,
            }),
        );
        assert!(
            matches!(refused, Err(Rejected::InvalidPlanAnswer(ref m)) if m.contains("two steps"))
        );
        let t = transition(
            &state,
            &c,
            answer(PlanAnswer::Edit {
                steps,
                mode: Mode::Default,
            }),
        )
        .unwrap();
        let res = results(&t);
        assert!(
            res[0].1.contains(
                "1. [test] Write the failing test\n2. [edit] Fix it (after 1) {src/a.rs}\n"
            ),
            "{}",
            res[0].1
        );
        assert_eq!(t.conversation.mode, Mode::Default);
    }

    #[test]
    fn updates_change_steps_and_refusals_are_errors() {
        let c = ctx(Mode::AcceptEdits);
        let conv = Conversation {
            plan: Some(approved(four_steps())),
            ..in_mode(requesting(), Mode::AcceptEdits)
        };
        let t = transition(
            &conv,
            &c,
            reply_calling(&[
                ("u1", "update_plan", json!({"steps": [{"id": "1", "status": "in_progress"}]})),
                ("u2", "update_plan", json!({"steps": [{"id": "1", "status": "completed"}, {"id": "2", "status": "in_progress"}]})),
                ("u3", "update_plan", json!({"steps": [{"id": "4", "status": "completed"}]})),
            ]),
        )
        .unwrap();
        let changes: Vec<(String, StepStatus)> = t
            .effects
            .iter()
            .filter_map(|e| match e {
                Effect::PlanChanged {
                    change: PlanEvent::Step(c),
                    ..
                } => Some((c.step_id.clone(), c.to)),
                _ => None,
            })
            .collect();
        assert_eq!(
            changes,
            [
                ("1".to_string(), StepStatus::InProgress),
                ("1".to_string(), StepStatus::Completed),
                ("2".to_string(), StepStatus::InProgress)
            ]
        );
        let res = results(&t);
        assert_eq!(res.len(), 3);
        assert!(!res[0].2 && !res[1].2);
        assert!(
            res[2].2 && res[2].1.contains("there is no step `4`"),
            "{}",
            res[2].1
        );
        assert!(
            res[1]
                .1
                .contains("[x] 1. Analyze current architecture\n[>] 2. Execute"),
            "{}",
            res[1].1
        );
        // Without a plan the steps are a todo list (issue 42 point 4): a
        // plan-style update naming a step but no title is refused.
        let t = transition(
            &requesting().into(),
            &ctx(Mode::Default),
            reply_calling(&[(
                "u",
                "update_plan",
                json!({"steps": [{"id": "1", "status": "in_progress"}]}),
            )]),
        )
        .unwrap();
        let res = results(&t);
        assert!(
            res[0].2 && res[0].1.contains("`title` must be a non-empty string"),
            "{}",
            res[0].1
        );
        assert_eq!(t.conversation.plan, None);
    }

    /// The effects that move files as steps start and fail, in order,
    /// each right after the `PlanChanged` of its step.
    fn checkpoint_effects(
        conv: &Conversation,
        c: &ConvContext,
        updates: serde_json::Value,
    ) -> Vec<String> {
        let t = transition(conv, c, reply_calling(&[("u1", "update_plan", updates)])).unwrap();
        let mut out = Vec::new();
        for (i, e) in t.effects.iter().enumerate() {
            let text = match e {
                Effect::MarkCheckpoint { mark } => format!("mark {mark}"),
                Effect::RestoreCheckpoint { mark, step_id } => {
                    format!("restore {mark} step {step_id}")
                }
                _ => continue,
            };
            assert!(
                matches!(
                    &t.effects[i - 1],
                    Effect::PlanChanged {
                        change: PlanEvent::Step(_),
                        ..
                    }
                ),
                "{e:?} follows its step's change"
            );
            out.push(text);
        }
        out
    }

    #[test]
    fn a_step_that_starts_marks_the_files_and_one_that_fails_rolls_back_if_configured() {
        let mut c = ctx(Mode::AcceptEdits);
        let plan = approved(four_steps());
        let id = plan.tool_use_id.clone();
        let conv = Conversation {
            plan: Some(plan),
            ..in_mode(requesting(), Mode::AcceptEdits)
        };
        let start_and_fail = json!({"steps": [
            {"id": "1", "status": "in_progress"},
            {"id": "1", "status": "failed"}
        ]});
        assert_eq!(
            checkpoint_effects(&conv, &c, start_and_fail.clone()),
            [format!("mark plan:{id}:1")],
            "no rollback unless [plan] auto_rollback_on_failure"
        );
        c.auto_rollback_on_failure = true;
        assert_eq!(
            checkpoint_effects(&conv, &c, start_and_fail),
            [
                format!("mark plan:{id}:1"),
                format!("restore plan:{id}:1 step 1")
            ]
        );
        let complete = json!({"steps": [
            {"id": "1", "status": "in_progress"},
            {"id": "1", "status": "completed"}
        ]});
        assert_eq!(
            checkpoint_effects(&conv, &c, complete),
            [format!("mark plan:{id}:1")],
            "a completed step keeps its changes"
        );
    }

    #[test]
    fn detection_suggests_or_requires_plan_mode() {
        let text = "refactor the authentication module into separate files";
        let mut c = ctx(Mode::Default);
        c.plan_detect = PlanDetect::Suggest;
        let t = transition(
            &ConvState::Idle.into(),
            &c,
            Event::UserMessage {
                text: text.into(),
                images: Vec::new(),
                sending: Default::default(),
            },
        )
        .unwrap();
        assert!(
            matches!(&t.effects[0], Effect::Notify { notice: Notice::PlanSuggested { score, .. } } if *score >= 3)
        );
        assert_eq!(t.conversation.mode, Mode::Default);
        let t = transition(
            &ConvState::Idle.into(),
            &c,
            Event::UserMessage {
                text: "fix the typo".into(),
                images: Vec::new(),
                sending: Default::default(),
            },
        )
        .unwrap();
        assert!(!t.effects.iter().any(|e| matches!(e, Effect::Notify { .. })));
        c.plan_detect = PlanDetect::Require;
        let t = transition(
            &ConvState::Idle.into(),
            &c,
            Event::UserMessage {
                text: text.into(),
                images: Vec::new(),
                sending: Default::default(),
            },
        )
        .unwrap();
        assert_eq!(t.conversation.mode, Mode::Plan);
        c.plan_detect = PlanDetect::Off;
        let t = transition(
            &ConvState::Idle.into(),
            &c,
            Event::UserMessage {
                text: text.into(),
                images: Vec::new(),
                sending: Default::default(),
            },
        )
        .unwrap();
        assert_eq!(t.conversation.mode, Mode::Default);
        assert!(!t.effects.iter().any(|e| matches!(e, Effect::Notify { .. })));
    }
}
