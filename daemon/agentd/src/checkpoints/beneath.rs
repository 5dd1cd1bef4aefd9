//! Reading and writing a file at an absolute path without following a
//! symbolic link on the way, for a restore.
//!
//! The paths a checkpoint records are canonical: the file tools resolve
//! symbolic links before they check a path, and git names files inside a
//! work tree whose top it gave canonical. So a symbolic link anywhere on
//! such a path at restore time is something that changed since — typically
//! a directory inside the working directory replaced by a link to
//! elsewhere — and writing through it would change a file outside every
//! allowed root. Each directory is opened from `/` down with `O_NOFOLLOW`
//! (and the file itself too), so a link is never followed: the restore
//! names the path instead.

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

/// What is at a path now, read without following links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// Nothing (the file, or a directory on its way, does not exist).
    Absent,
    /// A regular file and its bytes.
    File(Vec<u8>),
    /// A symbolic link, or something that is not a regular file, at the
    /// path or on its way; the text says what.
    Other(String),
}

/// Why a path cannot be used.
fn refused(path: &Path, what: &str) -> String {
    format!("{}: {what}; nothing was written through it", path.display())
}

/// The directory holding `path` (absolute, no `.` or `..`), opened
/// component by component without following links; with `create`, missing
/// directories are made. Ok(None): a directory on the way does not exist.
fn parent_dir(path: &Path, create: bool) -> Result<Option<(OwnedFd, &OsStr)>, String> {
    let name = match path.file_name() {
        Some(name) if path.is_absolute() => name,
        _ => return Err(refused(path, "not an absolute path to a file")),
    };
    let dir_flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut dir = nix::fcntl::open("/", dir_flags, Mode::empty())
        .map_err(|e| refused(path, &format!("cannot open /: {e}")))?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    for component in parent.components() {
        let part = match component {
            Component::RootDir => continue,
            Component::Normal(part) => part,
            Component::CurDir | Component::ParentDir | Component::Prefix(_) => {
                return Err(refused(path, "the path has `.` or `..` in it"));
            }
        };
        let next = match openat(&dir, part, dir_flags, Mode::empty()) {
            Err(Errno::ENOENT) if create => {
                match mkdirat(&dir, part, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(refused(path, &format!("cannot make a directory: {e}"))),
                }
                openat(&dir, part, dir_flags, Mode::empty())
            }
            other => other,
        };
        dir = match next {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(refused(
                    path,
                    &format!(
                        "{} on its way is a symbolic link or not a directory now",
                        Path::new(part).display()
                    ),
                ));
            }
            Err(e) => return Err(refused(path, &e.to_string())),
        };
    }
    Ok(Some((dir, name)))
}

/// What is at `path` now, without following any link.
pub(super) fn read(path: &Path) -> Result<Found, String> {
    let (dir, name) = match parent_dir(path, false) {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(Found::Absent),
        Err(why) => return Ok(Found::Other(why)),
    };
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let fd = match openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(Found::Absent),
        Err(Errno::ELOOP) => return Ok(Found::Other(refused(path, "it is a symbolic link now"))),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut file = std::fs::File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Ok(Found::Other(refused(path, "it is not a regular file now")));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Found::File(bytes))
}

/// Writes `bytes` to `path`, making missing directories, never through a
/// link. An existing file keeps its mode; a new one is 0644 (less umask).
pub(super) fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let Some((dir, name)) = parent_dir(path, true)? else {
        return Err(refused(path, "its directory could not be made"));
    };
    let flags = OFlag::O_WRONLY
        | OFlag::O_CREAT
        | OFlag::O_TRUNC
        | OFlag::O_NOFOLLOW
        | OFlag::O_CLOEXEC
        | OFlag::O_NONBLOCK;
    let fd = openat(&dir, name, flags, Mode::from_bits_truncate(0o644)).map_err(|e| match e {
        Errno::ELOOP => refused(path, "it is a symbolic link now"),
        e => format!("{}: {e}", path.display()),
    })?;
    let mut file = std::fs::File::from(fd);
    if !file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .is_file()
    {
        return Err(refused(path, "it is not a regular file now"));
    }
    file.write_all(bytes)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Removes the file at `path` (a link there is removed itself, never what
/// it points to). Ok(false): there was nothing.
pub(super) fn remove(path: &Path) -> Result<bool, String> {
    let Some((dir, name)) = parent_dir(path, false)? else {
        return Ok(false);
    };
    match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) => Ok(true),
        Err(Errno::ENOENT) => Ok(false),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_read_written_or_removed_through_a_link() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let (inside, outside) = (root.join("inside"), root.join("outside"));
        std::fs::create_dir_all(inside.join("src")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        let file = inside.join("src/a.txt");
        write(&file, b"one").unwrap();
        assert_eq!(read(&file).unwrap(), Found::File(b"one".to_vec()));
        write(&inside.join("new/deep/b.txt"), b"made").unwrap();
        assert_eq!(
            std::fs::read(inside.join("new/deep/b.txt")).unwrap(),
            b"made"
        );

        // `src` replaced by a link to a directory outside.
        std::fs::write(outside.join("a.txt"), "theirs").unwrap();
        std::fs::rename(inside.join("src"), root.join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, inside.join("src")).unwrap();
        let Found::Other(why) = read(&file).unwrap() else {
            panic!("read through a link")
        };
        assert!(why.contains("src on its way is a symbolic link"), "{why}");
        let err = write(&file, b"ours").unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(remove(&file).is_err());
        assert_eq!(
            std::fs::read_to_string(outside.join("a.txt")).unwrap(),
            "theirs"
        );

        // The file itself a link.
        let link = inside.join("link.txt");
        std::os::unix::fs::symlink(outside.join("a.txt"), &link).unwrap();
        assert!(matches!(read(&link).unwrap(), Found::Other(_)));
        assert!(write(&link, b"ours").is_err());
        assert_eq!(
            std::fs::read_to_string(outside.join("a.txt")).unwrap(),
            "theirs"
        );
        assert!(remove(&link).unwrap(), "the link itself is removed");
        assert!(outside.join("a.txt").exists());

        assert_eq!(read(&inside.join("gone/x")).unwrap(), Found::Absent);
        assert!(!remove(&inside.join("gone/x")).unwrap());
        assert!(write(&inside.join("../x"), b"").is_err());
    }
}
