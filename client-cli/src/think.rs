//! Extended thinking as people ask for it: `--think[=BUDGET]` and
//! `--effort LEVEL` on `agent run`, `agent send` and `agent`, and `/think`
//! in the session, all read here into the `ThinkingChoice` a message
//! carries. How the model takes it is the daemon's business.

use agent_proto::v1 as pb;
use clap::Args;

// The thinking flags of a command that sends a message. (No doc comment:
// clap would show it as the description of the subcommands that flatten it.)
#[derive(Debug, Default, Clone, Args)]
pub struct ThinkArgs {
    /// Extended thinking for this message's turn: --think alone (the
    /// model's configured budget, else 10000 tokens), --think=BUDGET (most
    /// thinking tokens, at least 1024) or --think=off
    #[arg(
        long,
        value_name = "BUDGET",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on"
    )]
    pub think: Option<String>,

    /// Thinking by effort instead of a budget: low, medium or high
    #[arg(long, value_name = "LEVEL", conflicts_with = "think")]
    pub effort: Option<String>,
}

impl ThinkArgs {
    /// The choice the flags make; None when neither was given.
    pub(crate) fn choice(&self) -> Result<Option<pb::ThinkingChoice>, String> {
        match (&self.think, &self.effort) {
            (Some(t), _) => parse(t).map(Some),
            (None, Some(e)) => effort(e).map(Some),
            (None, None) => Ok(None),
        }
    }
}

/// `on`, `off`, a number of tokens, or an effort (`low`, `medium`,
/// `high`): what `--think=` and `/think` take.
pub(crate) fn parse(text: &str) -> Result<pb::ThinkingChoice, String> {
    let text = text.trim();
    match text.to_ascii_lowercase().as_str() {
        "" | "on" => Ok(pb::ThinkingChoice::default()),
        "off" => Ok(pb::ThinkingChoice {
            off: true,
            ..Default::default()
        }),
        "low" | "medium" | "high" => effort(text),
        _ => match text.replace('_', "").parse::<u32>() {
            Ok(n) if n >= 1_024 => Ok(pb::ThinkingChoice {
                budget_tokens: n,
                ..Default::default()
            }),
            Ok(n) => Err(format!(
                "a thinking budget of {n} tokens is too small: at least 1024"
            )),
            Err(_) => Err(format!(
                "{text:?}: thinking takes on, off, a number of tokens (at least 1024), or low, medium, high"
            )),
        },
    }
}

fn effort(text: &str) -> Result<pb::ThinkingChoice, String> {
    let level = text.trim().to_ascii_lowercase();
    if !matches!(level.as_str(), "low" | "medium" | "high") {
        return Err(format!("{text:?}: the effort is low, medium or high"));
    }
    Ok(pb::ThinkingChoice {
        effort: level,
        ..Default::default()
    })
}

/// The choice in words, for `/think`'s answer.
pub(crate) fn describe(choice: Option<&pb::ThinkingChoice>) -> String {
    match choice {
        None => "as the model is configured".to_string(),
        Some(c) if c.off => "off".to_string(),
        Some(c) if !c.effort.is_empty() => format!("{} effort", c.effort),
        Some(c) if c.budget_tokens > 0 => format!("up to {} tokens", c.budget_tokens),
        Some(_) => "on (the model's budget, else 10000 tokens)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_people_type_becomes_a_choice() {
        assert_eq!(parse("").unwrap(), pb::ThinkingChoice::default());
        assert!(parse("OFF").unwrap().off);
        assert_eq!(parse("16_000").unwrap().budget_tokens, 16_000);
        assert_eq!(parse("High").unwrap().effort, "high");
        assert!(parse("12").unwrap_err().contains("at least 1024"));
        assert!(parse("lots").is_err());
        let flags = ThinkArgs {
            think: None,
            effort: Some("low".into()),
        };
        assert_eq!(flags.choice().unwrap().unwrap().effort, "low");
        assert_eq!(ThinkArgs::default().choice().unwrap(), None);
        assert_eq!(describe(Some(&parse("4096").unwrap())), "up to 4096 tokens");
    }
}
