//! The shape check (issue 40, point 7): CI fails when the production code
//! regrows what the consolidation took apart.
//!
//! - `file`: a production `.rs` file over 600 non-test lines;
//! - `fn`: a function over 100 lines, from its signature to its closing brace
//!   (methods and nested functions too);
//! - `layers`: a crate depending on a workspace crate its layer may not use
//!   (the core and the protocol on none, a client on no daemon crate), or a
//!   daemon module naming one it sits below (`store` ↛ the executors,
//!   `runtime` ↛ `grpc`, `checkpoints` ↛ `runtime`, `config` ↛ `llm`);
//!   the table with the reasons is `layers.rs`;
//! - `spawn`: a task of the daemon (`agentd`) started with `tokio::spawn`,
//!   `tokio::task::spawn_blocking` (or `.spawn_blocking` on a handle)
//!   outside `tasks.rs`: its shutdown waits only for the tasks its
//!   `TaskTracker` knows.
//!
//! Production code is every member outside `tests/`: its `src/` and its
//! `build.rs`, less test code (`tests.rs`, `tests/` folders, items under
//! `#[cfg(test)]` or `#[test]`, and the files of `#[cfg(test)] mod x;`).
//! The sources are parsed with `syn`, so an item is measured by where it
//! starts and ends, and `crate::`/`super::` paths are resolved to the top
//! module they name.
//!
//! There is no allow-list: the ratchet that held the splits of issue 40
//! while they landed shrank to empty and was removed with its last entry.
//! A finding is fixed, not listed.

mod layers;
mod rules;
mod scan;
mod tree;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

#[test]
fn the_production_tree_keeps_its_shape() {
    let root = workspace_root();
    let findings = tree::findings(&root).unwrap_or_else(|e| panic!("shape check: {e}"));
    let problems: Vec<String> = findings
        .iter()
        .map(|f| format!("{}: {} rule: {}", f.at, f.rule.name(), f.what))
        .collect();
    assert!(
        problems.is_empty(),
        "\nthe shape check found {} problem(s) (rules and reasons: tests/shape/main.rs):\n\n{}\n",
        problems.len(),
        problems.join("\n")
    );
}
