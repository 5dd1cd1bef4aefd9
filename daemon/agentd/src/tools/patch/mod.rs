//! `patch`: apply a unified diff to any number of files, all or nothing.
//!
//! Patches written by a model are rarely byte-perfect: hunk line numbers
//! drift, counts are off, blank context lines lose their leading space,
//! trailing whitespace differs. The parser therefore ignores hunk counts and
//! reads each hunk up to the next header, and a hunk is placed by its
//! content, searched near the line it names (then, if it is unique, anywhere
//! after the previous hunk). What is never relaxed is that the context and
//! removed lines must be in the file: a patch that does not fit is refused
//! whole, and the error shows what the file really holds at that spot.

use std::path::PathBuf;

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use serde::Deserialize;
use serde_json::{Value, json};

mod parse;

pub(crate) use parse::touched_files;

use super::diff::{self, FileChange};
use super::{ToolContext, ToolError, ToolOutput, input, paths};
use parse::{FilePatch, Hunk, parse};

/// How far from its stated line a hunk is looked for first.
const NEAR_LINES: usize = 64;
/// Lines quoted from the patch and the file when a hunk does not apply.
const QUOTE_LINES: usize = 12;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    patch: String,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"patch": {"type": "string"}},
        "required": ["patch"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::Patch.name().to_string(),
        description: "Apply a unified diff to one or more files: `--- a/path`, `+++ b/path`, then \
                      `@@ -l,c +l,c @@` hunks with 3 lines of context. `--- /dev/null` creates a \
                      file, `+++ /dev/null` deletes one. Nothing changes unless every hunk applies."
            .to_string(),
        input_schema: schema(),
    }
}

/// The changes a patch would make.
pub(crate) fn plan(input: Value, ctx: &ToolContext) -> Result<Vec<FileChange>, ToolError> {
    let input: Input = input::parse(Tool::Patch.name(), &schema(), input)?;
    let files = parse(&input.patch).map_err(|e| ToolError::new(format!("patch: {e}")))?;
    if files.is_empty() {
        return Err(ToolError::new(
            "patch: no file headers found; each file needs a `--- a/path` line and a `+++ b/path` \
             line before its `@@` hunks",
        ));
    }
    let mut changes: Vec<FileChange> = Vec::new();
    for file in &files {
        plan_file(file, ctx, &mut changes).map_err(|e| {
            // The signal goes before the last line, which says that
            // nothing changed, as it always has.
            let e = if e.0.contains(HUNK_NOT_FOUND) {
                let signal = edit_instead(file.label(), &e.0);
                e.with_correction(&signal)
            } else {
                e
            };
            ToolError::new(format!("{}\nNo files were changed.", e.0))
        })?;
    }
    Ok(changes)
}

/// The content of `path` as planned so far, or as on disk.
fn current(
    ctx: &ToolContext,
    changes: &[FileChange],
    path: &PathBuf,
) -> Result<Option<String>, ToolError> {
    match changes.iter().find(|c| &c.path == path) {
        Some(change) => Ok(change.new.clone()),
        None => diff::read_text(ctx, path),
    }
}

fn set(
    changes: &mut Vec<FileChange>,
    path: PathBuf,
    original: Option<String>,
    new: Option<String>,
) {
    match changes.iter_mut().find(|c| c.path == path) {
        Some(change) => change.new = new,
        None => changes.push(FileChange {
            path,
            old: original,
            new,
        }),
    }
}

