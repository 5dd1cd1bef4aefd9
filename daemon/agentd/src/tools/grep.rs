//! `grep`: regex search over file contents, ripgrep's way.
//!
//! The same engine as ripgrep (grep-searcher, grep-regex, a parallel ignore
//! walk) with the same defaults: `.gitignore` honoured, hidden files and
//! binary files skipped. Results are sorted by path so identical searches
//! give identical answers, and the search stops once the output budget is
//! spent: more matches than the model can read are better answered by a
//! narrower search than by a longer list.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{Searcher, Sink, SinkContext, SinkMatch};
use ignore::WalkState;
use ignore::overrides::OverrideBuilder;
use serde::Deserialize;
use serde_json::{Value, json};

use super::walk::{self, WalkOptions};
use super::{ToolContext, ToolError, ToolOutput, input, paths};

/// Longest matching line shown; minified files would otherwise fill the
/// budget with one line.
const MAX_LINE_CHARS: usize = 400;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    output_mode: Option<String>,
    context: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    FilesWithMatches,
    Count,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Rust regex"},
            "path": {"type": "string", "description": "File or directory (default: working directory)"},
            "glob": {"type": "string", "description": "Only files matching, e.g. `*.rs`, `*.{ts,tsx}`"},
            "case_insensitive": {"type": "boolean"},
            "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
            "context": {"type": "integer", "description": "Lines of context around matches"}
        },
        "required": ["pattern"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::Grep.name().to_string(),
        description: "Search file contents by regex (ripgrep engine; honours .gitignore, skips \
                      hidden and binary files). output_mode: content (default, `path:line:text`), \
                      files_with_matches, count."
            .to_string(),
        input_schema: schema(),
    }
}

/// One file's results, rendered.
struct FileHits {
    path: PathBuf,
    text: String,
    matches: u64,
    /// The file had more matches than the budget allowed.
    cut: bool,
}

pub(crate) fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let input: Input = input::parse(Tool::Grep.name(), &schema(), input)?;
    let mode = match input.output_mode.as_deref() {
        None | Some("content") => Mode::Content,
        Some("files_with_matches") => Mode::FilesWithMatches,
        Some(_) => Mode::Count,
    };
    let context = input.context.unwrap_or(0).min(50) as usize;
    let (root, root_shown) = walk::search_root(ctx, input.path.as_deref())?;
    if input.pattern.is_empty() {
        return Err(ToolError::new("grep: `pattern` is empty"));
    }
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(input.case_insensitive)
        .line_terminator(Some(b'\n'))
        .build(&input.pattern)
        .map_err(|e| ToolError::new(format!("grep: invalid regex `{}`: {e}", input.pattern)))?;
    let options = walk_options(&root, input.glob.as_deref())?;

    let budget = ctx.limits.content_budget();
    let collected = AtomicUsize::new(0);
    let capped = AtomicBool::new(false);
    let results: Mutex<Vec<FileHits>> = Mutex::new(Vec::new());
    let skipped = walk::files(&root, &options, &ctx.own_files, &ctx.cancel, || {
        let mut searcher = walk::searcher(if mode == Mode::Content { context } else { 0 });
        let matcher = matcher.clone();
        let mut sink = walk::Collector::new(&results);
        let (collected, capped) = (&collected, &capped);
        move |entry: &ignore::DirEntry| {
            let Some(hits) = search_file(&mut searcher, &matcher, entry.path(), ctx, mode, budget)
            else {
                return WalkState::Continue;
            };
            let total = collected.fetch_add(hits.text.len(), Ordering::Relaxed) + hits.text.len();
            let cut = hits.cut;
            sink.push(hits);
            if total > budget || cut {
                capped.store(true, Ordering::Relaxed);
                return WalkState::Quit;
            }
            WalkState::Continue
        }
    });
    if ctx.cancel.is_cancelled() {
        return Ok(super::cancelled_output());
    }
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by(|a, b| a.path.cmp(&b.path));
    let capped = capped.load(Ordering::Relaxed);
    let files = results.len();
    let matches: u64 = results.iter().map(|r| r.matches).sum();
    if files == 0 {
        let none = ToolOutput::ok(
            format!("No matches for `{}` in {root_shown}.", input.pattern),
            "no matches".to_string(),
        );
        return Ok(walk::own_note(none, skipped));
    }

    let (mut out, shown_files) = render(&results, context, mode, budget);
    let total_known = !capped;
    if shown_files < files || capped {
        let counts = if total_known {
            format!("{matches} matches in {files} files")
        } else {
            "the search stopped early".to_string()
        };
        out.push_str(&format!(
            "… [results cut at the output limit ({counts}); narrow the pattern, path or glob, \
             or use output_mode files_with_matches]\n"
        ));
    }
    let summary = match (mode, total_known) {
        (Mode::FilesWithMatches, true) => format!("{files} files"),
        (_, true) => format!("{matches} matches in {files} files"),
        (_, false) => format!("{matches}+ matches in {files}+ files (capped)"),
    };
    Ok(walk::own_note(ToolOutput::ok(out, summary), skipped))
}

