//! The production tree: every workspace member outside a `tests/` folder,
//! its manifest, every `.rs` under its `src/` and its `build.rs` — less test
//! files (`tests.rs`, anything under a `tests/` folder, and the files of
//! `#[cfg(test)] mod x;`). Generated code lives in OUT_DIR and is never read.

use crate::rules::{self, Finding, Source};
use crate::scan::{self, FileShape};
use std::fs;
use std::path::{Path, PathBuf};

/// Everything the production tree under `root` breaks.
pub(crate) fn findings(root: &Path) -> Result<Vec<Finding>, String> {
    let workspace = read(&root.join("Cargo.toml"))?;
    let workspace: toml::Table = workspace.parse().map_err(|e| format!("Cargo.toml: {e}"))?;
    let dirs: Vec<String> = workspace
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .ok_or("Cargo.toml has no [workspace] members")?
        .iter()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect();
    let mut members = Vec::new();
    for dir in &dirs {
        let manifest = format!("{dir}/Cargo.toml");
        let text = read(&root.join(&manifest))?;
        let table: toml::Table = text.parse().map_err(|e| format!("{manifest}: {e}"))?;
        let name = table
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .ok_or(format!("{manifest} has no package name"))?
            .to_string();
        members.push((dir.clone(), manifest, text, name));
    }
    let names: Vec<String> = members.iter().map(|m| m.3.clone()).collect();
    let mut out = Vec::new();
    for (dir, manifest, text, name) in &members {
        if is_test_path(dir) {
            continue;
        }
        out.extend(rules::crate_findings(manifest, text, name, &names));
        out.extend(crate_sources(root, dir, name)?);
    }
    Ok(out)
}

/// Whether a path is test code by where it is or what it is called.
pub(crate) fn is_test_path(path: &str) -> bool {
    path.split('/')
        .any(|part| part == "tests" || part == "tests.rs")
}

struct Scanned {
    path: String,
    module: Vec<String>,
    shape: FileShape,
}

/// The findings in one crate's source files.
fn crate_sources(root: &Path, dir: &str, krate: &str) -> Result<Vec<Finding>, String> {
    let mut files = Vec::new();
    rust_files(&root.join(dir).join("src"), &mut files)?;
    let mut scanned = Vec::new();
    for file in files {
        let path = relative(root, &file);
        let src_rel = relative(&root.join(dir).join("src"), &file);
        scanned.push(scan_file(&file, path, module_of(&src_rel))?);
    }
    let build = root.join(dir).join("build.rs");
    if build.exists() {
        scanned.push(scan_file(&build, relative(root, &build), Vec::new())?);
    }
    let test_mods: Vec<Vec<String>> = scanned
        .iter()
        .flat_map(|s| s.shape.test_mods.iter().cloned())
        .collect();
    let mut out = Vec::new();
    for s in &scanned {
        if is_test_path(&s.path) || test_mods.iter().any(|t| s.module.starts_with(t)) {
            continue;
        }
        let source = Source {
            path: &s.path,
            krate,
            module: &s.module,
        };
        out.extend(rules::file_findings(&source, &s.shape));
    }
    Ok(out)
}

fn scan_file(file: &Path, path: String, module: Vec<String>) -> Result<Scanned, String> {
    let text = read(file)?;
    let shape = scan::scan(&text, &module).map_err(|e| {
        let at = e.span().start();
        format!("{path}:{}:{}: cannot parse: {e}", at.line, at.column + 1)
    })?;
    Ok(Scanned {
        path,
        module,
        shape,
    })
}

/// The module path of a file from its crate's `src/`: `store/journal.rs`
/// and `store/journal/mod.rs` are `store::journal`; `lib.rs`, `main.rs`
/// and `bin/*.rs` are crate roots.
pub(crate) fn module_of(src_rel: &str) -> Vec<String> {
    let stem = src_rel.strip_suffix(".rs").unwrap_or(src_rel);
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return Vec::new();
    }
    if parts.last().is_some_and(|p| p == "mod")
        || (parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main"))
    {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn relative(base: &Path, path: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}
