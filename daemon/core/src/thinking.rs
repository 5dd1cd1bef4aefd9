//! Extended thinking: what a turn asks for ([`Thinking`]), what a model can
//! be asked ([`ThinkForm`]), and what the request then carries
//! ([`ThinkingParams`]), with the token arithmetic that goes with it.
//!
//! Which reasoning goes back to the model is decided here too
//! ([`goes_back`]): a `thinking` block with its signature and every
//! `redacted_thinking` block are sent back unchanged, byte for byte, in
//! every later request (the API checks the signatures of the blocks of a
//! tool loop); reasoning without a signature (a thinking block cut short by
//! a cancel, an OpenAI-compatible server's `reasoning_content`) never is.

use serde::{Deserialize, Serialize};

use crate::message::{ContentBlock, Message, Role};

/// The smallest budget the Anthropic API takes.
pub const MIN_BUDGET: u32 = 1_024;

/// The budget of "think" with no number and no configured budget.
pub const DEFAULT_BUDGET: u32 = 10_000;

/// How hard the model should think.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effort {
    Low,
    Medium,
    High,
}

impl Effort {
    /// Parses `low`, `medium` or `high`.
    pub fn parse(s: &str) -> Option<Effort> {
        match s.trim().to_ascii_lowercase().as_str() {
            "low" => Some(Effort::Low),
            "medium" => Some(Effort::Medium),
            "high" => Some(Effort::High),
            _ => None,
        }
    }

    /// The wire name (`low`, `medium`, `high`).
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }

    /// The budget a model that takes only budgets gets for this effort.
    pub fn budget(self) -> u32 {
        match self {
            Effort::Low => 4_000,
            Effort::Medium => DEFAULT_BUDGET,
            Effort::High => 32_000,
        }
    }

    /// The effort a model that takes only efforts gets for `budget`.
    pub fn for_budget(budget: u32) -> Effort {
        match budget {
            0..4_000 => Effort::Low,
            4_000..16_000 => Effort::Medium,
            _ => Effort::High,
        }
    }
}

/// What a turn (or a model's configuration) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Thinking {
    /// No extended thinking.
    Off,
    /// Thinking with the model's configured budget or effort
    /// ([`DEFAULT_BUDGET`] when it has none).
    On,
    /// Thinking with at most this many tokens.
    Budget(u32),
    /// Thinking at this effort.
    Effort(Effort),
}

/// How a model takes thinking (the daemon's model table says, or the
/// config file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkForm {
    /// It does not think on request (it is never asked to).
    #[default]
    None,
    /// `thinking: {type: "enabled", budget_tokens}` (Claude 4.5 and
    /// earlier).
    Budget,
    /// `thinking: {type: "adaptive"}` with an effort (Claude 4.6 and later).
    Adaptive,
    /// `reasoning_effort` (OpenAI-compatible reasoning models).
    Effort,
}

/// What one request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingParams {
    /// `thinking: {type: "enabled", budget_tokens}`; `max_tokens` exceeds it.
    Budget { budget_tokens: u32 },
    /// `thinking: {type: "adaptive"}`, and the effort when one was asked.
    Adaptive { effort: Option<Effort> },
    /// `reasoning_effort`.
    Effort(Effort),
}

/// The thinking of one request, and its `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkingPlan {
    pub params: Option<ThinkingParams>,
    pub max_tokens: u32,
}

impl ThinkingPlan {
    /// Tokens the reply may spend thinking, which the transcript cannot
    /// use of the context window.
    pub fn reserved(&self) -> u64 {
        match self.params {
            Some(ThinkingParams::Budget { budget_tokens }) => u64::from(budget_tokens),
            _ => 0,
        }
    }
}

