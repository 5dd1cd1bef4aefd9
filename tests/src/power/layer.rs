//! The power-cut layer: a preload shim ([`SHIM`], `shim.c`) that logs what
//! every unsynced write to the data directory overwrote, and [`cut`], which
//! undoes those writes after the process was killed.
//!
//! Why a preload shim and not a FUSE file system or LazyFS (the field's
//! tool, a C++ FUSE file system: not in Debian bookworm, PyPI or npm, and
//! the crates.io crate of that name is an unrelated HTTP file system;
//! `fuse3` alone would mean writing the layer anyway, as a daemon with a
//! mount): the store writes its files only through a handful of libc calls
//! (`write`/`writev` on the journal, `pwrite64` and `ftruncate64` from sled,
//! `fsync`/`fdatasync`, and `sync_file_range`, which is no barrier; `nm -D
//! test-agentd` and `strace -f` list them, and a writable shared `mmap` of a
//! tracked file makes [`cut`] fail instead of passing silently), so
//! interposing them models data loss exactly at the granularity the store's
//! durability depends on (sled 0.34's own flush is `pwrite64` +
//! `sync_file_range`; only its background flusher, every 500 ms, and the
//! store's `sync = "power"` paths call `fsync`/`fdatasync`), with no process
//! in between, no mount (no `/dev/fuse`, root or `fusermount` needed in CI)
//! and no copy of the data. What it does not model, where a FUSE layer
//! would: metadata. Creating, renaming and removing files count as durable
//! at once, so a lost directory entry (a new journal file whose directory
//! was not synced) is never simulated — weaker than a real power cut. It
//! also keeps all or nothing of the unsynced writes (the file as of its last
//! sync), not a torn or reordered subset of pages; and a file replaced by
//! another of the same inode number at the same path between a write and the
//! cut would be undone onto the new one (the store never reuses a file
//! name).
//!
//! The shim is compiled by `tests/build.rs` (the C compiler the `cc` crate
//! finds), so the project's own build installs it.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The shim, built by `tests/build.rs`.
pub const SHIM: &str = env!("AGENT_TESTS_POWERCUT_SHIM");

const MAGIC: u32 = 0x5455_4350;
const HEADER: usize = 56;
const WRITE: u32 = 1;
const SYNC: u32 = 2;
const SYNC_ALL: u32 = 3;
const MMAP: u32 = 4;

/// The environment that puts a process's writes under `dir` on the layer,
/// logging to `log` (outside `dir`). Relative paths are taken from the
/// process's working directory when it starts.
pub fn env(dir: &Path, log: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".to_string(), SHIM.to_string()),
        ("POWERCUT_DIR".to_string(), dir.display().to_string()),
        ("POWERCUT_LOG".to_string(), log.display().to_string()),
    ]
}

/// One logged write: what `[offset, offset + old.len())` held and the
/// file's length before it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Write {
    at: u64,
    dev: u64,
    ino: u64,
    path: PathBuf,
    offset: u64,
    old_size: u64,
    old: Vec<u8>,
}

/// What a cut did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cut {
    /// Writes logged since the previous cut.
    pub writes: usize,
    /// Sync markers logged.
    pub syncs: usize,
    /// Writes undone (not covered by a later sync of their file).
    pub undone: usize,
    /// Files the undone writes touched.
    pub files: std::collections::BTreeSet<PathBuf>,
    /// Undone writes whose file is gone or was replaced (left alone).
    pub skipped: usize,
    /// Bytes by which the files shrank.
    pub truncated: u64,
}

