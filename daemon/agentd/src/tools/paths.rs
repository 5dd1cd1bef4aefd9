//! Where a path the model names really points, and whether it may go there.
//!
//! The check is done on the fully resolved path, and the tools then use that
//! resolved path for their I/O: checking one spelling and opening another is
//! how sandbox escapes happen. `..` is resolved lexically first (the model
//! means "the parent of what I named"), then symbolic links are resolved by
//! the operating system. A file that does not exist yet is resolved through
//! its longest existing ancestor, and a dangling symbolic link is followed to
//! where it would create a file, so writing through it cannot escape either.

use std::io;
use std::path::{Component, Path, PathBuf};

use super::{ToolContext, ToolError};

/// Symbolic-link hops followed before giving up, as the kernel does.
const MAX_LINK_HOPS: usize = 40;

/// Where `raw` really points, seen from `cwd`: absolute, `..` resolved,
/// symbolic links followed (also for paths that do not exist yet). The
/// permission policy judges this path, exactly as the tools will use it.
pub(crate) fn resolve_real(cwd: &Path, raw: &str) -> io::Result<PathBuf> {
    let expanded = expand_home(raw);
    let joined = if expanded.is_absolute() {
        expanded
    } else {
        cwd.join(expanded)
    };
    canonicalize_lenient(&normalize(&joined), 0)
}

/// Resolves `raw` for a tool and checks it stays inside the working
/// directory or one of the additional directories.
pub(crate) fn resolve(ctx: &ToolContext, raw: &str) -> Result<PathBuf, ToolError> {
    if raw.trim().is_empty() {
        return Err(ToolError::new("the path is empty"));
    }
    let expanded = expand_home(raw);
    let joined = if expanded.is_absolute() {
        expanded
    } else {
        ctx.cwd.join(expanded)
    };
    let lexical = normalize(&joined);
    let resolved = canonicalize_lenient(&lexical, 0)
        .map_err(|e| ToolError::new(format!("cannot resolve path `{raw}`: {e}")))?;
    // Before the working directory: agentd's own files are refused also
    // inside it, and whatever the allow rules or the mode say.
    if let Some(why) = ctx.own_files.refusal(&resolved) {
        return Err(ToolError::new(format!("path `{raw}`: {why}")));
    }
    if allowed_roots(ctx)
        .iter()
        .any(|root| resolved.starts_with(root))
    {
        return Ok(resolved);
    }
    let mut message = format!(
        "path `{raw}` is outside the working directory {}",
        ctx.cwd.display()
    );
    if !ctx.additional_dirs.is_empty() {
        let dirs: Vec<String> = ctx
            .additional_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        message.push_str(&format!(
            " and the additional directories ({})",
            dirs.join(", ")
        ));
    }
    if resolved != lexical {
        message.push_str(&format!("; it resolves to {}", resolved.display()));
    }
    Err(ToolError::new(message))
}

/// How a path is shown to the model and to people: relative to the working
/// directory when inside it (shorter, and what the model will type back),
/// absolute otherwise.
pub(crate) fn display(ctx: &ToolContext, path: &Path) -> String {
    match path.strip_prefix(&ctx.cwd) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

fn allowed_roots(ctx: &ToolContext) -> Vec<PathBuf> {
    std::iter::once(&ctx.cwd)
        .chain(ctx.additional_dirs.iter())
        .map(|dir| {
            let dir = normalize(&ctx.cwd.join(dir));
            dir.canonicalize().unwrap_or(dir)
        })
        .collect()
}

fn expand_home(raw: &str) -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match (raw, home) {
        ("~", Some(home)) => home,
        (r, Some(home)) if r.starts_with("~/") => home.join(&r[2..]),
        _ => PathBuf::from(raw),
    }
}

/// Resolves `.` and `..` without touching the file system. `..` above the
/// root stays at the root, as it does for the kernel.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Where the absolute `path` really points: `..` resolved, symbolic links
/// followed, also when it does not exist yet.
pub(crate) fn resolve_path(path: &Path) -> io::Result<PathBuf> {
    canonicalize_lenient(&normalize(path), 0)
}

