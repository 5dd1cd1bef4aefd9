//! The store's write-ahead journal: what makes a flush cheap.
//!
//! sled 0.34 makes writes durable only through its flush, which hands the
//! log buffer to sled's I/O thread pool (whose queue wakes every one of its
//! seven idle threads) and waits for it to `pwrite` and `sync_file_range`.
//! Measured on the bash round (issue 20, BENCHMARKS.md), that was about
//! 0.65 ms of CPU and 0.7 ms of wall time per round, two flushes a round.
//!
//! So every change the store makes goes to sled (in memory, where readers
//! see it at once) *and*, under the same lock and in the same order, into
//! this journal's pending buffer. A flush is one `write(2)` of the pending
//! changes to the current journal file, on the caller's thread: the page
//! cache keeps it through a kill -9 (`[store] sync = "kill"`); with
//! `sync = "power"` the file is also `fdatasync`ed before the flush
//! returns. sled itself becomes durable in the background (its own timed
//! flush, and a flush at each rotation); a journal file is removed only
//! after a sled flush that began after its last change was applied.
//!
//! Opening the store replays every journal file left, oldest first, over
//! what sled recovered, then flushes sled and removes them. Replaying is
//! idempotent: each record is a key's whole new value (or its removal),
//! in the order sled applied them, and sled recovers a prefix of that same
//! order, so replaying changes sled already has ends in the same state.
//!
//! Why `kill` is the default: a killed or crashed daemon happens on a
//! workstation every day, while `power` costs an `fdatasync` per flush
//! (0.3–5 ms on a shared disk, a third to two thirds of the append
//! throughput, BENCHMARKS.md) for a failure batteries and journaling file
//! systems already make rare. Either way the store comes back consistent:
//! sled and the journal recover as prefixes, so a power cut under `kill`
//! loses at most the last flushes, never the store's agreement.
//!
//! A record is `len: u32 LE ‖ crc32(payload): u32 LE ‖ payload`, the
//! payload `tree: u8 ‖ op: u8 (0 insert, 1 remove) ‖ key len: u32 LE ‖ key
//! ‖ value`. A torn record (a kill in the middle of a write) ends a file's
//! replay; it was never acknowledged.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

use sled::IVec;

use super::{StoreError, Sync};

/// A journal file is rotated (and sled flushed in the background, after
/// which the old file goes) once it holds this much.
const ROTATE_BYTES: u64 = 8 << 20;

/// The pending buffer keeps up to this much room between flushes.
const KEEP_CAPACITY: usize = 256 << 10;

const INSERT: u8 = 0;
const REMOVE: u8 = 1;
const HEADER: usize = 8;

/// The journal shared by every [`Tree`] of one store.
pub(super) struct Journal {
    dir: PathBuf,
    sync: Sync,
    /// Changes applied to sled and not yet written, in sled's order: every
    /// tree change takes this lock around its sled write.
    pending: Mutex<Vec<u8>>,
    /// The file; held by one flush at a time, across its write (and sync),
    /// so tree changes never wait for I/O.
    file: Mutex<FileState>,
    /// Rotations for the checkpoint thread: flush sled, then remove the
    /// files numbered up to this one.
    rotated: mpsc::Sender<(sled::Db, u64)>,
    db: sled::Db,
    /// [`ROTATE_BYTES`], smaller in tests.
    rotate_bytes: u64,
}

struct FileState {
    file: File,
    number: u64,
    /// Bytes written to `file` (where a failed write is cut back to).
    written: u64,
}

