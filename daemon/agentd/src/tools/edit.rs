//! `edit`: exact string replacement with the unique-match rule.
//!
//! Requiring a unique match is what makes the tool safe to use blind: a
//! replacement that could land in two places is refused, and the model adds
//! context until it cannot.

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use serde::Deserialize;
use serde_json::{Value, json};

use super::diff::{self, FileChange};
use super::{ToolContext, ToolError, ToolOutput, input, paths};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence"}
        },
        "required": ["path", "old_string", "new_string"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::Edit.name().to_string(),
        description: "Replace old_string with new_string in a file. old_string must match exactly \
                      (indentation included, no line-number prefixes) and exactly once unless \
                      replace_all; add surrounding lines to make it unique. Read the file first."
            .to_string(),
        input_schema: schema(),
    }
}

/// The edit's result before it is written: the change and where it landed.
struct Planned {
    change: FileChange,
    replacements: usize,
    first_line: usize,
}

fn plan_edit(input: Value, ctx: &ToolContext) -> Result<Planned, ToolError> {
    let input: Input = input::parse(Tool::Edit.name(), &schema(), input)?;
    if input.old_string.is_empty() {
        return Err(ToolError::new(
            "edit: old_string is empty; use write to create or overwrite a file",
        ));
    }
    if input.old_string == input.new_string {
        return Err(ToolError::new(
            "edit: old_string and new_string are identical, so there is nothing to change",
        ));
    }
    let path = paths::resolve(ctx, &input.path)?;
    let shown = paths::display(ctx, &path);
    let Some(content) = diff::read_text(ctx, &path)? else {
        return Err(ToolError::new(format!(
            "file not found: {shown} (use write to create a new file)"
        )));
    };

    let (mut old, mut new) = (input.old_string, input.new_string);
    let mut count = count_overlapping(&content, &old);
    // The model sees lines without their `\r`; let its edit match a CRLF file.
    if count == 0 && content.contains("\r\n") && old.contains('\n') && !old.contains("\r\n") {
        let crlf_old = old.replace('\n', "\r\n");
        let crlf_count = count_overlapping(&content, &crlf_old);
        if crlf_count > 0 {
            old = crlf_old;
            new = new.replace("\r\n", "\n").replace('\n', "\r\n");
            count = crlf_count;
        }
    }
    if count == 0 {
        let message = not_found_message(&shown, &content, &old);
        let signal = whole_file_write(&shown, &message);
        return Err(ToolError::new(message).with_correction(&signal));
    }
    if count > 1 && !input.replace_all {
        return Err(ToolError::new(format!(
            "old_string matches {count} times in {shown}; add surrounding lines to old_string so it \
             matches exactly once, or set replace_all to true to replace every occurrence"
        )));
    }
    let first = content.find(&old).unwrap_or(0);
    let first_line = content[..first].matches('\n').count() + 1;
    let (updated, replacements) = if input.replace_all {
        (content.replace(&old, &new), content.matches(&old).count())
    } else {
        (content.replacen(&old, &new, 1), 1)
    };
    Ok(Planned {
        change: FileChange {
            path,
            old: Some(content),
            new: Some(updated),
        },
        replacements,
        first_line,
    })
}

/// The change an edit would make.
pub(crate) fn plan(input: Value, ctx: &ToolContext) -> Result<Vec<FileChange>, ToolError> {
    Ok(vec![plan_edit(input, ctx)?.change])
}

pub(crate) fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let planned = plan_edit(input, ctx)?;
    let change = &planned.change;
    diff::apply(std::slice::from_ref(change), ctx)?;
    let shown = paths::display(ctx, &change.path);
    let (added, removed) = change.stats();
    let what = match planned.replacements {
        1 => format!("1 replacement at line {}", planned.first_line),
        n => format!("{n} replacements, the first at line {}", planned.first_line),
    };
    let mut out = ToolOutput::ok(
        format!("Edited {shown}: {what} (+{added} -{removed} lines)."),
        format!("edited {shown} (+{added} -{removed})"),
    );
    out.diff = Some(change.unified(ctx));
    Ok(out)
}

/// An edit that cannot find its target suggests a whole-file write.
fn whole_file_write(shown: &str, error: &str) -> agentd_core::CorrectionSignal {
    agentd_core::CorrectionSignal {
        fallback_request: format!(
            "The edit of {shown} could not find its target text. Read {shown} again and \
             write the whole file with the `write` tool, with the change made, instead of \
             editing it."
        ),
        original_tool: Tool::Edit.name().to_string(),
        original_error: error.to_string(),
        suggested_approach: "rewrite the whole file with write".to_string(),
        fallback_tools: vec![Tool::Write.name().to_string()],
    }
}

/// Occurrences of `needle`, overlapping ones included: "aa" in "aaa" is
/// ambiguous and must count as two.
fn count_overlapping(haystack: &str, needle: &str) -> usize {
    let mut count = 0;
    let mut from = 0;
    while let Some(i) = haystack[from..].find(needle) {
        count += 1;
        let start = from + i;
        from = start + haystack[start..].chars().next().map_or(1, char::len_utf8);
    }
    count
}

/// Says the string was not found and, when the near-miss is recognisable,
/// why: those are the mistakes models make.
fn not_found_message(shown: &str, content: &str, old: &str) -> String {
    let mut message = format!("old_string was not found in {shown}");
    let numbered = old.lines().filter(|l| !l.trim().is_empty()).all(|l| {
        l.trim_start()
            .split_once('\t')
            .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty())
    });
    if numbered && !old.trim().is_empty() {
        message.push_str("; it seems to include line-number prefixes from read output, which are not part of the file");
    } else if let Some(line) = loose_match_line(content, old) {
        message.push_str(&format!(
            "; a similar text differing only in whitespace starts at line {line}. Read it again and copy it exactly"
        ));
    } else {
        message.push_str(". Read the file again and copy the text exactly, including indentation");
    }
    message
}

