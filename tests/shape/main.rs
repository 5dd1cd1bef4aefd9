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
//!   the table with the reasons is `layers.rs`.
//!
//! Production code is every member outside `tests/`: its `src/` and its
//! `build.rs`, less test code (`tests.rs`, `tests/` folders, items under
//! `#[cfg(test)]` or `#[test]`, and the files of `#[cfg(test)] mod x;`).
//! The sources are parsed with `syn`, so an item is measured by where it
//! starts and ends, and `crate::`/`super::` paths are resolved to the top
//! module they name.
//!
//! What breaks a rule today is listed in `.ci/shape-allow.txt` (see
//! `allow.rs`), a ratchet that only shrinks. `SHAPE_BLESS=1` rewrites it
//! from the tree instead of checking it; CI (`CI=true`) refuses to.

mod allow;
mod layers;
mod rules;
mod scan;
mod tree;

#[cfg(test)]
mod tests;

use std::io::Write;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

#[test]
fn the_production_tree_keeps_its_shape() {
    let root = workspace_root();
    let findings = tree::findings(&root).unwrap_or_else(|e| panic!("shape check: {e}"));
    let groups = allow::group(findings);
    let list = root.join(allow::PATH);
    let text = std::fs::read_to_string(&list).unwrap_or_default();
    let entries = allow::parse(&text).unwrap_or_else(|e| panic!("{e}"));

    if std::env::var_os("SHAPE_BLESS").is_some() {
        assert!(
            !in_ci(),
            "SHAPE_BLESS is refused in CI: the allow-list is written by a person and reviewed"
        );
        // Straight to stderr: the test harness captures `eprintln!` of a
        // passing test, and whoever blesses must see what changed.
        let mut stderr = std::io::stderr();
        for change in allow::changes(&groups, &entries) {
            let _ = writeln!(stderr, "{}: {change}", allow::PATH);
        }
        std::fs::write(&list, allow::render(&groups))
            .unwrap_or_else(|e| panic!("{}: {e}", list.display()));
        return;
    }

    let problems = allow::check(&groups, &entries);
    assert!(
        problems.is_empty(),
        "\nthe shape check found {} problem(s) (rules and reasons: tests/shape/main.rs):\n\n{}\n",
        problems.len(),
        problems.join("\n")
    );
}