/// What the walk searches: every file, or those the `glob` filter names.
fn walk_options(root: &std::path::Path, glob: Option<&str>) -> Result<WalkOptions, ToolError> {
    let mut options = WalkOptions::default();
    if let Some(glob) = glob.filter(|g| !g.trim().is_empty()) {
        let mut builder = OverrideBuilder::new(root);
        for part in split_globs(glob) {
            builder
                .add(part)
                .map_err(|e| ToolError::new(format!("grep: invalid glob `{glob}`: {e}")))?;
        }
        let overrides = builder
            .build()
            .map_err(|e| ToolError::new(format!("grep: invalid glob `{glob}`: {e}")))?;
        options.overrides = Some(overrides);
    }
    Ok(options)
}

/// The files' hits in order, as many as fit in `budget` (the last one
/// that does not fit cut line by line); and how many files were shown whole.
fn render(results: &[FileHits], context: usize, mode: Mode, budget: usize) -> (String, usize) {
    let mut out = String::new();
    let mut shown_files = 0;
    for (i, hits) in results.iter().enumerate() {
        let separator = if context > 0 && mode == Mode::Content && i > 0 {
            "--\n"
        } else {
            ""
        };
        if out.len() + separator.len() + hits.text.len() > budget {
            // Fill what room is left line by line rather than dropping the
            // whole file.
            for line in hits.text.split_inclusive('\n') {
                if out.len() + line.len() > budget {
                    break;
                }
                out.push_str(line);
            }
            break;
        }
        out.push_str(separator);
        out.push_str(&hits.text);
        shown_files += 1;
    }
    (out, shown_files)
}

/// Splits "*.rs, *.toml" into separate globs, leaving braces alone.
fn split_globs(glob: &str) -> Vec<&str> {
    if glob.contains('{') {
        return vec![glob.trim()];
    }
    glob.split([',', ' '])
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .collect()
}

/// Searches one file; `None` when it has no matches or is binary.
fn search_file(
    searcher: &mut Searcher,
    matcher: &RegexMatcher,
    path: &std::path::Path,
    ctx: &ToolContext,
    mode: Mode,
    budget: usize,
) -> Option<FileHits> {
    let shown = paths::display(ctx, path);
    let mut sink = RenderSink {
        shown: &shown,
        mode,
        text: String::new(),
        matches: 0,
        binary: false,
        budget,
        cut: false,
    };
    // Unreadable files are skipped like ripgrep does.
    searcher.search_path(matcher, path, &mut sink).ok()?;
    if sink.binary || sink.matches == 0 {
        return None;
    }
    let text = match mode {
        Mode::Content => sink.text,
        Mode::FilesWithMatches => format!("{shown}\n"),
        Mode::Count => format!("{shown}:{}\n", sink.matches),
    };
    Some(FileHits {
        path: path.to_path_buf(),
        text,
        matches: sink.matches,
        cut: sink.cut,
    })
}

/// Renders matches the way ripgrep does: `path:line:text` for matches,
/// `path-line-text` for context, `--` between separate context groups.
struct RenderSink<'a> {
    shown: &'a str,
    mode: Mode,
    text: String,
    matches: u64,
    binary: bool,
    /// Rendering stops past this many bytes, so one file with millions of
    /// matches cannot exhaust memory.
    budget: usize,
    cut: bool,
}

impl RenderSink<'_> {
    fn line(&mut self, sep: char, number: Option<u64>, bytes: &[u8]) {
        let line = String::from_utf8_lossy(bytes);
        let line = line.trim_end_matches('\n').trim_end_matches('\r');
        let number = number.unwrap_or(0);
        match line.char_indices().nth(MAX_LINE_CHARS) {
            None => self
                .text
                .push_str(&format!("{}{sep}{number}{sep}{line}\n", self.shown)),
            Some((cut, _)) => self.text.push_str(&format!(
                "{}{sep}{number}{sep}{}… [line clipped]\n",
                self.shown,
                &line[..cut]
            )),
        }
    }
}

