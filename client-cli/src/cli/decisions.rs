//! Permission modes and decisions as a person types them: on the command
//! line (`--mode`, `agent answer`) and at the session's prompts (one key,
//! or a word, with optional feedback; a plan approval's keys).

use agent_proto::v1::{PermissionDecision, PermissionMode};
use clap::ValueEnum;

/// A permission mode, as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Mutating tools are not offered; the agent may ask to upgrade
    #[value(name = "read_only", alias = "read-only")]
    ReadOnly,
    /// Read-only tools run; others ask unless a rule allows them
    #[value(name = "default")]
    Default,
    /// Like default, but file edits inside the working directory are allowed
    #[value(name = "accept_edits", alias = "accept-edits")]
    AcceptEdits,
    /// Planning: like read_only, and the agent is told to plan
    #[value(name = "plan")]
    Plan,
    /// Nothing asks (only if the daemon was started with --allow-bypass)
    #[value(name = "bypass")]
    Bypass,
    /// Like accept_edits, and commands that run inside the OS sandbox do not ask
    #[value(name = "auto")]
    Auto,
}

impl Mode {
    /// The names people type, in the order they are offered.
    pub fn names() -> Vec<String> {
        Mode::value_variants().iter().map(|m| m.name()).collect()
    }

    /// Its name as people type it (the one `--mode` takes).
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default()
    }

    /// What Shift-Tab switches to from the mode named `current`: default →
    /// accept_edits → plan → default (read_only and bypass go to default;
    /// bypass is never reached this way).
    pub fn after(current: &str) -> Mode {
        match current {
            "default" => Mode::AcceptEdits,
            "accept_edits" => Mode::Plan,
            _ => Mode::Default,
        }
    }

    /// A mode from its name (`accept-edits` and any case too).
    pub fn parse(text: &str) -> Result<Mode, String> {
        <Mode as ValueEnum>::from_str(text.trim(), true).map_err(|_| {
            format!(
                "unknown mode {:?}; the modes are {}",
                text.trim(),
                Mode::names().join(", ")
            )
        })
    }

    /// The wire value.
    pub fn to_proto(self) -> PermissionMode {
        match self {
            Mode::ReadOnly => PermissionMode::ReadOnly,
            Mode::Default => PermissionMode::Default,
            Mode::AcceptEdits => PermissionMode::AcceptEdits,
            Mode::Plan => PermissionMode::Plan,
            Mode::Bypass => PermissionMode::Bypass,
            Mode::Auto => PermissionMode::Auto,
        }
    }
}

/// A permission decision, as typed on the command line: its name, or the
/// key the interactive prompt shows for it ([`Decision::key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Decision {
    /// Run this call once
    #[value(name = "allow_once", aliases = ["allow-once", "y"])]
    AllowOnce,
    /// Run it and add a rule so it is not asked again
    #[value(name = "allow_always", aliases = ["allow-always", "a"])]
    AllowAlways,
    /// Do not run it; the agent is told and continues
    #[value(name = "deny", alias = "n")]
    Deny,
    /// Do not run it and stop the turn (--feedback becomes the next message)
    #[value(name = "deny_and_stop", aliases = ["deny-and-stop", "s"])]
    DenyAndStop,
    /// Do not run it and add a deny rule
    #[value(name = "never", alias = "v")]
    Never,
    /// bash only: run the command as a background shell
    #[value(name = "background", alias = "b")]
    Background,
}

impl Decision {
    /// The wire value.
    pub fn to_proto(self) -> PermissionDecision {
        match self {
            Decision::AllowOnce => PermissionDecision::AllowOnce,
            Decision::AllowAlways => PermissionDecision::AllowAlways,
            Decision::Deny => PermissionDecision::Deny,
            Decision::DenyAndStop => PermissionDecision::DenyAndStop,
            Decision::Never => PermissionDecision::Never,
            Decision::Background => PermissionDecision::Background,
        }
    }

    /// The decision a wire value names, if it is one a person can give.
    pub fn from_proto(decision: PermissionDecision) -> Option<Self> {
        match decision {
            PermissionDecision::AllowOnce => Some(Decision::AllowOnce),
            PermissionDecision::AllowAlways => Some(Decision::AllowAlways),
            PermissionDecision::Deny => Some(Decision::Deny),
            PermissionDecision::DenyAndStop => Some(Decision::DenyAndStop),
            PermissionDecision::Never => Some(Decision::Never),
            PermissionDecision::Background => Some(Decision::Background),
            PermissionDecision::Unspecified | PermissionDecision::Cancelled => None,
        }
    }

    /// Every decision, in the order the prompt lists them.
    pub const ALL: [Decision; 6] = [
        Decision::AllowOnce,
        Decision::AllowAlways,
        Decision::Deny,
        Decision::DenyAndStop,
        Decision::Never,
        Decision::Background,
    ];

