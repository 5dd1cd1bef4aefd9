//! The work-tree snapshot taken before a `bash` command in a git work tree.
//!
//! A snapshot is a tree object: the user's index is copied to a temporary
//! file under the daemon's data directory, `git add -A` runs against that
//! copy (`GIT_INDEX_FILE`), and `git write-tree` writes the tree. The copy
//! keeps git's stat cache, so unchanged files are not read again. The new
//! objects land in the repository's object database, unreferenced: no ref,
//! branch, stash entry or the user's index changes, and `git gc` prunes them
//! after its grace period (two weeks by default). What a rewind needs is
//! copied into the checkpoint store as soon as the command ends, so the
//! rewind never depends on those objects.
//! Ignored files are not in a snapshot, so `bash` changes to them are not
//! tracked; neither are submodules and symbolic links.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

/// A git work tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// Its top directory (absolute).
    pub top: PathBuf,
    /// The index file git uses for it.
    index: PathBuf,
}

/// A file that differs between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeChange {
    /// Relative to the top of the work tree, as git names it.
    pub path: String,
    /// Whether the file was in the first snapshot.
    pub existed: bool,
}

/// Variables that would point git elsewhere than the directory it runs in.
const GIT_ENV: [&str; 6] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CEILING_DIRECTORIES",
];

fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .kill_on_drop(true);
    for name in GIT_ENV {
        cmd.env_remove(name);
    }
    cmd
}

