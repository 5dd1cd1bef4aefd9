//! Slash commands people write themselves: prompt files.
//!
//! `/NAME args` sends the text of `NAME.md`, found in the user's
//! `<config dir>/commands/` and in the `.agentd/commands/` of each directory
//! from the repository root (the nearest `.git` above) down to the session's
//! directory — a nearer file overrides a farther one of the same name.
//! `$ARGUMENTS` in the text is replaced by what follows the name (without
//! it, the arguments are appended). An optional front matter (`---` lines)
//! may give a `description:` for `/help` and Tab; without one the first
//! line of the text is the description. A prompt file only becomes a
//! message someone chose to send: it runs nothing.

use std::path::{Path, PathBuf};

/// The largest prompt file read.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Prompt files read from one directory, at most.
const MAX_FILES: usize = 200;
/// The longest description shown.
const MAX_DESCRIPTION_CHARS: usize = 80;

/// A prompt file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptCommand {
    pub name: String,
    pub description: String,
    pub body: String,
    pub path: PathBuf,
}

impl PromptCommand {
    /// The message `/NAME args` sends.
    pub fn expand(&self, args: &str) -> String {
        let args = args.trim();
        if self.body.contains("$ARGUMENTS") {
            self.body.replace("$ARGUMENTS", args)
        } else if args.is_empty() {
            self.body.clone()
        } else {
            format!("{}\n\n{args}", self.body.trim_end())
        }
    }
}

/// The directories prompt files are read from, farthest first.
pub fn directories(user_dir: Option<&Path>, cwd: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = user_dir.map(|d| d.join("commands")).into_iter().collect();
    let root = cwd
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(cwd);
    let mut below: Vec<&Path> = cwd.ancestors().take_while(|dir| *dir != root).collect();
    below.push(root);
    dirs.extend(below.iter().rev().map(|d| d.join(".agentd/commands")));
    dirs
}

/// The prompt files of `dirs` (farthest first), by name; those named as a
/// built-in command (`reserved`) are left out.
pub fn load(dirs: &[PathBuf], reserved: &[&str]) -> Vec<PromptCommand> {
    let mut found: Vec<PromptCommand> = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .take(MAX_FILES * 4)
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        files.sort();
        for path in files.into_iter().take(MAX_FILES) {
            let Some(command) = read(&path) else {
                continue;
            };
            if reserved.contains(&command.name.as_str()) {
                continue;
            }
            found.retain(|c| c.name != command.name);
            found.push(command);
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// One prompt file, when its name is a command name and it reads as text.
fn read(path: &Path) -> Option<PromptCommand> {
    let name = path.file_stem()?.to_str()?.to_string();
    let valid = !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        return None;
    }
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let (description, body) = split_front_matter(&text);
    let body = body.trim().to_string();
    if body.is_empty() {
        return None;
    }
    let description = description
        .or_else(|| {
            body.lines()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_default();
    let description: String = description
        .trim()
        .trim_start_matches('#')
        .trim()
        .chars()
        .take(MAX_DESCRIPTION_CHARS)
        .collect();
    Some(PromptCommand {
        name,
        description,
        body,
        path: path.to_path_buf(),
    })
}

/// The `description:` of a leading `---` block, and the text after it.
fn split_front_matter(text: &str) -> (Option<String>, &str) {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (None, text);
    };
    let Some(end) = rest.find("\n---") else {
        return (None, text);
    };
    let header = &rest[..end];
    let after = &rest[end + 4..];
    let body = after
        .strip_prefix("\r\n")
        .or_else(|| after.strip_prefix('\n'))
        .unwrap_or(after);
    let description = header.lines().find_map(|l| {
        l.strip_prefix("description:")
            .map(|d| d.trim().trim_matches('"').to_string())
    });
    (description, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn nearer_files_override_farther_ones_and_builtins_win() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        let sub = repo.join("crates/core");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(&sub).unwrap();
        let user = root.path().join("config");
        write(&user.join("commands"), "review.md", "Review the diff.\n");
        write(&user.join("commands"), "mine.md", "Mine.\n");
        write(
            &repo.join(".agentd/commands"),
            "review.md",
            "---\ndescription: \"review this repo\"\n---\nReview $ARGUMENTS carefully.\n",
        );
        write(
            &sub.join(".agentd/commands"),
            "test.md",
            "# Run the tests\n\ncargo test\n",
        );
        write(
            &sub.join(".agentd/commands"),
            "help.md",
            "shadowing a builtin\n",
        );
        write(&sub.join(".agentd/commands"), "Bad Name.md", "x\n");
        write(&sub.join(".agentd/commands"), "empty.md", "   \n");
        write(&sub.join(".agentd/commands"), "notes.txt", "not markdown\n");

        let dirs = directories(Some(&user), &sub);
        assert_eq!(
            dirs,
            [
                user.join("commands"),
                repo.join(".agentd/commands"),
                repo.join("crates/.agentd/commands"),
                sub.join(".agentd/commands"),
            ]
        );
        let found = load(&dirs, &["help"]);
        let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["mine", "review", "test"]);
        let review = &found[1];
        assert_eq!(review.description, "review this repo");
        assert_eq!(
            review.expand(" src/lib.rs "),
            "Review src/lib.rs carefully."
        );
        let test = &found[2];
        assert_eq!(test.description, "Run the tests");
        assert_eq!(test.expand(""), "# Run the tests\n\ncargo test");
        assert_eq!(
            test.expand("only core"),
            "# Run the tests\n\ncargo test\n\nonly core"
        );
    }

    #[test]
    fn an_unclosed_front_matter_is_text() {
        let (description, body) = split_front_matter("---\ndescription: x\nno end");
        assert_eq!(description, None);
        assert_eq!(body, "---\ndescription: x\nno end");
    }
}
