//! Which paths of a work tree changed, learnt from inotify instead of a
//! walk: one watch per directory git would snapshot (ignored directories
//! and `.git` are left out), added as directories appear.
//!
//! What inotify cannot say precisely is reported as [`Drained::lost`]: an
//! overflowed queue, a directory moved (its watches would name the wrong
//! paths), the top itself gone. The caller then compares whole snapshots
//! instead (see `tracked.rs`).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

/// The events asked for on each directory: content and names. Attribute
/// changes are not followed (a checkpoint keeps contents, not modes).
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// The inotify watches on one work tree.
#[derive(Debug)]
pub(super) struct DirWatch {
    fd: Inotify,
    top: PathBuf,
    /// Each watched directory, relative to the top ("" is the top).
    dirs: HashMap<WatchDescriptor, String>,
}

/// What happened since the last drain.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Drained {
    /// Files (relative to the top) created, written, removed or renamed.
    pub paths: BTreeSet<String>,
    /// Directories that appeared (created or moved in); not watched yet.
    pub new_dirs: Vec<String>,
    /// Some change may not be in `paths`.
    pub lost: bool,
}

/// `rel` joined to `name` the way git names paths.
fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// The relative name of `path` under `top`, as git spells it (None when
/// it is not valid UTF-8 or not under `top`).
fn relative(top: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(top).ok()?;
    let text = rel.to_str()?;
    Some(text.to_string())
}

/// Whether `dir` is the top of another work tree (a submodule, a clone):
/// its files belong to that repository, which a snapshot of this one
/// records only as a commit id, so they are not watched here.
fn nested_repository(dir: &Path) -> bool {
    dir.join(".git").symlink_metadata().is_ok()
}