impl Journal {
    /// Replays the journal files in `dir` into `trees` (indexed by the
    /// tree byte of each record), makes sled durable, removes them and
    /// starts a new file. Returns the journal and how many changes were
    /// replayed.
    pub(super) fn open(
        dir: &Path,
        db: &sled::Db,
        trees: &[sled::Tree],
        sync: Sync,
        power_log: Option<File>,
    ) -> Result<(Arc<Journal>, u64), StoreError> {
        let fail = |what: &str, path: &Path, e: std::io::Error| {
            StoreError::Flush(format!("cannot {what} {}: {e}", path.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| fail("create", dir, e))?;
        let mut files = journal_files(dir).map_err(|e| fail("list", dir, e))?;
        files.sort_unstable();
        let mut replayed = 0u64;
        for (number, path) in &files {
            let bytes = std::fs::read(path).map_err(|e| fail("read", path, e))?;
            let (changes, used) = replay(&bytes, trees).map_err(|message| StoreError::Corrupt {
                key: path.display().to_string(),
                message,
            })?;
            if used < bytes.len() {
                tracing::warn!(
                    "journal {number}: {} bytes after the last whole change were left out (a write \
                     cut short by a crash)",
                    bytes.len() - used
                );
            }
            replayed += changes;
        }
        if !files.is_empty() {
            db.flush()?;
            if let Some(log) = &power_log {
                log.sync_data().map_err(|e| fail("sync", dir, e))?;
            }
            for (_, path) in &files {
                std::fs::remove_file(path).map_err(|e| fail("remove", path, e))?;
            }
        }
        let number = files.last().map_or(1, |(n, _)| n + 1);
        let file = create(dir, number, sync)?;
        let (rotated, checkpoints) = mpsc::channel();
        let checkpoint_dir = dir.to_path_buf();
        std::thread::Builder::new()
            .name("agentd-journal".to_string())
            .spawn(move || checkpoint_thread(&checkpoints, &checkpoint_dir, power_log.as_ref()))
            .map_err(|e| StoreError::Flush(format!("cannot start the journal thread: {e}")))?;
        let journal = Journal {
            dir: dir.to_path_buf(),
            sync,
            pending: Mutex::new(Vec::new()),
            file: Mutex::new(FileState {
                file,
                number,
                written: 0,
            }),
            rotated,
            db: db.clone(),
            rotate_bytes: ROTATE_BYTES,
        };
        Ok((Arc::new(journal), replayed))
    }

    /// What a flush must survive.
    pub(super) fn sync(&self) -> Sync {
        self.sync
    }

    fn pending(&self) -> MutexGuard<'_, Vec<u8>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the pending changes (and syncs them with `sync = "power"`).
    /// Blocking: a `write(2)` of a few kilobytes, or an `fdatasync`.
    pub(super) fn write_pending(&self) -> Result<(), StoreError> {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // Whatever an earlier flush took was written (and synced) before
        // it let go of the file.
        let mut taken = std::mem::take(&mut *self.pending());
        if taken.is_empty() {
            return Ok(());
        }
        let result = file.file.write_all(&taken).and_then(|()| match self.sync {
            Sync::Power => file.file.sync_data(),
            Sync::Kill => Ok(()),
        });
        if let Err(e) = result {
            // Whatever part was written is cut off, so the next write does
            // not follow a torn record, and the changes go back in front of
            // those made since (sled has them all; the journal must have
            // them in the same order).
            if let Err(cut) = file.file.set_len(file.written) {
                tracing::error!("cannot cut a failed journal write back: {cut}");
            }
            let mut pending = self.pending();
            taken.extend_from_slice(&pending);
            *pending = taken;
            return Err(StoreError::Flush(format!(
                "writing the journal in {} failed: {e}",
                self.dir.display()
            )));
        }
        file.written += taken.len() as u64;
        if taken.capacity() <= KEEP_CAPACITY {
            // The buffer is used again (one that an image grew is dropped).
            let mut pending = self.pending();
            if pending.is_empty() {
                taken.clear();
                *pending = taken;
            }
        }
        if file.written >= self.rotate_bytes {
            self.rotate(&mut file)?;
        }
        Ok(())
    }

    /// Starts the next file; the checkpoint thread flushes sled and then
    /// removes this one.
    fn rotate(&self, state: &mut FileState) -> Result<(), StoreError> {
        let file = create(&self.dir, state.number + 1, self.sync)?;
        let old = state.number;
        state.file = file;
        state.number += 1;
        state.written = 0;
        let _ = self.rotated.send((self.db.clone(), old));
        Ok(())
    }

    fn record(pending: &mut Vec<u8>, tree: u8, op: u8, key: &[u8], value: &[u8]) {
        let payload_len = 2 + 4 + key.len() + value.len();
        pending.reserve(HEADER + payload_len);
        let start = pending.len();
        pending.extend_from_slice(&(payload_len as u32).to_le_bytes());
        pending.extend_from_slice(&[0; 4]);
        pending.push(tree);
        pending.push(op);
        pending.extend_from_slice(&(key.len() as u32).to_le_bytes());
        pending.extend_from_slice(key);
        pending.extend_from_slice(value);
        let crc = crc32fast::hash(&pending[start + HEADER..]);
        pending[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    }
}

/// A sled tree whose changes go through the journal. Reads are sled's.
#[derive(Clone)]
pub(crate) struct Tree {
    tree: sled::Tree,
    id: u8,
    journal: Arc<Journal>,
}

impl Tree {
    pub(super) fn new(tree: sled::Tree, id: u8, journal: Arc<Journal>) -> Tree {
        Tree { tree, id, journal }
    }

    pub(crate) fn insert<K: AsRef<[u8]>, V: Into<IVec>>(
        &self,
        key: K,
        value: V,
    ) -> sled::Result<Option<IVec>> {
        let (key, value) = (key.as_ref(), value.into());
        let mut pending = self.journal.pending();
        let old = self.tree.insert(key, value.clone())?;
        Journal::record(&mut pending, self.id, INSERT, key, &value);
        Ok(old)
    }

    pub(crate) fn remove<K: AsRef<[u8]>>(&self, key: K) -> sled::Result<Option<IVec>> {
        let key = key.as_ref();
        let mut pending = self.journal.pending();
        let old = self.tree.remove(key)?;
        if old.is_some() {
            Journal::record(&mut pending, self.id, REMOVE, key, &[]);
        }
        Ok(old)
    }

    /// Reads the key's value, sets (or removes) `f` of it, returns it.
    pub(crate) fn update_and_fetch<K: AsRef<[u8]>, F: FnMut(Option<&[u8]>) -> Option<Vec<u8>>>(
        &self,
        key: K,
        mut f: F,
    ) -> sled::Result<Option<IVec>> {
        let key = key.as_ref();
        let mut pending = self.journal.pending();
        let old = self.tree.get(key)?;
        match f(old.as_deref()) {
            Some(new) => {
                let new = IVec::from(new);
                self.tree.insert(key, new.clone())?;
                Journal::record(&mut pending, self.id, INSERT, key, &new);
                Ok(Some(new))
            }
            None => {
                if self.tree.remove(key)?.is_some() {
                    Journal::record(&mut pending, self.id, REMOVE, key, &[]);
                }
                Ok(None)
            }
        }
    }

    /// Removes every key (through the journal, one by one).
    #[cfg(test)]
    pub(crate) fn clear(&self) -> sled::Result<()> {
        for key in self.tree.iter().keys() {
            self.remove(key?)?;
        }
        Ok(())
    }

    pub(crate) fn get<K: AsRef<[u8]>>(&self, key: K) -> sled::Result<Option<IVec>> {
        self.tree.get(key)
    }

    pub(crate) fn contains_key<K: AsRef<[u8]>>(&self, key: K) -> sled::Result<bool> {
        self.tree.contains_key(key)
    }

    pub(crate) fn iter(&self) -> sled::Iter {
        self.tree.iter()
    }

    pub(crate) fn range<K: AsRef<[u8]>, R: std::ops::RangeBounds<K>>(
        &self,
        range: R,
    ) -> sled::Iter {
        self.tree.range(range)
    }

    pub(crate) fn scan_prefix<P: AsRef<[u8]>>(&self, prefix: P) -> sled::Iter {
        self.tree.scan_prefix(prefix)
    }

    pub(crate) fn len(&self) -> usize {
        self.tree.len()
    }
}

/// Applies the whole records of `bytes`: how many, and how many bytes
/// they took (the rest is a torn tail).
fn replay(bytes: &[u8], trees: &[sled::Tree]) -> Result<(u64, usize), String> {
    let mut at = 0;
    let mut changes = 0;
    while let Some(header) = bytes.get(at..at + HEADER) {
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        if crc32fast::hash(payload) != crc || payload.len() < 6 {
            break;
        }
        let (tree, op) = (payload[0], payload[1]);
        let key_len = u32::from_le_bytes([payload[2], payload[3], payload[4], payload[5]]) as usize;
        let Some(key) = payload.get(6..6 + key_len) else {
            return Err(format!(
                "a change at byte {at} has a key longer than itself"
            ));
        };
        let value = &payload[6 + key_len..];
        let tree = trees
            .get(usize::from(tree))
            .ok_or_else(|| format!("a change at byte {at} names tree {tree}, which is unknown"))?;
        let applied = match op {
            INSERT => tree.insert(key, value).map(drop),
            REMOVE => tree.remove(key).map(drop),
            other => return Err(format!("a change at byte {at} has unknown kind {other}")),
        };
        applied.map_err(|e| format!("replaying a change at byte {at}: {e}"))?;
        changes += 1;
        at += HEADER + len;
    }
    Ok((changes, at))
}

/// The journal files in `dir`: `<number>.log`.
fn journal_files(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number {
            out.push((number, path));
        }
    }
    Ok(out)
}

fn file_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:016}.log"))
}