fn plan_file(
    file: &FilePatch,
    ctx: &ToolContext,
    changes: &mut Vec<FileChange>,
) -> Result<(), ToolError> {
    match (&file.old, &file.new) {
        (None, None) => Err(ToolError::new(
            "patch: a file section has /dev/null on both sides",
        )),
        (None, Some(new)) => {
            let path = paths::resolve(ctx, new)?;
            let shown = paths::display(ctx, &path);
            let existing = current(ctx, changes, &path)?;
            if existing.as_deref().is_some_and(|c| !c.is_empty()) {
                return Err(ToolError::new(format!(
                    "patch: {shown} already exists, but the patch creates it (`--- /dev/null`); \
                     patch it against its current content instead"
                )));
            }
            let content = apply_hunks("", &file.hunks, &shown)?;
            let original = original_of(ctx, changes, &path)?;
            set(changes, path, original, Some(content));
            Ok(())
        }
        (Some(old), None) => {
            let path = paths::resolve(ctx, old)?;
            let shown = paths::display(ctx, &path);
            let Some(content) = current(ctx, changes, &path)? else {
                return Err(ToolError::new(format!(
                    "patch: cannot delete {shown}: file not found"
                )));
            };
            let rest = apply_hunks(&content, &file.hunks, &shown)?;
            if !file.hunks.is_empty() && !rest.trim().is_empty() {
                return Err(ToolError::new(format!(
                    "patch: the deletion of {shown} does not remove all of its lines; list every \
                     line as removed (or delete the file with bash)"
                )));
            }
            let original = original_of(ctx, changes, &path)?;
            set(changes, path, original, None);
            Ok(())
        }
        (Some(old), Some(new)) => {
            let src = paths::resolve(ctx, old)?;
            let dst = paths::resolve(ctx, new)?;
            let shown = paths::display(ctx, &src);
            if file.hunks.is_empty() && src == dst {
                return Err(ToolError::new(format!(
                    "patch: the section for {shown} has no hunks"
                )));
            }
            let Some(content) = current(ctx, changes, &src)? else {
                return Err(ToolError::new(format!(
                    "patch: file not found: {shown} (to create a file, use `--- /dev/null`)"
                )));
            };
            let patched = apply_hunks(&content, &file.hunks, &shown)?;
            if src != dst {
                if current(ctx, changes, &dst)?.is_some() {
                    return Err(ToolError::new(format!(
                        "patch: cannot rename {shown} to {}: it already exists",
                        paths::display(ctx, &dst)
                    )));
                }
                let original = original_of(ctx, changes, &src)?;
                set(changes, src, original, None);
                let original = original_of(ctx, changes, &dst)?;
                set(changes, dst, original, Some(patched));
            } else {
                let original = original_of(ctx, changes, &src)?;
                set(changes, src, original, Some(patched));
            }
            Ok(())
        }
    }
}

/// The content a path had before this patch, for the diff and rollback.
fn original_of(
    ctx: &ToolContext,
    changes: &[FileChange],
    path: &PathBuf,
) -> Result<Option<String>, ToolError> {
    match changes.iter().find(|c| &c.path == path) {
        Some(change) => Ok(change.old.clone()),
        None => diff::read_text(ctx, path),
    }
}

/// Applies hunks in order to `content`.
fn apply_hunks(content: &str, hunks: &[Hunk], shown: &str) -> Result<String, ToolError> {
    let crlf = content
        .split('\n')
        .next()
        .is_some_and(|first| first.ends_with('\r'))
        && content.contains('\n');
    let mut eof_newline = content.is_empty() || content.ends_with('\n');
    let lines: Vec<&str> = content.lines().collect();
    let mut result: Vec<String> = Vec::with_capacity(lines.len());
    let mut cursor = 0;
    for (n, hunk) in hunks.iter().enumerate() {
        let old = hunk.old_lines();
        let new = hunk.new_lines();
        let expected = match hunk.old_start {
            Some(start) if old.is_empty() => start,
            Some(start) => start.saturating_sub(1),
            None => cursor,
        }
        .clamp(cursor, lines.len());
        let Some(pos) = locate(&lines, &old, expected, cursor) else {
            return Err(hunk_error(
                shown,
                n,
                hunks.len(),
                hunk,
                &lines,
                expected,
                cursor,
            ));
        };
        result.extend(lines[cursor..pos].iter().map(|s| s.to_string()));
        result.extend(new.iter().map(|s| s.to_string()));
        cursor = pos + old.len();
        if cursor == lines.len() && (hunk.old_no_eol || hunk.new_no_eol) {
            eof_newline = !hunk.new_no_eol;
        }
    }
    result.extend(lines[cursor..].iter().map(|s| s.to_string()));
    let terminator = if crlf { "\r\n" } else { "\n" };
    let mut out = result.join(terminator);
    if eof_newline && !result.is_empty() {
        out.push_str(terminator);
    }
    Ok(out)
}