    /// The key that picks it at the interactive prompt.
    pub fn key(self) -> char {
        match self {
            Decision::AllowOnce => 'y',
            Decision::AllowAlways => 'a',
            Decision::Deny => 'n',
            Decision::DenyAndStop => 's',
            Decision::Never => 'v',
            Decision::Background => 'b',
        }
    }

    /// The prompt's label for it.
    pub fn label(self) -> &'static str {
        match self {
            Decision::AllowOnce => "allow once",
            Decision::AllowAlways => "allow always",
            Decision::Deny => "deny",
            Decision::DenyAndStop => "deny and stop",
            Decision::Never => "never",
            Decision::Background => "background",
        }
    }

    /// The command-line name (`allow_once`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Decision::AllowOnce => "allow_once",
            Decision::AllowAlways => "allow_always",
            Decision::Deny => "deny",
            Decision::DenyAndStop => "deny_and_stop",
            Decision::Never => "never",
            Decision::Background => "background",
        }
    }
}

/// A line typed at the permission prompt, understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedAnswer {
    pub decision: Decision,
    /// Feedback typed on the same line after `s` (deny and stop).
    pub feedback: Option<String>,
    /// `p`: allow always, for every conversation of this project.
    pub project: bool,
}

/// Parses a line typed at the permission prompt: a key (`y`, `a`, `n`, `s`,
/// `v`, `b`) or a decision name (`allow_once`, `deny`, ...), and for deny and
/// stop optionally the feedback after it on the same line (`s use git mv`).
/// `offered` is the request's list of options; an empty list offers all but
/// background.
pub fn parse_typed_answer(line: &str, offered: &[Decision]) -> Result<TypedAnswer, String> {
    let line = line.trim();
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim()),
        None => (line, ""),
    };
    let word = word.to_lowercase().replace('-', "_");
    let project = matches!(word.as_str(), "p" | "always_project");
    let decision = match word.as_str() {
        "p" | "always_project" => Decision::AllowAlways,
        "y" | "yes" | "allow" | "allow_once" | "once" => Decision::AllowOnce,
        "a" | "always" | "allow_always" => Decision::AllowAlways,
        "n" | "no" | "deny" => Decision::Deny,
        "s" | "stop" | "deny_and_stop" => Decision::DenyAndStop,
        "v" | "never" => Decision::Never,
        "b" | "bg" | "background" => Decision::Background,
        "" => return Err("type one of the keys in brackets".to_string()),
        other => {
            return Err(format!(
                "`{other}` is not an answer; type one of the keys in brackets"
            ));
        }
    };
    let offered_all;
    let offered = if offered.is_empty() {
        offered_all = default_options();
        &offered_all[..]
    } else {
        offered
    };
    if !offered.contains(&decision) {
        return Err(format!(
            "{} is not offered for this request",
            decision.label()
        ));
    }
    let feedback = match decision {
        Decision::DenyAndStop if !rest.is_empty() => Some(rest.to_string()),
        Decision::DenyAndStop => None,
        // A sentence that happens to start with "yes" or "no" is more likely a
        // message typed as the request arrived than an answer.
        Decision::AllowOnce
        | Decision::AllowAlways
        | Decision::Deny
        | Decision::Never
        | Decision::Background
            if !rest.is_empty() =>
        {
            return Err(format!(
                "to {}, type just `{}`",
                decision.label(),
                decision.key()
            ));
        }
        Decision::AllowOnce
        | Decision::AllowAlways
        | Decision::Deny
        | Decision::Never
        | Decision::Background => None,
    };
    Ok(TypedAnswer {
        decision,
        feedback,
        project,
    })
}

/// A line typed at a plan approval prompt, understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanKey {
    /// Approve the plan; carry it out in `accept_edits` mode when `edits`,
    /// else in `default` mode.
    Approve { edits: bool },
    /// Reject it; the feedback typed after `r` on the same line, if any.
    Reject { feedback: Option<String> },
}

/// What a plan approval prompt shows.
pub const PLAN_KEYS: &str = "approve the plan? [a] approve  [e] approve, accept edits  [r] reject and say why (a key, then Enter)";

/// Parses a line typed at a plan approval prompt: `a` (approve), `e`
/// (approve with accept_edits), `r` (reject, optionally followed by the
/// feedback on the same line), or the `agent plan` action names.
pub fn parse_plan_key(line: &str) -> Result<PlanKey, String> {
    let line = line.trim();
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim()),
        None => (line, ""),
    };
    let key = match word.to_lowercase().replace('-', "_").as_str() {
        "a" | "approve" => PlanKey::Approve { edits: false },
        "e" | "approve_edits" => PlanKey::Approve { edits: true },
        "r" | "reject" => PlanKey::Reject {
            feedback: Some(rest.to_string()).filter(|f| !f.is_empty()),
        },
        "" => return Err("type a, e or r".to_string()),
        other => {
            return Err(format!(
                "`{other}` is not a plan answer; type a (approve), e (approve, accept edits) or r (reject)"
            ));
        }
    };
    if matches!(key, PlanKey::Approve { .. }) && !rest.is_empty() {
        // A sentence that starts with "a" is more likely a message.
        return Err("to approve, type just `a` or `e`".to_string());
    }
    Ok(key)
}