fn create(dir: &Path, number: u64, sync: Sync) -> Result<File, StoreError> {
    let path = file_path(dir, number);
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| StoreError::Flush(format!("cannot create {}: {e}", path.display())))?;
    if sync == Sync::Power {
        // The new name must survive a power cut too.
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StoreError::Flush(format!("cannot sync {}: {e}", dir.display())))?;
    }
    Ok(file)
}

/// Flushes sled after each rotation, then removes the files it covers.
fn checkpoint_thread(rx: &mpsc::Receiver<(sled::Db, u64)>, dir: &Path, power_log: Option<&File>) {
    while let Ok((db, mut upto)) = rx.recv() {
        for (_, later) in rx.try_iter() {
            upto = upto.max(later);
        }
        let durable =
            db.flush()
                .map(drop)
                .map_err(|e| e.to_string())
                .and_then(|()| match power_log {
                    Some(log) => log.sync_data().map_err(|e| e.to_string()),
                    None => Ok(()),
                });
        drop(db);
        if let Err(e) = durable {
            // The files stay; the next rotation (or the next start) tries
            // again.
            tracing::error!("flushing sled after a journal rotation failed: {e}");
            continue;
        }
        match journal_files(dir) {
            Ok(files) => {
                for (number, path) in files {
                    if number <= upto
                        && let Err(e) = std::fs::remove_file(&path)
                    {
                        tracing::warn!("cannot remove {}: {e}", path.display());
                    }
                }
            }
            Err(e) => tracing::warn!("cannot list {}: {e}", dir.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Opened {
        db: sled::Db,
        journal: Arc<Journal>,
        trees: Vec<Tree>,
        replayed: u64,
    }

    fn open(dir: &Path) -> Opened {
        let db = sled::Config::new().path(dir.join("db")).open().unwrap();
        let raw: Vec<sled::Tree> = ["a", "b"]
            .iter()
            .map(|n| db.open_tree(n).unwrap())
            .collect();
        let (journal, replayed) =
            Journal::open(&dir.join("journal"), &db, &raw, Sync::Kill, None).unwrap();
        let trees = raw
            .into_iter()
            .enumerate()
            .map(|(i, t)| Tree::new(t, i as u8, journal.clone()))
            .collect();
        Opened {
            db,
            journal,
            trees,
            replayed,
        }
    }

    fn copy_journal(from: &Path, to: &Path) {
        std::fs::create_dir_all(to.join("journal")).unwrap();
        for (_, path) in journal_files(&from.join("journal")).unwrap() {
            std::fs::copy(&path, to.join("journal").join(path.file_name().unwrap())).unwrap();
        }
    }

    fn value(tree: &Tree, key: &str) -> Option<String> {
        tree.get(key)
            .unwrap()
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
    }

    #[test]
    fn what_a_flush_wrote_is_replayed_into_an_empty_database_in_order() {
        let first = tempfile::tempdir().unwrap();
        let a = open(first.path());
        a.trees[0].insert("k", "one").unwrap();
        a.trees[0].insert("k", "two").unwrap();
        a.trees[1].insert("gone", "x").unwrap();
        a.trees[1].remove("gone").unwrap();
        a.trees[1].insert("kept", vec![7u8; 5000]).unwrap();
        a.trees[0]
            .update_and_fetch("n", |old| {
                assert!(old.is_none());
                Some(b"3".to_vec())
            })
            .unwrap();
        a.journal.write_pending().unwrap();
        // Not flushed: not in the journal, so lost with the process.
        a.trees[0].insert("late", "x").unwrap();

        // What a kill -9 leaves, replayed over a database that has none of it.
        let second = tempfile::tempdir().unwrap();
        copy_journal(first.path(), second.path());
        let b = open(second.path());
        assert_eq!(b.replayed, 6);
        assert_eq!(value(&b.trees[0], "k").as_deref(), Some("two"));
        assert_eq!(value(&b.trees[0], "n").as_deref(), Some("3"));
        assert_eq!(value(&b.trees[0], "late"), None);
        assert_eq!(value(&b.trees[1], "gone"), None);
        assert_eq!(b.trees[1].get("kept").unwrap().unwrap().len(), 5000);
        // Replayed, made durable in sled, and the files removed.
        assert_eq!(
            journal_files(&second.path().join("journal")).unwrap().len(),
            1
        );
        drop(b);
        let c = open(second.path());
        assert_eq!(c.replayed, 0);
        assert_eq!(value(&c.trees[0], "k").as_deref(), Some("two"));
    }

    #[test]
    fn replaying_over_a_database_that_has_some_of_it_ends_in_the_same_state() {
        let dir = tempfile::tempdir().unwrap();
        let a = open(dir.path());
        a.trees[0].insert("k", "one").unwrap();
        a.trees[0].insert("x", "1").unwrap();
        a.journal.write_pending().unwrap();
        // sled has these; the journal has them too, and then more.
        a.db.flush().unwrap();
        a.trees[0].insert("k", "two").unwrap();
        a.trees[0].remove("x").unwrap();
        a.journal.write_pending().unwrap();
        let snapshot = tempfile::tempdir().unwrap();
        copy_journal(dir.path(), snapshot.path());
        drop(a);
        // The database as sled left it, under the journal as it was.
        std::fs::remove_dir_all(dir.path().join("journal")).unwrap();
        copy_journal(snapshot.path(), dir.path());
        let b = open(dir.path());
        assert_eq!(b.replayed, 4);
        assert_eq!(value(&b.trees[0], "k").as_deref(), Some("two"));
        assert_eq!(value(&b.trees[0], "x"), None);
    }

    #[test]
    fn a_torn_last_record_is_left_out_and_what_came_before_is_kept() {
        let first = tempfile::tempdir().unwrap();
        let a = open(first.path());
        a.trees[0].insert("whole", "yes").unwrap();
        a.journal.write_pending().unwrap();
        a.trees[0].insert("torn", "no").unwrap();
        let torn = {
            let pending = a.journal.pending();
            pending[..pending.len() - 3].to_vec()
        };
        let second = tempfile::tempdir().unwrap();
        copy_journal(first.path(), second.path());
        let (_, path) = journal_files(&second.path().join("journal"))
            .unwrap()
            .pop()
            .unwrap();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&torn).unwrap();
        // A record whose bytes are all there but wrong is torn too.
        let mut bad = torn.clone();
        bad.extend_from_slice(&[1, 2, 3]);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let third = tempfile::tempdir().unwrap();
        copy_journal(first.path(), third.path());
        let (_, path3) = journal_files(&third.path().join("journal"))
            .unwrap()
            .pop()
            .unwrap();
        OpenOptions::new()
            .append(true)
            .open(&path3)
            .unwrap()
            .write_all(&bad)
            .unwrap();
        for dir in [second.path(), third.path()] {
            let b = open(dir);
            assert_eq!(b.replayed, 1);
            assert_eq!(value(&b.trees[0], "whole").as_deref(), Some("yes"));
            assert_eq!(value(&b.trees[0], "torn"), None);
        }
    }

    #[test]
    fn a_full_file_is_rotated_and_removed_once_sled_has_its_changes() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("db"))
            .open()
            .unwrap();
        let raw = vec![db.open_tree("a").unwrap()];
        let (journal, _) =
            Journal::open(&dir.path().join("journal"), &db, &raw, Sync::Kill, None).unwrap();
        let journal = Arc::new(Journal {
            rotate_bytes: 1000,
            ..Arc::into_inner(journal).unwrap()
        });
        let tree = Tree::new(raw[0].clone(), 0, journal.clone());
        for i in 0..30 {
            tree.insert(format!("k{i}"), vec![b'v'; 100]).unwrap();
            journal.write_pending().unwrap();
        }
        let files = || journal_files(&dir.path().join("journal")).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while files().len() > 1 {
            assert!(std::time::Instant::now() < deadline, "{:?}", files());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // The one file left is the newest, and everything is in the tree.
        assert!(files()[0].0 >= 3, "{:?}", files());
        assert_eq!(tree.len(), 30);
    }

    #[test]
    fn a_change_naming_an_unknown_tree_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        Journal::record(&mut bytes, 9, INSERT, b"k", b"v");
        std::fs::create_dir_all(dir.path().join("journal")).unwrap();
        std::fs::write(file_path(&dir.path().join("journal"), 1), &bytes).unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("db"))
            .open()
            .unwrap();
        let raw = vec![db.open_tree("a").unwrap()];
        let Err(e) = Journal::open(&dir.path().join("journal"), &db, &raw, Sync::Kill, None) else {
            panic!("opened");
        };
        assert!(e.to_string().contains("unknown"), "{e}");
    }
}