/// `canonicalize` that also works for paths that do not exist yet.
fn canonicalize_lenient(path: &Path, hops: usize) -> io::Result<PathBuf> {
    if hops > MAX_LINK_HOPS {
        return Err(io::Error::other("too many levels of symbolic links"));
    }
    let canonical_err = match path.canonicalize() {
        Ok(p) => return Ok(p),
        Err(e) => e,
    };
    match path.symlink_metadata() {
        // A dangling link: follow it by hand to where it points.
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(path)?;
            let parent = path.parent().unwrap_or(Path::new("/"));
            canonicalize_lenient(&normalize(&parent.join(target)), hops + 1)
        }
        // It exists but cannot be resolved (a permission problem, say).
        Ok(_) => Err(canonical_err),
        Err(_) => match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => Ok(canonicalize_lenient(parent, hops)?.join(name)),
            _ => Err(canonical_err),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::ctx_in;
    use std::os::unix::fs::symlink;

    #[test]
    fn relative_absolute_and_new_paths_resolve_inside() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx_in(dir.path());
        std::fs::create_dir(dir.path().join("src")).unwrap();
        assert_eq!(resolve(&ctx, "src").unwrap(), ctx.cwd.join("src"));
        assert_eq!(
            resolve(&ctx, "./src/../src/new/file.rs").unwrap(),
            ctx.cwd.join("src/new/file.rs")
        );
        let abs = ctx.cwd.join("src").display().to_string();
        assert_eq!(resolve(&ctx, &abs).unwrap(), ctx.cwd.join("src"));
        assert_eq!(resolve(&ctx, ".").unwrap(), ctx.cwd);
        assert_eq!(display(&ctx, &ctx.cwd.join("src/a.rs")), "src/a.rs");
    }

    #[test]
    fn dotdot_escape_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("proj")).unwrap();
        let ctx = ctx_in(&dir.path().join("proj"));
        let err = resolve(&ctx, "../secret.txt").unwrap_err().0;
        assert!(err.contains("is outside the working directory"), "{err}");
        assert!(resolve(&ctx, "sub/../../proj/ok.txt").is_ok());
        assert!(resolve(&ctx, "/etc/passwd").is_err());
    }

    #[test]
    fn symlink_escape_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "s").unwrap();
        std::fs::create_dir(dir.path().join("proj")).unwrap();
        let ctx = ctx_in(&dir.path().join("proj"));
        symlink(&outside, ctx.cwd.join("link")).unwrap();
        symlink(outside.join("secret.txt"), ctx.cwd.join("file_link")).unwrap();
        symlink(outside.join("not_yet.txt"), ctx.cwd.join("dangling")).unwrap();

        for raw in [
            "link/secret.txt",
            "link/new.txt",
            "file_link",
            "dangling",
            "link",
        ] {
            let err = resolve(&ctx, raw).unwrap_err().0;
            assert!(
                err.contains("outside the working directory"),
                "{raw}: {err}"
            );
            assert!(err.contains("resolves to"), "{raw}: {err}");
        }
        // A link that stays inside is fine.
        std::fs::write(ctx.cwd.join("real.txt"), "r").unwrap();
        symlink(ctx.cwd.join("real.txt"), ctx.cwd.join("inner_link")).unwrap();
        assert_eq!(
            resolve(&ctx, "inner_link").unwrap(),
            ctx.cwd.join("real.txt")
        );
    }

    #[test]
    fn agentds_own_files_are_refused_inside_the_allowed_directories_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = ctx_in(dir.path());
        let data = ctx.cwd.join("data");
        std::fs::create_dir_all(data.join("db")).unwrap();
        std::fs::write(ctx.cwd.join("credentials.toml"), "k").unwrap();
        symlink(&data, ctx.cwd.join("innocent")).unwrap();
        ctx.own_files = std::sync::Arc::new(super::super::OwnFiles::new([
            data.clone(),
            ctx.cwd.join("credentials.toml"),
        ]));
        ctx.additional_dirs.push(PathBuf::from("/proc"));
        for raw in [
            "data",
            "data/db/conf",
            "innocent/db",
            "./credentials.toml",
            "/proc/self/environ",
            "/proc/thread-self/environ",
            "/proc/self/root/proc/self/environ",
        ] {
            let err = resolve(&ctx, raw).unwrap_err().0;
            assert!(err.contains("no tool may read"), "{raw}: {err}");
        }
        assert!(resolve(&ctx, "other.toml").is_ok());
        assert!(resolve(&ctx, "/proc/self/status").is_ok());
    }

    #[test]
    fn additional_dirs_are_allowed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("proj")).unwrap();
        std::fs::create_dir(dir.path().join("extra")).unwrap();
        let mut ctx = ctx_in(&dir.path().join("proj"));
        assert!(resolve(&ctx, "../extra/x").is_err());
        ctx.additional_dirs.push(dir.path().join("extra"));
        assert!(resolve(&ctx, "../extra/x").is_ok());
        assert!(
            resolve(&ctx, "../other/x")
                .unwrap_err()
                .0
                .contains("additional directories")
        );
    }
}