/// The line where `old` matches when leading and trailing whitespace of
/// every line is ignored.
fn loose_match_line(content: &str, old: &str) -> Option<usize> {
    let want: Vec<&str> = old
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if want.is_empty() {
        return None;
    }
    let have: Vec<(usize, &str)> = content
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    have.windows(want.len())
        .find(|w| w.iter().zip(&want).all(|((_, a), b)| a == b))
        .map(|w| w[0].0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::ctx_in;

    fn setup(content: &str) -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx_in(dir.path());
        std::fs::write(dir.path().join("f.rs"), content).unwrap();
        (dir, ctx)
    }

    fn file(ctx: &ToolContext) -> String {
        std::fs::read_to_string(ctx.cwd.join("f.rs")).unwrap()
    }

    #[test]
    fn unique_match_is_replaced_with_diff() {
        let (_d, ctx) = setup("fn a() {}\nfn b() {}\n");
        let out = run(
            json!({"path": "f.rs", "old_string": "fn b() {}", "new_string": "fn c() {}"}),
            &ctx,
        )
        .unwrap();
        assert_eq!(file(&ctx), "fn a() {}\nfn c() {}\n");
        assert!(out.content.contains("line 2"), "{}", out.content);
        let diff = out.diff.unwrap();
        assert!(diff.contains("-fn b() {}\n+fn c() {}"), "{diff}");
    }

    #[test]
    fn zero_matches_is_an_error_and_changes_nothing() {
        let (_d, ctx) = setup("let x = 1;\n");
        let err = run(
            json!({"path": "f.rs", "old_string": "let y", "new_string": "z"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        assert!(err.contains("not found"), "{err}");
        assert_eq!(file(&ctx), "let x = 1;\n");
    }

    #[test]
    fn a_missing_target_suggests_a_whole_file_write() {
        let (_d, ctx) = setup("let x = 1;\n");
        let err = run(
            json!({"path": "f.rs", "old_string": "let y", "new_string": "z"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        // The text people and the model read comes first, unchanged.
        assert!(
            err.starts_with("old_string was not found in f.rs. Read the file again"),
            "{err}"
        );
        let result = agentd_core::ToolResult::new("t1", err, true);
        let signal = agentd_core::CorrectionSignal::of("edit", &result).unwrap();
        assert_eq!(signal.original_tool, "edit");
        assert!(
            signal
                .original_error
                .starts_with("old_string was not found in f.rs")
        );
        assert!(signal.fallback_request.contains("`write`"), "{signal:?}");
        assert_eq!(signal.fallback_tools, ["write"]);
        // Other refusals carry no signal: another tool would not help.
        let err = run(
            json!({"path": "f.rs", "old_string": "let x", "new_string": "let x"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        assert!(!err.contains(agentd_core::correction::SIGNAL), "{err}");
    }

    #[test]
    fn multiple_matches_need_context_or_replace_all() {
        let (_d, ctx) = setup("x = 1\nx = 1\nx = 1\n");
        let err = run(
            json!({"path": "f.rs", "old_string": "x = 1", "new_string": "y = 2"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        assert!(
            err.contains("matches 3 times") && err.contains("replace_all"),
            "{err}"
        );
        assert_eq!(file(&ctx), "x = 1\nx = 1\nx = 1\n");

        let out = run(
            json!({"path": "f.rs", "old_string": "x = 1", "new_string": "y = 2", "replace_all": true}),
            &ctx,
        )
        .unwrap();
        assert_eq!(file(&ctx), "y = 2\ny = 2\ny = 2\n");
        assert!(out.content.contains("3 replacements"), "{}", out.content);
    }

    #[test]
    fn overlapping_matches_are_ambiguous() {
        let (_d, ctx) = setup("aaa\n");
        let err = run(
            json!({"path": "f.rs", "old_string": "aa", "new_string": "b"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        assert!(err.contains("matches 2 times"), "{err}");
    }

    #[test]
    fn identical_strings_and_missing_files_are_refused() {
        let (_d, ctx) = setup("a\n");
        let err = run(
            json!({"path": "f.rs", "old_string": "a", "new_string": "a"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        assert!(err.contains("identical"), "{err}");
        let err = run(
            json!({"path": "nope.rs", "old_string": "a", "new_string": "b"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        assert!(err.contains("file not found: nope.rs"), "{err}");
    }

    #[test]
    fn near_misses_get_hints() {
        let (_d, ctx) = setup("fn main() {\n    let x = 1;\n}\n");
        let err = run(
            json!({"path": "f.rs", "old_string": "\tlet x = 1;\n}", "new_string": "z"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        assert!(err.contains("line 2"), "{err}");
        let err = run(
            json!({"path": "f.rs", "old_string": "     2\t    let x = 1;", "new_string": "z"}),
            &ctx,
        )
        .unwrap_err()
        .0;
        assert!(err.contains("line-number prefixes"), "{err}");
    }

    #[test]
    fn crlf_files_can_be_edited_with_lf_strings() {
        let (_d, ctx) = setup("a\r\nb\r\nc\r\n");
        run(
            json!({"path": "f.rs", "old_string": "a\nb", "new_string": "x\ny"}),
            &ctx,
        )
        .unwrap();
        assert_eq!(file(&ctx), "x\r\ny\r\nc\r\n");
    }
}
