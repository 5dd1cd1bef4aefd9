//! Properties of the thinking plan: whatever a turn, a config and a model
//! say, a request never asks what the API refuses.

use agentd_core::thinking::{MIN_BUDGET, plan, usable_window};
use agentd_core::{Effort, ThinkForm, Thinking, ThinkingParams};
use proptest::prelude::*;

fn choice() -> impl Strategy<Value = Option<Thinking>> {
    prop_oneof![
        Just(None),
        Just(Some(Thinking::Off)),
        Just(Some(Thinking::On)),
        any::<u32>().prop_map(|b| Some(Thinking::Budget(b))),
        prop_oneof![Just(Effort::Low), Just(Effort::Medium), Just(Effort::High)]
            .prop_map(|e| Some(Thinking::Effort(e))),
    ]
}

fn form() -> impl Strategy<Value = ThinkForm> {
    prop_oneof![
        Just(ThinkForm::None),
        Just(ThinkForm::Budget),
        Just(ThinkForm::Adaptive),
        Just(ThinkForm::Effort),
    ]
}

proptest! {
    #[test]
    fn a_plan_is_always_one_the_api_takes(
        turn in choice(),
        configured in choice(),
        form in form(),
        max_tokens in any::<u32>(),
        max_output in any::<u32>(),
        window in any::<u64>(),
    ) {
        let p = plan(turn, configured, form, max_tokens, max_output);
        prop_assert!(p.max_tokens <= max_output);
        let off = turn == Some(Thinking::Off) || (turn.is_none() && matches!(configured, None | Some(Thinking::Off)));
        if off || form == ThinkForm::None {
            prop_assert_eq!(p.params, None);
            prop_assert_eq!(p.max_tokens, max_tokens.min(max_output));
        }
        match p.params {
            Some(ThinkingParams::Budget { budget_tokens }) => {
                prop_assert_eq!(form, ThinkForm::Budget);
                prop_assert!(budget_tokens >= MIN_BUDGET);
                prop_assert!(p.max_tokens > budget_tokens);
            }
            Some(_) => prop_assert_eq!(p.max_tokens, max_tokens.min(max_output)),
            None => {}
        }
        let usable = usable_window(window, &p);
        prop_assert!(usable <= window);
        prop_assert_eq!(usable == 0, window == 0);
    }
}
