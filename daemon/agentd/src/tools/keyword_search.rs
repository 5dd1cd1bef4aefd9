//! `keyword_search`: which files are about these words?
//!
//! grep answers "where does this exact text occur"; this answers "where does
//! this concept live" when the model knows words but not names. A file that
//! mentions more of the distinct terms ranks above one that repeats a single
//! term often, because breadth of overlap is the better relevance signal.
//! A term in the file's path counts as present: `auth/session.rs` is about
//! sessions even where the word is rarely written out.

use std::path::PathBuf;
use std::sync::Mutex;

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{Searcher, Sink, SinkMatch};
use ignore::WalkState;
use serde::Deserialize;
use serde_json::{Value, json};

use super::walk::{self, WalkOptions};
use super::{ToolContext, ToolError, ToolOutput, input, paths};

const MAX_TERMS: usize = 16;
const TOP_FILES: usize = 10;
const LINES_PER_FILE: usize = 3;
const MAX_LINE_CHARS: usize = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    keywords: Vec<String>,
    path: Option<String>,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "keywords": {"type": "array", "items": {"type": "string"}},
            "path": {"type": "string"}
        },
        "required": ["keywords"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::KeywordSearch.name().to_string(),
        description: "Rank files by how many of the keywords they contain (case-insensitive \
                      literals; file names count) and show their best lines. For finding where a \
                      concept lives when exact names are unknown."
            .to_string(),
        input_schema: schema(),
    }
}

/// One file's score and its best lines.
struct Scored {
    path: PathBuf,
    /// Bit i set: term i occurs (in the content or the path).
    terms: u32,
    hits: u64,
    /// (distinct terms on the line, line number, text)
    lines: Vec<(u32, u64, String)>,
}

pub(crate) fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let input: Input = input::parse(Tool::KeywordSearch.name(), &schema(), input)?;
    let mut terms: Vec<String> = Vec::new();
    for k in &input.keywords {
        let k = k.trim().to_lowercase();
        if !k.is_empty() && !terms.contains(&k) {
            terms.push(k);
        }
    }
    if terms.is_empty() {
        return Err(ToolError::new(
            "keyword_search: `keywords` has no non-empty keyword",
        ));
    }
    if terms.len() > MAX_TERMS {
        return Err(ToolError::new(format!(
            "keyword_search: at most {MAX_TERMS} keywords, got {}",
            terms.len()
        )));
    }
    let (root, root_shown) = walk::search_root(ctx, input.path.as_deref())?;
    let alternation: Vec<String> = terms.iter().map(|t| regex::escape(t)).collect();
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(true)
        .line_terminator(Some(b'\n'))
        .build(&alternation.join("|"))
        .map_err(|e| ToolError::new(format!("keyword_search: {e}")))?;

    let results: Mutex<Vec<Scored>> = Mutex::new(Vec::new());
    let skipped = walk::files(
        &root,
        &WalkOptions::default(),
        &ctx.own_files,
        &ctx.cancel,
        || {
            let mut searcher = walk::searcher(0);
            let matcher = matcher.clone();
            let mut sink = walk::Collector::new(&results);
            let (terms, root) = (&terms, &root);
            move |entry: &ignore::DirEntry| {
                if let Some(scored) = score_file(&mut searcher, &matcher, entry.path(), root, terms)
                {
                    sink.push(scored);
                }
                WalkState::Continue
            }
        },
    );
    if ctx.cancel.is_cancelled() {
        return Ok(super::cancelled_output());
    }
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    if results.is_empty() {
        let none = ToolOutput::ok(
            format!(
                "No files in {root_shown} contain any of: {}.",
                terms.join(", ")
            ),
            "no matches".to_string(),
        );
        return Ok(walk::own_note(none, skipped));
    }
    results.sort_by(|a, b| {
        b.terms
            .count_ones()
            .cmp(&a.terms.count_ones())
            .then(b.hits.cmp(&a.hits))
            .then_with(|| a.path.cmp(&b.path))
    });
    let mut out = format!(
        "{} files match; the top {} for [{}]:\n",
        results.len(),
        results.len().min(TOP_FILES),
        terms.join(", ")
    );
    for scored in results.iter().take(TOP_FILES) {
        out.push_str(&format!(
            "\n{} ({}/{} terms, {} hits)\n",
            paths::display(ctx, &scored.path),
            scored.terms.count_ones(),
            terms.len(),
            scored.hits
        ));
        for (_, number, text) in &scored.lines {
            out.push_str(&format!("  {number}: {text}\n"));
        }
    }
    let summary = format!("{} files match", results.len());
    Ok(walk::own_note(ToolOutput::ok(out, summary), skipped))
}