impl Sink for RenderSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.matches += 1;
        match self.mode {
            Mode::FilesWithMatches => Ok(false),
            Mode::Count => Ok(true),
            Mode::Content => {
                let first = mat.line_number();
                for (i, line) in mat.lines().enumerate() {
                    self.line(':', first.map(|n| n + i as u64), line);
                }
                if self.text.len() > self.budget {
                    self.cut = true;
                    return Ok(false);
                }
                Ok(true)
            }
        }
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if self.mode == Mode::Content {
            self.line('-', ctx.line_number(), ctx.bytes());
        }
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, Self::Error> {
        if self.mode == Mode::Content {
            self.text.push_str("--\n");
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::ctx_in;

    fn setup() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let files: &[(&str, &[u8])] = &[
            (
                "src/a.rs",
                b"fn alpha() {}\nlet needle = 1;\nfn beta() {}\n",
            ),
            ("src/b.py", b"NEEDLE = 2\n"),
            ("target/gen.rs", b"needle in ignored dir\n"),
            (".hidden/x.rs", b"needle hidden\n"),
            ("bin.dat", b"needle\x00binary\n"),
            (
                "notes.txt",
                b"one\ntwo\nneedle three\nfour\nfive\nsix\nseven\nneedle eight\n",
            ),
        ];
        for (name, body) in files {
            let p = root.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
        let ctx = ctx_in(root);
        (dir, ctx)
    }

    #[test]
    fn content_mode_respects_gitignore_hidden_and_binary() {
        let (_d, ctx) = setup();
        let out = run(json!({"pattern": "needle"}), &ctx).unwrap();
        assert_eq!(
            out.content,
            "notes.txt:3:needle three\nnotes.txt:8:needle eight\nsrc/a.rs:2:let needle = 1;\n"
        );
        assert_eq!(out.summary, "3 matches in 2 files");
    }

    #[test]
    fn modes_case_and_glob() {
        let (_d, ctx) = setup();
        let out = run(json!({"pattern": "needle", "case_insensitive": true, "output_mode": "files_with_matches"}), &ctx)
            .unwrap();
        assert_eq!(out.content, "notes.txt\nsrc/a.rs\nsrc/b.py\n");
        let out = run(json!({"pattern": "needle", "output_mode": "count"}), &ctx).unwrap();
        assert_eq!(out.content, "notes.txt:2\nsrc/a.rs:1\n");
        let out = run(json!({"pattern": "(?i)needle", "glob": "*.py"}), &ctx).unwrap();
        assert_eq!(out.content, "src/b.py:1:NEEDLE = 2\n");
        let out = run(json!({"pattern": "needle", "path": "src"}), &ctx).unwrap();
        assert_eq!(out.content, "src/a.rs:2:let needle = 1;\n");
        let out = run(json!({"pattern": "needle", "path": "src/a.rs"}), &ctx).unwrap();
        assert_eq!(out.content, "src/a.rs:2:let needle = 1;\n");
        let out = run(json!({"pattern": "zzz"}), &ctx).unwrap();
        assert!(!out.is_error && out.content.starts_with("No matches"));
    }

    #[test]
    fn context_lines_use_ripgrep_format() {
        let (_d, ctx) = setup();
        let out = run(
            json!({"pattern": "needle", "path": "notes.txt", "context": 1}),
            &ctx,
        )
        .unwrap();
        assert_eq!(
            out.content,
            "notes.txt-2-two\nnotes.txt:3:needle three\nnotes.txt-4-four\n--\nnotes.txt-7-seven\nnotes.txt:8:needle eight\n"
        );
    }

    #[test]
    fn bad_regex_and_escape_are_errors() {
        let (_d, ctx) = setup();
        assert!(
            run(json!({"pattern": "(unclosed"}), &ctx)
                .unwrap_err()
                .0
                .contains("invalid regex")
        );
        assert!(
            run(json!({"pattern": "x", "path": "/"}), &ctx)
                .unwrap_err()
                .0
                .contains("outside")
        );
    }

    #[test]
    fn output_is_capped() {
        let (dir, mut ctx) = setup();
        let many: String = (0..5000).map(|i| format!("needle {i}\n")).collect();
        std::fs::write(dir.path().join("many.txt"), many).unwrap();
        ctx.limits.max_output_bytes = 2000;
        let out = run(json!({"pattern": "needle"}), &ctx).unwrap();
        assert!(out.content.len() <= 2000, "{}", out.content.len());
        assert!(
            out.content.contains("results cut at the output limit"),
            "{}",
            out.content
        );
    }
}
