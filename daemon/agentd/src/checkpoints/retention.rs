//! Retention: the oldest records dropped past `max_age_days` and
//! `max_bytes`, then the contents nothing refers to.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::{Checkpoints, FileState, MARK, RECORD, Record, id_of, io_err, prefix};

impl Checkpoints {
    /// Forgets a deleted conversation's records and marks (not flushed).
    /// The contents they name are shared, by hash, with every other
    /// record (a fork's parent's, a conversation in the same files): the
    /// next [`Checkpoints::prune`] removes those no record refers to any
    /// more. Idempotent. Returns how many records went.
    pub(crate) fn forget(&self, conversation_id: &str) -> Result<usize, crate::store::StoreError> {
        let _guard = self.locked();
        let mut records = 0;
        for kind in [RECORD, MARK] {
            let keys: Vec<sled::IVec> = self
                .tree
                .scan_prefix(prefix(kind, conversation_id))
                .keys()
                .collect::<Result<_, _>>()?;
            if kind == RECORD {
                records = keys.len();
            }
            for k in keys {
                self.tree.remove(k)?;
            }
        }
        Ok(records)
    }

    /// Retention: drops records older than `max_age_days`, then the oldest
    /// while the stored contents exceed `max_bytes`, then every content no
    /// record refers to. Returns the records dropped.
    ///
    /// Unreferenced contents stay when no record at all was found: an empty
    /// record tree next to stored contents is a store that was replaced
    /// (moved aside, or a fresh one), not contents nobody needs.
    pub(crate) fn prune(&self, now_ms: i64) -> Result<usize, String> {
        let _guard = self.locked();
        let max_age_ms =
            i64::try_from(self.config.max_age_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
        let mut records = Vec::new();
        for item in self.tree.scan_prefix([RECORD]) {
            let (k, v) = item.map_err(io_err)?;
            match serde_json::from_slice::<Record>(&v) {
                Ok(r) => records.push((k, r)),
                Err(_) => {
                    self.tree.remove(&k).map_err(io_err)?;
                }
            }
        }
        let any_records = !records.is_empty();
        records.sort_by_key(|(k, r)| (r.at_ms, id_of(k)));
        let sizes = |r: &Record| -> Vec<String> {
            r.files
                .iter()
                .filter_map(|f| match &f.before {
                    FileState::Content { sha256 } => Some(sha256.clone()),
                    FileState::Absent => None,
                })
                .collect()
        };
        let mut dropped = 0;
        let mut kept: Vec<(sled::IVec, Record)> = Vec::new();
        for (k, r) in records {
            if now_ms.saturating_sub(r.at_ms) > max_age_ms {
                self.tree.remove(&k).map_err(io_err)?;
                dropped += 1;
            } else {
                kept.push((k, r));
            }
        }
        // Bytes each content takes, counted once.
        let mut total = 0u64;
        let mut size_of = std::collections::HashMap::new();
        for (_, r) in &kept {
            for sha in sizes(r) {
                if let std::collections::hash_map::Entry::Vacant(e) = size_of.entry(sha.clone()) {
                    let len = self.blobs.get(&sha).map(|b| b.len() as u64).unwrap_or(0);
                    total += len;
                    e.insert(len);
                }
            }
        }
        let mut first = 0;
        while total > self.config.max_bytes && first < kept.len() {
            let (k, r) = &kept[first];
            self.tree.remove(k).map_err(io_err)?;
            dropped += 1;
            first += 1;
            let still: HashSet<String> = kept[first..].iter().flat_map(|(_, r)| sizes(r)).collect();
            for sha in sizes(r) {
                if !still.contains(&sha)
                    && let Some(len) = size_of.remove(&sha)
                {
                    total = total.saturating_sub(len);
                }
            }
        }
        let mut keep: HashSet<String> = kept[first..].iter().flat_map(|(_, r)| sizes(r)).collect();
        // The watched work trees' histories name contents a later call's
        // record will refer to; a tree busy now is swept next time.
        let live = self.live_contents();
        if let Some(live) = &live {
            keep.extend(live.iter().cloned());
        }
        // Contents younger than a few minutes may belong to a call that is
        // still running, whose record does not name them yet.
        if self.sweep && any_records && live.is_some() {
            self.blobs.sweep(&keep, self.sweep_grace).map_err(io_err)?;
        }
        self.bytes.store(total, Ordering::Relaxed);
        Ok(dropped)
    }

    /// Every content the watched work trees' histories refer to; None
    /// when one of them is in use.
    fn live_contents(&self) -> Option<HashSet<String>> {
        let trees = self.trees.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = HashSet::new();
        for tree in trees.values() {
            let tree = tree.try_lock().ok()?;
            out.extend(tree.contents().map(str::to_string));
        }
        Some(out)
    }
}

/// Unix ms now, for retention (the only clock read here; retention is no
/// part of a conversation's state).
pub(super) fn record_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