fn score_file(
    searcher: &mut Searcher,
    matcher: &RegexMatcher,
    path: &std::path::Path,
    root: &std::path::Path,
    terms: &[String],
) -> Option<Scored> {
    let rel = path
        .strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .to_lowercase();
    let mut sink = ScoreSink {
        terms,
        mask: 0,
        hits: 0,
        lines: Vec::new(),
        binary: false,
    };
    searcher.search_path(matcher, path, &mut sink).ok()?;
    if sink.binary {
        return None;
    }
    let path_mask = mask_of(&rel, terms).0;
    let mask = sink.mask | path_mask;
    if mask == 0 {
        return None;
    }
    let mut lines = sink.lines;
    lines.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    lines.truncate(LINES_PER_FILE);
    lines.sort_by_key(|l| l.1);
    Some(Scored {
        path: path.to_path_buf(),
        terms: mask,
        hits: sink.hits,
        lines,
    })
}

/// Which terms occur in `text` (already lower-cased), and how often in all.
fn mask_of(text: &str, terms: &[String]) -> (u32, u64) {
    let mut mask = 0u32;
    let mut hits = 0u64;
    for (i, term) in terms.iter().enumerate() {
        let n = text.matches(term.as_str()).count() as u64;
        if n > 0 {
            mask |= 1 << i;
            hits += n;
        }
    }
    (mask, hits)
}

struct ScoreSink<'a> {
    terms: &'a [String],
    mask: u32,
    hits: u64,
    /// The best lines so far, at most a few more than are shown.
    lines: Vec<(u32, u64, String)>,
    binary: bool,
}

impl Sink for ScoreSink<'_> {
    type Error = std::io::Error;

    /// A binary file is left out whole: its score would mean nothing.
    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let text = String::from_utf8_lossy(mat.bytes());
        let text = text.trim_end_matches('\n').trim_end_matches('\r');
        let (mask, hits) = mask_of(&text.to_lowercase(), self.terms);
        self.mask |= mask;
        self.hits += hits.max(1);
        let distinct = mask.count_ones();
        let worst = self.lines.iter().map(|l| l.0).min().unwrap_or(0);
        if self.lines.len() < LINES_PER_FILE || distinct > worst {
            let shown = match text.trim().char_indices().nth(MAX_LINE_CHARS) {
                None => text.trim().to_string(),
                Some((cut, _)) => format!("{}…", &text.trim()[..cut]),
            };
            self.lines
                .push((distinct, mat.line_number().unwrap_or(0), shown));
            if self.lines.len() > LINES_PER_FILE {
                // Drop the weakest, latest line: earlier lines win ties.
                self.lines.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                self.lines.truncate(LINES_PER_FILE);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::ctx_in;

    #[test]
    fn ranks_by_distinct_terms_then_hits() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/auth")).unwrap();
        std::fs::write(
            root.join("src/auth/session.rs"),
            "fn token() {}\nfn refresh_token() {}\n",
        )
        .unwrap();
        std::fs::write(root.join("src/many.rs"), "token token token token\ntoken\n").unwrap();
        std::fs::write(
            root.join("src/both.rs"),
            "x\nlet Token = expire(session);\n",
        )
        .unwrap();
        std::fs::write(root.join("src/none.rs"), "nothing here\n").unwrap();
        std::fs::write(root.join(".gitignore"), "ignored.rs\n").unwrap();
        std::fs::write(root.join("ignored.rs"), "token session expire\n").unwrap();
        let ctx = ctx_in(root);
        let out = run(json!({"keywords": ["token", "session", "expire"]}), &ctx).unwrap();
        let order: Vec<&str> = out
            .content
            .lines()
            .filter(|l| l.starts_with("src/"))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        assert_eq!(
            order,
            ["src/both.rs", "src/auth/session.rs", "src/many.rs"],
            "{}",
            out.content
        );
        assert!(
            out.content
                .contains("src/both.rs (3/3 terms, 3 hits)\n  2: let Token = expire(session);"),
            "{}",
            out.content
        );
        assert!(out.content.starts_with("3 files match"), "{}", out.content);
    }

    #[test]
    fn empty_keywords_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx_in(dir.path());
        assert!(run(json!({"keywords": [" "]}), &ctx).is_err());
        let out = run(json!({"keywords": ["zzz"]}), &ctx).unwrap();
        assert!(out.content.starts_with("No files"));
    }
}