/// The options shown when a request lists none.
pub fn default_options() -> Vec<Decision> {
    Decision::ALL
        .into_iter()
        .filter(|d| *d != Decision::Background)
        .collect()
}

/// The decisions a request offers, in prompt order.
pub fn offered_decisions(options: &[i32]) -> Vec<Decision> {
    let offered: Vec<Decision> = options
        .iter()
        .filter_map(|o| PermissionDecision::try_from(*o).ok())
        .filter_map(Decision::from_proto)
        .collect();
    if offered.is_empty() {
        return default_options();
    }
    Decision::ALL
        .into_iter()
        .filter(|d| offered.contains(d))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_keys_are_understood() {
        assert_eq!(parse_plan_key("a"), Ok(PlanKey::Approve { edits: false }));
        assert_eq!(parse_plan_key(" E "), Ok(PlanKey::Approve { edits: true }));
        assert_eq!(
            parse_plan_key("approve_edits"),
            Ok(PlanKey::Approve { edits: true })
        );
        assert_eq!(parse_plan_key("r"), Ok(PlanKey::Reject { feedback: None }));
        assert_eq!(
            parse_plan_key("r keep the old API"),
            Ok(PlanKey::Reject {
                feedback: Some("keep the old API".to_string())
            })
        );
        assert!(parse_plan_key("").is_err());
        assert!(
            parse_plan_key("y")
                .unwrap_err()
                .contains("not a plan answer")
        );
        assert!(parse_plan_key("a sentence").is_err());
    }

    #[test]
    fn modes_are_named_as_typed_and_shift_tab_walks_three() {
        assert_eq!(Mode::parse(" Accept-Edits "), Ok(Mode::AcceptEdits));
        assert_eq!(Mode::parse("read_only"), Ok(Mode::ReadOnly));
        let refused = Mode::parse("yolo").unwrap_err();
        assert!(
            refused.contains("read_only, default, accept_edits, plan, bypass"),
            "{refused}"
        );
        assert_eq!(Mode::AcceptEdits.name(), "accept_edits");
        let mut mode = "default".to_string();
        let mut seen = Vec::new();
        for _ in 0..4 {
            mode = Mode::after(&mode).name();
            seen.push(mode.clone());
        }
        assert_eq!(seen, ["accept_edits", "plan", "default", "accept_edits"]);
        assert_eq!(Mode::after("bypass"), Mode::Default);
    }

    #[test]
    fn typed_answers() {
        let all = Decision::ALL.to_vec();
        let ok = |line: &str| parse_typed_answer(line, &all).unwrap();
        assert_eq!(ok("y").decision, Decision::AllowOnce);
        assert_eq!(ok(" Y ").decision, Decision::AllowOnce);
        assert_eq!(ok("a").decision, Decision::AllowAlways);
        assert_eq!(ok("n").decision, Decision::Deny);
        assert_eq!(ok("v").decision, Decision::Never);
        assert_eq!(ok("b").decision, Decision::Background);
        assert_eq!(ok("allow-always").decision, Decision::AllowAlways);
        assert_eq!(ok("deny_and_stop").feedback, None);
        assert_eq!(
            ok("s  use git mv instead "),
            TypedAnswer {
                decision: Decision::DenyAndStop,
                feedback: Some("use git mv instead".to_string()),
                project: false,
            }
        );
        // `p`: allow always, for the whole project.
        assert!(ok("p").project && ok("p").decision == Decision::AllowAlways);
        assert!(!ok("a").project);
        // Only deny-and-stop takes words after the key.
        assert_eq!(
            parse_typed_answer("yes please do it", &all).unwrap_err(),
            "to allow once, type just `y`"
        );
        assert!(parse_typed_answer("", &all).is_err());
        assert!(parse_typed_answer("x", &all).is_err());
        let no_bg = offered_decisions(&[
            PermissionDecision::AllowOnce as i32,
            PermissionDecision::Deny as i32,
        ]);
        assert_eq!(no_bg, vec![Decision::AllowOnce, Decision::Deny]);
        assert!(parse_typed_answer("b", &no_bg).is_err());
        // A request that lists nothing offers everything but background.
        assert_eq!(offered_decisions(&[]), default_options());
        assert!(parse_typed_answer("b", &[]).is_err());
        assert!(parse_typed_answer("a", &[]).is_ok());
    }
}