impl DirWatch {
    /// Watches every directory of the work tree at `top` that git would
    /// look into. An error (the per-user watch limit reached, no inotify)
    /// means the work tree cannot be watched.
    pub(super) fn new(top: &Path) -> Result<DirWatch, String> {
        let fd = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| format!("inotify: {e}"))?;
        let mut watch = DirWatch {
            fd,
            top: top.to_path_buf(),
            dirs: HashMap::new(),
        };
        watch.add_tree("")?;
        Ok(watch)
    }

    /// How many directories are watched.
    pub(super) fn watched(&self) -> usize {
        self.dirs.len()
    }

    /// Watches the directory `rel` and every one below it that is not
    /// ignored; returns the files found in them (which a caller that just
    /// saw `rel` appear counts as changed).
    pub(super) fn add_tree(&mut self, rel: &str) -> Result<Vec<String>, String> {
        let root = if rel.is_empty() {
            self.top.clone()
        } else {
            self.top.join(rel)
        };
        if !rel.is_empty() && nested_repository(&root) {
            return Ok(Vec::new());
        }
        let top = self.top.clone();
        let walk = ignore::WalkBuilder::new(&root)
            .hidden(false)
            .ignore(false)
            .parents(true)
            .git_ignore(true)
            .git_exclude(true)
            .git_global(true)
            .require_git(false)
            .follow_links(false)
            .filter_entry(move |entry| {
                entry.file_name() != ".git"
                    && !(entry.file_type().is_some_and(|t| t.is_dir())
                        && entry.path() != top
                        && nested_repository(entry.path()))
            })
            .build();
        let mut files = Vec::new();
        for entry in walk {
            let Ok(entry) = entry else { continue };
            let Some(kind) = entry.file_type() else {
                continue;
            };
            let Some(rel) = relative(&self.top, entry.path()) else {
                continue;
            };
            if kind.is_dir() {
                match self.fd.add_watch(entry.path(), mask()) {
                    Ok(wd) => {
                        self.dirs.insert(wd, rel);
                    }
                    // Gone again already: its removal is an event of its
                    // parent.
                    Err(Errno::ENOENT | Errno::ENOTDIR) => {}
                    Err(e) => {
                        return Err(format!(
                            "cannot watch {}: {e} (fs.inotify.max_user_watches?)",
                            entry.path().display()
                        ));
                    }
                }
            } else if kind.is_file() {
                files.push(rel);
            }
        }
        Ok(files)
    }

    /// Reads every event queued so far (a command's events are queued by
    /// the time it has exited).
    pub(super) fn drain(&mut self) -> Drained {
        let mut out = Drained::default();
        loop {
            let events = match self.fd.read_events() {
                Ok(events) if events.is_empty() => break,
                Ok(events) => events,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!("inotify on {}: {e}", self.top.display());
                    out.lost = true;
                    break;
                }
            };
            for event in events {
                self.take(event, &mut out);
            }
        }
        // The kernel may tell a removed top only once nothing holds it.
        if !out.lost && std::fs::symlink_metadata(&self.top).is_err() {
            out.lost = true;
        }
        out
    }

    fn take(&mut self, event: nix::sys::inotify::InotifyEvent, out: &mut Drained) {
        let mask = event.mask;
        if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            out.lost = true;
            return;
        }
        if mask.contains(AddWatchFlags::IN_IGNORED) {
            if self
                .dirs
                .remove(&event.wd)
                .is_some_and(|rel| rel.is_empty())
            {
                out.lost = true;
            }
            return;
        }
        let Some(dir) = self.dirs.get(&event.wd) else {
            return;
        };
        let Some(name) = event.name else {
            // An event of the directory itself: the top gone or moved
            // loses everything; a directory below moved is seen (and
            // lost) as its parent's `IN_MOVED_FROM`.
            if dir.is_empty()
                && mask.intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF)
            {
                out.lost = true;
            }
            return;
        };
        let Some(name) = name.to_str() else {
            // Git names such a file; a checkpoint cannot: say so.
            out.lost = true;
            return;
        };
        let rel = join(dir, name);
        if rel == ".git" {
            return;
        }
        if mask.contains(AddWatchFlags::IN_ISDIR) {
            if mask.contains(AddWatchFlags::IN_MOVED_FROM) {
                // Its files left without an event each, and its watches
                // would now report under the wrong names.
                out.lost = true;
            } else if mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO) {
                out.new_dirs.push(rel);
            }
            return;
        }
        out.paths.insert(rel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
        std::fs::create_dir_all(dir.path().join("target/debug")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git/objects")).unwrap();
        std::fs::write(dir.path().join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::write(dir.path().join("src/a.rs"), "a").unwrap();
        std::fs::write(dir.path().join("src/deep/b.rs"), "b").unwrap();
        dir
    }

    #[test]
    fn ignored_directories_and_git_are_not_watched() {
        let dir = tree();
        let watch = DirWatch::new(dir.path()).unwrap();
        let mut watched: Vec<&str> = watch.dirs.values().map(String::as_str).collect();
        watched.sort();
        assert_eq!(watched, ["", "src", "src/deep"]);
    }

    #[test]
    fn a_nested_repository_is_not_watched() {
        let dir = tree();
        std::fs::create_dir_all(dir.path().join("vendor/lib/.git")).unwrap();
        std::fs::create_dir_all(dir.path().join("vendor/lib/src")).unwrap();
        let mut watch = DirWatch::new(dir.path()).unwrap();
        let mut watched: Vec<&str> = watch.dirs.values().map(String::as_str).collect();
        watched.sort();
        assert_eq!(watched, ["", "src", "src/deep", "vendor"]);
        // A clone made later is left out too.
        std::fs::create_dir_all(dir.path().join("clone/.git")).unwrap();
        std::fs::write(dir.path().join("clone/file"), "f").unwrap();
        assert_eq!(watch.drain().new_dirs, ["clone"]);
        assert!(watch.add_tree("clone").unwrap().is_empty());
    }

    /// A file's close can reach inotify late: a thread of this test
    /// process forking (other tests start git) holds the open file until
    /// the child's exec. So a drain may also name a file written earlier
    /// in the test; never any other.
    fn only_of(drained: &Drained, written: &[&str]) {
        assert!(!drained.lost, "{drained:?}");
        assert!(drained.new_dirs.is_empty(), "{drained:?}");
        for path in &drained.paths {
            assert!(written.contains(&path.as_str()), "{path} in {drained:?}");
        }
    }

    const TREE_FILES: [&str; 3] = [".gitignore", "src/a.rs", "src/deep/b.rs"];

    #[test]
    fn writes_creations_and_removals_are_named() {
        let dir = tree();
        let mut watch = DirWatch::new(dir.path()).unwrap();
        only_of(&watch.drain(), &TREE_FILES);
        std::fs::write(dir.path().join("src/a.rs"), "changed").unwrap();
        std::fs::write(dir.path().join("new.txt"), "n").unwrap();
        std::fs::remove_file(dir.path().join("src/deep/b.rs")).unwrap();
        std::fs::rename(dir.path().join("new.txt"), dir.path().join("moved.txt")).unwrap();
        // Ignored directories send nothing.
        std::fs::write(dir.path().join("target/debug/x"), "x").unwrap();
        std::fs::write(dir.path().join(".git/objects/o"), "o").unwrap();
        let drained = watch.drain();
        let expected = ["moved.txt", "new.txt", "src/a.rs", "src/deep/b.rs"];
        for path in expected {
            assert!(drained.paths.contains(path), "{path} in {drained:?}");
        }
        let written = [&TREE_FILES[..], &expected[..]].concat();
        only_of(&drained, &written);
        only_of(&watch.drain(), &written);
    }

    #[test]
    fn a_new_directory_is_reported_and_then_watched_with_what_it_holds() {
        let dir = tree();
        let mut watch = DirWatch::new(dir.path()).unwrap();
        std::fs::create_dir_all(dir.path().join("gen/inner")).unwrap();
        std::fs::write(dir.path().join("gen/inner/f"), "f").unwrap();
        let drained = watch.drain();
        assert_eq!(drained.new_dirs, ["gen"]);
        let found = watch.add_tree("gen").unwrap();
        assert_eq!(found, ["gen/inner/f"]);
        std::fs::write(dir.path().join("gen/inner/g"), "g").unwrap();
        let drained = watch.drain();
        assert!(drained.paths.contains("gen/inner/g"), "{drained:?}");
        only_of(
            &drained,
            &[&TREE_FILES[..], &["gen/inner/f", "gen/inner/g"]].concat(),
        );
    }

    #[test]
    fn a_moved_directory_or_a_vanished_top_is_lost() {
        let dir = tree();
        let mut watch = DirWatch::new(dir.path()).unwrap();
        std::fs::rename(dir.path().join("src/deep"), dir.path().join("deep")).unwrap();
        assert!(watch.drain().lost);
        let gone = tree();
        let mut watch = DirWatch::new(gone.path()).unwrap();
        let path = gone.path().to_path_buf();
        drop(gone);
        assert!(!path.exists());
        assert!(watch.drain().lost);
    }
}
