//! The interactive session's slash commands (`/mode`, `/rewind`, …): one
//! enum, one parser and one table, which `/help`, Tab completion, the
//! names a prompt file may not take and both dispatchers read.
//!
//! The table is the enum's declaration: a row makes the variant, its place
//! in [`SlashCommand::ALL`] and its names and help together, so none can be
//! forgotten. A new row then fails to compile until `Session::slash`
//! (`session/slash.rs`) has its arm.

/// How a command is typed and explained.
struct Spec {
    name: &'static str,
    aliases: &'static [&'static str],
    args: &'static str,
    help: &'static str,
}

/// Declares [`SlashCommand`], [`SlashCommand::ALL`] and the command's
/// [`Spec`] from one row a command.
macro_rules! slash_commands {
    ($($variant:ident: $name:literal $(| $alias:literal)*, $args:literal, $help:literal;)+) => {
        /// A built-in slash command of the interactive session.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum SlashCommand {
            $($variant,)+
        }

        impl SlashCommand {
            /// Every command once, in the order `/help` and Tab list them.
            pub(crate) const ALL: &[SlashCommand] = &[$(SlashCommand::$variant,)+];

            const fn spec(self) -> Spec {
                match self {
                    $(SlashCommand::$variant => Spec {
                        name: $name,
                        aliases: &[$($alias),*],
                        args: $args,
                        help: $help,
                    },)+
                }
            }
        }
    };
}

// Variant: "name" | "alias"…, "argument synopsis" ("" when none), "help".
slash_commands! {
    Help: "help" | "?", "", "this list";
    Cost: "cost" | "usage", "", "tokens and cost of this conversation";
    Shells: "shells", "", "the background shells of this conversation";
    Expand: "expand" | "output", "", "the last tool result whole (also Ctrl-O)";
    Mode: "mode", "[MODE]", "show or change the permission mode; Shift-Tab: the next one";
    Model: "model", "[NAME]", "show or change the model of the next requests";
    Think: "think", "[LEVEL]",
        "thinking of your next messages: on, off, a token budget, low|medium|high, default";
    AddDir: "add-dir", "DIR", "let the tools reach DIR too (as the working directory)";
    Env: "env", "", "run the next commands in this terminal's environment as it is now";
    Init: "init", "", "ask the agent to write an AGENTS.md for this project";
    Budget: "budget", "raise [AMOUNT] | stop",
        "answer a reached budget: raise it (default: by the budget again) or stop the turn";
    Image: "image", "PATH", "attach an image (PNG, JPEG, GIF, WebP) to your next message";
    Compact: "compact", "", "summarise the conversation now and end it (then /continue)";
    Continue: "continue", "", "go on in a new conversation seeded with the summary";
    Rewind: "rewind", "[MESSAGE] [code|conversation|both] [force]",
        "undo the agent's file changes since a message (default: the last turn that changed any), or fork before it";
    Attach: "attach", "ID", "go to another conversation (agent ls lists them)";
    Clear: "clear" | "new", "", "start a new conversation in this directory";
    Exit: "exit" | "quit", "", "leave (the conversation stays in the daemon: agent -c)";
}

/// A name typed after `/` that is no built-in command: perhaps a prompt
/// file's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unknown<'a> {
    pub(crate) name: &'a str,
    /// What follows the name, trimmed.
    pub(crate) args: &'a str,
}

impl SlashCommand {
    /// The command and its arguments (trimmed) in `line`, what was typed
    /// after the `/`; a name is matched whole, by its name or an alias.
    pub(crate) fn parse(line: &str) -> Result<(SlashCommand, &str), Unknown<'_>> {
        let (name, args) = split(line);
        Self::ALL
            .iter()
            .find(|c| c.spellings().any(|s| s == name))
            .map(|c| (*c, args))
            .ok_or(Unknown { name, args })
    }

    /// The name `/help` and Tab show.
    pub(crate) const fn name(self) -> &'static str {
        self.spec().name
    }

    /// What follows the name ("" when nothing), e.g. `[MODE]`.
    pub(crate) const fn args(self) -> &'static str {
        self.spec().args
    }

    /// The command in one line.
    pub(crate) const fn help(self) -> &'static str {
        self.spec().help
    }

    /// `/name ARGS`, as `/help` and the Tab menu show it.
    pub(crate) fn synopsis(self) -> String {
        format!("/{} {}", self.name(), self.args())
            .trim_end()
            .to_string()
    }

    /// Its name, then its aliases.
    pub(crate) fn spellings(self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.name()).chain(self.spec().aliases.iter().copied())
    }

    /// Every name and alias: a prompt file cannot take one.
    pub(crate) fn reserved() -> impl Iterator<Item = &'static str> {
        Self::ALL.iter().flat_map(|c| c.spellings())
    }
}

/// The name typed after the `/` and what follows it (trimmed).
pub(crate) fn split(line: &str) -> (&str, &str) {
    match line.split_once(char::is_whitespace) {
        Some((name, args)) => (name, args.trim()),
        None => (line, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_and_alias_parses_back_to_its_command() {
        for &c in SlashCommand::ALL {
            for spelling in c.spellings() {
                assert_eq!(SlashCommand::parse(spelling), Ok((c, "")), "/{spelling}");
                let line = format!("{spelling}  some args ");
                assert_eq!(SlashCommand::parse(&line), Ok((c, "some args")), "{line}");
            }
        }
    }

    #[test]
    fn no_two_commands_share_a_spelling_and_each_is_listed_once() {
        let all: Vec<&str> = SlashCommand::reserved().collect();
        for (i, s) in all.iter().enumerate() {
            assert!(!all[i + 1..].contains(s), "/{s} twice");
        }
        for (i, c) in SlashCommand::ALL.iter().enumerate() {
            assert!(!SlashCommand::ALL[i + 1..].contains(c), "{c:?} twice");
        }
    }

    #[test]
    fn an_unknown_name_comes_back_with_its_arguments() {
        assert_eq!(
            SlashCommand::parse("review src/lib.rs "),
            Err(Unknown {
                name: "review",
                args: "src/lib.rs"
            })
        );
        // A prefix is not the command: Tab completes it, Enter does not.
        assert!(SlashCommand::parse("mod plan").is_err());
        assert!(SlashCommand::parse("").is_err());
        assert_eq!(
            SlashCommand::parse(" mode"),
            Err(Unknown {
                name: "",
                args: "mode"
            })
        );
    }

    #[test]
    fn the_synopsis_has_no_trailing_space() {
        assert_eq!(SlashCommand::Help.synopsis(), "/help");
        assert_eq!(SlashCommand::Mode.synopsis(), "/mode [MODE]");
    }
}
