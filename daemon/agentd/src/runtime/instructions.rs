//! Project instructions: the `AGENTS.md` files (the open convention;
//! `CLAUDE.md` where a directory has no `AGENTS.md`) a conversation's model
//! requests carry after the system prompt.
//!
//! They are read from the user's config directory, then from every
//! directory between the repository root (the nearest ancestor of the
//! working directory holding `.git`, else the working directory itself) and
//! the working directory, in that order: the later, the more specific. The
//! actor checks them at the start of each turn with [`stamp`] (a few
//! `stat`s) and reads them again only when a stamp changed, so the system
//! prompt's bytes stay the same from turn to turn while nothing changed
//! (prompt caching), and an edit takes effect at the next turn.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The file names read in each directory, the first that exists winning.
pub(crate) const FILE_NAMES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

/// One file the instructions came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    pub path: PathBuf,
    /// Its whole size (even when only part of it fit).
    pub bytes: u64,
}

/// The instructions a conversation's requests carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Instructions {
    /// The files used, in the order the model reads them.
    pub sources: Vec<Source>,
    /// The section added to the system prompt; empty when there is none.
    pub text: String,
    /// Whether some text was left out to stay within the limit.
    pub truncated: bool,
}

impl Instructions {
    /// The files used, as clients are told: (absolute path, size).
    pub(crate) fn files(&self) -> Vec<(String, u64)> {
        self.sources
            .iter()
            .map(|s| (s.path.display().to_string(), s.bytes))
            .collect()
    }
}

/// What the files were when last read: per file found, its path, size,
/// modification time and inode. Equal stamps mean nothing to read again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Stamp(Vec<(PathBuf, u64, i64, i64, u64)>);

