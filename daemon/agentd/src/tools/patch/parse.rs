//! Reading a unified diff as a model writes it: files and hunks, with
//! preamble skipped and hunk counts ignored (see the module docs of `patch`).
//! File headers are read by the core's [`file_header`], as the permission
//! check reads them.

use agentd_core::unified_diff::file_header;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Context(String),
    Remove(String),
    Add(String),
}

#[derive(Debug, Clone)]
pub(super) struct Hunk {
    pub(super) header: String,
    /// 1-based line of the first old line; `None` when the header had no
    /// usable numbers.
    pub(super) old_start: Option<usize>,
    lines: Vec<Line>,
    /// "\ No newline at end of file" after the hunk's last old line.
    pub(super) old_no_eol: bool,
    /// The same after its last new line.
    pub(super) new_no_eol: bool,
}

impl Hunk {
    pub(super) fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(s) | Line::Remove(s) => Some(s.as_str()),
                Line::Add(_) => None,
            })
            .collect()
    }

    pub(super) fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(s) | Line::Add(s) => Some(s.as_str()),
                Line::Remove(_) => None,
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
pub(super) struct FilePatch {
    /// `None` is /dev/null.
    pub(super) old: Option<String>,
    pub(super) new: Option<String>,
    pub(super) hunks: Vec<Hunk>,
}

impl FilePatch {
    pub(super) fn label(&self) -> &str {
        self.new
            .as_deref()
            .or(self.old.as_deref())
            .unwrap_or("/dev/null")
    }
}

/// The files a patch names, for one-line summaries.
pub(crate) fn touched_files(patch: &str) -> Vec<String> {
    parse(patch)
        .unwrap_or_default()
        .iter()
        .map(|f| f.label().to_string())
        .collect()
}

/// Splits a patch into files and hunks. Anything before the first file
/// header is preamble (git's `diff --git` and `index` lines, prose, a code
/// fence) and skipped; after it, a line that is neither part of a hunk nor a
/// known header line is an error, because skipping it could silently drop a
/// removal the model meant.
pub(super) fn parse(text: &str) -> Result<Vec<FilePatch>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut files: Vec<FilePatch> = Vec::new();
    let mut hunk: Option<Hunk> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(header) = lines.get(i + 1).and_then(|next| file_header(line, next)) {
            finish_hunk(&mut hunk, &mut files);
            files.push(FilePatch {
                old: header.old,
                new: header.new,
                hunks: Vec::new(),
            });
            i += 2;
            continue;
        }
        if line.starts_with("@@") {
            finish_hunk(&mut hunk, &mut files);
            if files.is_empty() {
                return Err(format!(
                    "line {} of the patch: the hunk header `{}` comes before any file header \
                     (`--- a/path` and `+++ b/path`)",
                    i + 1,
                    clip(line)
                ));
            }
            hunk = Some(Hunk {
                header: line.to_string(),
                old_start: hunk_old_start(line),
                lines: Vec::new(),
                old_no_eol: false,
                new_no_eol: false,
            });
            i += 1;
            continue;
        }
        if let Some(h) = hunk.as_mut() {
            let parsed = match line.as_bytes().first() {
                Some(b' ') => Some(Line::Context(line[1..].to_string())),
                Some(b'-') => Some(Line::Remove(line[1..].to_string())),
                Some(b'+') => Some(Line::Add(line[1..].to_string())),
                // A blank context line whose leading space got lost.
                None => Some(Line::Context(String::new())),
                _ => None,
            };
            if let Some(parsed) = parsed {
                h.lines.push(parsed);
                i += 1;
                continue;
            }
            if line.starts_with('\\') {
                match h.lines.last() {
                    Some(Line::Remove(_)) => h.old_no_eol = true,
                    Some(Line::Add(_)) => h.new_no_eol = true,
                    Some(Line::Context(_)) => {
                        h.old_no_eol = true;
                        h.new_no_eol = true;
                    }
                    None => {}
                }
                i += 1;
                continue;
            }
        }
        finish_hunk(&mut hunk, &mut files);
        if files.is_empty() || is_meta_line(line) {
            i += 1;
            continue;
        }
        return Err(format!(
            "line {} of the patch is not part of a hunk: `{}`. Every hunk line starts with ' ' \
             (context), '-' (removed) or '+' (added)",
            i + 1,
            clip(line)
        ));
    }
    finish_hunk(&mut hunk, &mut files);
    Ok(files)
}

fn finish_hunk(hunk: &mut Option<Hunk>, files: &mut [FilePatch]) {
    let (Some(mut h), Some(file)) = (hunk.take(), files.last_mut()) else {
        return;
    };
    // Blank lines after a hunk are usually separators; dropping trailing
    // context never changes where or how a hunk applies.
    while h.lines.last() == Some(&Line::Context(String::new())) {
        h.lines.pop();
    }
    if !h.lines.is_empty() {
        file.hunks.push(h);
    }
}

/// Lines git and people put between file sections that carry no content.
fn is_meta_line(line: &str) -> bool {
    const PREFIXES: [&str; 14] = [
        "diff ",
        "index ",
        "new file mode",
        "deleted file mode",
        "old mode",
        "new mode",
        "similarity index",
        "dissimilarity index",
        "rename from",
        "rename to",
        "copy from",
        "copy to",
        "Binary files",
        "```",
    ];
    line.trim().is_empty() || PREFIXES.iter().any(|p| line.starts_with(p))
}

fn clip(line: &str) -> String {
    crate::tools::one_line(line, 80)
}

fn hunk_old_start(header: &str) -> Option<usize> {
    let inner = header.strip_prefix("@@")?;
    let inner = &inner[..inner.find("@@").unwrap_or(inner.len())];
    let old = inner.split_whitespace().find(|t| t.starts_with('-'))?;
    old[1..].split(',').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touched_files_lists_targets() {
        let patch = "--- a/x.rs\n+++ b/x.rs\n@@ -1 +1 @@\n-a\n+b\n--- a/gone.rs\n+++ /dev/null\n";
        assert_eq!(touched_files(patch), ["x.rs", "gone.rs"]);
    }
}
