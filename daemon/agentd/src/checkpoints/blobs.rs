//! File contents by their SHA-256, one file each under the data directory:
//! the same content is stored once whatever number of checkpoints refer to
//! it. Plain files rather than sled values because a checkpoint may hold a
//! large file, and sled keeps values in memory while it writes them.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The content-addressed store (`<data dir>/checkpoints/blobs`).
#[derive(Debug)]
pub(crate) struct BlobStore {
    dir: PathBuf,
}

/// The SHA-256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// Whether `s` is what [`sha256_hex`] returns (so a name read from a record
/// can never point outside the store).
fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Creates `dir` and its missing parents with mode 0700.
fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

impl BlobStore {
    /// Opens (or creates) the store in `dir`.
    pub(crate) fn open(dir: &Path) -> io::Result<BlobStore> {
        private_dir(dir)?;
        Ok(BlobStore {
            dir: dir.to_path_buf(),
        })
    }

    fn path_of(&self, sha256: &str) -> io::Result<PathBuf> {
        if !is_sha256(sha256) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a SHA-256: {sha256:?}"),
            ));
        }
        Ok(self.dir.join(&sha256[..2]).join(sha256))
    }

    /// Stores `bytes`; returns their SHA-256 and how many bytes were
    /// written (0 when the content was there already).
    pub(crate) fn put(&self, bytes: &[u8]) -> io::Result<(String, u64)> {
        let sha = sha256_hex(bytes);
        let path = self.path_of(&sha)?;
        if path.exists() {
            // Fresh again: a sweep spares young contents (see `sweep`).
            let _ = std::fs::File::options()
                .append(true)
                .open(&path)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            return Ok((sha, 0));
        }
        let parent = path.parent().unwrap_or(&self.dir);
        private_dir(parent)?;
        // Written aside and renamed, so a crash never leaves a blob whose
        // content does not match its name. Only the user may read it: it is
        // a copy of one of their files.
        let tmp = parent.join(format!(".{sha}.{}", std::process::id()));
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(bytes)?;
        }
        std::fs::rename(&tmp, &path)?;
        Ok((sha, bytes.len() as u64))
    }

    /// The content whose SHA-256 is `sha256`; a stored copy whose bytes
    /// no longer hash to it (truncated, damaged) is an error, never
    /// returned.
    pub(crate) fn get(&self, sha256: &str) -> io::Result<Vec<u8>> {
        let bytes = std::fs::read(self.path_of(sha256)?)?;
        let found = sha256_hex(&bytes);
        if found != sha256 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the stored copy is damaged ({} bytes whose SHA-256 is {found})",
                    bytes.len()
                ),
            ));
        }
        Ok(bytes)
    }

    /// Every stored content: (SHA-256, bytes).
    pub(crate) fn list(&self) -> io::Result<Vec<(String, PathBuf, u64, std::time::SystemTime)>> {
        let mut out = Vec::new();
        for shard in std::fs::read_dir(&self.dir)? {
            let shard = shard?;
            if !shard.file_type()?.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(shard.path())? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if is_sha256(&name) {
                    let meta = entry.metadata()?;
                    let modified = meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH);
                    out.push((name, entry.path(), meta.len(), modified));
                }
            }
        }
        Ok(out)
    }

    /// Bytes stored in all.
    pub(crate) fn total_bytes(&self) -> io::Result<u64> {
        Ok(self.list()?.iter().map(|(_, _, len, _)| len).sum())
    }

    /// Removes every content not in `keep` and older than `min_age`;
    /// returns the bytes freed.
    pub(crate) fn sweep(
        &self,
        keep: &HashSet<String>,
        min_age: std::time::Duration,
    ) -> io::Result<u64> {
        let mut freed = 0;
        let now = std::time::SystemTime::now();
        for (sha, path, len, modified) in self.list()? {
            let young = now.duration_since(modified).unwrap_or_default() < min_age;
            if !keep.contains(&sha) && !young {
                match std::fs::remove_file(&path) {
                    Ok(()) => freed += len,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(freed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_content_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::open(dir.path()).unwrap();
        let (a, written) = blobs.put(b"hello").unwrap();
        assert_eq!(written, 5);
        let (b, again) = blobs.put(b"hello").unwrap();
        assert_eq!((a.as_str(), again), (b.as_str(), 0));
        let (c, _) = blobs.put(b"other").unwrap();
        assert_ne!(a, c);
        assert_eq!(blobs.total_bytes().unwrap(), 10);
        assert_eq!(blobs.get(&a).unwrap(), b"hello");
    }

    #[test]
    fn a_sweep_keeps_only_what_is_referred_to() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::open(dir.path()).unwrap();
        let (a, _) = blobs.put(b"kept").unwrap();
        let (b, _) = blobs.put(b"dropped").unwrap();
        let keep = HashSet::from([a.clone()]);
        // Young contents are spared (a running call may be about to name them).
        assert_eq!(
            blobs
                .sweep(&keep, std::time::Duration::from_secs(60))
                .unwrap(),
            0
        );
        assert!(blobs.get(&b).is_ok());
        let freed = blobs.sweep(&keep, std::time::Duration::ZERO).unwrap();
        assert_eq!(freed, 7);
        assert_eq!(blobs.get(&a).unwrap(), b"kept");
        assert!(blobs.get(&b).is_err());
    }

    #[test]
    fn a_name_that_is_no_hash_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::open(dir.path()).unwrap();
        assert!(blobs.get("../../etc/passwd").is_err());
    }
}
