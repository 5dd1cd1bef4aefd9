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
//!
//! The repository is not trusted: git runs without its fsmonitor, hooks and
//! filter drivers (see `hardening.rs`), and without the daemon's credentials
//! in its environment.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

mod hardening;

use hardening::{FilterDrivers, git, git_without_filters};

/// A git work tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Repo {
    /// Its top directory (absolute).
    pub top: PathBuf,
    /// The index file git uses for it.
    index: PathBuf,
}

/// A file that differs between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeChange {
    /// Relative to the top of the work tree, as git names it.
    pub path: String,
    /// Whether the file was in the first snapshot.
    pub existed: bool,
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
pub(crate) async fn repo_of(dir: &Path) -> Option<Repo> {
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
pub(crate) async fn snapshot(repo: &Repo, scratch: &Path) -> Result<String, String> {
    std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let tmp = scratch.join(format!("index-{}", ulid::Ulid::new()));
    let result = snapshot_into(repo, &tmp).await;
    let _ = std::fs::remove_file(&tmp);
    result
}

/// [`snapshot`], through the index file `tmp`, which is left for
/// [`update`].
pub(crate) async fn snapshot_into(repo: &Repo, tmp: &Path) -> Result<String, String> {
    match copy_index(&repo.index, tmp) {
        Ok(()) => {}
        // A repository without commits or staged files has no index yet.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot copy {}: {e}", repo.index.display())),
    }
    // Both read work-tree files (`write-tree` hashes again an entry whose
    // stat cannot tell it changed), so both would run a filter.
    let drivers = FilterDrivers::of(&repo.top).await?;
    let mut add = git(&repo.top);
    drivers.disable_in(&mut add);
    add.env("GIT_INDEX_FILE", tmp)
        .args(["add", "-A", "--", "."]);
    output(add, "add").await?;
    let mut write = git(&repo.top);
    drivers.disable_in(&mut write);
    write.env("GIT_INDEX_FILE", tmp).arg("write-tree");
    tree_id(output(write, "write-tree").await?)
}

/// Copies the index `from` to `to` with its modification time: git tells
/// a file changed in the same second as the index was written ("racily
/// clean") by comparing the file's time with the index's; a copy made now
/// would make git trust such a file's cached stat and keep its old content.
fn copy_index(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::copy(from, to)?;
    let modified = std::fs::metadata(from)?.modified()?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(to)?
        .set_modified(modified)
}

fn tree_id(out: Vec<u8>) -> Result<String, String> {
    let id = String::from_utf8_lossy(&out).trim().to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("git write-tree printed {id:?}"));
    }
    Ok(id)
}

