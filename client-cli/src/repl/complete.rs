//! Tab completion in the session's editor: slash commands at the start of
//! a line (the built-in ones of [`SlashCommand::ALL`], then prompt files), and paths (from the session's directory, `~/` from home) for the
//! word under the cursor — directories only after `/add-dir`.

use std::path::{Path, PathBuf};

use reedline::{Completer, CompletionResult, Span, Suggestion};

use crate::slash_command::SlashCommand;

/// Entries of one directory looked at, at most (a huge directory must not
/// stall the terminal).
const MAX_ENTRIES: usize = 2_000;
/// Suggestions offered at most.
const MAX_SUGGESTIONS: usize = 200;

/// The editor's completer.
pub struct Complete {
    cwd: PathBuf,
    home: Option<PathBuf>,
}

impl Complete {
    pub fn new(cwd: PathBuf) -> Complete {
        Complete {
            cwd,
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }
}

impl Completer for Complete {
    fn complete(&mut self, line: &str, pos: usize) -> CompletionResult {
        let mut found = suggestions(line, pos, &self.cwd, self.home.as_deref());
        if line.starts_with('/') {
            found.extend(prompt_suggestions(line, pos, &super::prompt_commands()));
        }
        CompletionResult::fresh(found)
    }
}

/// Prompt files whose name starts with what follows the `/` being typed.
fn prompt_suggestions(
    line: &str,
    pos: usize,
    prompts: &[super::prompts::PromptCommand],
) -> Vec<Suggestion> {
    let Some(typed) = line.get(..pos).and_then(|b| b.strip_prefix('/')) else {
        return Vec::new();
    };
    if typed.contains(char::is_whitespace) {
        return Vec::new();
    }
    prompts
        .iter()
        .filter(|p| p.name.starts_with(typed))
        .map(|p| Suggestion {
            value: format!("/{}", p.name),
            description: Some(p.description.clone()),
            span: Span::new(0, pos),
            append_whitespace: true,
            ..Suggestion::default()
        })
        .collect()
}

/// What Tab offers for `line` with the cursor at byte `pos`.
pub fn suggestions(line: &str, pos: usize, cwd: &Path, home: Option<&Path>) -> Vec<Suggestion> {
    let Some(before) = line.get(..pos) else {
        return Vec::new();
    };
    if let Some(typed) = before.strip_prefix('/')
        && !typed.contains(char::is_whitespace)
    {
        return SlashCommand::ALL
            .iter()
            .filter(|c| c.name().starts_with(typed))
            .map(|c| Suggestion {
                value: format!("/{}", c.name()),
                display_override: Some(c.synopsis()),
                description: Some(c.help().to_string()),
                span: Span::new(0, pos),
                append_whitespace: !c.args().is_empty(),
                ..Suggestion::default()
            })
            .collect();
    }
    let start = before.rfind(char::is_whitespace).map_or(0, |i| {
        i + before[i..].chars().next().map_or(1, char::len_utf8)
    });
    let word = &before[start..];
    if word.is_empty() {
        return Vec::new();
    }
    let dirs_only = before.starts_with("/add-dir ");
    paths(word, cwd, home, dirs_only)
        .into_iter()
        .map(|(value, is_dir)| Suggestion {
            value,
            span: Span::new(start, pos),
            append_whitespace: !is_dir,
            ..Suggestion::default()
        })
        .collect()
}

/// Completions of the path `word` (its last component completed, the rest
/// kept as typed): each with whether it is a directory (which ends in `/`).
fn paths(word: &str, cwd: &Path, home: Option<&Path>, dirs_only: bool) -> Vec<(String, bool)> {
    // `@src/ma` mentions a file: the `@` stays.
    let (mention, path) = match word.strip_prefix('@') {
        Some(rest) => ("@", rest),
        None => ("", word),
    };
    let (dir_part, prefix) = match path.rfind('/') {
        Some(i) => (&path[..=i], &path[i + 1..]),
        None => ("", path),
    };
    let dir = if let Some(rest) = dir_part.strip_prefix("~/") {
        match home {
            Some(home) => home.join(rest),
            None => return Vec::new(),
        }
    } else if dir_part.starts_with('/') {
        PathBuf::from(dir_part)
    } else {
        cwd.join(dir_part)
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, bool)> = entries
        .take(MAX_ENTRIES)
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if !name.starts_with(prefix) || (name.starts_with('.') && !prefix.starts_with('.')) {
                return None;
            }
            // Followed through symbolic links, as the tools follow them.
            let is_dir = entry.path().is_dir();
            if dirs_only && !is_dir {
                return None;
            }
            let slash = if is_dir { "/" } else { "" };
            Some((format!("{mention}{dir_part}{name}{slash}"), is_dir))
        })
        .collect();
    found.sort();
    found.truncate(MAX_SUGGESTIONS);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(s: &[Suggestion]) -> Vec<&str> {
        s.iter().map(|s| s.value.as_str()).collect()
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/bin")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), "").unwrap();
        std::fs::write(dir.path().join("src/mod.rs"), "").unwrap();
        std::fs::write(dir.path().join("README.md"), "").unwrap();
        std::fs::write(dir.path().join(".hidden"), "").unwrap();
        dir
    }

    #[test]
    fn a_slash_at_the_start_offers_the_commands_that_match() {
        let s = suggestions("/mo", 3, Path::new("/"), None);
        assert_eq!(values(&s), ["/mode", "/model"]);
        assert_eq!(s[0].span, Span::new(0, 3));
        assert!(s[0].append_whitespace, "a command with arguments");
        assert_eq!(s[0].description.as_deref(), Some(SlashCommand::Mode.help()));
        let s = suggestions("/exi", 4, Path::new("/"), None);
        assert!(!s[0].append_whitespace, "nothing follows /exit");
    }

    /// What Tab offers after a lone `/`, in order, as the menu shows it:
    /// the pin that keeps the session's table as it was.
    #[test]
    fn a_lone_slash_offers_every_session_command_in_its_order() {
        let s = suggestions("/", 1, Path::new("/"), None);
        let shown: Vec<(&str, &str, bool)> = s
            .iter()
            .map(|s| {
                (
                    s.display_override.as_deref().unwrap_or_default(),
                    s.value.as_str(),
                    s.append_whitespace,
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("/help", "/help", false),
                ("/cost", "/cost", false),
                ("/shells", "/shells", false),
                ("/expand", "/expand", false),
                ("/mode [MODE]", "/mode", true),
                ("/model [NAME]", "/model", true),
                ("/think [LEVEL]", "/think", true),
                ("/add-dir DIR", "/add-dir", true),
                ("/env", "/env", false),
                ("/init", "/init", false),
                ("/budget raise [AMOUNT] | stop", "/budget", true),
                ("/image PATH", "/image", true),
                ("/compact", "/compact", false),
                ("/continue", "/continue", false),
                (
                    "/rewind [MESSAGE] [code|conversation|both] [force]",
                    "/rewind",
                    true
                ),
                ("/attach ID", "/attach", true),
                ("/clear", "/clear", false),
                ("/exit", "/exit", false),
            ]
        );
        assert_eq!(
            s[4].description.as_deref(),
            Some("show or change the permission mode; Shift-Tab: the next one")
        );
    }

    #[test]
    fn every_command_completes_from_its_whole_name() {
        for &c in SlashCommand::ALL {
            let line = format!("/{}", c.name());
            let s = suggestions(&line, line.len(), Path::new("/"), None);
            assert!(values(&s).contains(&line.as_str()), "{line}");
        }
    }

    #[test]
    fn the_word_under_the_cursor_completes_as_a_path() {
        let dir = tree();
        let s = suggestions("look at src/m", 13, dir.path(), None);
        assert_eq!(values(&s), ["src/main.rs", "src/mod.rs"]);
        assert_eq!(s[0].span, Span::new(8, 13));
        let s = suggestions("read @s", 7, dir.path(), None);
        assert_eq!(values(&s), ["@src/"]);
        assert!(!s[0].append_whitespace, "a directory goes on");
        // Hidden files only when asked for.
        let s = suggestions("x ", 2, dir.path(), None);
        assert!(s.is_empty(), "nothing typed, nothing offered");
        let s = suggestions(".h", 2, dir.path(), None);
        assert_eq!(values(&s), [".hidden"]);
        let s = suggestions("R", 1, dir.path(), None);
        assert_eq!(values(&s), ["README.md"]);
    }

    #[test]
    fn add_dir_offers_directories_and_home_is_tilde() {
        let dir = tree();
        let s = suggestions("/add-dir src/", 13, dir.path(), None);
        assert_eq!(values(&s), ["src/bin/"]);
        let s = suggestions("~/s", 3, Path::new("/"), Some(dir.path()));
        assert_eq!(values(&s), ["~/src/"]);
        let s = suggestions("~/s", 3, Path::new("/"), None);
        assert!(s.is_empty());
    }

    #[test]
    fn prompt_files_complete_after_a_slash() {
        let prompts = [super::super::prompts::PromptCommand {
            name: "review".into(),
            description: "review the diff".into(),
            body: "Review.".into(),
            path: PathBuf::from("/x/review.md"),
        }];
        let s = prompt_suggestions("/re", 3, &prompts);
        assert_eq!(values(&s), ["/review"]);
        assert_eq!(s[0].description.as_deref(), Some("review the diff"));
        assert!(prompt_suggestions("/review x", 9, &prompts).is_empty());
        assert!(prompt_suggestions("re", 2, &prompts).is_empty());
    }

    #[test]
    fn a_cursor_off_a_character_boundary_or_a_missing_directory_offers_nothing() {
        let dir = tree();
        assert!(suggestions("é", 1, dir.path(), None).is_empty());
        assert!(suggestions("nope/x", 6, dir.path(), None).is_empty());
        let s = suggestions("voilà src/ma", "voilà src/ma".len(), dir.path(), None);
        assert_eq!(values(&s), ["src/main.rs"]);
    }
}