/// What a request asks of a `form` model: the turn's choice (`None`: the
/// model's configured one), else the configured one; `max_tokens` is the
/// configured reply size, raised by a budget so that it exceeds the budget
/// and the answer keeps its room, within the model's `max_output`.
pub fn plan(
    turn: Option<Thinking>,
    configured: Option<Thinking>,
    form: ThinkForm,
    max_tokens: u32,
    max_output: u32,
) -> ThinkingPlan {
    let base = max_tokens.min(max_output);
    let none = ThinkingPlan {
        params: None,
        max_tokens: base,
    };
    let choice = match turn.or(configured) {
        None | Some(Thinking::Off) => return none,
        Some(Thinking::On) => match configured {
            Some(c @ (Thinking::Budget(_) | Thinking::Effort(_))) => c,
            _ => Thinking::On,
        },
        Some(c) => c,
    };
    let params = match (form, choice) {
        (ThinkForm::None, _) => return none,
        (ThinkForm::Budget, Thinking::Budget(b)) => budget(b, base, max_output),
        (ThinkForm::Budget, Thinking::Effort(e)) => budget(e.budget(), base, max_output),
        (ThinkForm::Budget, _) => budget(DEFAULT_BUDGET, base, max_output),
        (ThinkForm::Adaptive, Thinking::Budget(b)) => Some(ThinkingParams::Adaptive {
            effort: Some(Effort::for_budget(b)),
        }),
        (ThinkForm::Adaptive, Thinking::Effort(e)) => {
            Some(ThinkingParams::Adaptive { effort: Some(e) })
        }
        (ThinkForm::Adaptive, _) => Some(ThinkingParams::Adaptive { effort: None }),
        (ThinkForm::Effort, Thinking::Budget(b)) => {
            Some(ThinkingParams::Effort(Effort::for_budget(b)))
        }
        (ThinkForm::Effort, Thinking::Effort(e)) => Some(ThinkingParams::Effort(e)),
        (ThinkForm::Effort, _) => Some(ThinkingParams::Effort(Effort::Medium)),
    };
    let max_tokens = match params {
        Some(ThinkingParams::Budget { budget_tokens }) => {
            budget_tokens.saturating_add(base.max(1)).min(max_output)
        }
        _ => base,
    };
    ThinkingPlan { params, max_tokens }
}

/// A budget that fits: at least [`MIN_BUDGET`], and below `max_output` by
/// at least the smaller of the answer's room and [`MIN_BUDGET`]. None when
/// the model's output is too small to think at all.
fn budget(asked: u32, answer: u32, max_output: u32) -> Option<ThinkingParams> {
    let room = answer.clamp(1, MIN_BUDGET);
    let most = max_output.checked_sub(room)?;
    if most < MIN_BUDGET {
        return None;
    }
    Some(ThinkingParams::Budget {
        budget_tokens: asked.clamp(MIN_BUDGET, most),
    })
}

/// The context window the transcript may fill: the model's, less what a
/// reply may spend thinking (0 stays unknown).
pub fn usable_window(window: u64, plan: &ThinkingPlan) -> u64 {
    if window == 0 {
        return 0;
    }
    window.saturating_sub(plan.reserved()).max(1)
}

/// Whether a request with `messages` may ask an Anthropic model to think:
/// in a tool loop (the transcript ends with tool results) the API takes
/// thinking only when the reply that called the tools began with reasoning
/// that goes back. A loop that began without thinking (the config changed
/// across a restart, say) finishes without it.
pub fn may_think(messages: &[Message]) -> bool {
    let Some((last, before)) = messages.split_last() else {
        return true;
    };
    let in_loop = last.role == Role::User
        && last
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }));
    if !in_loop {
        return true;
    }
    before
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .and_then(|m| m.content.first())
        .is_some_and(|b| {
            matches!(
                b,
                ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. }
            ) && goes_back(b)
        })
}

