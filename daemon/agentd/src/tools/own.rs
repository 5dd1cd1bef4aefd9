//! agentd's own files: its configuration and credentials, its data (the
//! store, checkpoint copies, background shells' output), its socket and
//! log, and every process's `/proc/<pid>/environ`. No file tool reads,
//! writes, lists or searches them, in any permission mode and whatever the
//! allow rules say: what a tool reads goes into the transcript, and from
//! there into the store, exports and every attached client's screen.
//!
//! The check is made on the fully resolved path (`paths::resolve` calls
//! it), so a symbolic link or `/proc/self/root/...` leads nowhere else; a
//! directory walk (glob, grep, keyword_search) leaves these out and says
//! so.

use std::path::{Path, PathBuf};

/// The paths no file tool may touch (each with everything under it).
#[derive(Debug, Default, Clone)]
pub(crate) struct OwnFiles {
    /// Resolved (absolute, symbolic links followed), sorted.
    paths: Vec<PathBuf>,
}

impl OwnFiles {
    /// The daemon's own files and directories, as the daemon names them
    /// (relative ones are taken from the daemon's working directory). Each
    /// is kept as given and as resolved, so a later symbolic link to it is
    /// seen through, and one that does not exist yet is covered once made.
    pub(crate) fn new(paths: impl IntoIterator<Item = PathBuf>) -> OwnFiles {
        let mut own = Vec::new();
        for path in paths {
            let Ok(absolute) = std::path::absolute(&path) else {
                continue;
            };
            let absolute = super::paths::normalize(&absolute);
            if let Ok(resolved) = super::paths::resolve_path(&absolute) {
                own.push(resolved);
            }
            own.push(absolute);
        }
        own.sort();
        own.dedup();
        // The root would forbid everything: a daemon never names it.
        own.retain(|p| p.parent().is_some());
        OwnFiles { paths: own }
    }

    /// The paths, as given and as resolved.
    pub(crate) fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Why no tool may touch `resolved` (a path already resolved), or None
    /// when it is none of agentd's own.
    pub(crate) fn refusal(&self, resolved: &Path) -> Option<String> {
        if is_environ(resolved) {
            return Some(format!(
                "{} is a process's environment, which holds agentd's credentials; no tool may \
                 read it",
                resolved.display()
            ));
        }
        self.owner_of(resolved).map(|own| {
            format!(
                "{} is agentd's own configuration or data (under {}); no tool may read or change \
                 it",
                resolved.display(),
                own.display()
            )
        })
    }

    /// Whether a walk must leave `path` (and what is under it) out.
    pub(crate) fn contains(&self, path: &Path) -> bool {
        is_environ(path) || self.owner_of(path).is_some()
    }

    fn owner_of(&self, path: &Path) -> Option<&Path> {
        self.paths
            .iter()
            .find(|own| path.starts_with(own))
            .map(PathBuf::as_path)
    }
}

/// `/proc/<pid>/environ`, `/proc/<pid>/task/<tid>/environ` and the like:
/// any `environ` under `/proc`.
fn is_environ(path: &Path) -> bool {
    path.starts_with("/proc") && path.file_name().is_some_and(|n| n == "environ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_paths_and_everything_under_them_are_refused_through_links_too() {
        let top = tempfile::tempdir().unwrap();
        let top = top.path().canonicalize().unwrap();
        let data = top.join("data");
        std::fs::create_dir(&data).unwrap();
        std::os::unix::fs::symlink(&data, top.join("link")).unwrap();
        let own = OwnFiles::new([top.join("link"), top.join("config/credentials.toml")]);
        assert!(own.refusal(&data.join("db/conf")).is_some());
        assert!(own.refusal(&data).is_some());
        assert!(own.refusal(&top.join("config/credentials.toml")).is_some());
        assert!(own.refusal(&top.join("config/other.toml")).is_none());
        assert!(own.refusal(&top.join("database")).is_none());
        let why = own.refusal(Path::new("/proc/1234/environ")).unwrap();
        assert!(why.contains("no tool may read it"), "{why}");
        assert!(own.contains(Path::new("/proc/1/task/1/environ")));
        assert!(!own.contains(Path::new("/proc/1/status")));
    }
}