/// The directories to look in, in reading order: `user_dir` (the daemon's
/// config directory), then the repository root down to `cwd`.
pub(crate) fn directories(user_dir: Option<&Path>, cwd: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = user_dir.map(Path::to_path_buf).into_iter().collect();
    let root = cwd
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(cwd);
    let mut below: Vec<PathBuf> = cwd
        .ancestors()
        .take_while(|dir| *dir != root)
        .map(Path::to_path_buf)
        .collect();
    below.push(root.to_path_buf());
    below.reverse();
    for dir in below {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// The instruction file of `dir`, if it has one.
fn file_in(dir: &Path) -> Option<(PathBuf, std::fs::Metadata)> {
    FILE_NAMES.iter().find_map(|name| {
        let path = dir.join(name);
        std::fs::metadata(&path)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| (path, m))
    })
}

/// The stamp of the instruction files in `dirs` now.
pub(crate) fn stamp(dirs: &[PathBuf]) -> Stamp {
    Stamp(
        dirs.iter()
            .filter_map(|dir| file_in(dir))
            .map(|(path, m)| (path, m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
            .collect(),
    )
}

/// Reads the instruction files in `dirs`, keeping at most `max_bytes` of
/// their text in all (0: none are read). A file that cannot be read is
/// left out and logged.
pub(crate) fn load(dirs: &[PathBuf], max_bytes: usize) -> Instructions {
    read(&stamp(dirs), max_bytes)
}

/// Reads the instruction files `stamp` found (as [`load`] does), without
/// looking for them again: the actor stamps the files at every turn and
/// reads them only when the stamp changed.
pub(crate) fn read(stamp: &Stamp, max_bytes: usize) -> Instructions {
    let mut out = Instructions::default();
    if max_bytes == 0 {
        return out;
    }
    let mut budget = max_bytes;
    let mut sections = Vec::new();
    let mut total = 0u64;
    let mut kept = 0usize;
    for (path, stamped, ..) in &stamp.0 {
        let limit = budget;
        let (text, read) = match read_at_most(path, limit) {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!("cannot read instructions {}: {e}", path.display());
                continue;
            }
        };
        // The file's size as read: what the stamp says unless it changed
        // since (then the next turn's stamp differs and it is read again).
        let len = if read < limit {
            read as u64
        } else {
            (*stamped).max(read as u64)
        };
        total += len;
        out.sources.push(Source {
            path: path.clone(),
            bytes: len,
        });
        if (read as u64) < len {
            out.truncated = true;
        }
        budget = budget.saturating_sub(read);
        kept += text.len();
        if !text.trim().is_empty() {
            sections.push(format!("## {}\n\n{}", path.display(), text.trim_end()));
        }
    }
    if sections.is_empty() && !out.truncated {
        return out;
    }
    let mut text = String::from(
        "# Project instructions\n\nFrom AGENTS.md files: the user's own first, then from the \
repository root down to the working directory (the later, the more specific). Follow them.\n\n",
    );
    text.push_str(&sections.join("\n\n"));
    if out.truncated {
        text.push_str(&format!(
            "\n\n[Instructions truncated: {kept} of {total} bytes shown (the limit is `max_bytes` \
in the [instructions] section of agentd's config).]"
        ));
    }
    out.text = text;
    out
}

/// Up to `max` bytes of the file at `path` and how many bytes were read.
/// A character cut at the end is dropped; invalid UTF-8 is replaced.
fn read_at_most(path: &Path, max: usize) -> std::io::Result<(String, usize)> {
    let mut bytes = Vec::new();
    File::open(path)?.take(max as u64).read_to_end(&mut bytes)?;
    let read = bytes.len();
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        // Only the end is wrong: a character cut by the limit.
        Err(e) if e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            String::from_utf8_lossy(&e.as_bytes()[..valid]).into_owned()
        }
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    };
    Ok((text, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn directories_run_from_the_user_dir_through_the_repository_root_to_cwd() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("repo");
        let cwd = repo.join("crates/a");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        let user = t.path().join("config");
        assert_eq!(
            directories(Some(&user), &cwd),
            vec![user.clone(), repo.clone(), repo.join("crates"), cwd.clone()]
        );
        // No repository: the working directory alone.
        let plain = t.path().join("plain/dir");
        std::fs::create_dir_all(&plain).unwrap();
        assert_eq!(directories(None, &plain), vec![plain.clone()]);
    }

    #[test]
    fn files_are_read_in_order_claude_md_only_where_agents_md_is_missing() {
        let t = tempfile::tempdir().unwrap();
        let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
        write(&a.join("AGENTS.md"), "use tabs\n");
        write(&a.join("CLAUDE.md"), "ignored: AGENTS.md wins\n");
        write(&b.join("CLAUDE.md"), "run cargo test\n");
        std::fs::create_dir_all(&c).unwrap();
        let got = load(&[a.clone(), b.clone(), c], 32 * 1024);
        assert_eq!(
            got.sources,
            vec![
                Source {
                    path: a.join("AGENTS.md"),
                    bytes: 9
                },
                Source {
                    path: b.join("CLAUDE.md"),
                    bytes: 15
                },
            ]
        );
        assert!(!got.truncated);
        let first = got.text.find("use tabs").unwrap();
        let second = got.text.find("run cargo test").unwrap();
        assert!(first < second, "{}", got.text);
        assert!(
            got.text
                .contains(&format!("## {}\n\nuse tabs", a.join("AGENTS.md").display()))
        );
        assert!(!got.text.contains("ignored"));
    }

    #[test]
    fn the_limit_cuts_the_text_and_says_so() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        write(&a.join("AGENTS.md"), &"x".repeat(80));
        write(&b.join("AGENTS.md"), &format!("{}é", "y".repeat(40)));
        let got = load(&[a, b], 100);
        assert!(got.truncated);
        assert_eq!(got.sources.len(), 2);
        assert!(got.text.contains(&"x".repeat(80)));
        assert!(got.text.contains(&"y".repeat(20)), "{}", got.text);
        assert!(!got.text.contains(&"y".repeat(21)), "{}", got.text);
        assert!(
            got.text.ends_with("[Instructions truncated: 100 of 122 bytes shown (the limit is `max_bytes` in the [instructions] section of agentd's config).]"),
            "{}",
            got.text
        );
        // A limit inside a character keeps the text valid and shorter.
        let t2 = tempfile::tempdir().unwrap();
        write(&t2.path().join("AGENTS.md"), "aé");
        let cut = load(&[t2.path().to_path_buf()], 2);
        assert!(
            cut.text.contains("\n\na\n\n[Instructions truncated"),
            "{}",
            cut.text
        );
        assert_eq!(load(&[t2.path().to_path_buf()], 0), Instructions::default());
    }

    #[test]
    fn a_stamp_changes_when_a_file_does() {
        let t = tempfile::tempdir().unwrap();
        let dirs = vec![t.path().to_path_buf()];
        let empty = stamp(&dirs);
        write(&t.path().join("AGENTS.md"), "one");
        let one = stamp(&dirs);
        assert_ne!(empty, one);
        assert_eq!(one, stamp(&dirs));
        write(&t.path().join("AGENTS.md"), "two, longer");
        assert_ne!(one, stamp(&dirs));
    }

    #[test]
    fn files_are_read_as_they_are_when_they_changed_after_the_stamp() {
        let t = tempfile::tempdir().unwrap();
        let dirs = vec![t.path().to_path_buf()];
        let file = t.path().join("AGENTS.md");
        write(&file, &"long ".repeat(20));
        let stamped = stamp(&dirs);
        // Shorter now than stamped: its text as it is, not "truncated".
        write(&file, "short");
        let got = read(&stamped, 1000);
        assert!(got.text.ends_with("\n\nshort"), "{}", got.text);
        assert!(!got.truncated);
        assert_eq!(got.sources[0].bytes, 5);
        // Gone now: left out (and logged).
        std::fs::remove_file(&file).unwrap();
        assert_eq!(read(&stamped, 1000), Instructions::default());
    }
}
