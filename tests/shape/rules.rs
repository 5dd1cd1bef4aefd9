//! The four rules, each turning what was measured into findings: a file
//! over [`FILE_LIMIT`] non-test lines, a function over [`FN_LIMIT`] lines,
//! a name or a dependency across a forbidden layer, and a daemon task
//! started outside its `TaskTracker`.

use crate::layers;
use crate::scan::FileShape;

/// Non-test lines a production file may have.
pub(crate) const FILE_LIMIT: usize = 600;
/// Lines a function may have, from its signature to its closing brace.
pub(crate) const FN_LIMIT: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rule {
    File,
    Fn,
    Layers,
    Spawn,
}

impl Rule {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Rule::File => "file",
            Rule::Fn => "fn",
            Rule::Layers => "layers",
            Rule::Spawn => "spawn",
        }
    }
}

/// One thing over a rule: a file, a function, or one name of a forbidden
/// module.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub rule: Rule,
    pub key: String,
    pub size: usize,
    /// `path:line`.
    pub at: String,
    /// What is wrong and what to do, in a sentence.
    pub what: String,
}

/// A production source file: its path from the workspace root, its crate
/// and its module path from the crate root (empty for a crate root or a
/// build script).
pub(crate) struct Source<'a> {
    pub path: &'a str,
    pub krate: &'a str,
    pub module: &'a [String],
}

/// The findings in one file.
pub(crate) fn file_findings(src: &Source, shape: &FileShape) -> Vec<Finding> {
    let mut out = Vec::new();
    if shape.non_test_lines > FILE_LIMIT {
        out.push(Finding {
            rule: Rule::File,
            key: src.path.to_string(),
            size: shape.non_test_lines,
            at: format!("{}:1", src.path),
            what: format!(
                "{} non-test lines, over the limit of {FILE_LIMIT}: split it into files named for the concepts they hold (a folder per concept), and keep its tests in a tests.rs",
                shape.non_test_lines
            ),
        });
    }
    for f in shape.fns.iter().filter(|f| f.lines > FN_LIMIT) {
        out.push(Finding {
            rule: Rule::Fn,
            key: format!("{}::{}", src.path, f.name),
            size: f.lines,
            at: format!("{}:{}", src.path, f.line),
            what: format!(
                "fn {} is {} lines, over the limit of {FN_LIMIT}: split it into named steps (or move the work to the component that owns the state)",
                f.name, f.lines
            ),
        });
    }
    out.extend(spawn_findings(src, shape));
    if let Some(from) = src.module.first() {
        for r in &shape.refs {
            if let Some(rule) = layers::forbidden(src.krate, from, &r.top) {
                out.push(Finding {
                    rule: Rule::Layers,
                    key: format!("{}->{}", src.path, r.top),
                    size: 1,
                    at: format!("{}:{}", src.path, r.line),
                    what: format!(
                        "`{from}` may not use `{}` (`{}`): {}",
                        r.top, r.path, rule.why
                    ),
                });
            }
        }
    }
    out
}

/// The daemon's tasks started by tokio's own functions, which its shutdown
/// cannot wait for: only `tasks.rs`, where the daemon's `TaskTracker`
/// lives, may call them.
fn spawn_findings(src: &Source, shape: &FileShape) -> Vec<Finding> {
    if src.krate != "agentd" || src.module.first().is_some_and(|m| m == "tasks") {
        return Vec::new();
    }
    shape
        .spawns
        .iter()
        .map(|(line, path)| Finding {
            rule: Rule::Spawn,
            key: format!("{}:{line}", src.path),
            size: 1,
            at: format!("{}:{line}", src.path),
            what: format!(
                "`{path}` starts a task the daemon's shutdown cannot wait for: start it with `crate::tasks::spawn` (or `spawn_blocking`, or `spawn_until_stopped` for one that lives as long as the daemon) so the TaskTracker drains it"
            ),
        })
        .collect()
}

/// The findings in one production crate's manifest: workspace crates it
/// depends on (in any dependency table) that its layer does not allow.
/// `members` are the workspace's package names.
pub(crate) fn crate_findings(
    manifest: &str,
    text: &str,
    name: &str,
    members: &[String],
) -> Vec<Finding> {
    let at = |line: usize| format!("{manifest}:{line}");
    let Some(rule) = layers::CRATES.iter().find(|r| r.name == name) else {
        return vec![Finding {
            rule: Rule::Layers,
            key: format!("{manifest}->{name}"),
            size: 1,
            at: at(1),
            what: format!(
                "crate `{name}` has no layer: add it to CRATES in tests/shape/layers.rs with the workspace crates it may use and why"
            ),
        }];
    };
    let mut out = Vec::new();
    for (key, dep) in dependencies(text) {
        if dep == name || !members.contains(&dep) || rule.may_use.contains(&dep.as_str()) {
            continue;
        }
        let line = text
            .lines()
            .position(|l| {
                l.trim_start()
                    .strip_prefix(key.as_str())
                    .is_some_and(|rest| rest.starts_with(['.', ' ', '=']))
            })
            .map_or(1, |i| i + 1);
        out.push(Finding {
            rule: Rule::Layers,
            key: format!("{manifest}->{dep}"),
            size: 1,
            at: at(line),
            what: format!("`{name}` may not depend on `{dep}`: {}", rule.why),
        });
    }
    out
}

/// Every dependency of a manifest, as (key, package name), from
/// `[dependencies]`, `[dev-dependencies]`, `[build-dependencies]` and
/// their `[target.'cfg(…)'.*]` forms.
fn dependencies(text: &str) -> Vec<(String, String)> {
    let Ok(manifest) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    let mut tables = vec![&manifest];
    if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
        tables.extend(targets.values().filter_map(|t| t.as_table()));
    }
    let mut out = Vec::new();
    for table in tables {
        for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(deps) = table.get(kind).and_then(|d| d.as_table()) else {
                continue;
            };
            for (key, value) in deps {
                let package = value.get("package").and_then(|p| p.as_str()).unwrap_or(key);
                out.push((key.clone(), package.to_string()));
            }
        }
    }
    out
}
