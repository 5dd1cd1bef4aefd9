//! Trusted project files: pinning them when a directory is trusted, and
//! reading one only while it is still as it was pinned.

use std::path::{Path, PathBuf};

use super::PROJECT_FILE;
use crate::store::{FilePin, TrustRecord};

/// The text of the project file `file` when one of `trusts` pinned it as
/// it is now (its bytes and owner), read once so what is checked is what
/// is parsed; else why not.
pub(super) fn read_pinned<'a>(
    file: &Path,
    trusts: impl Iterator<Item = &'a TrustRecord>,
) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let bytes = std::fs::read(file).map_err(|e| e.to_string())?;
    let uid = std::fs::metadata(file).map_err(|e| e.to_string())?.uid();
    check_pin(file, &sha256_hex(&bytes), uid, trusts)?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8".to_string())
}

/// Whether one of `trusts` pinned the project file `file` with these
/// bytes (their SHA-256) and this owner; else why not.
pub(crate) fn check_pin<'a>(
    file: &Path,
    sha256: &str,
    uid: u32,
    trusts: impl Iterator<Item = &'a TrustRecord>,
) -> Result<(), String> {
    let pins: Vec<&FilePin> = trusts
        .flat_map(|t| t.pinned.iter())
        .filter(|p| p.path == file)
        .collect();
    if pins.is_empty() {
        return Err("it was not there when its directory was trusted".into());
    }
    if !pins.iter().any(|p| p.sha256 == sha256) {
        return Err("it changed since its directory was trusted".into());
    }
    if !pins.iter().any(|p| p.sha256 == sha256 && p.uid == uid) {
        return Err(format!(
            "its owner changed since its directory was trusted (now uid {uid})"
        ));
    }
    Ok(())
}

/// Most project files one `agent trust` pins: a directory with more
/// projects than this is better trusted project by project.
const MAX_PINS: usize = 256;

/// How deep under a trusted directory project files are looked for.
const PIN_DEPTH: usize = 8;

/// The project files (`.agentd/config.toml`, and the sub-agent types in
/// `.agents/agents/*.md`) at or under `dir` (canonical) as they are now, for
/// `agent trust`: ripgrep's walker, honouring `.gitignore` so `target/`
/// and `node_modules/` are not searched, symbolic links not followed, at
/// most [`PIN_DEPTH`] levels and [`MAX_PINS`] files.
pub(crate) fn pins_under(dir: &Path) -> Vec<FilePin> {
    use std::os::unix::fs::MetadataExt;
    let walk = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .parents(false)
        .require_git(false)
        .max_depth(Some(PIN_DEPTH))
        .filter_entry(|e| e.file_name() != ".git")
        .build();
    let mut pins = Vec::new();
    for entry in walk.flatten() {
        let path = entry.path();
        if !path.ends_with(PROJECT_FILE) && !crate::agent_types::is_project_file(path) {
            continue;
        }
        let (Ok(bytes), Ok(meta)) = (std::fs::read(path), std::fs::symlink_metadata(path)) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        pins.push(FilePin {
            path: path.to_path_buf(),
            sha256: sha256_hex(&bytes),
            uid: meta.uid(),
        });
        if pins.len() == MAX_PINS {
            break;
        }
    }
    pins
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The nearest `.agentd/config.toml` at or above `cwd`.
pub(super) fn project_file(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .map(|d| d.join(PROJECT_FILE))
        .find(|f| f.is_file())
}