/// A new tree from the index `index` (left by [`snapshot_into`] or an
/// earlier update) with only `paths` read again from the work tree: added,
/// changed, or removed when they are gone. The same hardening as a
/// snapshot; the index is changed in place.
pub(crate) async fn update(repo: &Repo, index: &Path, paths: &[&str]) -> Result<String, String> {
    if !index.exists() {
        return Err(format!("{} is gone", index.display()));
    }
    let drivers = FilterDrivers::of(&repo.top).await?;
    let mut input = Vec::new();
    for path in paths {
        input.extend_from_slice(path.as_bytes());
        input.push(0);
    }
    let mut cmd = git(&repo.top);
    drivers.disable_in(&mut cmd);
    cmd.env("GIT_INDEX_FILE", index)
        .args(["update-index", "--add", "--remove", "-z", "--stdin"]);
    let out = with_input(cmd, input, "update-index").await?;
    if !out.status.success() {
        return Err(format!(
            "git update-index failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut write = git(&repo.top);
    drivers.disable_in(&mut write);
    write.env("GIT_INDEX_FILE", index).arg("write-tree");
    tree_id(output(write, "write-tree").await?)
}

/// Runs `cmd` with `input` on its standard input; its output whatever its
/// exit status.
async fn with_input(
    mut cmd: Command,
    input: Vec<u8>,
    what: &str,
) -> Result<std::process::Output, String> {
    use tokio::io::AsyncWriteExt;
    cmd.stdin(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("git {what}: cannot run git: {e}"))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| format!("git {what}: no stdin"))?;
    let writer = async move {
        let written = stdin.write_all(&input).await;
        drop(stdin);
        written
    };
    let (written, out) = tokio::join!(writer, child.wait_with_output());
    let out = out.map_err(|e| format!("git {what}: {e}"))?;
    written.map_err(|e| format!("git {what}: {e}"))?;
    Ok(out)
}

/// The regular files that differ between trees `before` and `after`.
pub(crate) async fn changes(
    repo: &Repo,
    before: &str,
    after: &str,
) -> Result<Vec<TreeChange>, String> {
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

/// The content of `path` in `tree`, as checked out (git's own conversions
/// applied, e.g. line endings; no filter driver: see [`FilterDrivers`]).
pub(crate) async fn content(repo: &Repo, tree: &str, path: &str) -> Result<Vec<u8>, String> {
    let mut cmd = git_without_filters(&repo.top).await?;
    cmd.args(["cat-file", "--filters"])
        .arg(format!("{tree}:{path}"));
    output(cmd, "cat-file").await
}

/// Which of `paths` (relative to the top) are files of `tree`.
pub(crate) async fn existing(
    repo: &Repo,
    tree: &str,
    paths: &[&str],
) -> Result<HashSet<String>, String> {
    let mut found = HashSet::new();
    // Within what one command line may carry.
    for chunk in paths.chunks(512) {
        let mut cmd = git(&repo.top);
        cmd.args([
            "--literal-pathspecs",
            "ls-tree",
            "-z",
            "--name-only",
            tree,
            "--",
        ])
        .args(chunk);
        let out = output(cmd, "ls-tree").await?;
        found.extend(
            out.split(|&b| b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        );
    }
    Ok(found)
}

/// Which of `paths` (relative to the top; a directory ends in `/`) git
/// ignores. A path in the user's index is never ignored.
pub(crate) async fn ignored(repo: &Repo, paths: &[&str]) -> Result<HashSet<String>, String> {
    if paths.is_empty() {
        return Ok(HashSet::new());
    }
    let mut input = Vec::new();
    for path in paths {
        input.extend_from_slice(path.as_bytes());
        input.push(0);
    }
    let mut cmd = git(&repo.top);
    cmd.args(["check-ignore", "-z", "--stdin"]);
    let out = with_input(cmd, input, "check-ignore").await?;
    // 1: none of them is ignored.
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(format!(
            "git check-ignore failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out
        .stdout
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

/// The contents of `paths` (files of `tree`), as [`content`] gives them.
/// The filter drivers are listed again for each batch, right before use:
/// a command may have defined one since the last look.
pub(crate) async fn contents(
    repo: &Repo,
    tree: &str,
    paths: &[&str],
) -> Result<Vec<Vec<u8>>, String> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let drivers = FilterDrivers::of(&repo.top).await?;
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        let mut cmd = git(&repo.top);
        drivers.disable_in(&mut cmd);
        cmd.args(["cat-file", "--filters"])
            .arg(format!("{tree}:{path}"));
        out.push(output(cmd, "cat-file").await?);
    }
    Ok(out)
}

#[cfg(test)]
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
    async fn an_update_of_the_changed_paths_gives_the_tree_a_snapshot_would() {
        let dir = repo();
        let scratch = tempfile::tempdir().unwrap();
        let repo = repo_of(dir.path()).await.unwrap();
        let index = scratch.path().join("kept");
        let first = snapshot_into(&repo, &index).await.unwrap();
        std::fs::write(dir.path().join("a.txt"), "two\n").unwrap();
        std::fs::create_dir_all(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/new.txt"), "new\n").unwrap();
        std::fs::remove_file(dir.path().join("staged.txt")).unwrap();
        let updated = update(&repo, &index, &["a.txt", "sub/new.txt", "staged.txt"])
            .await
            .unwrap();
        assert_ne!(updated, first);
        assert_eq!(updated, snapshot(&repo, scratch.path()).await.unwrap());
        // An index that is gone is said so (the caller then snapshots).
        std::fs::remove_file(&index).unwrap();
        assert!(update(&repo, &index, &["a.txt"]).await.is_err());
    }

    #[tokio::test]
    async fn a_file_changed_in_the_second_of_the_users_git_add_is_seen() {
        use std::os::unix::fs::MetadataExt;
        // Same size, same second as the index, and the snapshot in a later
        // second: only git's racy check can tell, and only with the index's
        // own modification time.
        let dir = loop {
            let dir = repo();
            std::fs::write(dir.path().join("a.txt"), "two\n").unwrap();
            let file = std::fs::metadata(dir.path().join("a.txt")).unwrap();
            let index = std::fs::metadata(dir.path().join(".git/index")).unwrap();
            if file.mtime() == index.mtime() && file.ctime() == index.mtime() {
                break dir;
            }
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        std::thread::sleep(std::time::Duration::from_nanos(
            1_000_000_000 - u64::from(now.subsec_nanos()) + 10_000_000,
        ));
        let scratch = tempfile::tempdir().unwrap();
        let repo = repo_of(dir.path()).await.unwrap();
        let tree = snapshot(&repo, scratch.path()).await.unwrap();
        assert_eq!(content(&repo, &tree, "a.txt").await.unwrap(), b"two\n");
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
    async fn the_repository_cannot_make_the_snapshot_run_its_programs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = repo();
        let tools = tempfile::tempdir().unwrap();
        let marker = tools.path().join("ran");
        let script = |name: &str, body: &str| {
            let path = tools.path().join(name);
            std::fs::write(
                &path,
                format!("#!/bin/sh\necho {name} >> {}\n{body}", marker.display()),
            )
            .unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path.display().to_string()
        };
        let fsmonitor = script("fsmonitor", "");
        let clean = script("clean", "tr a-z A-Z");
        let smudge = script("smudge", "cat");
        let process = script("process", "cat");
        run(dir.path(), &["config", "core.fsmonitor", &fsmonitor]);
        run(dir.path(), &["config", "filter.up.clean", &clean]);
        run(dir.path(), &["config", "filter.up.smudge", &smudge]);
        run(dir.path(), &["config", "filter.up.required", "true"]);
        run(dir.path(), &["config", "filter.odd=name.process", &process]);
        std::fs::write(
            dir.path().join(".gitattributes"),
            "*.txt filter=up\n*.md filter=odd=name\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("a.txt"), "lower\n").unwrap();
        std::fs::write(dir.path().join("b.md"), "md\n").unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let repo = repo_of(dir.path()).await.unwrap();
        let before = snapshot(&repo, scratch.path()).await.unwrap();
        std::fs::write(dir.path().join("a.txt"), "changed\n").unwrap();
        let after = snapshot(&repo, scratch.path()).await.unwrap();
        assert_eq!(changes(&repo, &before, &after).await.unwrap().len(), 1);
        // The bytes of the work tree, not what the clean filter makes.
        assert_eq!(content(&repo, &before, "a.txt").await.unwrap(), b"lower\n");
        assert_eq!(content(&repo, &before, "b.md").await.unwrap(), b"md\n");
        assert!(
            !marker.exists(),
            "ran: {}",
            std::fs::read_to_string(&marker).unwrap_or_default()
        );
    }

    #[tokio::test]
    async fn a_directory_git_cannot_enter_has_no_repo() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(repo_of(&dir.path().join("missing")).await, None);
    }
}