/// A power cut, after the process writing under the layer was killed:
/// every write logged in `log` and not covered by a later sync of its file
/// is undone, newest first, so each file is as of its last sync; then the
/// log is removed (the next process starts a new one).
pub fn cut(log: &Path) -> Result<Cut, String> {
    let bytes = match std::fs::read(log) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("cannot read the undo log {}: {e}", log.display())),
    };
    let mut writes = Vec::new();
    let mut synced: HashMap<(u64, u64), u64> = HashMap::new();
    let mut synced_all = 0u64;
    let mut report = Cut::default();
    let mut at = 0usize;
    while at < bytes.len() {
        let field = |i: usize, n: usize| -> Result<u64, String> {
            let b = bytes
                .get(at + i..at + i + n)
                .ok_or_else(|| format!("the undo log is cut short at byte {at}"))?;
            let mut le = [0u8; 8];
            le[..n].copy_from_slice(b);
            Ok(u64::from_le_bytes(le))
        };
        if field(0, 4)? != u64::from(MAGIC) {
            return Err(format!("the undo log has no record at byte {at}"));
        }
        let kind = field(4, 4)? as u32;
        let (dev, ino, offset, old_size) =
            (field(16, 8)?, field(24, 8)?, field(32, 8)?, field(40, 8)?);
        let path_len = field(48, 4)? as usize;
        let old_len = field(52, 4)? as usize;
        if field(8, 8)? != at as u64 {
            return Err(format!(
                "the undo log's record at byte {at} says it is at {} (two writers?)",
                field(8, 8)?
            ));
        }
        let body = at + HEADER;
        let (Some(path), Some(old)) = (
            bytes.get(body..body + path_len),
            bytes.get(body + path_len..body + path_len + old_len),
        ) else {
            return Err(format!("the undo log's record at byte {at} is cut short"));
        };
        let path = PathBuf::from(String::from_utf8_lossy(path).into_owned());
        match kind {
            WRITE => writes.push(Write {
                at: at as u64,
                dev,
                ino,
                path,
                offset,
                old_size,
                old: old.to_vec(),
            }),
            SYNC => {
                report.syncs += 1;
                let upto = synced.entry((dev, ino)).or_default();
                *upto = (*upto).max(offset);
            }
            SYNC_ALL => {
                report.syncs += 1;
                synced_all = synced_all.max(offset);
            }
            MMAP => {
                return Err(format!(
                    "{} was mapped writable and shared: the layer cannot follow its writes",
                    path.display()
                ));
            }
            other => {
                return Err(format!(
                    "the undo log has a record of kind {other} at byte {at}"
                ));
            }
        }
        at = body + path_len + old_len;
    }
    report.writes = writes.len();
    for w in writes.iter().rev() {
        let durable =
            synced.get(&(w.dev, w.ino)).is_some_and(|&upto| w.at < upto) || w.at < synced_all;
        if durable {
            continue;
        }
        report.undone += 1;
        let file = match OpenOptions::new().read(true).write(true).open(&w.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                report.skipped += 1;
                continue;
            }
            Err(e) => return Err(format!("cannot open {}: {e}", w.path.display())),
        };
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot stat {}: {e}", w.path.display()))?;
        if (meta.dev(), meta.ino()) != (w.dev, w.ino) {
            report.skipped += 1;
            continue;
        }
        file.write_all_at(&w.old, w.offset)
            .and_then(|()| file.set_len(w.old_size))
            .map_err(|e| format!("cannot undo a write to {}: {e}", w.path.display()))?;
        report.truncated += meta.len().saturating_sub(w.old_size);
        report.files.insert(w.path.clone());
    }
    match std::fs::remove_file(log) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot remove the undo log {}: {e}", log.display())),
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    //! The layer through a real process: the test binary runs itself
    //! (one test, [`child`]) under the shim, which does the writes a
    //! scenario names; the parent then cuts and looks at the files.
    use super::*;
    use std::io::{Seek, SeekFrom, Write as _};
    use std::process::Command;

    const SCENARIO: &str = "POWERCUT_TEST_SCENARIO";

    /// Runs `scenario` in a child under the layer, then cuts.
    fn run(scenario: &str) -> (tempfile::TempDir, Cut) {
        run_all(&[scenario])
    }

    /// Runs the scenarios one after the other, each in a child under the
    /// layer (as a daemon restarted without a cut), then cuts.
    fn run_all(scenarios: &[&str]) -> (tempfile::TempDir, Cut) {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        let log = root.path().join("undo.log");
        std::fs::create_dir(&data).unwrap();
        for scenario in scenarios {
            let out = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "power::layer::tests::child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(SCENARIO, scenario)
                .envs(env(&data, &log))
                .current_dir(root.path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(log.exists(), "the shim was not loaded");
        let report = cut(&log).unwrap();
        assert!(!log.exists());
        (root, report)
    }

    fn read(root: &tempfile::TempDir, name: &str) -> Vec<u8> {
        std::fs::read(root.path().join("data").join(name)).unwrap()
    }

    /// The child's side: the writes of a scenario, through std as the
    /// daemon makes them (append-only `write`, `write_at` = `pwrite64`,
    /// `set_len` = `ftruncate64`, `sync_data`, `sync_all`).
    #[test]
    fn child() {
        let Ok(scenario) = std::env::var(SCENARIO) else {
            return;
        };
        let data = Path::new("data");
        match scenario.as_str() {
            "append" => {
                let mut f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(data.join("j.log"))
                    .unwrap();
                f.write_all(b"one;").unwrap();
                f.sync_data().unwrap();
                f.write_all(b"two;").unwrap();
                f.write_all(b"three;").unwrap();
                // Outside the directory: not tracked.
                std::fs::write("outside.txt", b"kept").unwrap();
            }
            "overwrite" => {
                let f = OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .read(true)
                    .write(true)
                    .open(data.join("db"))
                    .unwrap();
                f.write_all_at(b"aaaaaaaa", 0).unwrap();
                f.sync_all().unwrap();
                f.write_all_at(b"BB", 2).unwrap();
                f.write_all_at(b"cccc", 6).unwrap();
                f.set_len(3).unwrap();
                f.write_all_at(b"dd", 10).unwrap();
            }
            "synced" => {
                let mut f = std::fs::File::create(data.join("s")).unwrap();
                f.write_all(b"hello").unwrap();
                f.seek(SeekFrom::Start(1)).unwrap();
                f.write_all(b"E").unwrap();
                f.sync_data().unwrap();
                // A second file's sync does not cover the first's writes.
                f.write_all(b"LLO!").unwrap();
                let mut g = std::fs::File::create(data.join("t")).unwrap();
                g.write_all(b"x").unwrap();
                g.sync_all().unwrap();
            }
            "sync-later" => {
                let f = OpenOptions::new()
                    .append(true)
                    .open(data.join("j.log"))
                    .unwrap();
                f.sync_data().unwrap();
            }
            "other-file" => {
                let mut f = std::fs::File::create(data.join("other")).unwrap();
                f.write_all(b"o").unwrap();
                f.sync_all().unwrap();
            }
            "tool" => {
                // A program the process starts runs without the layer.
                assert!(std::env::var_os("LD_PRELOAD").is_none());
                let status = Command::new("sh")
                    .args(["-c", "printf x >> data/by-a-tool"])
                    .status()
                    .unwrap();
                assert!(status.success());
            }
            other => panic!("unknown scenario {other}"),
        }
        // What the process reads is what it wrote (the page cache).
        if scenario == "append" {
            assert_eq!(
                std::fs::read(data.join("j.log")).unwrap(),
                b"one;two;three;"
            );
        }
    }

    #[test]
    fn an_appended_file_is_cut_back_to_what_was_synced() {
        let (root, report) = run("append");
        assert_eq!(read(&root, "j.log"), b"one;");
        assert_eq!(report.undone, 2);
        assert_eq!(report.syncs, 1);
        assert_eq!(
            std::fs::read(root.path().join("outside.txt")).unwrap(),
            b"kept"
        );
    }

    #[test]
    fn overwrites_and_truncations_after_the_last_sync_are_undone() {
        let (root, report) = run("overwrite");
        assert_eq!(read(&root, "db"), b"aaaaaaaa");
        assert_eq!(report.undone, 4);
    }

    #[test]
    fn a_sync_covers_its_own_file_only_and_what_came_before_it() {
        let (root, _) = run("synced");
        assert_eq!(read(&root, "s"), b"hEllo");
        assert_eq!(read(&root, "t"), b"x");
    }

    #[test]
    fn the_log_spans_restarts_and_a_later_sync_covers_earlier_writes() {
        // The page cache outlives a process: a sync by the next one makes
        // the first one's writes durable too, a sync of another file does
        // not.
        let (root, _) = run_all(&["append", "sync-later"]);
        assert_eq!(read(&root, "j.log"), b"one;two;three;");
        let (root, report) = run_all(&["append", "other-file"]);
        assert_eq!(read(&root, "j.log"), b"one;");
        assert_eq!(read(&root, "other"), b"o");
        assert_eq!(report.undone, 2);
    }

    #[test]
    fn programs_the_process_starts_are_not_on_the_layer() {
        let (root, report) = run("tool");
        assert_eq!(read(&root, "by-a-tool"), b"x");
        assert_eq!(report.writes, 0);
    }
}
