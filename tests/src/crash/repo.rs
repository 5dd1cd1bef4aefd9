//! The git repository of the crash test's git conversation: made once at
//! the start, and after every restart compared with what a rewind of the
//! conversation's turns must give back.
//!
//! The repository holds [`TRACKED`] committed files under `src/`, a
//! tracked `log.txt` the commands append their stamps to, and what a
//! person leaves around: a second branch, a stash entry, a staged change
//! and an untracked file. The conversation's commands change these files
//! and create others (see [`super::responder::git_busy`]); a rewind to its
//! first message must put every file back byte for byte, remove what the
//! commands created, and leave the index, HEAD, the refs and the stash as
//! they were.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::responder::mix;

/// Committed files under `src/` the commands change.
pub const TRACKED: usize = 12;

/// What the repository is to its user: every file of the work tree and
/// the state of git.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoState {
    /// Path relative to the top (`.git` left out) → bytes.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The index file's bytes.
    pub index: Vec<u8>,
    /// `HEAD`'s branch and commit, every ref with its object, and the
    /// stash list.
    pub refs: String,
}

/// Runs git in `dir` (never refreshing the index behind the caller's
/// back): its output, or why it failed.
pub fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        // Reading never refreshes the index behind the test's back.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .map_err(|e| format!("cannot run git {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {args:?} in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn write(path: &Path, content: &str) -> Result<(), String> {
    std::fs::write(path, content).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Makes the repository in `dir` (which exists and is empty), its
/// contents drawn from `seed`; returns its state.
pub fn create(dir: &Path, seed: u64) -> Result<RepoState, String> {
    git(dir, &["init", "-q", "-b", "main"])?;
    git(dir, &["config", "user.name", "Crash Test"])?;
    git(dir, &["config", "user.email", "crash-test@example.com"])?;
    let src = dir.join("src");
    std::fs::create_dir(&src).map_err(|e| format!("cannot create {}: {e}", src.display()))?;
    for i in 0..TRACKED {
        let lines = 1 + mix(&[seed, i as u64, 0x617]) % 5;
        let content: String = (0..lines)
            .map(|l| format!("file {i} line {l}: {:016x}\n", mix(&[seed, i as u64, l])))
            .collect();
        write(&src.join(format!("f{i:02}.txt")), &content)?;
    }
    write(&dir.join("log.txt"), "the git conversation's log\n")?;
    write(&dir.join("staged.txt"), "staged v1\n")?;
    write(&dir.join("stashed.txt"), "stashed v1\n")?;
    git(dir, &["add", "-A"])?;
    git(dir, &["commit", "-qm", "the crash test's repository"])?;
    git(dir, &["branch", "feature"])?;
    write(&dir.join("stashed.txt"), "stashed v2\n")?;
    git(dir, &["stash", "-q"])?;
    write(&dir.join("staged.txt"), "staged v2\n")?;
    git(dir, &["add", "staged.txt"])?;
    write(&dir.join("notes.txt"), "the user's untracked notes\n")?;
    state(dir)
}

/// The repository's state now.
pub fn state(dir: &Path) -> Result<RepoState, String> {
    // The index first: nothing run after may have rewritten it.
    let index_path = dir.join(".git/index");
    let index = std::fs::read(&index_path)
        .map_err(|e| format!("cannot read {}: {e}", index_path.display()))?;
    let refs = [
        git(dir, &["symbolic-ref", "HEAD"])?,
        git(dir, &["rev-parse", "HEAD"])?,
        git(dir, &["for-each-ref", "--format=%(refname) %(objectname)"])?,
        git(dir, &["stash", "list"])?,
    ]
    .concat();
    let mut files = BTreeMap::new();
    walk(dir, dir, &mut files)?;
    Ok(RepoState { files, index, refs })
}

fn walk(top: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if kind.is_dir() && path != top.join(".git") {
            walk(top, &path, out)?;
        } else if kind.is_file() {
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let rel = path.strip_prefix(top).unwrap_or(&path);
            out.insert(rel.display().to_string(), bytes);
        }
    }
    Ok(())
}

/// Describes how `got` differs from `want` (at most ten files); None when
/// they are the same.
pub fn difference(want: &RepoState, got: &RepoState) -> Option<String> {
    let mut diffs = Vec::new();
    for (path, bytes) in &want.files {
        match got.files.get(path) {
            None => diffs.push(format!("{path} is missing")),
            Some(b) if b != bytes => diffs.push(format!(
                "{path} holds {:?}, not {:?}",
                String::from_utf8_lossy(b),
                String::from_utf8_lossy(bytes)
            )),
            Some(_) => {}
        }
    }
    for path in got.files.keys().filter(|p| !want.files.contains_key(*p)) {
        diffs.push(format!("{path} should not exist"));
    }
    if got.index != want.index {
        diffs.push("the index file changed".to_string());
    }
    if got.refs != want.refs {
        diffs.push(format!(
            "HEAD, the refs or the stash changed: {:?}, not {:?}",
            got.refs, want.refs
        ));
    }
    if diffs.is_empty() {
        return None;
    }
    let n = diffs.len();
    diffs.truncate(10);
    Some(format!("{n} difference(s): {}", diffs.join("; ")))
}

/// Processes whose working directory is `dir` or below it.
fn processes_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cwd: PathBuf = std::fs::read_link(e.path().join("cwd")).ok()?;
            cwd.starts_with(dir).then_some(pid)
        })
        .collect()
}

/// Waits (at most `timeout`) until no process works in `dir`: a command
/// the daemon started lives on when the daemon is killed, and must be done
/// before the repository is compared, or before the daemon comes back
/// (else its late changes would look like someone else's to a rewind).
/// Returns the processes still there.
pub async fn wait_until_quiet(dir: &Path, timeout: Duration) -> Vec<u32> {
    // `/proc/PID/cwd` names the directory by its canonical path.
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let deadline = Instant::now() + timeout;
    loop {
        let busy = processes_in(&dir);
        if busy.is_empty() || Instant::now() >= deadline {
            return busy;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_work_tree_index_or_ref_makes_a_difference() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let made = create(dir, 7).unwrap();
        assert_eq!(made.files.len(), TRACKED + 4, "{:?}", made.files.keys());
        assert!(made.refs.contains("refs/heads/feature"), "{}", made.refs);
        assert!(made.refs.contains("refs/stash"), "{}", made.refs);
        assert_eq!(difference(&made, &state(dir).unwrap()), None);

        std::fs::write(dir.join("src/f01.txt"), "changed\n").unwrap();
        std::fs::remove_file(dir.join("src/f02.txt")).unwrap();
        std::fs::create_dir_all(dir.join("made/x")).unwrap();
        std::fs::write(dir.join("made/x/file.txt"), "new\n").unwrap();
        let why = difference(&made, &state(dir).unwrap()).unwrap();
        assert!(why.starts_with("3 difference(s)"), "{why}");
        assert!(why.contains("src/f01.txt holds \"changed\\n\""), "{why}");
        assert!(why.contains("src/f02.txt is missing"), "{why}");
        assert!(why.contains("made/x/file.txt should not exist"), "{why}");

        // What only git commands change: the index, the refs.
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let made = create(dir, 7).unwrap();
        git(dir, &["add", "src/f03.txt", "notes.txt"]).unwrap();
        let why = difference(&made, &state(dir).unwrap()).unwrap();
        assert_eq!(why, "1 difference(s): the index file changed");
        git(dir, &["branch", "other"]).unwrap();
        let why = difference(&made, &state(dir).unwrap()).unwrap();
        assert!(why.contains("the refs or the stash changed"), "{why}");
    }
}