/// Where `needle` sits in `lines` at or after `from`: the nearest exact
/// match to `expected`, then the nearest match ignoring trailing whitespace,
/// then a unique match anywhere after `from`.
fn locate(lines: &[&str], needle: &[&str], expected: usize, from: usize) -> Option<usize> {
    if needle.is_empty() {
        return Some(expected);
    }
    let last_start = lines.len().checked_sub(needle.len())?;
    if last_start < from {
        return None;
    }
    let exact = |p: usize| {
        lines[p..p + needle.len()]
            .iter()
            .zip(needle)
            .all(|(a, b)| a == b)
    };
    let loose = |p: usize| {
        lines[p..p + needle.len()]
            .iter()
            .zip(needle)
            .all(|(a, b)| a.trim_end() == b.trim_end())
    };
    let near = |p: usize| (0..=NEAR_LINES).flat_map(move |d| [p.checked_add(d), p.checked_sub(d)]);
    for matches in [&exact as &dyn Fn(usize) -> bool, &loose] {
        let found = near(expected)
            .flatten()
            .find(|&p| p >= from && p <= last_start && matches(p));
        if found.is_some() {
            return found;
        }
    }
    for matches in [&exact as &dyn Fn(usize) -> bool, &loose] {
        let mut all = (from..=last_start).filter(|&p| matches(p));
        if let (Some(p), None) = (all.next(), all.next()) {
            return Some(p);
        }
    }
    None
}

/// What a hunk error says when its context is not in the file: the
/// failure a patch gets around by editing the file instead.
const HUNK_NOT_FOUND: &str = "its context and removed lines were not found";

/// A patch whose hunks fail suggests an edit (or a whole-file write).
fn edit_instead(file: &str, error: &str) -> agentd_core::CorrectionSignal {
    agentd_core::CorrectionSignal {
        fallback_request: format!(
            "The patch did not apply to {file}. Read {file} again and make the change with the \
             `edit` tool (an exact old_string and new_string), or write the whole file with \
             `write`."
        ),
        original_tool: Tool::Patch.name().to_string(),
        original_error: error.lines().next().unwrap_or_default().to_string(),
        suggested_approach: "edit the file directly instead of patching it".to_string(),
        fallback_tools: vec![
            Tool::Edit.name().to_string(),
            Tool::Write.name().to_string(),
        ],
    }
}

fn hunk_error(
    shown: &str,
    n: usize,
    total: usize,
    hunk: &Hunk,
    lines: &[&str],
    expected: usize,
    cursor: usize,
) -> ToolError {
    let old = hunk.old_lines();
    let new = hunk.new_lines();
    let mut message = format!(
        "patch: hunk {} of {total} for {shown} ({}) does not apply: ",
        n + 1,
        hunk.header.trim()
    );
    if !new.is_empty() && locate(lines, &new, expected, cursor).is_some() && old != new {
        message.push_str(
            "the file already contains the hunk's new lines; it may have been applied already.",
        );
        return ToolError::new(message);
    }
    message.push_str(&format!(
        "{HUNK_NOT_FOUND} near line {}.\nThe hunk expects:\n",
        expected + 1
    ));
    for line in old.iter().take(QUOTE_LINES) {
        message.push_str(&format!("  {line}\n"));
    }
    if old.len() > QUOTE_LINES {
        message.push_str("  …\n");
    }
    let from = expected.min(lines.len());
    let to = (from + old.len().clamp(1, QUOTE_LINES)).min(lines.len());
    if from < to {
        message.push_str(&format!("{shown} has at lines {}-{}:\n", from + 1, to));
        for (i, line) in lines[from..to].iter().enumerate() {
            message.push_str(&format!("{:>6}\t{line}\n", from + i + 1));
        }
        message.push_str("Read the file again and base the hunk on its exact current content.");
    } else {
        message.push_str(&format!("{shown} has only {} lines.", lines.len()));
    }
    ToolError::new(message)
}