async fn output(mut cmd: Command, what: &str) -> Result<Vec<u8>, String> {
    let out = cmd
        .output()
        .await
        .map_err(|e| format!("git {what}: cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// Whether `dir` or one of its ancestors has a `.git` (a directory, or a
/// file as in a linked worktree or a submodule): the test made before
/// asking git, so a command outside any repository costs no process.
fn may_be_in_repo(dir: &Path) -> bool {
    dir.ancestors()
        .any(|d| d.join(".git").symlink_metadata().is_ok())
}

/// The work tree `dir` is in, if any (None too when git is missing).
pub async fn repo_of(dir: &Path) -> Option<Repo> {
    if !may_be_in_repo(dir) {
        return None;
    }
    let mut cmd = git(dir);
    cmd.args(["rev-parse", "--show-toplevel", "--git-path", "index"]);
    let out = output(cmd, "rev-parse").await.ok()?;
    let text = String::from_utf8(out).ok()?;
    let mut lines = text.lines();
    let top = PathBuf::from(lines.next()?);
    let index = PathBuf::from(lines.next()?);
    if top.as_os_str().is_empty() {
        return None;
    }
    // `--git-path` answers relative to the directory git ran in.
    let index = if index.is_absolute() {
        index
    } else {
        dir.join(index)
    };
    Some(Repo { top, index })
}

/// Writes a tree of the work tree as it is now (tracked and untracked,
/// not ignored files) and returns its id. `scratch` holds the temporary
/// index.
pub async fn snapshot(repo: &Repo, scratch: &Path) -> Result<String, String> {
    std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let tmp = scratch.join(format!("index-{}", ulid::Ulid::new()));
    let result = snapshot_with(repo, &tmp).await;
    let _ = std::fs::remove_file(&tmp);
    result
}

async fn snapshot_with(repo: &Repo, tmp: &Path) -> Result<String, String> {
    match std::fs::copy(&repo.index, tmp) {
        Ok(_) => {}
        // A repository without commits or staged files has no index yet.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot copy {}: {e}", repo.index.display())),
    }
    let mut add = git(&repo.top);
    add.env("GIT_INDEX_FILE", tmp)
        .args(["add", "-A", "--", "."]);
    output(add, "add").await?;
    let mut write = git(&repo.top);
    write.env("GIT_INDEX_FILE", tmp).arg("write-tree");
    let out = output(write, "write-tree").await?;
    let id = String::from_utf8_lossy(&out).trim().to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("git write-tree printed {id:?}"));
    }
    Ok(id)
}

/// The regular files that differ between trees `before` and `after`.
pub async fn changes(repo: &Repo, before: &str, after: &str) -> Result<Vec<TreeChange>, String> {
    if before == after {
        return Ok(Vec::new());
    }
    let mut cmd = git(&repo.top);
    cmd.args([
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--raw",
        before,
        after,
    ]);
    let out = output(cmd, "diff-tree").await?;
    Ok(parse_raw(&out))
}

/// Reads `git diff-tree -z --raw` output: `:MODE MODE SHA SHA STATUS\0PATH\0`
/// per file. Submodules (160000) and symbolic links (120000) are left out.
fn parse_raw(out: &[u8]) -> Vec<TreeChange> {
    let mut fields = out.split(|&b| b == 0);
    let mut changes = Vec::new();
    while let Some(meta) = fields.next() {
        let Some(path) = fields.next() else { break };
        let meta = String::from_utf8_lossy(meta);
        let Some(meta) = meta.strip_prefix(':') else {
            continue;
        };
        let parts: Vec<&str> = meta.split(' ').collect();
        let [src_mode, dst_mode, ..] = parts.as_slice() else {
            continue;
        };
        let special = |m: &str| m == "160000" || m == "120000";
        if special(src_mode) || special(dst_mode) {
            continue;
        }
        changes.push(TreeChange {
            path: String::from_utf8_lossy(path).into_owned(),
            existed: *src_mode != "000000",
        });
    }
    changes
}

/// The content of `path` in `tree`, as checked out (git's filters
/// applied, e.g. line endings).
pub async fn content(repo: &Repo, tree: &str, path: &str) -> Result<Vec<u8>, String> {
    let mut cmd = git(&repo.top);
    cmd.args(["cat-file", "--filters"])
        .arg(format!("{tree}:{path}"));
    output(cmd, "cat-file").await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        run(dir.path(), &["init", "-q"]);
        run(dir.path(), &["config", "user.name", "t"]);
        run(dir.path(), &["config", "user.email", "t@example.com"]);
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        std::fs::write(dir.path().join("staged.txt"), "s\n").unwrap();
        run(dir.path(), &["add", "a.txt"]);
        run(dir.path(), &["commit", "-qm", "first"]);
        run(dir.path(), &["add", "staged.txt"]);
        dir
    }

    #[tokio::test]
    async fn a_snapshot_sees_every_change_and_leaves_index_and_refs_alone() {
        let dir = repo();
        let scratch = tempfile::tempdir().unwrap();
        let index = std::fs::read(dir.path().join(".git/index")).unwrap();
        let refs = run(dir.path(), &["for-each-ref"]);
        let status = run(dir.path(), &["status", "--porcelain"]);
        let repo = repo_of(dir.path()).await.unwrap();
        let before = snapshot(&repo, scratch.path()).await.unwrap();
        std::fs::write(dir.path().join("a.txt"), "two\n").unwrap();
        std::fs::write(dir.path().join("new.txt"), "new\n").unwrap();
        std::fs::remove_file(dir.path().join("staged.txt")).unwrap();
        let after = snapshot(&repo, scratch.path()).await.unwrap();
        let mut found = changes(&repo, &before, &after).await.unwrap();
        found.sort_by(|a, b| a.path.cmp(&b.path));
        let expected = [("a.txt", true), ("new.txt", false), ("staged.txt", true)];
        let got: Vec<(&str, bool)> = found.iter().map(|c| (c.path.as_str(), c.existed)).collect();
        assert_eq!(got, expected);
        assert_eq!(content(&repo, &before, "a.txt").await.unwrap(), b"one\n");
        assert_eq!(content(&repo, &before, "staged.txt").await.unwrap(), b"s\n");
        // The user's index, refs and stash are as they were.
        assert_eq!(std::fs::read(dir.path().join(".git/index")).unwrap(), index);
        assert_eq!(run(dir.path(), &["for-each-ref"]), refs);
        assert_eq!(run(dir.path(), &["stash", "list"]), "");
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        std::fs::write(dir.path().join("staged.txt"), "s\n").unwrap();
        std::fs::remove_file(dir.path().join("new.txt")).unwrap();
        assert_eq!(run(dir.path(), &["status", "--porcelain"]), status);
        // Nothing is left in the scratch directory.
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn a_repository_is_found_from_below_and_nothing_outside_asks_git() {
        let dir = repo();
        let deep = dir.path().join("src/deep");
        std::fs::create_dir_all(&deep).unwrap();
        assert!(may_be_in_repo(&deep));
        let found = repo_of(&deep).await.unwrap();
        assert_eq!(
            found.top.canonicalize().unwrap(),
            dir.path().canonicalize().unwrap()
        );
        // No `.git` above it: not a repository, decided without git.
        let outside = tempfile::tempdir().unwrap();
        assert!(!may_be_in_repo(outside.path()));
        assert!(repo_of(outside.path()).await.is_none());
    }

    #[tokio::test]
    async fn an_unchanged_work_tree_gives_the_same_tree() {
        let dir = repo();
        let scratch = tempfile::tempdir().unwrap();
        let repo = repo_of(dir.path()).await.unwrap();
        let a = snapshot(&repo, scratch.path()).await.unwrap();
        let b = snapshot(&repo, scratch.path()).await.unwrap();
        assert_eq!(a, b);
        assert!(changes(&repo, &a, &b).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_directory_git_cannot_enter_has_no_repo() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(repo_of(&dir.path().join("missing")).await, None);
    }
}
