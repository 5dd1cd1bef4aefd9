//! File changes as values: what write, edit and patch compute before they
//! touch the disk.
//!
//! Planning a change and applying it are separate steps so that the same
//! plan serves the permission prompt's preview (never applied) and the real
//! run, and so that a multi-file patch can be checked completely before the
//! first byte is written.

use std::path::PathBuf;

use similar::{ChangeTag, TextDiff};

use super::{ToolContext, ToolError, paths};

/// One file's planned change. `old == None` creates the file, `new == None`
/// deletes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileChange {
    pub(crate) path: PathBuf,
    pub(crate) old: Option<String>,
    pub(crate) new: Option<String>,
}

impl FileChange {
    /// Lines added and removed.
    pub(crate) fn stats(&self) -> (usize, usize) {
        let old = self.old.as_deref().unwrap_or("");
        let new = self.new.as_deref().unwrap_or("");
        let diff = TextDiff::from_lines(old, new);
        let mut added = 0;
        let mut removed = 0;
        for change in diff.iter_all_changes() {
            match change.tag() {
                ChangeTag::Insert => added += 1,
                ChangeTag::Delete => removed += 1,
                ChangeTag::Equal => {}
            }
        }
        (added, removed)
    }

    /// The change as a unified diff with git-style `a/` `b/` headers.
    pub(crate) fn unified(&self, ctx: &ToolContext) -> String {
        let shown = paths::display(ctx, &self.path);
        let a = if self.old.is_some() {
            format!("a/{shown}")
        } else {
            "/dev/null".to_string()
        };
        let b = if self.new.is_some() {
            format!("b/{shown}")
        } else {
            "/dev/null".to_string()
        };
        let old = self.old.as_deref().unwrap_or("");
        let new = self.new.as_deref().unwrap_or("");
        let diff = TextDiff::from_lines(old, new);
        let body = diff
            .unified_diff()
            .context_radius(3)
            .header(&a, &b)
            .to_string();
        if body.is_empty() {
            // Creating an empty file (or an unchanged one) has no hunks; the
            // header still tells a reviewer what happens.
            format!("--- {a}\n+++ {b}\n")
        } else {
            body
        }
    }

    /// "src/a.rs (+3 -1)", "new.rs (new, 12 lines)", "old.rs (deleted)".
    pub(crate) fn describe(&self, ctx: &ToolContext) -> String {
        let shown = paths::display(ctx, &self.path);
        let (added, removed) = self.stats();
        match (&self.old, &self.new) {
            (None, _) => format!("{shown} (new, {added} lines)"),
            (_, None) => format!("{shown} (deleted)"),
            _ => format!("{shown} (+{added} -{removed})"),
        }
    }
}

/// All changes as one diff, in order.
pub(crate) fn unified_all(changes: &[FileChange], ctx: &ToolContext) -> String {
    changes.iter().map(|c| c.unified(ctx)).collect()
}

/// Applies every change, or none: if one write fails, the files already
/// written are put back the way they were.
pub(crate) fn apply(changes: &[FileChange], ctx: &ToolContext) -> Result<(), ToolError> {
    for (i, change) in changes.iter().enumerate() {
        if let Err(e) = apply_one(change) {
            let mut message = format!("cannot write {}: {e}", paths::display(ctx, &change.path));
            for done in changes[..i].iter().rev() {
                let undo = FileChange {
                    path: done.path.clone(),
                    old: done.new.clone(),
                    new: done.old.clone(),
                };
                if let Err(e) = apply_one(&undo) {
                    message.push_str(&format!(
                        "; restoring {} also failed: {e}",
                        paths::display(ctx, &done.path)
                    ));
                }
            }
            if i > 0 {
                message.push_str("; the files changed before the failure were restored");
            }
            return Err(ToolError::new(message));
        }
    }
    Ok(())
}

fn apply_one(change: &FileChange) -> std::io::Result<()> {
    match &change.new {
        Some(content) => {
            if let Some(parent) = change.path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&change.path, content)
        }
        None => match std::fs::remove_file(&change.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        },
    }
}

/// Reads a file the tools are about to change. Text only: these tools
/// replace strings and lines, which means nothing in a binary file.
pub(crate) fn read_text(
    ctx: &ToolContext,
    path: &std::path::Path,
) -> Result<Option<String>, ToolError> {
    let shown = paths::display(ctx, path);
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| ToolError::new(format!("{shown} is not a UTF-8 text file"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if path.is_dir() => Err(ToolError::new(format!("{shown} is a directory: {e}"))),
        Err(e) => Err(ToolError::new(format!("cannot read {shown}: {e}"))),
    }
}