pub(crate) fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let changes = plan(input, ctx)?;
    diff::apply(&changes, ctx)?;
    let mut out = format!(
        "Applied the patch to {} file{}:\n",
        changes.len(),
        if changes.len() == 1 { "" } else { "s" }
    );
    let (mut added, mut removed) = (0, 0);
    for change in &changes {
        let (a, r) = change.stats();
        added += a;
        removed += r;
        out.push_str(&format!("  {}\n", change.describe(ctx)));
    }
    let summary = match changes.as_slice() {
        [one] => format!("patched {}", one.describe(ctx)),
        many => format!("patched {} files (+{added} -{removed})", many.len()),
    };
    let mut output = ToolOutput::ok(out, summary);
    output.diff = Some(diff::unified_all(&changes, ctx));
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::ctx_in;

    fn setup(files: &[(&str, &str)]) -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in files {
            let p = dir.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        let ctx = ctx_in(dir.path());
        (dir, ctx)
    }

    fn read(ctx: &ToolContext, name: &str) -> String {
        std::fs::read_to_string(ctx.cwd.join(name)).unwrap()
    }

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn multi_file_multi_hunk_patch_applies() {
        let (_d, ctx) = setup(&[("a.txt", &numbered(30)), ("src/b.txt", "x\ny\nz\n")]);
        let patch = "\
diff --git a/a.txt b/a.txt
index 000..111 100644
--- a/a.txt
+++ b/a.txt
@@ -2,3 +2,3 @@
 line 2
-line 3
+LINE THREE
 line 4
@@ -20,3 +20,4 @@ fn context
 line 20
 line 21
+inserted
 line 22
--- a/src/b.txt
+++ b/src/b.txt
@@ -1,3 +1,2 @@
 x
-y
 z
";
        let out = run(json!({"patch": patch}), &ctx).unwrap();
        let a = read(&ctx, "a.txt");
        assert!(a.contains("line 2\nLINE THREE\nline 4\n"), "{a}");
        assert!(a.contains("line 21\ninserted\nline 22\n"), "{a}");
        assert_eq!(a.lines().count(), 31);
        assert_eq!(read(&ctx, "src/b.txt"), "x\nz\n");
        assert!(
            out.content.contains("a.txt (+2 -1)") && out.content.contains("src/b.txt (+0 -1)"),
            "{}",
            out.content
        );
        let diff = out.diff.unwrap();
        assert!(diff.contains("+++ b/src/b.txt"), "{diff}");
    }

    #[test]
    fn failing_hunk_leaves_every_file_unchanged() {
        let (_d, ctx) = setup(&[("a.txt", "one\ntwo\n"), ("b.txt", "three\nfour\n")]);
        let patch = "\
--- a/a.txt
+++ b/a.txt
@@ -1,2 +1,2 @@
 one
-two
+TWO
--- a/b.txt
+++ b/b.txt
@@ -1,2 +1,2 @@
 three
-not four
+FOUR
";
        let err = run(json!({"patch": patch}), &ctx).unwrap_err().0;
        assert!(err.contains("hunk 1 of 1 for b.txt"), "{err}");
        assert!(
            err.contains("  not four") && err.contains("     2\tfour"),
            "{err}"
        );
        assert!(err.ends_with("No files were changed."), "{err}");
        assert_eq!(read(&ctx, "a.txt"), "one\ntwo\n");
        assert_eq!(read(&ctx, "b.txt"), "three\nfour\n");
    }

    #[test]
    fn a_hunk_that_is_not_found_asks_for_an_edit_instead() {
        let (_d, ctx) = setup(&[("b.txt", "three\nfour\n")]);
        let patch = "--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n three\n-not four\n+FOUR\n";
        let err = run(json!({"patch": patch}), &ctx).unwrap_err().0;
        let result = agentd_core::ToolResult::new("t1", err.clone(), true);
        let signal = agentd_core::CorrectionSignal::of("patch", &result).unwrap();
        assert_eq!(signal.original_tool, "patch");
        assert!(
            signal
                .original_error
                .starts_with("patch: hunk 1 of 1 for b.txt"),
            "{signal:?}"
        );
        assert!(signal.fallback_request.contains("`edit`"), "{signal:?}");
        assert_eq!(signal.fallback_tools, ["edit", "write"]);
        assert!(err.ends_with("No files were changed."), "{err}");
        // A hunk applied already is no case for another tool.
        let (_d, ctx) = setup(&[("b.txt", "three\nFOUR\n")]);
        let patch = "--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n three\n-four\n+FOUR\n";
        let err = run(json!({"patch": patch}), &ctx).unwrap_err().0;
        assert!(err.contains("already"), "{err}");
        assert!(!err.contains(agentd_core::correction::SIGNAL), "{err}");
    }

    #[test]
    fn creates_and_deletes_files() {
        let (dir, ctx) = setup(&[("old.txt", "bye\nnow\n")]);
        let patch = "\
--- /dev/null
+++ b/new/dir/hello.txt
@@ -0,0 +1,2 @@
+hello
+world
--- a/old.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-bye
-now
";
        let out = run(json!({"patch": patch}), &ctx).unwrap();
        assert_eq!(read(&ctx, "new/dir/hello.txt"), "hello\nworld\n");
        assert!(!dir.path().join("old.txt").exists());
        assert!(
            out.content.contains("new/dir/hello.txt (new, 2 lines)"),
            "{}",
            out.content
        );
        assert!(out.content.contains("old.txt (deleted)"), "{}", out.content);

        let again = run(
            json!({"patch": "--- /dev/null\n+++ b/new/dir/hello.txt\n@@ -0,0 +1 @@\n+x\n"}),
            &ctx,
        );
        assert!(again.unwrap_err().0.contains("already exists"));
    }

    #[test]
    fn tolerates_drifted_line_numbers_and_lost_blank_space() {
        let (_d, ctx) = setup(&[("a.txt", "a\n\nb\nc\nd\n")]);
        // Wrong start line (40), and the blank context line lost its space.
        let patch = "--- a/a.txt\n+++ b/a.txt\n@@ -40,3 +40,3 @@\n a\n\n-b\n+B\n\n";
        run(json!({"patch": patch}), &ctx).unwrap();
        assert_eq!(read(&ctx, "a.txt"), "a\n\nB\nc\nd\n");
    }

    #[test]
    fn no_newline_markers_are_honoured() {
        let (_d, ctx) = setup(&[("a.txt", "a\nb")]);
        let patch =
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n";
        run(json!({"patch": patch}), &ctx).unwrap();
        assert_eq!(read(&ctx, "a.txt"), "a\nc\n");
        let patch =
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n a\n-c\n+d\n\\ No newline at end of file\n";
        run(json!({"patch": patch}), &ctx).unwrap();
        assert_eq!(read(&ctx, "a.txt"), "a\nd");
    }

    #[test]
    fn already_applied_and_missing_files_are_explained() {
        let (_d, ctx) = setup(&[("a.txt", "x\nNEW\nz\n")]);
        let patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n x\n-old\n+NEW\n z\n";
        let err = run(json!({"patch": patch}), &ctx).unwrap_err().0;
        assert!(err.contains("applied already"), "{err}");
        let patch = "--- a/missing.txt\n+++ b/missing.txt\n@@ -1 +1 @@\n-a\n+b\n";
        let err = run(json!({"patch": patch}), &ctx).unwrap_err().0;
        assert!(err.contains("file not found: missing.txt"), "{err}");
        let err = run(json!({"patch": "just some text"}), &ctx).unwrap_err().0;
        assert!(err.contains("no file headers"), "{err}");
        let err = run(
            json!({"patch": "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        assert!(err.contains("outside the working directory"), "{err}");
    }

    #[test]
    fn crlf_files_keep_their_line_endings() {
        let (_d, ctx) = setup(&[("w.txt", "a\r\nb\r\n")]);
        run(
            json!({"patch": "--- a/w.txt\n+++ b/w.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"}),
            &ctx,
        )
        .unwrap();
        assert_eq!(read(&ctx, "w.txt"), "a\r\nc\r\n");
    }

    #[test]
    fn stray_lines_inside_a_file_section_are_refused() {
        let (_d, ctx) = setup(&[("a.txt", "a\nb\nc\nd\n")]);
        // `c` lost its leading space; skipping it would drop the `-d` after it.
        let patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1,4 +1,3 @@\n a\n b\nc\n-d\n";
        let err = run(json!({"patch": patch}), &ctx).unwrap_err().0;
        assert!(
            err.contains("line 6 of the patch is not part of a hunk: `c`"),
            "{err}"
        );
        assert_eq!(read(&ctx, "a.txt"), "a\nb\nc\nd\n");
        // Code fences and git's metadata lines are fine.
        let patch = "```diff\ndiff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -3,2 +3,1 @@\n c\n-d\n```\n";
        run(json!({"patch": patch}), &ctx).unwrap();
        assert_eq!(read(&ctx, "a.txt"), "a\nb\nc\n");
    }

    #[test]
    fn renames_move_the_content() {
        let (dir, ctx) = setup(&[("old.rs", "x\ny\n")]);
        let patch = "--- a/old.rs\n+++ b/new.rs\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n";
        run(json!({"patch": patch}), &ctx).unwrap();
        assert!(!dir.path().join("old.rs").exists());
        assert_eq!(read(&ctx, "new.rs"), "x\nz\n");
    }
}
