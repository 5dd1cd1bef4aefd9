//! The directory walk shared by glob, grep and keyword_search.
//!
//! It is ripgrep's walker (`ignore`), run in parallel, with the same idea of
//! which files count: `.gitignore`, `.ignore` and git's exclude files are
//! honoured even outside a git repository (a freshly unpacked project has no
//! `.git` yet, and its `target/` is still noise), and symbolic links are not
//! followed, so a link cannot lead a search outside the allowed directories.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder};

use ignore::overrides::Override;
use ignore::{DirEntry, WalkBuilder, WalkState};
use tokio_util::sync::CancellationToken;

use super::{OwnFiles, ToolContext, ToolError, ToolOutput, paths};

/// Which files a walk yields.
#[derive(Debug, Clone, Default)]
pub(crate) struct WalkOptions {
    /// Yield hidden files too (the `.git` directory itself never is).
    pub(crate) hidden: bool,
    /// Glob filters in ripgrep's `-g` sense.
    pub(crate) overrides: Option<Override>,
}

/// Where a search starts (the `path` input, the working directory by
/// default), resolved and checked, with how it is shown.
pub(crate) fn search_root(
    ctx: &ToolContext,
    path: Option<&str>,
) -> Result<(PathBuf, String), ToolError> {
    let root = paths::resolve(ctx, path.unwrap_or("."))?;
    let shown = paths::display(ctx, &root);
    if !root.exists() {
        return Err(ToolError::new(format!("path not found: {shown}")));
    }
    Ok((root, shown))
}

/// A line searcher with ripgrep's defaults: line numbers, and a file that
/// has a NUL byte is binary and abandoned.
pub(crate) fn searcher(context_lines: usize) -> Searcher {
    SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(0))
        .before_context(context_lines)
        .after_context(context_lines)
        .build()
}

/// Calls a visitor for every regular file under `root` (or `root` itself
/// when it is a file), in parallel. `make` builds one visitor per worker
/// thread, so visitors keep per-thread state (a searcher, a buffer) without
/// locking. A visitor returns `WalkState::Quit` to stop the whole walk; the
/// walk also stops when `cancel` fires. agentd's own files (`own`) are
/// left out; the answer says whether any were (see [`own_note`]).
#[must_use = "say when agentd's own files were left out"]
pub(crate) fn files<'s, M, V>(
    root: &Path,
    options: &WalkOptions,
    own: &Arc<OwnFiles>,
    cancel: &CancellationToken,
    mut make: M,
) -> bool
where
    M: FnMut() -> V,
    V: FnMut(&DirEntry) -> WalkState + Send + 's,
{
    let skipped = Arc::new(AtomicBool::new(false));
    let mut builder = WalkBuilder::new(root);
    let (own, skipped_own) = (own.clone(), skipped.clone());
    builder
        .hidden(!options.hidden)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |entry| {
            if own.contains(entry.path()) {
                skipped_own.store(true, Ordering::Relaxed);
                return false;
            }
            entry.file_name() != ".git"
        });
    if let Some(overrides) = &options.overrides {
        builder.overrides(overrides.clone());
    }
    builder.build_parallel().run(|| {
        let mut visit = make();
        let cancel = cancel.clone();
        Box::new(move |entry| {
            if cancel.is_cancelled() {
                return WalkState::Quit;
            }
            match entry {
                Ok(entry) if entry.file_type().is_some_and(|t| t.is_file()) => visit(&entry),
                // Unreadable directories and broken entries are skipped, as
                // ripgrep does; one bad directory must not sink a search.
                _ => WalkState::Continue,
            }
        })
    });
    skipped.load(Ordering::Relaxed)
}

/// Adds to a walk's result that agentd's own files were left out, when
/// they were (`skipped`, what [`files`] answered).
pub(crate) fn own_note(mut output: ToolOutput, skipped: bool) -> ToolOutput {
    if skipped {
        if !output.content.is_empty() && !output.content.ends_with('\n') {
            output.content.push('\n');
        }
        output.content.push_str(
            "[agentd's own configuration and data below this directory were left out: no tool \
             may read them]\n",
        );
    }
    output
}

/// Gathers a worker's results and hands them to the shared list in batches,
/// and once more when the worker ends, so nothing found is lost and the lock
/// is taken rarely.
pub(crate) struct Collector<'a, T> {
    local: Vec<T>,
    into: &'a Mutex<Vec<T>>,
}

impl<'a, T> Collector<'a, T> {
    pub(crate) fn new(into: &'a Mutex<Vec<T>>) -> Self {
        Collector {
            local: Vec::new(),
            into,
        }
    }

    pub(crate) fn push(&mut self, item: T) {
        self.local.push(item);
        if self.local.len() >= 256 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.local.is_empty() {
            return;
        }
        // A poisoned lock only means another worker panicked; its partial
        // results are still worth keeping.
        let mut shared = self.into.lock().unwrap_or_else(|p| p.into_inner());
        shared.append(&mut self.local);
    }
}

impl<T> Drop for Collector<'_, T> {
    fn drop(&mut self) {
        self.flush();
    }
}