/// Whether `block` of an assistant reply goes back to the model in later
/// requests (see the module doc).
pub fn goes_back(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Thinking { signature, .. } => !signature.is_empty(),
        ContentBlock::RedactedThinking { .. } => true,
        ContentBlock::Text { .. }
        | ContentBlock::ToolUse { .. }
        | ContentBlock::ToolResult { .. }
        | ContentBlock::ServerTool { .. }
        | ContentBlock::Image(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        turn: Option<Thinking>,
        configured: Option<Thinking>,
        form: ThinkForm,
        expect: (Option<ThinkingParams>, u32),
    ) {
        let p = plan(turn, configured, form, 8_192, 64_000);
        assert_eq!(
            (p.params, p.max_tokens),
            expect,
            "{turn:?} {configured:?} {form:?}"
        );
    }

    #[test]
    fn choices_meet_forms() {
        use ThinkingParams as P;
        let b = |n| Some(P::Budget { budget_tokens: n });
        check(None, None, ThinkForm::Budget, (None, 8_192));
        check(
            Some(Thinking::On),
            None,
            ThinkForm::Budget,
            (b(10_000), 18_192),
        );
        check(
            None,
            Some(Thinking::Budget(5_000)),
            ThinkForm::Budget,
            (b(5_000), 13_192),
        );
        check(
            Some(Thinking::Off),
            Some(Thinking::Budget(5_000)),
            ThinkForm::Budget,
            (None, 8_192),
        );
        check(
            Some(Thinking::On),
            Some(Thinking::Budget(5_000)),
            ThinkForm::Budget,
            (b(5_000), 13_192),
        );
        check(
            Some(Thinking::Budget(100)),
            None,
            ThinkForm::Budget,
            (b(MIN_BUDGET), 9_216),
        );
        check(
            Some(Thinking::Budget(1_000_000)),
            None,
            ThinkForm::Budget,
            (b(62_976), 64_000),
        );
        check(
            Some(Thinking::Effort(Effort::High)),
            None,
            ThinkForm::Budget,
            (b(32_000), 40_192),
        );
        check(Some(Thinking::On), None, ThinkForm::None, (None, 8_192));
        check(
            Some(Thinking::Budget(20_000)),
            None,
            ThinkForm::Adaptive,
            (
                Some(P::Adaptive {
                    effort: Some(Effort::High),
                }),
                8_192,
            ),
        );
        check(
            Some(Thinking::On),
            None,
            ThinkForm::Adaptive,
            (Some(P::Adaptive { effort: None }), 8_192),
        );
        check(
            Some(Thinking::Effort(Effort::Low)),
            None,
            ThinkForm::Effort,
            (Some(P::Effort(Effort::Low)), 8_192),
        );
        check(
            Some(Thinking::Budget(2_000)),
            None,
            ThinkForm::Effort,
            (Some(P::Effort(Effort::Low)), 8_192),
        );
    }

    #[test]
    fn the_budget_always_stays_below_max_tokens() {
        for max_output in [0, 1, 1_024, 2_048, 2_049, 8_192, 64_000] {
            for max_tokens in [0, 1, 512, 4_096, 100_000] {
                for asked in [0, 1, 1_024, 50_000, u32::MAX] {
                    let p = plan(
                        Some(Thinking::Budget(asked)),
                        None,
                        ThinkForm::Budget,
                        max_tokens,
                        max_output,
                    );
                    assert!(p.max_tokens <= max_output);
                    if let Some(ThinkingParams::Budget { budget_tokens }) = p.params {
                        assert!(budget_tokens >= MIN_BUDGET);
                        assert!(
                            p.max_tokens > budget_tokens,
                            "{p:?} {max_tokens} {max_output}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_window_leaves_room_for_the_budget() {
        let p = plan(
            Some(Thinking::Budget(10_000)),
            None,
            ThinkForm::Budget,
            8_192,
            64_000,
        );
        assert_eq!(usable_window(200_000, &p), 190_000);
        assert_eq!(usable_window(0, &p), 0);
        let off = plan(None, None, ThinkForm::Budget, 8_192, 64_000);
        assert_eq!(usable_window(200_000, &off), 200_000);
    }

    #[test]
    fn a_tool_loop_thinks_only_if_it_began_thinking() {
        let user = Message::user(vec![ContentBlock::text("go")], 0);
        let call = ContentBlock::ToolUse {
            id: "t".into(),
            name: "read".into(),
            input: serde_json::json!({}),
        };
        let reply = |content| Message {
            role: Role::Assistant,
            ..Message::user(content, 0)
        };
        let results = Message::user(vec![ContentBlock::tool_result("t", "ok", false)], 0);
        let signed = ContentBlock::Thinking {
            thinking: "a".into(),
            signature: "s".into(),
        };
        assert!(may_think(&[]));
        assert!(may_think(std::slice::from_ref(&user)));
        let thought = [
            user.clone(),
            reply(vec![signed, call.clone()]),
            results.clone(),
        ];
        assert!(may_think(&thought));
        let plain = [user.clone(), reply(vec![call.clone()]), results.clone()];
        assert!(!may_think(&plain));
        let redacted = [
            user,
            reply(vec![
                ContentBlock::RedactedThinking { data: "x".into() },
                call,
            ]),
            results,
        ];
        assert!(may_think(&redacted));
    }

    #[test]
    fn only_signed_reasoning_goes_back() {
        let signed = ContentBlock::Thinking {
            thinking: "a".into(),
            signature: "sig".into(),
        };
        let unsigned = ContentBlock::Thinking {
            thinking: "a".into(),
            signature: String::new(),
        };
        assert!(goes_back(&signed));
        assert!(!goes_back(&unsigned));
        assert!(goes_back(&ContentBlock::RedactedThinking {
            data: "x".into()
        }));
        assert!(goes_back(&ContentBlock::text("t")));
    }
}
